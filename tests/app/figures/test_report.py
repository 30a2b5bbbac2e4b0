"""Report dicts: a JSON-ready summary and Plotly figures drawn from the engine's results."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flashscope.app.figures.report import gantt, limiter_bars, roofline, summary
from flashscope.simulator.core.hardware import from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing.engine import simulate
from flashscope.simulator.timing.results import LIMITERS


@pytest.fixture(scope="module")
def bwd():
    p = AttentionProblem(seq_q=2000, head_dim=64, batch=2, heads=4, causal=True)
    return simulate("fa2-bwd", p, TileConfig(64, 64, 2, 4), from_name("h200"))


def test_summary_is_json_and_adds_up(bwd):
    s = json.loads(json.dumps(summary(bwd), allow_nan=False))
    assert s["time_us"] == pytest.approx(sum(k["time_us"] for k in s["kernels"]))
    assert s["dram_read_bytes"] == pytest.approx(sum(k["dram_read_bytes"] for k in s["kernels"]))
    assert s["l2_bytes"] == pytest.approx(s["l2_read_bytes"] + s["l2_write_bytes"])
    assert set(s["limiter"]) == set(LIMITERS)
    assert sum(s["limiter"].values()) == pytest.approx(1.0)
    for k in s["kernels"]:
        assert sum(k["limiter"].values()) == pytest.approx(1.0)
    assert [k["name"] for k in s["kernels"]] == ["bwd_preprocess", "bwd_main", "bwd_postprocess"]
    assert s["main_kernel"] == "bwd_main" and s["ctas_per_sm"] >= 1
    assert s["floor_us"] <= s["time_us"]
    assert s["counts"]["flops"] == bwd.flops


def test_gantt_has_one_bar_per_cta_and_thins_out_by_sm(bwd):
    fig = gantt(bwd)
    n = sum(k.n_ctas for k in bwd.kernels)
    assert sum(len(trace["x"]) for trace in fig["data"]) == n
    main = bwd.kernels[1]
    trace = fig["data"][1]
    np.testing.assert_allclose(trace["base"], main.start * 1e6)
    np.testing.assert_allclose(np.add(trace["base"], trace["x"]), main.end * 1e6)
    small = gantt(bwd, max_ctas=100)
    shown = small["layout"]["meta"]["sms_shown"]
    assert 1 <= shown < bwd.gpu.sms
    kept = sum(len(t["y"]) for t in small["data"])
    assert kept <= 100 and all(max(t["y"], default=0) < shown for t in small["data"])


def test_limiter_bars_and_roofline(bwd):
    bars = limiter_bars(bwd)
    assert [t["name"] for t in bars["data"]] == list(LIMITERS)
    totals = np.sum([t["x"] for t in bars["data"]], axis=0)
    np.testing.assert_allclose(totals, 1.0)
    roof = roofline(bwd)
    line, point = roof["data"]
    assert max(line["y"]) == pytest.approx(bwd.floors.peak_flops / 1e12)
    assert point["y"][0] == pytest.approx(bwd.tflops_executed)
    json.dumps(roof, allow_nan=False)
