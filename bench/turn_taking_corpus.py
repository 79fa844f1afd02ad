"""The labelled corpus of bench/bench_turn_taking.py, built at run time (numpy + offline synthesis).

Caller speech is synthesised offline in several voices and rates (espeak-ng variants and Piper,
the service's own neural voice at other paces) and normalised to a normal speaking level
(-20 dBFS RMS, +-3 dB); the noises are made with numpy:

- coughs and clicks: shaped noise bursts of 80-250 ms (a cough: band-limited noise with a fast
  attack and a decay, sometimes twice; a click train: broadband transients);
- babble: four to six quiet speech clips of other voices mixed together at -30 dBFS RMS;
- keyboard: trains of 8-20 key clicks 70-220 ms apart;
- backchannels: "uh-huh", "okay", "yeah", "mm-hmm", "right" at a normal level;
- the agent's own audio coming back (phone echo) is mixed in while the bench plays (it depends on
  what the agent says and when): each case that has it carries its delay and attenuation.

Synthesised clips are cached as .npy files under a temporary directory for the run only.
Everything is 16 kHz int16; the phone-band variant (8 kHz, 300-3400 Hz, mu-law) is applied frame by
frame by :class:`PhoneBand` while the bench plays, so the echo goes through the line too.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import random
import subprocess
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soxr

RATE = 16000
SPEECH_DBFS = -20.0
BABBLE_DBFS = -30.0
FLOOR_DBFS = -62.0  # line hiss under everything the caller sends

ESPEAK_VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb-scotland", "en-us+m3", "en-029")
ESPEAK_RATES = (150, 175, 200)
PIPER_RATES = ("-10%", "+0%", "+15%")

TRIGGERS = (
    "can you tell me about your accounts",
    "what kinds of accounts do you have",
    "tell me about the savings account please",
    "what are my options for a new account",
)
TOOL_TRIGGERS = (
    "what is the balance on my savings account",
    "how much money do i have in savings",
    "can you check my savings balance",
)
BACKCHANNELS = ("uh-huh", "okay", "yeah", "mm-hmm", "right")
INTERRUPTIONS = ("wait, stop, I have a different question", "no that's wrong, my card was stolen")
PAUSED = (
    ("my card number is", "four two seven one"),
    ("i was born on", "july fourth nineteen ninety"),
    ("i want to", "block my credit card"),
    ("the payment i don't recognize is from", "an online store"),
    ("my name is", "maria garcia"),
)
# a question paused after its opening: the recogniser writes the opening as a whole question ("Can
# you tell me?"), so the words cannot tell (opt-in, OPTIONAL_KINDS: not in the default corpus, whose
# figures earlier runs are compared with)
QUESTION_OPENINGS = (
    ("can you tell me", "what my balance is"),
    ("how do i", "reset my pin"),
    ("do you know", "when the branch opens"),
    ("can you check", "my savings account"),
    ("what is", "the fee for a transfer"),
)
OPTIONAL_KINDS = ("question_opening",)
DIGIT_LEADS = ("my code is", "the number is", "my pin is")
DIGITS = ("four two seven one", "eight three three zero", "one nine eight seven", "six zero three five")
PLAIN = (
    "hi i think i lost my debit card yesterday",
    "can you freeze my card please",
    "what is the balance on my account",
    "i think my account was hacked",
    "can i talk to a real person",
    "no thank you that's all",
    "please send me a new code",
    "someone stole my wallet with my credit card in it",
)


# --- synthesis --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Voice:
    engine: str  # espeak-ng | piper
    name: str  # espeak voice, or the Piper rate
    rate: int = 175  # espeak words per minute

    @property
    def label(self) -> str:
        return f"espeak:{self.name}@{self.rate}" if self.engine == "espeak-ng" else f"piper@{self.name}"


def voices(rng: random.Random, with_piper: bool) -> list[Voice]:
    """Every caller voice: each espeak-ng variant at each rate, and Piper at three paces."""
    out = [Voice("espeak-ng", v, r) for v in ESPEAK_VOICES for r in ESPEAK_RATES]
    if with_piper:
        out += [Voice("piper", r) for r in PIPER_RATES]
    rng.shuffle(out)
    return out


def level(pcm: np.ndarray, dbfs: float) -> np.ndarray:
    """``pcm`` scaled to an RMS of ``dbfs`` (float32, full scale 32768)."""
    x = pcm.astype(np.float32)
    rms = float(np.sqrt(np.mean(x * x))) or 1.0
    return x * (32768.0 * 10 ** (dbfs / 20) / rms)


def trim(pcm: np.ndarray, pad: int = 800) -> np.ndarray:
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 400)
    return pcm[max(0, loud[0] - pad) : loud[-1] + pad] if len(loud) else pcm


class Synth:
    """Synthesises caller lines, cached under ``cache_dir`` (the run's temporary directory)."""

    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir
        self._piper = None

    async def say(self, voice: Voice, text: str) -> np.ndarray:
        key = hashlib.sha1(f"{voice.label}|{text}".encode()).hexdigest()[:16]
        path = self.cache_dir / f"{key}.npy"
        if path.exists():
            return np.load(path)
        if voice.engine == "piper":
            pcm = await self._piper_say(voice.name, text)
        else:
            pcm = await asyncio.to_thread(_espeak, voice, text)
        pcm = trim(pcm)
        np.save(path, pcm)
        return pcm

    async def _piper_say(self, rate: str, text: str) -> np.ndarray:
        from voiceagent.conversation.specs import VoiceSpec
        from voiceagent.speech.piper_tts import PiperTTS

        if self._piper is None:
            self._piper = PiperTTS(sample_rate=RATE, pool_size=1)
            await asyncio.to_thread(self._piper.load)
        chunks = [c async for c in self._piper.synthesize(text, VoiceSpec(rate=rate))]
        return np.frombuffer(b"".join(chunks), "<i2").copy()

    async def close(self) -> None:
        if self._piper is not None:
            await self._piper.close()


def _espeak(voice: Voice, text: str) -> np.ndarray:
    argv = ["espeak-ng", "--stdout", "-v", voice.name, "-s", str(voice.rate), "--", text]
    out = subprocess.run(argv, capture_output=True, check=True, timeout=60).stdout
    with wave.open(io.BytesIO(out)) as wav:
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
        sr = wav.getframerate()
    return soxr.resample(pcm, sr, RATE).astype(np.int16)


# --- noises -----------------------------------------------------------------------------------------
def _shaped(n: int, lo: float, hi: float, rng: np.random.Generator) -> np.ndarray:
    """White noise band-limited to ``lo``-``hi`` Hz (FFT mask)."""
    spec = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    spec[(freqs < lo) | (freqs > hi)] = 0
    return np.fft.irfft(spec, n).astype(np.float32)


def cough(rng: np.random.Generator) -> np.ndarray:
    """One or two coughs: 80-250 ms noise bursts (300-3000 Hz), fast attack, decay; loud."""
    parts = []
    for _ in range(rng.integers(1, 3)):
        n = int(RATE * rng.uniform(0.08, 0.25))
        t = np.arange(n) / n
        env = np.minimum(1.0, t / 0.08) * np.exp(-4.0 * t)
        parts.append(_shaped(n, 300, 3000, rng) * env)
        parts.append(np.zeros(int(RATE * rng.uniform(0.1, 0.3)), np.float32))
    return _peak(np.concatenate(parts), rng.uniform(-12, -4))


def clicks(rng: np.random.Generator) -> np.ndarray:
    """A burst of broadband clicks (a handset knocked, a pen) lasting 80-250 ms."""
    out = np.zeros(int(RATE * rng.uniform(0.08, 0.25)), np.float32)
    for _ in range(rng.integers(2, 6)):
        at = rng.integers(0, max(1, len(out) - 160))
        n = 160
        out[at : at + n] += rng.standard_normal(n).astype(np.float32) * np.exp(-np.arange(n) / 20.0)
    return _peak(out, rng.uniform(-10, -3))


def keyboard(rng: np.random.Generator) -> np.ndarray:
    """Typing: 8-20 key clicks (a 4-8 ms transient and a short resonance) 70-220 ms apart."""
    gaps = rng.uniform(0.07, 0.22, rng.integers(8, 21))
    out = np.zeros(int(RATE * (gaps.sum() + 0.1)), np.float32)
    at = 0.0
    for gap in gaps:
        i = int(at * RATE)
        n = int(RATE * rng.uniform(0.004, 0.008))
        click = rng.standard_normal(n) * np.exp(-np.arange(n) / (n / 3))
        ring = np.sin(2 * np.pi * rng.uniform(1500, 4000) * np.arange(240) / RATE) * np.exp(
            -np.arange(240) / 40
        )
        out[i : i + n] += click
        out[i : i + 240] += 0.3 * ring
        at += gap
    return _peak(out, rng.uniform(-18, -8))


def _peak(x: np.ndarray, dbfs: float) -> np.ndarray:
    return (x / (np.abs(x).max() or 1.0) * 32768.0 * 10 ** (dbfs / 20)).astype(np.float32)


def floor_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    return (rng.standard_normal(n) * 32768.0 * 10 ** (FLOOR_DBFS / 20)).astype(np.float32)


def speech_bounds(x: np.ndarray) -> tuple[float, float]:
    """Seconds from the clip's start to its first and after its last loud sample (speech)."""
    loud = np.flatnonzero(np.abs(x) > 32768.0 * 10 ** (-40 / 20))
    if not len(loud):
        return 0.0, 0.0
    return float(loud[0] / RATE), float((loud[-1] + 1) / RATE)


# --- cases ------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One labelled conversation: what the caller says first (``trigger``), what is played over the
    agent's answer (``stimulus``, ``stimulus_at`` seconds after the answer's audio begins), and
    what is expected of the engine (``category``)."""

    id: str
    category: str  # over_agent | interruption | pause | plain | tool
    kind: str
    sample_rate: int  # 16000, or 8000 = phone band
    voice: str
    text: str
    trigger: np.ndarray  # float32 16 kHz; for pause/plain: the utterance measured
    stimulus: np.ndarray | None = None
    stimulus_at: float = 0.0
    echo: tuple[float, float] | None = None  # (delay s, attenuation dB)
    tool_delay_s: float = 0.0
    pauses: list[tuple[float, float]] = field(default_factory=list)  # (start, end) s in trigger

    def summary(self) -> dict:
        return {
            "id": self.id,
            "category": self.category,
            "kind": self.kind,
            "sample_rate": self.sample_rate,
            "voice": self.voice,
            "text": self.text,
            "stimulus_at_s": round(self.stimulus_at, 2),
            "echo": None
            if self.echo is None
            else {"delay_ms": round(self.echo[0] * 1000), "db": -self.echo[1]},
            "tool_delay_s": round(self.tool_delay_s, 2) or None,
            "pauses_ms": [round((b - a) * 1000) for a, b in self.pauses] or None,
        }


OVER_AGENT_KINDS = ("cough_click", "babble", "keyboard", "backchannel", "echo")


async def build_cases(
    synth: Synth, per_category: int, seed: int = 16, with_piper: bool = True, optional: tuple[str, ...] = ()
) -> list[Case]:
    """About ``per_category`` cases of each category, shared among its kinds (over_agent has five,
    interruption two, pause two; at least one each), half of each kind in the phone band, voices and
    rates in turn. ``optional``: kinds of :data:`OPTIONAL_KINDS` to add, as many as a pause kind,
    built after the others (which stay as without them)."""
    rnd = random.Random(seed)
    rng = np.random.default_rng(seed)
    vs = voices(rnd, with_piper)
    cases: list[Case] = []
    counter = iter(range(10**6))

    def voice() -> Voice:
        return vs[next(counter) % len(vs)]

    async def say(v: Voice, text: str) -> np.ndarray:
        return level(await synth.say(v, text), SPEECH_DBFS + rnd.uniform(-3, 3))

    alternate = iter(range(10**6))

    def rate(_i: int) -> int:  # every other case in the phone band, whatever its kind
        return 16000 if next(alternate) % 2 == 0 else 8000

    def per_kind(kinds: int) -> int:
        return max(1, round(per_category / kinds))

    for kind in OVER_AGENT_KINDS:
        for i in range(per_kind(len(OVER_AGENT_KINDS))):
            v = voice()
            text = rnd.choice(TRIGGERS)
            trigger = await say(v, text)
            stim: np.ndarray | None
            echo = None
            label = text
            if kind == "cough_click":
                stim = cough(rng) if i % 2 == 0 else clicks(rng)
            elif kind == "babble":
                clips = [
                    level(await synth.say(voice(), rnd.choice(PLAIN + TRIGGERS)), 0)
                    for _ in range(rnd.randint(4, 6))
                ]
                n = int(RATE * rnd.uniform(2.0, 3.0))
                mix = np.zeros(n, np.float32)
                for clip in clips:
                    at = rnd.randint(0, max(0, n // 3))
                    part = clip[: n - at]
                    mix[at : at + len(part)] += part
                stim = level(mix, BABBLE_DBFS)
            elif kind == "keyboard":
                stim = keyboard(rng)
            elif kind == "backchannel":
                word = BACKCHANNELS[i % len(BACKCHANNELS)]
                stim, label = await say(voice(), word), f"{text} / {word}"
            else:  # echo alone: the agent's own voice coming back
                stim = None
                echo = (rnd.uniform(0.06, 0.2), rnd.uniform(12, 25))
            cases.append(
                Case(f"{kind}-{i}", "over_agent", kind, rate(i), v.label, label, trigger, stim,
                     rnd.uniform(1.0, 2.5), echo)
            )  # fmt: skip
    for kind in ("interrupt", "interrupt_echo"):
        for i in range(per_kind(2)):
            v = voice()
            text = rnd.choice(TRIGGERS)
            line = INTERRUPTIONS[i % len(INTERRUPTIONS)]
            echo = (rnd.uniform(0.06, 0.2), rnd.uniform(12, 25)) if kind == "interrupt_echo" else None
            cases.append(
                Case(f"{kind}-{i}", "interruption", kind, rate(i), v.label, f"{text} / {line}",
                     await say(v, text), await say(v, line), rnd.uniform(1.0, 2.5), echo)
            )  # fmt: skip

    async def paused(kind: str) -> None:
        for i in range(per_kind(2)):
            v = voice()
            if kind == "mid_sentence":
                parts = list(PAUSED[i % len(PAUSED)])
                gaps = [rnd.uniform(0.5, 1.1)]
            elif kind == "question_opening":
                parts = list(QUESTION_OPENINGS[i % len(QUESTION_OPENINGS)])
                gaps = [rnd.uniform(0.5, 1.1)]
            else:
                parts = [rnd.choice(DIGIT_LEADS), *DIGITS[i % len(DIGITS)].split()]
                gaps = [rnd.uniform(0.5, 0.9) for _ in parts[1:]]
            clips = [await say(v, p) for p in parts]
            pieces, pauses, t = [clips[0]], [], len(clips[0]) / RATE
            for gap, clip in zip(gaps, clips[1:], strict=True):
                _, end = speech_bounds(pieces[-1])
                pause_start = t - len(pieces[-1]) / RATE + end
                pieces.append(np.zeros(int(RATE * gap), np.float32))
                pieces.append(clip)
                start, _ = speech_bounds(clip)
                t += gap + len(clip) / RATE
                pauses.append((pause_start, t - len(clip) / RATE + start))
            cases.append(
                Case(f"{kind}-{i}", "pause", kind, rate(i), v.label, " ... ".join(parts),
                     np.concatenate(pieces), pauses=pauses)
            )  # fmt: skip

    for kind in ("mid_sentence", "digits"):
        await paused(kind)
    for i in range(per_kind(1)):
        v = voice()
        text = PLAIN[i % len(PLAIN)]
        cases.append(Case(f"plain-{i}", "plain", "plain", rate(i), v.label, text, await say(v, text)))
    for i in range(per_kind(1)):
        v = voice()
        text = rnd.choice(TOOL_TRIGGERS)
        cases.append(
            Case(f"tool-{i}", "tool", "slow_tool", rate(i), v.label, text, await say(v, text),
                 tool_delay_s=rnd.uniform(3.0, 4.0))
        )  # fmt: skip
    for kind in optional:
        if kind not in OPTIONAL_KINDS:
            raise ValueError(f"no optional case kind {kind!r} (there are {', '.join(OPTIONAL_KINDS)})")
        await paused(kind)
    return cases


# --- the phone line ---------------------------------------------------------------------------------
def _bandpass(taps: int = 129, lo: float = 300.0, hi: float = 3400.0) -> np.ndarray:
    """A windowed-sinc FIR band-pass at 16 kHz."""
    n = np.arange(taps) - (taps - 1) / 2

    def lowpass(fc: float) -> np.ndarray:
        return 2 * fc / RATE * np.sinc(2 * fc / RATE * n)

    return ((lowpass(hi) - lowpass(lo)) * np.hamming(taps)).astype(np.float32)


_BANDPASS = _bandpass()


class PhoneBand:
    """Frame by frame: 16 kHz float -> 300-3400 Hz band-pass -> 8 kHz -> G.711 mu-law and back
    (what a phone line does to the caller's audio); keeps the filter's state across frames."""

    def __init__(self) -> None:
        self._tail = np.zeros(len(_BANDPASS) - 1, np.float32)

    def __call__(self, frame16k: np.ndarray) -> bytes:
        from voiceagent.speech.audio import ulaw_decode, ulaw_encode

        x = np.concatenate([self._tail, frame16k])
        self._tail = x[-(len(_BANDPASS) - 1) :]
        y = np.convolve(x, _BANDPASS, "valid")[::2]
        pcm = np.clip(y, -32768, 32767).astype(np.int16)
        return np.asarray(ulaw_decode(ulaw_encode(pcm)), dtype="<i2").tobytes()
