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


def test_what_queued_while_the_server_handled_a_message_is_excused():
    """A conversation's start awaited 12 s under a burst of callers: the client's 600 frames (50 a
    second) queued and are read at once. Without the excuse the bucket (500) closed the client;
    with it every frame passes, and a flood afterwards is still refused."""
    clock = Clock()
    unexcused = MessageRateLimiter(100, burst_s=5, clock=clock)
    limiter = MessageRateLimiter(100, burst_s=5, clock=clock)
    assert limiter.allow() and unexcused.allow()  # the start message
    clock.now += 12.0  # handling it took 12 s
    limiter.excuse(12.0)
    assert not all(unexcused.allow() for _ in range(600))
    assert all(limiter.allow() for _ in range(600))
    for _ in range(500):  # in step again: the bucket refills, the excuse is spent
        clock.now += 0.02
        assert limiter.allow()
    allowed = 0
    while limiter.allow():  # then a flood
        allowed += 1
        clock.now += 0.001
    assert allowed <= 560
