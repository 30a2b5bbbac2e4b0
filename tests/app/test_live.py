"""Live runs as the pages use them: the backend label, what each mode may ask, the kernel against
the simulator in Triton's interpreter, and /compare's measure-now with a stand-in GPU."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.app.routes.measure import NO_GPU, plan
from flashscope.app.runs.jobs import busy_us

from .test_runs import _wait


@pytest.fixture(scope="module")
def real_runs():
    settings = Settings(
        runs_executor="flashscope.app.runs.jobs:execute", runs_devices=["cpu"], runs_timeout_s=240
    )
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def fake_gpu():
    """The measure-now routes against a stand-in executor on a device named cuda:0."""
    settings = Settings(
        runs_executor="tests.app.fake_jobs:execute", runs_devices=["cuda:0"], runs_max_queued=8
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_health_names_the_backend_as_the_badge_shows_it(client):
    body = client.get("/api/health").json()
    assert body["backend"] == "cpu" and body["gpu"] is None
    assert body["label"] == "CPU: simulator and Triton interpreter"
    assert body["live_timing"] is False


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"mode": "decode", "what": "time", "heads": 4, "seq": 1}, "what", "must be trace"),
        ({"mode": "decode", "what": "trace", "heads": 4, "seq": 17}, "seq", "≤ 16"),
        ({"mode": "decode", "what": "trace", "heads": 4, "kv_heads": 2}, "kv_heads", "K/V head"),
        ({"mode": "decode", "what": "trace", "seq": 1, "seq_k": 5000}, "seq_k", "≤ 4096"),
        ({"mode": "fwd", "what": "timeline"}, "what", "needs a GPU"),
        ({"mode": "fwd", "what": "trace", "route": "default"}, "route", "must be time"),
        ({"mode": "fwd", "what": "trace", "splits": 2}, "splits", "mode decode"),
    ],
)
def test_run_requests_beyond_what_a_mode_allows_get_422_naming_the_field(
    client, body, field, words
):
    r = client.post("/api/runs", json={"seq": 32, "head_dim": 16, **body})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"][-1] == field and words in d["msg"] for d in detail), detail


def test_forward_trace_reports_each_steps_gap_against_the_dtypes_tolerance(real_runs):
    seed = random.SystemRandom().randrange(2**31)
    n = random.SystemRandom().choice([20, 45, 64])
    body = {"seq": n, "seq_k": n + 7, "head_dim": 16, "block_m": 16, "block_n": 16, "stages": 1,
            "dtype": random.choice(["fp16", "bf16"]), "mode": "fwd", "what": "trace",
            "seed": seed}  # fmt: skip
    done = _wait(real_runs, real_runs.post("/api/runs", json=body).json()["id"], timeout=240)
    assert done["state"] == "done", (done["error"], seed)
    cmp = done["result"]["trace"]["compare"]
    steps = len(done["result"]["trace"]["events"])
    assert set(cmp["per_step"]) == {"m", "l", "o"}
    assert all(len(v) == steps for v in cmp["per_step"].values())
    assert len(cmp["ratio_per_step"]) == steps
    # the same kernel and simulator on the same inputs agree within the dtype's tolerance
    assert cmp["beyond"] == [], (cmp["beyond"], seed)
    assert max(cmp["ratio_per_step"]) <= 1.0
    # …and the ratio is not a constant: a step that loads K, V moves no state, one that
    # rescales does, so the gaps differ between steps
    assert len(set(cmp["ratio_per_step"])) > 1, seed
    assert cmp["tolerance"]["rtol"] == 3e-2


def test_backward_check_compares_the_kernel_with_the_simulator_and_float64(real_runs):
    seed = random.SystemRandom().randrange(2**31)
    body = {"seq": 40, "head_dim": 16, "block_m": 16, "block_n": 16, "stages": 1, "seed": seed,
            "dtype": "fp16", "causal": True, "mode": "bwd", "what": "trace"}  # fmt: skip
    done = _wait(real_runs, real_runs.post("/api/runs", json=body).json()["id"], timeout=240)
    assert done["state"] == "done", (done["error"], seed)
    grads = done["result"]["gradients"]["gradients"]
    assert [g["name"] for g in grads] == ["dQ", "dK", "dV"]
    for g in grads:
        assert g["within"], (g, seed)
        # fp16 rounding shows: neither side is exact, and both sit near each other
        assert g["simulator_vs_float64"] > 0
        assert 0 < g["kernel_vs_float64"] <= g["bound"]
        assert g["kernel_vs_simulator"] <= g["kernel_vs_float64"] + g["simulator_vs_float64"]


def test_decode_check_compares_every_split_with_the_simulator(real_runs):
    seed = random.SystemRandom().randrange(2**31)
    splits = random.SystemRandom().choice([2, 3, 5])
    body = {"mode": "decode", "what": "trace", "heads": 4, "kv_heads": 1, "seq": 2,
            "seq_k": 333, "head_dim": 16, "block_m": 16, "block_n": 32, "stages": 1,
            "dtype": "fp16", "splits": splits, "seed": seed}  # fmt: skip
    done = _wait(real_runs, real_runs.post("/api/runs", json=body).json()["id"], timeout=240)
    assert done["state"] == "done", (done["error"], seed)
    dec = done["result"]["decode"]
    # 333 keys in blocks of 32 are 11 blocks: splits of ⌈11 / S⌉ blocks, the empty ones dropped
    assert dec["splits"] == -(-11 // -(-11 // splits)) and dec["rows"] == 8
    assert [s["split"] for s in dec["per_split"]] == list(range(dec["splits"]))
    for s in dec["per_split"]:
        assert s["within"], (s, seed)
        assert len(s["lse_kernel"]) == len(s["lse_simulated"]) == 8
    assert dec["max_o_diff"] < 1e-2


def test_measure_now_needs_a_gpu_and_says_so(client):
    r = client.post("/api/compare/measure", json={"gpu": "h100", "id": None})
    assert r.status_code == 422
    assert r.json()["detail"][0]["msg"] == NO_GPU


def test_the_plan_takes_every_tile_configuration_of_the_problem_and_the_default_route(client):
    data = client.get("/api/compare?gpu=h100").json()
    chosen = data["chosen"]
    siblings = [
        r for r in data["rows"]
        if (r["mode"], r["head_dim"], r["causal"], r["seq"])
        == (chosen["mode"], chosen["head_dim"], chosen["causal"], chosen["seq"])
    ]  # fmt: skip
    ds = client.app.state.datasets.all()["h100-sxm"]
    row = next(r for r in ds["rows"] if r["id"] == chosen["id"])
    got = plan(row, ds["rows"], seed=3)
    assert [g["tile"] for g in got[:-1]] == [r["tile"] for r in siblings]
    assert got[-1]["tile"] == "default" and got[-1]["request"]["route"] == "default"
    assert {g["request"]["what"] for g in got} == {"time"}


def test_measure_now_queues_runs_and_keeps_them_as_a_dataset_validate_reads(fake_gpu, tmp_path):
    r = fake_gpu.post("/api/compare/measure", json={"gpu": "h100", "seed": 11})
    assert r.status_code == 202, r.text
    runs = r.json()["runs"]
    assert len(runs) >= 2 and runs[-1]["tile"] == "default"
    for run in runs:
        assert _wait(fake_gpu, run["id"])["state"] == "done"
    again = fake_gpu.post("/api/compare/measure", json={"gpu": "h100", "seed": 11}).json()
    assert all(run["cached"] for run in again["runs"])  # identical requests share their runs
    ds = fake_gpu.post("/api/compare/dataset", json={"runs": [x["id"] for x in runs]})
    assert ds.status_code == 200, ds.text
    data = ds.json()
    assert data["kind"] == "flashscope validation" and data["gpu"] == "h100-sxm"
    assert len(data["rows"]) == len(runs) and data["left_out"] == []
    assert all(row["measured_us"] and row["simulated_us"] for row in data["rows"])
    path = tmp_path / "live.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "again.json"
    done = subprocess.run(
        [sys.executable, "-m", "flashscope.app.cli.main", "validate", "--measured", str(path),
         "--out", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(json.loads(out.read_text())["rows"]) == len(runs)


def test_a_dataset_of_runs_that_are_not_finished_timed_runs_is_refused(fake_gpu):
    echo = fake_gpu.post("/api/runs", json={"seq": 32, "what": "trace", "seed": 9}).json()
    _wait(fake_gpu, echo["id"])
    r = fake_gpu.post("/api/compare/dataset", json={"runs": [echo["id"], "abc123"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "runs"


def test_a_measured_schedule_needs_a_gpu_and_the_gpus_own_preset(client, fake_gpu):
    r = client.post("/api/schedule/measure", json={"algo": "fa2"})
    assert r.status_code == 422 and "needs a GPU" in r.json()["detail"][0]["msg"]
    # the fake GPU's device name resolves to no preset here (no torch device): only algo and
    # edited specs are checked, each with its field
    bad = fake_gpu.post("/api/schedule/measure", json={"algo": "fa1", "sms": 100})
    assert bad.status_code == 422
    assert {d["loc"][-1] for d in bad.json()["detail"]} == {"algo", "sms"}


def test_a_measured_schedule_is_drawn_beside_the_simulated_one(fake_gpu):
    params = {"gpu": "h100", "algo": "fa2", "batch": 1, "heads": 4, "seq": 1024,
              "head_dim": 64, "block_m": 128, "block_n": 64, "causal": False}  # fmt: skip
    r = fake_gpu.post("/api/schedule/measure", json=params)
    assert r.status_code == 202, r.text
    assert _wait(fake_gpu, r.json()["id"])["state"] == "done"
    got = fake_gpu.get(f"/api/schedule/measured/{r.json()['id']}", params=params)
    assert got.status_code == 200, got.text
    m = got.json()
    assert m["ctas"] == 32 and m["span_us"] == 10.0  # 8 query blocks × 4 heads, one wave
    assert m["resident_per_sm"]["measured"] == pytest.approx(32 / 132)
    assert m["gantt"]["data"] and m["running"]["data"]
    assert fake_gpu.get("/api/schedule/measured/abc", params=params).status_code == 404


@pytest.mark.parametrize(
    ("intervals", "busy"),
    [
        ([], 0.0),
        ([(3.0, 4.0)], 1.0),
        ([(0.0, 10.0), (5.0, 12.0), (20.0, 25.0)], 17.0),  # overlap counts once, gaps not
        ([(5.0, 12.0), (0.0, 10.0), (1.0, 2.0)], 12.0),  # nested, out of order
    ],
)
def test_kernel_time_is_the_time_some_kernel_runs(intervals, busy):
    assert busy_us(intervals) == busy
