"""FlashAttention-2 forward as a tile program.

Loop order ("q-outer"): one CTA per query block, all independent; the inner loop streams the key
and value blocks the block can see through shared memory. The accumulator stays unnormalized
until the end (deferred normalization) and each CTA writes its O rows and one log-sum-exp per row.

Causal (bottom-right aligned): a query block sees a prefix of the key blocks; fully masked tiles
are skipped (no load, no FLOPs), partial tiles are computed whole with the masked scores at −∞.
A query block that sees no key (seq_q > seq_k) still loads Q and writes O = 0 and LSE = −∞.
Ragged last blocks move only the rows and keys that exist. GQA changes nothing per query head.
"""

from __future__ import annotations

from typing import Any

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import PARTIAL, TileGrid
from flashscope.simulator.core.trace import OpTable
from flashscope.simulator.teach import exactness, traffic
from flashscope.simulator.teach.algorithms.hook import TraceParts, TraceRequest
from flashscope.simulator.teach.numerics import flash_forward, naive_attention
from flashscope.simulator.teach.onchip import Layout, forward_layout, onchip
from flashscope.simulator.teach.snapshots import fit_stride
from flashscope.simulator.teach.trace_states import forward_states

NAME = "fa2"
TITLE = "FlashAttention-2 forward"
ORDER = "q-outer"

PSEUDOCODE = (
    "for each query block Qᵢ  (one CTA each, in parallel):",
    "    load Qᵢ into SRAM;  m ← −∞,  ℓ ← 0,  Õ ← 0",
    "    for each key/value block j that Qᵢ can see  (causal: up to the diagonal):",
    "        load Kⱼ, Vⱼ into SRAM",
    "        S ← Qᵢ Kⱼᵀ · scale  (masked pairs −∞; S stays on chip)",
    "        m′ ← max(m, rowmax S);  α ← e^(m − m′);  P ← e^(S − m′);  ℓ ← α·ℓ + rowsum P",
    "        Õ ← α·Õ + P Vⱼ;  m ← m′",
    "    Oᵢ ← Õ / ℓ;  LSEᵢ ← m + log ℓ;  write Oᵢ and LSEᵢ to HBM",
)
LINE = {"load_q": 1, "load_kv": 3, "qk": 4, "softmax": 5, "pv": 6, "store": 7}


def n_events(p: AttentionProblem, t: TileConfig, **_: object) -> int:
    """Events of one (batch, head): per query block load_q + store, and 4 per visible tile."""
    g = TileGrid(p, t)
    return 2 * g.n_q + 4 * g.n_tiles


def program(p: AttentionProblem, t: TileConfig, **_: object) -> OpTable:
    """The ops of one (batch, head), CTAs in launch order.

    `snapshot` of an op indexes the numerics recording (the state after key block j); −1 is the
    initial state.
    """
    g = TileGrid(p, t)
    d = p.head_dim
    kinds = g.kinds()
    ops = OpTable(LINE)
    for i in range(g.n_q):
        r = int(g.rows[i])
        ops.add("load_q", cta=i, q_block=i, snapshot=-1, hbm_read=r * d, sram_write=r * d)
        for j in range(int(g.visible[i])):
            c = int(g.cols[j])
            tile: dict[str, Any] = {
                "cta": i,
                "q_block": i,
                "kv_block": j,
                "masked": bool(kinds[i, j] == PARTIAL),
            }
            ops.add("load_kv", **tile, snapshot=j - 1, hbm_read=2 * c * d, sram_write=2 * c * d)
            ops.add("qk", **tile, snapshot=j - 1, sram_read=(r + c) * d, flops=2 * r * c * d)
            ops.add("softmax", **tile, snapshot=j, exps=r * c + r)
            ops.add("pv", **tile, snapshot=j, sram_read=c * d, flops=2 * r * c * d)
        ops.add(
            "store",
            cta=i,
            q_block=i,
            snapshot=int(g.visible[i]) - 1,
            hbm_write=r * d,
            stats_write=r,
        )
    return ops.freeze()


def trace_parts(request: TraceRequest) -> TraceParts:
    """FA-2 on the request's random inputs (see `forward_parts`)."""
    p, t = request.problem, request.tiles
    layout = forward_layout(p.head_dim, p.dtype_bytes)
    return forward_parts(request, NAME, program(p, t), layout, traffic.fa2_head(p, t))


def forward_parts(
    request: TraceRequest, algo: str, ops: OpTable, layout: Layout, counts: traffic.Traffic
) -> TraceParts:
    """The trace parts of a flash forward, FA-2 or FA-1 (`algo`), given its program `ops`,
    on-chip layout and traffic `counts`: m, ℓ, α and the error against the exact output per
    row after every key block, and the accumulator in as many shown columns as the budget
    allows; O against the reference. S and P tiles are rebuilt per event from the inputs."""
    p, t = request.problem, request.tiles
    grid = TileGrid(p, t)
    nq, d = p.seq_q, p.head_dim
    snapshots = grid.n_kv * nq
    # m, ℓ, α and the error of each snapshot row; Q, O and the float64 reference (two floats
    # per entry) as Nq × d tensors, K and V; three error vectors per row
    fixed = 4 * snapshots + 4 * nq * d + 2 * p.seq_k * d + 3 * nq
    stride = fit_stride(d, request.o_col_limit, snapshots, fixed, request.budget_bytes)
    q, k, v = request.inputs()
    o_ref = naive_attention(q, k, v, p.scale, p.causal)
    rec = flash_forward(q, k, v, p, t, algo=algo, col_stride=stride, reference=o_ref)
    return TraceParts(
        ops=ops,
        state_of=forward_states(ops, grid, rec, tile_limit=request.o_col_limit),
        onchip=onchip(p, t, ops, layout),
        extras={"o": rec.o, "o_ref": o_ref},
        compared=[exactness.compare("O", rec.o, o_ref, p.dtype)],
        col_stride=stride,
        traffic=counts,
    )
