"""The token bucket behind every WebSocket message-rate limit, on a clock the test moves."""

from __future__ import annotations

from voiceagent.transport.ratelimit import MessageRateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_compliant_client_read_late_in_one_go_is_allowed():
    """50 messages a second against a limit of 100; the server reads nothing for 4 s and then
    the whole backlog at once, and goes on: every message is allowed."""
    clock = Clock()
    limiter = MessageRateLimiter(100, burst_s=5, clock=clock)
    for _ in range(50):  # one second in step
        clock.now += 0.02
        assert limiter.allow()
    clock.now += 4.0  # the stall: 200 messages arrive unread
    assert all(limiter.allow() for _ in range(200))
    for _ in range(500):  # ten more seconds in step
        clock.now += 0.02
        assert limiter.allow()


def test_a_flood_is_refused_once_the_bucket_is_empty():
    clock = Clock()
    limiter = MessageRateLimiter(100, burst_s=5, clock=clock)
    allowed = 0
    while limiter.allow():  # 1000 messages a second
        allowed += 1
        clock.now += 0.001
    assert 500 <= allowed <= 560  # the bucket (5 s of the rate) plus what refilled meanwhile
    clock.now += 0.05
    assert limiter.allow()  # the rate refills it: 5 more messages for 50 ms
    assert sum(limiter.allow() for _ in range(10)) == 4


def test_the_bucket_holds_at_least_one_second_of_the_rate_and_one_message():
    assert MessageRateLimiter(20, burst_s=1).capacity == 20
    assert MessageRateLimiter(0.5, burst_s=1).capacity == 1
