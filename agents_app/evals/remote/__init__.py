"""Agent-test targets over a running service's transports (browser socket, phone media stream,
AudioHook); :mod:`agents_app.evals.remote_targets` is their public face."""
