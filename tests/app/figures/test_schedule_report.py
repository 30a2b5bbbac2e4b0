"""The /schedule figures: waves, the time cursor, causal imbalance, occupancy, Chrome trace."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flashscope.app.figures.chrome_trace import from_timeline
from flashscope.app.figures.schedule import (
    cursor,
    gantt_by_wave,
    imbalance,
    occupancy_table,
    shown_sms,
    waves,
)
from flashscope.simulator.core.hardware import custom, from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing.engine import simulate


@pytest.fixture(scope="module")
def causal():
    p = AttentionProblem(seq_q=3000, head_dim=64, batch=3, heads=8, causal=True)
    return simulate("fa2", p, TileConfig(128, 64, 2, 4), from_name("h100"))


def test_waves_follow_launch_order_over_the_slots(causal):
    k = causal.kernels[0]
    w = waves(k, causal.gpu.sms)
    slots = causal.gpu.sms * k.ctas_per_sm
    assert w[0] == 0 and w[slots - 1] == 0 and w[slots] == 1
    assert int(w.max()) + 1 == math.ceil(k.waves)


def test_gantt_by_wave_draws_every_cta_once_with_its_times(causal):
    fig = json.loads(json.dumps(gantt_by_wave(causal), allow_nan=False))
    k = causal.kernels[0]
    ctas = sorted(c[0] for t in fig["data"] for c in t["customdata"])
    assert ctas == list(range(k.n_ctas))
    for t in fig["data"]:
        idx = [c[0] for c in t["customdata"]]
        np.testing.assert_allclose(t["base"], k.start[idx] * 1e6, atol=1e-3)
        np.testing.assert_allclose(np.add(t["base"], t["x"]), k.end[idx] * 1e6, atol=1e-3)
        assert {c[1] for c in t["customdata"]} <= {int(x) + 1 for x in waves(k, causal.gpu.sms)}
    few = gantt_by_wave(causal, max_ctas=50)
    shown = few["layout"]["meta"]["sms_shown"]
    assert shown == shown_sms(causal, 50) < causal.gpu.sms
    assert sum(len(t["y"]) for t in few["data"]) <= 50


def test_cursor_counts_agree_with_a_brute_force_count(causal):
    c = cursor(causal, 40)
    k = causal.kernels[0]
    assert len(c["times_us"]) == 41 and c["ctas"] == k.n_ctas
    for i, t_us in enumerate(c["times_us"]):
        t = t_us * 1e-6
        running = (k.start <= t) & (k.end > t)
        assert c["running"][i] == int(running.sum()) or i in (0, 40)
        assert c["waiting"][i] + c["running"][i] + c["done"][i] == k.n_ctas
        assert c["sms_busy"][i] == len(set(k.sm[running].tolist())) or i in (0, 40)
    assert c["done"][-1] == k.n_ctas and c["waiting"][0] == k.n_ctas  # the launch gap comes first
    assert c["wave"][-1] is None and c["kernel"][20] == "fa2"


def test_the_cursor_between_two_waves_shows_no_wave():
    # 512 equal CTAs in two waves (132 SMs × 2): at one of the 101 instants the first wave has
    # ended and the second not yet begun
    p = AttentionProblem(seq_q=1024, head_dim=128, batch=1, heads=32)
    r = simulate("fa2", p, TileConfig(64, 64, 2, 8), from_name("h100"))
    c = cursor(r, 100)
    idle = [i for i, n in enumerate(c["running"]) if n == 0 and 0 < c["done"][i] < c["ctas"]]
    assert idle and all(c["kernel"][i] is None and c["wave"][i] is None for i in idle)
    assert {c["wave"][i] for i in range(101) if c["running"][i]} == {1, 2}


def test_causal_blocks_finish_first_and_full_blocks_do_not(causal):
    imb = imbalance(causal)
    assert imb["axis"] == "query block" and imb["first_us"] < imb["last_us"]
    assert imb["ratio"] > 5
    y = imb["figure"]["data"][0]["y"]
    k = causal.kernels[0]
    dur = (k.end - k.start) * 1e6
    assert y[0] == pytest.approx(dur[np.arange(k.n_ctas) % k.grid[0] == 0].mean(), abs=1e-3)
    p = AttentionProblem(seq_q=3072, head_dim=64, batch=3, heads=8)  # no ragged last block
    full = imbalance(simulate("fa2", p, TileConfig(128, 64, 2, 4), from_name("h100")))
    assert full["ratio"] < 1.3


def test_occupancy_table_names_the_smallest_limit():
    p = AttentionProblem(seq_q=1024, head_dim=128, batch=2, heads=4, causal=True)
    r = simulate("fa2-bwd", p, TileConfig(64, 64, 2, 4), from_name("a100"))
    table = occupancy_table(r)
    assert [t["kernel"] for t in table] == ["bwd_preprocess", "bwd_main", "bwd_postprocess"]
    for t in table:
        assert t["ctas_per_sm"] == max(1, min(t["limits"].values()))
        assert t["limits"][t["limiter"]] == min(t["limits"].values())
        assert t["slots"] == r.gpu.sms * t["ctas_per_sm"]


def test_timeline_chrome_trace_has_one_span_per_cta_and_no_overlap_beyond_occupancy(causal):
    data = json.loads(json.dumps(from_timeline(causal), allow_nan=False))
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    k = causal.kernels[0]
    ctas = [s for s in spans if s["cat"] == "cta"]
    assert len(ctas) == k.n_ctas and len(spans) == k.n_ctas + len(causal.kernels)
    by_sm: dict[int, list] = {}
    for s in ctas:
        by_sm.setdefault(s["tid"], []).append((s["ts"], s["ts"] + s["dur"] - 1e-6))
    for sm, spans_sm in by_sm.items():
        edges = sorted([(a, 1) for a, _ in spans_sm] + [(b, -1) for _, b in spans_sm])
        live = np.cumsum([e[1] for e in edges])
        assert live.max() <= k.ctas_per_sm, f"SM {sm - 1}"
    few = from_timeline(causal, sms_shown=3)
    assert {e["tid"] for e in few["traceEvents"] if e.get("cat") == "cta"} == {1, 2, 3}


def test_custom_clock_scales_the_clocked_rates_with_sms():
    base = from_name("h100")
    fast = custom(base, clock_ghz=base.clock_ghz * 1.5)
    assert fast.tensor_tflops == pytest.approx(base.tensor_tflops * 1.5)
    assert fast.l2_gbs == pytest.approx(base.l2_gbs * 1.5)
    assert fast.sfu_exps == pytest.approx(base.sfu_exps * 1.5)
    assert fast.hbm_gbs == base.hbm_gbs
    both = custom(base, clock_ghz=base.clock_ghz / 2, sms=base.sms * 2)
    assert both.tensor_tflops == pytest.approx(base.tensor_tflops)
    fixed = custom(base, clock_ghz=3.0, tensor_tflops=100.0)
    assert fixed.tensor_tflops == 100.0
    with pytest.raises(ValueError, match="clock_ghz"):
        custom(base, clock_ghz=0)
