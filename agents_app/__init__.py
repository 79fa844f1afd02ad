"""Agents, scenarios, handoffs, sessions and demo profiles."""
