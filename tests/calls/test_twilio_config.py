"""Twilio's settings: validated at startup like every other, the provider chosen from them, and the
readiness check naming what is configured (never the token)."""

from __future__ import annotations

import asyncio

import pytest

from calls import twilio_api
from calls.provider import telephony_provider
from voiceagent.config import ConfigError, load_config

SID = "AC" + "0123456789abcdef" * 2
TWILIO = {"TWILIO_ACCOUNT_SID": SID, "TWILIO_AUTH_TOKEN": "a-secret-token"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TWILIO_ACCOUNT_SID": "AC123", "TWILIO_AUTH_TOKEN": "x"}, "TWILIO_ACCOUNT_SID='AC123' is invalid"),
        ({"TWILIO_ACCOUNT_SID": SID}, "TWILIO_AUTH_TOKEN is required"),
        ({"TWILIO_AUTH_TOKEN": "x"}, "TWILIO_ACCOUNT_SID is required"),
        ({"TELEPHONY_PROVIDER": "twilio"}, "TELEPHONY_PROVIDER=twilio needs TWILIO_ACCOUNT_SID"),
        ({"TELEPHONY_PROVIDER": "acs", **TWILIO}, "TELEPHONY_PROVIDER=acs needs TELEPHONY_ENDPOINT"),
        ({"TELEPHONY_PROVIDER": "sip"}, "TELEPHONY_PROVIDER='sip' is invalid"),
        ({**TWILIO, "TWILIO_PHONE_NUMBER": "555-1234"}, "TWILIO_PHONE_NUMBER='555-1234' is invalid"),
        ({**TWILIO, "TWILIO_NUMBER_SCENARIOS": "+15551230000"}, "TWILIO_NUMBER_SCENARIOS="),
        ({**TWILIO, "TWILIO_API_BASE": "ftp://x"}, "TWILIO_API_BASE='ftp://x' is invalid"),
    ],
)
def test_bad_twilio_settings_stop_startup_with_one_line(env, message):
    with pytest.raises(ConfigError) as caught:
        load_config(env)
    assert str(caught.value).startswith(message), caught.value
    assert "a-secret-token" not in str(caught.value)


@pytest.mark.parametrize(
    ("env", "provider"),
    [
        ({}, None),
        (TWILIO, "twilio"),
        ({"TELEPHONY_ENDPOINT": "https://acs.example.com"}, "acs"),
        ({"TELEPHONY_ENDPOINT": "https://acs.example.com", **TWILIO}, "acs"),
        (
            {"TELEPHONY_ENDPOINT": "https://acs.example.com", **TWILIO, "TELEPHONY_PROVIDER": "twilio"},
            "twilio",
        ),
    ],
)
def test_the_provider_that_places_calls(settings, env, provider):
    settings.CONFIG = load_config(env)
    assert telephony_provider() == provider
    # Twilio's own calls are hung up and transferred through it whenever it is configured
    assert (twilio_api.twilio_client() is not None) == ("TWILIO_ACCOUNT_SID" in env)


def test_readiness_names_the_account_not_the_token(settings):
    settings.CONFIG = load_config(
        {**TWILIO, "BASE_URL": "https://voice.example.com", "TWILIO_PHONE_NUMBER": "+15550001111"}
    )
    status, detail = asyncio.run(twilio_api.readiness_check())
    assert status == "healthy" and SID[:8] in detail and "a-secret-token" not in detail
    settings.CONFIG = load_config(TWILIO)
    assert asyncio.run(twilio_api.readiness_check())[0] == "unhealthy"  # no BASE_URL: nothing verifies
    assert repr(twilio_api.twilio_client()).count("a-secret-token") == 0
