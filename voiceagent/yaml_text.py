"""YAML written by people (agent definitions, agent tests): one error with a line and a reason.

PyYAML's composer recurses once per nesting level, so a document nested a few thousand levels
deep (``[[[[...``) ended ``manage.py test_agents`` in a ``RecursionError`` traceback, and where it
ended depended on the interpreter's recursion limit. Here nesting deeper than :data:`MAX_DEPTH`
is a :class:`YamlProblem` like any syntax error, which the callers list with the file's name.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

__all__ = ["MAX_DEPTH", "YamlProblem", "load_yaml"]

#: Lists and mappings inside each other; the files people write here nest fewer than ten deep.
MAX_DEPTH = 64


class YamlProblem(ValueError):
    """Why the text is no YAML document we can read; ``line`` (1-based) when known."""

    def __init__(self, reason: str, line: int | None = None):
        super().__init__(f"{reason} (line {line})" if line else reason)
        self.reason = reason
        self.line = line


class _TooDeep(yaml.MarkedYAMLError):
    pass


@functools.cache
def _bounded(loader: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """``loader`` whose composer stops at :data:`MAX_DEPTH` levels, before Python's stack does."""

    class Bounded(loader):  # type: ignore[misc, valid-type]
        _depth = 0

        def compose_node(self, parent, index):
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise _TooDeep(problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    return Bounded


def load_yaml(text: str, loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    """The document in ``text`` (a SafeLoader or a subclass of it); :class:`YamlProblem` if not."""
    try:
        return yaml.load(text, Loader=_bounded(loader))  # noqa: S506 - SafeLoader or a subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlProblem(
            exc.problem or exc.context or "invalid YAML", mark.line + 1 if mark else None
        ) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(str(exc).splitlines()[0] if str(exc) else "invalid YAML") from None
    except RecursionError:
        raise YamlProblem("nested too deeply to read (lists or mappings inside each other)") from None
