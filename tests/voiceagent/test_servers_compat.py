"""The close-frame rules of :mod:`voiceagent.servers_compat` (the real servers are in
``test_close_codes_servers.py``)."""

from __future__ import annotations

import pytest

from voiceagent.servers_compat import MAX_REASON_BYTES, fit_close_reason, install, is_sendable


@pytest.mark.parametrize("code", [1000, 1001, 1003, 1007, 1008, 1009, 1011, 1013, 1014, 3000, 4404, 4999])
def test_codes_an_endpoint_may_send(code):
    assert is_sendable(code)


@pytest.mark.parametrize("code", [999, 1004, 1005, 1006, 1015, 2000, 2999, 5000])
def test_codes_reserved_or_unassigned(code):
    assert not is_sendable(code)


def test_a_reason_that_fits_is_kept():
    assert fit_close_reason(None) == ""
    assert fit_close_reason("x" * MAX_REASON_BYTES) == "x" * MAX_REASON_BYTES


def test_a_long_reason_is_cut_on_a_character_boundary():
    ascii_cut = fit_close_reason("x" * (MAX_REASON_BYTES + 1))
    assert ascii_cut == "x" * 120 + "..." and len(ascii_cut.encode()) == MAX_REASON_BYTES
    wide = fit_close_reason("a" + "é" * 100)  # 1 + 2 * 100 bytes; byte 120 splits an "é"
    assert wide == "a" + "é" * 59 + "..."
    assert len(wide.encode()) <= MAX_REASON_BYTES


def test_install_patches_daphne_once():
    from daphne.ws_protocol import WebSocketProtocol  # the daphne app imports it in every process

    assert install() is True
    patched = WebSocketProtocol.handle_reply
    assert install() is True and WebSocketProtocol.handle_reply is patched
    assert WebSocketProtocol._voiceagent_close_codes is True
