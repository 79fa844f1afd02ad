"""The API's JSON parser: DRF's, plus answers for two bodies DRF let through to a 500.

- Python's JSON decoder raises ``RecursionError`` (not ``ValueError``) on a body like ``[[[[...``
  tens of thousands deep; DRF only catches ``ValueError``.
- A NUL character (``"\\u0000"``) anywhere in a string or key: DRF's ``CharField`` refuses it, but a
  JSON-typed field (an agent's ``turn_taking``, a scenario's ``agent_defaults``, an MCP server's
  ``args``) passed it to PostgreSQL, whose text and jsonb cannot hold it (schemathesis found it:
  ``PUT /agents/{name}`` with ``{"turn_taking": {"goodbye": "...\\u0000..."}}``).

Both are a 400 ``{"detail"}`` like any other malformed body, on every endpoint.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

__all__ = ["SafeJSONParser", "holds_nul"]


def holds_nul(data: Any) -> bool:
    """Does any string of a parsed JSON document (keys included) hold a NUL character?"""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return True
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


class SafeJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply") from None
        if holds_nul(data):
            raise ParseError("JSON parse error - strings must not contain NUL (\\u0000) characters")
        return data
