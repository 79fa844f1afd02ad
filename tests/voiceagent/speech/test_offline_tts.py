"""EspeakTTS: voice/rate mapping, WAV stream parsing, streaming, injection safety, slots."""

from __future__ import annotations

import asyncio
import os
import stat
import struct
import sys
import time

import numpy as np
import pytest

from voiceagent.conversation.providers import ProviderError
from voiceagent.conversation.specs import VoiceSpec
from voiceagent.speech.audio import rms_dbfs
from voiceagent.speech.offline_tts import (
    EspeakTTS,
    WavStreamParser,
    espeak_rate,
    espeak_voice,
    sanitize_text,
)

LONG_TEXT = (
    "Thank you for calling. Your account balance is one thousand two hundred dollars, and your "
    "next payment of eighty dollars is due on the fifteenth of next month. Is there anything else "
    "I can help you with today?"
)


def _wav_header(rate: int = 22050, extra_chunk: bool = False) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
    if extra_chunk:
        body += b"LIST" + struct.pack("<I", 5) + b"abcde" + b"\0"  # odd size is padded
    body += b"data" + struct.pack("<I", 0x7FFFF000)
    return b"RIFF" + struct.pack("<I", 0x7FFFF024) + body


async def _collect(tts: EspeakTTS, text: str, voice: VoiceSpec | None = None) -> list[bytes]:
    return [chunk async for chunk in tts.synthesize(text, voice or VoiceSpec())]


# --- pure parts ---------------------------------------------------------------------------------
def test_voice_mapping():
    assert espeak_voice("en-US-AvaMultilingualNeural") == "en-us"
    assert espeak_voice("en-GB-SoniaNeural") == "en-gb"
    assert espeak_voice("de-DE-KatjaNeural") == "de-de"
    assert espeak_voice("fr") == "fr"
    assert espeak_voice(None) == "en-us"
    assert espeak_voice("") == "en-us"
    assert espeak_voice("Ava") == "en-us"
    assert espeak_voice("-w /etc/passwd") == "en-us"
    known = frozenset({"en-us", "en-gb", "de", "fr-fr"})
    assert espeak_voice("fr-CA-SylvieNeural", known) == "fr-ca"  # espeak resolves the region itself
    assert espeak_voice("xx-YY-Nobody", known) == "en-us"


def test_rate_mapping():
    assert espeak_rate(None) == 175
    assert espeak_rate("+0%") == 175
    assert espeak_rate("+3%") == 180
    assert espeak_rate("-10%") == 158
    assert espeak_rate("fast") > 175 > espeak_rate("slow")
    assert espeak_rate("+900%") == 450
    assert espeak_rate("-99%") == 80
    assert espeak_rate("bogus") == 175


def test_sanitize_text():
    assert sanitize_text("  hello\x00 wor\x1bld\x07 \x85 ") == "hello  wor ld"
    assert sanitize_text("line one\nline two\ttab") == "line one\nline two\ttab"
    assert sanitize_text("") == ""


def test_command_never_carries_the_text():
    tts = EspeakTTS(default_voice=VoiceSpec("en-US-AvaMultilingualNeural", "chat", "+3%"))
    argv = tts.command(None)
    assert argv[:3] == ["espeak-ng", "--stdout", "--stdin"]
    assert argv[argv.index("-v") + 1] == "en-us"
    assert argv[argv.index("-s") + 1] == "180"
    assert "-m" not in argv  # SSML is not interpreted
    argv = tts.command(VoiceSpec("de-DE-KatjaNeural", None, "-10%"))
    assert argv[argv.index("-v") + 1] == "de-de"
    assert argv[argv.index("-s") + 1] == "158"
    with pytest.raises(ValueError):
        EspeakTTS(sample_rate=22050)


@pytest.mark.parametrize("step", [1, 3, 7, 64, 10_000])
def test_wav_parser_incremental(step):
    pcm = np.arange(-500, 501, dtype=np.int16).tobytes()
    stream = _wav_header(extra_chunk=True) + pcm
    parser = WavStreamParser()
    out = bytearray()
    for i in range(0, len(stream), step):
        piece = parser.feed(stream[i : i + step])
        assert len(piece) % 2 == 0
        out += piece
    assert parser.sample_rate == 22050
    assert bytes(out) == pcm


def test_wav_parser_rejects_other_formats():
    with pytest.raises(ProviderError, match="WAV"):
        WavStreamParser().feed(b"this is not a wav file at all")
    stereo = _wav_header().replace(struct.pack("<HH", 1, 1), struct.pack("<HH", 1, 2), 1)
    with pytest.raises(ProviderError, match="2 ch"):
        WavStreamParser().feed(stereo)


# --- real espeak-ng ------------------------------------------------------------------------------
@pytest.mark.slow
async def test_streams_long_text_in_100ms_chunks():
    tts = EspeakTTS(pool_size=2)
    assert tts.sample_rate == 24000
    assert await tts.warm() == 2
    chunks = await _collect(tts, LONG_TEXT)
    assert len(chunks) > 50  # ~10 s of audio, 100 ms each
    assert all(len(c) == 4800 for c in chunks[:-1])
    assert 0 < len(chunks[-1]) <= 4800 and len(chunks[-1]) % 2 == 0
    audio = np.frombuffer(b"".join(chunks), dtype=np.int16)
    assert 5.0 < audio.size / 24000 < 20.0
    assert rms_dbfs(audio) > -30  # real speech, not silence
    assert tts.pool.metrics()["in_use"] == 0
    assert await _collect(tts, "  \x00 ") == []
    await tts.close()


@pytest.mark.slow
async def test_first_chunk_arrives_while_process_still_runs(tmp_path):
    """A stand-in espeak writes half a second, then blocks until the test has seen audio."""
    release = tmp_path / "release"
    fake = tmp_path / "fake-espeak"
    header = _wav_header()
    fake.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time, math, struct\n"
        "sys.stdin.read()\n"
        f"sys.stdout.buffer.write({header!r})\n"
        "tone = b''.join(struct.pack('<h', int(8000 * math.sin(i / 5))) for i in range(11025))\n"
        "sys.stdout.buffer.write(tone); sys.stdout.flush()\n"
        "deadline = time.time() + 10\n"
        f"while not os.path.exists({str(release)!r}) and time.time() < deadline:\n"
        "    time.sleep(0.01)\n"
        "sys.stdout.buffer.write(tone); sys.stdout.flush()\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    tts = EspeakTTS(binary=str(fake))
    gen = tts.synthesize("hello", VoiceSpec())
    first = await asyncio.wait_for(gen.__anext__(), 5.0)  # the fake is still blocked here
    assert len(first) == 4800
    assert not release.exists()
    release.write_text("go")
    rest = [c async for c in gen]
    total = (len(first) + sum(len(c) for c in rest)) / 2 / 24000
    assert 0.95 < total < 1.05  # 2 x 0.5 s at 22.05 kHz, resampled to 24 kHz


@pytest.mark.slow
async def test_hostile_text_is_spoken_not_executed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "pwned.wav"
    hostile = [
        f"-w {target}",
        f"--stdout -w {target} --compile=en",
        f"-- -w {target}",
        '<speak><audio src="file:///etc/passwd"/><break time="10s"/></speak>',
        "\x01\x02 control \x1b[31m characters",
        "$(touch pwned) `touch pwned2` ; rm -rf ./ && echo pwned > pwned3",
    ]
    tts = EspeakTTS()
    for text in hostile:
        chunks = await _collect(tts, text)
        assert chunks, text
        assert rms_dbfs(b"".join(chunks)) > -40, text
    assert list(tmp_path.iterdir()) == []
    await tts.close()


@pytest.mark.slow
async def test_slots_at_the_maximum_then_released_on_early_stop():
    tts = EspeakTTS(pool_size=1, acquire_timeout=0.3, max_size=1)
    tts.lines.max_chars = 0  # unshared: a shared line is synthesised to its end whoever reads it
    first = tts.synthesize(LONG_TEXT, VoiceSpec())
    assert await first.__anext__()
    began = time.monotonic()
    with pytest.raises(ProviderError, match="busy"):
        await _collect(tts, "second caller")
    assert 0.25 < time.monotonic() - began < 3.0
    await first.aclose()  # barge-in: the process is killed and the slot comes back
    assert tts.pool.metrics()["in_use"] == 0
    assert await _collect(tts, "third caller")
    await tts.close()


async def test_missing_binary_is_a_clear_provider_error(tmp_path):
    tts = EspeakTTS(binary=str(tmp_path / "no-such-espeak"))
    with pytest.raises(ProviderError, match="not found.*install espeak-ng"):
        await _collect(tts, "hello")
    with pytest.raises(ProviderError, match="not found"):
        await tts.warm()
    assert tts.pool.metrics()["in_use"] == 0


@pytest.mark.slow
async def test_failing_binary_reports_its_error(tmp_path):
    bad = tmp_path / "bad-espeak"
    bad.write_text("#!/bin/sh\necho 'Error: The specified espeak-ng voice does not exist.' >&2\nexit 1\n")
    bad.chmod(bad.stat().st_mode | stat.S_IXUSR)
    tts = EspeakTTS(binary=str(bad))
    with pytest.raises(ProviderError, match="voice does not exist"):
        await _collect(tts, "hello")
    assert os.path.exists(bad)
