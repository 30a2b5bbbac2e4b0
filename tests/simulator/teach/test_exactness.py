"""Exactness in trace metadata: a result stored in a dtype is never closer to exact than the
exact answer rounded to it, and a sound kernel stays within a few times that floor."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.exactness import UNIT_ROUNDOFF, compare
from flashscope.simulator.teach.tracing import build_trace

# Multiples of u · max |ref|, the ceiling of the rounding floor. Not of the floor itself: that is
# the largest rounding error over the elements, which falls to a fifth of u · max |ref| when few
# elements sit in the top binade (decode: 48 of them), so a multiple of it fails on such draws
# (seed 882137973, decode fp16: error 4.1 floors, 1.1 u · max |ref|).
# Observed worst over 3000 draws each: 1.25, 1.33, 3.1.
BOUND = {"fa2": 4.0, "decode": 4.0, "fa2-bwd": 8.0}


@pytest.mark.parametrize("algo", ["fa2", "fa1", "fa2-bwd", "decode"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_error_sits_between_the_rounding_floor_and_a_small_multiple(algo, dtype):
    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    nq = int(rng.integers(1, 4)) if algo == "decode" else int(rng.integers(17, 97))
    kw = {"heads": 2} if algo == "decode" else {"causal": bool(rng.integers(2))}
    p = AttentionProblem(seq_q=nq, seq_k=int(rng.integers(17, 200)), head_dim=24, dtype=dtype, **kw)
    t = TileConfig(16, 32)
    ex = build_trace(algo, p, t, seed).meta["exactness"]
    assert ex["dtype"] == dtype and ex["unit_roundoff"] == UNIT_ROUNDOFF[dtype]
    for out in ex["outputs"]:
        floor, err = out["rounding_floor"], out["max_abs_err"]
        assert 0 < floor <= err, f"seed={seed} {out}"
        ceiling = out["max_abs_ref"] * UNIT_ROUNDOFF[dtype]
        assert floor <= ceiling * 1.0001, f"seed={seed}"
        limit = BOUND.get(algo, 4.0 * (t.kv_blocks(p) + 1))  # FA-1 rounds O after every tile
        assert err <= limit * ceiling, f"seed={seed} {out}"


def test_fp32_floor_is_zero_and_compare_measures_the_largest_gap():
    got = np.array([[1.0, 2.0], [3.0, 4.5]])
    ref = np.array([[1.0, 2.0], [3.0, 4.0]])
    out = compare("X", got, ref, "fp32")
    assert out == {"name": "X", "max_abs_err": 0.5, "rounding_floor": 0.0, "max_abs_ref": 4.0}
    third = compare("Y", np.zeros(1), np.array([1 / 3]), "bf16")
    assert third["rounding_floor"] == pytest.approx(abs(0.333984375 - 1 / 3))
