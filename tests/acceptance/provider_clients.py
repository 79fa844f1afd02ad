"""Callers who reach the service through a provider, for the acceptance suite (see clients.py).

* :class:`PhoneCaller` - the telephony provider's media stream with ``?events=1`` (ACS JSON frames
  of 16 kHz PCM16), for a call placed through the REST API.
* :class:`ContactCenterCaller` - an AudioHook v2 session (binary mu-law 8 kHz frames) on the strict
  client of tests/support, which checks every server message's sequence numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import websockets
from acs_media_client import AcsMediaClient
from acs_media_client import over_websockets as acs_socket
from audiohook_client import ORG, AudioHookClient
from audiohook_client import over_websockets as audiohook_socket
from clients import (
    TURN_TIMEOUT_S,
    Dashboard,
    Inbox,
    Microphone,
    Utterance,
    find,
    is_final_transcript,
    is_type,
)
from websockets.exceptions import ConnectionClosed

ANSWER_AUDIO_TIMEOUT_S = 10.0  # against a hang only: the answer's first audio
AUDIO_FLOWING_S = 0.3  # the last agent frame this recently: its audio is still playing (paced, 20 ms)


class PhoneCaller:
    """The telephony provider's side of one call's media stream (16 kHz ``pcm16KMono``, ``events=1``)."""

    def __init__(self, ws, voice: str, session_id: str, connection_id: str) -> None:
        self.ws = ws
        self.voice = voice
        self.session_id = session_id
        self.connection_id = connection_id
        self.client = AcsMediaClient(acs_socket(ws), rate=16000)
        self.inbox = Inbox()
        self.last_audio = 0.0  # arrival of the last AudioData frame
        self.utterances: list[Utterance] = []
        self.mic = Microphone(lambda pcm: self.client.frame(pcm, silent=not any(pcm)), bytes(640))
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, base_ws: str, call: dict, token: str, voice: str) -> PhoneCaller:
        headers = {
            "Authorization": f"Bearer {token}",
            "x-ms-call-connection-id": call["connection_id"],
            "x-ms-call-correlation-id": str(uuid.uuid4()),
        }
        ws = await websockets.connect(
            f"{base_ws}/media/stream?events=1", additional_headers=headers, max_size=2**22, open_timeout=30
        )
        caller = cls(ws, voice, call["session_id"], call["connection_id"])
        await caller.client.metadata(16000)
        caller.mic.start()
        return caller

    async def _read(self) -> None:
        while True:
            message = await self.client.next_message(3600)
            if message is None:
                info = self.client.socket.close_info
                self.inbox.close(info.get("code"), info.get("reason", ""))
                return
            if message.get("kind") == "AudioData":
                self.last_audio = time.monotonic()
            elif "type" in message:
                self.inbox.add(message)

    async def played(self, start: int = 0, gap: float = 1.0) -> None:
        """Wait for the agent's answer and until its paced audio has stopped for ``gap`` seconds."""
        await self.inbox.wait(is_type("agent_response", final=True), start)
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while not self.last_audio or time.monotonic() - self.last_audio < gap:
                await asyncio.sleep(0.1)

    def _agent_speaking(self) -> bool:
        """The agent's paced audio is still coming (its last frame within AUDIO_FLOWING_S)."""
        return bool(self.last_audio) and time.monotonic() - self.last_audio < AUDIO_FLOWING_S

    async def say(self, sentence: str, audio: bytes, dashboard: Dashboard) -> Utterance:
        """Speak, then wait for the final transcript and the agent's answer (its words, not its
        playing out). The media stream carries no ``error`` message: an utterance that failed is
        visible on the ``dashboard`` (all sessions), so that is watched too."""
        utterance = Utterance(sentence, self.voice)
        self.utterances.append(utterance)
        start, seen, stops = len(self.inbox.messages), len(dashboard.inbox.messages), len(self.client.stops)
        audio_before = len(self.client.audio)
        # the agent's paced audio still coming when the caller begins (the phone plays it as it
        # comes): the caller speaks over the agent (1.0; the seconds left are not known here)
        utterance.over_agent_s = 1.0 if self._agent_speaking() else 0.0
        await self.mic.say(audio)
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while True:
                mine = [m for m in dashboard.inbox.messages[seen:] if m.get("session_id") == self.session_id]
                if error := next((m["payload"] for m in mine if m.get("type") == "error"), None):
                    utterance.error = error
                    return utterance
                if (i := find(self.inbox.messages, is_final_transcript, start)) is not None:
                    break
                await asyncio.sleep(0.05)
        utterance.transcript = self.inbox.messages[i]["payload"]["text"]
        answer = await self.inbox.wait(is_type("agent_response", final=True), i)
        # StopAudio (the provider flushes) by the time the answer to it came: how soon is a
        # benchmark's (bench_turn_taking); on a loaded machine the words that stop the agent may
        # come with the final transcript
        utterance.barged_in = len(self.client.stops) > stops
        utterance.answers = [self.inbox.messages[answer]["payload"]["text"]]
        # some of its audio: the words come first, the audio once its first sentence is synthesised
        # (a fixed 0.5 s wait held for espeak-ng, not for Piper with six calls answering at once)
        after_words = len(self.client.audio)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ANSWER_AUDIO_TIMEOUT_S):
                while len(self.client.audio) <= after_words:
                    await asyncio.sleep(0.05)
        utterance.answer_audio_s = (len(self.client.audio) - audio_before) / 2 / 16000
        return utterance

    async def close(self) -> None:
        await self.mic.stop()
        await self.ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)


class ContactCenterCaller:
    """A contact center's AudioHook v2 session: the caller's voice as mu-law 8 kHz, 20 ms frames."""

    def __init__(self, ws, voice: str, session_id: str) -> None:
        self.ws = ws
        self.voice = voice
        self.session_id = session_id
        self.client = AudioHookClient(audiohook_socket(ws), session_id=session_id)
        self.inbox = Inbox()
        self.utterances: list[Utterance] = []
        self.violations: list[str] = []  # what the strict client found wrong in the server's messages
        self.mic = Microphone(self.client.send_audio, b"\xff" * 160)  # mu-law silence
        self._reader: asyncio.Task | None = None

    @classmethod
    async def connect(cls, base_ws: str, voice: str, api_key: str | None = None) -> ContactCenterCaller:
        session_id = str(uuid.uuid4())
        headers = {
            "Audiohook-Organization-Id": ORG,
            "Audiohook-Session-Id": session_id,
            "Audiohook-Correlation-Id": str(uuid.uuid4()),
            **({"X-API-KEY": api_key} if api_key else {}),
        }
        ws = await websockets.connect(
            f"{base_ws}/contactcenter/stream",
            subprotocols=["audiohook-v2"],
            additional_headers=headers,
            max_size=2**22,
            open_timeout=30,
        )
        return cls(ws, voice, session_id)

    async def open(self) -> dict:
        """``open`` -> the server's answer (``opened``, or ``disconnect`` when refused)."""
        await self.client.open(input_variables={"promptName": "banking"})
        answer = await self.client.next_message(10)
        assert answer is not None, "the socket closed instead of answering open"
        if answer["type"] == "opened":
            self._reader = asyncio.get_running_loop().create_task(self._read())
            self.mic.start()
        return answer

    async def _read(self) -> None:
        try:
            while (message := await self.client.next_message(3600)) is not None:
                self.inbox.add(message)
        except ConnectionClosed:
            pass
        except AssertionError as exc:  # the strict client found a protocol violation
            self.violations.append(str(exc)[:300])
        self.inbox.close(self.ws.close_code, self.ws.close_reason or "")

    def audio_s(self) -> float:
        return len(self.client.audio) / 8000

    async def quiet(self, gap: float = 1.0) -> None:
        """Wait until agent audio (250 ms frames) has arrived and then stopped for ``gap`` seconds."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while not self.client.audio_frames or loop.time() - self.client.audio_frames[-1][0] < gap:
                await asyncio.sleep(0.1)

    async def say(self, sentence: str, audio: bytes) -> Utterance:
        utterance = Utterance(sentence, self.voice)
        self.utterances.append(utterance)
        frames_before = len(self.client.audio_frames)
        before = self.audio_s()
        await self.mic.say(audio)
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while len(self.client.audio_frames) == frames_before:
                await asyncio.sleep(0.05)
        await self.quiet()
        utterance.answer_audio_s = self.audio_s() - before
        return utterance

    async def close(self) -> dict | None:
        """``close`` -> ``closed``; returns the ``closed`` message (None if the socket was gone)."""
        await self.mic.stop()
        closed = None
        if self._reader is not None and self.inbox.closed is None:  # an open session: end it properly
            with contextlib.suppress(ConnectionClosed):
                await self.client.send("close", {"reason": "end"})
                i = await self.inbox.wait(lambda m: m["type"] == "closed", timeout=15)
                closed = self.inbox.messages[i]
        await self.ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        return closed
