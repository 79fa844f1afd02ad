"""Declarations of the turn-taking variables: when the caller interrupts, when a turn ends, what
the agent says instead of dead air, and the VAD that hears the caller. An agent's ``turn_taking``
section overrides these per agent (:mod:`voiceagent.conversation.turn_taking`)."""

from __future__ import annotations

from .parsing import Var, choice, integer, number

V = Var  # short: the table reads one declaration per call

TURN_TAKING: tuple[Var, ...] = (
    V(
        "VAD_PROVIDER",
        "webrtc",
        choice("webrtc", "silero"),
        "Voice activity detection: `webrtc` (webrtcvad behind an energy gate, ~2 us a frame) or "
        "`silero` (Silero VAD v6 on onnxruntime, its ONNX model from the `silero-vad` package, one "
        "model session per process on its own thread, every conversation's frames batched into one "
        "call per 5 ms tick; fewer false starts on noise, ~0.05 ms a frame batched)",
        group="turn-taking",
    ),
    V(
        "SILERO_THRESHOLD",
        "0.5",
        number(0.05, 0.95),
        "Silero speech probability above which a frame is speech",
        group="turn-taking",
        tunable=True,
    ),
    V(
        "TURN_MODEL",
        "smart-turn",
        choice("smart-turn", "none"),
        "End-of-turn model fused with the lexical rule: `smart-turn` (Smart Turn v3.2 on onnxruntime, "
        "its ONNX model from the `pipecat-ai` package, never imported; one worker thread per process) "
        "ends a turn it hears complete at the caller's first pause (~0.2 s) instead of after "
        "VAD_SILENCE_TIMEOUT; `none`, or the model file missing (one log line), judges by the words alone",
        group="turn-taking",
    ),
    V(
        "MIN_INTERRUPTION_MS",
        "300",
        integer(0, 5000),
        "Speech over the agent must last this long before its words stop the agent; from 180 ms "
        "(or this, if shorter) the agent is ducked (-20 dB) while the recogniser says what it was, "
        "so a cough or click never touches it. A backchannel or noise "
        '("uh-huh", "okay") restores it where it was; a word that is not one (or 1.2 s of speech) '
        "stops it",
        group="turn-taking",
        tunable=True,
    ),
    V(
        "ENDPOINTING_MAX_MS",
        "1600",
        integer(100, 10000),
        'Silence that ends a turn whose last words are an unfinished clause ("my card number '
        'is") or a number being read; a complete-sounding turn ends after VAD_SILENCE_TIMEOUT',
        group="turn-taking",
        tunable=True,
    ),
    V(
        "ECHO_GATE_DB",
        "10",
        number(0, 60),
        "While the agent speaks, caller audio more than this many dB below the agent's own audio of "
        "the last second is taken for echo and never interrupts (0 turns the gate off)",
        group="turn-taking",
        tunable=True,
    ),
    V(
        "FILLER_AFTER_MS",
        "700",
        integer(0, 60000),
        "A tool or MCP call still running after this long makes the agent say a short filler from "
        'its definition ("One moment while I check that."), again after each filler while it runs; '
        "0 = never",
        group="turn-taking",
        tunable=True,
    ),
    V(
        "REPROMPT_AFTER_S",
        "15",
        number(0, 3600),
        "Caller silent this long after the agent finished speaking: the agent re-prompts with its "
        'own line ("Are you still there?"); 0 = never',
        group="turn-taking",
        tunable=True,
    ),
    V(
        "MAX_REPROMPTS",
        "2",
        integer(0, 20),
        "Re-prompts in a row without an answer; at the next silence the agent says goodbye and "
        "ends the conversation",
        group="turn-taking",
        tunable=True,
    ),
    V(
        "MAX_CONVERSATION_S",
        "3600",
        number(0, 86400),
        "A conversation's length bound: the agent says its time-limit line and ends it; 0 = unbounded",
        group="turn-taking",
        tunable=True,
    ),
)
