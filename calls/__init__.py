"""Telephony and browser transports: REST, webhooks, media-stream and browser consumers."""
