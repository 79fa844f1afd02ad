"""The cascade's speaking side: one response's clauses synthesised in order on the playback clock.

A :class:`Speaker` takes clauses while the LLM is still streaming, synthesises them one after the
other with the agent's voice, and remembers when each one plays, so that a barge-in can record
in the history only the words the caller actually heard (:meth:`Speaker.spoken_until`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from voiceagent.conversation.core import words_heard
from voiceagent.conversation.events import Error, Event
from voiceagent.conversation.providers import TTSProvider
from voiceagent.conversation.specs import AgentSpec, VoiceSpec
from voiceagent.conversation.timing import TurnTiming

logger = logging.getLogger("voiceagent.conversation")


class SpeakerHost(Protocol):
    """What a speaker needs of its conversation."""

    session_id: str
    tts: TTSProvider
    active_rid: int | None
    playback_end: float

    def voice_for(self, agent: AgentSpec) -> VoiceSpec: ...

    def emit_audio(self, pcm: bytes, sample_rate: int, rid: int) -> float: ...

    async def emit(self, event: Event) -> None: ...

    def loop_time(self) -> float: ...


@dataclass
class Spoken:
    """A clause and when it plays (loop time)."""

    text: str
    start: float
    end: float


class Speaker:
    """Synthesises clauses in order for one response; tracks what is played when (playback clock)."""

    def __init__(self, conv: SpeakerHost, rid: int, timing: TurnTiming):
        self.conv = conv
        self.rid = rid
        self.timing = timing  # the turn this response belongs to (synthesis marks and usage)
        self.queue: asyncio.Queue[tuple[str, AgentSpec] | None] = asyncio.Queue(maxsize=32)
        self.spoken: list[Spoken] = []
        self.failed = False
        self.committed = False  # its words are in the history: never a second time
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"tts-{rid}")

    async def say(self, text: str, agent: AgentSpec) -> None:
        await self.queue.put((text, agent))

    async def finish(self) -> None:
        await self.queue.put(None)
        await self.task

    def cancel(self) -> None:
        self.task.cancel()

    def spoken_until(self, now: float) -> str:
        """The words actually played by ``now``: whole clauses, plus the played share of the current one."""
        words: list[str] = []
        for item in self.spoken:
            words.extend(words_heard(item.text.split(), item.start, item.end, now))
        return " ".join(words)

    def all_spoken(self) -> str:
        return " ".join(s.text for s in self.spoken)

    async def _run(self) -> None:
        conv = self.conv
        while True:
            item = await self.queue.get()
            if item is None:
                return
            text, agent = item
            if self.failed:
                continue
            voice = conv.voice_for(agent)
            start: float | None = None
            self.timing.mark("tts_request", conv.loop_time())
            self.timing.add("tts_chars", len(text))
            try:
                async for pcm in conv.tts.synthesize(text, voice):
                    if conv.active_rid != self.rid or not pcm:
                        continue
                    began = conv.emit_audio(pcm, conv.tts.sample_rate, self.rid)
                    if start is None:  # once per clause; the marks keep the response's first
                        start = began
                        now = conv.loop_time()
                        self.timing.mark("tts_first_audio", now)
                        self.timing.mark("first_audio_out", now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # TTS failure: the text still goes out, audio stops
                self.failed = True
                await conv.emit(
                    Error(conv.session_id, code="tts_error", message=f"speech synthesis failed: {exc}")
                )
                logger.warning("tts failed: %s", exc)
                continue
            if start is not None:
                self.spoken.append(Spoken(text, start, conv.playback_end))
            elif not self.failed:
                self.spoken.append(Spoken(text, conv.loop_time(), conv.loop_time()))
