"""The browser socket writes its ``audio`` messages' JSON by hand (the hot path): the text must be
exactly what ``json.dumps`` of the envelope gives, the one every other message is sent with."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from calls.browser import BrowserConversationConsumer
from voiceagent.transport.envelope import envelope


@pytest.mark.parametrize("session_id", ["3f2a9c0e", 'odd "id" \\ with\nescapes é', None])
def test_the_hand_written_audio_message_is_the_envelope_json_dumps_writes(session_id):
    sent: list[str] = []
    consumer = object.__new__(BrowserConversationConsumer)
    consumer.closing = False
    consumer.session_id = session_id
    consumer.seq = 41
    consumer.channel_layer = None

    async def send(text_data: str) -> None:
        sent.append(text_data)

    consumer.send = send
    data = base64.b64encode(bytes(range(256)) * 20).decode()
    asyncio.run(consumer._send_audio(data, 24000))
    (text,) = sent
    message = json.loads(text)
    expected = envelope(session_id, "audio", {"data": data, "sample_rate": 24000, "seq": 41})
    expected["ts"] = message["ts"]
    assert text == json.dumps(expected, default=str)
