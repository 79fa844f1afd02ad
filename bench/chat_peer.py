"""The OpenAI-compatible peer (tests/support/openai_peer.py) with a cloud model's delays, in its own
process, for ``bench_capacity.py --mode cloud``.

Each streamed chat answer sends its role delta at once, then its first content delta a random
300-600 ms later (``--first-token-ms``), then one word every 20-50 ms (``--token-ms``). The
answer is ``Noted <n>. Here is the rest of my answer for you.`` where ``<n>`` is the number in
the caller's last message (``utterance <n>``, from the delayed STT of
bench/plugins/delayed_providers.py), so the first clause, which the server sends to TTS, is the
first content delta. The peer measures its own delay per answer: from the request reaching its
ASGI application (headers parsed) to the first content delta written to the socket;
``GET /bench/delays`` returns them as ``{"<n>": {"ms", "began", "sent"}}`` (the two instants on
``time.monotonic``). Prints ``READY <port>`` when it listens.

    .venv/bin/python bench/chat_peer.py [--first-token-ms 300-600] [--token-ms 20-50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from openai_peer import OpenAIPeer  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

UTTERANCE = re.compile(r"utterance (\d+)")
REST = ["Here", "is", "the", "rest", "of", "my", "answer", "for", "you."]


def _range(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    return float(low) / 1000, float(high or low) / 1000


class DelayedPeer(OpenAIPeer):
    label = "delayed OpenAI peer"

    def __init__(self, first_token: tuple[float, float], token: tuple[float, float]) -> None:
        super().__init__(models=("bench-model",))
        self.first_token, self.token = first_token, token
        self.rng = random.Random(3)
        self.delays: dict[str, float] = {}

    def _app(self):
        app = super()._app()
        app.router.routes.append(Route("/bench/delays", self._delays, methods=["GET"]))

        async def stamped(scope, receive, send):  # the request reaches the peer's application
            scope["bench_began"] = time.monotonic()
            await app(scope, receive, send)

        return stamped

    async def _delays(self, request: Request) -> Response:
        return JSONResponse(self.delays)

    async def _serve_chat(self, request: Request, azure: bool) -> Response:
        began = request.scope.get("bench_began") or time.monotonic()
        body = json.loads(await request.body())
        users = [m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user"]
        found = UTTERANCE.search(str(users[-1])) if users else None
        key = found.group(1) if found else "-"
        first, gaps = self.rng.uniform(*self.first_token), [self.rng.uniform(*self.token) for _ in REST]
        model = str(body.get("model") or self.models[0])
        return StreamingResponse(self._stream(key, began, first, gaps, model), media_type="text/event-stream")

    async def _stream(self, key: str, began: float, first: float, gaps: list[float], model: str):
        def event(delta: dict, finish: str | None = None) -> bytes:
            chunk = {
                "id": f"chatcmpl-bench-{key}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
            return f"data: {json.dumps(chunk)}\n\n".encode()

        yield event({"role": "assistant", "content": ""})
        await asyncio.sleep(first - (time.monotonic() - began))
        yield event({"content": f"Noted {key}. "})
        if key != "-":  # the delta above has been sent
            sent = time.monotonic()
            self.delays[key] = {"ms": (sent - began) * 1000, "began": began, "sent": sent}
        for word, gap in zip(REST, gaps, strict=True):
            await asyncio.sleep(gap)
            yield event({"content": word + ("" if word.endswith(".") else " ")})
        yield event({}, "stop")
        yield b"data: [DONE]\n\n"


def start_chat_peer(first_token_ms: str, nice: int = 0) -> tuple[subprocess.Popen, str]:
    """This peer in its own process (``nice`` that much nicer); (process, base URL)."""
    root = Path(__file__).resolve().parents[1]
    peer = subprocess.Popen(
        [sys.executable, str(root / "bench" / "chat_peer.py"), "--first-token-ms", first_token_ms],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        preexec_fn=(lambda: os.nice(nice)) if nice else None,
    )
    line = peer.stdout.readline().strip() if peer.stdout else ""
    if not line.startswith("READY "):
        peer.kill()
        raise RuntimeError(f"chat peer did not start: {line!r}")
    return peer, f"http://127.0.0.1:{line.split()[1]}"


def server_env(url: str) -> dict[str, str]:
    """The service's settings for this peer at ``url``: the OpenAI-compatible provider."""
    return {
        "LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_MODEL": "bench-model",
        "OPENAI_API_KEY": "bench-key",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--first-token-ms", default="300-600")
    parser.add_argument("--token-ms", default="20-50")
    args = parser.parse_args()
    peer = DelayedPeer(_range(args.first_token_ms), _range(args.token_ms)).start()
    print(f"READY {peer.port}", flush=True)
    threading.Event().wait()  # until the benchmark terminates this process


if __name__ == "__main__":
    main()
