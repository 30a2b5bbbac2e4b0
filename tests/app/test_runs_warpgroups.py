"""Live warpgroup recordings (POST /api/runs, what warpgroups) without a GPU: what a request may
ask, the answer where there is no Hopper GPU, the executor's decoding of the stamps, and /hopper's
JSON twin showing a finished recording in place of the shipped one. The stand-in for the kernel
call is tests/app/fake_hopper_jobs.py; tests/app/test_runs_gpu.py runs the real one."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.app.runs import cost, jobs
from flashscope.kernels.hopper_forward import record_size

from . import fake_hopper_jobs as fake
from .test_runs import _wait

BODY = {"mode": "fwd", "what": "warpgroups", "batch": 4, "heads": 16, "seq": 4096,
        "head_dim": 128, "block_n": 128, "stages": 2, "consumers": 2, "pipeline": True,
        "pingpong": True}  # fmt: skip
# /hopper's parameters of fake_hopper_jobs.JOB's launch
HOPPER = {"gpu": "h100-sxm", "head_dim": 64, "seq": 128, "batch": 1, "heads": 1,
          "consumers": 1, "pipeline": False, "pingpong": False, "block_n": 128,
          "stages": 2}  # fmt: skip


@pytest.fixture(scope="module")
def fake_gpu():
    """A server whose run queue has a device named cuda:0 (torch sees none, so the GPU's kind is
    unknown and the run is taken); the executor is the real one with a stand-in kernel call."""
    settings = Settings(
        runs_executor="tests.app.fake_hopper_jobs:execute",
        runs_devices=["cuda:0"],
        runs_max_queued=8,
        runs_unwatched_s=60,
        rate_runs_burst=100,  # one client asks for every case of the module
    )
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def cpu_client():
    """A server without a GPU (so on a GPU machine too)."""
    settings = Settings(runs_devices=["cpu"], runs_executor="tests.app.fake_hopper_jobs:execute")
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.mark.parametrize(
    ("change", "field", "limit"),
    [
        ({"seq": 16385}, "seq", 16384),
        ({"seq_k": 20000}, "seq_k", 16384),
        ({"block_n": 32}, "block_n", [64, 128, 256]),
        ({"stages": 5}, "stages", [2, 4]),
        ({"head_dim": 32}, "head_dim", [40, 256]),
        ({"dtype": "fp32"}, "dtype", ["fp16", "bf16"]),
        ({"consumers": 4}, "consumers", 3),
        ({"pipeline": False}, "pingpong", None),  # ping-pong needs pipelining
        ({"mode": "bwd"}, "mode", None),
        ({"head_dim": 256, "consumers": 3, "stages": 4, "pingpong": False}, "stages", 232448),
        ({"batch": 65}, "batch", 64),
    ],
)
def test_a_recording_beyond_the_kernel_or_a_limit_gets_422_naming_field_and_limit(
    fake_gpu, change, field, limit
):
    r = fake_gpu.post("/api/runs", json={**BODY, **change})
    assert r.status_code == 422, r.text
    hit = [e for e in r.json()["detail"] if e["field"] == field]
    assert hit, r.text
    if limit is not None:
        assert hit[0]["limit"] == limit, hit


def test_the_seq_limit_is_a_setting():
    settings = Settings(runs_devices=["cuda:0"], runs_max_seq_warpgroups=1024,
                        runs_executor="tests.app.fake_hopper_jobs:execute")  # fmt: skip
    with TestClient(create_app(settings)) as client:
        r = client.post("/api/runs", json={**BODY, "seq": 2048})
        assert r.status_code == 422
        assert r.json()["detail"][0]["limit"] == 1024
        assert "≤ 1024 for a recorded warpgroup timeline" in r.json()["detail"][0]["msg"]


def test_the_variants_fields_belong_to_warpgroup_runs(cpu_client):
    r = cpu_client.post("/api/runs", json={"seq": 32, "what": "trace", "persistent": True})
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "persistent"


def test_without_a_gpu_a_recording_is_refused_up_front(cpu_client):
    r = cpu_client.post("/api/runs", json=BODY)
    assert r.status_code == 422, r.text
    (err,) = [e for e in r.json()["detail"] if e["field"] == "what"]
    assert err["msg"].startswith("a warpgroup timeline needs an H100 or H200: this server has no")


def test_a_gpu_that_is_not_a_hopper_is_refused_naming_it():
    settings = Settings(runs_devices=["cuda:0"], runs_executor="tests.app.fake_jobs:execute")
    with TestClient(create_app(settings)) as client:
        client.get("/api/health")  # the probe has run: what it found is replaced here
        client.app.state.backend = ("cuda", "NVIDIA A100-SXM4-80GB")
        client.app.state.capability = "8.0"
        r = client.post("/api/runs", json=BODY)
        assert r.status_code == 422, r.text
        msg = r.json()["detail"][0]["msg"]
        assert "needs an H100 or H200" in msg and "A100" in msg and "8.0" in msg
        # /hopper's button says the same, and no run is queued
        page = client.get("/api/hopper", params={"seq": 1024}).json()["record"]
        assert page["available"] is False and "8.0" in page["why"]
        assert client.app.state.runs._queue is None


def test_the_executor_without_a_gpu_answers_why_not_a_traceback(monkeypatch):
    from flashscope.kernels import device

    monkeypatch.setattr(device, "interpreting", lambda: True)  # as on a server without a GPU
    with pytest.raises(ValueError, match=r"^a warpgroup timeline needs an H100 or H200: this "):
        jobs.execute(dict(fake.JOB), "cpu", lambda _: None)


def test_the_executor_on_a_gpu_that_is_not_a_hopper_names_it(monkeypatch):
    import torch

    from flashscope.kernels import device

    monkeypatch.setattr(device, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA L4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (8, 9))
    cfg = jobs.ws_config(fake.JOB)
    with pytest.raises(ValueError, match=r"needs an H100 or H200: this GPU, NVIDIA L4, is "):
        jobs._record(dict(fake.JOB), cfg, 0, lambda _: None)


@pytest.mark.parametrize("causal", [False, True])
def test_a_causal_run_is_recorded_with_its_steps_in_one_loop(causal):
    """A live recording runs the form the tuned routes run: causal steps merged into one loop
    (`WsConfig.merged`), as benchmarks/warpgroups.py records the shipped timelines."""
    job = {**fake.JOB, "causal": causal, "pingpong": True, "pipeline": True, "consumers": 3}
    cfg = jobs.ws_config(job)
    assert cfg.merged is causal
    shape = (cfg.consumers, cfg.block_n, cfg.stages, cfg.pipeline, cfg.pingpong)
    assert shape == (3, 128, 2, True, True)


def test_the_executor_decodes_the_stamps_into_each_warpgroups_phases(monkeypatch):
    from flashscope.kernels import device

    monkeypatch.setattr(device, "interpreting", lambda: True)  # no GPU is asked anything
    monkeypatch.setattr(jobs, "_record", fake.fake_record)
    said: list[str] = []
    out = jobs.execute(dict(fake.JOB), "cpu", said.append)
    wg = out["warpgroups"]
    assert said[-2:] == ["decoding the stamps into each warpgroup's phases", "done"]
    assert wg["device"] == "NVIDIA H100 80GB HBM3" and wg["sms"] == 132
    assert wg["config"] == {"consumers": 1, "block_n": 128, "stages": 2, "pipeline": False,
                            "ctas": 1, "pingpong": False, "persistent": False}  # fmt: skip
    assert (wg["seq"], wg["seq_k"], wg["batch"], wg["heads"]) == (128, 128, 1, 1)
    assert wg["plain_ms"] == 0.010 and wg["overhead"] == 0.1
    assert wg["recorded"] == jobs.WARPGROUP_RECORDING
    assert [p["program"] for p in wg["programs"]] == [0, 1]  # two 64-row tiles, two programs
    first, second = wg["programs"]
    got = [(x["role"], x["warpgroup"], x["phase"], x["tile"], x["block"], x["start_ns"],
            x["end_ns"]) for x in first["intervals"]]  # fmt: skip
    assert got == fake.EXPECTED
    assert first["tile_steps"] == [1] and first["ns_per_cycle"] == 3.0
    # program 1 ran the same phases 1000 cycles later: its times are from its own first stamp
    assert second["intervals"] == first["intervals"]
    # busy over the 330 ns: products 90–150 and 225–285, softmax 150–210, copies 15–225
    assert first["busy"] == pytest.approx({"tensor": 120 / 315, "softmax": 60 / 315,
                                           "copy": 210 / 315})  # fmt: skip


def test_the_cost_counts_the_recording_as_the_kernel_lays_it_out():
    steps, tiles = jobs.WARPGROUP_RECORDING["steps"], jobs.WARPGROUP_RECORDING["tiles"]
    assert 8 * record_size(steps, tiles) == cost.RECORD_BYTES_PER_ROLE


def test_a_recording_is_queued_run_and_shown_on_hopper_in_place_of_the_shipped_one(fake_gpu):
    page = fake_gpu.get("/api/hopper", params=HOPPER).json()
    record = page["record"]
    assert record["available"] is True and record["why"] is None, record
    assert record["request"]["what"] == "warpgroups" and record["request"]["consumers"] == 1
    r = fake_gpu.post("/api/runs", json=record["request"])
    assert r.status_code == 202, r.text
    run = _wait(fake_gpu, r.json()["id"])
    assert run["state"] == "done", run["error"]
    assert "recording (stand-in stamps)" in run["messages"]
    wg = run["result"]["warpgroups"]
    assert len(wg["programs"][0]["intervals"]) == len(fake.EXPECTED)

    shown = fake_gpu.get("/api/hopper", params={**HOPPER, "run": run["id"]})
    assert shown.status_code == 200, shown.text
    m = shown.json()["measured"]
    assert m["live"] == {"run": run["id"], "device": "NVIDIA H100 80GB HBM3",
                         "finished": run["finished"], "why": None}  # fmt: skip
    t = m["timeline"]
    assert t["live"] is True and t["device"] == "NVIDIA H100 80GB HBM3"
    assert t["intervals"] == wg["programs"][0]["intervals"]
    assert t["plain_ms"] == 0.010 and t["overhead"] == 0.1 and t["tile_steps"] == [1]
    assert t["coverage"]["tensor"] == pytest.approx(120 / 315)
    live = [c for c in shown.json()["compare"] if c["label"] == "FA-3 (live)"]
    # the plain call as a user times it, as the variants' times are (not behind the gate)
    assert live and live[0]["time_us"] == pytest.approx(fake.FIGURES["plain_ungated_ms"] * 1e3)

    # another configuration, or a run the server no longer has: the shipped one, and why
    other = fake_gpu.get("/api/hopper", params={**HOPPER, "seq": 256, "run": run["id"]}).json()
    assert "another configuration" in other["measured"]["live"]["why"]
    assert not (other["measured"]["timeline"] or {}).get("live")
    gone = fake_gpu.get("/api/hopper", params={**HOPPER, "run": "abc123"}).json()
    assert "no longer has" in gone["measured"]["live"]["why"]
    bad = fake_gpu.get("/api/hopper", params={**HOPPER, "run": "not-hex"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "run"


def test_hopper_says_why_it_cannot_record(cpu_client, fake_gpu):
    cpu = cpu_client.get("/api/hopper").json()["record"]
    assert cpu["available"] is False and "needs an H100 or H200" in cpu["why"]
    fp8 = fake_gpu.get("/api/hopper", params={**HOPPER, "dtype": "fp8"}).json()["record"]
    assert fp8["available"] is False and "fp8 is a what-if" in fp8["why"]
