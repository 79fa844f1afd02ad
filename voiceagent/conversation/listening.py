"""The cascade's listening side: caller audio -> VAD -> utterances -> STT -> final transcripts.

A mixin of :class:`~voiceagent.conversation.engine.Conversation`. ``push_audio`` -> ``_feed`` ->
``_on_frame`` run inline for every 20 ms frame of every call, so they stay flat: no task hop,
queue or extra call per frame beyond the VAD. The utterance's task feeds a streaming STT and
judges the final text (:meth:`CascadeListening._heard`).

Turn-taking (settings: :mod:`voiceagent.conversation.turn_taking`):

- *Echo*: while the agent's audio plays, a speech frame much weaker than that audio is its echo
  (:mod:`voiceagent.conversation.echo`) and counts as silence.
- *Interruptions*: speech over the agent lasting ``min_interruption_ms`` (or an interim transcript
  with a word that is no backchannel) holds the agent's answer; the final transcript decides: noise
  or a backchannel resumes it, anything else abandons it and becomes the caller's turn. A shorter
  sound over the agent (a cough, a quick "yeah") never stops it.
- *End of turn*: the silence that ends an utterance adapts to what was said: the minimum
  (``VAD_SILENCE_TIMEOUT``) after a complete-sounding phrase, the maximum after an unfinished
  clause or a number being read. A recogniser that can (Whisper) is asked for a hypothesis at each
  pause, so the rule judges the words just said.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from voiceagent.conversation.capture_clock import CaptureClock
from voiceagent.conversation.core import CoreConfig
from voiceagent.conversation.echo import EchoReference
from voiceagent.conversation.end_of_turn import TurnModelListening
from voiceagent.conversation.events import Error, EventChannel, Transcript
from voiceagent.conversation.line_band import LineBand
from voiceagent.conversation.providers import STTProvider, STTStream
from voiceagent.conversation.specs import AgentSpec
from voiceagent.conversation.stream_gaps import FRAME_S, StreamGaps
from voiceagent.conversation.timing import TurnClock
from voiceagent.conversation.turn_taking import (
    BACKGROUND_MARGIN_DB,
    TurnTaking,
    is_backchannel,
    is_hallucination,
)
from voiceagent.conversation.utterance import InOrder as _InOrder
from voiceagent.conversation.utterance import Utterance as _Utterance
from voiceagent.speech.audio.levels import frame_dbfs

logger = logging.getLogger("voiceagent.conversation")


@dataclass
class ListeningConfig(CoreConfig):
    """How caller audio is framed and cut into utterances."""

    frame_ms: int = 20
    sample_rate: int = 16000  # what VAD and STT work at
    input_queue_frames: int = 500  # audio kept from before start() (10 s of 20 ms frames); oldest dropped
    preroll_frames: int = 15  # audio kept from before speech started (300 ms)
    max_utterance_frames: int = 3000  # 60 s
    pause_hint_ms: int = 100  # silence after which the recogniser is asked what was said so far
    turn_model_ms: int = 160  # silence after which the end-of-turn model hears the utterance


class VADLike(Protocol):
    def is_speech(self, frame: bytes) -> bool: ...


class AsyncVAD(VADLike, Protocol):
    """A VAD that judges off the loop's thread (Silero, batched: :mod:`voiceagent.speech.silero_batch`):
    ``submit`` hands it a frame and ``on_verdict(frame, speech)`` follows on the loop, in submission
    order, a few ms later. The listening side uses ``submit`` when the VAD has it."""

    def submit(self, frame: bytes, on_verdict: Callable[[bytes, bool], None]) -> None: ...


class CascadeListening(TurnModelListening, StreamGaps):
    """Caller audio to final transcripts (its state lives on the conversation)."""

    session_id: str
    config: ListeningConfig
    channel: EventChannel
    stt: STTProvider
    vad: VADLike
    closed: bool
    paused: bool
    turn_ended_at: float | None
    clock: TurnClock
    playback_end: float
    _current_agent: AgentSpec | None
    _held: Any
    _duck: Any

    if TYPE_CHECKING:  # the conversation's own (declared here only for type checkers)

        def loop_time(self) -> float: ...

        async def emit(self, event: Any) -> None: ...

        def _agent_busy(self) -> bool: ...

        def _barge_in(self, cause: str) -> None: ...

        def _hold_answer(self) -> bool: ...

        def _speech_over_agent(self, utterance: _Utterance) -> None: ...

        def _quiet_over_agent(self, utterance: _Utterance) -> None: ...

        def _over_agent_noise(self, utterance: _Utterance, text: str, logprob: float | None) -> bool: ...

        def _duck_decides(self, utterance: _Utterance) -> bool: ...

        def _restore_duck(self, of: _Utterance | None = None) -> None: ...

        def _resume_answer(self, heard: str) -> None: ...

        def turn_taking_for(self, agent: AgentSpec | None) -> TurnTaking: ...

        def _start_turn(self, text: str) -> None: ...

        def _begin_head_start(self, text: str, over_agent: bool) -> None: ...

        def _drop_head_start(self) -> None: ...

        def _drop_oldest(self, buffer: deque, what: str) -> None: ...

        def _caller_activity(self) -> None: ...

    def _init_listening(self) -> None:
        config = self.config
        self._early: deque[tuple[bytes, int]] = deque()  # audio pushed before start(), processed there
        self._listening = False
        self._utterance: _Utterance | None = None
        self._preroll: deque[bytes] = deque(maxlen=config.preroll_frames)
        self._silence_ms = 0
        self._frame_bytes = config.sample_rate * config.frame_ms // 1000 * 2
        self._resamplers: dict[int, Any] = {}
        self._chunk = bytearray()
        self._echo = EchoReference()
        self._line = LineBand(config.sample_rate)  # full band or a telephone line: how far doubt counts
        self._caller_db: float | None = None  # the caller's speaking level, learnt from their turns
        self._turn = TurnTaking()  # refreshed when listening begins and at each utterance
        self._endpoint_ms = self._turn.endpointing_min_ms
        self._vad_submit = getattr(self.vad, "submit", None)  # an AsyncVAD: verdicts come back later
        self._captured = CaptureClock()  # each frame's capture time: the echo gate's clock
        self._awaiting: deque[tuple[bytes, float]] = deque()  # frames the AsyncVAD judges, stamped

    def _begin_listening(self) -> None:
        """The session is open: process the audio pushed before, then each push at once."""
        early, self._early = self._early, deque()
        self._listening = True
        self._audio_arrived()  # the audio pushed before: as if it came now
        self._turn = self.turn_taking_for(self._current_agent)
        for pcm, rate in early:
            self._feed(pcm, rate)

    def push_audio(self, pcm: bytes, sample_rate: int = 16000) -> bool:
        """Caller audio (PCM16 mono), processed at once: resampled, framed, VAD, handed to the
        utterance. Synchronous and cheap (no task hop per frame: at hundreds of conversations a
        queue and a task wake-up per 20 ms frame cost more loop time than the VAD itself). Audio
        pushed before ``start()`` is kept (at most ``input_queue_frames`` chunks, oldest dropped)
        and processed when listening begins."""
        if self.closed or self.paused or not pcm:
            return False
        if not self._listening:
            if len(self._early) >= self.config.input_queue_frames:
                self._drop_oldest(self._early, "audio before the start is too long")
            self._early.append((pcm, sample_rate))
            return True
        self._audio_arrived()  # a gap in the audio is the caller's silence (StreamGaps)
        try:
            self._feed(pcm, sample_rate)
        except Exception:  # a bug here must not reach the transport nor deafen the session silently
            logger.exception("caller audio could not be processed")
            return False
        return True

    def _feed(self, pcm: bytes, rate: int) -> None:
        if rate != self.config.sample_rate:
            resampler = self._resamplers.get(rate)
            if resampler is None:  # 8 -> 16 kHz (a phone line) without soxr's 100 ms blocks
                from voiceagent.speech.audio import stream_resampler

                resampler = self._resamplers[rate] = stream_resampler(rate, self.config.sample_rate)
            pcm = resampler.process(pcm).tobytes()
        size = self._frame_bytes
        if not self._chunk and len(pcm) == size:  # the usual case: one whole frame, no copy
            self._on_frame(pcm)
            return
        self._chunk += pcm
        while len(self._chunk) >= size:
            frame = bytes(self._chunk[:size])
            del self._chunk[:size]
            self._on_frame(frame)

    def _on_frame(self, frame: bytes) -> None:
        if self.paused:
            return
        captured = self._captured.stamp(self.loop_time())
        if self._vad_submit is not None:
            awaiting = self._awaiting
            awaiting.append((frame, captured))
            self._vad_submit(frame, self._on_judged)  # judged off the loop: _on_judged follows
            if len(awaiting) > self.config.input_queue_frames:  # dropped by a VAD that is behind
                awaiting.popleft()
            return
        self._on_verdict(frame, self.vad.is_speech(frame), captured)

    def _on_judged(self, frame: bytes, voiced: bool) -> None:
        """An AsyncVAD's verdict: the frame's capture time is the one stamped when it came (the
        frames it dropped, being behind, are passed over)."""
        awaiting = self._awaiting
        while awaiting:
            sent, captured = awaiting.popleft()
            if sent is frame:
                break
        else:
            captured = self.loop_time()
        self._on_verdict(frame, voiced, captured)

    def _on_verdict(self, frame: bytes, voiced: bool, captured: float) -> None:
        """One frame with the VAD's verdict, in order: echo gate, utterance start and end, barge-in.
        ``captured``: when the caller's microphone took it (:mod:`.capture_clock`), for the gate."""
        if self.paused or self.closed:  # an AsyncVAD's verdict can land after a pause or the close
            return
        speech = voiced
        level = 0.0
        utterance = self._utterance
        gated = self._turn.echo_gate_db > 0.0
        if utterance is None and gated and self._echo.playing(captured):
            level = frame_dbfs(frame)  # the line between the caller's turns, under the agent: its echo
            agent = self._echo.observe(level, captured)
            if speech and self._echo.is_echo(level, captured, self._turn.echo_gate_db, agent):
                speech = False  # the agent's own voice coming back
        elif speech:
            level = frame_dbfs(frame)
            if self._echo.is_echo(level, captured, self._turn.echo_gate_db):
                speech = False
        if utterance is None:
            if not speech:
                self._preroll.append(frame)
                return
            self._turn = self.turn_taking_for(self._current_agent)
            self._endpoint_ms = self._turn.endpointing_min_ms
            utterance = self._utterance = _Utterance()
            for old in self._preroll:
                utterance.frames.put_nowait(old)
                utterance.pause.heard.append(old)
            self._preroll.clear()
            utterance.task = asyncio.get_running_loop().create_task(self._run_utterance(utterance))
            self._silence_ms = 0
            self._caller_activity()
            self._watch_for_gaps()
        if utterance.frames_in < self.config.max_utterance_frames:
            utterance.frames.put_nowait(frame)
            utterance.frames_in += 1
            utterance.pause.heard.append(frame)
        utterance.voiced_frames += voiced
        if not utterance.watched and self._held is None and self._agent_busy():
            self._watch_for_barge_in(utterance)
        if speech:
            if self._silence_ms:  # talking again: the model's answer and the head start are stale
                utterance.pause.spoke_again()
                self._drop_head_start()
            if self._silence_ms and utterance.hint_pending:  # talking again: that pause is over
                utterance.hint_pending = False
                utterance.pauses += 1
                self._endpoint_ms = self._endpoint_for(utterance)
            self._silence_ms = 0
            utterance.speech_frames += 1
            if self._line.wideband is None:
                self._line.observe(frame)  # any echo in it came back over the same line
            power = 10.0 ** (level / 10.0)
            utterance.power += power
            if self._held is None and self._agent_busy():  # talking over the agent
                utterance.over_agent_ms += self.config.frame_ms
                utterance.over_agent_power += power
                self._speech_over_agent(utterance)  # ducks the agent, then decides (ducking.py)
        else:
            self._silence_ms += self.config.frame_ms
            self._silent_frame(utterance, frame)
            if self._duck is not None:
                self._quiet_over_agent(utterance)
            if self._silence_ms == self.config.pause_hint_ms:
                self._ask_hypothesis(utterance)
            if self._silence_ms == self.config.turn_model_ms:
                self._ask_turn_model(utterance)
        if self._pause_over(utterance) or utterance.frames_in >= self.config.max_utterance_frames:
            self._end_utterance(utterance)

    def _end_utterance(self, utterance: _Utterance) -> None:
        if utterance.answered_pause == utterance.pauses and not utterance.hint_pending:
            utterance.final_text = utterance.text  # decoded in this very pause: the final transcript
        utterance.ended_in_pause = utterance.hint_pending  # no speech since it was asked: it hears all
        self.turn_ended_at = self.loop_time()  # the end-of-turn decision (latency metrics start here)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s", self._end_reason(utterance))
        heard_s = utterance.frames_in * self.config.frame_ms / 1000.0
        timing = self.clock.user_turn(self.turn_ended_at, speech=True, audio_s=heard_s)
        if utterance.final_text is not None and utterance.hint_asked_at is not None:
            # the final transcript was decoded in the pause, before the turn ended: that decode is
            # the speech-to-text time (final transcript - turn end would say ~0 ms)
            timing.pause_decode(utterance.hint_asked_at, utterance.hint_answered_at)
        utterance.frames.put_nowait(None)  # end of turn
        self._utterance = None
        self._silence_ms = 0

    def _watch_for_barge_in(self, utterance: _Utterance) -> None:
        """Sound over the agent: the recogniser's interims may decide a barge-in (a recognised
        word, when the echo gate holds the sound back), so they matter more than spare capacity."""
        if utterance.stream is None:  # still opening: asked again at the next frame
            return
        utterance.watched = True
        watch = getattr(utterance.stream, "watch_for_barge_in", None)
        if watch is not None:
            watch()

    def _ask_hypothesis(self, utterance: _Utterance) -> None:
        """A pause: ask the recogniser (when it can say) what was said so far; the turn does not
        end (before the maximum) until the answer is in."""
        if getattr(utterance.stream, "hint_pause", None) is None:
            return
        utterance.hint_pending = True
        self._endpoint_ms = max(self._endpoint_ms, self._turn.endpointing_max_ms)
        pause = utterance.pauses
        self._ask_in_order(utterance, lambda stream: self._hint(utterance, stream, pause))

    def _ask_in_order(self, utterance: _Utterance, ask: Callable[[STTStream], None]) -> None:
        """``ask(stream)`` on the utterance's task, once the stream has every frame queued so far."""
        utterance.frames.put_nowait(_InOrder(ask))

    def _hint(self, utterance: _Utterance, stream: STTStream, pause: int) -> None:
        """Ask for the hypothesis of ``pause`` now that the stream has all the audio before it."""
        if pause != utterance.pauses:
            return  # the caller spoke again: that pause is over (and no longer waited for)
        on_text = lambda text, logprob=None: self._on_pause_hypothesis(utterance, pause, text, logprob)  # noqa: E731
        utterance.hint_asked_at = self.loop_time()
        if stream.hint_pause(on_text):  # type: ignore[attr-defined]
            return
        utterance.hint_pending = False  # it cannot say (too little audio): the words so far decide
        if utterance is self._utterance:
            self._endpoint_ms = self._endpoint_for(utterance)
            if self._pause_over(utterance):
                self._end_utterance(utterance)

    def _on_pause_hypothesis(
        self, utterance: _Utterance, pause: int, text: str, logprob: float | None = None
    ) -> None:
        """What was said up to the pause: the silence that ends this turn follows from it."""
        if self.closed or utterance is not self._utterance or pause != utterance.pauses:
            return  # the turn already ended, or the caller spoke again since
        utterance.hint_pending = False
        utterance.text, utterance.logprob = text, logprob
        utterance.answered_pause = pause
        utterance.hint_answered_at = self.loop_time()
        self._endpoint_ms = self._endpoint_for(utterance)
        if self._pause_over(utterance):
            self._end_utterance(utterance)  # the pause was already long enough for these words
        else:  # the turn waits on: its answer begins meanwhile (head_start.py)
            self._begin_head_start(text, bool(utterance.over_agent_ms) or utterance.held)

    def _caller_speaking(self) -> bool:
        """An utterance is in progress (no re-prompt while the caller is talking)."""
        return self._utterance is not None

    def _fill_silence(self, frames: int) -> None:
        """A gap in the client's audio (StreamGaps): silent frames, until the turn ends on them."""
        silence = bytes(round(self.config.sample_rate * FRAME_S) * 2)
        for _ in range(frames):
            if self._utterance is None or self.closed:
                return
            self._feed(silence, self.config.sample_rate)

    def note_agent_audio(self, pcm: bytes, sample_rate: int, start: float) -> None:
        """Agent audio that plays from ``start``: the echo gate's reference."""
        if self._turn.echo_gate_db > 0.0:
            self._echo.add(pcm, sample_rate, start)

    async def _run_utterance(self, utterance: _Utterance) -> None:
        stream: STTStream | None = None
        try:
            stream = await self.stt.open(self.config.language, lambda text: self._on_interim(utterance, text))
            utterance.stream = stream
            while True:
                frame = await utterance.frames.get()
                if frame is None:
                    break
                if type(frame) is _InOrder:
                    frame.ask(stream)
                    continue
                await stream.push(frame)
            if utterance.final_text is not None:  # the pause's hypothesis heard it all: no second decode
                text = utterance.final_text.strip()
                await stream.cancel()
            elif utterance.ended_in_pause and hasattr(stream, "finish_at_pause"):
                text = (await stream.finish_at_pause()).strip()  # that pause's decode, as the final
                utterance.logprob = getattr(stream, "logprob", None)
            else:
                text = (await stream.finish()).strip()
                utterance.logprob = getattr(stream, "logprob", None)
            stream = None
        except asyncio.CancelledError:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.cancel()
            raise
        except Exception as exc:  # STT failure: report; the next utterance opens a fresh stream
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.cancel()
            await self.emit(
                Error(self.session_id, code="stt_error", message=f"speech recognition failed: {exc}")
            )
            logger.warning("stt failed: %s", exc)
            if utterance.held:  # nothing understood: the agent goes on
                self._resume_answer("")
            self._restore_duck(utterance)
            return
        if text:
            paused = utterance.ended_in_pause and utterance.final_text is None
            self.clock.transcribed(
                self.loop_time(), decode_started=utterance.hint_asked_at if paused else None
            )
            await self.emit(Transcript(self.session_id, text=text, final=True))
        self._heard(utterance, text)

    def _heard(self, utterance: _Utterance, text: str) -> None:
        """The caller's utterance is recognised: a turn, or - when it was said over the agent and is
        only noise or a backchannel - the agent goes on (resumed where it was held)."""
        noise = self._over_agent_noise(utterance, text, utterance.logprob)
        if utterance.held and self._held is not None:
            if not text or noise:
                self._resume_answer(text)
                return
        elif utterance.over_agent_ms and self._agent_busy() and (not text or noise):
            self._restore_duck(utterance)  # when it ducked the agent: full gain again
            return  # a short sound, background voices or an "uh-huh" while the agent speaks
        if text:
            if not utterance.over_agent_ms and utterance.speech_frames:
                self._learn_level(_db(utterance.power / utterance.speech_frames))
            self._start_turn(text)

    def _foreground(self, utterance: _Utterance) -> bool:
        """Is the speech over the agent the caller's own voice, not voices in the room behind them?
        Judged by level against the caller's turns so far (unknown until the first one: yes)."""
        if self._caller_db is None or not utterance.over_agent_ms:
            return True
        frames = utterance.over_agent_ms // self.config.frame_ms
        return _db(utterance.over_agent_power / frames) >= self._caller_db - BACKGROUND_MARGIN_DB

    def _learn_level(self, level_db: float) -> None:
        """The caller's speaking level (dBFS), from the turns they took while the agent listened."""
        known = self._caller_db
        self._caller_db = level_db if known is None else 0.7 * known + 0.3 * level_db

    def _on_interim(self, utterance: _Utterance, text: str) -> None:
        if self.closed:
            return
        if text:
            self.channel.put_nowait(Transcript(self.session_id, text=text, final=False))
        if utterance is self._utterance and text:
            if utterance.answered_pause != utterance.pauses:  # older than this pause's own answer
                utterance.text, utterance.logprob = text, None
            if not utterance.hint_pending:  # a pause's own answer is on its way: it decides
                self._endpoint_ms = self._endpoint_for(utterance)
            if (
                utterance.over_agent_ms
                and self._held is None
                and text
                and not self._duck_decides(utterance)
                and not is_backchannel(text)
                and not is_hallucination(text, utterance.voiced_frames * self.config.frame_ms)
                and self._foreground(utterance)
            ):
                utterance.held = self._hold_answer()  # a recognised word over the agent
            if self._pause_over(utterance):
                self._end_utterance(utterance)  # the pause was already long enough for these words

    def _cancel_utterance(self) -> None:
        if self._utterance is not None and self._utterance.task is not None:
            self._utterance.task.cancel()
        self._utterance = None
        self._silence_ms = 0


def _db(power: float) -> float:
    return 10.0 * math.log10(power) if power > 0.0 else -100.0
