"""Admin conversation viewer: a session's page shows its transcript in order with agents, tool
calls, handoffs, and a waterfall of each assistant turn's stages, everything escaped."""

from __future__ import annotations

import re

import pytest

from agents_app.models import HandoffRecord, HistoryTurn, Session


@pytest.fixture
def staff_client(client, django_user_model, loaded):
    user = django_user_model.objects.create_superuser("viewer", "viewer@example.com", "pw-123456-xyz")
    client.force_login(user)
    return client


@pytest.fixture
def session(db):
    session = Session.objects.create(session_id="sess-view-1", scenario="banking", transport="browser")
    turns = [
        ("user", "<script>alert(1)</script> i lost my card", None, None, None, None, 10.0),
        (
            "assistant",
            "Let me pass you to authentication.",
            "concierge",
            None,
            {
                "stt": None,
                "llm_first_token": 100,
                "tts_first_audio": 200,
                "end_to_first_audio": 400,
                "tools": [{"name": "handoff_auth_agent", "ms": 50}],
                "handoff": 12,
                "barge_in": None,
            },
            {"llm_tokens_in": 321, "llm_tokens_out": 17, "tts_chars": 34, "stt_audio_s": None},
            11.0,
        ),
        ("tool", '{"status": "<b>found</b>"}', "auth_agent", "lookup_card", None, None, 12.0),
        (
            "assistant",
            "Your card is blocked.",
            "auth_agent",
            None,
            {"stt": 80, "llm_first_token": None, "tts_first_audio": None, "end_to_first_audio": 100},
            {},
            13.0,
        ),
    ]
    fields = ("role", "content", "agent", "tool_name", "latency_ms", "usage", "at")
    HistoryTurn.objects.bulk_create(
        HistoryTurn(session=session, **dict(zip(fields, t, strict=True))) for t in turns
    )
    HandoffRecord.objects.create(
        session=session, from_agent="concierge", to_agent="auth_agent", type="announced", at=11.5
    )
    return session


def viewer(staff_client, session) -> str:
    response = staff_client.get(f"/admin/agents_app/session/{session.session_id}/change/")
    assert response.status_code == 200
    html = response.content.decode()
    start = html.index('id="conversation-viewer"')
    return html[start : html.index("</fieldset>", start)]


def test_viewer_shows_turns_in_order_with_tool_call_and_handoff(staff_client, session):
    html = viewer(staff_client, session)
    kinds = re.findall(r'<li class="(user|assistant|tool|handoff)"', html)
    assert kinds == ["user", "assistant", "handoff", "tool", "assistant"]
    assert "Let me pass you to authentication." in html and "Your card is blocked." in html
    assert html.index("concierge</span>") < html.index("auth_agent</span>")
    assert "tool lookup_card" in html
    assert "concierge → auth_agent (announced)" in html
    assert "llm_tokens_in 321" in html and "llm_tokens_out 17" in html and "tts_chars 34" in html
    assert "stt_audio_s" not in html  # not reported: not shown
    assert "handoff 12 ms" in html


def test_waterfall_bars_take_their_widths_from_the_timings(staff_client, session):
    html = viewer(staff_client, session)
    bars = re.findall(
        r'<span class="bar ([a-z_]+)" style="width: ([0-9.]+)%"></span></span><span class="ms">(\d+) ms', html
    )
    # one scale for the session: its longest stage (400 ms) is the full width
    assert bars == [
        ("llm_first_token", "25.0", "100"),
        ("tts_first_audio", "50.0", "200"),
        ("end_to_first_audio", "100.0", "400"),
        ("tool", "12.5", "50"),
        ("stt", "20.0", "80"),
        ("end_to_first_audio", "25.0", "100"),
    ]
    assert "tool handoff_auth_agent" in html


def test_viewer_escapes_what_the_caller_and_tools_said(staff_client, session):
    html = viewer(staff_client, session)
    assert "<script>alert(1)</script>" not in html and "<b>found</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; i lost my card" in html
    assert "&lt;b&gt;found&lt;/b&gt;" in html


def test_viewer_of_an_empty_session_says_so(staff_client, db):
    empty = Session.objects.create(session_id="sess-empty", scenario="banking")
    assert "No turns yet." in viewer(staff_client, empty)


def test_viewer_needs_staff(client, session):
    response = client.get(f"/admin/agents_app/session/{session.session_id}/change/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
