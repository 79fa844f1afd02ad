"""A phone call goes to a person: the ACS transfer the agent's ``escalate_to_human`` asks for.

The media stream's codec hands the engine's ``TransferRequested`` here. Once the agent's line about
it has played, Call Automation is asked to transfer the call to the scenario's target
(``transfer_target``: a phone number or an ACS user); the provider reports the outcome to
``/calls/callbacks`` (``CallTransferAccepted``, then our leg's ``CallDisconnected``; or
``CallTransferFailed``), which reaches the conversation on whichever worker holds it
(:mod:`calls.callbacks`). A refused request is a failed transfer at once: the caller is told and the
conversation goes on. Without a call connection (a simulator stream), a telephony client or a
target, the driver's default applies: the dashboards are asked for a person.

Over Twilio (:func:`transfer_twilio_call`) the call is given new TwiML once the line has played,
``<Response><Dial action=".../twilio/dial">target</Dial></Response>``: Twilio leaves our
``<Connect><Stream>`` (the stream stops; the call must not be hung up after it) and dials the
person. An accepted update is the transfer done (noted in the history); a refused one is a failed
transfer, told to the caller. When the person does not answer, Twilio asks the ``action`` URL
(:class:`calls.twilio_views.TwilioDialView`), which connects the caller back to a stream of the same
session; its conversation tells the caller the transfer failed and goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from calls import acs
from voiceagent.transport.driver import DRAIN_DEADLINE_S

__all__ = ["OPERATION_PREFIX", "dial_twiml", "transfer_call", "transfer_twilio_call"]

logger = logging.getLogger("calls.transfer")

OPERATION_PREFIX = "transfer:"  # the operationContext of our transfers: "transfer:<session id>"
DIAL_PATH = "/api/v1/twilio/dial"  # Twilio's report of a transfer's <Dial>


async def transfer_call(socket: Any, event: Any) -> bool:
    """Transfer ``socket``'s call to ``event.target``; False when this call cannot be transferred
    (the caller of this function then applies the driver's default)."""
    client = acs.telephony_client()
    if not socket.connection_id or client is None or not event.target:
        return False
    socket.playback.finish_response()  # "I'm connecting you" is heard in full first
    await socket.playback.drained(DRAIN_DEADLINE_S)
    context = f"{OPERATION_PREFIX}{socket.session_id}"
    try:
        await client.transfer(socket.connection_id, event.target, operation_context=context)
    except acs.TelephonyError as exc:
        logger.warning("call %s: transfer to a person refused: %s", socket.connection_id[:64], exc)
        conversation = socket.conversation
        if conversation is not None:
            conversation.transfer_failed(str(exc))
        return True
    logger.info("call %s: transfer to a person asked (%s)", socket.connection_id[:64], event.target[:4] + "…")
    return True


def dial_twiml(target: str, action: str | None = None) -> str:
    """The TwiML that hands the call to ``target`` (a phone number); Twilio reports how the dial
    ended to ``action``."""
    from twilio.twiml.voice_response import VoiceResponse

    response = VoiceResponse()
    if action:
        response.dial(target, action=action, method="POST")
    else:
        response.dial(target)
    return str(response)


async def transfer_twilio_call(socket: Any, event: Any) -> bool:
    """Transfer ``socket``'s Twilio call to ``event.target`` with ``<Dial>``; False when it cannot
    (no call, no client, no target, or a target Twilio cannot dial: an ACS user id)."""
    from calls import twilio_api

    client = twilio_api.twilio_client()
    target = event.target or ""
    if not socket.connection_id or client is None or not target.startswith("+"):
        return False
    from calls.twilio_signature import public_url

    socket.playback.finish_response()  # "I'm connecting you" is heard in full first
    await socket.playback.drained(DRAIN_DEADLINE_S)
    action = public_url(DIAL_PATH)
    # from now on the call may be the person's: Twilio can stop our stream before its answer comes
    # back, and that end must neither hang the call up nor close its record (it may come back)
    socket.call_over = socket.transferred = True
    try:
        await client.update_twiml(socket.connection_id, dial_twiml(target, action))
    except acs.TelephonyError as exc:
        socket.call_over = socket.transferred = False
        logger.warning("call %s: transfer to a person refused: %s", socket.connection_id[:64], exc)
        if socket.conversation is not None:
            socket.conversation.transfer_failed(str(exc))
        return True
    logger.info("call %s: transferred to a person (%s)", socket.connection_id[:64], target[:4] + "…")
    if socket.conversation is not None:
        socket.conversation.transfer_done(target)
    return True
