"""Live runs on a real GPU through the run queue, its workers under their default memory cap.

Marked `gpu`: skipped without a CUDA device. On a GPU machine:
`TRITON_INTERPRET=0 python -m pytest -m gpu tests/app/test_runs_gpu.py`.
"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.main import create_app

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _finished(client: TestClient, run_id: str, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/api/runs/{run_id}").json()
        if run["state"] in ("done", "failed", "timeout"):
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish")


@pytest.mark.parametrize(
    "body",
    [
        {"mode": "fwd", "what": "time", "batch": 2, "heads": 8, "seq": 2048, "head_dim": 128},
        {"mode": "fwd", "what": "trace", "seq": 256, "head_dim": 64, "dtype": "bf16"},
        {"mode": "bwd", "what": "both", "batch": 2, "heads": 4, "seq": 1024, "head_dim": 64},
        {"mode": "decode", "what": "trace", "heads": 4, "seq": 1, "seq_k": 4096},
    ],
    ids=["fwd-time", "fwd-trace", "bwd-both", "decode-trace"],
)
def test_runs_finish_under_the_default_memory_cap(body: dict) -> None:
    settings = Settings(runs_devices=["cuda:0"])
    assert settings.runs_worker_memory_mib > 0  # the cap these runs live under
    with TestClient(create_app(settings)) as client:
        r = client.post("/api/runs", json={**body, "seed": int(time.time()) % 1000})
        assert r.status_code == 202, r.text
        run = _finished(client, r.json()["id"])
        assert run["state"] == "done", run.get("error")
        result = run["result"]
        if body["what"] in ("time", "both"):
            assert result["timing"]["measured_row"]["ms"] > 0
        if body["mode"] == "fwd" and body["what"] == "trace":
            compare = result["trace"]["compare"]
            assert compare["fields_equal"] and compare["beyond"] == [], compare["beyond"]
        if body["mode"] == "bwd":
            assert all(g["within"] for g in result["gradients"]["gradients"]), result["gradients"]
        if body["mode"] == "decode":
            assert all(s["within"] for s in result["decode"]["per_split"])
