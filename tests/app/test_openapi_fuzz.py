"""Schemathesis against the app's own OpenAPI schema, in process (ASGI).

Requests drawn from the schema (valid and invalid) must never get a server error, and every
response the schema documents must have the documented shape and content type. Rate limits are
lifted so that the fuzzer reaches the routes; live runs go to a stand-in executor.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from flashscope.app.config import Settings
from flashscope.app.main import create_app

app = create_app(
    Settings(
        rate_compute_burst=10**6,
        rate_runs_burst=10**6,
        rate_rooms_burst=10**6,
        runs_executor="tests.app.fake_jobs:execute",
        runs_devices=["cpu"],
        runs_timeout_s=5.0,
        max_seq=256,  # keep each trace the fuzzer asks for small
    )
)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]


@pytest.fixture(scope="module", autouse=True)
def _stop_run_workers():
    yield
    app.state.runs.close()


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_error_and_documented_shapes(case):
    case.call_and_validate(checks=CHECKS)
