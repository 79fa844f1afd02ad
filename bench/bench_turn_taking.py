"""Turn-taking quality measured on audio (issue 16): one JSON line per VAD (webrtc, silero).

A labelled corpus (bench/turn_taking_corpus.py: synthesised callers in espeak-ng and Piper voices,
coughs and clicks, babble, keyboard, backchannels, phone echo of the agent's own voice, real
interruptions, mid-sentence pauses, digits read slowly, plain and slow-tool turns; half of each
kind in the 8 kHz phone band) is played in real time (20 ms frames paced by the loop clock)
against the cascade engine with the real offline recogniser (Whisper, built as the speech factory
builds it), the real offline TTS (Piper), the VAD under test and a scripted chat whose first answer
is ~9 s long (bench/turn_taking_session.py). Cases run several at once, each in real time.

Figures per VAD (``*_rate`` over the valid cases of the category):

What "stop" and "silence" mean here (all on the engine's playback clock: what a transport puts on
the wire, before its own lead of 60 ms on the phone, one 250 ms frame on AudioHook, none in the
browser, which applies the gain to what it has scheduled):

- the agent's audio *ends* at a ``StopAudio`` (its queued audio is purged, the peer flushes);
- it is *ducked* by a ``Duck`` event of -15 dB or less (every transport lowers the gain of what it
  has not played yet; ``Duck(0)`` restores it); a *stop* is either of the two, the first one;
- *silence* is time with no agent audio at all (ducked audio is audio, and reported apart).

Figures per VAD (``*_rate`` over the valid cases of the category):

- ``false_stop_rate``: noise, a backchannel or echo over the answer made the agent's audio end
  (``StopAudio``), even if it then resumed; ``false_duck_rate``: it was ducked (never ended);
  ``false_interruption_rate``: ... and it abandoned the answer (no agent audio after the stop, or
  the engine took the noise as a new caller turn: a chat request with a new caller message);
  ``noise_turn_rate``: the noise became a caller turn at all;
- ``agent_silence_after_backchannel_ms`` p50/p95: in the backchannel cases ("uh-huh", "okay",
  "yeah", "mm-hmm", "right" over the answer), the time without agent audio from the backchannel's
  start to the end of the agent's audio (a resumed answer: the gap before it went on; an abandoned
  one: until the case ends); ``..._after_noise_ms`` the same for the other noises (coughs, clicks,
  babble, keyboard, echo); ``ducked_ms_after_backchannel`` p50/p95: how long its gain stayed down;
  ``repeated_rate``: the answer went on with a clause said again (more of it played than its
  length: the interrupted clause repeated from its start);
- ``missed_interruption_rate``: a real interruption ("wait, stop, ...") did not stop the agent
  (ended or ducked) within 1.5 s of the caller's speech onset; ``stop_reaction_ms`` p50/p95/p99
  (onset -> stop), ``audio_end_reaction_ms`` p50/p95 (onset -> ``StopAudio``) and
  ``answered_rate`` (the interruption became a turn the agent answered);
- ``premature_end_of_turn_rate``: a caller pausing mid-sentence or reading digits slowly had the
  turn ended inside a pause (an end-of-turn decision, a chat request or a second final transcript
  before their speech ended);
- ``end_of_turn_delay_ms`` p50/p99: end of speech -> the engine's end-of-turn decision
  (``turn_ended_at``), plain turns; the same after pause cases in ``..._after_pauses``;
- ``wer_of_plain_and_paused_turns``: word error rate of the final transcripts of the plain and
  pause cases against what was said (all, 16 kHz, 8 kHz): what a faster decode must not cost;
- dead air, slow-tool turns (3-4 s tool): the gaps in the agent's audio (its playback clock:
  ``emit_audio`` start times and durations, cut at ``StopAudio``) between the end of the caller's
  turn and the end of the answer; ``dead_air_s_per_conversation`` = their mean total,
  ``max_dead_air_during_tool_s`` = the longest single gap;
- ``cpu_ms_per_session_s``: CPU (this process less the bench's own audio mixing, plus the Whisper
  recogniser process) per second of conversation, with the VAD's own share.

Settings come from the environment like the service's (MIN_INTERRUPTION_MS, ENDPOINTING_MAX_MS,
VAD_SILENCE_TIMEOUT, ECHO_GATE_DB, FILLER_AFTER_MS, VAD_AGGRESSIVENESS, SILERO_THRESHOLD,
TURN_MODEL, ...); ``turn_model`` gives the end-of-turn model's calls and cost (its worker thread's
CPU is inside ``engine_process``).

    nice -n 10 .venv/bin/python bench/bench_turn_taking.py [--quick] [--vad webrtc|silero|all]
        [--per-category 120] [--concurrency 8] [--seed 16] [--details FILE] [--kinds K1,K2]
        [--pause-hint-ms 100] [--turn-model-ms 160]

``--pause-hint-ms`` / ``--turn-model-ms`` move when, in a pause, the recogniser and the turn model
are asked (an A/B of the engine's ``ListeningConfig``; the figures print the values used).

120 cases per category (600 per VAD, ~16 min each on 2 cores): a rate's standard error is then
about 2 points at 5 %, where 40 cases gave 3.4 (one case 2.5 points; seeds 16 and 17 at 40 per
category read premature ends 2.5-7.5 % for the same engine). ``--per-category 40`` for a quicker run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from offline_speech_corpus import edit_distance, normalise  # noqa: E402
from turn_taking_corpus import OPTIONAL_KINDS, Case, Synth, build_cases  # noqa: E402
from turn_taking_session import (  # noqa: E402
    LONG_ANSWER,
    SHORT_REPLY,
    TOOL_ANSWER,
    Record,
    TimedVAD,
    make_registry,
    run_case,
    settings_config,
)

from voiceagent.config.loading import load_config  # noqa: E402
from voiceagent.conversation.turn_taking import TurnTaking  # noqa: E402

MISSED_AFTER_S = 1.5
DUCK_STOP_DB = -15.0  # a gain this low (or lower) counts as the agent stopping
CATEGORIES = ("over_agent", "interruption", "pause", "plain", "tool")


def turn_taking(config: Any) -> TurnTaking:
    """The global turn-taking settings, as the runtime reads them (voiceagent.runtime)."""
    return TurnTaking(
        min_interruption_ms=config.MIN_INTERRUPTION_MS,
        endpointing_min_ms=config.VAD_SILENCE_TIMEOUT,
        endpointing_max_ms=config.ENDPOINTING_MAX_MS,
        echo_gate_db=config.ECHO_GATE_DB,
        filler_after_ms=config.FILLER_AFTER_MS,
        reprompt_after_s=config.REPROMPT_AFTER_S,
        max_reprompts=config.MAX_REPROMPTS,
        max_conversation_s=config.MAX_CONVERSATION_S,
    )


def silero_available() -> str | None:
    """None when the Silero provider can run here, else why not."""
    if importlib.util.find_spec("voiceagent.speech.silero_vad") is None:
        return "voiceagent/speech/silero_vad.py is not present"
    try:
        from voiceagent.speech.silero_vad import SileroVAD

        SileroVAD(16000, 20)
    except Exception as exc:
        return f"Silero VAD cannot load: {exc}"
    return None


def make_vad(kind: str, config: Any) -> Any:
    """A new VAD for one conversation, as the runtime builds it for VAD_PROVIDER=``kind``."""
    if kind == "silero":  # batched on the inference thread, verdicts back on the loop
        from voiceagent.speech.silero_batch import BatchedSileroVAD

        return BatchedSileroVAD(16000, 20, threshold=config.SILERO_THRESHOLD)
    from voiceagent.speech.vad import VoiceActivityDetector

    return VoiceActivityDetector(16000, 20, aggressiveness=config.VAD_AGGRESSIVENESS)


# --- judging one case -------------------------------------------------------------------------------
def judge(case: Case, rec: Record) -> dict:
    """The outcome of one case against its label (times in ms from the case's start)."""
    out: dict[str, Any] = {**case.summary(), "invalid": rec.invalid}
    ms = lambda t: None if t is None else round((t - rec.t0) * 1000)  # noqa: E731
    out["timeline"] = {
        "answer_start": ms(rec.answer_start),
        "stimulus": ms(rec.stim_start),
        "stops": [ms(t) for t, _ in rec.stops],
        "decisions": [ms(t) for t in rec.decisions],
        "chat": [(ms(t), text) for t, text in rec.chat_calls],
        "finals": [(ms(t), text) for t, text in rec.finals],
        "duration": ms(rec.end),
        "turn_model": [(ms(t), None if p is None else round(p, 3)) for t, p in rec.turn_model_answers],
    }
    if rec.invalid:
        return out
    stops_at = sorted(rec.caller_time(t) for t, _ in rec.stops)  # on the caller's clock
    ducks_at = sorted(rec.caller_time(t) for t, db in rec.ducks if db <= DUCK_STOP_DB)
    out["capped"] = rec.capped
    first_user = rec.chat_calls[0][1] if rec.chat_calls else None
    speech_end = rec.trigger_speech[1]
    if case.category in ("over_agent", "interruption"):
        assert rec.answer_start is not None
        stops = [t for t in stops_at if t >= rec.answer_start - 1e-3]
        ducks = [t for t in ducks_at if t >= rec.answer_start - 1e-3]
        new_turns = [rec.caller_time(t) for t, text in rec.chat_calls[1:] if text != first_user]
        if case.category == "over_agent":
            stopped = bool(stops)
            last_stop = max((t for t, _ in rec.stops), default=0.0)  # loop time, as the playback clock
            after = [p for p in rec.audio if stopped and p.start >= last_stop - 1e-3 and p.end > p.start]
            out["false_stop"] = stopped
            out["false_duck"] = bool(ducks) and not stopped
            out["false_interruption"] = stopped and (bool(new_turns) or not after)
            out["resumed"] = stopped and bool(after) and not new_turns
            out["noise_turn"] = bool(new_turns)
            begin = rec.stim_start if rec.stim_start is not None else rec.answer_start
            silence = agent_silence(rec, begin)
            if out["false_interruption"] and not new_turns:
                silence = max(silence, rec.end - last_stop)  # the answer never went on
            out["agent_silence_ms"] = round(silence * 1000)
            out["ducked_ms"] = round(ducked_time(rec, begin) * 1000)
            out["repeated"] = repeated(rec)
        else:
            assert rec.stim_speech is not None
            onset = rec.stim_speech[0]
            answer_end = rec.audio_end()
            if answer_end < onset and not stops:
                out["invalid"] = "the answer ended before the interruption"
                return out
            ended = stops[0] if stops else None
            first = min(stops[:1] + ducks[:1], default=None)  # ended or ducked, whichever came first
            out["stopped_before_onset"] = first is not None and first < onset - 0.02
            out["stop_reaction_ms"] = None if first is None else round((first - onset) * 1000)
            out["audio_end_reaction_ms"] = None if ended is None else round((ended - onset) * 1000)
            out["missed"] = first is None or first - onset > MISSED_AFTER_S
            out["answered"] = any(t >= onset - 0.05 for t in new_turns)
    elif case.category in ("pause", "plain"):
        said, heard = normalise(case.text), normalise(" ".join(text for _, text in rec.finals))
        out["word_errors"], out["words"] = edit_distance(said, heard), len(said)
        early = [t for t in rec.decisions if t < speech_end - 0.02]
        early_chat = [t for t, _ in rec.chat_calls if rec.caller_time(t) < speech_end]
        out["premature"] = bool(early or early_chat) or len(rec.finals) > 1
        out["final_transcripts"] = len(rec.finals)
        after = [t for t in rec.decisions if t >= speech_end - 0.02]
        if not after:  # no decision recorded: the 'thinking' state is the next best mark
            after = [t for t, s in rec.states if s == "thinking" and t >= speech_end - 0.02]
        out["end_of_turn_delay_ms"] = round((after[0] - speech_end) * 1000) if after else None
    elif case.category == "tool":
        after = [t for t in rec.decisions if t >= speech_end - 0.02]
        played = sorted((p.start, p.end) for p in rec.audio if p.end > p.start)
        if not after or not played:
            out["invalid"] = "no end of turn" if not after else "no answer audio"
            return out
        cursor = turn_end = after[0]
        gaps = []
        for start, end in played:
            if end <= cursor:
                continue
            if start > cursor:
                gaps.append(start - cursor)
            cursor = end
        out["dead_air_s"] = round(sum(gaps), 3)
        # while the tool runs: from the model's tool call (1st chat request) to its result (2nd)
        if len(rec.chat_calls) >= 2:
            t_from, t_to = rec.chat_calls[0][0], rec.chat_calls[1][0]
            out["tool_ms"] = round((t_to - t_from) * 1000)
            out["dead_air_during_tool_s"] = round(silence_within(played, t_from, t_to), 3)
        out["longest_gap_s"] = round(max(gaps, default=0.0), 3)
        out["answer_end_ms"] = ms(cursor)
        out["turn_end_ms"] = ms(turn_end)
    return out


def agent_silence(rec: Record, begin: float) -> float:
    """Time without the answer's audio from ``begin`` to the end of its last audio (loop time): a
    resumed answer keeps its response id; a later response (a re-prompt once the answer is over)
    is no part of it."""
    answer = rec.audio[0].rid if rec.audio else None
    played = sorted((p.start, p.end) for p in rec.audio if p.end > p.start and p.rid == answer)
    cursor, silent = begin, 0.0
    for start, end in played:
        if end <= cursor:
            continue
        if start > cursor:
            silent += start - cursor
        cursor = end
    return silent


def ducked_time(rec: Record, begin: float) -> float:
    """How long, from ``begin``, the agent's audio played at a gain of DUCK_STOP_DB or lower."""
    total, since = 0.0, None
    for at, db in [*rec.ducks, (max(rec.audio_end(), begin), 0.0)]:
        if db <= DUCK_STOP_DB and since is None:
            since = max(at, begin)
        elif db > DUCK_STOP_DB and since is not None:
            total += max(0.0, min(at, rec.audio_end()) - since)
            since = None
    return total


def repeated(rec: Record) -> bool:
    """Did the answer say some of its audio twice (the same synthesised chunk emitted again: a
    clause resumed from its start)? Piper is deterministic, and its lines are replayed from cache."""
    seen: set[tuple[int, int]] = set()
    for p in rec.audio:
        key = (p.rid, p.crc)
        if key in seen:
            return True
        seen.add(key)
    return False


def silence_within(played: list[tuple[float, float]], t_from: float, t_to: float) -> float:
    """The longest stretch of ``t_from``-``t_to`` without agent audio."""
    cursor, longest = t_from, 0.0
    for start, end in played:
        if end <= cursor:
            continue
        if start >= t_to:
            break
        longest = max(longest, start - cursor)
        cursor = end
    return max(longest, t_to - cursor)


def pct(values: list[float], q: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 1)


def rate(rows: list[dict], key: str) -> float | None:
    return round(sum(bool(r.get(key)) for r in rows) / len(rows), 4) if rows else None


def word_error_rates(rows: list[dict]) -> dict[str, float | None]:
    """What the recogniser made of the caller's words (every final transcript of the case against
    the text said): a decoding change that saves time must not cost this (bench_offline_speech's
    corpus uses other lines)."""

    def wer(part: list[dict]) -> float | None:
        words = sum(r["words"] for r in part)
        return round(sum(r["word_errors"] for r in part) / words, 4) if words else None

    scored = [r for r in rows if "words" in r]
    by_rate = {str(rate): wer([r for r in scored if r["sample_rate"] == rate]) for rate in (16000, 8000)}
    return {"all": wer(scored), **by_rate}


def summarise(rows: list[dict]) -> dict[str, Any]:
    valid = [r for r in rows if not r["invalid"]]
    by = {c: [r for r in valid if r["category"] == c] for c in CATEGORIES}
    noise, inter = by["over_agent"], by["interruption"]
    pauses, plain, tool = by["pause"], by["plain"], by["tool"]
    delays = [r["end_of_turn_delay_ms"] for r in plain if r.get("end_of_turn_delay_ms") is not None]
    paused_delays = [r["end_of_turn_delay_ms"] for r in pauses if r.get("end_of_turn_delay_ms") is not None]
    reactions = [
        r["stop_reaction_ms"]
        for r in inter
        if r.get("stop_reaction_ms") is not None and not r.get("stopped_before_onset")
    ]
    ends = [
        r["audio_end_reaction_ms"]
        for r in inter
        if r.get("audio_end_reaction_ms") is not None and not r.get("stopped_before_onset")
    ]
    backchannels = [r for r in noise if r["kind"] == "backchannel"]
    noises = [r for r in noise if r["kind"] != "backchannel"]

    def p50_95(values: list[float]) -> dict[str, Any]:
        return {"p50": pct(values, 50), "p95": pct(values, 95), "n": len(values)}

    def breakdown(part: list[dict], keys: tuple[str, ...], field: str) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for value in sorted({str(r[field]) for r in part}):
            sub = [r for r in part if str(r[field]) == value]
            out[value] = {"n": len(sub), **{k: rate(sub, k) for k in keys}}
        return out

    return {
        "agent_silence_after_backchannel_ms": p50_95([r["agent_silence_ms"] for r in backchannels]),
        "false_interruption_rate": rate(noise, "false_interruption"),
        "missed_interruption_rate": rate(inter, "missed"),
        "stop_reaction_ms": {"p50": pct(reactions, 50), "p95": pct(reactions, 95), "p99": pct(reactions, 99)},
        "premature_end_of_turn_rate": rate(pauses, "premature"),
        "agent_silence_after_noise_ms": p50_95([r["agent_silence_ms"] for r in noises]),
        "ducked_ms_after_backchannel": p50_95([r["ducked_ms"] for r in backchannels]),
        "repeated_after_backchannel_rate": rate(backchannels, "repeated"),
        "repeated_rate": rate(noise, "repeated"),
        "audio_end_reaction_ms": {"p50": pct(ends, 50), "p95": pct(ends, 95), "n": len(ends)},
        "false_stop_rate": rate(noise, "false_stop"),
        "false_duck_rate": rate(noise, "false_duck"),
        "noise_turn_rate": rate(noise, "noise_turn"),
        "resumed_rate": rate(noise, "resumed"),
        "answered_interruption_rate": rate(inter, "answered"),
        "stopped_before_interruption_rate": rate(inter, "stopped_before_onset"),
        "premature_end_of_plain_turn_rate": rate(plain, "premature"),
        "end_of_turn_delay_ms": {"p50": pct(delays, 50), "p99": pct(delays, 99), "n": len(delays)},
        "end_of_turn_delay_ms_after_pauses": {"p50": pct(paused_delays, 50), "p99": pct(paused_delays, 99)},
        "wer_of_plain_and_paused_turns": word_error_rates(plain + pauses),
        "dead_air_s_per_conversation": round(statistics.mean(r["dead_air_s"] for r in tool), 3)
        if tool
        else None,
        "max_dead_air_during_tool_s": max(
            (r["dead_air_during_tool_s"] for r in tool if "dead_air_during_tool_s" in r), default=None
        ),
        "longest_gap_turn_end_to_answer_end_s": {
            "p50": pct([r["longest_gap_s"] for r in tool], 50),
            "max": max((r["longest_gap_s"] for r in tool), default=None),
        },
        "over_agent_by_kind": breakdown(
            noise, ("false_stop", "false_duck", "false_interruption", "noise_turn", "repeated"), "kind"
        ),
        "over_agent_by_sample_rate": breakdown(noise, ("false_stop", "false_interruption"), "sample_rate"),
        "interruption_by_kind": breakdown(inter, ("missed", "answered"), "kind"),
        "pause_by_kind": breakdown(pauses, ("premature",), "kind"),
        "by_sample_rate_missed": breakdown(inter, ("missed",), "sample_rate"),
        "by_sample_rate_premature": breakdown(pauses, ("premature",), "sample_rate"),
        "cases": {c: len(by[c]) for c in CATEGORIES},
        "invalid": {c: sum(1 for r in rows if r["invalid"] and r["category"] == c) for c in CATEGORIES},
    }


# --- running ------------------------------------------------------------------------------------------
def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def warm_tts(tts: Any) -> None:
    """Synthesise the agent's lines once, clause by clause as the engine asks (replayed after)."""
    from voiceagent.conversation.specs import VoiceSpec, resolve_voice
    from voiceagent.conversation.text import ClauseSplitter

    voice = resolve_voice(None, VoiceSpec)
    for line in (LONG_ANSWER, SHORT_REPLY, TOOL_ANSWER):
        splitter = ClauseSplitter()
        for clause in [*splitter.push(line), *splitter.flush()]:
            async for _ in tts.synthesize(clause, voice):
                pass


async def run_vad(kind: str, cases: list[Case], args: argparse.Namespace, config: Any) -> dict:
    from voiceagent.speech.factory import (
        build_offline_stt,
        build_offline_tts,
        build_turn_model,
        provider_label,
    )

    stt = await asyncio.to_thread(build_offline_stt, config, "whisper")
    model = turn_model = await asyncio.to_thread(build_turn_model, config, stt)  # as the runtime does
    tts = await asyncio.to_thread(build_offline_tts, config, "piper")
    await stt.warm()
    await tts.warm()
    await warm_tts(tts)
    settings = turn_taking(config)
    engine_config = settings_config(settings, config.VAD_SILENCE_TIMEOUT)
    if args.pause_hint_ms is not None:  # an experiment: when the recogniser is asked at a pause
        engine_config = dataclasses.replace(engine_config, pause_hint_ms=args.pause_hint_ms)
    if args.turn_model_ms is not None:  # and when the turn model is
        engine_config = dataclasses.replace(engine_config, turn_model_ms=args.turn_model_ms)
    registry = make_registry()
    gate = asyncio.Semaphore(args.concurrency)
    vads: list[TimedVAD] = []
    recogniser = getattr(getattr(stt, "_recognizer", None), "proc", None)
    stt_cpu0 = proc_cpu(recogniser.pid) if recogniser is not None else 0.0
    cpu0, wall0 = time.process_time(), time.perf_counter()

    async def one(i: int, case: Case) -> tuple[Case, Record]:
        await asyncio.sleep(0.25 * (i % args.concurrency))  # callers do not all start at once
        async with gate:
            vad = TimedVAD(make_vad(kind, config))
            vads.append(vad)
            rec = await run_case(
                case, stt=stt, tts=tts, vad=vad, registry=registry, config=engine_config, turn_model=model
            )
            return case, rec

    results = await asyncio.gather(*(one(i, c) for i, c in enumerate(cases)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    stt_cpu = proc_cpu(recogniser.pid) - stt_cpu0 if recogniser is not None else None
    label = provider_label(vads[0].vad) if vads else kind
    await stt.close()
    if turn_model is not None:
        turn_model.close()
    await tts.close()
    rows = [judge(case, rec) for case, rec in results]
    session_s = sum(rec.end - rec.t0 for _, rec in results)
    harness = sum(rec.harness_s for _, rec in results)
    vad_s = sum(v.ns for v in vads) / 1e9
    frames = sum(v.frames for v in vads)
    engine_cpu = cpu - harness
    lags = [lag for _, rec in results for lag in rec.lag_ms]
    frames_pushed = sum(len(rec.pushes) for _, rec in results)
    late = sum(1 for lag in lags if lag > 20.0)
    decodes = [s * 1000 for _, rec in results for s in rec.stt_finish_s]
    hints = [s * 1000 for _, rec in results for s in rec.hint_s]
    result = {
        "bench": "turn_taking",
        "vad": kind,
        "vad_label": label,
        **summarise(rows),
        "cpu_ms_per_session_s": round((engine_cpu + (stt_cpu or 0.0)) * 1000 / session_s, 2),
        "cpu_breakdown_ms_per_session_s": {
            "engine_process": round(engine_cpu * 1000 / session_s, 2),
            "recogniser_process": None if stt_cpu is None else round(stt_cpu * 1000 / session_s, 2),
            # None: the VAD judged on its own thread (batched Silero), its CPU is in engine_process
            "vad": round(vad_s * 1000 / session_s, 3) if frames else None,
            "bench_audio_mixing_excluded": round(harness * 1000 / session_s, 2),
        },
        "vad_us_per_frame": round(vad_s * 1e6 / frames, 2) if frames else None,
        "turn_model": turn_model_figures(turn_model, session_s),
        "session_s": round(session_s, 1),
        "wall_s": round(wall, 1),
        "stt_final_decode_ms": {"p50": pct(decodes, 50), "p99": pct(decodes, 99), "n": len(decodes)},
        "stt_pause_hypothesis_ms": {"p50": pct(hints, 50), "p99": pct(hints, 99), "n": len(hints)},
        # frames pushed over 20 ms late: the loop (the machine) could not keep real time
        "frames": frames_pushed,
        "frames_late_over_20ms": late,
        "realtime_ok": late <= 0.01 * frames_pushed,
        "frame_lateness_ms_p99": pct(lags, 99),
        "frame_lateness_ms_max": round(max(lags), 1) if lags else 0.0,
        "settings": {
            **{
                k: getattr(settings, k)
                for k in (
                    "min_interruption_ms",
                    "endpointing_min_ms",
                    "endpointing_max_ms",
                    "echo_gate_db",
                    "filler_after_ms",
                )
            },
            "vad": label,
            "vad_aggressiveness": config.VAD_AGGRESSIVENESS,
            "silero_threshold": config.SILERO_THRESHOLD,
            "stt": provider_label(stt),
            "tts": provider_label(tts),
            "turn_model": provider_label(turn_model) if turn_model is not None else "none",
            "pause_hint_ms": engine_config.pause_hint_ms,
            "turn_model_ms": engine_config.turn_model_ms,
            "concurrency": args.concurrency,
            "frame_ms": 20,
            "missed_after_s": MISSED_AFTER_S,
            "duck_stop_db": DUCK_STOP_DB,
            "seed": args.seed,
        },
    }
    return {"result": result, "rows": rows}


def turn_model_figures(model: Any, session_s: float) -> dict[str, Any] | None:
    """What the end-of-turn model cost: its calls, wall and CPU time per call (its worker thread,
    inside the engine process's CPU above) and per second of conversation, refusals (queue full),
    stale requests skipped, requests answered unscored while the recogniser was backlogged, and those
    not taken because they would have waited past the model's bound (shed) or did (late)."""
    if model is None:
        return None
    calls = model.calls or 1
    return {
        "label": model.label,
        "calls": model.calls,
        "ms_per_call": round(model.wall_s * 1000 / calls, 1),
        "cpu_ms_per_call": round(model.cpu_s * 1000 / calls, 1),
        "cpu_ms_per_session_s": round(model.cpu_s * 1000 / session_s, 2),
        "refused": model.refused,
        "skipped_stale": model.skipped,
        "gave_way_to_recogniser": getattr(model, "gave_way", 0),
        "shed_would_wait": getattr(model, "shed", 0),
        "late": getattr(model, "late", 0),
    }


def _plain(value: Any) -> Any:
    """numpy scalars in the details file as plain numbers."""
    return value.item() if hasattr(value, "item") else str(value)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one case of each kind (a smoke run)")
    parser.add_argument(
        "--per-category", type=int, default=None, help="cases per category (default 120; quick 2)"
    )
    parser.add_argument("--vad", default="all", choices=("all", "webrtc", "silero"))
    parser.add_argument("--concurrency", type=int, default=8, help="conversations at once")
    parser.add_argument("--details", type=Path, help="write every labelled case and its outcome (JSON)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument(
        "--kinds",
        help="only these case kinds, comma-separated (e.g. interrupt_echo,babble): a quick look at one;"
        " question_opening (a question paused after its opening) is built only when asked for",
    )
    parser.add_argument("--pause-hint-ms", type=int, help="silence before the recogniser is asked (an A/B)")
    parser.add_argument("--turn-model-ms", type=int, help="silence before the turn model is asked (an A/B)")
    parser.add_argument(
        "--cases", help="only these case ids, comma-separated (e.g. backchannel-6): one case again"
    )
    parser.add_argument("--log-level", help="the engine's log on stderr (DEBUG: what each verdict heard)")
    args = parser.parse_args()
    if args.log_level:
        logging.basicConfig(
            level=args.log_level.upper(), format="%(relativeCreated)7.0f %(name)s %(message)s"
        )
    per_category = args.per_category or (2 if args.quick else 120)
    config = load_config()
    with tempfile.TemporaryDirectory(prefix="turn-taking-corpus-") as tmp:
        synth = Synth(Path(tmp))
        try:
            wanted = set(args.kinds.split(",")) if args.kinds else set()
            optional = tuple(k for k in OPTIONAL_KINDS if k in wanted)
            cases = await build_cases(synth, per_category, seed=args.seed, optional=optional)
        finally:
            await synth.close()
    if args.kinds:
        wanted = set(args.kinds.split(","))
        unknown = wanted - {case.kind for case in cases}
        if unknown:
            parser.error(f"no cases of kind {', '.join(sorted(unknown))}")
        cases = [case for case in cases if case.kind in wanted]
    if args.cases:
        cases = [case for case in cases if case.id in set(args.cases.split(","))]
    random.Random(args.seed).shuffle(cases)  # categories mixed over the run
    details: dict[str, Any] = {}
    from proc_cpu import cpu_isa, python_speed

    speed, load = python_speed(), round(os.getloadavg()[0], 2)  # how fast and busy the machine was
    for kind in ("webrtc", "silero") if args.vad == "all" else (args.vad,):
        missing = silero_available() if kind == "silero" else None
        if missing:
            print(json.dumps({"bench": "turn_taking", "vad": kind, "skipped": missing}), flush=True)
            continue
        out = await run_vad(kind, cases, args, config)
        machine = {"machine_python_loop_ms": speed, "machine_cpu_isa": cpu_isa()}
        out["result"].update(**machine, load_average_before=load)
        print(json.dumps(out["result"]), flush=True)
        details[kind] = out["rows"]
    if args.details:
        args.details.write_text(json.dumps(details, indent=1, default=_plain))


if __name__ == "__main__":
    asyncio.run(main())
