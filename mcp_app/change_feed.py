"""Telling the other workers that a runtime MCP server changed, and hearing of their changes.

The database (:class:`mcp_app.models.McpServer`) is the shared truth. After a worker adds,
updates (OAuth callback, admin edit) or removes a runtime server it sends
``{"type": "mcp.changed", "name", "action": "added"|"updated"|"removed", "origin"}`` to the
channel-layer group ``mcp``. Each manager runs a listener task on its loop, with its OWN layer
instance (``channel_layers.make_backend``: a layer may only ``receive`` on one loop): it
subscribes with ``new_channel()`` + ``group_add`` (renewed hourly, before the group expiry) and
hands every message from another worker to the manager, which reloads the row and reconnects
(added/updated) or disconnects and unregisters (removed). A missed message is repaired by the
health loop's reconcile (:mod:`mcp_app.health`). With the in-memory channel layer (one process)
there is nobody to notify and the listener does not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger("mcp_app.change_feed")

GROUP = "mcp"
GROUP_RENEW_S = 3600.0

Apply = Callable[[str, str], Awaitable[None]]


def default_layer() -> Any:
    """A private channel layer for the listener, or None with the in-memory layer (one process)."""
    from channels.layers import channel_layers
    from django.conf import settings

    backend = settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", "")
    if not backend or backend.endswith("InMemoryChannelLayer"):
        return None
    return channel_layers.make_backend("default")


class ChangeFeed:
    """One worker's end of the ``mcp`` group: ``notify`` sends, the listener applies others'."""

    def __init__(self, group: str, origin: str, apply: Apply):
        self.group = group
        self.origin = origin
        self.apply = apply
        self.received = 0
        self.listening = threading.Event()
        self._layer: Any = None

    def start(self, layer_factory: Callable[[], Any] | None) -> asyncio.Task | None:
        """Make the layer and start the listener task (on the running loop); None without a layer."""
        layer = None
        if layer_factory is not None:
            try:
                layer = layer_factory()
            except Exception as exc:
                logger.warning("MCP change notifications disabled: channel layer unavailable (%s)", exc)
        self._layer = layer
        if layer is None:
            return None
        return asyncio.get_running_loop().create_task(self._listen(), name="mcp-listener")

    async def close(self) -> None:
        """Close the layer's connection pools (after the listener task was cancelled)."""
        if self._layer is not None:
            with contextlib.suppress(Exception):
                await self._layer.close_pools()
            self._layer = None

    async def notify(self, name: str, action: str) -> bool:
        """Tell the other workers that ``name`` was ``added`` / ``updated`` / ``removed``."""
        if self._layer is None:
            return False
        message = {"type": "mcp.changed", "name": name, "action": action, "origin": self.origin}
        try:
            await self._layer.group_send(self.group, message)
        except Exception as exc:
            logger.warning(
                "MCP change of %s not broadcast (%s); other workers catch up on their next check", name, exc
            )
            return False
        return True

    async def _listen(self) -> None:
        layer = self._layer
        delay = 1.0
        while True:
            renew: asyncio.Task | None = None
            try:
                channel = await layer.new_channel("mcp")
                await layer.group_add(self.group, channel)
                renew = asyncio.get_running_loop().create_task(self._renew_group(channel))
                self.listening.set()
                delay = 1.0
                while True:
                    message = await layer.receive(channel)
                    await self._on_changed(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.listening.clear()
                logger.warning("MCP change listener: %s; retrying in %.0f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
            finally:
                if renew is not None:
                    renew.cancel()

    async def _renew_group(self, channel: str) -> None:
        while True:
            await asyncio.sleep(GROUP_RENEW_S)
            with contextlib.suppress(Exception):
                await self._layer.group_add(self.group, channel)

    async def _on_changed(self, message: dict) -> None:
        if message.get("type") != "mcp.changed" or message.get("origin") == self.origin:
            return
        name, action = message.get("name"), message.get("action")
        if not isinstance(name, str):
            return
        self.received += 1
        logger.info("MCP server %s %s on another worker; applying here", name, action)
        try:
            await self.apply(name, action)
        except Exception:
            logger.exception("MCP server %s: applying the change from another worker failed", name)
