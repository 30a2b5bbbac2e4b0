"""The real live-run executor through the run queue, on the CPU (Triton's interpreter)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.tracing import build_trace

from .test_runs import _wait


@pytest.fixture(scope="module")
def real_runs():
    settings = Settings(
        runs_executor="flashscope.app.runs.jobs:execute", runs_devices=["cpu"], runs_timeout_s=240
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_forward_trace_matches_the_simulator_and_timing_says_it_needs_a_gpu(real_runs):
    seed = random.SystemRandom().randrange(2**31)
    n = random.SystemRandom().choice([17, 40, 97])
    body = {"seq": n, "head_dim": 16, "block_m": 16, "block_n": 32, "stages": 1, "warps": 4,
            "causal": True, "what": "both", "mode": "fwd", "seed": seed}  # fmt: skip
    r = real_runs.post("/api/runs", json=body)
    assert r.status_code == 202, r.text
    done = _wait(real_runs, r.json()["id"], timeout=240)
    assert done["state"] == "done", (done["error"], seed)
    res = done["result"]
    assert res["backend"] == "cpu" and res["timing"] is None
    assert "timing needs a GPU" in res["timing_note"]
    assert "comparing with the simulator's trace, event by event" in done["messages"]
    cmp = res["trace"]["compare"]
    assert cmp["fields_equal"], f"seed={seed}"
    assert max(cmp["max_state_diff"].values()) < 3e-2, (cmp["max_state_diff"], seed)
    # An independent check: the run's events against the simulator's, built here.
    problem = AttentionProblem(seq_q=n, head_dim=16, causal=True, dtype="fp16")
    sim = build_trace("fa2", problem, TileConfig(16, 32, 1, 4), seed)
    events = res["trace"]["events"]
    assert len(events) == len(sim) == len(cmp["max_diff_per_event"]), f"seed={seed}"
    for i in (0, len(events) // 2, len(events) - 1):
        want = sim.event(i)
        assert events[i]["phase"] == want["phase"] and events[i]["step"] == i
        for key in ("m", "l"):
            a = np.array(events[i]["state"][key], dtype=float)
            b = np.array(want["state"][key], dtype=float)
            assert np.allclose(a, b, atol=3e-2, equal_nan=True), (i, key, seed)
    assert res["trace"]["compare"]["max_abs_err_vs_reference"] < 2e-2


def test_time_only_on_cpu_is_accepted_and_backward_checks_gradients(real_runs):
    seed = random.SystemRandom().randrange(2**31)
    body = {"seq": 32, "head_dim": 16, "block_m": 16, "block_n": 16, "stages": 1, "what": "time"}
    timed = real_runs.post("/api/runs", json=body)
    assert timed.status_code == 202
    res = _wait(real_runs, timed.json()["id"], timeout=240)["result"]
    assert res["timing"] is None and res["trace"] is None and "GPU" in res["timing_note"]
    body = {"seq": 33, "head_dim": 16, "heads": 2, "block_m": 16, "block_n": 16, "stages": 1,
            "dtype": "fp32", "mode": "bwd", "what": "trace", "seed": seed}  # fmt: skip
    done = _wait(real_runs, real_runs.post("/api/runs", json=body).json()["id"], timeout=240)
    assert done["state"] == "done", (done["error"], seed)
    grads = done["result"]["gradients"]
    assert grads["route"] == "separate"
    assert max(grads["max_abs_err"].values()) < 1e-4, (grads, seed)
    assert "forward" in done["result"]["trace_note"]


# Run in a fresh interpreter without TRITON_INTERPRET, as a server's run worker starts: after
# `prepare`, the jobs of every mode import nothing more of flashscope, torch or Triton.
PREPARED_JOBS = """
import json, sys
from flashscope.app.runs import jobs
from flashscope.app.schemas.trace import RunRequest
jobs.prepare("cpu")
before = set(sys.modules)
for body in (
    dict(mode="fwd", what="both", seq=20, seq_k=24, head_dim=16, causal=True, block_m=16,
         block_n=16),
    dict(mode="bwd", what="trace", seq=20, head_dim=16, dtype="bf16", block_m=16, block_n=16),
    dict(mode="decode", what="trace", seq=1, seq_k=40, head_dim=16, block_n=16, heads=2,
         kv_heads=1, splits=2),
):
    jobs.execute(RunRequest(**body).model_dump(), device="cpu", progress=lambda m: None)
print(json.dumps(sorted(m for m in set(sys.modules) - before
                        if m.split(".")[0] in ("flashscope", "torch", "triton"))))
"""


def test_a_worker_imports_what_its_jobs_need_before_it_is_ready():
    # A cancel raises inside the job wherever it runs: one that landed in the first job's
    # `import torch` left torch half initialized, and the worker died on its next job.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", PREPARED_JOBS], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == []


def test_a_run_cancelled_on_a_starting_worker_leaves_it_fit_for_the_next():
    settings = Settings(
        runs_executor="flashscope.app.runs.jobs:execute",
        runs_devices=["cpu"],
        runs_timeout_s=240,
        runs_unwatched_s=0.5,
    )
    with TestClient(create_app(settings)) as client:
        body = {"seq": 48, "head_dim": 16, "block_m": 16, "block_n": 16, "mode": "fwd",
                "what": "trace"}  # fmt: skip
        left = client.post("/api/runs", json={**body, "seed": 1}).json()["id"]
        time.sleep(1.5)  # nobody follows it: cancelled while the worker starts or runs it
        assert client.get(f"/api/runs/{left}").json()["state"] == "cancelled"
        followed = client.post("/api/runs", json={**body, "seed": 2}).json()["id"]
        with client.stream("GET", f"/api/runs/{followed}/events") as stream:
            for _ in stream.iter_lines():
                pass  # the stream ends with the run
        done = client.get(f"/api/runs/{followed}").json()
        assert done["state"] == "done", done["error"]
