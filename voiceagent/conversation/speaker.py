"""The cascade's speaking side: one response's clauses synthesised in order on the playback clock.

A :class:`Speaker` takes clauses while the LLM is still streaming, synthesises them one after the
other with the agent's voice, and remembers when each one plays, so that a barge-in can record
in the history only the words the caller actually heard (:meth:`Speaker.spoken_until`).

A speaker can be *held* (:meth:`Speaker.hold`): the caller talks over the agent and it stops
talking, but its answer is not abandoned yet. If what the caller said turns out to be noise or a
backchannel ("uh-huh"), :meth:`Speaker.resume` says the interrupted clause again from its start
and goes on; the history shows the interruption where it happened.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from voiceagent.conversation.core import words_heard
from voiceagent.conversation.events import Error, Event
from voiceagent.conversation.providers import TTSProvider
from voiceagent.conversation.specs import AgentSpec, VoiceSpec
from voiceagent.conversation.timing import TurnTiming

if TYPE_CHECKING:
    from voiceagent.conversation.head_start import ClauseAudio

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
    """A clause and when it plays (loop time); a ``note`` (an interruption that was resumed) is
    recorded whole, it was never spoken."""

    text: str
    start: float
    end: float
    agent: AgentSpec | None = None
    note: bool = False


DEFAULT_CHARS_PER_S = 14.0  # ~150 words a minute, until a conversation's own pace is measured


@dataclass
class SpeechPace:
    """How fast a conversation's voice speaks, measured on the clauses it played: the length of a
    clause still being synthesised (unknown until its synthesis ends) is estimated with it."""

    chars: int = 0
    seconds: float = 0.0

    def add(self, chars: int, seconds: float) -> None:
        if seconds > 0:
            self.chars += chars
            self.seconds += seconds

    def chars_per_s(self) -> float:
        return self.chars / self.seconds if self.seconds >= 1.0 else DEFAULT_CHARS_PER_S


class Speaker:
    """Synthesises clauses in order for one response; tracks what is played when (playback clock)."""

    def __init__(self, conv: SpeakerHost, rid: int, timing: TurnTiming, pace: SpeechPace | None = None):
        self.conv = conv
        self.pace = pace if pace is not None else SpeechPace()
        self.rid = rid
        self.timing = timing  # the turn this response belongs to (synthesis marks and usage)
        self.queue: asyncio.Queue[tuple[str, AgentSpec] | None] = asyncio.Queue(maxsize=32)
        self.spoken: list[Spoken] = []
        self.failed = False
        self.committed = False  # its words are in the history: never a second time
        self.held = False  # stopped by the caller, not abandoned (yet)
        self.by: str | None = None  # a person's line (a takeover): who
        self.cut = False  # stopped before the end of its last clause
        self.first_audio: float | None = None  # when its first audio plays (loop time)
        self._current: tuple[str, AgentSpec] | None = None  # the clause being synthesised
        self._current_start: float | None = None  # when its first audio plays (loop time)
        self._replay: list[tuple[str, AgentSpec]] = []  # clauses to say again on resume
        self.prepared: dict[str, ClauseAudio] = {}  # clauses whose speech was begun ahead (head_start.py)
        self._done = asyncio.get_running_loop().create_future()  # set when the last clause is out
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"tts-{rid}")

    async def say(self, text: str, agent: AgentSpec) -> None:
        await self.queue.put((text, agent))

    async def finish(self) -> None:
        """Wait until every clause said so far has been synthesised (a held speaker: until it is
        resumed and done, or cancelled)."""
        await self.queue.put(None)
        await asyncio.shield(self._done)

    def cancel(self) -> None:
        self.task.cancel()
        for audio in self.prepared.values():
            audio.cancel()
        if not self._done.done():
            self._done.cancel()

    def hold(self, now: float) -> bool:
        """The caller talks over the agent: stop synthesising; what was not heard by ``now`` (the
        clause playing, whatever came after it) is kept to be said again on :meth:`resume`. The
        caller of this purges the audio already queued. False when there was nothing left to say."""
        if self.held or self.committed:
            return False
        self.task.cancel()
        heard: list[Spoken] = []
        replay: list[tuple[str, AgentSpec]] = []
        for item in self.spoken:
            if item.note or now >= item.end:
                heard.append(item)
                continue
            if item.agent is not None:
                replay.append((item.text, item.agent))
            words = words_heard(item.text.split(), item.start, item.end, now)
            if words:  # the share of the interrupted clause the caller heard
                heard.append(Spoken(" ".join(words), item.start, now, None))
        if self._current is not None:
            words = self._current_heard(now)
            if words:  # the share of the clause still being synthesised the caller heard
                heard.append(Spoken(" ".join(words), self._current_start or now, now, None))
            replay.append(self._current)
            self._current = None
            self._current_start = None
        self.spoken = heard
        self._replay = replay + self._replay
        self.held = bool(self._replay) or not self._done.done()
        self.cut = self.held
        return self.held  # False: it had all played, nothing to stop

    def resume(self, note: str, now: float) -> None:
        """Not an interruption after all: say the interrupted clause again and go on. ``note``
        (what the caller said) goes into the history where the agent stopped."""
        if not self.held:
            return
        self.held = False
        self.cut = False
        self.spoken.append(Spoken(note, now, now, None, note=True))
        loop = asyncio.get_running_loop()
        if self._done.done():  # its response had finished: the replay is all that is left
            self._done = loop.create_future()
            self.queue.put_nowait(None)
        self.task = loop.create_task(self._run(), name=f"tts-{self.rid}")

    def when_done(self, callback: Callable[[], None]) -> None:
        """``callback()`` once every clause given so far has been synthesised (not if cancelled)."""
        self._done.add_done_callback(lambda f: None if f.cancelled() or f.exception() else callback())

    def spoken_until(self, now: float) -> str:
        """The words actually played by ``now``: whole clauses, plus the played share of the current one."""
        words: list[str] = []
        for item in self.spoken:
            if item.note:
                if item.start <= now:
                    words.append(item.text)
                continue
            words.extend(words_heard(item.text.split(), item.start, item.end, now))
        words.extend(self._current_heard(now))
        return " ".join(words)

    def _current_heard(self, now: float) -> list[str]:
        """The words of the clause still being synthesised that played by ``now``: its length is
        estimated at the conversation's pace (never shorter than the audio emitted so far), only
        audio already emitted counts, and never the whole clause (the rest may be yet to come)."""
        if self._current is None or self._current_start is None:
            return []
        text, start, emitted = self._current[0], self._current_start, self.conv.playback_end
        words = text.split()
        end = max(start + len(text) / self.pace.chars_per_s(), emitted)
        return words_heard(words, start, end, min(now, emitted))[: len(words) - 1]

    def played_by(self, now: float) -> bool:
        """Had any of its audio started playing by ``now``? (Its first clause may still be being
        synthesised, so not yet in :attr:`spoken`, or be cut before its first whole word.)"""
        return self.first_audio is not None and self.first_audio < now

    def all_spoken(self) -> str:
        return " ".join(s.text for s in self.spoken)

    async def _run(self) -> None:
        try:
            await self._speak_queued()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: whoever waits in finish() hears of it
            if not self._done.done():
                self._done.set_exception(exc)
            raise

    async def _speak_queued(self) -> None:
        conv = self.conv
        while True:
            if self._replay:
                item: tuple[str, AgentSpec] | None = self._replay.pop(0)
            else:
                item = await self.queue.get()
            if item is None:
                if not self._done.done():
                    self._done.set_result(None)
                return
            text, agent = item
            if self.failed:
                continue
            self._current = item
            voice = conv.voice_for(agent)
            start: float | None = None
            self.timing.mark("tts_request", conv.loop_time())
            self.timing.add("tts_chars", len(text))
            try:
                ahead = self.prepared.pop(text, None)
                again = lambda text=text, voice=voice: conv.tts.synthesize(text, voice)  # noqa: E731
                async for pcm in again() if ahead is None else ahead.stream(voice, again):
                    if conv.active_rid != self.rid or not pcm:
                        continue
                    began = conv.emit_audio(pcm, conv.tts.sample_rate, self.rid)
                    if start is None:  # once per clause; the marks keep the response's first
                        start = self._current_start = began
                        if self.first_audio is None:
                            self.first_audio = began
                        now = conv.loop_time()
                        self.timing.mark("tts_first_audio", now)
                        self.timing.mark("first_audio_out", now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # TTS failure: the text still goes out, audio stops
                self._current = None
                self._current_start = None
                self.failed = True
                # the reason stays in the log: a provider's text may name a file, a package, a host
                await conv.emit(Error(conv.session_id, code="tts_error", message="speech synthesis failed"))
                logger.warning("tts failed: %s", exc)
                continue
            self._current = None
            self._current_start = None
            if start is not None:
                self.spoken.append(Spoken(text, start, conv.playback_end, agent))
                self.pace.add(len(text), conv.playback_end - start)
            elif not self.failed:
                self.spoken.append(Spoken(text, conv.loop_time(), conv.loop_time(), agent))
