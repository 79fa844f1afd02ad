"""Acceptance: the OpenAPI schema a deployment serves is what its endpoints do.

Schemathesis, as an outside tester runs it, reads ``/api/v1/schema/`` and sends every operation
schema-valid and schema-violating requests (examples, boundary values, fuzzing, and sequences that
feed one answer's ids into the next request), with the deployment's API key and without or with a
wrong one. Every check is on (``schemathesis.toml`` beside this file says where a schema-valid body
may still be refused with 400, and why): no 5xx; every status, content type and body documented;
bad input, a missing body or a missing key refused; valid input accepted; ``Allow`` as documented.
The server's log must stay clean: hostile input is answered, never an incident.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from deployments import RUN, UVICORN, Deployment, assert_log_clean

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

CONFIG = Path(__file__).with_name("schemathesis.toml")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
# per operation and phase (25 was ~1300 requests, 70-100 s on a 2-core CI machine; 10 was 115 s on
# uvicorn2 with three test workers, the suite's longest test). The schema and its endpoints are the
# application's, whichever server runs it; a sample of 5 (56 s alone) still found the NUL character
# a JSON-typed field passed to PostgreSQL (voiceagent.parsers). Its own deployments, not the shared
# ones: the fuzzing edits agents and scenarios, which the modules after it talk to
EXAMPLES = {UVICORN: 5, RUN: 6}
# the coverage phase (every boundary of every field) and the stateful sequences do not depend on
# max-examples: they run in full on the scale-out deployment; scripts/run gets examples and fuzzing
PHASES = {UVICORN: "examples,coverage,fuzzing,stateful", RUN: "examples,fuzzing"}
SEED = 20261128  # the same cases on every run (a failure reproduces with this seed)


@pytest.mark.timeout(300)  # a fuzz of every operation: CPU-bound in the client and the server
def test_every_operation_answers_as_the_schema_says(deployment: Deployment, tmp_path: Path):
    answer = httpx.get(f"{deployment.http}/schema/?format=json", headers=deployment.auth, timeout=30)
    assert answer.status_code == 200, answer.text
    schema = tmp_path / "openapi.json"
    schema.write_text(json.dumps(answer.json()))
    run = subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(CONFIG),
            "run",
            str(schema),
            "--url",
            deployment.http.removesuffix("/api/v1"),
            "--checks",
            "all",
            "--max-examples",
            str(EXAMPLES[deployment.kind]),
            "--seed",
            str(SEED),
            "--phases",
            PHASES[deployment.kind],
            "--workers",
            "1",
            "--no-color",
        ],
        cwd=tmp_path,
        env={**os.environ, "ACCEPTANCE_API_KEY": deployment.api_key},
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = run.stdout + run.stderr
    assert run.returncode == 0, f"schemathesis found what the schema does not say:\n{report[-12000:]}"
    assert "Tested: " in report  # it ran every operation, not an empty selection
    assert_log_clean(deployment)
