"""The analyses of measured data that need no GPU: the tile ranks and rows that
benchmarks/band_order.py and band_latency.py read stamps by, band_order's summary,
benchmarks/host_noise.py's comparison of the two machines."""

from __future__ import annotations

import gzip
import json
import random
import sys
from dataclasses import replace

import numpy as np
import pytest

from benchmarks import band_order, host_noise
from flashscope.kernels.hopper_forward import tile_ranks, tile_rows


@pytest.mark.parametrize("name", list(band_order.CONFIGS))
def test_a_tiles_rank_is_its_place_in_the_launch_order(name: str) -> None:
    """`tile_ranks` against the launch order written out: band by band of (batch, head) rows
    (the last band may be short), each rank (0: the heaviest block) for every row of the band
    before the next rank."""
    rows, n = random.randint(1, 40), random.choice([200, 1024, 1000])
    band = random.choice([0, 1, 2, 3, 8])
    cfg = replace(band_order.CONFIGS[name], band=band)
    per_head, width = -(-n // cfg.tile_m), band or rows
    want = [rank for first in range(0, rows, width) for rank in range(per_head)
            for _ in range(first, min(first + width, rows))]  # fmt: skip
    assert tile_ranks(cfg, rows, n).tolist() == want, (rows, n, band)


@pytest.mark.parametrize("name", list(band_order.CONFIGS))
def test_a_tiles_row_and_rank_follow_the_launch_order(name: str) -> None:
    """`tile_rows` against the launch order written out as `test_a_tiles_rank_…`
    does, with the row: every (row, rank) once, rows in their band's order within a rank."""
    rows, n = random.randint(1, 40), random.choice([200, 1024, 1000])
    band = random.choice([0, 1, 2, 3, 8])
    cfg = replace(band_order.CONFIGS[name], band=band)
    per_head, width = -(-n // cfg.tile_m), band or rows
    want = [(row, rank) for first in range(0, rows, width) for rank in range(per_head)
            for row in range(first, min(first + width, rows))]  # fmt: skip
    row, rank = tile_rows(cfg, rows, n)
    assert list(zip(row.tolist(), rank.tolist(), strict=True)) == want, (rows, n, band)


def test_the_summary_reads_spans_and_ranks_from_the_stamps() -> None:
    """Program spans from the roles' stamps (unstamped roles left out), the launch's span, and
    the mean span of each rank's tiles."""
    cfg = replace(band_order.CONFIGS["np2w"], band=1)
    b, h, n, _ = band_order.SHAPE
    per_head = -(-n // cfg.tile_m)
    programs = b * h * per_head
    rng = np.random.default_rng()
    start = rng.integers(1_000, 2_000, programs).astype(np.int64)
    span = 1_000 * (per_head - np.arange(programs) % per_head)  # ns, heaviest first
    edges = np.full((programs, cfg.consumers + 1, 4), -1, dtype=np.int64)
    for role in range(cfg.consumers + 1):
        late = rng.integers(0, 50, programs)  # each role starts a little after the first
        edges[:, role, 1] = start + late
        edges[:, role, 3] = start + span - late
    edges[:, 0, 1] = start  # consumer 0 starts first and ends last
    edges[:, 0, 3] = start + span
    edges[::7, 1] = -1  # a role that left no stamps
    out = band_order.summary(edges, cfg)
    assert out["launch_span_us"] == pytest.approx((np.max(start + span) - start.min()) / 1e3)
    assert out["mean_program_us"] == pytest.approx(span.mean() / 1e3)
    assert out["mean_tile_us_by_rank"] == pytest.approx([per_head - r for r in range(per_head)])


def test_host_noise_splits_the_halves_as_the_datasets_do(tmp_path, monkeypatch) -> None:
    """Its held-out and fit figures are the datasets' own summaries, split by `host_bound`;
    the pairs are every configuration host-bound on either GPU, each with both machines'
    call times and kernel durations."""
    from flashscope.simulator.calibrate.known_misses import host_bound
    from flashscope.simulator.calibrate.validation import summarize

    out = tmp_path / "noise.json"
    monkeypatch.setattr(sys, "argv", ["host_noise.py", "--out", str(out)])
    assert host_noise.main() == 0
    doc = json.loads(out.read_text())
    paired = {p["id"] for p in doc["pairs"]}
    ids = {}
    for gpu, name in host_noise.DATASETS.items():
        rows = json.loads(gzip.decompress((host_noise.DATA / name).read_bytes()))["rows"]
        ids[gpu] = {r["id"] for r in rows}
        for half in ("holdout", "fit"):
            got = doc["halves"][f"{gpu}/{half}"]
            want = summarize(rows)[half]["time"]
            assert got["all"]["mape_pct"] == pytest.approx(want["mape_pct"])
            bound = [r for r in rows if r["subset"] == half and host_bound(r)]
            assert got["host_bound"]["n"] == len(bound)
            assert got["all"]["n"] == got["host_bound"]["n"] + got["not_host_bound"]["n"]
        ids[f"{gpu}/bound"] = {r["id"] for r in rows if host_bound(r)}
    both = ids["h100"] & ids["h200"]
    assert paired == (ids["h100/bound"] | ids["h200/bound"]) & both
    assert all(len(p["call_us"]) == 2 and len(p["kernels_us"]) == 2 for p in doc["pairs"])


def test_the_backward_tables_entries_are_merged_for_the_results_gpu(tmp_path, monkeypatch) -> None:
    """`hopper_backward.py --table FILE --write`: per length bucket the candidate with the
    smallest worst share of Triton's time, where it beats Triton by WIN, lands in the result's
    GPU's edge section (odd lengths), and the backward's lookup returns it at once."""
    import flashscope.kernels.config as config
    from benchmarks import hopper_backward as bench
    from flashscope.kernels.hopper_backward import BwdConfig, tuned_config

    path = tmp_path / "tuned.json"
    path.write_text(config.TUNED_FILE.read_text())
    monkeypatch.setattr(config, "TUNED_FILE", path)
    config.tuned_table.cache_clear()
    rng = random.Random()
    kinds = ["gluon[2, 64, 2]", "gluon[2, 64, 2, 4]", "gluon[2, 64, 2, 8]"]
    rows, want = [], {}
    for n, bucket in ((1000, "n1024"), (3000, "n4096")):
        best = rng.choice(kinds)
        for dtype in ("float16", "bfloat16"):
            ms = {"triton": 3.0, "sdpa-cudnn": 1.0}
            ms.update({k: rng.uniform(1.2, 1.5) for k in kinds})
            ms[best] = rng.uniform(0.9, 1.1)  # the fastest in both dtypes
            rows.append({"d": 256, "n": n, "causal": True, "dtype": dtype, "ms": ms})
        want[f"bwd/16/d256/causal/{bucket}"] = json.loads(best.removeprefix("gluon"))
    # a bucket where no candidate beats Triton by WIN gets no entry
    even = {"triton": 1.0, "sdpa-cudnn": 1.0, **dict.fromkeys(kinds, 0.99)}
    rows.append({"d": 256, "n": 5000, "causal": False, "dtype": "float16", "ms": even})
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"device": "Some Hopper", "time": rows}))
    assert bench.main(["--table", str(result), "--write"]) == 0
    table = json.loads(path.read_text())["gpus"]["Some Hopper"]
    assert table == {"bwd-ws-edge": want}
    for key, entry in want.items():
        n = int(key.rsplit("/n", 1)[1]) - 5
        assert tuned_config("Some Hopper", 256, True, n, True) == BwdConfig(*entry)
    assert tuned_config("Some Hopper", 256, False, 5000, True) is None
    monkeypatch.undo()
    config.tuned_table.cache_clear()


def test_the_model_judges_each_causal_loop_form_on_its_own(tmp_path) -> None:
    """benchmarks/fa3_unseen.merged_ab: rows of both forms (`merged` or two loops) simulated
    alike, their errors and pairs kept per form. Measured times made from the model's own,
    two loops 1.5× slower: the merged form is exact, the other 1/3 fast, and every pair within
    a form ordered right; a pair across forms (a configuration against its twin, the model
    calling them equal) would be a wrong one."""
    from benchmarks import fa3_unseen
    from flashscope.simulator.calibrate import fa3_rows

    plain = [[1, 128, 2, 1, 2, 0, 1], [3, 128, 2, 1, 1, 1], [1, 128, 2, 1, 2]]  # > 5% apart
    n = random.choice([1024, 2048])
    problem = dict(dtype="fp16", head_dim=64, seq_len=n, batch=16384 // n, heads=32, causal=True)
    impls = ["ws" + json.dumps(c) for c in plain]
    impls += ["ws" + json.dumps([*c, *[0, 0, 1][len(c) - 5 :], 1]) for c in plain]
    path = tmp_path / "merged-mask-TEST-passes.json"

    def write(ms: dict[str, float]) -> None:
        rows = [dict(impl=i, ms=ms[i], **problem) for i in impls]
        rows.append(dict(impl="sdpa-cudnn", ms=1.0, **problem))
        path.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "rows": rows}))

    write(dict.fromkeys(impls, 1.0))
    rows = fa3_rows.measured_rows([path], merged_as_plain=True)
    assert len(rows) == 6
    model = {r["impl"]: r["model_ms"] for r in fa3_rows.compare(rows)["rows"]}
    write({i: model[i] * (1.0 if len(json.loads(i[2:])) == 9 else 1.5) for i in impls})
    forms = fa3_unseen.merged_ab([path])["forms"]
    assert forms["merged"]["rows"] == forms["two loops"]["rows"] == 3
    assert forms["merged"]["mape"] == pytest.approx(0.0, abs=1e-9)
    assert forms["two loops"]["mape"] == pytest.approx(1 / 3)
    assert forms["two loops"]["mean_error"] == pytest.approx(-1 / 3)
    for v in forms.values():
        assert v["pairs"]["right"] == v["pairs"]["count"] >= 1
    assert forms["merged"]["pairs"] == forms["two loops"]["pairs"]


def test_the_fetch_bound_scales_only_causal_variants_by_their_two_loop_ratio(tmp_path) -> None:
    """benchmarks/fa3_fetch_bound: the ratio is two-loop over merged time, passes summed, per
    GPU; it multiplies a causal variant's model time (its nearest A/B configuration's where it
    has none of its own; the H100's where its GPU has no A/B file), never below 1, and leaves
    unmasked variants and sweep rows alone."""
    from benchmarks import fa3_fetch_bound as fb

    slow = {
        "NVIDIA H100 80GB HBM3": random.uniform(1.05, 1.6),
        "NVIDIA H200": random.uniform(1.05, 1.6),
    }
    paths = []
    for device, ratio in slow.items():
        times = {"ws[3, 128, 2, 0, 1]": ratio, "ws[3, 128, 2, 0, 1, 0, 0, 1, 1]": 1.0,
                 "ws[3, 128, 2, 1, 1, 1]": 0.9, "ws[3, 128, 2, 1, 1, 1, 0, 1, 1]": 1.0,
                 "sdpa-cudnn": 0.5}  # fmt: skip
        rows = [dict(impl=i, head_dim=64, seq_len=1024, ms=ms) for i, ms in times.items()] * 2
        paths.append(tmp_path / f"ab-{len(paths)}.json")
        paths[-1].write_text(json.dumps({"device": device, "rows": rows}))
    ratios = fb.two_loop_ratios(paths)
    h100, h200 = slow.values()
    assert ratios == {
        ("h100-sxm", 64, 1024, (3, 128, 2, 0, 1, 0, 0, 1)): pytest.approx(h100),
        ("h100-sxm", 64, 1024, (3, 128, 2, 1, 1, 1, 0, 1)): pytest.approx(0.9),
        ("h200", 64, 1024, (3, 128, 2, 0, 1, 0, 0, 1)): pytest.approx(h200),
        ("h200", 64, 1024, (3, 128, 2, 1, 1, 1, 0, 1)): pytest.approx(0.9),
    }
    base = dict(head_dim=64, seq_len=1024, model_ms=2.0, gpu="h100-sxm")
    compared = [
        dict(base, variant="plain", causal=True, impl="ws[3, 128, 2, 0, 1]"),
        dict(base, variant="plain", causal=True, impl="ws[3, 128, 2, 0, 1]", gpu="h200"),
        dict(base, variant="plain", causal=True, impl="ws[3, 128, 2, 0, 1]", gpu="h100-pcie"),
        dict(base, variant="plain", causal=False, impl="ws[3, 128, 2, 0, 1]"),
        dict(base, variant="pipelined", causal=True, impl="ws[3, 128, 2, 1, 1]"),  # NEAREST
        dict(base, causal=True, impl="ws[3, 128, 2, 0, 1]"),  # a sweep row, not a variant
    ]
    out = [r["model_ms"] for r in fb.with_fetch(compared, ratios)]
    # the 0.9 ratio counts as 1
    assert out == [pytest.approx(2.0 * h100), pytest.approx(2.0 * h200),
                   pytest.approx(2.0 * h100), 2.0, 2.0, 2.0]  # fmt: skip


def test_local_memory_lists_only_spilling_kernels_at_32_registers() -> None:
    from benchmarks import local_memory as lm
    from flashscope.simulator.core import hardware
    from flashscope.simulator.timing import engine

    path = lm.DATASETS["h100-sxm"]
    rows = json.loads(gzip.decompress(path.read_bytes()))["rows"]
    # u004: a forward at 32 registers; u003: a backward whose preprocess kernel has 32 and
    # no spill; u002: a forward that spills at 255
    picked = [r for r in rows if r["id"][:4] in ("u004", "u003", "u002")]
    gpu = hardware.from_name("h100-sxm")
    floor, others = lm.kernels(picked, gpu)
    assert [k["id"][:4] for k in floor] == ["u004"] and len(others) == 1
    (k,) = floor
    assert k["kernel"] == "fa2" and k["simulated_us"] < k["measured_us"]
    before = engine._work
    with lm.own_rate(20.0):
        slower = lm.kernels(picked, gpu)[0][0]["simulated_us"]
        assert engine._work is not before
    assert engine._work is before and slower > k["simulated_us"]
