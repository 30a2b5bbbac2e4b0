"""The instrumented forward: its trace ends at the kernel's output and matches the simulator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashscope.kernels import KernelConfig
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.instrumented import measured_trace, trace_forward
from flashscope.kernels.timeline import forward_timeline
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.snapshots import block_mean
from flashscope.simulator.teach.tracing import build_trace, random_inputs

from .conftest import rand


@pytest.mark.parametrize(
    ("n", "n_k", "d", "dtype", "causal", "tiles"),
    [
        (97, 97, 80, "fp32", False, TileConfig(32, 16)),
        (50, 50, 64, "fp16", False, TileConfig(16, 32)),
        (1, 1, 16, "fp32", False, TileConfig(16, 16)),
        (90, 60, 32, "fp32", True, TileConfig(32, 16)),
        (70, 100, 48, "bf16", True, TileConfig(16, 32)),
    ],
)
def test_trace_matches_simulator_and_kernel(
    seed: int, n: int, n_k: int, d: int, dtype: str, causal: bool, tiles: TileConfig
) -> None:
    problem = AttentionProblem(seq_q=n, seq_k=n_k, head_dim=d, dtype=dtype, causal=causal)
    measured = measured_trace(problem, tiles, seed)
    simulated = build_trace("fa2", problem, tiles, seed)
    assert len(measured) == len(simulated), f"seed={seed}"
    tol = 1e-4 if dtype == "fp32" else 3e-2
    # In half precision both sides round each probability to the input dtype before P·V; a
    # probability near a rounding midpoint may go either way, one unit in the last place
    # (2^-7 relative for bf16, 2^-10 for fp16) apart. So the accumulator may differ by up to
    # ulp · sum_j p_j |v_j| <= ulp · l · max|v| per row, and the normalised output by ulp · max|v|;
    # cancellation in the sum makes that larger than any relative tolerance on o itself.
    ulp = {"fp32": 0.0, "fp16": 2.0**-10, "bf16": 2.0**-7}[dtype]
    v_max = float(np.abs(random_inputs(problem, seed)[2]).max())
    for i in range(len(measured)):
        a, b = measured.event(i), simulated.event(i)
        assert {k: v for k, v in a.items() if k != "state"} == {
            k: v for k, v in b.items() if k != "state"
        }
        l_rows = np.nan_to_num(np.array(b["state"]["l"], dtype=float))[:, None]
        flips = {"o": ulp * v_max * l_rows, "o_hat": ulp * v_max}
        for key in ("m", "l", "alpha", "o", "o_hat"):
            x = np.array(a["state"][key], dtype=float)
            y = np.array(b["state"][key], dtype=float)
            atol = tol + flips.get(key, 0.0)
            assert np.allclose(x, y, atol=atol, rtol=tol, equal_nan=True), (
                f"event {i} {a['phase']} state {key}: {x} vs {y}, seed={seed}"
            )
    # the final state of every query block is the kernel's own output
    o = measured.extras["o"]
    for i in range(len(measured)):
        ev = measured.event(i)
        if ev["state"]["final"]:
            r0, r1 = ev["state"]["rows"]
            o_hat = np.array(ev["state"]["o_hat"], dtype=float)
            shown = block_mean(o[r0:r1], ev["state"]["col_stride"])  # as the trace shows d
            assert np.allclose(o_hat, shown, atol=1e-2), f"seed={seed}"


def test_recording_final_state_is_kernel_output(seed: int) -> None:
    q, k, v = rand(2, 3, 70, 32), rand(2, 3, 90, 32), rand(2, 3, 90, 32)
    config = KernelConfig(32, 32, 4, 1)
    rec = trace_forward(q, k, v, True, config=config, batch=1, head=2)
    o, lse = launch_forward(q, k, v, True, 32**-0.5, config)
    last = rec.l[-1]
    final = rec.acc[-1] / last[:, None]
    assert np.allclose(final, o[1, 2].float().cpu().numpy(), atol=2e-3), f"seed={seed}"
    assert np.allclose(rec.lse, lse[1, 2].cpu().numpy()), f"seed={seed}"
    assert rec.visited.any() and not rec.visited.all(), "causal must skip tiles past the diagonal"
    assert not np.isnan(rec.m).any() and np.all(rec.alpha[~np.isnan(rec.alpha)] <= 1.0 + 1e-6)


def test_trace_rejects_a_missing_program() -> None:
    q = rand(1, 1, 16, 16)
    with pytest.raises(ValueError, match="batch, head"):
        trace_forward(q, q, q, config=KernelConfig(16, 16, 4, 1), head=3)


def test_untraced_kernel_has_no_side_buffer_stores() -> None:
    """TRACE is compile-time: the untraced kernel's source paths never touch the buffer."""
    q = rand(1, 1, 32, 16, dtype=torch.float32)
    buf = torch.full((2, 2, 16, 19), float("nan"))
    launch_forward(q, q, q, False, 0.25, KernelConfig(16, 16, 4, 1), trace=(5, buf))
    assert torch.isnan(buf).all(), "a program outside the chosen one wrote to the trace buffer"


def test_timeline_needs_a_gpu() -> None:
    q = rand(1, 1, 16, 16)
    with pytest.raises(ValueError, match="CUDA GPU"):
        forward_timeline(q, q, q, config=KernelConfig(16, 16, 4, 1))
