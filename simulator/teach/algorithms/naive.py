"""Naive attention as the three kernels an eager framework launches, S and P materialized.

Kernel 1 computes S = QKᵀ·scale and writes all Nq × Nk scores to HBM; kernel 2 reads S back,
takes the row softmax and writes P; kernel 3 reads P and V and writes O. Each kernel reads each
input once (K and V are charged to the first CTA of their kernel: they stay resident for the
kernel's lifetime, the way the seed counts them); the CTAs of a kernel own BM-row blocks.
A causal mask only sets scores to −∞ inside kernel 1: the traffic is the same.

SRAM convention here: loads of Q, K, V and P pass through shared memory (written once each);
the matmuls read their operands from it (kernel 1: Qᵢ and all of K; kernel 3: Pᵢ and all of V);
the softmax works in registers.
"""

from __future__ import annotations

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import TileGrid
from flashscope.simulator.core.trace import OpTable
from flashscope.simulator.teach import exactness, traffic
from flashscope.simulator.teach.algorithms.hook import TraceParts, TraceRequest
from flashscope.simulator.teach.numerics import naive_attention, naive_forward
from flashscope.simulator.teach.onchip import naive_layout, onchip
from flashscope.simulator.teach.snapshots import FLOAT_BYTES, shown_columns
from flashscope.simulator.teach.trace_states import naive_states

NAME = "naive"
TITLE = "Naive attention (S and P in HBM)"
ORDER = "rows"

PSEUDOCODE = (
    "kernel 1:  load K  (all Nk rows)",
    "    for each row block i:  load Qᵢ",
    "        Sᵢ ← Qᵢ Kᵀ · scale  (causal: masked pairs −∞);  write Sᵢ to HBM",
    "kernel 2:  for each row block i:  read Sᵢ;  Pᵢ ← row softmax of Sᵢ;  write Pᵢ to HBM",
    "kernel 3:  load V  (all Nk rows)",
    "    for each row block i:  read Pᵢ;  Oᵢ ← Pᵢ V;  write Oᵢ to HBM",
)
LINE = {"load_q": 1, "naive_qk": 2, "naive_softmax": 3, "naive_pv": 5}
K_LINE, V_LINE = 0, 4


def n_events(p: AttentionProblem, t: TileConfig, **_: object) -> int:
    """Load K and load V, plus load_q, qk, softmax and pv per row block."""
    return 2 + 4 * TileGrid(p, t).n_q


def program(p: AttentionProblem, t: TileConfig, **_: object) -> OpTable:
    """The ops of the three kernels for one (batch, head); CTA ids count across kernels."""
    g = TileGrid(p, t)
    d, nk, n_q = p.head_dim, p.seq_k, g.n_q
    ops = OpTable(LINE)

    def masked(i: int) -> bool:  # does row block i have a masked pair?
        return p.causal and nk - 1 > i * t.block_m + p.causal_offset

    ops.add("load_kv", cta=0, line=K_LINE, hbm_read=nk * d, sram_write=nk * d)
    for i in range(n_q):
        r = int(g.rows[i])
        ops.add("load_q", cta=i, q_block=i, hbm_read=r * d, sram_write=r * d)
        ops.add(
            "naive_qk",
            cta=i,
            q_block=i,
            masked=masked(i),
            sram_read=(r + nk) * d,
            flops=2 * r * nk * d,
            hbm_write=r * nk,
        )
    for i in range(n_q):
        r = int(g.rows[i])
        ops.add(
            "naive_softmax",
            cta=n_q + i,
            q_block=i,
            masked=masked(i),
            hbm_read=r * nk,
            hbm_write=r * nk,
            exps=r * nk,
        )
    ops.add("load_kv", cta=2 * n_q, line=V_LINE, hbm_read=nk * d, sram_write=nk * d)
    for i in range(n_q):
        r = int(g.rows[i])
        ops.add(
            "naive_pv",
            cta=2 * n_q + i,
            q_block=i,
            hbm_read=r * nk,
            sram_write=r * nk,
            sram_read=r * nk + nk * d,
            flops=2 * r * nk * d,
            hbm_write=r * d,
        )
    return ops.freeze()


def trace_parts(request: TraceRequest) -> TraceParts:
    """Naive attention on the request's random inputs: S, e^S and P kept whole (Nq × Nk each),
    the row statistics and O per row block; O against the float64 reference."""
    p, t = request.problem, request.tiles
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    request.check_budget((3 * nq * nk + 4 * nq * d) * FLOAT_BYTES)  # S, exp(S), P, the tensors
    stride = shown_columns(d, request.o_col_limit)
    q, k, v = request.inputs()
    rec = naive_forward(q, k, v, p, col_stride=stride)
    ops = program(p, t)
    o_ref = naive_attention(q, k, v, p.scale, p.causal)
    return TraceParts(
        ops=ops,
        state_of=naive_states(ops, TileGrid(p, t), rec),
        onchip=onchip(p, t, ops, naive_layout(d, p.dtype_bytes, nk, K_LINE)),
        extras={"o": rec.o, "o_ref": o_ref},
        compared=[exactness.compare("O", rec.o, o_ref, p.dtype)],
        col_stride=stride,
        traffic=traffic.naive_head(p, t),
    )
