"""Flash-Decoding as a tile program: split the KV cache, attend per split, then reduce.

For one (batch, kv_head). Decoding has few query rows and a long KV cache, so one CTA per query
block would leave most SMs idle; instead the key blocks are cut into splits (the occupancy rule
of problem.decode_splits unless given), one CTA per (batch, kv_head, split). The `group` query
heads that share the K/V head are packed into that CTA as R = group · seq_q rows, so K and V are
read once per kv head. Each split CTA writes an fp32 partial output and its LSE; a reduce CTA
per (batch, kv_head) merges them into O. No causal mask (a new token sees the whole cache);
block_m is not used (the CTA holds all R rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import FULL, SplitPlan, TileGrid, split_plan
from flashscope.simulator.core.trace import OpTable
from flashscope.simulator.teach import exactness, traffic
from flashscope.simulator.teach.algorithms.hook import TraceParts, TraceRequest
from flashscope.simulator.teach.numerics import DecodeRecording, decode_forward, naive_attention
from flashscope.simulator.teach.onchip import decode_layout, onchip
from flashscope.simulator.teach.snapshots import fit_stride
from flashscope.simulator.teach.trace_states import decode_states

NAME = "decode"
TITLE = "Flash-Decoding (split-KV + reduce)"
ORDER = "splits"

PSEUDOCODE = (
    "cut the key blocks into S splits;  pack the g query heads of a K/V head as R = g·Nq rows",
    "for each split s  (one CTA per (batch, kv_head, split), in parallel):",
    "    load Q (R rows) into SRAM;  m ← −∞,  ℓ ← 0,  Õ ← 0",
    "    for each key/value block j of split s:",
    "        load Kⱼ, Vⱼ into SRAM",
    "        S ← Q Kⱼᵀ · scale",
    "        m′ ← max(m, rowmax S);  α ← e^(m − m′);  P ← e^(S − m′);  ℓ ← α·ℓ + rowsum P",
    "        Õ ← α·Õ + P Vⱼ;  m ← m′",
    "    write Oₛ ← Õ / ℓ and LSEₛ ← m + log ℓ  (fp32 partials)",
    "reduce (one CTA per (batch, kv_head)):  LSE ← −∞,  O ← 0",
    "    for each split s: read Oₛ, LSEₛ;  L ← log(e^LSE + e^LSEₛ);"
    "  O ← e^(LSE − L)·O + e^(LSEₛ − L)·Oₛ;  LSE ← L",
    "    write O in the dtype",
)
LINE = {
    "load_q": 2,
    "load_kv": 4,
    "qk": 5,
    "softmax": 6,
    "pv": 7,
    "store_partial": 8,
    "reduce": 10,
    "store": 11,
}


def n_events(p: AttentionProblem, t: TileConfig, splits: int | None = None, sms: int = 132) -> int:
    """Per used split: load_q, store_partial and one reduce step; 4 per key block; 1 store."""
    plan = split_plan(p, t, splits, sms)
    return 3 * plan.used + 4 * plan.n_kv + 1


def program(
    p: AttentionProblem, t: TileConfig, splits: int | None = None, sms: int = 132
) -> OpTable:
    """The ops of one (batch, kv_head): the split CTAs (cta = s), then the reduce CTA.

    The split CTAs run at the same time, so their ops come in rounds: every split loads Q, then
    every split takes its first key block, then its second, and so on; a split writes its
    partial as soon as its last block is done (the last split may have fewer blocks).

    `snapshot`: state after key block j for split ops (−1: the split's initial state); the split
    index merged so far for reduce ops.
    """
    plan = split_plan(p, t, splits, sms)
    cols = TileGrid(p, t).cols
    d, rows = p.head_dim, plan.rows
    ops = OpTable(LINE)
    for s in range(plan.used):
        ops.add("load_q", cta=s, q_block=0, hbm_read=rows * d, sram_write=rows * d)
    for r in range(plan.chunk):
        for s in range(plan.used):
            blocks = plan.blocks(s)
            if r >= len(blocks):
                continue
            j = blocks[r]
            c = int(cols[j])
            before = j - 1 if r > 0 else -1
            tile: dict[str, Any] = {"cta": s, "q_block": 0, "kv_block": j}
            ops.add("load_kv", **tile, snapshot=before, hbm_read=2 * c * d, sram_write=2 * c * d)
            ops.add("qk", **tile, snapshot=before, sram_read=(rows + c) * d, flops=2 * rows * c * d)
            ops.add("softmax", **tile, snapshot=j, exps=rows * c + rows)
            ops.add("pv", **tile, snapshot=j, sram_read=c * d, flops=2 * rows * c * d)
        for s in range(plan.used):
            blocks = plan.blocks(s)
            if len(blocks) == r + 1:
                ops.add(
                    "store_partial",
                    cta=s,
                    q_block=0,
                    snapshot=blocks.stop - 1,
                    acc_write=rows * d,
                    stats_write=rows,
                )
    for s in range(plan.used):
        ops.add("reduce", cta=plan.used, q_block=0, snapshot=s, acc_read=rows * d, stats_read=rows)
    ops.add("store", cta=plan.used, q_block=0, snapshot=plan.used - 1, hbm_write=rows * d)
    return ops.freeze()


def trace_parts(request: TraceRequest) -> TraceParts:
    """Flash-Decoding of one (batch, kv_head) on the request's random inputs (the `group`
    query heads packed as R rows): each split's m, ℓ, α after every key block and its partial,
    then the running merge; O against the float64 reference; the split plan and table in the
    grid metadata."""
    p, t, splits, sms = request.problem, request.tiles, request.splits, request.sms
    plan = split_plan(p, t, splits, sms)
    d, rows = p.head_dim, plan.rows
    snapshots = plan.n_kv * rows
    fixed = 3 * snapshots + (plan.used + 4) * rows * d
    shown = snapshots + plan.used * rows  # accumulator rows recorded, the partials' included
    stride = fit_stride(d, request.o_col_limit, shown, fixed, request.budget_bytes)
    q, k, v = request.inputs(q_rows=rows)
    rec = decode_forward(q, k, v, p, t, splits=splits, sms=sms, col_stride=stride)
    ops = program(p, t, splits, sms)
    o_ref = naive_attention(q, k, v, p.scale)
    grid = {
        "q_blocks": 1,
        "kinds": [[FULL] * plan.n_kv],
        "rows": rows,
        "splits": plan.used,
        "splits_requested": plan.requested,
        "chunk": plan.chunk,
        "sms": sms,
        "split_table": _split_table(plan, rec, t.block_n, p.seq_k, sms),
    }
    return TraceParts(
        ops=ops,
        state_of=decode_states(ops, rec),
        onchip=onchip(p, t, ops, decode_layout(d, p.dtype_bytes), rows=rows),
        extras={"o": rec.o, "o_ref": o_ref},
        compared=[exactness.compare("O", rec.o, o_ref, p.dtype)],
        col_stride=stride,
        traffic=traffic.decode_head(p, t, splits, sms),
        heads=p.group,  # a decode trace covers the `group` query heads of one K/V head
        grid=grid,
    )


def _split_table(
    plan: SplitPlan, rec: DecodeRecording, block_n: int, seq_k: int, sms: int
) -> list[dict[str, Any]]:
    """Per used split of Flash-Decoding: its key blocks and keys, the SM its CTA starts on (the
    block scheduler hands out CTAs breadth-first: CTA s → SM s mod sms), and its weight in the
    final output, e^(LSEₛ − LSE), as mean, min and max over the query rows."""
    weights = np.exp(rec.partial_lse - rec.lse[None, :])  # (S', R)
    out: list[dict[str, Any]] = []
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
