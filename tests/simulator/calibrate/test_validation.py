"""The validation's sweep file, its error statistics, rank correlation and pick of the best."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from flashscope.simulator.calibrate.validation import (
    Entry,
    build_dataset,
    check_config,
    error_stats,
    problem_key,
    ranking,
    ranks,
    read_sweep,
    simulate_config,
    spearman,
    summarize,
)
from flashscope.simulator.core import hardware

ROOT = Path(__file__).resolve().parents[3]
SWEEP = ROOT / "benchmarks" / "sweeps" / "validation.json"


def test_the_shipped_sweep_covers_what_the_issue_asks():
    entries = read_sweep(SWEEP)
    assert len(entries) >= 48
    cfgs = [e.config for e in entries]
    assert {c["seq"] for c in cfgs} >= {512, 16384}
    assert {c["head_dim"] for c in cfgs} == {64, 128}
    assert {c["causal"] for c in cfgs} == {False, True}
    assert {c["algo"] for c in cfgs} == {"fa2", "fa2-bwd"}
    problems = {}
    for c in cfgs:
        key = tuple(c[k] for k in ("algo", "seq", "head_dim", "causal"))
        problems.setdefault(key, set()).add((c["block_m"], c["block_n"], c["stages"], c["warps"]))
    assert min(len(v) for v in problems.values()) >= 3  # three tile configurations each
    gpu = hardware.from_name("h100")
    for e in entries[::11]:  # every configuration fits Hopper's shared memory
        assert simulate_config(e.config, gpu).time_s > 0
    assert {e.subset for e in entries} == {"fit", "holdout"}


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ({"format": 2, "entries": []}, "format"),
        ({"format": 1, "entries": []}, "no entries"),
        ({"format": 1, "entries": [{"id": "a", "subset": "train", "config": {}}]}, "subset"),
        (
            {"format": 1, "entries": [{"id": "a", "subset": "fit", "config": {"algo": "fa2"}}]},
            "needs 'seq'",
        ),
        (
            {"format": 1, "entries": [{"id": "a", "subset": "fit", "config": {"sequence": 1}}]},
            "unknown config fields",
        ),
    ],
)
def test_bad_sweeps_are_refused_naming_the_entry(tmp_path, doc, match):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=match):
        read_sweep(path)


def test_ranks_share_ties_and_spearman_matches_its_definition():
    assert ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]
    rng = np.random.default_rng()
    a, b = rng.permutation(7).astype(float), rng.permutation(7).astype(float)
    d = ranks(a) - ranks(b)
    assert spearman(a, b) == pytest.approx(1 - 6 * np.sum(d**2) / (7 * (49 - 1)))
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_error_stats_and_the_simulators_pick():
    s = error_stats(["a", "b", "c"], [100.0, 200.0, None], [110.0, 150.0, 5.0])
    assert s["n"] == 2 and s["mape_pct"] == pytest.approx(17.5)
    assert s["worst_pct"] == pytest.approx(-25.0) and s["worst_id"] == "b"
    base = {"algo": "fa2", "seq": 512, "head_dim": 64, "stages": 3, "warps": 4}
    rows = [
        {"id": f"t{i}", "config": {**base, "block_m": bm, "block_n": 64},
         "measured_us": m, "simulated_us": s}
        for i, (bm, m, s) in enumerate([(16, 10.0, 30.0), (32, 10.3, 10.0), (64, 20.0, 20.0)])
    ]  # fmt: skip
    r = ranking(rows)
    assert r["problems"] == 1
    assert r["by_problem"][0]["simulated_best"] == "t1"
    assert r["by_problem"][0]["pick_gap_pct"] == pytest.approx(3.0)
    assert r["pick_within_5pct"] == 1.0
    assert r["spearman_mean"] == pytest.approx(spearman([10, 10.3, 20], [30, 10, 20]))


def test_a_dataset_simulates_every_entry_and_summarizes_each_subset():
    rng = random.Random()
    seed = rng.randrange(2**31)
    gen = np.random.default_rng(seed)
    entries = read_sweep(SWEEP)[:12]
    gpu = hardware.from_name("h200")
    measured = []
    for e in entries:
        t = simulate_config(e.config, gpu).time_s
        measured.append({"id": e.id, "ms": t * 1e3 * gen.uniform(0.8, 1.25), "route": "separate"})
    measured[3] = {"id": entries[3].id, "error": "RuntimeError: boom"}
    ds = build_dataset(entries, measured, {"device": "NVIDIA H200", "date": "d"}, gpu)
    assert ds["gpu"] == "h200" and len(ds["rows"]) == 12
    assert ds["rows"][3]["measured_us"] is None and ds["rows"][3]["simulated_us"] > 0
    s = ds["summary"]
    assert s["all"]["time"]["n"] == 11, seed
    assert s["fit"]["rows"] + s["holdout"]["rows"] == 12
    errs = [abs(r["error_pct"]) for r in ds["rows"] if r.get("error_pct") is not None]
    assert s["all"]["time"]["mape_pct"] == pytest.approx(np.mean(errs)), seed
    assert s["targets"]["time_mape"] == (np.mean(errs) <= 10), seed
    json.dumps(ds)
    again = summarize(ds["rows"])
    assert again["all"]["time"] == s["all"]["time"]
    assert isinstance(entries[0], Entry)


def test_repeat_passes_give_the_ranking_ceiling_and_candidates_are_ranked_apart():
    gen = np.random.default_rng()
    base = {"algo": "fa2", "seq": 1024, "head_dim": 64, "stages": 3, "warps": 4, "block_n": 64}
    truth = gen.permutation(5).astype(float) + 10.0  # five tile configurations, distinct times
    noise = gen.normal(0.0, 0.05, size=(5, 3))
    rows = [
        {
            "id": f"t{i}",
            "tiles": "candidate" if i < 3 else "spread",
            "config": {**base, "block_m": 16 << i},
            "measured_us": float(truth[i]),
            "simulated_us": float(truth[i]) * 2,
            "measured": {"ms_passes": list(truth[i] + noise[i])},
        }
        for i in range(5)
    ]
    r = ranking(rows)
    passes = np.array([row["measured"]["ms_passes"] for row in rows])
    pairs = [spearman(passes[:, a], passes[:, b]) for a, b in ((0, 1), (0, 2), (1, 2))]
    assert r["repeat_spearman_mean"] == pytest.approx(np.mean(pairs))
    assert r["spearman_mean"] == pytest.approx(1.0)  # a model off by a constant factor ranks right
    s = summarize(rows)
    cand = s["all"]["ranking_candidates"]
    assert cand["problems"] == 1
    assert cand["spearman_mean"] == pytest.approx(1.0)
    rows[0]["measured"]["ms_passes"] = [1.0]
    assert ranking(rows)["repeat_spearman_mean"] is None  # fewer than two passes on one row
    assert (
        "ranking_candidates" not in summarize([r for r in rows if r["tiles"] == "candidate"])["all"]
    )


def test_an_unknown_tile_set_is_refused_naming_the_entry(tmp_path):
    entry = read_sweep(SWEEP)[0]
    doc = {"format": 1, "entries": [
        {"id": "x", "subset": "fit", "tiles": "good", "config": entry.config}
    ]}  # fmt: skip
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"entry 0 \(x\): tiles must be one of"):
        read_sweep(path)


def test_the_shipped_sweep_has_candidate_and_spread_tiles_per_problem():
    entries = read_sweep(SWEEP)
    per_problem: dict[str, list[str]] = {}
    for e in entries:
        per_problem.setdefault(e.id.rsplit("-t", 1)[0], []).append(e.tiles)
    assert len(per_problem) == 48
    assert all(t.count("candidate") == 3 and t.count("spread") == 2 for t in per_problem.values())


def test_a_register_cap_is_a_tile_field_of_a_configuration():
    base = {
        "algo": "fa2",
        "impl": "flashscope",
        "seq": 8192,
        "head_dim": 64,
        "batch": 2,
        "heads": 32,
        "block_m": 128,
        "block_n": 128,
        "stages": 2,
        "warps": 8,
        "gpu": "h200",
    }
    capped = {**base, "maxnreg": 128}
    check_config(capped)
    assert problem_key(capped) == problem_key(base)  # the same problem, other tiles
    free, cap = simulate_config(base), simulate_config(capped)
    assert (free.main.ctas_per_sm, cap.main.ctas_per_sm) == (1, 2)
    with pytest.raises(ValueError, match="maxnreg"):
        check_config({**base, "maxnreg": 12})
    bwd = {**base, "algo": "fa2-bwd", "block_m": 64, "dq_block_m": 128, "maxnreg": 128}
    assert all(k.occupancy.footprint.regs_per_thread <= 128 for k in simulate_config(bwd).kernels)


def _ncu_row(config: dict, durations: dict[str, float]) -> dict:
    """A dataset row's measurement with Nsight Compute's per-kernel durations (ns)."""
    kernels = [{"name": n, "gpu__time_duration.sum": ns} for n, ns in durations.items()]
    return {"id": "x", "ms": 1.0, "route": config.get("route"), "ncu": {"kernels": kernels}}


@pytest.mark.parametrize("route", ["separate", "atomic"])
def test_the_backwards_kernels_are_compared_alone_with_nsights_durations(route):
    """Each backward kernel Nsight Compute timed is simulated alone (its own stream, the boost
    clock) and set against that duration, per row and per kernel in the summary; the atomic
    route's dK/dV kernel apart from the separate one's; the forward has no such entries."""
    from flashscope.simulator.calibrate.validation import alone, measured_alone, workload_of
    from flashscope.simulator.timing.engine import alone_time_s, simulate_workload

    rng = random.Random()
    gpu = hardware.from_name("h200")
    config = {"algo": "fa2-bwd", "impl": "flashscope", "batch": 2, "heads": 8,
              "seq": rng.choice([1000, 2048]), "head_dim": 64, "causal": rng.random() < 0.5,
              "dtype": "fp16", "block_m": 64, "block_n": 64, "stages": 3, "warps": 4,
              "route": route, "gpu": "h200"}  # fmt: skip
    workload = workload_of(config, gpu)
    one = alone(workload, "bwd_dkdv")
    assert len(one.launches) == 1 and not one.launches[0].concurrent
    (k,) = simulate_workload(one, gpu, power_cap=False).kernels
    assert k.clock == 1.0
    capped = simulate_workload(one, gpu).kernels[0]
    assert alone_time_s(one, gpu) <= capped.time_s - gpu.efficiency.launch_us * 1e-6
    factors = {"_attn_bwd_dq": rng.uniform(0.7, 1.4), "_attn_bwd_dkdv": rng.uniform(0.7, 1.4)}
    names = {"_attn_bwd_dq": "bwd_dq", "_attn_bwd_dkdv": "bwd_dkdv"}
    durations = {"_bwd_preprocess": 5e3}
    for ncu_name, f in factors.items():
        if route == "separate" or ncu_name == "_attn_bwd_dkdv":
            durations[ncu_name] = alone_time_s(alone(workload, names[ncu_name]), gpu) * 1e9 * f
    entry = Entry("x", "fit", config, ncu=True)
    ds = build_dataset([entry], [_ncu_row(config, durations)], {}, gpu)
    (row,) = ds["rows"]
    got = {k["name"]: k for k in row["kernels_alone"]}
    want = {"bwd_dkdv-atomic"} if route == "atomic" else {"bwd_dq", "bwd_dkdv"}
    assert set(got) == want
    for ncu_name, f in factors.items():
        name = names[ncu_name] + ("-atomic" if route == "atomic" else "")
        if name in got:
            assert got[name]["error_pct"] == pytest.approx((1 / f - 1) * 100)
            assert got[name]["measured_us"] == pytest.approx(durations[ncu_name] / 1e3)
    summary = ds["summary"]["all"]["kernels_alone"]
    assert set(summary) == want
    assert all(s["n"] == 1 for s in summary.values())
    pairs = measured_alone(ds["rows"][0], workload)
    assert [p[0] for p in pairs] == [n for n in ("bwd_dq", "bwd_dkdv") if f"_attn_{n}" in durations]
    fwd = dict(config, algo="fa2")
    fwd.pop("route")
    (frow,) = build_dataset([Entry("f", "fit", fwd)], [_ncu_row(fwd, {"_attn_fwd": 1e5})], {},
                            gpu)["rows"]  # fmt: skip
    assert frow["kernels_alone"] == []
