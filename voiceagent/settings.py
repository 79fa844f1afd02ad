"""Django settings: wiring only. Every value comes from :mod:`voiceagent.config`."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlparse

from voiceagent.config import BASE_DIR, ConfigError, load_config, read_dotenv

read_dotenv(BASE_DIR / ".env")
try:
    CONFIG = load_config()
except ConfigError as exc:  # one clear line, no traceback
    sys.stderr.write(f"configuration error: {exc}\n")
    raise SystemExit(2) from None

PRODUCTION = CONFIG.production
DEBUG = False  # never: error pages must stay JSON and free of tracebacks
SECRET_KEY = CONFIG.SECRET_KEY or "dev-insecure-" + "x" * 40  # development only; production requires it
ALLOWED_HOSTS = list(CONFIG.ALLOWED_HOSTS)
CSRF_TRUSTED_ORIGINS = list(CONFIG.CSRF_TRUSTED_ORIGINS)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "voiceagent.apps.VoiceAgentConfig",
    "agents_app",
    "mcp_app",
    "calls",
    "bridge",
]

MIDDLEWARE = [
    "voiceagent.middleware.RequestIdMiddleware",
    "voiceagent.middleware.AllowedHostMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "voiceagent.middleware.BodyLimitMiddleware",
    "servestatic.middleware.ServeStaticMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "voiceagent.middleware.ApiErrorMiddleware",
]

# The API (everything under /api/) is served by its own ASGI handler with this lean, fully async
# middleware stack: Django's MiddlewareMixin classes each cost a thread hop per request under
# ASGI, and sessions/CSRF/messages serve only the admin and the web page (voiceagent/asgi.py).
API_MIDDLEWARE = [
    "voiceagent.observability.tracing.TracingMiddleware",  # not loaded when tracing is off
    "voiceagent.middleware.RequestIdMiddleware",
    "voiceagent.middleware.AllowedHostMiddleware",
    "voiceagent.middleware.ApiSecurityMiddleware",
    "voiceagent.middleware.BodyLimitMiddleware",
    "voiceagent.middleware.ApiErrorMiddleware",
]

ROOT_URLCONF = "voiceagent.urls"
ASGI_APPLICATION = "voiceagent.asgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "voiceagent" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


# SQLite: write-ahead log (readers never block the writer), fewer fsyncs, writers queue instead
# of failing with "database is locked".
SQLITE_OPTIONS = {
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
}


def _database(url: str | None) -> dict:
    """Django DATABASES entry from ``DATABASE_URL`` (sqlite:///path or postgres://...)."""
    if not url:
        (BASE_DIR / "var").mkdir(exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": BASE_DIR / "var" / "voiceagent.sqlite3",
            "OPTIONS": SQLITE_OPTIONS,
        }
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":  # sqlite:///relative.db or sqlite:////absolute/path.db
        path = unquote(parsed.path)[1:]
        if path in ("", ":memory:"):
            return {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
        name = Path(path) if path.startswith("/") else BASE_DIR / path
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": name, "OPTIONS": SQLITE_OPTIONS}
    options = dict(parse_qsl(parsed.query))
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")),
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "CONN_MAX_AGE": CONFIG.DATABASE_CONN_MAX_AGE,
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": options,
    }


DATABASES = {"default": _database(CONFIG.DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- cache and channel layer: Redis when CACHE_HOST is set, in-process memory otherwise --------
if CONFIG.CACHE_HOST:
    _scheme = "rediss" if CONFIG.CACHE_SSL else "redis"
    _auth = f":{CONFIG.CACHE_PASSWORD}@" if CONFIG.CACHE_PASSWORD else ""
    REDIS_URL = f"{_scheme}://{_auth}{CONFIG.CACHE_HOST}:{CONFIG.CACHE_PORT}/{CONFIG.CACHE_DB}"
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "voiceagent",
            "TIMEOUT": CONFIG.SESSION_TTL_SECONDS,
            # a Redis that stops answering (network partition, paused host) must fail a call, not
            # hang it: cache calls run in Django's single sync thread, one hang stalls every session
            "OPTIONS": {
                "socket_timeout": CONFIG.CACHE_SOCKET_TIMEOUT_S,
                "socket_connect_timeout": CONFIG.CACHE_SOCKET_TIMEOUT_S,
            },
        }
    }
    # channels-redis blocks up to 5 s in its receive (BZPOPMIN): its socket timeout must exceed that
    _layer_host = {
        "address": REDIS_URL,
        "socket_timeout": 5 + CONFIG.CACHE_SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONFIG.CACHE_SOCKET_TIMEOUT_S,
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "voiceagent.transport.channel_layer.RedisChannelLayer",
            "CONFIG": {"hosts": [_layer_host], "prefix": "voiceagent", "capacity": 1000, "expiry": 30},
        }
    }
else:
    REDIS_URL = None
    # Django's default of 300 entries culled live sessions and call maps once ~150 calls were up
    # (a session state and a call map each): a burst of 300 phone calls found 198 "unknown call
    # connection". Room for 20 entries per admissible conversation; the cull is least recently used.
    _LIVE_LIMIT = (
        CONFIG.BROWSER_MAX_CONNECTIONS + CONFIG.TELEPHONY_MAX_STREAMS + CONFIG.CONTACTCENTER_MAX_SESSIONS
    )
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "voiceagent",
            "TIMEOUT": CONFIG.SESSION_TTL_SECONDS,
            "OPTIONS": {"MAX_ENTRIES": max(10_000, 20 * _LIVE_LIMIT)},
        }
    }
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1000}}
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "voiceagent" / "static"]
SERVESTATIC_USE_FINDERS = True  # serve straight from the app folders: no collectstatic step needed
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    # call recordings (voiceagent.recording): any django-storages backend may replace this alias
    "recordings": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": BASE_DIR / CONFIG.RECORDING_DIR, "allow_overwrite": True},
    },
}

# --- security: the production values make `manage.py check --deploy` clean ---------------------
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
if PRODUCTION:
    SECURE_SSL_REDIRECT = True if CONFIG.SECURE_SSL_REDIRECT is None else CONFIG.SECURE_SSL_REDIRECT
    SECURE_REDIRECT_EXEMPT = [r"^api/v1/(health|ready|readiness|contactcenter/health)$"]
    SECURE_HSTS_SECONDS = CONFIG.SECURE_HSTS_SECONDS
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
else:
    SECURE_SSL_REDIRECT = bool(CONFIG.SECURE_SSL_REDIRECT)

# --- REST -------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["voiceagent.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["voiceagent.auth.ApiKeyRequired"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["voiceagent.parsers.SafeJSONParser"],
    "EXCEPTION_HANDLER": "voiceagent.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # 1 MiB: no REST body needs more

SPECTACULAR_SETTINGS = {
    "TITLE": "Voice Agent Backend API",
    "DESCRIPTION": (
        "Real-time voice-agent backend: telephony, browser and contact-center transports over one "
        "conversation engine. Authenticate with `Authorization: Bearer <api key>` (or `X-API-Key`)."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # like the API (an API key whenever the API needs one) unless API_DOCS_PUBLIC=true
    "SERVE_PERMISSIONS": ["voiceagent.auth.ApiDocsAccess"],
    "SERVE_AUTHENTICATION": ["voiceagent.auth.ApiDocsAuthentication"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    # several endpoints have a `status` with their own choices: name the ones that would collide
    "ENUM_NAME_OVERRIDES": {
        "CheckStatusEnum": ["healthy", "unhealthy", "not_configured"],
        "McpServerTransportEnum": ["streamable-http", "http", "sse", "stdio"],
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "voiceagent.schema.document_common_answers",
    ],
}

# --- logging ------------------------------------------------------------------------------------
LOG_FORMAT = CONFIG.LOG_FORMAT or ("json" if PRODUCTION else "text")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "voiceagent.logging.ContextFilter"}},
    "formatters": {
        "json": {"()": "voiceagent.logging.JsonFormatter"},
        "text": {"()": "voiceagent.logging.TextFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": CONFIG.LOG_LEVEL},
    "loggers": {
        "django.request": {"level": "ERROR"},  # 4xx are answered, not incidents
        "django.server": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "azure": {"level": "WARNING"},
        "mcp": {"level": "WARNING"},
    },
}
