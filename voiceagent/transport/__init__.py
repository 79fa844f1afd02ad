"""The runtime's audio transport layer: what every audio socket needs, whatever its wire.

- :mod:`.driver`: :class:`~.driver.AudioSocket`, the transport driver (admission, limits and
  close codes, idle timeout, starting, pumping and ending the conversation, paced playback,
  the dashboard relay). A new transport subclasses it and writes only its wire codec.
- :mod:`.websocket`: the lean ASGI WebSocket endpoint under it.
- :mod:`.envelope`: the server message envelope and the engine events in it.
- :mod:`.playback`, :mod:`.ratelimit`: paced agent audio, the inbound message-rate limiter.
- :mod:`.relay`, :mod:`.live`: the dashboard relay over the channel layer and the registry of
  live sessions across workers.

It imports no app: the codecs (``calls.browser``, ``calls.media``, ``bridge.consumer``) sit above.
"""
