"""YAML written by people (agent definitions, agent tests): one error with a line and a reason.

PyYAML's scanner and composer recurse once per nesting level, so a document nested a few thousand
levels deep (``[[[[...``) ended ``manage.py test_agents`` in a ``RecursionError`` traceback. Here it
is a :class:`YamlProblem` like any syntax error, which the callers list with the file's name.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["YamlProblem", "load_yaml"]


class YamlProblem(ValueError):
    """Why the text is no YAML document we can read; ``line`` (1-based) when known."""

    def __init__(self, reason: str, line: int | None = None):
        super().__init__(f"{reason} (line {line})" if line else reason)
        self.reason = reason
        self.line = line


def load_yaml(text: str, loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    """The document in ``text`` (a SafeLoader or a subclass of it); :class:`YamlProblem` if not."""
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - SafeLoader or a subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlProblem(
            exc.problem or exc.context or "invalid YAML", mark.line + 1 if mark else None
        ) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(str(exc).splitlines()[0] if str(exc) else "invalid YAML") from None
    except RecursionError:
        raise YamlProblem("nested too deeply to read (lists or mappings inside each other)") from None
