"""The output estimate Õ / ℓ of forward and decode states moves when P·V lands, not before."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.tracing import build_trace


@pytest.mark.parametrize("algo", ["fa2", "fa1", "decode"])
def test_softmax_keeps_the_previous_estimate_and_pv_updates_it(algo):
    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    nq = 2 if algo == "decode" else int(rng.integers(17, 80))
    kw = {"heads": 2} if algo == "decode" else {"causal": bool(rng.integers(2))}
    p = AttentionProblem(seq_q=nq, seq_k=int(rng.integers(40, 130)), head_dim=8, dtype="fp32", **kw)
    trace = build_trace(algo, p, TileConfig(16, 16), seed)
    checked = 0
    for i in range(1, len(trace)):
        ev = trace.event(i)
        if ev["phase"] != "softmax":
            continue
        before, after = trace.event(i - 1)["state"], trace.event(i + 1)["state"]
        assert trace.event(i - 1)["phase"] == "qk"
        assert ev["state"]["o_hat"] == before["o_hat"], f"seed={seed} step {i}"
        if algo != "fa1":  # FA-2 / decode: the estimate after P·V is Õ / ℓ of that same step
            o, l = np.array(after["o"]), np.array(after["l"])
            want = np.where(l[:, None] > 0, o / np.where(l > 0, l, 1)[:, None], 0)
            np.testing.assert_allclose(after["o_hat"], want, atol=2e-5, err_msg=f"seed={seed}")
        checked += 1
    assert checked > 0
