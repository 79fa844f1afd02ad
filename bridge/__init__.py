"""Contact-center AudioHook v2 bridge to the realtime voice API."""
