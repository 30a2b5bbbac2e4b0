"""GET /api/compare: the shipped datasets, a chosen configuration explained, clear refusals."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.datasets import DATA_DIR
from flashscope.app.main import create_app

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(DATA_DIR.glob("validation-*.json"))


def test_shipped_datasets_load_without_a_gpu(client):
    assert SHIPPED, "the validation datasets must ship in app/data"
    body = client.get("/api/compare").json()
    gpus = {d["gpu"] for d in body["datasets"]}
    assert gpus <= {"h100-sxm", "h200"} and gpus
    ds = body["dataset"]
    assert ds["device"].startswith("NVIDIA") and re.fullmatch(r"\d{4}-\d{2}-\d{2}", ds["date"])
    assert len(body["rows"]) >= 48
    # by default the worst-predicted configuration is the one explained
    worst = max(body["rows"], key=lambda r: abs(r["error_pct"] or 0))
    assert body["chosen"]["id"] == worst["id"]
    for gpu in gpus:
        other = client.get(f"/api/compare?gpu={gpu}").json()
        assert other["dataset"]["gpu"] == gpu


def bwd_alone(row_id: str) -> list[dict]:
    """The shipped H100 dataset's per-kernel alone comparison of one row."""
    shipped = next(p for p in SHIPPED if p.name.startswith("validation-h100"))
    row = next(r for r in json.loads(shipped.read_text())["rows"] if r["id"] == row_id)
    return row["kernels_alone"]


def test_a_chosen_configuration_is_explained(client):
    rows = client.get("/api/compare").json()["rows"]
    bwd = next(r for r in rows if r["mode"] == "bwd" and r["route"] == "separate")
    body = client.get(f"/api/compare?id={bwd['id']}").json()
    c = body["chosen"]
    assert c["id"] == bwd["id"] and c["config"]["algo"] == "fa2-bwd"
    assert sum(c["limiter"].values()) == pytest.approx(1.0)
    assert sum(c["breakdown_us"].values()) == pytest.approx(c["simulated_now_us"], rel=1e-6)
    # the shipped prediction is the engine's of today (same calibration)
    assert c["simulated_now_us"] == pytest.approx(c["simulated_us"], rel=1e-6)
    assert [k["name"] for k in c["kernels"]] == ["bwd_preprocess", "bwd_dq", "bwd_dkdv"]
    assert all(k["measured_us"] for k in c["kernels"])  # ncu's per-kernel times
    # beside each, the engine's time for that kernel alone, as the row's dataset holds it
    alone = {k["name"]: k["simulated_us"] for k in bwd_alone(c["id"])}
    for k in c["kernels"]:
        assert k["simulated_alone_us"] > 0
        if k["name"] in alone:
            assert k["simulated_alone_us"] == pytest.approx(alone[k["name"]], rel=1e-6)
        err = abs(k["simulated_alone_us"] / k["measured_us"] - 1)
        named = any(n["kind"] == "alone" and n["text"].startswith(k["name"] + " ")
                    for n in c["notes"])  # fmt: skip
        assert named == (err > 0.10 and k["simulated_us"] >= 0.1 * sum(
            x["simulated_us"] for x in c["kernels"])), k  # fmt: skip
    kinds = {n["kind"] for n in c["notes"]}
    assert {"error", "limiter", "overlap"} <= kinds
    assert c["timeline"]["data"] and c["timeline"]["layout"]["meta"]["ctas"] > 0


def test_known_structural_misses_are_named_where_they_apply(client):
    shipped = next(p for p in SHIPPED if p.name.startswith("validation-h200"))
    rows = {r["id"]: r for r in json.loads(shipped.read_text())["rows"]}

    def ids(want) -> list[str]:
        return [i for i, r in rows.items() if r["config"]["algo"] == "fa2" and want(r["config"])]

    lockstep = ids(lambda c: c["warps"] == 8 and c["stages"] == 2 and c["block_m"] >= 128)
    plain = ids(lambda c: c["warps"] == 4 and c["stages"] == 3)
    assert lockstep and plain
    for found, want in ((lockstep, True), (plain, False)):
        chosen = client.get(f"/api/compare?gpu=h200&id={found[0]}").json()["chosen"]
        texts = [n["text"] for n in chosen["notes"] if n["kind"] == "structure"]
        assert any("lockstep" in t for t in texts) is want, found[0]
    atomic = next(i for i, r in rows.items() if r["config"].get("route") == "atomic")
    chosen = client.get(f"/api/compare?gpu=h200&id={atomic}").json()["chosen"]
    assert any("l2_reduce" in n["text"] for n in chosen["notes"])


def test_unknown_gpu_and_configuration_get_422(client):
    r = client.get("/api/compare?gpu=rtx-4090")
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["field"] == "gpu" and "h100-sxm" in err["limit"]
    r = client.get("/api/compare?id=fwd-d64-full-n3-t9")
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "id"
    r = client.get("/api/compare?id=" + "x" * 100)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "id"
    assert client.get("/api/compare?colour=red").status_code == 422


def test_without_datasets_the_page_says_so_and_the_api_is_404(tmp_path):
    with TestClient(create_app(Settings(datasets_dir=tmp_path))) as c:
        r = c.get("/api/compare")
        assert r.status_code == 404 and "FLASHSCOPE_DATASETS_DIR" in r.json()["detail"]
        page = c.get("/compare")
        assert page.status_code == 200 and "flashscope validate" in page.text


def test_the_newest_dataset_per_gpu_wins_and_bad_files_are_skipped(tmp_path):
    src = next(p for p in SHIPPED if "h100" in p.name)
    shutil.copy(src, tmp_path / src.name)
    doc = json.loads(src.read_text())
    doc["date"] = "2999-01-01"
    doc["rows"] = doc["rows"][:3]
    (tmp_path / "validation-h100-2999-01-01.json").write_text(json.dumps(doc))
    (tmp_path / "validation-broken.json").write_text("{not json")
    with TestClient(create_app(Settings(datasets_dir=tmp_path))) as c:
        body = c.get("/api/compare").json()
        assert body["dataset"]["date"] == "2999-01-01" and len(body["rows"]) == 3


def test_a_recorded_schedule_is_shown_beside_the_simulated_one(client):
    """Forward rows that benchmarks/timeline.py recorded (a random record of a random file)
    carry it: CTAs running over time, measured and simulated, and the measured SM timeline."""
    import gzip
    import random

    import numpy as np

    path = random.choice(sorted(DATA_DIR.glob("timeline-*.json.gz")))
    records = json.loads(gzip.decompress(path.read_bytes()))["records"]
    rec = random.choice([r for r in records if r["band"] == 1])
    c = client.get(f"/api/compare?gpu={rec['config']['gpu']}&id={rec['id']}").json()["chosen"]
    m = c["measured_schedule"]
    assert m is not None, rec["id"]
    start, end = np.array(rec["start_us"]), np.array(rec["end_us"])
    assert m["ctas"] == start.size and m["file"] == path.name
    measured, simulated = m["running"]["data"]
    assert measured["name"] == "measured" and simulated["name"] == "simulated"
    # the step line's area is the CTAs' summed lifetimes (sampled: within a step's width)
    x, y = np.array(measured["x"]), np.array(measured["y"])
    area = float((np.diff(x) * y[:-1]).sum())
    assert area == pytest.approx(float((end - start).sum()), rel=0.02), rec["id"]
    sms = 132  # both GPUs of the records
    assert max(y) <= sms * 16 and y[-1] == 0
    r = m["resident_per_sm"]
    assert r["measured"] == pytest.approx((end - start).sum() / ((end.max() - start.min()) * sms))
    assert (
        abs(r["simulated"] / r["measured"] - 1) < 0.05
    )  # as tests/simulator/timing/test_shipped_timeline
    bars = m["gantt"]["data"][0]
    shown = m["gantt"]["layout"]["meta"]["sms_shown"]
    assert len(bars["y"]) == int((np.array(rec["sm"]) < shown).sum())
    # a row without a recorded schedule (a backward; a forward at N = 8192) has none
    for gpu in ("h200", "h100-sxm"):
        for cid in ("bwd-d64-full-n1024-t0", "fwd-d64-full-n8192-t0"):
            got = client.get(f"/api/compare?gpu={gpu}&id={cid}").json()["chosen"]
            assert got["measured_schedule"] is None, (gpu, cid)
    # the H100's records too (N = 512 as well)
    h100 = client.get("/api/compare?gpu=h100-sxm&id=fwd-d128-causal-n512-t2").json()
    assert h100["chosen"]["measured_schedule"]["device"] == "NVIDIA H100 80GB HBM3"


USERS = sorted(DATA_DIR.glob("validation-users-h100-*.json.gz"))


def _users_doc() -> dict:
    import gzip

    return json.loads(gzip.decompress(USERS[-1].read_bytes()))


def test_the_users_sweep_is_offered_with_its_held_out_half_as_the_headline(client):
    from flashscope.simulator.calibrate.validation import summarize

    assert USERS, "the users' sweep must ship in app/data, gzipped"
    listed = {d["key"]: d for d in client.get("/api/compare").json()["datasets"]}
    assert listed["h100-sxm:users"]["label"] == "the space users meet"
    assert listed["h100-sxm"]["label"] == listed["h200"]["label"] == "the papers' protocol"
    assert listed["h100-sxm"]["headline"] == "all"  # the protocol keeps its own figure
    body = client.get("/api/compare?sweep=users").json()
    ds = body["dataset"]
    assert (ds["key"], ds["sweep"], ds["gpu"], ds["headline"]) == (
        "h100-sxm:users", "users", "h100-sxm", "holdout"
    )  # fmt: skip
    doc = _users_doc()
    assert len(body["rows"]) == len(doc["rows"]) >= 400
    # the fit half and the held-out half apart, each as the rows say
    want = summarize(doc["rows"])
    for subset in ("fit", "holdout"):
        got = ds["summary"][subset]
        assert got["rows"] == sum(r["subset"] == subset for r in doc["rows"])
        for k in ("mape_pct", "bias_pct", "within_10pct", "worst_pct"):
            assert got["time"][k] == pytest.approx(want[subset]["time"][k]), (subset, k)
        assert got["dram_bytes"]["mape_pct"] == pytest.approx(
            want[subset]["dram_bytes"]["mape_pct"]
        )
        assert got["ranking"]["spearman_mean"] == want[subset]["ranking"]["spearman_mean"]
    assert ds["summary"]["fit"]["time"]["mape_pct"] != ds["summary"]["holdout"]["time"]["mape_pct"]
    # the protocol's datasets are unchanged by it
    protocol = client.get("/api/compare?gpu=h100-sxm").json()["dataset"]
    assert protocol["sweep"] == "protocol" and len(client.get("/api/compare").json()["rows"]) == 240


def test_the_known_misses_come_with_the_dataset_computed_from_its_rows(client):
    from flashscope.simulator.calibrate.known_misses import measured_misses

    doc = _users_doc()
    misses = client.get("/api/compare?sweep=users").json()["dataset"]["known_misses"]
    assert misses["subset"] == "holdout" and misses["beyond_pct"] == 10.0
    want = measured_misses(doc["rows"])
    assert [c["key"] for c in misses["classes"]] == [c["key"] for c in want]
    for got, expected in zip(misses["classes"], want, strict=True):
        assert got["rows"] == expected["rows"] and got["lacks"] == expected["lacks"]
        for k in ("mape_pct", "bias_pct", "worst_pct"):
            assert got[k] == pytest.approx(expected[k]), (got["key"], k)
    assert {"host-bound", "spills-spread"} <= {c["key"] for c in misses["classes"]}
    for c in misses["classes"]:
        assert c["mape_pct"] > 10.0 and c["rows"] > 0 and c["lacks"]
    # the protocol on the H100: no class beyond 10% held out
    h100 = client.get("/api/compare?gpu=h100-sxm").json()["dataset"]["known_misses"]
    assert h100["classes"] == []


def test_a_host_bound_call_is_simulated_as_a_whole_call(client):
    """The measured time is the call's, so the engine's figure beside it is the call's too: its
    kernels' time or the host's floor, whichever is longer (the floor a breakdown bar)."""
    from flashscope.simulator.calibrate.known_misses import host_bound

    doc = _users_doc()
    row = next(
        r for r in doc["rows"]
        if host_bound(r) and r["simulated_us"] > r["simulated_kernels_us"] * 1.5
    )  # fmt: skip
    c = client.get(f"/api/compare?sweep=users&id={row['id']}").json()["chosen"]
    assert c["simulated_now_us"] == pytest.approx(row["simulated_us"], rel=1e-6)
    assert c["simulated_kernels_now_us"] == pytest.approx(row["simulated_kernels_us"], rel=1e-6)
    assert c["simulated_now_us"] > 1.5 * c["simulated_kernels_now_us"]
    assert c["breakdown_us"]["host"] == pytest.approx(
        c["simulated_now_us"] - c["simulated_kernels_now_us"]
    )
    assert sum(c["breakdown_us"].values()) == pytest.approx(c["simulated_now_us"], rel=1e-6)
    # a call its kernels bound has no host bar
    long = max(doc["rows"], key=lambda r: r["simulated_kernels_us"])
    c = client.get(f"/api/compare?sweep=users&id={long['id']}").json()["chosen"]
    assert "host" not in c["breakdown_us"]
    assert c["simulated_now_us"] == pytest.approx(c["simulated_kernels_now_us"])


def test_a_sweep_or_gpu_without_a_dataset_gets_422(client, tmp_path):
    r = client.get("/api/compare?sweep=users&gpu=a100")
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "gpu"
    assert client.get("/api/compare?sweep=papers").status_code == 422
    shutil.copy(next(p for p in SHIPPED if "h100" in p.name), tmp_path)
    with TestClient(create_app(Settings(datasets_dir=tmp_path))) as c:
        r = c.get("/api/compare?sweep=users")
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "sweep"


def test_the_h200s_users_sweep_is_offered_beside_the_h100s(client):
    """The H200's share of the users' sweep (the entries measured there) is its own dataset,
    headline over its held-out half, each row a configuration of the H100's sweep (the
    backward's route is the one the kernels took on each GPU)."""
    import gzip

    from flashscope.simulator.calibrate.validation import summarize

    (path,) = sorted(DATA_DIR.glob("validation-users-h200-*.json.gz"))
    doc = json.loads(gzip.decompress(path.read_bytes()))
    listed = {d["key"]: d for d in client.get("/api/compare").json()["datasets"]}
    assert listed["h200:users"]["headline"] == "holdout"
    body = client.get("/api/compare?sweep=users&gpu=h200").json()
    assert body["dataset"]["key"] == "h200:users" and len(body["rows"]) == len(doc["rows"])
    want = summarize(doc["rows"])["holdout"]["time"]["mape_pct"]
    assert body["dataset"]["summary"]["holdout"]["time"]["mape_pct"] == pytest.approx(want)
    h100 = {r["id"]: r["config"] for r in _users_doc()["rows"]}
    same = {"gpu": None, "route": None}
    assert all(h100[r["id"]] | same == r["config"] | same for r in doc["rows"])
    assert {r["subset"] for r in doc["rows"]} == {"fit", "holdout"}


def test_gzipped_datasets_are_read_and_a_broken_one_skipped(tmp_path):
    shutil.copy(USERS[-1], tmp_path / USERS[-1].name)
    (tmp_path / "validation-broken.json.gz").write_bytes(b"not gzip")
    with TestClient(create_app(Settings(datasets_dir=tmp_path))) as c:
        assert [d["key"] for d in c.get("/api/compare").json()["datasets"]] == ["h100-sxm:users"]
        # no protocol dataset here: the one there is, unnamed; the protocol's, named, is not
        assert c.get("/api/compare").json()["dataset"]["key"] == "h100-sxm:users"
        r = c.get("/api/compare?sweep=protocol")
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "sweep"
        page = c.get("/compare")
        assert page.status_code == 200 and 'value="h100-sxm:users"' in page.text


def test_the_fresh_sweeps_are_offered_all_held_out_with_their_own_figures(client):
    """The sweeps drawn after the engine was fitted ship as one dataset of sweep "fresh": every
    row held out (none fitted), headline over all rows, ids carrying their sweep's seed, the
    rows' measurements those of the committed datasets, simulated by the current engine."""
    import gzip
    import random

    from flashscope.simulator.calibrate.validation import summarize

    (path,) = sorted(DATA_DIR.glob("validation-fresh-*.json.gz"))
    doc = json.loads(gzip.decompress(path.read_bytes()))
    listed = {d["key"]: d for d in client.get("/api/compare").json()["datasets"]}
    assert listed["h100-sxm:fresh"]["headline"] == "all"
    body = client.get("/api/compare?sweep=fresh").json()
    ds = body["dataset"]
    assert (ds["key"], ds["sweep"]) == ("h100-sxm:fresh", "fresh")
    assert ds["summary"]["fit"]["rows"] == 0 and ds["summary"]["all"]["rows"] == len(doc["rows"])
    want = summarize(doc["rows"])["all"]["time"]
    assert ds["summary"]["all"]["time"]["mape_pct"] == pytest.approx(want["mape_pct"])
    assert {r["subset"] for r in body["rows"]} == {"holdout"}
    # every row is a row of one of the measured datasets, its measurement untouched
    sources = {}
    for name in doc["merged_from"]:
        src = json.loads((DATA_DIR.parents[1] / name).read_text())
        seed = json.loads((DATA_DIR.parents[1] / src["sweep_file"]).read_text())["seed"]
        sources.update({f"s{seed}-{r['id']}": r for r in src["rows"]})
    assert len(sources) == len(doc["rows"])
    row = random.choice(doc["rows"])
    assert row["measured_us"] == sources[row["id"]]["measured_us"]
    assert row["measured_dram_bytes"] == sources[row["id"]]["measured_dram_bytes"]
    # and its misses are the classes beyond 10% of those rows
    misses = ds["known_misses"]["classes"]
    assert misses and all(c["mape_pct"] > 10 for c in misses)
    chosen = client.get(f"/api/compare?sweep=fresh&id={row['id']}").json()["chosen"]
    assert chosen["id"] == row["id"] and chosen["measured_us"] == row["measured_us"]
