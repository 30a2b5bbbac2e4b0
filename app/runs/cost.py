"""What a live run will compute, estimated from its request before any work starts, and the
budgets of each backend it is held to (settings; a run beyond one is refused up front, 422).

A run does not always compute the problem its request names (app/runs/jobs.py, checks.py):

    trace, both   the check runs ONE head (batch 1, heads 1; decode: one K/V head and its group)
                  on the kernels, and the simulator's trace of that head beside it
    time          the whole problem, several calls over (GPU only: on the CPU timing is refused
    timeline      in the result and the kernels never run)
    warpgroups    the whole problem, plain and recorded (an H100 or H200 only)

The figures (`RunCost`):

    flops              FLOPs of one call of the kernels on what the run computes (the papers'
                       4·B·H·Nq·Nk·d, halved when causal, × 2.5 backward)
    device_bytes       its tensors: Q, K, V, O (+ dO, dQ, dK, dV and autograd's copies for the
                       backward: three times the forward's; a warpgroup run's recording buffer,
                       one region of stamps per program and warpgroup, RECORD_BYTES_PER_ROLE)
    interpreter_steps  tile steps the kernels take, one (query block, key block) pair each: what
                       Triton's interpreter pays for, about 10 ms a step on a laptop core whatever
                       the tile size (the forward: the visible tiles; the backward: its forward,
                       the dK/dV kernel and the dQ kernel, three passes over them; decode: every
                       key block of the cache plus one reduce step per split)
    trace_events       steps of the simulator's trace the check builds (held to the same limit as
                       GET /api/trace, FLASHSCOPE_MAX_TRACE_EVENTS)

Budgets: on the CPU, interpreter steps (FLASHSCOPE_RUNS_MAX_INTERPRETER_STEPS); on a GPU, FLOPs
per call (FLASHSCOPE_RUNS_MAX_GPU_TFLOP) and tensor memory (FLASHSCOPE_RUNS_MAX_GPU_MEMORY_MIB);
on both, the check's trace length. A refusal names the field that drives the figure: for the
interpreter the tile side split into more blocks, for the GPU the size field nearest its own
limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flashscope.app.config import Settings
from flashscope.app.middleware.errors import limit_error
from flashscope.simulator.core.problem import DTYPE_BYTES, AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import TileGrid, split_plan
from flashscope.simulator.teach.algorithms import ALGORITHMS
from flashscope.simulator.timing.kernelplan import useful_flops

ALGO = {"fwd": "fa2", "bwd": "fa2-bwd", "decode": "decode"}
BACKWARD_PASSES = 3  # forward (for the log-sum-exp), dK/dV kernel, dQ kernel
# A warpgroup run's stamps per (program, warpgroup): int64, 96 ring steps of 9 events, 4 tiles of
# 8 and a header of 6 (app/runs/jobs.py WARPGROUP_RECORDING, kernels/hopper_forward.py
# `record_size`; tests/app/test_runs_warpgroups.py holds the three to each other).
RECORD_BYTES_PER_ROLE = 8 * (96 * 9 + 4 * 8 + 6)
WARPGROUP_ROWS = 64  # query rows of one consumer warpgroup


@dataclass(frozen=True)
class RunCost:
    """What one run computes (see the module docstring)."""

    heads: int  # (batch, head) pairs the kernels run on
    flops: float
    device_bytes: int
    interpreter_steps: int
    trace_events: int


def _problem(r: Any, whole: bool) -> AttentionProblem:
    """The problem the run computes: the whole request's, or the one head a check runs."""
    if r.mode == "decode":  # one K/V head, its `heads` query heads packed as rows
        return AttentionProblem(
            r.seq, r.head_dim, r.seq_k, heads=r.heads, kv_heads=1, dtype=r.dtype
        )
    return AttentionProblem(
        seq_q=r.seq,
        head_dim=r.head_dim,
        seq_k=r.seq_k,
        batch=r.batch if whole else 1,
        heads=r.heads if whole else 1,
        kv_heads=r.kv_heads if whole else None,
        causal=r.causal,
        dtype=r.dtype,
    )


def run_cost(r: Any, backend: str) -> RunCost:
    """The cost of a RunRequest (app/schemas/trace.py) whose fields are valid, on `backend`."""
    checks = r.what in ("trace", "both")
    computes = r.what in ("time", "timeline", "warpgroups") or (
        r.what == "both" and backend == "cuda"
    )
    if backend != "cuda" and not checks:
        computes = False  # time on the CPU: refused in the result, nothing runs
    p = _problem(r, whole=computes)
    tiles = TileConfig(r.block_m, r.block_n, r.stages, r.warps)
    algo = ALGO[r.mode]
    grid = TileGrid(p, tiles)
    if r.mode == "decode":
        plan = split_plan(p, tiles, r.splits)
        steps = plan.n_kv + plan.used
        events = ALGORITHMS[algo].n_events(p, tiles, splits=r.splits)
    else:
        steps = grid.n_tiles * (BACKWARD_PASSES if r.mode == "bwd" else 1)
        events = ALGORITHMS[algo].n_events(p, tiles)
    q_side = p.batch * p.heads * p.seq_q * p.head_dim
    kv_side = p.batch * p.kv_heads * p.seq_k * p.head_dim
    tensors = 2 * (q_side + kv_side) * DTYPE_BYTES[p.dtype]
    if r.what == "warpgroups" and computes:  # a program per tile at most, and its stamps
        programs = p.batch * p.heads * -(-p.seq_q // (WARPGROUP_ROWS * r.consumers))
        tensors += programs * (r.consumers + 1) * RECORD_BYTES_PER_ROLE
    ran = computes or checks
    return RunCost(
        heads=p.batch * p.heads,
        flops=useful_flops("fa2" if r.mode == "decode" else algo, p) if ran else 0.0,
        device_bytes=(tensors * (BACKWARD_PASSES if r.mode == "bwd" else 1)) if ran else 0,
        interpreter_steps=steps if ran else 0,
        trace_events=events if checks else 0,
    )


def _nearest_limit(r: Any, s: Settings, seq_limit: int) -> str:
    """The size field nearest its own limit: the one to bring down first."""
    sizes = {
        "batch": r.batch / s.runs_max_batch,
        "heads": r.heads / s.runs_max_heads,
        "seq": r.seq / seq_limit,
        "seq_k": (r.seq_k or r.seq) / seq_limit,
    }
    return max(sizes, key=lambda k: sizes[k])


def _finer_side(r: Any) -> str:
    """The tile side split into more blocks (block_m on a tie)."""
    q_blocks = -(-r.seq // r.block_m)
    kv_blocks = -(-(r.seq_k or r.seq) // r.block_n)
    return "block_m" if q_blocks >= kv_blocks else "block_n"


def budget_errors(r: Any, s: Settings, backend: str, seq_limit: int) -> list[dict[str, Any]]:
    """422 entries for a run beyond a budget of this backend (empty when within them all);
    `seq_limit` is the request's own bound on seq here (for naming the field to bring down)."""
    cost = run_cost(r, backend)
    errs: list[dict[str, Any]] = []

    def over(field: str, msg: str, estimate: float, limit: float) -> None:
        err = limit_error(field, msg, getattr(r, field), limit, "body")
        err["ctx"]["estimate"] = estimate
        errs.append(err)

    if cost.trace_events > s.max_trace_events:
        msg = (
            f"the check builds the simulator's trace of {cost.trace_events} steps; the limit "
            f"is {s.max_trace_events}: use larger blocks or a smaller seq"
        )
        over(_finer_side(r), msg, cost.trace_events, s.max_trace_events)
    if backend != "cuda":
        steps, limit = cost.interpreter_steps, s.runs_max_interpreter_steps
        if steps > limit:
            msg = (
                f"this run's kernels take {steps} tile steps in Triton's interpreter (no GPU "
                f"here; about 10 ms each); the limit is {limit}: use larger block_m/block_n "
                "or a smaller seq"
            )
            over(_finer_side(r), msg, steps, limit)
        return errs
    tflop = cost.flops / 1e12
    if tflop > s.runs_max_gpu_tflop:
        field = _nearest_limit(r, s, seq_limit)
        msg = (
            f"one call of this run's kernels does {tflop:.3g} TFLOP (4·batch·heads·seq·seq_k·"
            f"head_dim); the limit is {s.runs_max_gpu_tflop:g}: use a smaller {field}"
        )
        over(field, msg, tflop, s.runs_max_gpu_tflop)
    mib = cost.device_bytes / 2**20
    if mib > s.runs_max_gpu_memory_mib:
        field = _nearest_limit(r, s, seq_limit)
        msg = (
            f"this run's tensors take {mib:,.0f} MiB of GPU memory; the limit is "
            f"{s.runs_max_gpu_memory_mib} MiB: use a smaller {field}"
        )
        over(field, msg, mib, s.runs_max_gpu_memory_mib)
    return errs
