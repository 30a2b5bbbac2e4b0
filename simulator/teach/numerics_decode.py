"""Flash-Decoding on real numbers: split the KV cache, attend per split, merge the partials.

One (batch, kv_head): the `group` query heads that share the K/V head are packed as R = group ·
seq_q rows of one CTA per split. Each split runs the FA-2 recurrence over its key blocks and
writes a partial output Oₛ = Õₛ / ℓₛ and its log-sum-exp LSEₛ = mₛ + log ℓₛ in fp32. The reduce
kernel merges the splits one after another, online-softmax style:

    LSE ← log(e^LSE + e^LSEₛ);   O ← e^(LSE_old − LSE)·O + e^(LSEₛ − LSE)·Oₛ

which equals softmax over all keys at once. The final O is written in the dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashscope.simulator.core.precision import round_to_dtype
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import SplitPlan, split_plan
from flashscope.simulator.teach.numerics_forward import NEG_INF, finite_or_zero
from flashscope.simulator.teach.snapshots import block_mean, shown_columns


@dataclass
class DecodeRecording:
    """Per key block state of the split that owns it, the partials and the running merge."""

    plan: SplitPlan
    m: np.ndarray  # (n_kv, R) after key block j, within its split
    l: np.ndarray  # (n_kv, R)
    alpha: np.ndarray  # (n_kv, R)
    acc: np.ndarray  # (n_kv, R, d_shown) unnormalized accumulator of the split
    partial_o: np.ndarray  # (S', R, d) fp32, as written to the accumulator buffer
    partial_lse: np.ndarray  # (S', R)
    merged_lse: np.ndarray  # (S', R) after merging splits 0 … s
    merged_o: np.ndarray  # (S', R, d_shown)
    o: np.ndarray  # (R, d) final, in the dtype
    lse: np.ndarray  # (R,)
    col_stride: int


def decode_forward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    problem: AttentionProblem,
    tiles: TileConfig,
    *,
    splits: int | None = None,
    sms: int = 132,
    o_col_limit: int = 64,
    col_stride: int | None = None,
) -> DecodeRecording:
    """q: (R, d) packed query rows (head-major: all seq_q rows of head 0, then head 1, …);
    k, v: (Nk, d) of the shared K/V head; all already rounded to problem.dtype."""
    plan = split_plan(problem, tiles, splits, sms)
    q, k, v = (np.asarray(x, dtype=np.float32) for x in (q, k, v))
    n_rows, d = q.shape
    if n_rows != plan.rows:
        raise ValueError(f"q must have group·seq_q = {plan.rows} rows, got {n_rows}")
    bn, dtype, scale = tiles.block_n, problem.dtype, np.float32(problem.scale)
    stride = col_stride or shown_columns(d, o_col_limit)
    d_shown = -(-d // stride)
    n_kv, n_split = plan.n_kv, plan.used
    ms, ls, alphas = (np.empty((n_kv, n_rows), np.float32) for _ in range(3))
    accs = np.empty((n_kv, n_rows, d_shown), np.float32)
    part_o = np.empty((n_split, n_rows, d), np.float32)
    part_lse = np.empty((n_split, n_rows), np.float32)
    for s in range(n_split):
        m = np.full(n_rows, NEG_INF)
        l = np.zeros(n_rows, np.float32)
        acc = np.zeros((n_rows, d), np.float32)
        for j in plan.blocks(s):
            kj, vj = k[j * bn : (j + 1) * bn], v[j * bn : (j + 1) * bn]  # (c, d)
            sc = (q @ kj.T) * scale  # (R, c)
            m_new = np.maximum(m, sc.max(axis=1))
            a = np.exp(m - m_new)  # no mask here: m_new is finite
            p = np.exp(sc - m_new[:, None])
            l = a * l + p.sum(axis=1)
            acc = a[:, None] * acc + round_to_dtype(p, dtype) @ vj
            m = m_new
            ms[j], ls[j], alphas[j] = m, l, a
            accs[j] = block_mean(acc, stride)
        part_o[s] = acc / l[:, None]
        part_lse[s] = m + np.log(l)
    merged_lse = np.empty((n_split, n_rows), np.float32)
    merged_o = np.empty((n_split, n_rows, d_shown), np.float32)
    lse = np.full(n_rows, NEG_INF)
    o = np.zeros((n_rows, d), np.float32)
    for s in range(n_split):
        top = np.maximum(lse, part_lse[s])
        sub = finite_or_zero(top)
        new = sub + np.log(np.exp(lse - sub) + np.exp(part_lse[s] - sub))
        o = np.exp(lse - new)[:, None] * o + np.exp(part_lse[s] - new)[:, None] * part_o[s]
        lse = new
        merged_lse[s], merged_o[s] = lse, block_mean(o, stride)
    return DecodeRecording(
        plan=plan,
        m=ms,
        l=ls,
        alpha=alphas,
        acc=accs,
        partial_o=part_o,
        partial_lse=part_lse,
        merged_lse=merged_lse,
        merged_o=merged_o,
        o=round_to_dtype(o, dtype),
        lse=lse,
        col_stride=stride,
    )
