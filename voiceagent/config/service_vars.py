"""Declarations of the service's own variables: Django and logging, the cache and stores, MCP
servers, and dynamic configuration. Each group keeps its README order."""

from __future__ import annotations

from .parsing import Var, boolean, choice, csv_list, database_url, integer, number, string

V = Var  # short: the table reads one declaration per call

SERVICE: tuple[Var, ...] = (
    V(
        "ENVIRONMENT",
        "development",
        choice("development", "production"),
        "`development` (open API, readable logs) or `production` (API keys, JSON logs, TLS checks)",
    ),
    V(
        "SECRET_KEY",
        None,
        string,
        "Django secret key; required in production (50+ random characters)",
        secret=True,
    ),
    V(
        "ALLOWED_HOSTS",
        "*",
        csv_list,
        "Comma-separated host names the service answers to; set it in production",
    ),
    V("CSRF_TRUSTED_ORIGINS", "", csv_list, "Comma-separated origins (https://host) trusted for admin forms"),
    V(
        "DATABASE_URL",
        None,
        database_url,
        "Database: `sqlite:///path` (default: `var/voiceagent.sqlite3`) or `postgres://user:pw@host:5432/db`",
        secret=True,
    ),
    V("DATABASE_CONN_MAX_AGE", "60", integer(0, 86400), "Seconds a database connection is reused"),
    V(
        "API_KEYS",
        "",
        csv_list,
        "Comma-separated API keys accepted as `Authorization: Bearer <key>`",
        secret=True,
    ),
    V(
        "API_DOCS_PUBLIC",
        "false",
        boolean,
        "`true` serves the OpenAPI schema (`/api/v1/schema/`) and Swagger UI (`/api/v1/docs/`) without "
        "an API key; by default they need one whenever the API does",
    ),
    V(
        "METRICS_ENABLED",
        "true",
        boolean,
        "`false` counts nothing and answers `/metrics` with 404: no Prometheus figures are kept "
        "(turn timings in the history and traces are separate)",
    ),
    V(
        "METRICS_PUBLIC",
        "false",
        boolean,
        "`true` serves the Prometheus metrics (`/metrics`) without an API key, for a scrape port "
        "reachable only internally; by default they need one whenever the API does",
    ),
    V(
        "PROMETHEUS_MULTIPROC_DIR",
        None,
        string,
        "Directory where each worker writes its metrics for `/metrics` to add up (emptied by you "
        "before each start); unset: a fresh one per start under `uvicorn --workers N`, none with "
        "one process",
    ),
    V("LOG_LEVEL", "INFO", choice("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", upper=True), "Log level"),
    V(
        "LOG_FORMAT",
        "",
        choice("", "json", "text"),
        "`json` or `text`; default json in production, text in development",
    ),
    V(
        "SECURE_SSL_REDIRECT",
        None,
        boolean,
        "Redirect HTTP to HTTPS (default true in production; health paths exempt)",
    ),
    V("SECURE_HSTS_SECONDS", "31536000", integer(0, 10**9), "HSTS max-age in production"),
    V(
        "LIFECYCLE_PLUGINS",
        "",
        csv_list,
        "Comma-separated modules imported at startup that may register lifecycle hooks (extensions, tests)",
    ),
    V(
        "SHUTDOWN_DEFERRED_TIMEOUT",
        "5",
        number(0.1, 60),
        "Seconds to wait for deferred startup tasks to cancel",
    ),
)

CACHE: tuple[Var, ...] = (
    V(
        "CACHE_HOST",
        None,
        string,
        "Redis host: session cache and channel layer (unset: in-process memory)",
        group="cache",
    ),
    V("CACHE_PORT", "6379", integer(1, 65535), "Redis port", group="cache"),
    V("CACHE_PASSWORD", None, string, "Redis password", secret=True, group="cache"),
    V("CACHE_DB", "0", integer(0, 15), "Redis database number", group="cache"),
    V("CACHE_SSL", "false", boolean, "Connect to Redis over TLS", group="cache"),
    V(
        "CACHE_SOCKET_TIMEOUT_S",
        "2",
        number(0.1, 60),
        "A cache call to a Redis that accepts but does not answer fails after this long instead of "
        "hanging (the channel layer allows its 5 s blocking reads on top)",
        group="cache",
    ),
    V(
        "SESSION_TTL_SECONDS",
        "7200",
        integer(60, 30 * 86400),
        "Seconds a session's state lives after its last activity",
        group="cache",
    ),
    V(
        "CLOUD_DOCSTORE_ENDPOINT",
        None,
        string,
        "Reserved: external conversation store. History is kept in the database (DATABASE_URL)",
        group="cache",
    ),
    V("CLOUD_DOCSTORE_DATABASE", None, string, "Reserved: see CLOUD_DOCSTORE_ENDPOINT", group="cache"),
)

MCP: tuple[Var, ...] = (
    V(
        "MCP_ENABLED_SERVERS",
        "",
        csv_list,
        "Comma-separated MCP server names connected at startup "
        "(each configured with MCP_SERVER_<NAME>_URL, _TRANSPORT, _TIMEOUT, _AUTH_TOKEN, _HEADERS, _COMMAND, "
        "_ARGS, _ENV)",
        group="mcp",
    ),
    V("MCP_REQUIRED_SERVERS", "", csv_list, "Subset of MCP_ENABLED_SERVERS treated as critical", group="mcp"),
    V(
        "MCP_STDIO_ALLOWED_COMMANDS",
        "",
        csv_list,
        "Commands that runtime-added stdio MCP servers may run",
        group="mcp",
    ),
    V(
        "MCP_ALLOWED_HOSTS",
        "",
        csv_list,
        "Private/loopback hosts runtime MCP servers may use in production",
        group="mcp",
    ),
    V(
        "MCP_ENCRYPTION_KEY",
        None,
        string,
        "Key for MCP secrets at rest (default: derived from SECRET_KEY)",
        secret=True,
        group="mcp",
    ),
)

APPCONFIG: tuple[Var, ...] = (
    V(
        "APPCONFIG_FILE",
        None,
        string,
        "YAML or JSON file of runtime-tunable keys (file provider)",
        group="appconfig",
    ),
    V(
        "APPCONFIG_REFRESH_INTERVAL",
        "30",
        number(1, 86400),
        "Seconds between re-reads of APPCONFIG_FILE",
        group="appconfig",
    ),
)
