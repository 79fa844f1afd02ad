"""What placing or answering a phone call does, whichever provider carries it.

A call gets a new phone session on its scenario (the session first: its id is the call's operation
context), then the provider is asked, then the call map entry (before the row: the media stream may
arrive at once) and the ``Call`` row. A provider failure leaves no session behind and becomes a 502
``{"detail"}`` that names no secret. Used by the ACS views (:mod:`calls.telephony_views`) and the
Twilio ones (:mod:`calls.twilio_views`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import IntegrityError, transaction

from agents_app import sessions
from agents_app.catalog import catalog
from calls import acs, callmap
from calls.models import Call
from voiceagent.errors import ApiError

__all__ = ["connect_call", "provider_error", "save_call", "start_session"]

logger = logging.getLogger("calls.telephony")


def _mode() -> str:
    return settings.CONFIG.TELEPHONY_STREAMING_MODE


def provider_error(exc: Exception, action: str) -> ApiError:
    if isinstance(exc, acs.TelephonyError):
        logger.warning("telephony %s failed (status %s): %s", action, exc.status, exc)
        return ApiError(f"Telephony provider error while trying to {action}: {exc}", 502)
    logger.warning("telephony %s failed: %s", action, type(exc).__name__)
    return ApiError(f"Telephony provider error while trying to {action}.", 502)


def start_session(scenario_name: str) -> tuple[str, str]:
    """A new phone session on the scenario: (session id, canonical scenario name)."""
    spec = catalog.scenario(scenario_name)
    if spec is None:
        raise ApiError(f"Scenario {scenario_name!r} not found.", 400, {"scenario": ["unknown scenario"]})
    session_id = sessions.new_session_id()
    sessions.create_session(session_id, spec.name, spec.start_agent, transport="phone")
    return session_id, spec.name


def save_call(**fields: Any) -> Call:
    """Insert the call row; if an early callback's retry already created it, keep its state."""
    cid = fields["connection_id"]
    try:
        with transaction.atomic():
            return Call.objects.create(**fields)
    except IntegrityError:
        descriptive = {k: v for k, v in fields.items() if k not in ("connection_id", "status")}
        Call.objects.filter(connection_id=cid).update(**descriptive)
        return Call.objects.get(connection_id=cid)


def _started(result: Any) -> acs.CallStarted:
    if not isinstance(result, acs.CallStarted) or not result.connection_id:
        raise ApiError("Telephony provider error: the provider returned no call connection id.", 502)
    return result


def connect_call(
    scenario_name: str,
    direction: str,
    phone_number: str,
    provider_call: Callable[..., Awaitable[acs.CallStarted]],
    action: str,
    *,
    server_call_id: str = "",
    correlation_id: str = "",
) -> tuple[acs.CallStarted, str, str, str]:
    """Place or answer a call with a new phone session: the session first (its id is the call's
    operation context), then the provider, then the call map (before the row: the media stream may
    arrive at once) and the call row. A provider failure leaves no session behind.

    ``provider_call(audio_format=, operation_context=)`` is the client's create or answer, already
    given its call-specific arguments. Returns (started, session id, scenario, mode)."""
    mode = _mode()
    session_id, scenario = start_session(scenario_name)
    try:
        started = _started(
            async_to_sync(provider_call)(
                audio_format=callmap.audio_format_for(mode), operation_context=session_id
            )
        )
    except ApiError:
        sessions.delete_state(session_id)
        raise
    except Exception as exc:
        sessions.delete_state(session_id)
        raise provider_error(exc, action) from None
    common = {
        "connection_id": started.connection_id,
        "session_id": session_id,
        "scenario": scenario,
        "mode": mode,
        "direction": direction,
        "phone_number": phone_number,
    }
    async_to_sync(callmap.remember)(callmap.CallInfo(**common))
    save_call(
        status="initiating",
        server_call_id=(started.server_call_id or server_call_id)[:512],
        correlation_id=correlation_id,
        **common,
    )
    logger.info("%s call %s (session %s, mode %s)", direction, started.connection_id, session_id, mode)
    return started, session_id, scenario, mode
