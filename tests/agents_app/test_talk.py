"""``manage.py talk``: typed lines piped in, a WAV file as the caller's speech, and clear refusals.

The piped test runs the command as an operator does (a process of its own, its standard input a
pipe, the service's offline providers); the WAV test runs it in process on the real offline
recogniser (Whisper), with speech made by espeak-ng in a voice that is not the agent's.
"""

from __future__ import annotations

import io
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
import types
import wave
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from voiceagent.llm.rules import RulesChat

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def rules_runtime(fake_runtime):
    fake_runtime.chat = RulesChat()
    return fake_runtime


def _talk(*args: str, stdin: str = "") -> str:
    out = io.StringIO()
    call_command("talk", *args, stdin=io.StringIO(stdin), stdout=out)
    return out.getvalue()


def test_typed_lines_print_the_conversation_and_store_it(rules_runtime):
    from agents_app.models import Session

    out = _talk("--scenario", "banking", stdin="I lost my card\n\n/quit\nnever sent\n")
    lines = out.splitlines()
    assert lines[0].startswith("-- session talk-") and "scenario banking" in lines[0]
    assert "caller: I lost my card" in lines
    assert any(line.startswith("  tool handoff_auth_agent(") for line in lines)
    assert "  handoff concierge -> auth_agent (announced, tool handoff_auth_agent)" in lines
    assert any(line.startswith("auth_agent: ") for line in lines)
    assert any(line.startswith("  timings: speech to text — · first LLM token ") for line in lines)
    assert "never sent" not in out  # /quit ends the input
    session_id = re.search(r"session (talk-[0-9a-f]+)", out).group(1)
    session = Session.objects.get(session_id=session_id)
    assert [t.content for t in session.turns.filter(role="user")] == ["I lost my card"]


def test_agent_option_starts_with_that_agent(rules_runtime):
    out = _talk("--scenario", "banking", "--agent", "FRAUD_AGENT")
    first_reply = next(line for line in out.splitlines() if ": " in line and not line.startswith(("-", " ")))
    assert first_reply.startswith("fraud_agent: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "nope"], "unknown scenario 'nope'"),
        (["--scenario", "banking", "--agent", "assistant"], "agent 'assistant' is not in scenario 'banking'"),
        (["--agent", "nobody"], "no scenario has an agent 'nobody'"),
        (["--wav", "/nonexistent.wav"], "not a readable PCM WAV file"),
        (["--wav", "{slow_wav}"], "unsupported input sample rate 2000 Hz"),
    ],
)
def test_bad_options_exit_2_with_one_line(rules_runtime, tmp_path, args, message):
    slow = tmp_path / "slow.wav"
    with wave.open(str(slow), "wb") as out:  # a rate no recording should have
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(2000)
        out.writeframes(bytes(4000))
    args = [a.replace("{slow_wav}", str(slow)) for a in args]
    with pytest.raises(CommandError, match=re.escape(message)) as caught:
        _talk(*args)
    assert caught.value.returncode == 2


def test_mic_without_a_sound_device_exits_2():
    try:
        import sounddevice

        sounddevice.query_devices(kind="input")
        pytest.skip("this machine has a sound device")
    except Exception:
        pass
    with pytest.raises(CommandError, match="--mic needs a sound device") as caught:
        _talk("--mic")
    assert caught.value.returncode == 2


@pytest.mark.slow
def test_piped_into_its_own_process_exits_0_at_the_end_of_input(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUD_", "OPENAI_", "DJANGO_"))}
    env |= {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "ENVIRONMENT": "development"}
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, cwd=ROOT, check=True, timeout=120)
    done = subprocess.run(
        [*manage, "talk", "--scenario", "banking"],
        input="I lost my card\n",
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "concierge: " in out and "caller: I lost my card" in out
    assert "handoff concierge -> auth_agent (announced" in out and "auth_agent: " in out
    session_id = re.search(r"stored as session (talk-[0-9a-f]+)", out).group(1)
    with sqlite3.connect(tmp_path / "db.sqlite3") as db:
        roles = [
            r
            for (r,) in db.execute(
                "select role from agents_app_historyturn where session_id = ? order by id",
                (session_id,),
            )
        ]
    assert "user" in roles and "assistant" in roles


@pytest.mark.slow
def test_a_wav_file_is_heard_as_the_callers_speech(tmp_path, loaded):
    """espeak-ng at its native 22.05 kHz, resampled by the command; the offline Whisper hears it."""
    from agents_app.models import Session
    from voiceagent.runtime import runtime

    assert runtime.stt is None  # the command starts the real offline providers itself
    wav = tmp_path / "caller.wav"
    subprocess.run(
        ["espeak-ng", "-v", "en-gb+f3", "-s", "150", "-w", str(wav), "I lost my card"], check=True, timeout=30
    )
    out = _talk("--scenario", "banking", "--wav", str(wav))
    heard = next(line for line in out.splitlines() if line.startswith("caller: "))
    assert "card" in heard.lower()
    assert "-- caller.wav (" in out and "handoff concierge -> auth_agent" in out
    timings = [line for line in out.splitlines() if line.startswith("  timings:")]
    assert re.search(r"speech to text( \([^)]*\))? \d+ ms", timings[1]), timings  # measured on a spoken turn
    session_id = re.search(r"stored as session (talk-[0-9a-f]+)", out).group(1)
    assert Session.objects.get(session_id=session_id).turns.filter(role="user").exists()


class _FakeInput:
    """A PortAudio input stream that plays ``pcm`` in 20 ms blocks at the pace of a device."""

    def __init__(self, pcm: bytes, blocksize: int, callback):
        self.pcm, self.block, self.callback = pcm, blocksize * 2, callback
        self.active = True
        self._thread = threading.Thread(target=self._feed, daemon=True)

    def _feed(self) -> None:
        for i in range(0, len(self.pcm), self.block):
            self.callback(self.pcm[i : i + self.block].ljust(self.block, b"\0"), self.block // 2, None, None)
            time.sleep(0.02)  # a device delivers a block every 20 ms
        self.active = False

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._thread.join(10)


class _FakeOutput:
    def __init__(self, **kwargs):
        self.started = False

    def start(self):
        self.started = True

    def stop(self):
        pass

    def close(self):
        pass


def test_mic_and_speaker_through_a_sound_device(rules_runtime, monkeypatch):
    """``--mic`` with a sound device (a stand-in for PortAudio): the caller's speech is heard,
    the agent answers through the speaker, and the session is stored when the input ends."""
    import numpy as np

    from agents_app import talk_audio

    tone = (np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000) * 8000).astype("<i2").tobytes()
    pcm = bytes(8000) + tone + bytes(64000)  # 0.25 s quiet, 0.5 s of "speech", 2 s of silence
    played: list[bytes] = []
    device = types.SimpleNamespace(
        query_devices=lambda kind=None: {"name": f"fake {kind}"},
        RawInputStream=lambda samplerate, channels, dtype, blocksize, callback: _FakeInput(
            pcm, blocksize, callback
        ),
        RawOutputStream=lambda **kwargs: _FakeOutput(**kwargs),
    )
    monkeypatch.setitem(sys.modules, "sounddevice", device)
    monkeypatch.setattr(talk_audio.Speaker, "play", lambda self, data, rate: played.append(data))
    out = _talk("--scenario", "banking", "--mic")
    assert "-- listening on the microphone" in out
    assert "caller: i lost my card" in out  # the scripted recogniser of the fixture
    assert "handoff concierge -> auth_agent" in out and "stored as session talk-" in out
    assert sum(len(chunk) for chunk in played) > 0  # the agent was heard
