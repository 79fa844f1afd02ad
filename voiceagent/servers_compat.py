"""WebSocket close codes and reasons that reach clients the same under every server we name.

RFC 6455 lets a server send 1000-1003, 1007-1014 and 3000-4999, with a UTF-8 reason of at most
123 bytes. Our endpoints refuse with 1003/1008/1009/1011/1013/4404 and say why in the reason, but
the servers differ in what they pass on:

- **daphne** (``scripts/run``): daphne's ``handle_reply`` drops the ASGI ``reason``, and autobahn's
  ``sendClose`` raises for anything but 1000 and 3000-4999. The exception surfaced in the app's
  ``send``: a traceback in the log (``invalid close code 1008``) and 1011 for the client.
  :func:`install` makes daphne's protocol send every sendable code with its reason.
- **uvicorn** with ``websockets`` (its default, both the sansio and the legacy implementation):
  every sendable code and the reason, but a reason over 123 bytes raises ``ProtocolError`` in the
  app's ``send`` (the client gets 1006). :func:`fit_close_reason` cuts ours to fit.
- **uvicorn** with ``wsproto`` (not installed here): wsproto cuts the reason itself.

On all of them a ``websocket.close`` before ``websocket.accept`` becomes an HTTP 403 with neither
code nor reason, so our endpoints accept first and then close: a refused client reads why.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

logger = logging.getLogger(__name__)

MAX_REASON_BYTES = 123  # a control frame's 125-byte payload minus the 2-byte code
_ELLIPSIS = "..."


def is_sendable(code: int) -> bool:
    """Whether RFC 6455 lets an endpoint put ``code`` in a close frame (1004-1006 and 1015 are
    reserved for "no frame"; 1016-2999 are unassigned; 5000+ do not exist)."""
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


def fit_close_reason(reason: str | None) -> str:
    """``reason`` cut to 123 bytes of UTF-8 on a character boundary, "..." marking the cut.

    websockets (under uvicorn) raises on a longer reason instead of sending the close frame.
    """
    if not reason:
        return ""
    data = reason.encode()
    if len(data) <= MAX_REASON_BYTES:
        return reason
    head = data[: MAX_REASON_BYTES - len(_ELLIPSIS)].decode(errors="ignore")  # drops a split character
    return head + _ELLIPSIS


def _daphne_close(protocol: Any, code: int | None, reason: str | None) -> None:
    """Send our close frame through autobahn's ``sendCloseFrame`` (its ``sendClose`` is the one
    that refuses 1001-1014; the frame writer checks nothing and ignores a socket already closing)."""
    code = 1000 if code is None else code
    if not is_sendable(code):
        raise ValueError(f"close code {code} cannot be sent: use 1000-1003, 1007-1014 or 3000-4999")
    text = fit_close_reason(reason)
    protocol.sendCloseFrame(code=code, reasonUtf8=text.encode() if text else None, isReply=False)


def install() -> bool:
    """Let daphne send any sendable close code with its reason; True when daphne was patched.

    Runs only where daphne's WebSocket protocol is already imported (daphne serving, or the
    ``daphne`` app in INSTALLED_APPS): uvicorn processes do not pay for Twisted. Idempotent.
    """
    module = sys.modules.get("daphne.ws_protocol")
    if module is None:
        return False
    cls = module.WebSocketProtocol
    if getattr(cls, "_voiceagent_close_codes", False):
        return True
    if not all(hasattr(cls, name) for name in ("handle_reply", "sendCloseFrame", "STATE_CONNECTING")):
        logger.warning(
            "daphne's WebSocketProtocol changed: close codes other than 1000 may not reach clients"
        )
        return False
    original = cls.handle_reply

    def handle_reply(self, message: dict) -> None:
        if message.get("type") == "websocket.close" and self.state != self.STATE_CONNECTING:
            _daphne_close(self, message.get("code"), message.get("reason"))
            return
        original(self, message)  # accept, send, and a close before accept (HTTP 403) as daphne does

    def server_close(self, code: int | None = None, reason: str | None = None) -> None:
        _daphne_close(self, code, reason)

    cls.handle_reply = handle_reply
    cls.serverClose = server_close
    cls._voiceagent_close_codes = True
    return True
