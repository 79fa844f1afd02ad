"""deploy/grafana/voiceagent.json: every query of the dashboard names metrics the service exports.

The exported names come from the service's own ``GET /metrics`` (the running registry), never
from a list kept here: a metric renamed or dropped in the code fails this test until the
dashboard follows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from voiceagent.config import load_config

pytestmark = pytest.mark.django_db
DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "voiceagent.json"
# the series each metric type is exposed as
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
}
PROMQL_WORDS = {"sum", "by", "rate", "histogram_quantile", "le", "without", "avg", "max", "min", "irate"}


def exported_series(api_client) -> set[str]:
    with override_settings(CONFIG=load_config({}), PRODUCTION=False):
        response = api_client.get("/metrics")
    assert response.status_code == 200
    names: set[str] = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
    return names


def queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def test_every_query_names_exported_metrics(api_client):
    exported = exported_series(api_client)
    assert "voiceagent_turns_total" in exported  # the registry was read
    found = queries()
    assert len(found) >= 10
    for title, expr in found:
        without_labels = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expr)  # selectors, ranges, strings
        without_by = re.sub(r"\b(by|without)\s*\([^)]*\)", " ", without_labels)
        words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", without_by)) - PROMQL_WORDS
        metrics = {w for w in words if not w.startswith("$")}
        assert metrics, f"{title}: {expr} names no metric"
        unknown = metrics - exported
        assert not unknown, f"{title}: {expr} names {sorted(unknown)}, which /metrics does not export"


def test_the_dashboard_covers_every_service_metric(api_client):
    """Every voiceagent_* family exported has a panel (a new metric gets one)."""
    with override_settings(CONFIG=load_config({}), PRODUCTION=False):
        body = api_client.get("/metrics").content.decode()
    families = {
        f.name
        for f in text_string_to_metric_families(body)
        if f.name.startswith("voiceagent_") and not f.name.endswith("_created")  # creation times
    }
    text = " ".join(expr for _title, expr in queries())
    missing = {name for name in families if name not in text}
    assert not missing, f"no panel shows {sorted(missing)}"


def test_a_query_with_an_unknown_metric_is_caught(api_client):
    exported = exported_series(api_client)
    assert "voiceagent_turn_latency_seconds_bucket" in exported
    assert "voiceagent_turn_latency_bucket" not in exported
