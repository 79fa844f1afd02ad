"""What the apps hand the runtime: the one door through which arrows point down.

The runtime (``voiceagent``) sits below the apps and never imports one. Each app says what it
contributes from its ``AppConfig.ready()``, the way Django's contrib apps plug into a project:
lifecycle components (a start and its cleanup in a named startup step), readiness checks, tool
sources, and the two services a conversation needs (the session store and the agent directory).
:func:`voiceagent.components.install` then wires them into the process's lifecycle.

Contributions are dotted paths, resolved on first use, so ``ready()`` stays cheap: a management
command that never serves does not import the MCP SDK or the telephony client.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils.module_loading import import_string

from voiceagent.health.checks import COMPONENTS as CHECK_NAMES
from voiceagent.lifecycle import STEP_BY_NAME


@dataclass(frozen=True)
class Component:
    """A start (and/or its cleanup) plugged into startup step ``step`` by ``app``."""

    app: str
    step: str
    name: str
    start: str | None = None
    stop: str | None = None


@dataclass(frozen=True)
class Check:
    app: str
    component: str
    check: str


@dataclass(frozen=True)
class ToolSource:
    """A module whose import registers its tools into the engine's registry."""

    app: str
    name: str
    module: str


class Contributions:
    """The registry of what the installed apps contribute (one per process: :data:`contributions`)."""

    def __init__(self) -> None:
        self.components: list[Component] = []
        self.checks: list[Check] = []
        self.tool_sources: list[ToolSource] = []
        self.status_sources: dict[str, str] = {}
        self._services: dict[str, tuple[str, str]] = {}

    # --- what apps call from ready() ---------------------------------------------------------------
    def component(
        self, app: str, step: str, name: str, *, start: str | None = None, stop: str | None = None
    ) -> None:
        if step not in STEP_BY_NAME:
            raise ValueError(f"{app}: unknown startup step {step!r}; steps are {', '.join(STEP_BY_NAME)}")
        if start is None and stop is None:
            raise ValueError(f"{app}: component {name!r} has neither a start nor a stop")
        entry = Component(app, step, name, start, stop)
        if entry not in self.components:  # ready() may run twice in tests
            self.components.append(entry)

    def check(self, app: str, component: str, check: str) -> None:
        if component not in CHECK_NAMES:
            known = ", ".join(CHECK_NAMES)
            raise ValueError(f"{app}: unknown readiness component {component!r}; one of {known}")
        entry = Check(app, component, check)
        if entry not in self.checks:
            self.checks.append(entry)

    def tool_source(self, app: str, name: str, module: str) -> None:
        entry = ToolSource(app, name, module)
        if entry not in self.tool_sources:
            self.tool_sources.append(entry)

    def status_source(self, app: str, key: str, source: str) -> None:
        """A ``/ready`` detail (``details.<key>``), e.g. the MCP servers' states."""
        if key not in STATUS_KEYS:
            raise ValueError(f"{app}: unknown /ready detail {key!r}; one of {', '.join(STATUS_KEYS)}")
        self.status_sources[key] = source

    def provide(self, app: str, service: str, factory: str) -> None:
        """``service`` is ``"session_store"`` or ``"agent_directory"``; ``factory`` builds one."""
        if service not in SERVICES:
            raise ValueError(f"{app}: unknown service {service!r}; one of {', '.join(SERVICES)}")
        owner = self._services.get(service)
        if owner is not None and owner != (app, factory):
            raise ValueError(f"{app}: {service} is already provided by {owner[0]}")
        self._services[service] = (app, factory)

    # --- what the runtime calls --------------------------------------------------------------------
    def new(self, service: str) -> Any:
        """A new instance of a provided service (a conversation takes its own)."""
        try:
            _app, factory = self._services[service]
        except KeyError:
            raise RuntimeError(
                f"no installed app provides the {service}: is agents_app in INSTALLED_APPS?"
            ) from None
        return resolve(factory)()

    def load_tool_sources(self) -> list[str]:
        for source in self.tool_sources:
            importlib.import_module(source.module)
        return [source.name for source in self.tool_sources]


SERVICES = ("session_store", "agent_directory")
STATUS_KEYS = ("mcp_servers",)


def resolve(path: str) -> Callable[..., Any]:
    """The callable a dotted path names (imported on first use)."""
    return import_string(path)


contributions = Contributions()
