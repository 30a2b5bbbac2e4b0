"""Build a tile trace: random inputs → tile program + numerics → lazily materialized events."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import traffic
from .algorithms import fa2
from .numerics import fa2_forward, naive_attention
from .problem import AttentionProblem, TileConfig
from .trace import PHASES, Trace, json_floats

ALGORITHMS = {fa2.NAME: fa2}


def random_inputs(p: AttentionProblem, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q (seq_q, d), K and V (seq_k, d) for one head, standard normal, rounded to p.dtype."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((p.seq_q, p.head_dim))
    k = rng.standard_normal((p.seq_k, p.head_dim))
    v = rng.standard_normal((p.seq_k, p.head_dim))
    return tuple(round_to_dtype(x, p.dtype) for x in (q, k, v))  # type: ignore[return-value]


def round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float values to what `dtype` can hold, returned as float32."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        bits = x.view(np.uint32)
        rounded = bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)  # round to nearest even
        return (rounded & np.uint32(0xFFFF0000)).view(np.float32)
    return x


def build_trace(
    algo: str,
    problem: AttentionProblem,
    tiles: TileConfig,
    seed: int = 0,
    *,
    o_col_limit: int = 64,
) -> Trace:
    """The stepper's trace for one (batch, head) of `problem` on random data drawn from `seed`."""
    if algo not in ALGORITHMS:
        raise ValueError(f"algo must be one of {sorted(ALGORITHMS)}, got {algo!r}")
    module = ALGORITHMS[algo]
    q, k, v = random_inputs(problem, seed)
    ops = module.program(problem, tiles)
    rec = fa2_forward(q, k, v, tiles.block_n, problem.scale, o_col_limit=o_col_limit)
    o_ref = naive_attention(q, k, v, problem.scale)
    max_err = float(np.max(np.abs(rec.o - o_ref)))

    n_q_blocks = tiles.q_blocks(problem)
    d_shown = rec.acc.shape[-1]
    snap = ops.columns["snapshot"]
    phase_col = ops.columns["phase"]
    is_store = phase_col == PHASES.index("store")
    # The softmax op has updated m, l and α but not yet the accumulator.
    acc_lags = phase_col == PHASES.index("softmax")
    q_block_col = ops.columns["q_block"]

    def state_of(i: int) -> dict[str, Any]:
        qb = int(q_block_col[i])
        r0 = qb * tiles.block_m
        r1 = min(r0 + tiles.block_m, problem.seq_q)
        s = int(snap[i])
        if s < 0:
            m = np.full(r1 - r0, -np.inf)
            l = np.zeros(r1 - r0)
            alpha = None
            acc = np.zeros((r1 - r0, d_shown))
        else:
            m = rec.m[s, r0:r1]
            l = rec.l[s, r0:r1]
            alpha = rec.alpha[s, r0:r1]
            if not acc_lags[i]:
                acc = rec.acc[s, r0:r1]
            elif s > 0:
                acc = rec.acc[s - 1, r0:r1]
            else:
                acc = np.zeros((r1 - r0, d_shown))
        with np.errstate(divide="ignore", invalid="ignore"):
            o_hat = np.where(l[:, None] > 0, acc / np.maximum(l[:, None], 1e-30), 0.0)
        return {
            "rows": [r0, r1],
            "m": json_floats(m),
            "l": json_floats(l),
            "alpha": json_floats(alpha),
            "o": json_floats(acc, 5),
            "o_hat": json_floats(o_hat, 5),
            "col_stride": rec.col_stride,
            "final": bool(is_store[i]),
        }

    flash = module_traffic(algo, problem, tiles)
    naive = traffic.naive_head(problem)
    meta = {
        "algo": algo,
        "title": module.TITLE,
        "pseudocode": list(module.PSEUDOCODE),
        "problem": {
            "seq_q": problem.seq_q,
            "seq_k": problem.seq_k,
            "head_dim": problem.head_dim,
            "causal": problem.causal,
            "dtype": problem.dtype,
            "scale": problem.scale,
        },
        "tiles": {"block_m": tiles.block_m, "block_n": tiles.block_n},
        "grid": {"q_blocks": n_q_blocks, "kv_blocks": tiles.kv_blocks(problem)},
        "seed": seed,
        "max_abs_err": max_err,
        "traffic": {
            "flash": flash.as_dict(problem.dtype_bytes),
            "naive": naive.as_dict(problem.dtype_bytes),
        },
        "d_shown": d_shown,
        # Steps where a new tile (or a CTA's first or last op) begins: Shift+→ jumps between them.
        "marks": np.flatnonzero(
            np.isin(phase_col, [PHASES.index(x) for x in ("load_q", "load_kv", "store")])
        ).tolist(),
    }
    return Trace(meta=meta, ops=ops, state_of=state_of, extras={"o": rec.o, "o_ref": o_ref})


def module_traffic(algo: str, p: AttentionProblem, t: TileConfig) -> traffic.Traffic:
    if algo == "fa2":
        return traffic.fa2_head(p, t)
    raise ValueError(f"no closed form for {algo!r}")
