"""Reading definition files from disk: YAML documents and prompt template files.

Both report what went wrong as :class:`Problem` objects (with the file and line where YAML
allows) instead of raising, so one bad file never stops the others from loading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agents_app.definitions.problems import Problem
from voiceagent.yaml_text import YamlProblem, load_yaml

AGENTS_DIR = "agents"
SCENARIOS_DIR = "scenarios"
AGENT_FILE = "agent.yaml"
DEFAULTS_FILE = "_defaults.yaml"


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys instead of keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # unhashable key: the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {key!r}",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> tuple[Any, list[Problem]]:
    """The mapping in a YAML file (duplicate keys rejected), or ``None`` and why not."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(file, "(document)", f"cannot read file: {exc}")]
    try:
        data = load_yaml(text, _UniqueKeyLoader)
    except YamlProblem as exc:
        where = f" at line {exc.line}" if exc.line else ""
        return None, [Problem(file, "yaml", f"syntax error{where}: {exc.reason}")]
    if data is None:
        return None, [Problem(file, "(document)", "file is empty")]
    if not isinstance(data, dict):
        return None, [Problem(file, "(document)", f"must be a mapping, got {type(data).__name__}")]
    return data, []


def read_prompt_file(
    path_value: str, *, file: str, base_dir: Path | None, prompt_root: Path | None
) -> tuple[str | None, str, list[Problem]]:
    """(source, template file label, problems) of ``prompts.path``."""
    if base_dir is None:
        return None, file, [Problem(file, "prompts.path", "a prompt path needs the agent's folder")]
    path = base_dir / path_value
    root = prompt_root or base_dir
    if not path.resolve().is_relative_to(root.resolve()):
        return None, file, [Problem(file, "prompts.path", f"{path_value!r} points outside {root}")]
    if not path.is_file():
        return None, file, [Problem(file, "prompts.path", f"prompt file not found: {path_value}")]
    try:
        return path.read_text(encoding="utf-8"), str(path), []
    except (OSError, UnicodeDecodeError) as exc:
        return None, str(path), [Problem(str(path), "prompts.path", f"cannot read prompt file: {exc}")]
