"""GET /api/hopper: the FA-3 model beside the shipped H100 warpgroup timelines, FA-1 and FA-2 on
the same problem, the FP8 what-if; the 422s; a GPU the dataset does not cover."""

from __future__ import annotations

import random

import pytest
from fastapi.testclient import TestClient

from flashscope.app.compute.hopper import STEP_RATIO_NOTE, config_of, coverage, step_ratio
from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.simulator.timing.fa3_config import interval_problems


@pytest.fixture(scope="module")
def client():
    settings = Settings(simulate_max_seq=65536, simulate_max_batch=64)
    with TestClient(create_app(settings)) as c:
        yield c


def _errors(r) -> dict[str, dict]:
    assert r.status_code == 422, r.text
    return {e["field"]: e for e in r.json()["detail"]}


def test_default_is_the_recorded_pingpong_kernel_beside_its_model(client):
    r = client.get("/api/hopper")
    assert r.status_code == 200, r.text
    body = r.json()
    p = body["params"]
    shape = (p["gpu"], p["batch"], p["heads"], p["seq"], p["head_dim"])
    assert shape == ("h100-sxm", 4, 16, 4096, 128)
    sim, m = body["simulated"], body["measured"]
    assert sim["simulated"] and sim["config"]["pingpong"] and sim["config"]["consumers"] == 2
    assert interval_problems(sim["timeline"]["intervals"], 2) == []
    assert m["available"] and m["device"] == "NVIDIA H100 80GB HBM3" and m["date"] == "2026-11-28"
    rec = m["timeline"]
    assert rec["variant"] == "pingpong" and rec["seq"] == 4096 and rec["tile_steps"] == [32]
    assert interval_problems(rec["intervals"], 2) == []
    assert {iv["warpgroup"] for iv in rec["intervals"]} == {-1, 0, 1}
    # the dataset's own busy fractions are the coverage of its intervals
    assert rec["coverage"] == pytest.approx(rec["busy"], abs=1e-9)
    t = m["time"]
    assert t["exact"] and t["variant"] == "pingpong" and t["label"].startswith("measured")
    assert 0.8 < t["ms"] < 1.0  # 0.906 ms on the H100
    labels = [c["label"] for c in body["compare"]]
    assert labels == ["FA-1", "FA-2", "FA-3", "FA-3 (measured)"]
    fa1, fa2, fa3 = (c["time_us"] for c in body["compare"][:3])
    assert fa1 > fa2 > 0 and fa3 > 0
    assert body["compare"][2]["time_us"] == pytest.approx(sim["time_us"])
    e = body["fp8"]["errors"]
    assert e["fp8"]["simulated"] and e["fp8"]["relative_rms"] > e["bf16"]["relative_rms"]
    assert e["bf16"]["relative_rms"] > e["fp16"]["relative_rms"] > 0
    assert body["fp8"]["simulated"]["time_us"] > 0 and body["fp8"]["base"]["dtype"] == "fp16"
    assert sim["explanation"]["head_dim"] == 128 and "exp2" in sim["explanation"]["text"]
    variants = {v["variant"]: v for v in body["variants"]}
    assert {"pingpong", "pipelined", "plain"} <= set(variants)
    assert variants["pingpong"]["current"] and not variants["plain"]["current"]
    assert body["figures"]["explanation"]["data"]


@pytest.mark.parametrize(
    ("query", "variant", "consumers"),
    [
        ({"pingpong": 0, "pipeline": 0}, "plain", 2),
        ({"head_dim": 64, "consumers": 3}, "pingpong", 3),
        ({"causal": 1, "pingpong": 0, "pipeline": 0}, "plain", 2),
        ({"persistent": 1}, "persistent-pingpong", 2),
    ],
)
def test_each_recorded_variant_comes_back_with_its_timeline(client, query, variant, consumers):
    body = client.get("/api/hopper", params=query).json()
    rec = body["measured"]["timeline"]
    assert rec["variant"] == variant and rec["config"]["consumers"] == consumers
    assert rec["causal"] == bool(query.get("causal"))
    assert max(iv["warpgroup"] for iv in rec["intervals"]) == consumers - 1
    assert body["measured"]["time"]["exact"]


def test_a_stretched_program_0_is_said_so():
    """`step_ratio`: program 0's time per key step over the launch's per step and slot. A launch
    of 2 (batch × heads) rows, one 64-row warpgroup per tile and 64-key steps on 2 SMs: 128
    keys unmasked are 2 tiles of 2 steps a head, 8 steps over 2 slots; causal with 192 keys for
    128 queries 2 + 3 steps a head. Program 0 stretched k times shows ratio k."""
    k = random.uniform(0.5, 4.0)
    cfg = {"consumers": 1, "block_n": 64, "ctas": 1}
    base = {"config": cfg, "batch": 1, "heads": 2, "seq": 128, "causal": False}
    # the launch: 8 steps of 100 ns on 2 slots is 400 ns; program 0 shows 2 steps
    rec = {**base, "span_ms": 400e-6, "tile_steps": [2],
           "intervals": [{"start_ns": 50, "end_ns": 50 + 2 * 100 * k}]}  # fmt: skip
    assert step_ratio(rec, sms=2) == pytest.approx(k)
    causal = {**rec, "causal": True, "seq_k": 192, "span_ms": 500e-6}  # 10 steps of 100 ns
    assert step_ratio(causal, sms=2) == pytest.approx(k)
    assert step_ratio({**rec, "span_ms": None}, sms=2) is None
    assert step_ratio(rec, sms=None) is None


def test_the_shipped_recordings_say_whether_program_0_kept_pace(client):
    """The lesson's launch (two ping-pong warpgroups, d = 128) ran program 0 at the launch's
    pace; three ping-pong warpgroups recorded with predicated stamps did not (3.5× on the
    H100), and the measured side says so. Recorded in launches side by side (the H200's file)
    they keep pace: the only note is the one on those launches."""
    rec = client.get("/api/hopper").json()["measured"]["timeline"]
    assert 0.9 < rec["step_ratio"] < STEP_RATIO_NOTE and rec["notes"] == []
    params = {"head_dim": 64, "consumers": 3}
    rec = client.get("/api/hopper", params=params).json()["measured"]["timeline"]
    assert rec["variant"] == "pingpong" and rec["step_ratio"] > 3
    assert any("stretched" in note for note in rec["notes"]), rec["notes"]
    rec = client.get("/api/hopper", params={**params, "gpu": "h200"}).json()["measured"]
    assert rec["device"] == "NVIDIA H200" and rec["timeline"]["variant"] == "pingpong"
    assert 0.9 < rec["timeline"]["step_ratio"] < STEP_RATIO_NOTE
    (note,) = rec["timeline"]["notes"]
    assert note.startswith("recorded in launches side by side"), note
    assert f"{rec['timeline']['gate_ms'] * 1e3:.0f} µs" in note, note


def test_unrecorded_variants_get_the_nearest_time_labelled(client):
    body = client.get("/api/hopper", params={"pingpong": 0}).json()  # pipelined: recorded
    assert body["measured"]["timeline"]["variant"] == "pipelined"
    body = client.get("/api/hopper", params={"seq": 2048}).json()  # no row at N = 2048
    m = body["measured"]
    assert not m["time"]["exact"] and m["time"]["label"].startswith("nearest measured")
    assert any(d.startswith("N ") for d in m["time"]["differs"])
    assert m["timeline"]["notes"] == ["recorded at N = 4096, not 2048"]
    assert body["compare"][-1]["label"] == "FA-3 (nearest measured)"
    body = client.get("/api/hopper", params={"head_dim": 64, "consumers": 3, "stages": 3}).json()
    m = body["measured"]
    assert m["timeline"] is None and "not recorded" in m["timeline_why"]


def test_a_gpu_without_a_dataset_says_so(client):
    body = client.get("/api/hopper", params={"gpu": "h100-pcie"}).json()
    m = body["measured"]
    assert not m["available"] and m["timeline"] is None and m["time"] is None
    assert m["why"].startswith("no measurement for this GPU (h100-pcie)")
    assert body["variants"] == [] and [c["source"] for c in body["compare"]] == ["simulated"] * 3
    assert body["gpu"] == "h100-pcie" and body["simulated"]["gpu"] == "h100-pcie"


def test_the_h200s_recording_is_shown_on_the_h200(client):
    """The shipped H200 recording: its timeline and variant times, measured on an H200."""
    body = client.get("/api/hopper", params={"gpu": "h200"}).json()
    m = body["measured"]
    assert m["available"] and m["timeline"] is not None and m["time"] is not None
    assert body["variants"] and body["gpu"] == "h200"
    assert "H200" in m["device"]


@pytest.mark.parametrize("head_dim", [64, 128])
def test_a_causal_recording_says_whether_its_steps_ran_in_one_loop(client, head_dim):
    """The H200's causal launches are recorded in the form the tuned routes run (diagonal and
    unmasked steps in one loop); the H100's older recording ran them in two loops."""
    params = {"causal": 1, "head_dim": head_dim, "consumers": 3 if head_dim == 64 else 2}
    for gpu, merged in (("h200", True), ("h100-sxm", False)):
        rec = client.get("/api/hopper", params={**params, "gpu": gpu}).json()["measured"]
        t = rec["timeline"]
        assert t is not None and t["causal"] and t["merged"] is merged, (gpu, t)
        assert any("one loop" in note for note in t["notes"]) is merged, (gpu, t["notes"])


@pytest.mark.parametrize("causal", [0, 1])
def test_the_recording_at_the_asked_length_is_shown(client, causal):
    """Three ping-pong warpgroups at d = 64 were recorded at N = 1024 and 4096: each length
    gets its own, another length the nearest, labelled."""
    params = {"head_dim": 64, "consumers": 3, "causal": causal, "gpu": "h200"}
    for seq, recorded in ((1024, 1024), (4096, 4096), (1536, 1024), (8192, 4096)):
        t = client.get("/api/hopper", params={**params, "seq": seq}).json()["measured"]["timeline"]
        assert t["seq"] == recorded, (seq, t["seq"])
        label = f"recorded at N = {recorded}, not {seq}"
        assert (label in t["notes"]) is (seq != recorded), t["notes"]


@pytest.mark.parametrize("params", [{"head_dim": 64, "consumers": 3},
                                    {"head_dim": 128, "pingpong": 0, "pipeline": 0}])  # fmt: skip
def test_the_h200s_causal_times_are_of_the_form_it_recorded(client, params):
    """On the H200 the causal variants' times and the causal recordings are both of the merged
    loop (measured in different processes): the same launch's plain time agrees."""
    m = client.get("/api/hopper", params={**params, "causal": 1, "gpu": "h200"}).json()["measured"]
    assert m["time"]["exact"] and m["timeline"]["merged"]
    t = m["timeline"]  # recorded in two launches behind a gate: the plain call as timed alike
    assert m["time"]["ms"] == pytest.approx(t["plain_ungated_ms"], rel=0.05)


def test_fp8_is_a_simulated_what_if_with_nothing_measured(client):
    body = client.get("/api/hopper", params={"dtype": "fp8"}).json()
    assert body["simulated"]["dtype"] == "fp8"
    assert any("what-if" in n for n in body["simulated"]["notes"])
    m = body["measured"]
    assert m["time"] is None and "what-if" in m["time_why"] and m["timeline"] is None
    assert body["fp8"]["base"]["dtype"] == "fp16"


def test_bad_queries_name_the_field_and_the_limit(client):
    errs = _errors(client.get("/api/hopper", params={"gpu": "a100-80gb", "head_dim": 96}))
    assert errs["gpu"]["limit"] == ["h100-sxm", "h100-pcie", "h200"]
    assert errs["head_dim"]["limit"] == [64, 128]
    for head_dim in (0, -64, 4096):  # the protocol's heads divide by it: refused before that
        errs = _errors(client.get("/api/hopper", params={"head_dim": head_dim}))
        assert errs["head_dim"]["limit"] == [64, 128], head_dim
    errs = _errors(client.get("/api/hopper", params={"seq": 65537, "batch": 65}))
    assert errs["seq"]["limit"] == 65536 and errs["batch"]["limit"] == 64
    errs = _errors(client.get("/api/hopper", params={"consumers": 1}))
    assert "pingpong" in errs
    errs = _errors(client.get("/api/hopper", params={"pipeline": 0}))  # ping-pong stays on
    assert errs["pingpong"]["msg"].startswith("pingpong needs pipeline")
    errs = _errors(client.get("/api/hopper", params={"consumers": 4, "block_n": 100}))
    assert set(errs) == {"consumers"}  # pydantic's bound first
    errs = _errors(client.get("/api/hopper", params={"block_n": 100, "stages": 5}))
    assert errs["block_n"]["limit"] == [64, 128, 256] and errs["stages"]["limit"] == [2, 4]
    errs = _errors(client.get("/api/hopper", params={"block_n": 256, "stages": 4}))
    assert "shared memory" in errs["stages"]["msg"]
    errs = _errors(client.get("/api/hopper", params={"seq": 65536, "batch": 64, "heads": 64}))
    assert "CTAs" in errs["seq"]["msg"]


def test_the_page_and_its_registration(client):
    r = client.get("/hopper")
    assert r.status_code == 200 and 'src="/static/js/hopper.js"' in r.text
    assert 'href="/hopper"' in client.get("/").text
    views = {v["path"]: v for v in client.get("/api/views").json()}
    assert views["/hopper"]["api"] == "/api/hopper"


def test_coverage_merges_overlapping_intervals():
    ivs = [
        {"phase": "qk", "start_ns": 0.0, "end_ns": 4.0},
        {"phase": "pv", "start_ns": 2.0, "end_ns": 6.0},
        {"phase": "softmax", "start_ns": 8.0, "end_ns": 10.0},
    ]
    assert coverage(ivs) == {"tensor": 0.6, "softmax": 0.2, "copy": 0.0}
    assert config_of({"config": [2, 128, 2, 1, 1]}) == (2, 128, 2, 1, 1, 0, 0)
