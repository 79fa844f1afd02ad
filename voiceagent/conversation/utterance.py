"""A caller's utterance while it is heard, and the questions put to its recogniser in order
(:mod:`voiceagent.conversation.listening` drives both)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from voiceagent.conversation.end_of_turn import PauseModel
from voiceagent.conversation.providers import STTStream

__all__ = ["InOrder", "Utterance"]


@dataclass(frozen=True)
class InOrder:
    """In an utterance's frame queue: a question for the recogniser (what was said so far?), asked
    once it has every frame queued before this one. The frames reach it on the utterance's task,
    behind the VAD: a burst of frames (a loaded loop, a network batch, a batched VAD's verdicts)
    would otherwise leave the last words out of a hypothesis that may become the final transcript
    or decide an interruption."""

    ask: Callable[[STTStream], None]


@dataclass
class Utterance:
    """One caller utterance as it is heard: its frames (to the recogniser, on its own task), what
    the VAD and the level said of them, its pauses and what the recogniser made of each."""

    frames: asyncio.Queue = field(default_factory=lambda: asyncio.Queue())
    task: asyncio.Task | None = None
    stream: STTStream | None = None
    frames_in: int = 0
    over_agent_ms: int = 0  # speech while the agent was busy
    over_agent_power: float = 0.0  # the sum of those frames' mean power (full scale = 1)
    power: float = 0.0  # the sum of all its speech frames' mean power
    speech_frames: int = 0
    voiced_frames: int = 0  # frames the VAD called speech, echo-gated or not: what words can fill
    held: bool = False  # it held the agent's answer
    hint_pending: bool = False  # a hypothesis for the current pause was asked for
    pauses: int = 0  # pauses so far (an answer for an earlier one is stale)
    text: str = ""  # the latest hypothesis
    logprob: float | None = None  # the recogniser's confidence in it, when it says (pauses)
    answered_pause: int = -1  # the pause whose hypothesis ``text`` is (it covers all the speech)
    final_text: str | None = None  # that hypothesis, when the turn ended in that pause
    hint_asked_at: float | None = None  # loop time the current pause's hypothesis was asked for
    hint_answered_at: float | None = None  # and when it came (the decode ``text`` is the result of)
    ended_in_pause: bool = False  # the turn ended while that pause's hypothesis was on its way
    watched: bool = False  # its stream was told the caller speaks over the agent
    pause: PauseModel = field(default_factory=PauseModel)  # the turn model's audio and answer
