"""MCP servers at runtime: models, connection manager, OAuth, REST, admin."""
