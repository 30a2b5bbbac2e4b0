"""The L2 model: what reaches DRAM, against the compulsory traffic and the L2 requests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from flashscope.simulator.core.hardware import custom, from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing.engine import simulate
from flashscope.simulator.timing.l2model import fit_probe

from .engine_cases import cases, run

H100 = from_name("h100")
ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "simulator" / "data"
RESULTS = ROOT / "benchmarks" / "results"


def test_fa2_reads_q_k_v_once_when_a_head_fits_in_l2():
    rng = np.random.default_rng()
    n = int(rng.integers(1000, 6000))
    heads = int(rng.integers(1, 8))
    p = AttentionProblem(seq_q=n, head_dim=64, batch=2, heads=heads, causal=bool(rng.integers(2)))
    r = simulate("fa2", p, TileConfig(64, 64, 2, 4), H100)
    qkv = 3 * 2 * heads * n * 64 * 2
    assert r.dram_read_bytes == pytest.approx(qkv), (n, heads)
    # O and LSE: written to DRAM, or still dirty in L2 at the end
    written = r.dram_write_bytes + r.kernels[-1].l2_dirty_bytes
    assert written == pytest.approx(2 * heads * n * (64 * 2 + 4))
    assert r.l2_read_bytes > 2 * r.dram_read_bytes  # the K/V re-reads land in L2


def test_grouped_heads_share_their_kv_in_l2():
    p = dict(seq_q=4096, head_dim=128, batch=1, heads=16)
    t = TileConfig(128, 64, 2, 8)
    mha = simulate("fa2", AttentionProblem(**p), t, H100)
    gqa = simulate("fa2", AttentionProblem(**p, kv_heads=2), t, H100)
    assert mha.l2_read_bytes == gqa.l2_read_bytes  # the same requests…
    kv = 2 * 16 * 4096 * 128 * 2
    assert mha.dram_read_bytes - gqa.dram_read_bytes == pytest.approx(kv * 7 / 8)  # …fewer misses


def test_a_head_larger_than_l2_is_refetched_every_wave():
    # K/V of one head: 2 × 131072 × 128 × 2 B = 64 MiB, more than the 40 MiB of usable L2
    p = AttentionProblem(seq_q=131072, head_dim=128, batch=1, heads=2)
    t = TileConfig(128, 64, 2, 8)
    r = simulate("fa2", p, t, H100)
    compulsory = 3 * 2 * 131072 * 128 * 2
    assert r.dram_read_bytes > 1.5 * compulsory
    huge = simulate("fa2", p, t, custom(H100, l2_mib=4096))
    assert huge.dram_read_bytes == pytest.approx(compulsory)
    assert huge.time_s <= r.time_s


def test_fa1_rereads_hit_only_while_the_heads_fit():
    t = TileConfig(64, 64, 2, 4)
    small = simulate("fa1", AttentionProblem(seq_q=1024, head_dim=64, heads=8), t, H100)
    first_touch = 8 * 1024 * (4 * 64 * 2 + 2 * 4)  # Q, O, K, V and ℓ, m once per head
    assert small.dram_read_bytes == pytest.approx(first_touch)
    assert small.dram_read_bytes < 0.12 * small.l2_read_bytes
    # 64 heads × (Q + O) of 16384 × 64 × 2 B each: 256 MiB re-read every outer pass
    big = simulate("fa1", AttentionProblem(seq_q=16384, head_dim=64, heads=64), t, H100)
    assert big.dram_read_bytes > 0.9 * big.l2_read_bytes


def test_naive_softmax_finds_s_in_l2_only_when_it_fits():
    t = TileConfig(64, 64, 2, 4)
    small = simulate("naive", AttentionProblem(seq_q=512, head_dim=64, heads=4), t, H100)
    big = simulate("naive", AttentionProblem(seq_q=8192, head_dim=64, heads=16), t, H100)
    k2_small, k2_big = small.kernels[1], big.kernels[1]
    assert k2_small.name == k2_big.name == "naive_softmax"
    assert k2_small.dram_read_bytes < 0.2 * k2_small.l2_read_bytes  # 2 MiB of S: hits
    assert k2_big.dram_read_bytes > 0.95 * k2_big.l2_read_bytes  # 2 GiB of S: misses
    # every S, P and O byte reaches DRAM, but for the last ones still dirty in L2
    left = big.kernels[-1].l2_dirty_bytes
    assert big.dram_write_bytes + left == pytest.approx(big.l2_write_bytes)
    assert left < 0.01 * big.l2_write_bytes


@settings(max_examples=30, deadline=None)
@given(case=cases(), grow=st.floats(1.0, 8.0))
def test_more_l2_never_means_more_dram_traffic(case, grow):
    algo, p, t, gpu = case
    assume(algo != "decode" or not p.causal)
    small = run(algo, p, t, gpu, splits=3)
    large = run(algo, p, t, custom(gpu, l2_mib=gpu.l2_mib * grow), splits=3)
    before = small.dram_read_bytes + small.dram_write_bytes
    assert large.dram_read_bytes + large.dram_write_bytes <= before * (1 + 1e-12), case
    assert large.time_s <= small.time_s * (1 + 1e-12)


@settings(max_examples=20, deadline=None)
@given(case=cases(), copies=st.floats(1.0, 2.0))
def test_shared_lines_taking_more_room_never_mean_less_dram_traffic(case, copies):
    algo, p, t, gpu = case
    assume(algo != "decode" or not p.causal)
    one = run(algo, p, t, custom(gpu, l2_shared_copies=1.0), splits=3)
    more = run(algo, p, t, custom(gpu, l2_shared_copies=copies), splits=3)
    before = one.dram_read_bytes + one.dram_write_bytes
    assert more.dram_read_bytes + more.dram_write_bytes >= before * (1 - 1e-12), case


def test_a_head_stream_that_fits_once_but_not_twice_misses_when_its_lines_sit_twice():
    # K/V of one head: 2 × 16384 × 128 × 2 B = 8 MiB, re-read by the CTAs of the next wave;
    # what a wave references in between fits 30 MiB of usable L2 once, not twice
    p = AttentionProblem(seq_q=16384, head_dim=128, batch=1, heads=16)
    t = TileConfig(128, 64, 2, 8)
    gpu = custom(H100, l2_reuse_fraction=0.6, l2_reuse_exponent=8.0)
    compulsory = 3 * 16 * 16384 * 128 * 2
    once = simulate("fa2", p, t, custom(gpu, l2_shared_copies=1.0))
    twice = simulate("fa2", p, t, custom(gpu, l2_shared_copies=2.0))
    assert once.dram_read_bytes == pytest.approx(compulsory, rel=0.01)
    assert twice.dram_read_bytes > 1.3 * compulsory
    # a problem whose every byte fits twice over misses only once, whatever the copies
    small = AttentionProblem(seq_q=2048, head_dim=64, batch=1, heads=4)
    fits = simulate("fa2", small, t, custom(gpu, l2_shared_copies=2.0))
    assert fits.dram_read_bytes == pytest.approx(3 * 4 * 2048 * 64 * 2)


def test_the_l2_probe_fit_recovers_known_curves_and_refuses_other_gpus():
    rng = np.random.default_rng()
    l2 = 50 * 2**20
    fraction = float(rng.integers(200, 380)) * 0.0025
    top = round(fraction / 0.0025)
    shared = float(rng.integers(-(-top * 10 // 19), top + 1)) * 0.0025  # copies ≤ 2
    exponent = 2.0 ** (float(rng.integers(8, 48)) / 8)
    rows = []
    for s in np.linspace(4, 100, 49) * 2**20:
        for order, f in (("same", fraction), ("shuffled", fraction), ("shared-twice", shared)):
            cap = f * l2
            hit = 1.0 if s <= cap else (cap / s) ** exponent
            rows.append({"order": order, "bytes": float(s), "second_miss_share": 1 - hit})
    rows.append({"order": "shared", "bytes": 8.0 * 2**20, "second_miss_share": 1.0})  # ignored
    got = fit_probe({"l2_bytes": l2, "rows": rows}, l2)
    case = (fraction, shared, exponent)
    assert got.fraction == pytest.approx(fraction, abs=1e-9), case
    assert got.shared_fraction == pytest.approx(shared, abs=1e-9), case
    assert got.copies == pytest.approx(fraction / shared) == got.ratio, case
    assert got.exponent == pytest.approx(exponent) and got.worst < 1e-9 and got.sizes == 98
    # a ratio beyond two copies per line is reported, and the room held at two
    wide = [
        {**r, "second_miss_share": 1.0 if r["bytes"] > 0.3 * fraction * l2 else 0.0}
        if r["order"] == "shared-twice" else r
        for r in rows
    ]  # fmt: skip
    capped = fit_probe({"l2_bytes": l2, "rows": wide}, l2)
    assert capped.ratio > 2.0 and capped.copies == 2.0
    # without the scan of shared lines: no ratio, and a shared line takes one line's room
    alone = fit_probe({"l2_bytes": l2, "rows": [r for r in rows if r["order"] == "same"]}, l2)
    assert alone.fraction == got.fraction and alone.ratio is None and alone.copies == 1.0
    with pytest.raises(ValueError, match="B of L2"):
        fit_probe({"l2_bytes": 40 * 2**20, "rows": rows}, l2)
    with pytest.raises(ValueError, match="4 are needed"):
        fit_probe({"l2_bytes": l2, "rows": [r for r in rows if r["order"] == "same"][:3]}, l2)


@pytest.mark.parametrize("key", ["h100-sxm", "h200"])
def test_shipped_l2_room_is_what_the_probe_measured(key):
    """Each shipped calibration's usable L2 and shared lines' room are what its GPU's
    committed probe measured: a scan of lines every SM reads starts missing at a smaller
    size than lines of one reader (a partitioned L2 holds such lines on both sides)."""
    doc = json.loads((DATA / f"calibration-{key}.json").read_text())
    name = Path(doc["measured"]["l2_probe"]["file"]).name
    gpu = from_name(key)
    fitted = fit_probe(json.loads((RESULTS / name).read_text()), gpu.l2_bytes)
    assert gpu.efficiency.l2_reuse_fraction == fitted.fraction
    assert gpu.efficiency.l2_shared_copies == fitted.copies == fitted.ratio
    assert fitted.worst < 0.2 and 0.5 < fitted.fraction < 0.9
    assert 1.1 < fitted.copies < 1.6  # near 4/3: two copies against one or two, half and half
