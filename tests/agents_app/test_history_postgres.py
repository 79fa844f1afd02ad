"""The history on PostgreSQL keeps a turn that holds a NUL character (a tool's result, a model's
arguments): text and jsonb cannot store one, and the row was lost with an ERROR ("history lost")."""

from __future__ import annotations

import json
import os
import subprocess

import postgres
import pytest
from servers import PYTHON, ROOT

pytestmark = pytest.mark.slow
WRITE = r"""
import json
import django
django.setup()
from agents_app.sessions import history, write_batch, write_turn
from voiceagent.conversation.session import Turn
write_turn("nul-1", Turn(role="user", content="my card\x00 was stolen"), scenario="banking")
tool = Turn(role="tool", content='{"note": "\x00"}', tool_name="lookup", arguments={"a\x00": ["b\x00", 1]})
write_batch([("turn", "nul-1", tool, "banking", None)])
print(json.dumps(history("nul-1")))
"""


def test_a_turn_holding_a_nul_character_is_kept():
    with postgres.temporary("history", migrated=True) as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHE_", "DATABASE_", "MCP_"))}
        env.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="voiceagent.settings", LOG_LEVEL="WARNING")
        done = subprocess.run(
            [PYTHON, "-c", WRITE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stderr[-3000:]
    user, tool = json.loads(done.stdout.strip().splitlines()[-1])
    assert user["content"] == "my card\ufffd was stolen"
    assert tool["content"] == '{"note": "\ufffd"}'
    assert tool["arguments"] == {"a\ufffd": ["b\ufffd", 1]}
