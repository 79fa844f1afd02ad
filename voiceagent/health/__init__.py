"""Liveness, readiness, deep health, pool metrics and dynamic configuration endpoints."""
