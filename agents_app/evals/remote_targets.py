"""The targets of ``manage.py test_agents --transport browser|phone|twilio|audiohook --url ...``: a
conversation with a running service over one of its transports, seen as the same
:class:`~agents_app.evals.observe.TurnObservation` as the in-process engine target.

Each target has, besides the :class:`~agents_app.evals.observe.Target` protocol, ``profile``: the
seeded demo caller (``POST /api/v1/profiles/generate``) once ``open`` made one, else None, for the
runner's turn templates. See ``agents_app/evals/remote/`` for each wire.
"""

from __future__ import annotations

from agents_app.evals.remote.audiohook import AudioHookTarget
from agents_app.evals.remote.base import TURN_TIMEOUT_S, NoAnswer, TargetError
from agents_app.evals.remote.browser import BrowserTarget
from agents_app.evals.remote.phone import PhoneTarget
from agents_app.evals.remote.twilio import TwilioTarget

__all__ = [
    "TURN_TIMEOUT_S",
    "AudioHookTarget",
    "BrowserTarget",
    "NoAnswer",
    "PhoneTarget",
    "TargetError",
    "TwilioTarget",
]
