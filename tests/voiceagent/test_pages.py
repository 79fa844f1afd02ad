"""The pages carry a Content-Security-Policy (issue 31, point 9) that their own code lives with:
scripts and styles from the service only, no inline code, no blob: worklet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

STATIC = Path(__file__).resolve().parents[2] / "voiceagent" / "static" / "voiceagent"

pytestmark = pytest.mark.django_db


def directives(header: str) -> dict[str, list[str]]:
    parts = (d.strip().split() for d in header.split(";") if d.strip())
    return {p[0]: p[1:] for p in parts}


@pytest.mark.parametrize("path", ["/", "/dashboard"])
def test_the_pages_send_a_strict_policy(client, path):
    response = client.get(path)
    assert response.status_code == 200
    policy = directives(response["Content-Security-Policy"])
    assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"]
    assert "ws://testserver" in policy["connect-src"] and "wss://testserver" in policy["connect-src"]
    assert not any("unsafe" in value or value in ("*", "blob:", "data:") for value in policy["script-src"])


@pytest.mark.parametrize("path", ["/", "/dashboard"])
def test_the_pages_hold_no_inline_code_the_policy_would_block(client, path):
    html = client.get(path).content.decode()
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, flags=re.S)
    assert scripts and all('src="/static/' in attrs and not body.strip() for attrs, body in scripts)
    assert "<style" not in html and not re.search(r"\sstyle\s*=", html)
    assert not re.search(r"\son[a-z]+\s*=", html)  # no inline event handlers
    assert "javascript:" not in html


def test_the_page_scripts_need_nothing_the_policy_refuses():
    for script in STATIC.glob("*.js"):
        text = script.read_text()
        assert "eval(" not in text and "new Function" not in text, script.name
        assert "createObjectURL" not in text, script.name  # a blob: worklet needs script-src blob:
        assert not re.search(r"setAttribute\(\s*[\"']style", text), script.name
    assert (STATIC / "capture-worklet.js").read_text().count('registerProcessor("pcm-capture"') == 1


def test_the_worklet_is_served_from_static(client):
    page = client.get("/").content.decode()
    url = re.search(r'data-worklet="([^"]+)"', page).group(1)
    assert url.startswith("/static/") and url.endswith(".js")
    served = client.get(url)
    assert served.status_code == 200 and "javascript" in served["Content-Type"]
