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

A text message that is not valid UTF-8 never reaches an ASGI app (its ``text`` must be a str):
the server must fail the socket with 1007 (RFC 6455 8.1). uvicorn did, but logged an ERROR with
a traceback for it; daphne (autobahn, ``failByDrop``) dropped the TCP connection without a close
frame (the client saw 1006) and said nothing. :func:`install` makes both close with 1007 and the
reason :data:`INVALID_UTF8_REASON`, logging one WARNING for the connection (it ends there); the
app is told ``disconnect`` as for any other close, and what it sends meanwhile is dropped as for a
client that went away (daphne raised autobahn's ``Disconnected`` into the app's send, a traceback).
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

logger = logging.getLogger(__name__)

MAX_REASON_BYTES = 123  # a control frame's 125-byte payload minus the 2-byte code
INVALID_UTF8_REASON = "invalid UTF-8 in a text message"
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


def _invalid_utf8(path: Any, client: Any) -> None:
    if isinstance(client, (list, tuple)) and len(client) == 2:  # daphne: [host, port]
        client = f"{client[0]}:{client[1]}"
    logger.warning("WebSocket %s from %s: a text message is not valid UTF-8; closed with 1007", path, client)


def install() -> bool:
    """Let daphne send any sendable close code with its reason; True when daphne was patched.
    Also: invalid UTF-8 is a 1007 and one WARNING under uvicorn and daphne (see the module doc).

    Runs only where daphne's WebSocket protocol is already imported (daphne serving, or the
    ``daphne`` app in INSTALLED_APPS): uvicorn processes do not pay for Twisted. Idempotent.
    """
    _install_uvicorn_utf8()
    return _install_daphne()


def _install_uvicorn_utf8() -> bool:
    """uvicorn's websockets-sansio protocol (its default): check a text message before its own
    ``data.decode()``, whose failure it logs as an ERROR with a traceback and closes without a reason."""
    if "uvicorn.config" not in sys.modules:  # not served by uvicorn
        return False
    try:  # one worker imports the app before its protocols: import it now, as uvicorn will
        module = importlib.import_module("uvicorn.protocols.websockets.websockets_sansio_impl")
    except ImportError:  # no websockets package: uvicorn uses wsproto, which closes with 1007 itself
        return False
    cls = module.WebSocketsSansIOProtocol
    if getattr(cls, "_voiceagent_utf8", False):
        return True
    names = ("send_receive_event_to_app", "handle_parser_exception")
    if not all(hasattr(cls, name) for name in names) or not hasattr(module, "get_client_addr"):
        logger.warning("uvicorn's WebSocket protocol changed: invalid UTF-8 may be logged as an ERROR")
        return False
    original = cls.send_receive_event_to_app

    def send_receive_event_to_app(self) -> None:
        frames = getattr(self, "frames", None)
        if getattr(self, "curr_msg_data_type", None) == "text" and frames and not self.close_sent:
            data = frames[0] if len(frames) == 1 else b"".join(frames)
            if not data.isascii():
                try:
                    data.decode()
                except UnicodeDecodeError:
                    self.frames = []
                    _invalid_utf8(self.scope.get("path"), get_client_addr(self.scope))
                    self.conn.send_close(1007, INVALID_UTF8_REASON)
                    self.handle_parser_exception()  # the app is told disconnect (1007); socket closed
                    # and until the socket is gone, an app's send is ClientDisconnected (an OSError
                    # our sockets expect), not "Unexpected ASGI message after websocket.close"
                    self.disconnected = True
                    return
        original(self)

    get_client_addr = module.get_client_addr
    cls.send_receive_event_to_app = send_receive_event_to_app
    cls._voiceagent_utf8 = True
    return True


def _install_daphne() -> bool:
    module = sys.modules.get("daphne.ws_protocol")
    if module is None:
        return False
    cls = module.WebSocketProtocol
    if getattr(cls, "_voiceagent_close_codes", False):
        return True
    names = ("handle_reply", "sendCloseFrame", "STATE_CONNECTING", "STATE_OPEN")
    if not all(hasattr(cls, name) for name in names):
        logger.warning(
            "daphne's WebSocketProtocol changed: close codes other than 1000 may not reach clients"
        )
        return False
    original = cls.handle_reply

    def handle_reply(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "websocket.close" and self.state != self.STATE_CONNECTING:
            _daphne_close(self, message.get("code"), message.get("reason"))
            return
        if kind == "websocket.send" and self.state not in (self.STATE_CONNECTING, self.STATE_OPEN):
            return  # closing: the app is told disconnect next (autobahn raised Disconnected into it)
        original(self, message)  # accept, send, and a close before accept (HTTP 403) as daphne does

    def server_close(self, code: int | None = None, reason: str | None = None) -> None:
        _daphne_close(self, code, reason)

    original_invalid_payload = getattr(cls, "_invalid_payload", None)

    def invalid_payload(self, reason: str) -> bool:
        if not getattr(self, "_voiceagent_utf8_said", False):  # more frames may follow the first
            self._voiceagent_utf8_said = True
            _invalid_utf8(getattr(self, "path", b"?").decode("latin-1"), getattr(self, "client_addr", None))
        return original_invalid_payload(self, INVALID_UTF8_REASON)

    cls.handle_reply = handle_reply
    cls.serverClose = server_close
    # a protocol error (invalid UTF-8 above all) closes with its code (1007) instead of a bare TCP drop
    cls.failByDrop = False
    if original_invalid_payload is not None:  # autobahn: a text message (or close reason) not UTF-8
        cls._invalid_payload = invalid_payload
    cls._voiceagent_close_codes = True
    return True
