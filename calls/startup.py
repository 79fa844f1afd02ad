"""What calls contributes to the service lifecycle (wired in ``CallsConfig.ready``)."""

from __future__ import annotations

from calls.acs import telephony_client


async def stop_telephony() -> None:
    """Close the telephony caller's SDK client (its aiohttp session) on the serving loop; left open,
    the interpreter's exit reports it unclosed with a traceback."""
    client = telephony_client()
    if client is not None:
        await client.close()
