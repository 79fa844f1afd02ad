"""A local realtime-voice API for tests and benchmarks: the real event protocol over WebSockets.

It serves both dialects of the realtime event protocol on 127.0.0.1, each at the path its SDK
builds:

* Azure VoiceLive (beta event names): ``/voice-live/realtime?api-version=...&model=...``, key in the
  ``api-key`` header (or a bearer token). ``azure.ai.voicelive.aio.connect(endpoint="http://127.0.0.1:PORT")``
  maps http -> ws and appends that path.
* OpenAI Realtime GA: ``/v1/realtime?model=...``, ``Authorization: Bearer <key>``.
  ``openai.AsyncOpenAI(base_url="http://127.0.0.1:PORT/v1").realtime.connect(model=...)`` appends
  ``/realtime`` to the base URL and maps http -> ws.

What it does, like the service:

* ``session.created`` on connect; ``session.update`` is checked against the dialect's session
  shape (unknown parameters, and on GA a missing ``type: "realtime"``, answer an ``error`` event,
  as does a GA voice change after audio was produced) and answered ``session.updated``.
* Server VAD over the appended audio (PCM16 at the session's input rate): a sample above
  :attr:`RealtimePeer.speech_level` starts speech (``input_audio_buffer.speech_started``);
  ``silence_duration_ms`` of quiet (counted in samples, so tests are deterministic) ends it:
  ``speech_stopped``, ``committed``, the user item, the input transcription (``delta`` then
  ``completed``, the text from :meth:`RealtimePeer.user_says`), then, with
  ``turn_detection.create_response`` (default true), a response. With ``interrupt_response``
  (default true) speech stops the streaming response as ``response.cancel`` would
  (:attr:`PeerConnection.interrupted` counts them). ``turn_detection`` is checked per dialect and
  type (:data:`TURN_DETECTION_KEYS`; VoiceLive's ``end_of_utterance_detection`` is refused with a
  ``*realtime*`` model, as the service documents).
* ``response.create`` starts a response. With ``response.instructions`` holding a quoted line (how
  the live engine asks for a greeting), the response says that line; otherwise it plays the next
  scripted entry (:meth:`RealtimePeer.push`), or :attr:`RealtimePeer.default`.
* Scripted entries: :class:`Say` (audio deltas each followed by a transcript delta, then the done
  events), :class:`Call` / a list of them (function calls: output item, argument deltas,
  ``response.function_call_arguments.done``), :class:`Drop` (the connection is cut mid-response),
  :class:`Fail` (a failed ``response.done``).
* ``response.cancel`` stops the streaming response; ``Say.late_deltas`` audio deltas still follow
  (as on the real service, where some are in flight), then ``response.done`` with status
  ``cancelled``. A cancel with no active response answers the ``response_cancel_not_active`` error.
* ``conversation.item.create`` / ``.truncate`` / ``.delete`` are acknowledged
  (``conversation.item.created`` or ``.added`` on GA, ``conversation.item.truncated``,
  ``conversation.item.deleted``; deleting an unknown item answers ``item_not_found``).

Every client event is recorded with its connection (:meth:`RealtimePeer.received`), as are the
handshake's path, query and headers (:attr:`RealtimePeer.connections`).

In-process (tests)::

    with RealtimePeer(api_key="k") as peer:
        peer.user_says("what is my balance")
        peer.push(Call("lookup", {"account": "1"}), Say("Your balance is 42."))

As its own process (benchmarks; prints ``READY <port>``)::

    python tests/support/realtime_peer.py --port 0 --processes 2 --chunks 10 --chunk-ms 100 --interval 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import json
import multiprocessing
import re
import signal
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import numpy as np
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

__all__ = ["Call", "Drop", "Fail", "PeerConnection", "RealtimePeer", "Say"]

RATE = 24000
VOICELIVE_PATH = "/voice-live/realtime"
OPENAI_PATH = "/v1/realtime"

NAMES = {
    "voicelive": {
        "audio.delta": "response.audio.delta",
        "audio.done": "response.audio.done",
        "transcript.delta": "response.audio_transcript.delta",
        "transcript.done": "response.audio_transcript.done",
        "item.created": "conversation.item.created",
    },
    "openai": {
        "audio.delta": "response.output_audio.delta",
        "audio.done": "response.output_audio.done",
        "transcript.delta": "response.output_audio_transcript.delta",
        "transcript.done": "response.output_audio_transcript.done",
        "item.created": "conversation.item.added",
    },
}
SESSION_KEYS = {
    "voicelive": {
        "model",
        "modalities",
        "instructions",
        "voice",
        "input_audio_format",
        "output_audio_format",
        "input_audio_sampling_rate",
        "turn_detection",
        "input_audio_transcription",
        "input_audio_noise_reduction",
        "input_audio_echo_cancellation",
        "tools",
        "tool_choice",
        "temperature",
        "max_response_output_tokens",
        "animation",
        "avatar",
    },
    "openai": {
        "type",
        "model",
        "instructions",
        "output_modalities",
        "audio",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "include",
        "prompt",
        "tracing",
        "truncation",
        "parallel_tool_calls",
        "reasoning",
    },
}
# turn_detection parameters per dialect and type (others answer unknown_parameter, as the services do)
_VAD = {"type", "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response"}
_VAD.add("interrupt_response")
_AZURE_VAD = _VAD | {"end_of_utterance_detection", "auto_truncate", "idle_timeout_ms", "speech_duration_ms"}
TURN_DETECTION_KEYS = {
    "openai": {
        "server_vad": _VAD | {"idle_timeout_ms"},
        "semantic_vad": {"type", "eagerness", "create_response", "interrupt_response"},
    },
    "voicelive": {
        "server_vad": _AZURE_VAD,
        **{
            kind: _AZURE_VAD | {"remove_filler_words", "languages"}
            for kind in ("azure_semantic_vad", "azure_semantic_vad_en", "azure_semantic_vad_multilingual")
        },
    },
}
EOU_MODELS = {"semantic_detection_v1", "semantic_detection_v1_en", "semantic_detection_v1_multilingual"}
QUOTED = re.compile(r'"(.+)"', re.S)


# --------------------------------------------------------------------------------------------------
# Scripted responses
# --------------------------------------------------------------------------------------------------


@dataclass
class Say:
    """An audio answer: ``chunks`` audio deltas (``audio_ms`` in all), each with a transcript delta."""

    text: str
    chunks: int = 3
    audio_ms: int = 300
    interval: float = 0.0  # seconds between chunks
    late_deltas: int = 2  # audio deltas still sent after response.cancel
    transcript_lag: int = 0  # each transcript delta trails its audio by this many chunks (as on the service)
    level: int = 300  # amplitude of the (tone) audio


@dataclass
class Call:
    """A function call; a list of them is one response with several calls."""

    name: str
    arguments: dict | str = field(default_factory=dict)
    call_id: str | None = None

    @property
    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class Drop:
    """Cut the TCP connection after ``after`` chunks of ``say`` (0: right after response.created)."""

    say: Say | None = None
    after: int = 1


@dataclass
class Fail:
    """``response.done`` with status ``failed`` and the error in ``status_details``."""

    code: str = "server_error"
    message: str = "The server had an error while processing your request."


Scripted = Say | Call | list | Drop | Fail


def split_words(text: str, parts: int) -> list[str]:
    """``text`` in at most ``parts`` pieces at word boundaries (pieces keep their spaces)."""
    words = text.split(" ")
    parts = max(1, min(parts, len(words)))
    size, extra = divmod(len(words), parts)
    pieces, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        piece = " ".join(words[start:end])
        pieces.append(piece + (" " if end < len(words) else ""))
        start = end
    return [p for p in pieces if p]


def tone(ms: float, level: int, rate: int = RATE) -> bytes:
    n = int(rate * ms / 1000)
    return (np.sin(np.arange(n) * 2 * np.pi * 220 / rate) * level).astype("<i2").tobytes()


# --------------------------------------------------------------------------------------------------
# One connection
# --------------------------------------------------------------------------------------------------


@dataclass
class _Response:
    id: str
    task: asyncio.Task | None = None
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)


class PeerConnection:
    """The service side of one realtime WebSocket."""

    def __init__(self, peer: RealtimePeer, ws: ServerConnection, index: int):
        self.peer = peer
        self.ws = ws
        self.index = index
        path, _, query = ws.request.path.partition("?")
        self.path = path
        self.query = {k: v[0] for k, v in parse_qs(query).items()}
        self.headers = {k.lower(): v for k, v in ws.request.headers.raw_items()}
        self.dialect = "voicelive" if path == VOICELIVE_PATH else "openai"
        self.names = NAMES[self.dialect]
        self.session: dict[str, Any] = {}
        self.received: list[dict] = []
        self.response: _Response | None = None
        self.audio_sent = False
        self.closed = False
        self._ids = itertools.count(1)
        self._samples = 0  # input samples so far
        self._speech_since: int | None = None
        self._quiet = 0
        self._last_item: str | None = None
        self.interrupted = 0  # responses the service stopped itself (turn_detection.interrupt_response)
        self.items: set[str] = set()  # conversation items (created, committed, deleted)

    # --- helpers ------------------------------------------------------------------------------------
    def _id(self, prefix: str) -> str:
        return f"{prefix}_{self.index}_{next(self._ids)}"

    async def emit(self, event: dict) -> None:
        event.setdefault("event_id", self._id("event"))
        if not self.closed:
            await self.ws.send(json.dumps(event))

    def _input_rate(self) -> int:
        if self.dialect == "voicelive":
            return int(self.session.get("input_audio_sampling_rate") or RATE)
        return RATE

    def _turn_detection(self) -> dict:
        if self.dialect == "voicelive":
            return self.session.get("turn_detection") or {}
        return ((self.session.get("audio") or {}).get("input") or {}).get("turn_detection") or {}

    def _voice(self) -> Any:
        if self.dialect == "voicelive":
            return self.session.get("voice")
        return ((self.session.get("audio") or {}).get("output") or {}).get("voice")

    async def error(self, code: str, message: str, kind: str = "invalid_request_error", **extra: Any) -> None:
        await self.emit({"type": "error", "error": {"type": kind, "code": code, "message": message, **extra}})

    # --- the client's events ------------------------------------------------------------------------
    async def run(self) -> None:
        await self.emit(
            {"type": "session.created", "session": {"id": self._id("sess"), "model": self.query.get("model")}}
        )
        try:
            async for message in self.ws:
                event = json.loads(message)
                self.received.append(event)
                self.peer._record(self, event)
                handler = getattr(self, "on_" + event.get("type", "").replace(".", "_"), None)
                if handler is None:
                    await self.error("unknown_event", f"unknown client event {event.get('type')!r}")
                else:
                    await handler(event)
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            if self.response is not None and self.response.task is not None:
                self.response.task.cancel()

    def _turn_detection_problem(self, session: dict) -> str | None:
        """Why the session's turn_detection would be refused (None: it is accepted)."""
        if self.dialect == "voicelive":
            where, detection = "session.turn_detection", session.get("turn_detection")
        else:
            where = "session.audio.input.turn_detection"
            detection = ((session.get("audio") or {}).get("input") or {}).get("turn_detection")
        if not detection:
            return None
        keys = TURN_DETECTION_KEYS[self.dialect].get(detection.get("type"))
        if keys is None:
            return f"Invalid value: '{detection.get('type')}' for {where}.type."
        unknown = sorted(set(detection) - keys)
        if unknown:
            return f"Unknown parameter: '{where}.{unknown[0]}'."
        eou = detection.get("end_of_utterance_detection")
        if eou is not None:
            if eou.get("model") not in EOU_MODELS:
                return f"Invalid value for {where}.end_of_utterance_detection.model."
            if "realtime" in str(self.query.get("model") or ""):  # documented: not for these models
                return "End of utterance detection is not supported by this model."
        return None

    async def on_session_update(self, event: dict) -> None:
        session = event.get("session") or {}
        unknown = sorted(set(session) - SESSION_KEYS[self.dialect])
        if unknown:
            await self.error("unknown_parameter", f"Unknown parameter: 'session.{unknown[0]}'.")
            return
        problem = self._turn_detection_problem(session)
        if problem:
            await self.error("invalid_value", problem)
            return
        if self.dialect == "openai":
            if session.get("type") != "realtime":
                await self.error("missing_required_parameter", "Missing required parameter: 'session.type'.")
                return
            new_voice = ((session.get("audio") or {}).get("output") or {}).get("voice")
            if new_voice is not None and self.audio_sent and new_voice != self._voice():
                await self.error(
                    "cannot_update_voice",
                    "Cannot update a conversation's voice if assistant audio is present.",
                )
                return
            merged = {**self.session, **session}
            if "audio" in session:  # audio.input / audio.output merge one level deep
                audio = dict(self.session.get("audio") or {})
                for part, value in session["audio"].items():
                    audio[part] = {**(audio.get(part) or {}), **value}
                merged["audio"] = audio
            self.session = merged
        else:
            self.session = {**self.session, **session}
        await self.emit({"type": "session.updated", "session": self.session})

    async def on_input_audio_buffer_append(self, event: dict) -> None:
        try:
            data = base64.b64decode(event.get("audio") or "", validate=True)
        except ValueError:
            data = b"\x00"
        if len(data) % 2:
            await self.error("invalid_value", "Invalid 'audio': not base64-encoded PCM16.")
            return
        pcm = np.frombuffer(data, dtype="<i2")
        rate = self._input_rate()
        loud = bool(pcm.size) and int(np.abs(pcm).max()) > self.peer.speech_level
        start = self._samples
        self._samples += pcm.size
        if self._speech_since is None:
            if loud:
                self._speech_since = start
                self._quiet = 0
                self._last_item = self._id("item")
                await self.emit(
                    {
                        "type": "input_audio_buffer.speech_started",
                        "audio_start_ms": start * 1000 // rate,
                        "item_id": self._last_item,
                    }
                )
                if self.response is not None and self._turn_detection().get("interrupt_response", True):
                    self.response.cancelled.set()  # the service stops its own answer
                    self.interrupted += 1
            return
        self._quiet = 0 if loud else self._quiet + pcm.size
        silence_ms = int(self._turn_detection().get("silence_duration_ms") or 500)
        if self._quiet * 1000 >= silence_ms * rate:
            self._speech_since = None
            await self._end_of_speech(self._samples * 1000 // rate)

    async def _end_of_speech(self, end_ms: int) -> None:
        item_id = self._last_item or self._id("item")
        await self.emit(
            {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": end_ms, "item_id": item_id}
        )
        await self.emit(
            {"type": "input_audio_buffer.committed", "item_id": item_id, "previous_item_id": None}
        )
        item = {
            "id": item_id,
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_audio", "transcript": None}],
        }
        await self.emit({"type": self.names["item.created"], "previous_item_id": None, "item": item})
        self.items.add(item_id)
        text = self.peer._next_user_text()
        transcription = bool(
            self.session.get("input_audio_transcription")
            if self.dialect == "voicelive"
            else ((self.session.get("audio") or {}).get("input") or {}).get("transcription")
        )
        if transcription:
            head = text.split(" ")[0] if text else ""
            for delta in [head, text[len(head) :]] if head and head != text else [text]:
                await self.emit(
                    {
                        "type": "conversation.item.input_audio_transcription.delta",
                        "item_id": item_id,
                        "content_index": 0,
                        "delta": delta,
                    }
                )
            await self.emit(
                {
                    "type": "conversation.item.input_audio_transcription.completed",
                    "item_id": item_id,
                    "content_index": 0,
                    "transcript": text,
                }
            )
        if self._turn_detection().get("create_response", True):
            await self._start_response(self.peer._next_script(None))

    async def on_input_audio_buffer_commit(self, event: dict) -> None:
        await self.emit({"type": "input_audio_buffer.committed", "item_id": self._id("item")})

    async def on_input_audio_buffer_clear(self, event: dict) -> None:
        self._speech_since = None
        await self.emit({"type": "input_audio_buffer.cleared"})

    async def on_conversation_item_create(self, event: dict) -> None:
        item = dict(event.get("item") or {})
        item.setdefault("id", self._id("item"))
        self.items.add(item["id"])
        await self.emit({"type": self.names["item.created"], "previous_item_id": None, "item": item})

    async def on_conversation_item_delete(self, event: dict) -> None:
        item_id = event.get("item_id")
        if item_id not in self.items:
            await self.error("item_not_found", f"Item with item_id not found: {item_id}.")
            return
        self.items.discard(item_id)
        await self.emit({"type": "conversation.item.deleted", "item_id": item_id})

    async def on_conversation_item_truncate(self, event: dict) -> None:
        await self.emit(
            {
                "type": "conversation.item.truncated",
                "item_id": event.get("item_id"),
                "content_index": event.get("content_index", 0),
                "audio_end_ms": event.get("audio_end_ms"),
            }
        )

    async def on_response_create(self, event: dict) -> None:
        if self.response is not None:
            await self.error(
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress: {self.response.id}.",
            )
            return
        instructions = (event.get("response") or {}).get("instructions") or ""
        await self._start_response(self.peer._next_script(instructions))

    async def on_response_cancel(self, event: dict) -> None:
        if self.response is None:
            await self.error("response_cancel_not_active", "Cancellation failed: no active response found")
            return
        self.response.cancelled.set()

    # --- responses -------------------------------------------------------------------------------------
    async def _start_response(self, script: Scripted) -> None:
        response = self.response = _Response(self._id("resp"))
        response.task = asyncio.get_running_loop().create_task(self._respond(response, script))

    async def _respond(self, response: _Response, script: Scripted) -> None:
        rid = response.id
        status, output = "completed", []
        try:
            await self.emit(
                {
                    "type": "response.created",
                    "response": {
                        "id": rid,
                        "object": "realtime.response",
                        "status": "in_progress",
                        "output": [],
                    },
                }
            )
            if isinstance(script, Drop):
                if script.say is not None and script.after > 0:
                    await self._say(response, script.say, stop_after=script.after)
                await asyncio.sleep(0.01)
                self.ws.transport.abort()
                return
            details = None
            if isinstance(script, Fail):
                status = "failed"
                details = {
                    "type": "failed",
                    "error": {"type": "server_error", "code": script.code, "message": script.message},
                }
            elif isinstance(script, Say):
                status, item = await self._say(response, script)
                output.append(item)
            else:
                calls = script if isinstance(script, list) else [script]
                for index, call in enumerate(calls):
                    output.append(await self._call(rid, index, call))
            done = {"id": rid, "object": "realtime.response", "status": status, "output": output}
            done["usage"] = {"total_tokens": 12, "input_tokens": 8, "output_tokens": 4}  # as the API
            if details is not None:
                done["status_details"] = details
            await self.emit({"type": "response.done", "response": done})
        except (ConnectionClosed, asyncio.CancelledError):
            pass
        finally:
            if self.response is response:
                self.response = None

    async def _say(self, response: _Response, say: Say, stop_after: int | None = None) -> tuple[str, dict]:
        rid, item_id = response.id, self._id("item")
        self.items.add(item_id)
        item = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        base = {"response_id": rid, "item_id": item_id, "output_index": 0, "content_index": 0}
        await self.emit(
            {"type": "response.output_item.added", "response_id": rid, "output_index": 0, "item": item}
        )
        await self.emit({"type": self.names["item.created"], "previous_item_id": None, "item": item})
        await self.emit(
            {"type": "response.content_part.added", **base, "part": {"type": "audio", "transcript": ""}}
        )
        pieces = split_words(say.text, say.chunks)
        chunk = tone(say.audio_ms / max(1, len(pieces)), say.level)
        audio = base64.b64encode(chunk).decode()
        said = ""
        for i, _piece in enumerate(pieces):
            if response.cancelled.is_set():
                break
            await self.emit({"type": self.names["audio.delta"], **base, "delta": audio})
            self.audio_sent = True
            if i >= say.transcript_lag:
                piece = pieces[i - say.transcript_lag]
                await self.emit({"type": self.names["transcript.delta"], **base, "delta": piece})
                said += piece
            if stop_after is not None and i + 1 >= stop_after:
                return "in_progress", item
            if say.interval:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(response.cancelled.wait(), say.interval)
        if response.cancelled.is_set():
            for _ in range(say.late_deltas):  # in flight when the cancel arrived
                await self.emit({"type": self.names["audio.delta"], **base, "delta": audio})
            done = {**item, "status": "incomplete", "content": [{"type": "audio", "transcript": said}]}
            await self.emit(
                {"type": "response.output_item.done", "response_id": rid, "output_index": 0, "item": done}
            )
            return "cancelled", done
        await self.emit({"type": self.names["audio.done"], **base})
        for piece in pieces[len(pieces) - say.transcript_lag :] if say.transcript_lag else ():
            await self.emit({"type": self.names["transcript.delta"], **base, "delta": piece})
        await self.emit({"type": self.names["transcript.done"], **base, "transcript": say.text})
        part = {"type": "audio", "transcript": say.text}
        await self.emit({"type": "response.content_part.done", **base, "part": part})
        done = {**item, "status": "completed", "content": [part]}
        await self.emit(
            {"type": "response.output_item.done", "response_id": rid, "output_index": 0, "item": done}
        )
        return "completed", done

    async def _call(self, rid: str, index: int, call: Call) -> dict:
        item_id = self._id("item")
        self.items.add(item_id)
        call_id = call.call_id or self._id("call")
        item = {
            "id": item_id,
            "type": "function_call",
            "status": "in_progress",
            "call_id": call_id,
            "name": call.name,
            "arguments": "",
        }
        await self.emit(
            {"type": "response.output_item.added", "response_id": rid, "output_index": index, "item": item}
        )
        await self.emit({"type": self.names["item.created"], "previous_item_id": None, "item": item})
        args = call.arguments_json
        half = len(args) // 2
        for fragment in (args[:half], args[half:]):
            await self.emit(
                {
                    "type": "response.function_call_arguments.delta",
                    "response_id": rid,
                    "item_id": item_id,
                    "output_index": index,
                    "call_id": call_id,
                    "delta": fragment,
                }
            )
        await self.emit(
            {
                "type": "response.function_call_arguments.done",
                "response_id": rid,
                "item_id": item_id,
                "output_index": index,
                "call_id": call_id,
                "name": call.name,
                "arguments": args,
            }
        )
        done = {**item, "status": "completed", "arguments": args}
        await self.emit(
            {"type": "response.output_item.done", "response_id": rid, "output_index": index, "item": done}
        )
        return done


# --------------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------------


class RealtimePeer:
    """Start with ``with RealtimePeer() as peer:`` (or :meth:`start` / :meth:`stop`)."""

    def __init__(
        self,
        api_key: str | None = "test-realtime-key",
        bearer_tokens: tuple[str, ...] = (),
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.api_key = api_key
        self.bearer_tokens = tuple(bearer_tokens)
        self.host = host
        self.port = port
        self.default: Say = Say("Okay.")
        self.default_user_text = "hello"
        self.speech_level = 1000
        self.accept_delay = 0.0  # seconds the handshake waits (connect timeouts)
        self.connections: list[PeerConnection] = []
        self.events: list[tuple[int, dict]] = []
        self._scripts: deque[Scripted] = deque()
        self._user_texts: deque[str] = deque()
        self._lock = threading.Lock()
        self._indexes = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._sock: socket.socket | None = None

    # --- scripting ------------------------------------------------------------------------------------
    def push(self, *scripts: Scripted) -> RealtimePeer:
        with self._lock:
            self._scripts.extend(scripts)
        return self

    def user_says(self, *texts: str) -> RealtimePeer:
        with self._lock:
            self._user_texts.extend(texts)
        return self

    def reset(self) -> None:
        with self._lock:
            self._scripts.clear()
            self._user_texts.clear()
            self.connections.clear()
            self.events.clear()
        self.default = Say("Okay.")
        self.accept_delay = 0.0

    def _next_script(self, instructions: str | None) -> Scripted:
        if instructions:
            quoted = QUOTED.search(instructions)
            if quoted:
                return Say(quoted.group(1))
        with self._lock:
            return self._scripts.popleft() if self._scripts else self.default

    def _next_user_text(self) -> str:
        with self._lock:
            return self._user_texts.popleft() if self._user_texts else self.default_user_text

    def _record(self, conn: PeerConnection, event: dict) -> None:
        with self._lock:
            self.events.append((conn.index, event))

    def received(self, kind: str | None = None) -> list[dict]:
        """Client events received (all connections, in order), optionally of one type."""
        with self._lock:
            return [e for _, e in self.events if kind is None or e.get("type") == kind]

    def types(self, exclude: tuple[str, ...] = ("input_audio_buffer.append",)) -> list[str]:
        return [e["type"] for e in self.received() if e.get("type") not in exclude]

    # --- addresses ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def voicelive_endpoint(self) -> str:
        return self.url

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    # --- the handshake -------------------------------------------------------------------------------
    def _authorized(self, dialect: str, headers: dict[str, str]) -> bool:
        if self.api_key is None:
            return True
        bearer = headers.get("authorization", "")
        accepted = {f"Bearer {t}" for t in (self.api_key, *self.bearer_tokens)}
        if dialect == "voicelive":
            return headers.get("api-key") == self.api_key or bearer in accepted
        return bearer == f"Bearer {self.api_key}"

    async def _process_request(self, connection: ServerConnection, request: Any) -> Any:
        path, _, query = request.path.partition("?")
        if path not in (VOICELIVE_PATH, OPENAI_PATH):
            return connection.respond(404, f"no route {path}\n")
        if self.accept_delay:
            await asyncio.sleep(self.accept_delay)
        params = {k: v[0] for k, v in parse_qs(query).items()}
        dialect = "voicelive" if path == VOICELIVE_PATH else "openai"
        headers = {k.lower(): v for k, v in request.headers.raw_items()}
        if not self._authorized(dialect, headers):
            return connection.respond(401, "invalid credentials\n")
        if not params.get("model") or (dialect == "voicelive" and not params.get("api-version")):
            return connection.respond(400, "model (and on VoiceLive api-version) is required\n")
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        conn = PeerConnection(self, ws, next(self._indexes))
        with self._lock:
            self.connections.append(conn)
        await conn.run()

    # --- lifecycle ---------------------------------------------------------------------------------
    async def serve_forever(
        self, sock: socket.socket | None = None, on_ready: Callable[[], None] | None = None
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        options: dict[str, Any] = (
            {"sock": sock} if sock is not None else {"host": self.host, "port": self.port}
        )
        async with serve(
            self._handler,
            process_request=self._process_request,
            max_size=None,
            compression=None,
            ping_interval=None,
            **options,
        ) as server:
            if sock is None:
                self.port = next(iter(server.sockets)).getsockname()[1]
            if on_ready is not None:
                on_ready()
            await self._stop.wait()
            server.close(close_connections=True)

    def start(self) -> RealtimePeer:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((self.host, self.port))
        self._sock.listen(512)
        self.port = self._sock.getsockname()[1]
        ready = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self.serve_forever(self._sock, ready.set)),
            name=f"realtime-peer-{self.port}",
            daemon=True,
        )
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the realtime peer did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._thread = self._sock = self._loop = None

    def __enter__(self) -> RealtimePeer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------------
# As a process (benchmarks)
# --------------------------------------------------------------------------------------------------


def _listen(port: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(1024)
    return sock


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _serve(sock: socket.socket, args: argparse.Namespace, on_ready: Callable[[], None] | None = None) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    peer = RealtimePeer(api_key=args.api_key, port=sock.getsockname()[1])
    peer.default = Say(
        args.text, chunks=args.chunks, audio_ms=args.chunks * args.chunk_ms, interval=args.interval
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(peer.serve_forever(sock, on_ready))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--processes", type=int, default=1, help="worker processes sharing the port")
    parser.add_argument("--api-key", default="test-realtime-key")
    parser.add_argument("--text", default="Sure, here is what I found for you today.")
    parser.add_argument("--chunks", type=int, default=10, help="audio deltas per response")
    parser.add_argument("--chunk-ms", type=int, default=100, help="audio per delta")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between deltas")
    args = parser.parse_args(argv)
    if args.processes <= 1:
        sock = _listen(args.port, reuse_port=False)
        port = sock.getsockname()[1]
        _serve(sock, args, lambda: print(f"READY {port}", flush=True))
        return
    first = _listen(args.port, reuse_port=True)
    port = first.getsockname()[1]
    socks = [first] + [_listen(port, reuse_port=True) for _ in range(args.processes - 1)]
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_serve, args=(sock, args), daemon=True) for sock in socks]
    for worker in workers:
        worker.start()
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"READY {port}", flush=True)
    try:
        for worker in workers:
            worker.join()
    except KeyboardInterrupt:
        pass
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
                worker.join(3)


if __name__ == "__main__":
    main()
