"""FlashAttention-1 forward (Algorithm 1 of the paper) as a tile program.

Loop order ("kv-outer"): one CTA per (batch, head) runs both loops. The outer loop brings each
key/value block into SRAM once; the inner loop visits every query block that can see it and, for
each, reads Qᵢ together with the running Oᵢ, ℓᵢ and mᵢ from HBM, folds the new block in, and
writes the normalized Oᵢ, ℓᵢ and mᵢ straight back. O is therefore read and written once per
visible tile instead of once per query block: the traffic FA-2's loop swap removes.

Initialization writes O = 0, ℓ = 0 and m = −∞ to HBM. Causal: key blocks are visited by a suffix
of the query blocks (fully masked tiles skipped, partial ones masked); every key block is seen by
the last query row, so the outer loop never skips one.
"""

from __future__ import annotations

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import PARTIAL, TileGrid
from flashscope.simulator.core.trace import OpTable
from flashscope.simulator.teach import traffic
from flashscope.simulator.teach.algorithms.fa2 import forward_parts
from flashscope.simulator.teach.algorithms.hook import TraceParts, TraceRequest
from flashscope.simulator.teach.onchip import fa1_layout

NAME = "fa1"
TITLE = "FlashAttention-1 forward"
ORDER = "kv-outer"

PSEUDOCODE = (
    "write O ← 0,  ℓ ← 0,  m ← −∞ to HBM",
    "for each key/value block j:",
    "    load Kⱼ, Vⱼ into SRAM",
    "    for each query block i that can see block j:",
    "        load Qᵢ, Oᵢ, ℓᵢ, mᵢ from HBM",
    "        S ← Qᵢ Kⱼᵀ · scale  (masked pairs −∞)",
    "        m̃ ← rowmax S;  P̃ ← e^(S − m̃);  m′ ← max(mᵢ, m̃);  α ← e^(mᵢ − m′);  β ← e^(m̃ − m′)",
    "        ℓ′ ← α·ℓᵢ + β·rowsum P̃;  Oᵢ ← (ℓᵢ·α·Oᵢ + β·P̃ Vⱼ) / ℓ′",
    "        write Oᵢ, ℓᵢ ← ℓ′, mᵢ ← m′ to HBM",
)
LINE = {"init": 0, "load_kv": 2, "load_q": 4, "qk": 5, "softmax": 6, "pv": 7, "store": 8}


def n_events(p: AttentionProblem, t: TileConfig, **_: object) -> int:
    """init, a load per key block in use, and 5 ops per visible tile."""
    g = TileGrid(p, t)
    return 1 + g.kv_blocks_used + 5 * g.n_tiles


def program(p: AttentionProblem, t: TileConfig, **_: object) -> OpTable:
    """The ops of the single CTA of one (batch, head), in order.

    `snapshot` indexes the numerics recording (state after key block j; −1 initial).
    """
    g = TileGrid(p, t)
    d = p.head_dim
    kinds = g.kinds()
    ops = OpTable(LINE)
    ops.add("init", cta=0, hbm_write=p.seq_q * d, stats_write=2 * p.seq_q)
    for j in range(g.n_kv):
        blocks = g.q_blocks_of(j)
        if blocks.size == 0:
            continue
        c = int(g.cols[j])
        ops.add(
            "load_kv", cta=0, kv_block=j, snapshot=j - 1, hbm_read=2 * c * d, sram_write=2 * c * d
        )
        for i in blocks.tolist():
            r = int(g.rows[i])
            tile = {"cta": 0, "q_block": i, "kv_block": j, "masked": bool(kinds[i, j] == PARTIAL)}
            ops.add(
                "load_q",
                **tile,
                snapshot=j - 1,
                hbm_read=2 * r * d,
                stats_read=2 * r,
                sram_write=2 * r * d,
            )
            ops.add("qk", **tile, snapshot=j - 1, sram_read=(r + c) * d, flops=2 * r * c * d)
            ops.add("softmax", **tile, snapshot=j, exps=r * c + r)
            ops.add("pv", **tile, snapshot=j, sram_read=c * d, flops=2 * r * c * d)
            ops.add("store", **tile, snapshot=j, hbm_write=r * d, stats_write=2 * r)
    return ops.freeze()


def trace_parts(request: TraceRequest) -> TraceParts:
    """FA-1 on the request's random inputs: as FA-2's forward (fa2.forward_parts), with FA-1's
    program, numerics and on-chip layout."""
    p, t = request.problem, request.tiles
    layout = fa1_layout(p.head_dim, p.dtype_bytes)
    return forward_parts(request, NAME, program(p, t), layout, traffic.fa1_head(p, t))
