"""A reply is in the store from the moment the caller has it (text and audio sent), heard "unknown",
so that a process that dies while it plays loses nothing; once it has played it is marked "played",
and a barge-in corrects that same row to the words heard ("cut"), never a second row."""

from __future__ import annotations

import asyncio

import pytest
from enginekit import TONE, Harness

from voiceagent.conversation.testing import InstantTTS

LONG = " ".join(f"word{i}" for i in range(60)) + "."


def replies(h: Harness) -> list:
    return [t for t in h.store.turns["s1"] if t.role == "assistant" and t.content.startswith("word0")]


async def test_a_reply_is_stored_when_sent_and_corrected_to_the_words_heard_at_a_barge_in():
    tts = InstantTTS(ms_per_word=50, chunk_ms=50)
    async with Harness(script=[LONG], texts=["tell me a story", "stop"], tts=tts) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: replies(h))
        playing = h.conv.loop_time() < h.conv.playback_end
        [sent] = replies(h)
        assert playing and sent.content == LONG and sent.heard == "unknown" and sent.uid
        assert not [t for t in h.conv.history if t.content.startswith("word0")]  # not yet the model's
        await asyncio.sleep(0.3)  # part of it has played
        h.conv.push_audio(TONE, 16000)  # the caller talks over the agent
        await h.until(lambda h: h.of("StopAudio"))
        h.speak(speech_frames=5)
        await h.idle()
    [cut] = replies(h)
    words = cut.content.rstrip(" …").split()
    assert 2 <= len(words) < 60 and cut.content.endswith("…") and cut.heard == "cut"
    assert cut.uid == sent.uid and cut.at == sent.at  # the same row, where it was said
    assert [t.content for t in h.conv.history if t.content.startswith("word0")] == [cut.content]


async def test_a_reply_that_plays_out_is_marked_played_once():
    tts = InstantTTS(ms_per_word=20, chunk_ms=50)
    async with Harness(script=[LONG], texts=["tell me a story"], tts=tts) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: replies(h) and replies(h)[0].heard == "played", timeout=10)
        await h.idle()
    [played] = replies(h)
    assert played.content == LONG and played.latency_ms is not None


@pytest.fixture(scope="module")
def peer():
    from realtime_peer import RealtimePeer
    from test_live import KEY

    with RealtimePeer(api_key=KEY) as server:
        yield server


@pytest.mark.parametrize("kind", ["voicelive", "openai"])
async def test_live_a_reply_is_stored_when_sent_and_corrected_to_the_words_heard(kind, peer):
    """The live pipeline the same way: the response is done (transcript and audio all out) while its
    audio still plays - stored whole, "unknown"; the caller cuts in - that row becomes the words heard."""
    from realtime_peer import Say
    from test_live import LiveHarness, make_client

    peer.reset()
    peer.user_says("tell me a story", "stop")
    peer.push(Say(LONG, chunks=4, audio_ms=4000))
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: replies(h))
        [sent] = replies(h)
        assert h.conv.loop_time() < h.conv.playback_end and sent.content == LONG and sent.heard == "unknown"
        await asyncio.sleep(0.3)
        for _ in range(4):
            h.conv.push_audio(TONE, 16000)
        await h.until(lambda h: h.of("StopAudio"))
        h.speak(speech_frames=5)
        await h.idle()
    [cut] = replies(h)
    assert cut.uid == sent.uid and cut.heard == "cut" and cut.content.endswith("…"), cut
    assert 1 <= len(cut.content.rstrip(" …").split()) < 60
