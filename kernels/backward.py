"""FlashAttention-2 backward pass in Triton: dQ, dK, dV from Q, K, V, O, dO and the forward LSE.

Nothing of size N_q × N_k is stored: each tile recomputes P = exp(S − LSE) from the saved
log-sum-exp, and D = rowsum(dO ∘ O) comes from a preprocessing kernel. With
dS = P ∘ (dP − D): dV = Pᵀ dO, dK = scale · dSᵀ Q, dQ = scale · dS K.

Loop order (FlashAttention-2): one program per (key block j, batch · K/V head) holds K_j and V_j
and the fp32 accumulators dK_j, dV_j on chip, and walks over the query heads of its group and,
for each, the query blocks that see key block j (causal: from the diagonal down; partial tiles
masked first, then whole tiles unmasked). GQA gradients are summed over the group on chip.
dQ takes one of two routes (`dq_mode`):
- "atomic": each tile adds its dS K (fp32, BM × d) into a zeroed fp32 dQ buffer, with the
  tensor-memory engine's reduce-add on Hopper (plain atomics elsewhere); a last pass scales and
  casts. Five matrix products per tile, as the FlashAttention-2 paper counts.
- "separate": the dK/dV kernel skips dQ, and a second kernel, one program per (query block,
  batch · head), recomputes S and dP over the key blocks that block sees and accumulates dQ on
  chip (the forward's loop order). Seven products per tile pair, no atomics. On a GPU the dQ
  kernel runs on a side stream, concurrently with the dK/dV kernel (neither reads what the
  other writes), so each fills the SMs the other's last wave leaves idle.
The route per (head_dim, causal) is the one measured faster on this GPU (kernels/tuned.json).
Rows that saw no key (LSE = −∞) get P = 0 and so zero gradients.

The three kernels and their launchers share one module (over 400 lines) because they share the
tile helpers and the choice of dQ route.

Leaves out: dropout, attention bias, deterministic mode for the atomic route (fp32 sums land in
any order), sliding windows, variable-length batches.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import triton
import triton.language as tl

from flashscope.kernels.config import KernelConfig, first_tuned, route
from flashscope.kernels.device import interpreting
from flashscope.kernels.fastlaunch import launch
from flashscope.kernels.forward import (
    causal_order,
    check_band,
    describe_on_host,
    first_row,
    load_rows,
    make_source,
    store_rows,
)
from flashscope.kernels.launch import (
    LOG2E,
    cdiv,
    choose_config,
    dot_precision,
    dtype_key,
    gpu_name,
    output,
    pad_dim,
    prepare_tma,
    upcast,
    use_tma_for,
)


# Triton kernels keep compact argument lists, as in Triton's own tutorials.
# fmt: off
@triton.jit
def _bwd_preprocess(O, DO, DELTA, DQACC, s_ob, s_oh, s_on, s_db, s_dh, s_dn, H, N_Q,
                    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                    ZERO_DQ: tl.constexpr):
    """D = rowsum(dO ∘ O) in fp32: reads 2 · BLOCK_M · d elements, writes BLOCK_M. ZERO_DQ:
    also fills the same rows of the contiguous fp32 dQ accumulator DQACC with zeros (one launch
    instead of a fill of its own)."""
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    m0 = tl.program_id(0) * BLOCK_M
    o = load_rows(O, O + b.to(tl.int64) * s_ob + h.to(tl.int64) * s_oh, m0, N_Q, s_on, HEAD_DIM,
                  BLOCK_M, D_PAD, False)
    do = load_rows(DO, DO + b.to(tl.int64) * s_db + h.to(tl.int64) * s_dh, m0, N_Q, s_dn,
                   HEAD_DIM, BLOCK_M, D_PAD, False)
    rows = m0 + tl.arange(0, BLOCK_M)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + bh.to(tl.int64) * N_Q + rows, delta, mask=rows < N_Q)
    if ZERO_DQ:
        store_rows(DQACC, DQACC + bh.to(tl.int64) * N_Q * HEAD_DIM, m0, N_Q, HEAD_DIM,
                   tl.zeros([BLOCK_M, D_PAD], tl.float32), HEAD_DIM, BLOCK_M, D_PAD, False)


@triton.jit
def row_stats(LSE, DELTA, bh, rows, N_Q):
    """LSE in the log2 domain (+∞ where a row saw nothing or does not exist, so P = 0) and D."""
    lse = tl.load(LSE + bh.to(tl.int64) * N_Q + rows, mask=rows < N_Q, other=float("inf"))
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    delta = tl.load(DELTA + bh.to(tl.int64) * N_Q + rows, mask=rows < N_Q, other=0.0)
    return lse2, delta


@triton.jit
def dkdv_step(dk, dv, k, v, q_src, q_base, do_src, do_base, dq_src, dq_base, LSE, DELTA,
              bh, q_row, dq_row, m0, cols, N_Q, N_K, off, s_qn, s_dn, s_cn, qk_scale2,
              HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
              MASKED: tl.constexpr, CAUSAL: tl.constexpr, DQ_MODE: tl.constexpr,
              USE_TMA: tl.constexpr, UPCAST: tl.constexpr, DOT_PREC: tl.constexpr):
    """Tile (i, j) seen from key block j: transposed scores Sᵀ = K Qᵢᵀ, then dV, dK (and dQ)."""
    q = load_rows(q_src, q_base, q_row + m0, N_Q, s_qn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA)
    do = load_rows(do_src, do_base, q_row + m0, N_Q, s_dn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA)
    dtype: tl.constexpr = q.dtype
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    rows = m0 + tl.arange(0, BLOCK_M)
    lse2, delta = row_stats(LSE, DELTA, bh, rows, N_Q)
    # Both products that need only loaded tiles go first: the exponentials of Sᵀ then overlap
    # the tensor cores' work on dPᵀ.
    st = tl.dot(k, tl.trans(q), input_precision=DOT_PREC)  # (BN, BM)
    dpt = tl.dot(v, tl.trans(do), input_precision=DOT_PREC)  # (BN, BM)
    pt = tl.math.exp2(st * qk_scale2 - lse2[None, :])
    if MASKED:
        keep = (cols < N_K)[:, None]
        if CAUSAL:
            keep = keep & (cols[:, None] <= rows[None, :] + off)
        pt = tl.where(keep, pt, 0.0)
    ptc = pt.to(dtype)
    if UPCAST:
        ptc = ptc.to(tl.float32)
    dv = tl.dot(ptc, do, dv, input_precision=DOT_PREC)
    dst = (pt * (dpt - delta[None, :])).to(dtype)
    if UPCAST:
        dst = dst.to(tl.float32)
    dk = tl.dot(dst, q, dk, input_precision=DOT_PREC)
    if DQ_MODE != 0:
        dq = tl.dot(tl.trans(dst), k, input_precision=DOT_PREC)  # (BM, D_PAD) fp32, unscaled
        if DQ_MODE == 2:
            dq_src.atomic_add([dq_row + m0, 0], dq)
        else:
            c = tl.arange(0, D_PAD)
            mask = (rows < N_Q)[:, None] & (c < HEAD_DIM)[None, :]
            ptrs = dq_base + rows.to(tl.int64)[:, None] * s_cn + c[None, :]
            tl.atomic_add(ptrs, dq, mask=mask, sem="relaxed")
    return dk, dv


@triton.jit
def _attn_bwd_dkdv(Q, K, V, DO, DK, DV, DQACC, LSE, DELTA, qk_scale2, scale,
                   s_qb, s_qh, s_qn, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_db, s_dh, s_dn,
                   s_kgb, s_kgh, s_kgn, s_vgb, s_vgh, s_vgn, s_cb, s_ch, s_cn,
                   H, H_KV, GROUP, N_Q, N_K, BAND, QD, KD, VD, DOD, DKD, DVD, DQD,
                   HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, DQ_MODE: tl.constexpr,
                   USE_TMA: tl.constexpr, UPCAST: tl.constexpr, DOT_PREC: tl.constexpr):
    if CAUSAL:  # key block 0, which every query row sees, first
        pid_n, bhk = causal_order(tl.cdiv(N_K, BLOCK_N), BAND, False)
    else:
        pid_n = tl.program_id(0)
        bhk = tl.program_id(1)
    b = bhk // H_KV
    hk = bhk % H_KV
    n0 = pid_n * BLOCK_N
    cols = n0 + tl.arange(0, BLOCK_N)
    k_base = K + b.to(tl.int64) * s_kb + hk.to(tl.int64) * s_kh
    v_base = V + b.to(tl.int64) * s_vb + hk.to(tl.int64) * s_vh
    k_src = make_source(k_base, N_K, s_kn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, KD)
    v_src = make_source(v_base, N_K, s_vn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, VD)
    kv_row = first_row(KD, bhk, N_K)
    k = load_rows(k_src, k_base, kv_row + n0, N_K, s_kn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA)
    v = load_rows(v_src, v_base, kv_row + n0, N_K, s_vn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    dk = tl.zeros([BLOCK_N, D_PAD], tl.float32)
    dv = tl.zeros([BLOCK_N, D_PAD], tl.float32)

    off = N_K - N_Q
    end = tl.cdiv(N_Q, BLOCK_M) * BLOCK_M
    if CAUSAL:
        # rows ≥ n0 − off see some key of this block; rows ≥ n0 + BN − 1 − off see all of it
        lo = tl.maximum(n0 - off, 0) // BLOCK_M * BLOCK_M
        full_lo = tl.cdiv(tl.maximum(n0 + BLOCK_N - 1 - off, 0), BLOCK_M) * BLOCK_M
        lo = tl.minimum(lo, end)
        full_lo = tl.minimum(full_lo, end)
    else:
        lo = 0
        full_lo = 0
    if n0 + BLOCK_N > N_K:
        full_lo = end  # ragged key block: its columns past N_k must be masked everywhere

    for g in range(GROUP):
        h = hk * GROUP + g
        bh = b * H + h
        q_base = Q + b.to(tl.int64) * s_qb + h.to(tl.int64) * s_qh
        do_base = DO + b.to(tl.int64) * s_db + h.to(tl.int64) * s_dh
        dq_base = DQACC + b.to(tl.int64) * s_cb + h.to(tl.int64) * s_ch
        q_src = make_source(q_base, N_Q, s_qn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA, QD)
        do_src = make_source(do_base, N_Q, s_dn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA, DOD)
        q_row = first_row(QD, bh, N_Q)
        if DQ_MODE == 2:
            dq_src = make_source(dq_base, N_Q, s_cn, HEAD_DIM, BLOCK_M, D_PAD, True, DQD)
        else:
            dq_src = dq_base
        dq_row = first_row(DQD, bh, N_Q)
        for m0 in range(lo, full_lo, BLOCK_M):
            dk, dv = dkdv_step(dk, dv, k, v, q_src, q_base, do_src, do_base, dq_src, dq_base,
                               LSE, DELTA, bh, q_row, dq_row, m0, cols, N_Q, N_K, off, s_qn, s_dn,
                               s_cn, qk_scale2, HEAD_DIM, D_PAD, BLOCK_M, True, CAUSAL, DQ_MODE,
                               USE_TMA, UPCAST, DOT_PREC)
        for m0 in range(full_lo, end, BLOCK_M):
            dk, dv = dkdv_step(dk, dv, k, v, q_src, q_base, do_src, do_base, dq_src, dq_base,
                               LSE, DELTA, bh, q_row, dq_row, m0, cols, N_Q, N_K, off, s_qn, s_dn,
                               s_cn, qk_scale2, HEAD_DIM, D_PAD, BLOCK_M, False, CAUSAL, DQ_MODE,
                               USE_TMA, UPCAST, DOT_PREC)

    dk_base = DK + b.to(tl.int64) * s_kgb + hk.to(tl.int64) * s_kgh
    dv_base = DV + b.to(tl.int64) * s_vgb + hk.to(tl.int64) * s_vgh
    dk_dst = make_source(dk_base, N_K, s_kgn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, DKD)
    dv_dst = make_source(dv_base, N_K, s_vgn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, DVD)
    store_rows(dk_dst, dk_base, kv_row + n0, N_K, s_kgn, (dk * scale).to(DK.dtype.element_ty),
               HEAD_DIM, BLOCK_N, D_PAD, USE_TMA)
    store_rows(dv_dst, dv_base, kv_row + n0, N_K, s_vgn, dv.to(DV.dtype.element_ty), HEAD_DIM,
               BLOCK_N, D_PAD, USE_TMA)


@triton.jit
def dq_step(dq, q, do, lse2, delta, k_src, k_base, v_src, v_base, kv_row, n0, rows, N_K, off,
            s_kn, s_vn, qk_scale2, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
            BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
            USE_TMA: tl.constexpr, UPCAST: tl.constexpr, DOT_PREC: tl.constexpr):
    """Tile (i, j) seen from query block i: S, P, dP, dS, then dQ += dS K_j."""
    k = load_rows(k_src, k_base, kv_row + n0, N_K, s_kn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA)
    v = load_rows(v_src, v_base, kv_row + n0, N_K, s_vn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA)
    dtype: tl.constexpr = k.dtype
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)  # (BM, BN)
    dp = tl.dot(do, tl.trans(v), input_precision=DOT_PREC)
    p = tl.math.exp2(s * qk_scale2 - lse2[:, None])
    if MASKED:
        cols = n0 + tl.arange(0, BLOCK_N)
        keep = (cols < N_K)[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + off)
        p = tl.where(keep, p, 0.0)
    ds = (p * (dp - delta[:, None])).to(dtype)
    if UPCAST:
        ds = ds.to(tl.float32)
    return tl.dot(ds, k, dq, input_precision=DOT_PREC)


@triton.jit
def _attn_bwd_dq(Q, K, V, DO, DQ, LSE, DELTA, qk_scale2, scale,
                 s_qb, s_qh, s_qn, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_db, s_dh, s_dn,
                 s_gb, s_gh, s_gn, H, GROUP, N_Q, N_K, BAND, QD, KD, VD, DOD, DQD,
                 HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, USE_TMA: tl.constexpr,
                 UPCAST: tl.constexpr, DOT_PREC: tl.constexpr):
    n_mb = tl.cdiv(N_Q, BLOCK_M)
    if CAUSAL:
        pid_m, bh = causal_order(n_mb, BAND, True)
    else:
        pid_m = tl.program_id(0)
        bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP
    q_base = Q + b.to(tl.int64) * s_qb + h.to(tl.int64) * s_qh
    do_base = DO + b.to(tl.int64) * s_db + h.to(tl.int64) * s_dh
    k_base = K + b.to(tl.int64) * s_kb + hk.to(tl.int64) * s_kh
    v_base = V + b.to(tl.int64) * s_vb + hk.to(tl.int64) * s_vh
    dq_base = DQ + b.to(tl.int64) * s_gb + h.to(tl.int64) * s_gh
    q_src = make_source(q_base, N_Q, s_qn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA, QD)
    do_src = make_source(do_base, N_Q, s_dn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA, DOD)
    k_src = make_source(k_base, N_K, s_kn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, KD)
    v_src = make_source(v_base, N_K, s_vn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, VD)
    dq_dst = make_source(dq_base, N_Q, s_gn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA, DQD)
    q_row = first_row(QD, bh, N_Q)
    kv_row = first_row(KD, b * (H // GROUP) + hk, N_K)

    m0 = pid_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    q = load_rows(q_src, q_base, q_row + m0, N_Q, s_qn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA)
    do = load_rows(do_src, do_base, q_row + m0, N_Q, s_dn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    lse2, delta = row_stats(LSE, DELTA, bh, rows, N_Q)
    off = N_K - N_Q
    if CAUSAL:
        last_row = tl.minimum(m0 + BLOCK_M, N_Q) - 1
        hi = tl.maximum(tl.minimum(N_K, last_row + off + 1), 0)
        full_hi = tl.maximum(m0 + off + 1, 0) // BLOCK_N * BLOCK_N
        full_hi = tl.minimum(tl.minimum(full_hi, N_K // BLOCK_N * BLOCK_N), hi)
    else:
        hi = N_K
        full_hi = N_K // BLOCK_N * BLOCK_N
    dq = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    for n0 in range(0, full_hi, BLOCK_N):
        dq = dq_step(dq, q, do, lse2, delta, k_src, k_base, v_src, v_base, kv_row, n0, rows, N_K,
                     off, s_kn, s_vn, qk_scale2, HEAD_DIM, D_PAD, BLOCK_N, False, CAUSAL, USE_TMA,
                     UPCAST, DOT_PREC)
    for n0 in range(full_hi, hi, BLOCK_N):
        dq = dq_step(dq, q, do, lse2, delta, k_src, k_base, v_src, v_base, kv_row, n0, rows, N_K,
                     off, s_kn, s_vn, qk_scale2, HEAD_DIM, D_PAD, BLOCK_N, True, CAUSAL, USE_TMA,
                     UPCAST, DOT_PREC)
    store_rows(dq_dst, dq_base, q_row + m0, N_Q, s_gn, (dq * scale).to(DQ.dtype.element_ty),
               HEAD_DIM, BLOCK_M, D_PAD, USE_TMA)


# fmt: on


DQ_MODES = ("separate", "atomic")


def preprocess(
    o: torch.Tensor,
    do: torch.Tensor,
    dlse: torch.Tensor | None = None,
    zero_dq: torch.Tensor | None = None,
) -> torch.Tensor:
    """D = rowsum(dO ∘ O) (B, H, N_q) fp32, minus LSE's own gradient when there is one.
    `zero_dq`: a contiguous fp32 tensor shaped like the queries, filled with zeros on the way."""
    b, h, n_q, d = o.shape
    d_pad = pad_dim(d)
    delta = output((b, h, n_q), torch.float32, o.device)
    block = 64 if d_pad <= 128 else 32
    if zero_dq is not None and not (zero_dq.is_contiguous() and zero_dq.shape == o.shape):
        raise ValueError("zero_dq must be contiguous and shaped like the output")
    launch(
        _bwd_preprocess, (cdiv(n_q, block), b * h),
        (o, do, delta, delta if zero_dq is None else zero_dq, *o.stride()[:3],
         *do.stride()[:3], h, n_q),
        dict(HEAD_DIM=d, D_PAD=d_pad, BLOCK_M=block, ZERO_DQ=zero_dq is not None), {},
    )  # fmt: skip
    if dlse is not None:
        delta -= dlse.float()  # LSE's gradient enters as dS = P ∘ (dP − D + dLSE)
    return delta


def _common(q: torch.Tensor, causal: bool, tma: bool) -> dict[str, object]:
    return {
        "HEAD_DIM": q.shape[-1],
        "D_PAD": pad_dim(q.shape[-1]),
        "CAUSAL": causal,
        "USE_TMA": tma,
        "UPCAST": upcast(q.dtype),
        "DOT_PREC": dot_precision(q.dtype),
    }


def run_dkdv(
    q,
    k,
    v,
    do,
    lse,
    delta,
    causal,
    scale,
    cfg,
    *,
    dq_acc=None,
    use_tma=None,
    host_desc=None,
    band=1,
):
    """The dK/dV kernel; with `dq_acc` (fp32, like q) it also adds its dQ share there."""
    b, h, n_q, _ = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    dk = output(k.shape, k.dtype, k.device)  # (B, H_kv, N_k, d)
    dv = output(v.shape, v.dtype, v.device)
    acc = dq_acc if dq_acc is not None else delta
    tma = use_tma_for([q, k, v, do, dk, dv] + ([dq_acc] if dq_acc is not None else []), use_tma)
    mode = 0 if dq_acc is None else (2 if tma and not interpreting() else 1)
    acc_strides = dq_acc.stride()[:3] if dq_acc is not None else (0, 0, 0)
    whole = n_q % cfg.block_m == 0 and n_k % cfg.block_n == 0
    tiles = [(q, cfg.block_m), (k, cfg.block_n), (v, cfg.block_n), (do, cfg.block_m),
             (dk, cfg.block_n), (dv, cfg.block_n)]  # fmt: skip
    if mode == 2:  # the fp32 dQ accumulator's reduce-adds go through a descriptor too
        tiles.append((dq_acc, cfg.block_m))
    descs = describe_on_host(tiles, whole, pad_dim(q.shape[-1]), tma and mode != 1, host_desc)
    if descs is not None and mode != 2:
        descs = (*descs, None)
    prepare_tma(tma and descs is None)
    launch(
        _attn_bwd_dkdv, (cdiv(n_k, cfg.block_n), b * h_kv),
        (q, k, v, do, dk, dv, acc, lse, delta, scale * LOG2E, scale,
         *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
         *dk.stride()[:3], *dv.stride()[:3], *acc_strides,
         h, h_kv, h // h_kv, n_q, n_k, band,
         *(descs or (None,) * 7)),
        dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, DQ_MODE=mode, **_common(q, causal, tma)),
        cfg.launch_options(),
    )  # fmt: skip
    return dk, dv


def run_dq(q, k, v, do, lse, delta, causal, scale, cfg, *, use_tma=None, host_desc=None, band=1):
    """The separate dQ kernel: one program per (query block, batch · head)."""
    b, h, n_q, _ = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    dq = output(q.shape, q.dtype, q.device)  # (B, H, N_q, d)
    tma = use_tma_for([q, k, v, do, dq], use_tma)
    whole = n_q % cfg.block_m == 0 and n_k % cfg.block_n == 0
    tiles = [(q, cfg.block_m), (k, cfg.block_n), (v, cfg.block_n), (do, cfg.block_m),
             (dq, cfg.block_m)]  # fmt: skip
    descs = describe_on_host(tiles, whole, pad_dim(q.shape[-1]), tma, host_desc)
    prepare_tma(tma and descs is None)
    launch(
        _attn_bwd_dq, (cdiv(n_q, cfg.block_m), b * h),
        (q, k, v, do, dq, lse, delta, scale * LOG2E, scale,
         *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
         *dq.stride()[:3], h, h // h_kv, n_q, n_k, band,
         *(descs or (None,) * 5)),
        dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, **_common(q, causal, tma)),
        cfg.launch_options(),
    )  # fmt: skip
    return dq


def launch_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    do: torch.Tensor,
    causal: bool,
    scale: float,
    config: KernelConfig | None = None,
    *,
    dq_mode: str | None = None,
    dq_config: KernelConfig | None = None,
    dlse: torch.Tensor | None = None,
    use_tma: bool | None = None,
    host_desc: bool | None = None,
    band: int = 1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ (like q), dK and dV (like k) for checked inputs; `dlse` is LSE's own gradient, if any.

    config: the dK/dV kernel (block_n keys per program, block_m query rows per step).
    dq_config: the separate dQ kernel (block_m rows per program, block_n keys per step).
    host_desc: descriptors made on the host (default: where the route and the shapes allow).
    band: rows of a causal grid ordered together (`forward.causal_order`; 1: row by row).
    """
    check_band(band)
    d_pad = pad_dim(q.shape[-1])
    n = max(q.shape[2], k.shape[2])
    mode = dq_mode or default_dq_mode(q.dtype, d_pad, causal, n)
    if mode not in DQ_MODES:
        raise ValueError(f"dq_mode must be one of {DQ_MODES}, got {mode!r}")
    delta = preprocess(o, do, dlse)
    args = (q, k, v, do, lse, delta, causal, scale)
    how = {"use_tma": use_tma, "host_desc": host_desc, "band": band}

    def dkdv_only(c: KernelConfig) -> object:
        atomic = mode == "atomic"
        acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if atomic else None
        return run_dkdv(*args, c, dq_acc=acc, **how)

    bwd = "bwd" if mode == "separate" else "bwd-atomic"
    cfg = config or choose_config(bwd, q.dtype, d_pad, causal, dkdv_only, seq_len=n)
    if mode == "atomic":
        dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)  # (B, H, N_q, d)
        dk, dv = run_dkdv(*args, cfg, dq_acc=dq_acc, **how)
        return (dq_acc * scale).to(q.dtype), dk, dv
    qc = dq_config or choose_config(
        "bwd-dq", q.dtype, d_pad, causal, lambda c: run_dq(*args, c, **how), seq_len=n
    )
    if interpreting():
        dk, dv = run_dkdv(*args, cfg, **how)
        return run_dq(*args, qc, **how), dk, dv
    # The two kernels are independent: the dQ kernel runs on a side stream, so its programs
    # fill the SMs that the dK/dV kernel's last wave leaves idle (and the other way round).
    main, side = torch.cuda.current_stream(), _side_stream(q.device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        dq = run_dq(*args, qc, **how)
    dk, dv = run_dkdv(*args, cfg, **how)
    main.wait_stream(side)
    dq.record_stream(main)
    return dq, dk, dv


@lru_cache
def _side_stream(device: torch.device) -> torch.cuda.Stream:
    return torch.cuda.Stream(device=device)


def default_dq_mode(
    dtype: torch.dtype, d_pad: int, causal: bool, seq_len: int | None = None
) -> str:
    """The dQ route this GPU's tuned table found faster (for the sequence-length bucket of
    `seq_len` where one was tuned); "separate" where nothing was measured."""
    if interpreting():
        return "separate"
    key = dtype_key("bwd-route", dtype, d_pad, causal)
    found = first_tuned(route, gpu_name(), key, seq_len)
    return found if found is not None else "separate"
