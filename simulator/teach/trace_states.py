"""Event states of a trace: from a tile program's ops and its numerics recording to JSON dicts.

One builder per algorithm family returns `state_of(i)`, called lazily for the events a client
asks for. Keys follow simulator/core/trace.py; everything is JSON-ready (−∞ as null).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from flashscope.simulator.core.tiling import TileGrid
from flashscope.simulator.core.trace import PHASE_INDEX, OpTable, json_floats
from flashscope.simulator.teach.exactness import UNIT_ROUNDOFF
from flashscope.simulator.teach.numerics_backward import BackwardRecording
from flashscope.simulator.teach.numerics_decode import DecodeRecording
from flashscope.simulator.teach.numerics_forward import (
    ForwardRecording,
    NaiveRecording,
    tile_numbers,
)
from flashscope.simulator.teach.snapshots import block_mean, masked_tile_view, tile_view

StateFn = Callable[[int], dict[str, Any]]


def _o_hat(acc: np.ndarray, l: np.ndarray) -> np.ndarray:
    safe = np.where(l > 0, l, 1.0)[:, None]
    return np.where(l[:, None] > 0, acc / safe, 0.0)


def _phase_is(ops: OpTable, *names: str) -> np.ndarray:
    return np.isin(ops.columns["phase"], [PHASE_INDEX[n] for n in names])


def forward_states(
    ops: OpTable, grid: TileGrid, rec: ForwardRecording, *, tile_limit: int = 64
) -> StateFn:
    """FA-1 and FA-2: the rows of the event's query block after its snapshot.

    The softmax op has already updated m, ℓ and α but not the accumulator, which it shows as it
    was after the previous key block. Where the recording holds the inputs and errors (the
    simulator's own; not a kernel's), tile ops add the tile itself (`tile_state`) and every op
    of a query block its distance to the exact output (`error_state`).
    """
    snap, qcol, kcol = ops.columns["snapshot"], ops.columns["q_block"], ops.columns["kv_block"]
    acc_lags = _phase_is(ops, "softmax")
    is_store = _phase_is(ops, "store")
    shows_s = _phase_is(ops, "qk", "softmax", "pv", "store")
    shows_p = _phase_is(ops, "softmax", "pv", "store")
    is_pv = _phase_is(ops, "pv")
    bm, nq = grid.tiles.block_m, grid.problem.seq_q
    d_shown = rec.acc.shape[-1]
    last_seen = grid.visible - 1  # snapshot of a query block's last visible tile

    def state_of(i: int) -> dict[str, Any]:
        qb = int(qcol[i])
        base: dict[str, Any] = {"col_stride": rec.col_stride, "final": False}
        if qb < 0:
            return base
        r0, r1 = qb * bm, min((qb + 1) * bm, nq)
        s = int(snap[i])
        zeros = np.zeros((r1 - r0, d_shown))
        if s < 0:
            m, l, alpha, acc = np.full(r1 - r0, -np.inf), np.zeros(r1 - r0), None, zeros
            l_acc = l
        else:
            m, l, alpha = rec.m[s, r0:r1], rec.l[s, r0:r1], rec.alpha[s, r0:r1]
            if not acc_lags[i]:
                acc, l_acc = rec.acc[s, r0:r1], l
            elif s > 0:
                acc, l_acc = rec.acc[s - 1, r0:r1], rec.l[s - 1, r0:r1]
            else:
                acc, l_acc = zeros, np.zeros(r1 - r0)
        # The estimate Õ / ℓ pairs the accumulator with the ℓ it was summed with: it changes
        # when P·V lands, not when the softmax has already moved ℓ on.
        o_hat = acc if rec.normalized else _o_hat(acc, l_acc)
        final = bool(is_store[i]) and s == int(last_seen[qb])
        out = {
            **base,
            "rows": [r0, r1],
            "m": json_floats(m),
            "l": json_floats(l),
            "alpha": json_floats(alpha),
            "o": json_floats(acc, 5),
            "o_hat": json_floats(o_hat, 5),
            "final": final,
        }
        if rec.err is not None:
            out.update(error_state(rec, grid, r0, r1, s - 1 if acc_lags[i] else s, final))
        kb = int(kcol[i])
        if kb >= 0 and shows_s[i] and rec.q is not None:
            with_pv = bool(is_pv[i]) and not rec.normalized
            out.update(tile_state(rec, grid, r0, r1, kb, tile_limit, bool(shows_p[i]), with_pv))
        return out

    return state_of


def _prev(rec: ForwardRecording, j: int, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
    """m and ℓ of rows r0:r1 before key block j (−∞ and 0 before the first)."""
    if j == 0:
        return np.full(r1 - r0, -np.inf, np.float32), np.zeros(r1 - r0, np.float32)
    return rec.m[j - 1, r0:r1], rec.l[j - 1, r0:r1]


def tile_state(
    rec: ForwardRecording,
    grid: TileGrid,
    r0: int,
    r1: int,
    j: int,
    limit: int,
    with_p: bool,
    with_pv: bool,
) -> dict[str, Any]:
    """Tile (rows r0:r1, key block j): its keys, the S tile (masked pairs null) and, once the
    softmax ran, the P tile, ℓ before the tile, α·ℓ and what the tile adds to ℓ; with `with_pv`
    (FA-2's P·V) the accumulator update Õ′ = α·Õ + P·Vⱼ in its two terms (shown columns).
    S and P are averaged to at most `limit` cells per side (S over its visible pairs)."""
    assert rec.q is not None and rec.k is not None
    bn, nk = grid.tiles.block_n, grid.problem.seq_k
    m_prev, l_prev = _prev(rec, j, r0, r1)
    algo = "fa1" if rec.normalized else "fa2"
    v = rec.v if with_pv else None
    t = tile_numbers(grid, rec.q, rec.k, j, r0, r1, m_prev, l_prev, algo=algo, v=v)
    s_view, stride = masked_tile_view(t.s, limit)
    out: dict[str, Any] = {
        "cols": [j * bn, min((j + 1) * bn, nk)],
        "tile_stride": stride,
        "s": json_floats(s_view, 5),
    }
    if with_p:
        p_view, _ = tile_view(t.p, limit)
        out.update(
            p=json_floats(p_view, 5),
            l_prev=json_floats(l_prev),
            l_rescaled=json_floats(t.l_rescaled),
            p_sum=json_floats(t.p_sum),
        )
    if t.pv is not None:
        before = rec.acc[j - 1, r0:r1] if j > 0 else np.zeros((r1 - r0, rec.acc.shape[-1]))
        out["o_rescaled"] = json_floats(t.alpha[:, None] * before, 5)
        out["pv"] = json_floats(block_mean(t.pv, rec.col_stride), 5)
    return out


def error_state(
    rec: ForwardRecording, grid: TileGrid, r0: int, r1: int, seen: int, final: bool
) -> dict[str, Any]:
    """How far the output so far is from the exact output, for rows r0:r1 whose accumulator
    holds key blocks 0…`seen` (−1: none): per row, then the block's largest error after each
    key block (the first entry before any, and the output as written last once it is), and
    the dtype's rounding floor u · max |O_exact| of these rows."""
    assert rec.err is not None and rec.err_init is not None and rec.err_final is not None
    assert rec.ref_max is not None
    rows = slice(r0, r1)
    now = rec.err_final[rows] if final else rec.err[seen, rows] if seen >= 0 else rec.err_init[rows]
    history = [rec.err_init[rows].max(initial=0.0)]
    history += [rec.err[j, rows].max(initial=0.0) for j in range(seen + 1)]
    if final:
        history.append(rec.err_final[rows].max(initial=0.0))
    floor = UNIT_ROUNDOFF[grid.problem.dtype] * float(rec.ref_max[rows].max(initial=0.0))
    return {"err": significant(now), "err_history": significant(history), "err_floor": floor}


def significant(a: Any, digits: int = 4) -> list[float]:
    """Small positive numbers for JSON: rounded to `digits` significant digits, not decimals."""
    return [float(f"{x:.{digits}g}") for x in np.asarray(a, np.float64).ravel()]


def naive_states(ops: OpTable, grid: TileGrid, rec: NaiveRecording) -> StateFn:
    """Naive attention: row statistics once the softmax kernel ran, O once P·V ran."""
    phase, qcol = ops.columns["phase"], ops.columns["q_block"]
    bm, nq = grid.tiles.block_m, grid.problem.seq_q
    after_softmax = (PHASE_INDEX["naive_softmax"], PHASE_INDEX["naive_pv"])

    def state_of(i: int) -> dict[str, Any]:
        qb = int(qcol[i])
        out: dict[str, Any] = {"col_stride": rec.col_stride, "final": False}
        if qb < 0:
            return out
        r0, r1 = qb * bm, min((qb + 1) * bm, nq)
        out["rows"] = [r0, r1]
        if int(phase[i]) in after_softmax:
            out["m"], out["l"] = json_floats(rec.m[r0:r1]), json_floats(rec.l[r0:r1])
        if int(phase[i]) == PHASE_INDEX["naive_pv"]:
            out["o"] = out["o_hat"] = json_floats(rec.o_shown[r0:r1], 5)
            out["final"] = True
        return out

    return state_of


def backward_states(ops: OpTable, rec: BackwardRecording, limit: int, stride: int) -> StateFn:
    """FA-2 backward: the tile's LSE, D, P, dS and the dQ, dK, dV partials as of this op."""
    grid = rec.grid
    bm, bn, nq, nk = grid.tiles.block_m, grid.tiles.block_n, grid.problem.seq_q, grid.problem.seq_k
    phase, qcol, kcol = ops.columns["phase"], ops.columns["q_block"], ops.columns["kv_block"]
    order = {name: k for k, name in enumerate(("recompute_p", "dv", "dp", "ds", "dq", "dk"))}
    phase_name = {v: k for k, v in PHASE_INDEX.items()}

    def shown(a: np.ndarray) -> Any:
        return json_floats(block_mean(a, stride), 5)

    def state_of(i: int) -> dict[str, Any]:
        name, qb, kb = phase_name[int(phase[i])], int(qcol[i]), int(kcol[i])
        out: dict[str, Any] = {"col_stride": stride, "final": False}
        rows = slice(qb * bm, min((qb + 1) * bm, nq)) if qb >= 0 else None
        cols = slice(kb * bn, min((kb + 1) * bn, nk)) if kb >= 0 else None
        if rows is not None:
            out["rows"] = [rows.start, rows.stop]
            out["delta"] = json_floats(rec.delta[rows])
        if cols is not None:
            out["cols"] = [cols.start, cols.stop]
        if name == "preprocess_d":
            return out
        if name == "convert_dq":
            return {**out, "dq": shown(rec.dq[rows]), "final": True}
        if name == "load_kv_bwd":
            zeros = np.zeros((cols.stop - cols.start, rec.q.shape[1]))  # type: ignore[union-attr]
            return {**out, "dk": shown(zeros), "dv": shown(zeros)}
        if name == "store_dkdv":
            return {**out, "dk": shown(rec.dk[cols]), "dv": shown(rec.dv[cols]), "final": True}
        step = order.get(name, -1)  # −1: load_q_bwd, nothing of this tile computed yet
        out["lse"] = json_floats(rec.lse[rows])
        if step >= order["recompute_p"]:
            view, out["tile_stride"] = tile_view(rec.tile("p", qb, kb), limit)
            out["p"] = json_floats(view, 5)
        if step >= order["ds"]:
            view, out["tile_stride"] = tile_view(rec.tile("ds", qb, kb), limit)
            out["ds"] = json_floats(view, 5)
        dk_now, dv_now = rec.dkdv_partial(kb, qb)
        dk_before, dv_before = (
            rec.dkdv_partial(kb, qb - 1) if qb > 0 else (np.zeros_like(dk_now),) * 2
        )
        out["dv"] = shown(dv_now if step >= order["dv"] else dv_before)
        out["dk"] = shown(dk_now if step >= order["dk"] else dk_before)
        out["dq"] = shown(rec.dq_partial(qb, kb if step >= order["dq"] else kb - 1))
        return out

    return state_of


def decode_states(ops: OpTable, rec: DecodeRecording) -> StateFn:
    """Flash-Decoding: the split's running state, its partial, then the running merge."""
    phase, snap, cta = ops.columns["phase"], ops.columns["snapshot"], ops.columns["cta"]
    plan, n_rows = rec.plan, rec.plan.rows
    d_shown = rec.acc.shape[-1]
    partial_shown = block_mean(rec.partial_o, rec.col_stride)  # (S', R, d_shown)

    def state_of(i: int) -> dict[str, Any]:
        ph, s = int(phase[i]), int(snap[i])
        out: dict[str, Any] = {"rows": [0, n_rows], "col_stride": rec.col_stride, "final": False}
        if ph == PHASE_INDEX["reduce"]:
            merged = rec.merged_o[s]
            # The share of split s in the merge: O ← (1 − w)·O + w·Oₛ with w = e^(LSEₛ − L).
            weight = np.exp(rec.partial_lse[s] - rec.merged_lse[s])
            return {
                **out,
                "split": s,
                "partial_o": json_floats(partial_shown[s], 5),
                "partial_lse": json_floats(rec.partial_lse[s]),
                "weight": json_floats(weight),
                "lse": json_floats(rec.merged_lse[s]),
                "o": json_floats(merged, 5),
                "o_hat": json_floats(merged, 5),
            }
        if ph == PHASE_INDEX["store"]:
            o = block_mean(rec.o, rec.col_stride)
            final = {"lse": json_floats(rec.lse), "o": json_floats(o, 5)}
            return {**out, **final, "o_hat": final["o"], "final": True}
        split = int(cta[i])
        out["split"] = split
        if s < 0:
            m, l, alpha, acc = np.full(n_rows, -np.inf), np.zeros(n_rows), None, None
        else:
            m, l, alpha, acc = rec.m[s], rec.l[s], rec.alpha[s], rec.acc[s]
        l_acc = l
        if ph == PHASE_INDEX["softmax"]:  # the accumulator (and its ℓ) of the previous block
            first = s <= plan.blocks(split).start
            acc = None if first else rec.acc[s - 1]
            l_acc = np.zeros(n_rows) if first else rec.l[s - 1]
        acc = np.zeros((n_rows, d_shown)) if acc is None else acc
        out.update(
            m=json_floats(m),
            l=json_floats(l),
            alpha=json_floats(alpha),
            o=json_floats(acc, 5),
            o_hat=json_floats(_o_hat(acc, l_acc), 5),
        )
        if ph == PHASE_INDEX["store_partial"]:
            out["partial_o"] = json_floats(partial_shown[split], 5)
            out["partial_lse"] = json_floats(rec.partial_lse[split])
        return out

    return state_of
