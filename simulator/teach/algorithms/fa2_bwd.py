"""FlashAttention-2 backward as a tile program: recompute P from the saved LSE, store nothing
quadratic.

Three kernels, in launch order:
1. preprocess, one CTA per query block: D = rowsum(dO ∘ O), one fp32 value per row;
2. main ("kv-outer"), one CTA per key block j: Kⱼ and Vⱼ stay in SRAM, dKⱼ and dVⱼ accumulate on
   chip while the CTA walks the query blocks that see block j; each step rebuilds P from Qᵢ, Kⱼ
   and LSEᵢ, then dV += Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D), dQᵢ += dS Kⱼ (read-add-write of
   an fp32 accumulator in global memory, since other CTAs add to the same rows), dK += dSᵀ Q;
3. postprocess, one CTA per query block: dQ = scale · accumulator, written in the dtype.

Causal: a key block is seen by a suffix of the query blocks (every key block by the last one);
fully masked tiles are skipped, partial ones masked.
"""

from __future__ import annotations

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import PARTIAL, TileGrid
from flashscope.simulator.core.trace import OpTable
from flashscope.simulator.teach import exactness, traffic
from flashscope.simulator.teach.algorithms.hook import TraceParts, TraceRequest
from flashscope.simulator.teach.numerics import attention_gradients, fa2_backward
from flashscope.simulator.teach.onchip import backward_layout, onchip
from flashscope.simulator.teach.snapshots import FLOAT_BYTES, shown_columns
from flashscope.simulator.teach.trace_states import backward_states

NAME = "fa2-bwd"
TITLE = "FlashAttention-2 backward"
ORDER = "kv-outer"

PSEUDOCODE = (
    "preprocess (a CTA per query block i): load Oᵢ, dOᵢ;  write Dᵢ ← rowsum(dOᵢ ∘ Oᵢ)",
    "for each key/value block j  (one CTA each, in parallel):",
    "    load Kⱼ, Vⱼ into SRAM;  dK ← 0,  dV ← 0  (fp32, on chip)",
    "    for each query block i that can see block j:",
    "        load Qᵢ, dOᵢ, LSEᵢ, Dᵢ",
    "        S ← Qᵢ Kⱼᵀ · scale;  P ← e^(S − LSEᵢ)  (masked pairs: 0)",
    "        dV ← dV + Pᵀ dOᵢ",
    "        dP ← dOᵢ Vⱼᵀ",
    "        dS ← P ∘ (dP − Dᵢ)",
    "        dQᵢ ← dQᵢ + dS Kⱼ  (fp32 accumulator in HBM: read, add, write back)",
    "        dK ← dK + dSᵀ Qᵢ",
    "    write dKⱼ ← scale · dK,  dVⱼ ← dV",
    "postprocess (a CTA per query block i): write dQᵢ ← scale · accumulator, in the dtype",
)
LINE = {
    "preprocess_d": 0,
    "load_kv_bwd": 2,
    "load_q_bwd": 4,
    "recompute_p": 5,
    "dv": 6,
    "dp": 7,
    "ds": 8,
    "dq": 9,
    "dk": 10,
    "store_dkdv": 11,
    "convert_dq": 12,
}
TILE_PHASES = ("load_q_bwd", "recompute_p", "dv", "dp", "ds", "dq", "dk")


def n_events(p: AttentionProblem, t: TileConfig, **_: object) -> int:
    """Preprocess and postprocess per query block, load and store per key block, 7 per tile."""
    g = TileGrid(p, t)
    return 2 * g.n_q + 2 * g.n_kv + len(TILE_PHASES) * g.n_tiles


def program(p: AttentionProblem, t: TileConfig, **_: object) -> OpTable:
    """The ops of the three kernels for one (batch, head), CTAs numbered in launch order."""
    g = TileGrid(p, t)
    d = p.head_dim
    kinds = g.kinds()
    ops = OpTable(LINE)
    for i in range(g.n_q):
        r = int(g.rows[i])
        ops.add(
            "preprocess_d",
            cta=i,
            q_block=i,
            hbm_read=2 * r * d,
            sram_write=2 * r * d,
            stats_write=r,
        )
    for j in range(g.n_kv):
        c, cta = int(g.cols[j]), g.n_q + j
        ops.add("load_kv_bwd", cta=cta, kv_block=j, hbm_read=2 * c * d, sram_write=2 * c * d)
        for i in g.q_blocks_of(j).tolist():
            r = int(g.rows[i])
            tile = {"cta": cta, "q_block": i, "kv_block": j, "masked": bool(kinds[i, j] == PARTIAL)}
            mm = 2 * r * c * d  # FLOPs of one r × c × d matmul
            ops.add(
                "load_q_bwd", **tile, hbm_read=2 * r * d, sram_write=2 * r * d, stats_read=2 * r
            )
            ops.add("recompute_p", **tile, sram_read=(r + c) * d, flops=mm, exps=r * c)
            ops.add("dv", **tile, sram_read=r * d, flops=mm)
            ops.add("dp", **tile, sram_read=(r + c) * d, flops=mm)
            ops.add("ds", **tile)
            ops.add("dq", **tile, sram_read=c * d, flops=mm, acc_read=r * d, acc_write=r * d)
            ops.add("dk", **tile, sram_read=r * d, flops=mm)
        ops.add("store_dkdv", cta=cta, kv_block=j, hbm_write=2 * c * d)
    for i in range(g.n_q):
        r = int(g.rows[i])
        ops.add("convert_dq", cta=g.n_q + g.n_kv + i, q_block=i, acc_read=r * d, hbm_write=r * d)
    return ops.freeze()


def trace_parts(request: TraceRequest) -> TraceParts:
    """The FA-2 backward on the request's random inputs and upstream gradient: its fp32 P and
    dS (Nq × Nk each) kept whole, partial sums rebuilt on request; dQ, dK and dV against the
    float64 gradients."""
    p, t = request.problem, request.tiles
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    request.check_budget((2 * nq * nk + 8 * (nq + nk) * d) * FLOAT_BYTES)  # P, dS, the tensors
    stride = shown_columns(d, request.o_col_limit)
    q, k, v, do = request.inputs(grad=True)
    rec = fa2_backward(q, k, v, do, p, t)
    ops = program(p, t)
    ref = attention_gradients(q, k, v, do, p.scale, p.causal)
    got = {"dq": rec.dq, "dk": rec.dk, "dv": rec.dv}
    return TraceParts(
        ops=ops,
        state_of=backward_states(ops, rec, request.o_col_limit, stride),
        onchip=onchip(p, t, ops, backward_layout(d, p.dtype_bytes)),
        extras={**got, "ref": ref, "recording": rec},
        compared=[
            exactness.compare(name, got[x], ref[x], p.dtype)
            for name, x in (("dQ", "dq"), ("dK", "dk"), ("dV", "dv"))
        ],
        col_stride=stride,
        traffic=traffic.fa2_bwd_head(p, t),
    )
