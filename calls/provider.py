"""Which telephony provider carries this deployment's calls (``TELEPHONY_PROVIDER``)."""

from __future__ import annotations

from django.conf import settings

__all__ = ["telephony_provider"]


def telephony_provider() -> str | None:
    """``acs``, ``twilio`` or None (no telephony configured). ``auto``: ACS when
    ``TELEPHONY_ENDPOINT`` is set, else Twilio when ``TWILIO_ACCOUNT_SID`` is."""
    cfg = settings.CONFIG
    chosen = cfg.get("TELEPHONY_PROVIDER") or "auto"
    if chosen != "auto":
        return chosen
    if cfg.get("TELEPHONY_ENDPOINT"):
        return "acs"
    if cfg.get("TWILIO_ACCOUNT_SID"):
        return "twilio"
    return None
