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


AT = 1795866993.57  # 2026-11-28 11:56:33.570 UTC


@pytest.fixture
def spoken(db):
    """Two spoken turns: one decoded in the caller's pause (stt ~0), one with an old 0 and no
    pause figure (rows stored before stt_pause_decode existed)."""
    session = Session.objects.create(session_id="sess-stt", scenario="banking", transport="phone")
    for i, latency in enumerate(
        [
            {"stt": 0.0, "stt_pause_decode": 140.0, "end_to_first_audio": 700},
            {"stt": 0.0, "end_to_first_audio": 650},
        ]
    ):
        HistoryTurn.objects.create(session=session, role="user", content="hello", at=AT + 2 * i)
        HistoryTurn.objects.create(
            session=session,
            role="assistant",
            content="Hi.",
            agent="concierge",
            latency_ms=latency,
            at=AT + 2 * i + 1,
        )
    HandoffRecord.objects.create(
        session=session, from_agent="concierge", to_agent="auth_agent", type="discrete", at=AT + 5
    )
    return session


def test_times_are_dates_and_speech_to_text_says_what_it_measured(staff_client, spoken):
    html = staff_client.get(f"/admin/agents_app/session/{spoken.session_id}/change/").content.decode()
    assert "1795866993" not in html.replace('data-at="1795866993', "")  # no raw epoch shown
    assert "2026-11-28 11:56:33.570 UTC" in html  # the history and handoff inlines
    assert "2026-11-28 11:56:38.570 UTC" in html
    view = viewer(staff_client, spoken)
    assert '<time class="at" datetime="2026-11-28T11:56:33.570+00:00"' in view and ">11:56:33</time>" in view
    assert "speech to text (decoded in the caller&#x27;s pause)" in view
    labels = re.findall(r'<span class="label">([^<]+)</span>', view)
    assert labels.count("speech to text (decoded in the caller&#x27;s pause)") == 1
    assert not any(label.startswith("speech to text") and "pause" not in label for label in labels)
    assert "speech to text: not measured" in view  # the old 0 is not drawn as a 0 ms bar
    assert "> 0 ms" not in view and ">0 ms" not in view


def test_the_history_list_shows_dates(staff_client, spoken):
    html = staff_client.get("/admin/agents_app/historyturn/").content.decode()
    assert "2026-11-28 11:56:33.570 UTC" in html and "1795866993" not in html
