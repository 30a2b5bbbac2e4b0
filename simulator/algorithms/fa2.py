"""FlashAttention-2 forward as a tile program.

Loop order: the outer loop runs over query blocks (one CTA each, all independent); the inner loop
streams key/value blocks through shared memory. The accumulator stays unnormalized until the end
(deferred normalization) and each CTA writes its O rows and one log-sum-exp per row.

This version leaves out causal skipping and grouped heads: the tile program of one (batch, head)
with seq_q × seq_k scores, ragged last tiles included.
"""

from __future__ import annotations

from ..problem import AttentionProblem, TileConfig
from ..trace import OpTable

NAME = "fa2"
TITLE = "FlashAttention-2 forward"

# The pseudocode the stepper shows; each op names the line it executes.
PSEUDOCODE = (
    "for each query block Qᵢ  (one CTA each, in parallel):",
    "    load Qᵢ into SRAM;  m ← −∞,  ℓ ← 0,  Õ ← 0",
    "    for each key/value block j:",
    "        load Kⱼ, Vⱼ into SRAM",
    "        S ← Qᵢ Kⱼᵀ · scale                       (stays on chip)",
    "        m′ ← max(m, rowmax S);  α ← e^(m − m′);  P ← e^(S − m′);  ℓ ← α·ℓ + rowsum P",
    "        Õ ← α·Õ + P Vⱼ;  m ← m′",
    "    Oᵢ ← Õ / ℓ;  LSEᵢ ← m + log ℓ;  write Oᵢ and LSEᵢ to HBM",
)
LINE = {"load_q": 1, "load_kv": 3, "qk": 4, "softmax": 5, "pv": 6, "store": 7}


def program(p: AttentionProblem, t: TileConfig) -> OpTable:
    """The ops of one (batch, head), CTAs in launch order.

    `snapshot` of an op is the index of the numerics snapshot (inner iteration) that holds the
    state after it: −1 is the initial state, j the state after key block j.
    """
    d = p.head_dim
    ops = OpTable()
    for i in range(t.q_blocks(p)):
        rows = min(t.block_m, p.seq_q - i * t.block_m)
        ops.add(
            "load_q",
            cta=i,
            q_block=i,
            line=LINE["load_q"],
            snapshot=-1,
            hbm_read=rows * d,
            sram_write=rows * d,
        )
        for j in range(t.kv_blocks(p)):
            cols = min(t.block_n, p.seq_k - j * t.block_n)
            ops.add(
                "load_kv",
                cta=i,
                q_block=i,
                kv_block=j,
                line=LINE["load_kv"],
                snapshot=j - 1,
                hbm_read=2 * cols * d,
                sram_write=2 * cols * d,
            )
            ops.add(
                "qk",
                cta=i,
                q_block=i,
                kv_block=j,
                line=LINE["qk"],
                snapshot=j - 1,
                sram_read=(rows + cols) * d,
                flops=2 * rows * cols * d,
            )
            ops.add(
                "softmax",
                cta=i,
                q_block=i,
                kv_block=j,
                line=LINE["softmax"],
                snapshot=j,
                exps=rows * cols + rows,
            )
            ops.add(
                "pv",
                cta=i,
                q_block=i,
                kv_block=j,
                line=LINE["pv"],
                snapshot=j,
                sram_read=cols * d,
                flops=2 * rows * cols * d,
            )
        ops.add(
            "store",
            cta=i,
            q_block=i,
            line=LINE["store"],
            snapshot=t.kv_blocks(p) - 1,
            hbm_write=rows * d,
            stats_write=rows,
        )
    return ops.freeze()
