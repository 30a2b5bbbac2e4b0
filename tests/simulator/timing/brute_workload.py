"""A per-tile Python loop over every CTA and tile: the oracle of
`flashscope.simulator.timing.workload`.

Written straight from the counting convention, one visible tile at a time, with none of the
workload module's prefix sums or broadcasting. Small sizes only.
"""

from __future__ import annotations

from collections import Counter

from flashscope.simulator.core.problem import AttentionProblem, TileConfig, cdiv, decode_splits


def _tile(p: AttentionProblem, t: TileConfig, i: int, j: int) -> tuple[bool, int, int]:
    """(visible, rows, cols) of tile (i, j)."""
    r = min(t.block_m, p.seq_q - i * t.block_m)
    c = min(t.block_n, p.seq_k - j * t.block_n)
    if not p.causal:
        return True, r, c
    return j * t.block_n <= i * t.block_m + r - 1 + p.causal_offset, r, c


def brute(algo: str, p: AttentionProblem, t: TileConfig, sms: int = 132, splits=None):
    """Per launch, the list of per-CTA Counters (counts and `iters`) in launch order."""
    d, nq, nk = p.head_dim, p.seq_q, p.seq_k
    n_q, n_kv = cdiv(nq, t.block_m), cdiv(nk, t.block_n)
    bh = range(p.batch * p.heads)
    if algo == "fa2":
        ctas = []
        for _ in bh:
            for i in range(n_q):
                c = Counter()
                for j in range(n_kv):
                    vis, r, cols = _tile(p, t, i, j)
                    if vis:
                        c["hbm_read"] += 2 * cols * d
                        c["flops"] += 4 * r * cols * d
                        c["exps"] += r * cols + r
                        c["iters"] += 1
                r = min(t.block_m, nq - i * t.block_m)
                c["hbm_read"] += r * d
                c["hbm_write"] += r * d
                c["stats_write"] += r
                ctas.append(c)
        return [ctas]
    if algo == "fa1":
        ctas = []
        for _ in bh:
            c = Counter(hbm_write=nq * d, stats_write=2 * nq)
            for j in range(n_kv):
                tiles = [(i, *_tile(p, t, i, j)[1:]) for i in range(n_q) if _tile(p, t, i, j)[0]]
                if tiles:
                    c["hbm_read"] += 2 * tiles[0][2] * d
                for _, r, cols in tiles:
                    c["hbm_read"] += 2 * r * d
                    c["stats_read"] += 2 * r
                    c["hbm_write"] += r * d
                    c["stats_write"] += 2 * r
                    c["flops"] += 4 * r * cols * d
                    c["exps"] += r * cols + r
                    c["iters"] += 1
            ctas.append(c)
        return [ctas]
    if algo == "naive":
        k1, k2, k3 = [], [], []
        for _ in bh:
            for i in range(n_q):
                r = min(t.block_m, nq - i * t.block_m)
                first = nk * d if i == 0 else 0
                k1.append(
                    Counter(
                        hbm_read=r * d + first,
                        hbm_write=r * nk,
                        flops=2 * r * nk * d,
                        iters=n_kv,
                    )
                )
                k2.append(Counter(hbm_read=r * nk, hbm_write=r * nk, exps=r * nk, iters=n_kv))
                k3.append(
                    Counter(
                        hbm_read=r * nk + first,
                        hbm_write=r * d,
                        flops=2 * r * nk * d,
                        iters=n_kv,
                    )
                )
        return [k1, k2, k3]
    if algo == "fa2-bwd":
        pre, main, post = [], [], []
        for _ in bh:
            for i in range(n_q):
                r = min(t.block_m, nq - i * t.block_m)
                pre.append(Counter(hbm_read=2 * r * d, stats_write=r, iters=1))
                post.append(Counter(acc_read=r * d, hbm_write=r * d, iters=1))
            for j in range(n_kv):
                cols = min(t.block_n, nk - j * t.block_n)
                c = Counter(hbm_read=2 * cols * d, hbm_write=2 * cols * d)
                for i in range(n_q):
                    vis, r, _ = _tile(p, t, i, j)
                    if vis:
                        c["hbm_read"] += 2 * r * d
                        c["stats_read"] += 2 * r
                        c["acc_read"] += r * d
                        c["acc_write"] += r * d
                        c["flops"] += 10 * r * cols * d
                        c["exps"] += r * cols
                        c["iters"] += 1
                main.append(c)
        return [pre, main, post]
    if algo == "decode":
        # one launch: the head's last split also merges the partials, 32 splits a load
        rows = p.group * nq
        n_splits = splits or decode_splits(p.batch * p.kv_heads, n_kv, sms)
        chunk = cdiv(n_kv, n_splits)
        split_ctas = []
        for _ in range(p.batch * p.kv_heads):
            head = []
            for s in range(n_splits):
                blocks = range(s * chunk, min((s + 1) * chunk, n_kv))
                if not blocks:
                    continue
                c = Counter(hbm_read=rows * d, acc_write=rows * d, stats_write=rows)
                for j in blocks:
                    cols = min(t.block_n, nk - j * t.block_n)
                    c["hbm_read"] += 2 * cols * d
                    c["flops"] += 4 * rows * cols * d
                    c["exps"] += rows * cols + rows
                    c["iters"] += 1
                head.append(c)
            used = len(head)
            head[-1]["acc_read"] += used * rows * d
            head[-1]["stats_read"] += used * rows
            head[-1]["hbm_write"] += rows * d
            head[-1]["iters"] += -(-used // 32)
            split_ctas += head
        return [split_ctas]
    raise ValueError(algo)
