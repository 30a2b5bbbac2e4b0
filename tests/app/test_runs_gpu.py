"""Live runs on a real GPU through the run queue, its workers under their default memory cap.

Marked `gpu`: skipped without a CUDA device. On a GPU machine:
`TRITON_INTERPRET=0 python -m pytest -m gpu tests/app/test_runs_gpu.py`.
"""

from __future__ import annotations

import contextlib
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


def test_a_live_warpgroup_recording_is_shown_on_hopper() -> None:
    """/hopper's *Record on this GPU* end to end on an H100 or H200: the body the page posts,
    the run through the queue, its intervals and overhead, and the twin showing it."""
    if torch.cuda.get_device_capability(0)[0] != 9:
        pytest.skip("records on an H100 or H200 only")
    settings = Settings(runs_devices=["cuda:0"])
    params = {"gpu": "h100-sxm", "head_dim": 128, "seq": 4096}  # the page's defaults
    with TestClient(create_app(settings)) as client:
        from flashscope.simulator.core import hardware

        with contextlib.suppress(ValueError):  # a Hopper without a preset: the default's
            params["gpu"] = hardware.resolve(torch.cuda.get_device_name(0))
        record = client.get("/api/hopper", params=params).json()["record"]
        assert record["available"], record["why"]
        r = client.post("/api/runs", json={**record["request"], "seed": int(time.time()) % 1000})
        assert r.status_code == 202, r.text
        run = _finished(client, r.json()["id"])
        assert run["state"] == "done", run.get("error")
        wg = run["result"]["warpgroups"]
        assert wg["same_output"] and wg["capability"].startswith("9.")
        # the recording's cost: the shipped H100 dataset measured −3.5 to +6.4 %
        ratio = wg["recorded_branch_ms"] / wg["plain_ms"]
        assert 0.8 < ratio < 1.5, (wg["plain_ms"], wg["recorded_branch_ms"])
        assert wg["overhead"] == pytest.approx(ratio - 1)
        for prog in wg["programs"]:
            iv = prog["intervals"]
            assert iv and prog["tile_steps"], prog["program"]
            assert all(0 <= x["start_ns"] <= x["end_ns"] for x in iv)
            # in order: the loader first, then each consumer, each row by start time
            keys = [(x["role"] != "loader", x["warpgroup"], x["start_ns"]) for x in iv]
            assert keys == sorted(keys)
            assert {"qk", "softmax", "pv", "load_k", "load_v"} <= {x["phase"] for x in iv}
            # a consumer's products of one block come in order: S = QKᵀ, then P·V
            for c in range(2):
                qk = min(x["start_ns"] for x in iv if x["warpgroup"] == c and x["phase"] == "qk")
                pv = min(x["start_ns"] for x in iv if x["warpgroup"] == c and x["phase"] == "pv")
                assert qk < pv
            # the program's span is a part of the launch's, which is near the plain time
            assert max(x["end_ns"] for x in iv) * 1e-6 <= wg["span_ms"] * 1.01
        assert 0.5 < wg["span_ms"] / wg["plain_ms"] < 2.0
        shown = client.get("/api/hopper", params={**params, "run": run["id"]}).json()
        timeline = shown["measured"]["timeline"]
        assert timeline["live"] and timeline["device"] == torch.cuda.get_device_name(0)
        assert timeline["intervals"] == wg["programs"][0]["intervals"]


def test_a_timed_run_compiles_the_kernels_no_table_holds(tmp_path) -> None:
    """A timed run at tiles no shipped table holds has them compiled (on the CPU, the server's
    cache) before the engine simulates it, and says where each kernel's figures came from."""
    settings = Settings(runs_devices=["cuda:0"], compile_on_demand=True, compile_cache_dir=tmp_path)
    body = {"mode": "fwd", "what": "time", "batch": 2, "heads": 3, "seq": 1000, "head_dim": 80,
            "causal": True, "block_m": 128, "block_n": 16, "stages": 4, "warps": 2}  # fmt: skip
    with TestClient(create_app(settings)) as client:
        r = client.post("/api/runs", json={**body, "seed": int(time.time()) % 1000})
        assert r.status_code == 202, r.text
        run = _finished(client, r.json()["id"])
    assert run["state"] == "done", run.get("error")
    simulated = run["result"]["simulated"]
    assert simulated["compiled"] == {"fa2": "local"}, simulated
    assert any(tmp_path.rglob("fwd_d80p128_128x16_w2_s4_causal_ragged.json"))
