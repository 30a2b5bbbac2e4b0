"""The engine's shortcuts give the figures of the long way round, bit for bit.

Stream ids are ranked without a sort, a reordered launch keeps its one-value columns as they
are, and the compulsory hit rates come without a pass of the L2 model: each is held here to the
way it replaces, on flashscope's kernels and the convention's launches, causal or not, grouped
K/V heads and ragged lengths included.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashscope.simulator.core.hardware import from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import kernelplan
from flashscope.simulator.timing.l2model import _loop_hit, compulsory_hits, split_traffic
from flashscope.simulator.timing.launch import stream_groups
from flashscope.simulator.timing.workload import build

GPU = from_name("h100-sxm")

PROBLEMS = [
    AttentionProblem(seq_q=1000, head_dim=64, batch=2, heads=8, kv_heads=2, causal=True),
    AttentionProblem(seq_q=777, seq_k=1500, head_dim=96, batch=3, heads=4, dtype="bf16"),
    AttentionProblem(seq_q=2048, head_dim=128, batch=1, heads=6, kv_heads=3, causal=True),
]
KERNELS = [("fa2", None), ("fa2-bwd", "separate"), ("fa2-bwd", "atomic")]


def _launches():
    for p in PROBLEMS:
        t = TileConfig(64, 32, 2, 4)
        for algo, route in KERNELS:
            yield from kernelplan.build(algo, p, t, gpu_key=GPU.key, route=route).launches
        for algo in ("fa2", "fa2-bwd", "fa1", "naive"):
            yield from build(algo, p, TileConfig(32, 64, 3, 8), sms=GPU.sms).launches


LAUNCHES = list(_launches())


@pytest.mark.parametrize("w", LAUNCHES, ids=lambda w: w.name)
def test_compulsory_hits_are_the_l2_models_with_room_for_everything(w):
    n = w.n_ctas
    zeros = np.zeros(n)
    ideal = split_traffic(w, zeros, zeros, zeros, math.inf, 2.0)
    np.testing.assert_array_equal(compulsory_hits(w), _loop_hit(w, ideal.dram_read))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-1, 300), min_size=1, max_size=500))
def test_stream_groups_rank_ids_as_a_sort_would(ids):
    stream = np.array(ids, dtype=np.int64)
    inv, k = stream_groups(stream)
    _, want = np.unique(stream, return_inverse=True)
    np.testing.assert_array_equal(inv, want)
    assert k == len(np.unique(stream))


@pytest.mark.parametrize("w", LAUNCHES[:6], ids=lambda w: w.name)
def test_reordering_keeps_one_value_columns_as_they_are(w):
    order = np.random.default_rng().permutation(w.n_ctas)[: max(1, w.n_ctas // 2)]
    got = w.reordered(order).arrays()
    for name, col in w.arrays().items():
        np.testing.assert_array_equal(got[name], col[order], err_msg=name)
