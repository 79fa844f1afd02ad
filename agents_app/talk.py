"""``manage.py talk``: a conversation with the agents in the terminal, on the service's own engine.

Why it reuses the agent tests' in-process target (:class:`~agents_app.evals.engine_target.
EngineTarget`): that is already the engine exactly as a socket drives it (the runtime's providers
started as the startup steps start them, a conversation from ``runtime.new_conversation``, its
events turned into the service's envelope messages, history written by the session store), so
what an operator sees here is what a caller gets, and the session is stored like any other.

Input, in this order: each ``--wav`` file as one caller utterance (resampled to 16 kHz, heard by
the configured recogniser), then typed lines from standard input until its end (``/dtmf 12#``
sends keypad digits, ``/quit`` ends early), or, with ``--mic``, the microphone until Ctrl-C.
Output: one line per transcript, agent line, tool call, handoff, error and turn timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from agents_app.conversation_view import STAGE_LABELS, stt_stage

__all__ = ["TalkError", "TalkOptions", "format_message", "read_wav", "resolve_start", "talk"]

MAX_WAV_S = 120.0  # one utterance; longer files are refused before the conversation starts


class TalkError(Exception):
    """A problem with the options or files: said in one line, exit status 2."""


@dataclass
class TalkOptions:
    scenario: str | None = None
    agent: str | None = None
    wavs: list[Path] = field(default_factory=list)
    mic: bool = False
    seed: int | None = None


def resolve_start(scenario: str | None, agent: str | None) -> tuple[str, str | None]:
    """(scenario, agent) to start with: the named scenario (``default`` when none is named, or
    the first one that has ``agent``); the agent must be one of the scenario's."""
    from agents_app.catalog import catalog

    known = sorted(catalog.scenarios)
    if scenario:
        spec = catalog.scenario(scenario)
        if spec is None:
            raise TalkError(f"unknown scenario {scenario!r} (known: {', '.join(known) or 'none'})")
    elif agent:
        having = [s for s in catalog.scenarios.values() if agent.lower() in (a.lower() for a in s.agents)]
        having.sort(key=lambda s: (s.name != "default", s.name))
        if not having:
            raise TalkError(f"no scenario has an agent {agent!r}")
        spec = having[0]
    else:
        spec = catalog.scenario("default") or next(iter(catalog.scenarios.values()), None)
        if spec is None:
            raise TalkError("no scenario is loaded")
    if agent:
        names = {a.lower(): a for a in spec.agents}
        if agent.lower() not in names:
            raise TalkError(
                f"agent {agent!r} is not in scenario {spec.name!r} (its agents: {', '.join(spec.agents)})"
            )
        agent = names[agent.lower()]
    return spec.name, agent


def read_wav(path: Path) -> bytes:
    """A WAV file (PCM 8/16/32-bit, any rate, mono or more channels mixed down) as 16 kHz PCM16
    mono, resampled with the service's resampler."""
    from voiceagent.speech.audio import resample_file

    try:
        with wave.open(str(path), "rb") as wav:
            rate, width, channels = wav.getframerate(), wav.getsampwidth(), wav.getnchannels()
            frames = wav.getnframes()
            if frames / max(rate, 1) > MAX_WAV_S:
                raise TalkError(f"{path}: longer than {MAX_WAV_S:g} s (one utterance per file)")
            raw = wav.readframes(frames)
    except (OSError, EOFError, wave.Error) as exc:
        raise TalkError(f"{path}: not a readable PCM WAV file ({exc})") from None
    if width == 1:
        samples = (np.frombuffer(raw, np.uint8).astype(np.int32) - 128) << 8
    elif width == 2:
        samples = np.frombuffer(raw, "<i2").astype(np.int32)
    elif width == 4:
        samples = np.frombuffer(raw, "<i4").astype(np.int64) >> 16
    else:
        raise TalkError(f"{path}: {8 * width}-bit samples are not supported (8, 16 or 32)")
    if channels > 1:
        samples = samples[: len(samples) - len(samples) % channels].reshape(-1, channels).mean(axis=1)
    mono = np.clip(samples, -32768, 32767).astype(np.int16)
    try:
        return resample_file(mono, rate, 16000).astype("<i2").tobytes()
    except ValueError as exc:
        raise TalkError(f"{path}: {exc}") from None


def _ms(value: Any) -> str:
    return f"{value:.0f} ms" if isinstance(value, int | float) else "—"


def _timings(latency: dict[str, Any]) -> str:
    stt = stt_stage(latency)  # what speech to text really measured (the pause decode, or after)
    parts = [f"{stt[1]} {_ms(stt[2])}" if stt else "speech to text —"]
    for key, label in STAGE_LABELS[1:]:
        parts.append(f"{label} {_ms(latency.get(key))}")
    for tool in latency.get("tools") or []:
        parts.append(f"tool {tool.get('name')} {_ms(tool.get('ms'))}")
    if latency.get("handoff") is not None:
        parts.append(f"handoff {_ms(latency['handoff'])}")
    return " · ".join(parts)


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_message(message: dict[str, Any]) -> str | None:
    """One server message as a terminal line; ``None`` for what is not worth a line."""
    kind, p = message.get("type"), message.get("payload") or {}
    if kind == "transcript" and p.get("final"):
        return f"caller: {p.get('text', '')}"
    if kind == "response" and p.get("final"):
        by = f" (by {p['by']})" if p.get("by") else ""
        return f"{p.get('agent') or 'agent'}{by}: {p.get('text', '')}"
    if kind == "turn_metrics":
        return f"  timings: {_timings(p.get('latency_ms') or {})}"
    if kind == "error":
        return f"  error {p.get('code')}: {p.get('message')}"
    if kind != "event":
        return None
    name = p.get("name")
    if name == "tool_call":
        ok = "" if p.get("ok", True) else " FAILED"
        return (
            f"  tool {p.get('tool')}({_short(p.get('args') or {})}) -> {_short(p.get('result'))}"
            f" [{_ms(p.get('duration_ms'))}]{ok}"
        )
    if name == "handoff":
        return f"  handoff {p.get('from')} -> {p.get('to')} ({p.get('type')}, tool {p.get('tool')})"
    if name == "barge_in":
        return "  (barge-in: the agent stopped)"
    if name == "state" and p.get("state") == "ended":
        return "  (the conversation ended)"
    if name in ("transfer_requested", "takeover", "handback"):
        return f"  ({name})"
    return None


def _printer(write: Callable[[str], None]) -> Callable[[dict[str, Any]], None]:
    def on_message(message: dict[str, Any]) -> None:
        line = format_message(message)
        if line is not None:
            write(line)

    return on_message


async def _typed(target: Any, stream: IO[str], write: Callable[[str], None]) -> None:
    """Typed lines until the end of input, ``/quit`` or the end of the conversation."""
    from agents_app.evals.observe import CallerTurn

    interactive = bool(getattr(stream, "isatty", lambda: False)())
    while True:
        if interactive:
            write("> ")
        line = await asyncio.to_thread(stream.readline)
        if not line:
            return
        text = line.strip()
        if not text:
            continue
        if text == "/quit":
            return
        if text.startswith("/dtmf"):
            turn = CallerTurn(dtmf=text.removeprefix("/dtmf").strip())
        else:
            turn = CallerTurn(say=text)
        if (await target.turn(turn)).ended:
            return


async def talk(options: TalkOptions, stdin: IO[str], write: Callable[[str], None]) -> str:
    """Run one conversation; returns its session id (stored like any other)."""
    from asgiref.sync import sync_to_async

    from agents_app.evals.engine_target import EngineTarget, load_definitions, start_engine, stop_engine
    from agents_app.talk_audio import Microphone, NoSoundDevice, Speaker

    audio = [read_wav(path) for path in options.wavs]  # bad files are refused before anything runs
    try:
        mic = Microphone.open() if options.mic else None
        speaker = Speaker.open() if options.mic else None
    except NoSoundDevice as exc:
        raise TalkError(str(exc)) from None
    await load_definitions()
    scenario, agent = await sync_to_async(resolve_start)(options.scenario, options.agent)
    session_id = ""
    await start_engine()
    try:
        target = EngineTarget(
            transport=None,
            session_prefix="talk",
            realtime=mic is not None,
            on_message=_printer(write),
            on_audio=speaker.play if speaker is not None else None,
        )
        try:
            session_id = await target.open(scenario, seed=options.seed, variables={}, agent=agent)
            write(f"-- session {session_id} · scenario {scenario}")
            ended = (await target.greeting()).ended
            for path, pcm in zip(options.wavs, audio, strict=True):
                if ended:
                    break
                write(f"-- {path.name} ({len(pcm) / 32000:.1f} s of speech)")
                ended = (await target.speak(pcm)).ended
            if not ended:
                if mic is not None:
                    write("-- listening on the microphone (Ctrl-C ends)")
                    await mic.run(target)
                else:
                    await _typed(target, stdin, write)
        finally:
            with contextlib.suppress(Exception):
                await target.close()
            if speaker is not None:
                speaker.close()
    finally:
        await stop_engine()  # the history reaches the database
    write(f"-- stored as session {session_id} (GET /api/v1/sessions/{session_id}, or the admin's Sessions)")
    return session_id
