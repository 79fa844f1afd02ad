"""The WebSocket auth stack: Django's session and user in the scope, without wrapping ``send``.

Channels' ``AuthMiddlewareStack`` (cookies, session, user) wraps every ``send`` of a socket to save a
modified session on ``http.response.start``, a message a WebSocket never sends. On an audio socket
that wrapper runs for every outbound message (a LazyObject lookup and two session checks each, for
hundreds of sockets at 50 messages a second). The sockets here only *read* the session - a staff
user logged in to the admin may open the browser socket and the dashboard (:mod:`calls.wsauth`) -
so the scope gets the same lazy ``session`` and ``user`` as channels gives it, and the server's own
``send`` is passed on untouched.
"""

from __future__ import annotations

from channels.auth import AuthMiddleware
from channels.sessions import CookieMiddleware, InstanceSessionWrapper


class ReadOnlySessionMiddleware:
    """``scope["session"]`` from the session cookie (resolved lazily, as channels does); no save."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        wrapper = InstanceSessionWrapper(scope, send)
        await wrapper.resolve_session()
        return await self.inner(wrapper.scope, receive, send)


def WebSocketAuthStack(inner):
    """Cookies, a read-only session and the lazy user, around ``inner``."""
    return CookieMiddleware(ReadOnlySessionMiddleware(AuthMiddleware(inner)))
