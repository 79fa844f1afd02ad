"""SileroVAD: the real Silero v6 model on espeak-ng speech, noise, 8 kHz callers through the engine,
one shared model session with state per stream, the runtime's choice by VAD_PROVIDER, and a clear
error when the model package is missing."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from voiceagent.conversation.engine import Conversation, EngineConfig
from voiceagent.conversation.session import InMemorySessionStore
from voiceagent.conversation.specs import AgentSpec, ScenarioSpec, VoiceSpec
from voiceagent.conversation.testing import InstantTTS, ScriptedChat, ScriptedSTT, StaticDirectory
from voiceagent.conversation.tools import ToolRegistry
from voiceagent.speech import silero_vad
from voiceagent.speech.audio import generate_tone, pcm16_to_bytes, resample, rms_dbfs, silence
from voiceagent.speech.silero_vad import SileroUnavailable, SileroVAD, shared_session
from voiceagent.speech.vad import VoiceActivityDetector

SENTENCE = "Hello, I would like to check the balance of my account."


def _noise(n: int, dbfs: float, seed: int = 1) -> bytes:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * (32768.0 * 10 ** (dbfs / 20))
    return pcm16_to_bytes(np.clip(np.rint(x), -32768, 32767).astype(np.int16))


def _frames(pcm: bytes, size: int = 640) -> list[bytes]:
    return [pcm[i : i + size] for i in range(0, len(pcm) - size + 1, size)]


def _decisions(vad: SileroVAD, pcm: bytes) -> list[bool]:
    return [vad.is_speech(f) for f in _frames(pcm, vad.frame_bytes)]


async def _espeak(text: str, rate: int = 16000) -> bytes:
    from voiceagent.speech.offline_tts import EspeakTTS

    tts = EspeakTTS(sample_rate=rate)
    audio = bytearray()
    async for chunk in tts.synthesize(text, VoiceSpec()):
        audio += chunk
    await tts.close()
    return bytes(audio)


@pytest.fixture(scope="module")
def speech_16k() -> bytes:
    """A spoken sentence (espeak-ng, offline) with half a second of silence either side."""
    pad = pcm16_to_bytes(silence(16000, 500))
    return pad + asyncio.run(_espeak(SENTENCE)) + pad


class ScriptedSession:
    """Stands in for onnxruntime: returns scripted probabilities, keeps what it was given."""

    def __init__(self, probabilities):
        self.probabilities = list(probabilities)
        self.calls: list[dict] = []

    def run(self, outputs, feed):
        self.calls.append({k: np.array(v, copy=True) for k, v in feed.items()})
        p = self.probabilities.pop(0)
        return np.array([[p]], dtype=np.float32), feed["state"] + 1.0


def test_the_model_graph_and_one_session_per_process():
    session = shared_session()
    assert [i.name for i in session.get_inputs()] == ["input", "state", "sr"]
    assert [o.name for o in session.get_outputs()] == ["output", "stateN"]
    options = session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    a, b = SileroVAD(), SileroVAD()
    assert a.session is b.session is session
    assert "silero" in a.label and "threshold 0.5" in a.label


def test_frame_validation():
    vad = SileroVAD()
    assert vad.frame_bytes == 640
    assert SileroVAD(sample_rate=8000).frame_bytes == 320
    with pytest.raises(ValueError, match="sample rate"):
        SileroVAD(sample_rate=48000)
    with pytest.raises(ValueError, match="10, 20 or 30"):
        SileroVAD(frame_ms=25)
    with pytest.raises(ValueError, match="probability"):
        SileroVAD(threshold=1.5)
    with pytest.raises(ValueError, match="dBFS"):
        SileroVAD(min_rms=3)
    for bad in (b"", b"\0" * 639, b"\0" * 1280):
        with pytest.raises(ValueError, match="640 bytes"):
            vad.is_speech(bad)


def test_hysteresis_and_windows_of_512_samples():
    """Speech starts at the threshold and ends only below threshold - 0.15 (Silero's VADIterator);
    the model sees [64 samples of context | 512 new samples] and its state comes back next call."""
    session = ScriptedSession([0.6, 0.45, 0.36, 0.34, 0.55])
    vad = SileroVAD(threshold=0.5, session=session)
    loud = _noise(320 * 8, -20.0)
    frames = _frames(loud)
    speaking = []
    for frame in frames:
        before = vad.windows_run
        answer = vad.is_speech(frame)
        if vad.windows_run > before:
            speaking.append(answer)
    assert vad.windows_run == 5 and len(frames) == 8  # 8 x 320 samples = 5 x 512
    assert speaking == [True, True, True, False, True]
    samples = np.frombuffer(loud, "<i2") / 32768.0
    first, second = session.calls[0], session.calls[1]
    assert first["input"].shape == (1, 576) and first["sr"] == 16000
    assert np.allclose(first["input"][0, 64:], samples[:512]) and not first["input"][0, :64].any()
    assert np.allclose(second["input"][0, :64], samples[448:512])  # the previous window's tail
    assert np.allclose(second["input"][0, 64:], samples[512:1024])
    assert (second["state"] == 1.0).all()  # the state the first call returned


def test_the_energy_gate_skips_the_model():
    session = ScriptedSession([0.9] * 10)
    vad = SileroVAD(session=session)
    quiet = _noise(320 * 50, -55.0)
    assert not any(_decisions(vad, quiet))
    assert session.calls == [] and vad.windows_skipped == 31
    ungated = SileroVAD(min_rms=-math.inf, session=ScriptedSession([0.9] * 31))
    assert any(_decisions(ungated, quiet))


def test_silence_low_noise_and_what_webrtcvad_takes_for_speech_are_not_speech():
    vad = SileroVAD()
    assert not any(_decisions(vad, pcm16_to_bytes(silence(16000, 1000))))
    assert not any(_decisions(vad, _noise(16000 * 2, -55.0)))
    # loud white noise and a steady tone pass webrtcvad (behind its gate); Silero rejects them
    for sound in (_noise(16000 * 2, -20.0), pcm16_to_bytes(generate_tone(16000, 2000, 440, amplitude=0.3))):
        assert sum(_decisions(VoiceActivityDetector(), sound)) > 50
        assert not any(_decisions(SileroVAD(), sound))
    assert vad.windows_run == 0  # the quiet audio never reached the model


@pytest.mark.slow
def test_espeak_speech_is_speech(speech_16k):
    vad = SileroVAD()
    frames = _frames(speech_16k)
    decisions = [vad.is_speech(f) for f in frames]
    loud = [d for f, d in zip(frames, decisions, strict=True) if rms_dbfs(f) > -35]
    assert len(loud) > 50
    assert sum(loud) / len(loud) > 0.7
    assert not any(decisions[:20]) and not any(decisions[-5:])  # the padding around it


@pytest.mark.slow
def test_interleaved_streams_decide_as_if_alone(speech_16k):
    """Two callers on one session: each detector keeps its own state and context."""
    other = _noise(len(speech_16k) // 2, -25.0, seed=7)
    a_alone, b_alone = SileroVAD(), SileroVAD()
    alone_a = [(a_alone.is_speech(f), a_alone.probability) for f in _frames(speech_16k)]
    alone_b = [(b_alone.is_speech(f), b_alone.probability) for f in _frames(other)]
    a, b = SileroVAD(), SileroVAD()
    both_a, both_b = [], []
    frames_a, frames_b = _frames(speech_16k), _frames(other)
    for i in range(max(len(frames_a), len(frames_b))):
        if i < len(frames_a):
            both_a.append((a.is_speech(frames_a[i]), a.probability))
        if i < len(frames_b):
            both_b.append((b.is_speech(frames_b[i]), b.probability))
    assert any(d for d, _ in alone_a)
    assert both_a == alone_a and both_b == alone_b


def _conversation(vad: SileroVAD, stt: ScriptedSTT) -> Conversation:
    registry = ToolRegistry()
    agent = AgentSpec(name="desk", prompt_template="You are the desk.", greeting="Hello.")
    scenario = ScenarioSpec(name="desk", start_agent="desk", agents=("desk",))
    return Conversation(
        "silero-1",
        scenario="desk",
        directory=StaticDirectory([agent], scenario, registry),
        store=InMemorySessionStore(),
        stt=stt,
        tts=InstantTTS(ms_per_word=20, chunk_ms=20),
        chat=ScriptedChat(default="Sure."),
        vad=vad,
        registry=registry,
        config=EngineConfig(silence_timeout_ms=lambda: 300),
    )


@pytest.mark.slow
async def test_an_8khz_caller_through_the_engine(speech_16k):
    """Phone audio at 8 kHz: the engine resamples it to 16 kHz; Silero hears the sentence and the
    turn ends on the silence after it. Line noise alone starts no turn."""
    phone = resample(np.frombuffer(speech_16k, "<i2"), 16000, 8000).astype("<i2").tobytes()
    noise = _noise(8000 * 2, -55.0)
    for audio, turns in ((noise, 0), (phone, 1)):
        stt = ScriptedSTT(["what is my balance"])
        conv = _conversation(SileroVAD(), stt)
        await conv.start()
        events: list = []

        async def read(conv=conv, events=events):
            async for event in conv.events():
                events.append(event)

        reader = asyncio.create_task(read())
        for i in range(0, len(audio), 320):  # 20 ms chunks at 8 kHz
            assert conv.push_audio(audio[i : i + 320], 8000)
        for _ in range(40):
            conv.push_audio(bytes(320), 8000)

        def finals(events=events):
            return [e for e in events if e.kind == "Transcript" and e.final and e.speaker == "user"]

        if turns:
            async with asyncio.timeout(5):
                while not finals():
                    await asyncio.sleep(0.01)
            assert [e.text for e in finals()] == ["what is my balance"]
        else:
            await asyncio.sleep(0.3)
            assert finals() == []
        assert conv.vad.windows_run > 0 or not turns
        await conv.close()
        await asyncio.wait_for(reader, 2)


@pytest.mark.slow
def test_the_detector_at_8khz(speech_16k):
    phone = resample(np.frombuffer(speech_16k, "<i2"), 16000, 8000).astype("<i2").tobytes()
    vad = SileroVAD(sample_rate=8000)
    frames = _frames(phone, 320)
    decisions = [vad.is_speech(f) for f in frames]
    loud = [d for f, d in zip(frames, decisions, strict=True) if rms_dbfs(f) > -35]
    assert len(loud) > 50 and sum(loud) / len(loud) > 0.7
    assert vad.session.get_inputs()[0].name == "input"


def test_the_runtime_picks_the_vad_by_vad_provider(settings):
    from voiceagent import appconfig
    from voiceagent.config import load_config
    from voiceagent.runtime import Runtime

    settings.CONFIG = load_config({"VAD_PROVIDER": "silero", "SILERO_THRESHOLD": "0.6"})
    appconfig.reset_for_tests()
    vad = Runtime().vad_factory()
    assert isinstance(vad, SileroVAD) and vad.threshold == 0.6 and vad.frame_bytes == 640
    assert vad.session is shared_session()

    assert vad.label.startswith("silero (Silero VAD v6") and "threshold 0.6" in vad.label

    settings.CONFIG = load_config({})
    appconfig.reset_for_tests()
    webrtc = Runtime().vad_factory()
    assert isinstance(webrtc, VoiceActivityDetector)
    assert webrtc.label == "webrtc (webrtcvad mode 2, gate -45 dBFS)"


async def test_a_missing_package_fails_speech_startup_in_one_clear_line(settings, monkeypatch):
    from voiceagent import appconfig
    from voiceagent.config import load_config
    from voiceagent.runtime import Runtime

    monkeypatch.setattr(silero_vad, "PACKAGE", "silero-vad-not-installed")
    monkeypatch.setattr(silero_vad, "_session", None)
    expected = "VAD_PROVIDER=silero needs the silero-vad package: run scripts/_setup.sh"
    with pytest.raises(SileroUnavailable, match=expected) as caught:
        SileroVAD()
    assert "\n" not in str(caught.value)

    settings.CONFIG = load_config({"VAD_PROVIDER": "silero"})
    appconfig.reset_for_tests()
    runtime = Runtime()
    with pytest.raises(SileroUnavailable, match=expected):
        await runtime.start_speech()
    assert runtime.stt is None  # step 2 failed before building anything: /readiness says so
