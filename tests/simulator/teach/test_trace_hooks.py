"""simulator/teach/algorithms/hook.py: every algorithm's trace hook, and build_trace built on it
whatever the algorithm."""

from __future__ import annotations

import inspect
import random

import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach import tracing, traffic
from flashscope.simulator.teach.algorithms import ALGORITHMS, get
from flashscope.simulator.teach.algorithms.hook import TraceRequest, random_inputs


def test_every_algorithm_has_the_same_trace_hook():
    hooks = {name: inspect.signature(m.trace_parts) for name, m in ALGORITHMS.items()}
    assert len(set(map(str, hooks.values()))) == 1, hooks
    assert tracing.random_inputs is random_inputs  # still importable where it was


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_a_hooks_parts_agree_with_its_program_and_counts(algo):
    rng = random.Random()
    causal = algo != "decode" and rng.random() < 0.5
    nq = 2 if algo == "decode" else rng.randint(20, 70)
    p = AttentionProblem(seq_q=nq, seq_k=rng.randint(20, 90), head_dim=rng.choice((8, 12)),
                         heads=2, kv_heads=1, causal=causal, dtype="fp32")  # fmt: skip
    t = TileConfig(block_m=16, block_n=16)
    splits = rng.randint(1, 4)
    module = get(algo)
    parts = module.trace_parts(TraceRequest(p, t, seed=rng.randint(0, 99), splits=splits))
    assert len(parts.ops) == module.n_events(p, t, splits=splits)
    assert parts.onchip.smem_bytes.shape == (len(parts.ops),)
    assert parts.traffic == traffic.head_for_algo(algo, p, t, splits=splits)
    assert parts.heads == (p.group if algo == "decode" else 1)
    names = [c["name"] for c in parts.compared]
    assert names == (["dQ", "dK", "dV"] if algo == "fa2-bwd" else ["O"])
    assert all(c["max_abs_err"] < 1e-4 for c in parts.compared), parts.compared
    state = parts.state_of(len(parts.ops) - 1)
    assert state["final"] and state["col_stride"] == parts.col_stride


def test_a_hook_checks_the_budget_before_it_draws_inputs():
    p = AttentionProblem(seq_q=512, head_dim=64, dtype="fp32")
    request = TraceRequest(p, TileConfig(64, 64), seed=-1, budget_bytes=2**20)
    for algo in ("naive", "fa2-bwd"):  # a negative seed would be refused by the draw
        with pytest.raises(ValueError, match="over the budget of 1 MiB"):
            get(algo).trace_parts(request)
