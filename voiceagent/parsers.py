"""The API's JSON parser: DRF's, plus an answer for bodies nested too deeply to parse.

Python's JSON decoder raises ``RecursionError`` (not ``ValueError``) on a body like ``[[[[...``
tens of thousands deep; DRF only catches ``ValueError``, so such a body became a 500. Here it is
a 400 ``{"detail"}`` like any other malformed body, on every endpoint.
"""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

__all__ = ["SafeJSONParser"]


class SafeJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply") from None
