"""Instrumented FlashAttention-2 forward: the per-tile state of a real kernel run, as a Trace.

It runs the forward kernel of kernels/forward.py compiled with TRACE on: the same source and
the same math, plus, for the programs of one chosen (batch, head), a store of m, ℓ, α and the
unnormalized accumulator Õ after every inner iteration into an fp32 side buffer shaped
(query blocks, key blocks, BLOCK_M, D_PAD + 3). Loop order is the forward's: one program per
query block, key blocks in order, causal tiles past the diagonal skipped. With TRACE off (every
other call) the stores are not compiled at all.

The host turns the buffer into a simulator Trace: the ops, phases, counters and metadata come from
the simulator's FA-2 tile program for the same problem, tiles and seed
(flashscope.simulator.teach.tracing.build_trace), and the `state` of every event is built by the
simulator's own state builder (flashscope.simulator.teach.trace_states.forward_states) from the
kernel's numbers. m is given in natural units (the kernel keeps it in the log2 domain). Key blocks a
query block skips keep its previous state with α = 1, as the simulator's numerics do.

Leaves out: backward and decode traces, and timing (events carry no cycles).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flashscope.kernels.config import KernelConfig
from flashscope.kernels.device import describe, device
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.inputs import check_attention, last_dim_contiguous
from flashscope.kernels.launch import cdiv, pad_dim
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import TileGrid
from flashscope.simulator.core.trace import Trace
from flashscope.simulator.teach import exactness
from flashscope.simulator.teach.numerics_forward import ForwardRecording
from flashscope.simulator.teach.snapshots import block_mean
from flashscope.simulator.teach.trace_states import forward_states
from flashscope.simulator.teach.tracing import build_trace, random_inputs

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass
class KernelRecording:
    """What the kernel stored for one (batch, head): arrays indexed [key block j, query row]."""

    m: np.ndarray  # (n_kv, N_q) running max, natural units
    l: np.ndarray  # (n_kv, N_q) running sum
    alpha: np.ndarray  # (n_kv, N_q) rescale factor of that iteration
    acc: np.ndarray  # (n_kv, N_q, d) unnormalized accumulator
    visited: np.ndarray  # (n_q_blocks, n_kv) bool: the kernel ran tile (i, j)
    o: np.ndarray  # (N_q, d) the kernel's output
    lse: np.ndarray  # (N_q,)


def trace_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    *,
    config: KernelConfig,
    batch: int = 0,
    head: int = 0,
) -> KernelRecording:
    """Run the TRACE kernel with `config` and return the state of (batch, head) per iteration."""
    shapes = check_attention(q, k, v, causal, sm_scale)
    if not (0 <= batch < shapes.batch and 0 <= head < shapes.heads):
        raise ValueError(f"(batch, head) must index q's first two dims, got ({batch}, {head})")
    q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
    n_q, n_k, d = shapes.seq_q, shapes.seq_k, shapes.head_dim
    bm, d_pad = config.block_m, pad_dim(d)
    n_qb, n_kv = cdiv(n_q, bm), cdiv(n_k, config.block_n)
    buf = torch.full((n_qb, n_kv, bm, d_pad + 3), float("nan"), device=q.device)
    o, lse = launch_forward(
        q, k, v, causal, shapes.scale, config, trace=(batch * shapes.heads + head, buf)
    )
    raw = buf.cpu().numpy()  # (n_qb, n_kv, BM, D_PAD + 3)
    visited = ~np.isnan(raw[:, :, 0, d_pad + 1])
    _fill_skipped(raw, visited, d_pad)
    rows = np.transpose(raw, (1, 0, 2, 3)).reshape(n_kv, n_qb * bm, d_pad + 3)[:, :n_q]
    return KernelRecording(
        m=rows[..., d_pad],
        l=rows[..., d_pad + 1],
        alpha=rows[..., d_pad + 2],
        acc=rows[..., :d],
        visited=visited,
        o=o[batch, head].float().cpu().numpy(),
        lse=lse[batch, head].cpu().numpy(),
    )


def _fill_skipped(raw: np.ndarray, visited: np.ndarray, d_pad: int) -> None:
    """A skipped tile leaves the state as it was (α = 1); before any tile it is the initial one."""
    n_qb, n_kv = visited.shape
    for i in range(n_qb):
        for j in range(n_kv):
            if visited[i, j]:
                continue
            if j == 0:
                raw[i, j] = 0.0
                raw[i, j, :, d_pad] = -np.inf
            else:
                raw[i, j] = raw[i, j - 1]
            raw[i, j, :, d_pad + 2] = 1.0


def measured_trace(
    problem: AttentionProblem,
    tiles: TileConfig,
    seed: int = 0,
    *,
    o_col_limit: int = 64,
) -> Trace:
    """The FA-2 trace of one head of `problem`, its state measured by the kernel.

    Inputs are the simulator's own for `seed` (flashscope.simulator.teach.tracing.random_inputs), so
    the simulated trace of the same arguments is directly comparable event by event.
    """
    simulated = build_trace("fa2", problem, tiles, seed, o_col_limit=o_col_limit)
    q, k, v = (
        torch.from_numpy(np.ascontiguousarray(x))
        .to(device=device(), dtype=TORCH_DTYPES[problem.dtype])
        .view(1, 1, *x.shape)
        for x in random_inputs(problem, seed)
    )
    config = KernelConfig(tiles.block_m, tiles.block_n, tiles.warps, tiles.stages)
    rec = trace_forward(q, k, v, problem.causal, problem.scale, config=config)
    stride = int(simulated.meta["col_stride"])
    as_simulated = ForwardRecording(
        m=rec.m,
        l=rec.l,
        alpha=rec.alpha,
        acc=block_mean(rec.acc, stride),
        o=rec.o,
        lse=rec.lse,
        col_stride=stride,
    )
    state_of = forward_states(simulated.ops, TileGrid(problem, tiles), as_simulated)
    meta = dict(simulated.meta)
    meta["source"] = "measured"
    meta["device"] = describe()
    meta["kernel"] = {"config": config.as_list(), "file": "kernels/forward.py"}
    o_ref = simulated.extras["o_ref"]
    meta["max_abs_err"] = float(np.max(np.abs(rec.o - o_ref), initial=0.0))
    meta["exactness"] = exactness.report(
        problem.dtype, [exactness.compare("O", rec.o, o_ref, problem.dtype)]
    )
    extras = {"o": rec.o, "o_ref": o_ref, "lse": rec.lse, "recording": rec, "simulated": simulated}
    # What sits on chip is a property of the tile program, the same for both sources.
    return Trace(
        meta=meta,
        ops=simulated.ops,
        state_of=state_of,
        extras=extras,
        onchip_of=simulated.onchip_of,
    )
