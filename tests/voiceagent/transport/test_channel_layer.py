"""The channel layer's receive ends when cancelled, even when a cancellation is lost inside it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

import pytest

from voiceagent.transport.channel_layer import RedisChannelLayer, end_cancelled


async def swallows_first_cancellation(ended: list[str]) -> None:
    """As channels-redis' receive when a cancellation is lost in its blocking read: it goes on."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(30)
    try:
        await asyncio.sleep(30)
    finally:
        ended.append("second cancellation delivered")


async def swallows_while(stubborn: list[bool]) -> None:
    while True:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            if not stubborn[0]:
                raise


async def test_a_task_that_loses_a_cancellation_is_cancelled_again_until_it_ends(caplog):
    ended: list[str] = []
    task = asyncio.ensure_future(swallows_first_cancellation(ended))
    await asyncio.sleep(0)
    with caplog.at_level(logging.INFO, "voiceagent.transport.channel_layer"):
        assert await end_cancelled(task, every_s=0.05, for_s=2) is True
    assert task.cancelled() and ended == ["second cancellation delivered"]
    assert any("after 2 cancellations" in r.getMessage() for r in caplog.records)


async def test_a_task_that_never_ends_is_left_after_the_bound_with_a_warning(caplog):
    stubborn = [True]
    task = asyncio.ensure_future(swallows_while(stubborn))
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, "voiceagent.transport.channel_layer"):
        assert await end_cancelled(task, every_s=0.05, for_s=0.3) is False
    assert not task.done()
    assert any("did not end within 0.3 s" in r.getMessage() for r in caplog.records)
    stubborn[0] = False
    task.cancel()
    await asyncio.wait({task}, timeout=1)
    assert task.cancelled()


@pytest.mark.redis
async def test_a_cancelled_receive_ends_and_the_channel_still_gets_later_messages():
    layer = RedisChannelLayer(hosts=["redis://127.0.0.1:6379/0"], prefix=f"cl-{uuid.uuid4().hex[:8]}")
    channels = [await layer.new_channel() for _ in range(4)]
    receivers = [asyncio.ensure_future(layer.receive(c)) for c in channels]
    await asyncio.sleep(0.2)  # one of them holds the process channel's BZPOPMIN
    for receiver in receivers[:3]:
        receiver.cancel()
    done, pending = await asyncio.wait(receivers[:3], timeout=2)
    assert not pending and all(r.cancelled() for r in done)
    await layer.send(channels[3], {"type": "still.here"})
    assert (await asyncio.wait_for(receivers[3], 10))["type"] == "still.here"
    await layer.send(channels[0], {"type": "after.cancel"})
    assert (await asyncio.wait_for(layer.receive(channels[0]), 10))["type"] == "after.cancel"
    await layer.flush()
    await layer.close_pools()


@pytest.mark.redis
async def test_a_consumer_going_away_never_loses_a_message_meant_for_another():
    """Channels cancels a closing consumer's receive. When that receive was the one blocked in the
    process channel's BZPOPMIN, a message Redis had just popped for another consumer of the same
    process went with it (channels-redis moves it to its backup queue only after the pop returns):
    a dashboard missed a relayed event when another dashboard on its worker closed."""
    layer = RedisChannelLayer(hosts=["redis://127.0.0.1:6379/0"], prefix=f"cl-{uuid.uuid4().hex[:8]}")
    lost = 0
    for i in range(20):
        closing, staying = await layer.new_channel(), await layer.new_channel()
        going = asyncio.ensure_future(layer.receive(closing))
        await asyncio.sleep(0.05)  # it blocks in the process channel's BZPOPMIN
        waiting = asyncio.ensure_future(layer.receive(staying))
        await asyncio.sleep(0.05)
        sending = asyncio.ensure_future(layer.send(staying, {"type": "relay.message", "n": i}))
        await asyncio.sleep((i % 5) * 0.0005)
        going.cancel()  # the consumer closes as the message arrives
        await sending
        try:
            assert (await asyncio.wait_for(waiting, 3))["n"] == i
        except TimeoutError:
            lost += 1
        await asyncio.wait({going}, timeout=6)
    assert lost == 0, f"{lost} of 20 messages lost"
    await layer.flush()
    await layer.close_pools()


@pytest.mark.redis
async def test_the_reader_ends_once_no_consumer_receives_and_a_message_waits_meanwhile():
    """The process's reader keeps what arrives for a consumer between two receives, and ends by
    itself (nothing left for shutdown to cancel) once every consumer stopped receiving for the
    layer's ``expiry``."""
    layer = RedisChannelLayer(
        hosts=["redis://127.0.0.1:6379/0"], prefix=f"cl-{uuid.uuid4().hex[:8]}", expiry=1
    )
    channel = await layer.new_channel()
    first = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0.1)
    first.cancel()
    await layer.send(channel, {"type": "between.receives"})
    await asyncio.sleep(0.3)  # filed by the reader while nobody receives
    assert (await asyncio.wait_for(layer.receive(channel), 3))["type"] == "between.receives"

    def readers() -> list[asyncio.Task]:
        return [t for t in asyncio.all_tasks() if t.get_name() == "channel-layer-reader" and not t.done()]

    assert readers()
    async with asyncio.timeout(5):
        while readers():
            await asyncio.sleep(0.1)
    await layer.flush()
    await layer.close_pools()


@pytest.mark.redis
async def test_channels_of_another_prefix_have_their_own_reader():
    layer = RedisChannelLayer(hosts=["redis://127.0.0.1:6379/0"], prefix=f"cl-{uuid.uuid4().hex[:8]}")
    specific, other = await layer.new_channel(), await layer.new_channel(prefix="other")
    receivers = [asyncio.ensure_future(layer.receive(c)) for c in (specific, other)]
    await asyncio.sleep(0.1)
    await layer.send(other, {"type": "to.other"})
    await layer.send(specific, {"type": "to.specific"})
    got = [m["type"] for m in await asyncio.wait_for(asyncio.gather(*receivers), 5)]
    assert got == ["to.specific", "to.other"]
    await layer.flush()
    await layer.close_pools()
