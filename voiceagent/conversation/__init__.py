"""The conversation engine: pure asyncio, no Django, no ORM, no Channels.

Transports feed it audio/text/DTMF and render its typed events; agents, scenarios and tools
reach it as immutable specs (see :mod:`voiceagent.conversation.specs`).
"""
