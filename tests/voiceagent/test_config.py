"""Configuration: spec defaults, validation with one clear line, startup refusal."""

from __future__ import annotations

import subprocess
import sys

import pytest

from voiceagent.config import VARIABLES, ConfigError, load_config, markdown_table
from voiceagent.settings import _database

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
STRONG_KEY = "k" * 30 + "abcdefghijklmnopqrstuvwxyz"


def test_spec_defaults():
    cfg = load_config({})
    assert cfg.TELEPHONY_STREAMING_MODE == "MEDIA"
    assert cfg.ENVIRONMENT == "development"
    assert cfg.TTS_VOICE == "en-US-AvaMultilingualNeural"
    assert cfg.TTS_STYLE == "chat"
    assert cfg.TTS_RATE == "+3%"
    assert cfg.STT_LANGUAGE == "en-US"
    assert cfg.VAD_SILENCE_TIMEOUT == 500
    assert cfg.MCP_ENABLED_SERVERS == ()
    for name in (
        "BASE_URL",
        "TELEPHONY_ENDPOINT",
        "TELEPHONY_PHONE_NUMBER",
        "CLOUD_LLM_ENDPOINT",
        "CLOUD_LLM_DEPLOYMENT",
        "CLOUD_SPEECH_REGION",
        "CLOUD_SPEECH_KEY",
        "CACHE_HOST",
        "CLOUD_DOCSTORE_ENDPOINT",
        "CLOUD_DOCSTORE_DATABASE",
        "CLOUD_REALTIME_VOICE_ENDPOINT",
        "CLOUD_REALTIME_VOICE_MODEL",
        "CLOUD_REALTIME_VOICE_API_KEY",
    ):
        assert cfg[name] is None, name
    assert cfg.USE_DEFAULT_CREDENTIAL is False


def test_every_spec_variable_is_declared():
    declared = {v.name for v in VARIABLES}
    spec = {
        "TELEPHONY_STREAMING_MODE",
        "BASE_URL",
        "ENVIRONMENT",
        "TELEPHONY_ENDPOINT",
        "TELEPHONY_PHONE_NUMBER",
        "CLOUD_LLM_ENDPOINT",
        "CLOUD_LLM_DEPLOYMENT",
        "CLOUD_SPEECH_REGION",
        "CLOUD_SPEECH_KEY",
        "CACHE_HOST",
        "CACHE_PORT",
        "CLOUD_DOCSTORE_ENDPOINT",
        "CLOUD_DOCSTORE_DATABASE",
        "CLOUD_REALTIME_VOICE_ENDPOINT",
        "CLOUD_REALTIME_VOICE_MODEL",
        "CLOUD_REALTIME_VOICE_API_KEY",
        "USE_DEFAULT_CREDENTIAL",
        "TTS_VOICE",
        "TTS_STYLE",
        "TTS_RATE",
        "STT_LANGUAGE",
        "VAD_SILENCE_TIMEOUT",
        "MCP_ENABLED_SERVERS",
        "MCP_REQUIRED_SERVERS",
        "DATABASE_URL",
        "API_KEYS",
        "SECRET_KEY",
        "ALLOWED_HOSTS",
        "LOG_LEVEL",
        "TELEPHONY_MEDIA_AUDIENCE",
        "CONTACTCENTER_API_KEY",
        "CONTACTCENTER_CLIENT_SECRET",
        "MCP_STDIO_ALLOWED_COMMANDS",
        "MCP_ALLOWED_HOSTS",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_MODEL",
        "APPCONFIG_FILE",
    }
    assert spec <= declared
    table = markdown_table()
    for name in spec:
        assert f"`{name}`" in table


def test_readme_table_is_current():
    readme = (ROOT / "README.md").read_text()
    for var in VARIABLES:
        assert f"`{var.name}`" in readme, f"{var.name} missing from the README configuration table"


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        (
            {"TELEPHONY_STREAMING_MODE": "FOO"},
            "TELEPHONY_STREAMING_MODE='FOO' is invalid: accepts one of MEDIA, TRANSCRIPTION, VOICE_LIVE",
        ),
        (
            {"VAD_SILENCE_TIMEOUT": "abc"},
            "VAD_SILENCE_TIMEOUT='abc' is invalid: accepts an integer from 100 to 10000",
        ),
        ({"VAD_SILENCE_TIMEOUT": "5"}, "VAD_SILENCE_TIMEOUT='5' is invalid"),
        (
            {"ENVIRONMENT": "staging"},
            "ENVIRONMENT='staging' is invalid: accepts one of development, production",
        ),
        ({"ENVIRONMENT": "production"}, "SECRET_KEY is required when ENVIRONMENT=production"),
        ({"ENVIRONMENT": "production", "SECRET_KEY": "short"}, "SECRET_KEY is too weak"),
        ({"ENVIRONMENT": "production", "SECRET_KEY": STRONG_KEY}, "ALLOWED_HOSTS='*' is not accepted"),
        ({"CACHE_PORT": "99999"}, "CACHE_PORT='99999' is invalid: accepts an integer from 1 to 65535"),
        ({"TTS_RATE": "fastest"}, "TTS_RATE='fastest' is invalid"),
        ({"STT_LANGUAGE": "english please"}, "STT_LANGUAGE="),
        (
            {"USE_DEFAULT_CREDENTIAL": "maybe"},
            "USE_DEFAULT_CREDENTIAL='maybe' is invalid: accepts true or false",
        ),
        ({"BASE_URL": "ftp://x"}, "BASE_URL='ftp://x' is invalid: accepts a URL"),
        ({"DATABASE_URL": "mysql://x/y"}, "DATABASE_URL=<hidden> is invalid"),
        ({"MCP_ENABLED_SERVERS": "a", "MCP_REQUIRED_SERVERS": "a,b"}, "MCP_REQUIRED_SERVERS names b"),
        ({"LOG_LEVEL": "LOUD"}, "LOG_LEVEL='LOUD' is invalid"),
        ({"CLOUD_LLM_ENDPOINT": "https://x.openai.azure.com"}, "CLOUD_LLM_DEPLOYMENT is required"),
        (
            {"REALTIME_PROVIDER": "pigeon"},
            "REALTIME_PROVIDER='pigeon' is invalid: accepts one of auto, voicelive, openai",
        ),
        ({"TELEPHONY_STREAMING_MODE": "video"}, "TELEPHONY_STREAMING_MODE='video' is invalid"),
    ],
)
def test_invalid_values_name_the_variable(env, needle):
    with pytest.raises(ConfigError) as info:
        load_config(env)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message


def test_secret_values_never_echoed_in_errors():
    with pytest.raises(ConfigError) as info:
        load_config({"DATABASE_URL": "mysql://user:hunter2secret@db/x"})
    assert "hunter2secret" not in str(info.value)


def test_production_accepts_documented_settings():
    cfg = load_config(
        {"ENVIRONMENT": "production", "SECRET_KEY": STRONG_KEY, "ALLOWED_HOSTS": "voice.example.com"}
    )
    assert cfg.production


def test_case_insensitive_mode():
    assert load_config({"TELEPHONY_STREAMING_MODE": "voice_live"}).TELEPHONY_STREAMING_MODE == "VOICE_LIVE"


def test_database_url_parsing(tmp_path):
    assert _database(None)["ENGINE"].endswith("sqlite3")
    assert _database(f"sqlite:///{tmp_path}/x.db")["NAME"] == tmp_path / "x.db"
    assert str(_database("sqlite:///var/rel.db")["NAME"]).endswith("var/rel.db")
    pg = _database("postgres://u:p%40ss@db.example:5433/voice?sslmode=require")
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"], pg["NAME"]) == (
        "u",
        "p@ss",
        "db.example",
        "5433",
        "voice",
    )
    assert pg["OPTIONS"] == {"sslmode": "require"}


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"TELEPHONY_STREAMING_MODE": "FOO"}, "TELEPHONY_STREAMING_MODE"),
        ({"VAD_SILENCE_TIMEOUT": "abc"}, "VAD_SILENCE_TIMEOUT"),
        ({"ENVIRONMENT": "production", "SECRET_KEY": ""}, "SECRET_KEY"),
    ],
)
def test_bad_value_stops_startup_with_one_line(env, needle, tmp_path):
    full = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "voiceagent.settings", **env}
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=full, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("configuration error: ") and needle in lines[0]


def test_dotenv_is_read(tmp_path):
    from voiceagent.config import read_dotenv

    (tmp_path / ".env").write_text("TTS_STYLE=friendly\nVAD_SILENCE_TIMEOUT=700\n")
    env = {"VAD_SILENCE_TIMEOUT": "650"}
    read_dotenv(tmp_path / ".env", env)
    cfg = load_config(env)
    assert cfg.TTS_STYLE == "friendly"
    assert cfg.VAD_SILENCE_TIMEOUT == 650  # the real environment wins over .env
