"""Dynamic configuration: runtime-tunable keys that can change without a restart.

Two providers:

- ``environment`` (default): tunable keys come from the validated environment; refresh
  re-reads nothing and reports no change.
- ``file`` (``APPCONFIG_FILE``, YAML or JSON mapping): its tunable keys override the
  environment. Re-read on ``POST /appconfig/refresh`` and every ``APPCONFIG_REFRESH_INTERVAL``
  seconds. Values are validated with the same parsers as the environment; a bad file keeps the
  last good values and reports ``status: "error"``.

Readers call :func:`get`; each worker process refreshes on its own timer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from voiceagent.config import BY_NAME, TUNABLE_KEYS, Config, ConfigError, parse_value

logger = logging.getLogger("voiceagent.appconfig")


class AppConfig:
    """Holds the effective tunable values and the provider's status."""

    def __init__(self, config: Config):
        self._config = config
        self.path: Path | None = Path(config.APPCONFIG_FILE) if config.APPCONFIG_FILE else None
        self.interval = float(config.APPCONFIG_REFRESH_INTERVAL)
        self._overrides: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.last_refresh: float | None = None
        self.status = "ok"
        self.error: str | None = None
        self.ignored: list[str] = []
        self._task: asyncio.Task | None = None
        if self.path is not None:
            self.refresh()

    @property
    def provider(self) -> str:
        return "file" if self.path is not None else "environment"

    def get(self, key: str) -> Any:
        """Effective value of a configuration key (file override first for tunable keys)."""
        with self._lock:
            if key in self._overrides:
                return self._overrides[key]
        return self._config[key]

    def values(self) -> dict[str, Any]:
        return {key: self.get(key) for key in TUNABLE_KEYS}

    def _read_file(self) -> dict[str, Any]:
        assert self.path is not None
        text = self.path.read_text(encoding="utf-8")
        data = json.loads(text) if self.path.suffix.lower() == ".json" else yaml.safe_load(text)
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ValueError("the file must hold a mapping of KEY: value")
        return data

    def refresh(self) -> list[str]:
        """Re-read the source; return the tunable keys whose effective value changed."""
        self.last_refresh = time.time()
        if self.path is None:
            self.status, self.error = "ok", None
            return []
        try:
            data = self._read_file()
            overrides: dict[str, Any] = {}
            ignored: list[str] = []
            for key, raw in data.items():
                if key not in TUNABLE_KEYS:
                    ignored.append(str(key))
                    continue
                overrides[key] = parse_value(BY_NAME[key], str(raw))
        except (OSError, ValueError, yaml.YAMLError, ConfigError) as exc:
            self.status = "error"
            self.error = f"{self.path.name}: {str(exc).splitlines()[0]}"
            logger.warning("appconfig refresh failed, keeping last good values: %s", self.error)
            return []
        before = self.values()
        with self._lock:
            self._overrides = overrides
        after = self.values()
        changed = sorted(k for k in TUNABLE_KEYS if before[k] != after[k])
        self.status, self.error, self.ignored = "ok", None, sorted(ignored)
        if ignored:
            logger.warning("appconfig: ignoring keys that are not runtime-tunable: %s", ", ".join(ignored))
        if changed:
            logger.info("appconfig: changed %s", ", ".join(changed))
        return changed

    def describe(self) -> dict[str, Any]:
        """The ``GET /appconfig`` body (key names only, never values of secrets)."""
        body = {
            "provider": self.provider,
            "enabled": self.path is not None,
            "source": str(self.path) if self.path is not None else "environment variables",
            "keys": sorted(self._overrides) if self.path is not None else list(TUNABLE_KEYS),
            "tunable_keys": list(TUNABLE_KEYS),
            "last_refresh": self.last_refresh,
            "refresh_interval_s": self.interval if self.path is not None else None,
            "status": self.status,
        }
        if self.error:
            body["error"] = self.error
        if self.ignored:
            body["ignored_keys"] = self.ignored
        return body

    # --- background timer ----------------------------------------------------------------------
    def start_timer(self) -> str:
        """Start periodic refresh on the running loop (file provider only)."""
        if self.path is None:
            return "environment provider: no refresh timer"
        self._task = asyncio.get_running_loop().create_task(self._timer(), name="appconfig-refresh")
        return f"file provider {self.path.name}, refresh every {self.interval:g} s"

    async def _timer(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await asyncio.to_thread(self.refresh)

    async def stop_timer(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


_instance: AppConfig | None = None


def appconfig() -> AppConfig:
    """The process's dynamic-configuration provider."""
    global _instance
    if _instance is None:
        from django.conf import settings

        _instance = AppConfig(settings.CONFIG)
    return _instance


def get(key: str) -> Any:
    """Effective value of ``key`` (see module docstring)."""
    return appconfig().get(key)


def reset_for_tests(instance: AppConfig | None = None) -> None:
    global _instance
    _instance = instance
