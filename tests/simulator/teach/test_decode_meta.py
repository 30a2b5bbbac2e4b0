"""Flash-Decoding trace metadata: the split table and the merge weights against float64."""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import split_plan
from flashscope.simulator.teach.oracle import attention_probs
from flashscope.simulator.teach.tracing import build_trace, random_inputs


def test_split_weights_are_each_splits_share_of_the_softmax_mass():
    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    group, nq, nk = int(rng.choice([1, 2, 4])), int(rng.integers(1, 4)), int(rng.integers(50, 700))
    p = AttentionProblem(seq_q=nq, seq_k=nk, head_dim=16, heads=group, kv_heads=1, dtype="fp32")
    t = TileConfig(16, int(rng.choice([16, 32])))
    splits = int(rng.integers(1, 9))
    trace = build_trace("decode", p, t, seed, splits=splits, sms=5)
    g = trace.meta["grid"]
    table = g["split_table"]
    plan = split_plan(p, t, splits, 5)
    assert len(table) == g["splits"] == plan.used, f"seed={seed}"
    assert table[0]["keys"][0] == 0 and table[-1]["keys"][1] == nk
    assert all(a["keys"][1] == b["keys"][0] for a, b in pairwise(table))
    assert [s["sm"] for s in table] == [s % 5 for s in range(plan.used)]
    # Float64 oracle: the share of each split's keys in every row's softmax.
    q, k, _ = random_inputs(p, seed, q_rows=plan.rows)
    probs, _ = attention_probs(q, k, p.scale)  # (R, Nk)
    for s in table:
        share = probs[:, s["keys"][0] : s["keys"][1]].sum(axis=1)
        assert abs(share.mean() - s["weight_mean"]) < 1e-5, f"seed={seed} split {s['split']}"
        assert abs(share.min() - s["weight_min"]) < 1e-5
        assert abs(share.max() - s["weight_max"]) < 1e-5
    assert abs(sum(s["weight_mean"] for s in table) - 1) < 1e-5


def test_reduce_steps_carry_the_weight_of_the_split_being_merged():
    p = AttentionProblem(seq_q=1, seq_k=333, head_dim=8, heads=3, kv_heads=1, dtype="fp32")
    trace = build_trace("decode", p, TileConfig(16, 16), 3, splits=4)
    reduce = [trace.event(i) for i in range(len(trace)) if trace.event(i)["phase"] == "reduce"]
    assert [ev["state"]["split"] for ev in reduce] == [0, 1, 2, 3]
    assert reduce[0]["state"]["weight"] == [1.0, 1.0, 1.0]  # the first split is all there is
    for ev in reduce:
        st = ev["state"]
        want = np.exp(np.array(st["partial_lse"]) - np.array(st["lse"]))
        np.testing.assert_allclose(st["weight"], want, rtol=1e-5)
        assert all(0 < w <= 1 for w in st["weight"])
