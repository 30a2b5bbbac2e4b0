"""Build a tile trace: random inputs → tile program + numerics → lazily materialized events.

Memory policy (see simulator/teach/snapshots.py): a trace keeps at most `budget_bytes` of recorded
state. Forward and decode traces keep m, ℓ, α per row after every key block and the output
accumulator averaged over head-dim columns (the stride grows until it fits); the backward keeps
its fp32 P and dS (Nq × Nk each) and rebuilds partial sums on request. A trace whose state cannot
fit, or longer than `max_events`, is refused with ValueError before anything is computed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashscope.simulator.core.precision import round_to_dtype
from flashscope.simulator.core.problem import AttentionProblem, TileConfig, _check_int
from flashscope.simulator.core.tiling import TileGrid, split_plan
from flashscope.simulator.core.trace import PHASE_INDEX, Trace
from flashscope.simulator.teach import exactness, traffic
from flashscope.simulator.teach.algorithms import ALGORITHMS, get
from flashscope.simulator.teach.numerics import (
    attention_gradients,
    decode_forward,
    fa2_backward,
    flash_forward,
    naive_attention,
    naive_forward,
)
from flashscope.simulator.teach.onchip import onchip
from flashscope.simulator.teach.snapshots import (
    DEFAULT_BUDGET_BYTES,
    FLOAT_BYTES,
    fit_stride,
    shown_columns,
)
from flashscope.simulator.teach.trace_grid import out_writes, tile_steps
from flashscope.simulator.teach.trace_states import (
    backward_states,
    decode_states,
    forward_states,
    naive_states,
)

__all__ = ["ALGORITHMS", "build_trace", "random_inputs", "round_to_dtype"]

# Phases where a new tile (or a CTA's first or last op) begins: Shift+→ jumps between them.
MARK_PHASES = (
    "init",
    "load_q",
    "load_kv",
    "store",
    "preprocess_d",
    "load_kv_bwd",
    "load_q_bwd",
    "store_dkdv",
    "convert_dq",
    "store_partial",
    "reduce",
    "naive_softmax",
    "naive_pv",
)


def random_inputs(
    p: AttentionProblem, seed: int, *, q_rows: int | None = None, grad: bool = False
) -> tuple[np.ndarray, ...]:
    """Q (q_rows or seq_q, d), K and V (seq_k, d) for one head, standard normal, rounded to
    p.dtype; with `grad`, also the upstream gradient dO shaped like Q."""
    _check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    rows = p.seq_q if q_rows is None else q_rows
    shapes = [(rows, p.head_dim), (p.seq_k, p.head_dim), (p.seq_k, p.head_dim)]
    if grad:
        shapes.append((rows, p.head_dim))
    return tuple(round_to_dtype(rng.standard_normal(s), p.dtype) for s in shapes)


def _budget_error(need_bytes: int, budget_bytes: int) -> ValueError:
    return ValueError(
        f"the trace state needs {need_bytes / 2**20:.0f} MiB, over the budget of "
        f"{budget_bytes / 2**20:.0f} MiB: use larger blocks or a smaller problem"
    )


def build_trace(
    algo: str,
    problem: AttentionProblem,
    tiles: TileConfig,
    seed: int = 0,
    *,
    o_col_limit: int = 64,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    max_events: int | None = None,
    splits: int | None = None,
    sms: int = 132,
) -> Trace:
    """The stepper's trace of one (batch, head) — decode: one (batch, kv_head) — of `problem`
    on random data drawn from `seed`."""
    module = get(algo)
    kw: dict[str, Any] = {"splits": splits, "sms": sms} if algo == "decode" else {}
    n_events = module.n_events(problem, tiles, **kw)
    if max_events is not None and n_events > max_events:
        raise ValueError(f"the trace would have {n_events} events, over the limit {max_events}")
    grid = TileGrid(problem, tiles)
    nq, nk, d = problem.seq_q, problem.seq_k, problem.head_dim
    meta_grid: dict[str, Any] = {
        "q_blocks": grid.n_q,
        "kv_blocks": grid.n_kv,
        "order": module.ORDER,
        "kinds": grid.kinds().tolist(),
    }
    extras: dict[str, Any] = {}
    if algo in ("fa1", "fa2"):
        snapshots = grid.n_kv * nq
        stride = fit_stride(d, o_col_limit, snapshots, 3 * snapshots + 4 * nq * d, budget_bytes)
        q, k, v = random_inputs(problem, seed)
        rec = flash_forward(q, k, v, problem, tiles, algo=algo, col_stride=stride)
        ops = module.program(problem, tiles)
        state_of = forward_states(ops, grid, rec)
        extras = {"o": rec.o, "o_ref": naive_attention(q, k, v, problem.scale, problem.causal)}
    elif algo == "naive":
        need = (3 * nq * nk + 4 * nq * d) * FLOAT_BYTES  # S, exp(S), P and the tensors
        if need > budget_bytes:
            raise _budget_error(need, budget_bytes)
        stride = shown_columns(d, o_col_limit)
        q, k, v = random_inputs(problem, seed)
        nrec = naive_forward(q, k, v, problem, col_stride=stride)
        ops = module.program(problem, tiles)
        state_of = naive_states(ops, grid, nrec)
        extras = {"o": nrec.o, "o_ref": naive_attention(q, k, v, problem.scale, problem.causal)}
    elif algo == "fa2-bwd":
        need = (2 * nq * nk + 8 * (nq + nk) * d) * FLOAT_BYTES  # P, dS and the tensors
        if need > budget_bytes:
            raise _budget_error(need, budget_bytes)
        stride = shown_columns(d, o_col_limit)
        q, k, v, do = random_inputs(problem, seed, grad=True)
        brec = fa2_backward(q, k, v, do, problem, tiles)
        ops = module.program(problem, tiles)
        state_of = backward_states(ops, brec, o_col_limit, stride)
        ref = attention_gradients(q, k, v, do, problem.scale, problem.causal)
        extras = {"dq": brec.dq, "dk": brec.dk, "dv": brec.dv, "ref": ref, "recording": brec}
    else:
        plan = split_plan(problem, tiles, splits, sms)
        snapshots = plan.n_kv * plan.rows
        fixed = 3 * snapshots + (plan.used + 4) * plan.rows * d
        stride = fit_stride(d, o_col_limit, snapshots + plan.used * plan.rows, fixed, budget_bytes)
        q, k, v = random_inputs(problem, seed, q_rows=plan.rows)
        drec = decode_forward(q, k, v, problem, tiles, splits=splits, sms=sms, col_stride=stride)
        ops = module.program(problem, tiles, **kw)
        state_of = decode_states(ops, drec)
        extras = {"o": drec.o, "o_ref": naive_attention(q, k, v, problem.scale)}
        meta_grid.update(
            q_blocks=1,
            kinds=[[2] * plan.n_kv],
            rows=plan.rows,
            splits=plan.used,
            splits_requested=plan.requested,
            chunk=plan.chunk,
            sms=sms,
            split_table=_split_table(plan, drec, tiles.block_n, nk, sms),
        )
    if algo == "fa2-bwd":
        ref = extras["ref"]
        compared = [
            exactness.compare(name, extras[x], ref[x], problem.dtype)
            for name, x in (("dQ", "dq"), ("dK", "dk"), ("dV", "dv"))
        ]
    else:
        compared = [exactness.compare("O", extras["o"], extras["o_ref"], problem.dtype)]
    errs = [c["max_abs_err"] for c in compared]
    meta_grid.update(tile_steps(ops, meta_grid["q_blocks"], meta_grid["kv_blocks"]))
    meta_grid["out_writes"] = out_writes(ops, meta_grid["q_blocks"], algo)
    chip = onchip(algo, problem, tiles, ops, **kw)
    head = traffic.head_for_algo(algo, problem, tiles, **kw)
    naive = traffic.naive_head(problem, tiles)
    if algo == "decode":  # a decode trace covers the `group` query heads of one K/V head
        naive = naive.scaled(problem.group)
    meta = {
        "algo": algo,
        "title": module.TITLE,
        "pseudocode": list(module.PSEUDOCODE),
        "problem": {
            "seq_q": nq,
            "seq_k": nk,
            "head_dim": d,
            "causal": problem.causal,
            "dtype": problem.dtype,
            "scale": problem.scale,
            "group": problem.group,
        },
        "tiles": {"block_m": tiles.block_m, "block_n": tiles.block_n},
        "grid": meta_grid,
        "seed": seed,
        "max_abs_err": float(max(errs)),
        "exactness": exactness.report(problem.dtype, compared),
        "onchip_peak": chip.peak(),
        "traffic": {
            "algo": head.as_dict(problem.dtype_bytes),
            "naive": naive.as_dict(problem.dtype_bytes),
        },
        "col_stride": stride,
        "d_shown": -(-d // stride),
        "marks": np.flatnonzero(
            np.isin(ops.columns["phase"], [PHASE_INDEX[x] for x in MARK_PHASES])
        ).tolist(),
    }
    return Trace(meta=meta, ops=ops, state_of=state_of, extras=extras, onchip_of=chip.at)


def _split_table(plan, rec, block_n: int, seq_k: int, sms: int) -> list[dict[str, Any]]:
    """Per used split of Flash-Decoding: its key blocks and keys, the SM its CTA starts on (the
    block scheduler hands out CTAs breadth-first: CTA s → SM s mod sms), and its weight in the
    final output, e^(LSEₛ − LSE), as mean, min and max over the query rows."""
    weights = np.exp(rec.partial_lse - rec.lse[None, :])  # (S', R)
    out = []
    for s in range(plan.used):
        blocks = plan.blocks(s)
        out.append(
            {
                "split": s,
                "blocks": [blocks.start, blocks.stop],
                "keys": [blocks.start * block_n, min(blocks.stop * block_n, seq_k)],
                "sm": s % sms,
                "weight_mean": float(weights[s].mean()),
                "weight_min": float(weights[s].min()),
                "weight_max": float(weights[s].max()),
                "lse_mean": float(rec.partial_lse[s].mean()),
            }
        )
    return out
