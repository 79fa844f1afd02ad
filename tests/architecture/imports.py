"""The import graph of the production packages, read from the source with ast.

Used by the architecture tests (layering, cycles, file sizes) and runnable on its
own: ``python tests/architecture/imports.py`` prints the cycles and large files.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("voiceagent", "agents_app", "mcp_app", "calls", "bridge")
APPS = ("agents_app", "mcp_app", "calls", "bridge")
# The Django project's wiring may name the apps; nothing else under voiceagent/ may.
PROJECT_WIRING = {
    "voiceagent.settings",
    "voiceagent.urls",
    "voiceagent.asgi",
    "voiceagent.routing",
}


def production_files() -> dict[str, Path]:
    """Module name -> path for every production module (migrations excluded)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "migrations" in rel.parts:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Every module name imported anywhere in the file (function bodies too),
    except under ``if TYPE_CHECKING``: a lazy import is still an arrow."""
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                if not is_package:
                    anchor = anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def third_party_imports() -> dict[str, set[str]]:
    """Module -> the top-level names of what it imports from outside the production packages."""
    found: dict[str, set[str]] = {}
    for module, path in production_files().items():
        tree = ast.parse(path.read_text(), filename=str(path))
        names = _imported_names(tree, module, path.name == "__init__.py")
        found[module] = {name.split(".")[0] for name in names if name.split(".")[0] not in PACKAGES}
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the production modules it imports (resolved to real modules)."""
    modules = production_files()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets: set[str] = set()
        for name in _imported_names(tree, module, path.name == "__init__.py"):
            # "from a.b import c": c may be a module or a name inside a.b.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, app module) where the runtime outside the project wiring imports an app."""
    return sorted(
        (module, target)
        for module, targets in graph.items()
        if module.split(".")[0] == "voiceagent" and module not in PROJECT_WIRING
        for target in targets
        if target.split(".")[0] in APPS
    )


def large_files(limit: int = 500) -> list[tuple[str, int]]:
    sizes = [
        (str(path.relative_to(ROOT)), len(path.read_text().splitlines()))
        for path in production_files().values()
    ]
    return sorted((item for item in sizes if item[1] > limit), key=lambda item: -item[1])


if __name__ == "__main__":
    graph = import_graph()
    for component in cycles(graph):
        print("cycle:", " <-> ".join(component))
    for module, target in upward_imports(graph):
        print("upward:", module, "->", target)
    for name, lines in large_files():
        print("large:", name, lines)
