"""The Pipecat side of bench/bench_vs_pipecat.py: ONE process (uvicorn + FastAPI, as Pipecat's own
multi-session websocket examples serve), one Pipecat pipeline per WebSocket connection:

    FastAPIWebsocketTransport.input() -> InstantSTT -> user aggregator (Silero VAD,
    speech-timeout end of turn) -> InstantLLM -> InstantTTS -> transport.output() -> assistant aggregator

with Pipecat's defaults elsewhere (RTVI on, turn tracking on, metrics off). The greeting is spoken
when the client connects, as the service greets a browser caller. Settings that decide when a turn
ends are made equal to the service's (bench_vs_pipecat passes them): Silero's speech confidence =
the service's SILERO_THRESHOLD, and VAD stop (Pipecat's default 0.2 s) + the speech-timeout wait =
the service's VAD_SILENCE_TIMEOUT, so both wait the same silence before answering. The default
stop strategy (Smart Turn v3, a second model) is NOT used: the service has no turn model yet.

Run with the bench's Pipecat venv (never the service's); prints ``READY <port>`` once it listens.

    var/bench-venvs/pipecat/bin/python bench/pipecat_peer/server.py --port 8765 [--silence-ms 500]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import uvicorn
from fastapi import FastAPI, WebSocket
from loguru import logger
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VAD_STOP_SECS, VADParams
from pipecat.frames.frames import TTSSpeakFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams, FastAPIWebsocketTransport
from pipecat.turns.user_stop.speech_timeout_user_turn_stop_strategy import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.workers.runner import WorkerRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from instant_services import InstantLLM, InstantSTT, InstantTTS
from raw_pcm_serializer import RawPCM16Serializer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--silence-ms", type=int, default=500, help="silence that ends a turn (VAD stop + wait)"
    )
    parser.add_argument("--confidence", type=float, default=0.5, help="Silero speech confidence")
    parser.add_argument("--greeting", default="Hi, thanks for calling. How can I help?")
    parser.add_argument("--transcript", default="hello there")
    parser.add_argument("--answer", default="Sure thing.")
    parser.add_argument("--ms-per-word", type=int, default=300)
    parser.add_argument(
        "--no-rtvi", action="store_true", help="without RTVI (Pipecat's events to its clients)"
    )
    parser.add_argument(
        "--smart-turn",
        action="store_true",
        help="Pipecat's default turn end (Smart Turn v3 at its VAD's stop) instead of the speech timeout",
    )
    return parser.parse_args(argv)


async def converse(websocket: WebSocket, args: argparse.Namespace) -> None:
    """One conversation: its own pipeline, run until the client hangs up."""
    transport = FastAPIWebsocketTransport(
        websocket,
        FastAPIWebsocketParams(
            audio_in_enabled=True,
            audio_in_sample_rate=16000,
            audio_out_enabled=True,
            audio_out_sample_rate=24000,
            add_wav_header=False,
            serializer=RawPCM16Serializer(),
        ),
    )
    stop_secs = min(VAD_STOP_SECS, args.silence_ms / 1000)
    vad = SileroVADAnalyzer(params=VADParams(confidence=args.confidence, stop_secs=stop_secs))
    if args.smart_turn:  # no stop strategy given: Pipecat's default, Smart Turn v3
        strategies = UserTurnStrategies()
    else:
        stop = SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=args.silence_ms / 1000 - stop_secs)
        strategies = UserTurnStrategies(stop=[stop])
    context = LLMContext()
    user, assistant = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(vad_analyzer=vad, user_turn_strategies=strategies),
    )
    pipeline = Pipeline(
        [
            transport.input(),
            InstantSTT(args.transcript),
            user,
            InstantLLM(args.answer),
            InstantTTS(args.ms_per_word),
            transport.output(),
            assistant,
        ]
    )
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(audio_in_sample_rate=16000, audio_out_sample_rate=24000),
        enable_rtvi=False if args.no_rtvi else None,  # None: Pipecat's default (on)
    )

    @transport.event_handler("on_client_connected")
    async def greet(transport, client) -> None:
        await worker.queue_frames([TTSSpeakFrame(args.greeting)])

    @transport.event_handler("on_client_disconnected")
    async def hang_up(transport, client) -> None:
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()  # until the worker ends (auto_end)


def build_app(args: argparse.Namespace) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        print(f"READY {args.port}", flush=True)
        yield

    app = FastAPI(lifespan=lifespan)

    @app.websocket("/ws")
    async def conversation(websocket: WebSocket) -> None:
        await websocket.accept()
        await converse(websocket, args)

    return app


def main() -> None:
    args = parse_args()
    logger.remove()  # Pipecat logs every frame event at DEBUG by default: WARNING, as the service runs
    logger.add(sys.stderr, level="WARNING")
    uvicorn.run(
        build_app(args),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        ws_per_message_deflate=False,  # as the service's bench runs uvicorn
    )


if __name__ == "__main__":
    main()
