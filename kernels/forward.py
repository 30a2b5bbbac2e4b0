"""FlashAttention-2 forward pass in Triton: O = softmax(Q Kᵀ · scale, causal-masked) V, and LSE.

Loop order: one program (CTA) per (query block i, batch · head); Q_i stays on chip for the whole
program; the inner loop streams the K/V blocks that block i can see, in key order: first the
tiles that need no mask, then the partial ones (the causal diagonal and the ragged last key
block) with the mask applied. Fully masked tiles are skipped; causal query blocks are launched
heaviest first. The online softmax runs in the log2 domain (scale · log2 e folded into one
multiply, exp2), the accumulator stays unnormalized until the end, and each program writes its
O rows and one natural-log LSE per row (−∞, with O = 0, for a row that sees no key).

Memory: on Hopper tiles move through the tensor-memory copy engine. Where every tile is whole
and each tensor flattens to (B·H·N, d), the descriptors are made once on the host and each
program offsets its rows to its (batch, head); otherwise each program builds descriptors for its
(batch, head) (out-of-range rows and columns read as zeros, stores are clipped). Elsewhere, or
for strides the engine cannot take, plain masked loads. Grouped-query
attention reads K/V head h // group. head_dim is padded to a power of two on chip.

TRACE (compile-time): the program of one chosen (batch, head) also stores m, ℓ, α and the
accumulator after every inner iteration into a side buffer (kernels/instrumented.py). With
TRACE off that code does not exist in the compiled kernel. TIMELINE (compile-time, GPU only)
stores each program's start and end on the global timer and the SM it ran on.

On Hopper, where the tuned table says it is faster, `launch_forward` hands the call to the
warp-specialized Gluon forward instead (kernels/hopper_forward.py: a loader warp, two or three
consumer warpgroups, FlashAttention-3's schedule, optionally persistent), which Triton cannot
generate from this kernel.

Leaves out (this Triton kernel): dropout, attention bias, sliding windows, variable-length
(packed) batches, fp8, and persistent schedules.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import cuda

from flashscope.kernels.config import KernelConfig
from flashscope.kernels.fastlaunch import launch
from flashscope.kernels.hopper_forward import launch_forward_ws, tuned
from flashscope.kernels.launch import (
    LOG2E,
    cdiv,
    choose_config,
    dot_precision,
    flat_rows,
    output,
    pad_dim,
    prepare_tma,
    upcast,
    use_tma_for,
)


# Triton kernels keep compact argument lists, as in Triton's own tutorials.
# fmt: off
@triton.jit
def load_rows(src, base, row0, n_rows, stride, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr,
              D_PAD: tl.constexpr, USE_TMA: tl.constexpr):
    """A (ROWS, D_PAD) tile starting at row0; rows ≥ n_rows and columns ≥ HEAD_DIM read as 0."""
    if USE_TMA:
        tile = src.load([row0, 0])
    else:
        rows = row0 + tl.arange(0, ROWS)
        cols = tl.arange(0, D_PAD)
        mask = (rows < n_rows)[:, None] & (cols < HEAD_DIM)[None, :]
        ptrs = base + rows.to(tl.int64)[:, None] * stride + cols[None, :]
        tile = tl.load(ptrs, mask=mask, other=0.0)
    return tile


@triton.jit
def store_rows(dst, base, row0, n_rows, stride, tile, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr,
               D_PAD: tl.constexpr, USE_TMA: tl.constexpr):
    """Write a (ROWS, D_PAD) tile at row0, dropping rows ≥ n_rows and columns ≥ HEAD_DIM."""
    if USE_TMA:
        dst.store([row0, 0], tile)
    else:
        rows = row0 + tl.arange(0, ROWS)
        cols = tl.arange(0, D_PAD)
        mask = (rows < n_rows)[:, None] & (cols < HEAD_DIM)[None, :]
        tl.store(base + rows.to(tl.int64)[:, None] * stride + cols[None, :], tile, mask=mask)


@triton.jit
def make_source(base, n_rows, stride, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr,
                D_PAD: tl.constexpr, USE_TMA: tl.constexpr, host):
    """Where one head's (n_rows, HEAD_DIM) matrix is read or written.

    `host`, when not None, is a descriptor made on the host over the flattened (B·H·N, d) matrix
    (rows offset by `first_row`); else a descriptor built here, or the bare pointer.
    """
    if host is not None:
        src = host
    elif USE_TMA:
        src = tl.make_tensor_descriptor(base, shape=[n_rows, HEAD_DIM], strides=[stride, 1],
                                        block_shape=[ROWS, D_PAD])
    else:
        src = base
    return src


@triton.jit
def first_row(host, head, n_rows):
    """Row of a head's first row in its source: head · n_rows in a host-made descriptor over the
    flattened matrix (whole tiles only, so no tile reaches into the next head), else 0."""
    return head * n_rows if host is not None else 0


@triton.jit
def launch_index(n_blocks):
    """This program's place in launch order in a grid (n_blocks, rows): program_id 0 fastest."""
    return tl.program_id(0) + tl.program_id(1) * n_blocks


@triton.jit
def causal_order(n_blocks, band, HEAVY_LAST: tl.constexpr):
    """(block, batch·head row) of this program in a causal grid (n_blocks, batch·heads).

    Rows go in bands of `band` consecutive ones; within a band the programs take the heaviest
    block of every row first, then the next heaviest, so each band, and the grid, ends on short
    work (band 1, the default: heaviest first within each row, row after row). HEAVY_LAST: the
    last block is the heaviest (query blocks); else the first (key blocks). Bands of several
    rows were measured no faster on an H200 (benchmarks/launch_order.py): kept as an option.
    """
    n_rows = tl.num_programs(1)
    pid = launch_index(n_blocks)
    first = pid // (band * n_blocks) * band
    size = tl.minimum(band, n_rows - first)
    within = pid - first * n_blocks
    step = within // size
    row = first + within - step * size
    block = n_blocks - 1 - step if HEAVY_LAST else step
    return block, row


@triton.jit
def online_softmax_step(acc, l, m, s, v, qk_scale2, rows, cols, n_k, off,
                        MASKED: tl.constexpr, CAUSAL: tl.constexpr, POS_SCALE: tl.constexpr,
                        P_DTYPE: tl.constexpr, UPCAST: tl.constexpr, DOT_PREC: tl.constexpr):
    """Tile (i, j) given S = Q Kⱼᵀ: running max/sum update and Õ ← α·Õ + P Vⱼ (log2 domain)."""
    if MASKED:
        keep = (cols < n_k)[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + off)
        s = tl.where(keep, s * qk_scale2, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that saw nothing yet
        p = tl.math.exp2(s - m_sub[:, None])
        alpha = tl.math.exp2(m - m_sub)
    else:
        if POS_SCALE:  # max commutes with a positive scale: one FMA per score
            m_new = tl.maximum(m, tl.max(s, 1) * qk_scale2)
            p = tl.math.exp2(s * qk_scale2 - m_new[:, None])
        else:
            s = s * qk_scale2
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m - m_new)
    l = l * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    p = p.to(P_DTYPE)  # P is rounded to the input dtype before P·V, as FlashAttention does
    if UPCAST:
        p = p.to(tl.float32)
    acc = tl.dot(p, v, acc, input_precision=DOT_PREC)
    return acc, l, m_new, alpha


@triton.jit
def load_kv(k_src, k_base, v_src, v_base, start_n, N_K, s_kn, s_vn, HEAD_DIM: tl.constexpr,
            BLOCK_N: tl.constexpr, D_PAD: tl.constexpr, USE_TMA: tl.constexpr,
            UPCAST: tl.constexpr):
    k = load_rows(k_src, k_base, start_n, N_K, s_kn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA)
    v = load_rows(v_src, v_base, start_n, N_K, s_vn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    return k, v


@triton.jit
def record_state(TR, pid_m, j, n_kv, m, l, alpha, acc, BLOCK_M: tl.constexpr,
                 D_PAD: tl.constexpr):
    """Side buffer row block [pid_m, j]: (BLOCK_M, D_PAD + 3) = accumulator | m | ℓ | α."""
    width: tl.constexpr = D_PAD + 3
    base = TR + (pid_m * n_kv + j).to(tl.int64) * (BLOCK_M * width)
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, D_PAD)
    tl.store(base + r[:, None] * width + c[None, :], acc)
    tl.store(base + r * width + D_PAD, m * 0.6931471805599453)  # log2 domain → natural
    tl.store(base + r * width + D_PAD + 1, l)
    tl.store(base + r * width + D_PAD + 2, alpha)


@triton.jit
def _attn_fwd(Q, K, V, O, LSE, TR, CLK, qk_scale2,
              s_qb, s_qh, s_qn, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_ob, s_oh, s_on,
              H, GROUP, N_Q, N_K, trace_bh, BAND, QD, KD, VD, OD,
              HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, POS_SCALE: tl.constexpr,
              USE_TMA: tl.constexpr, UPCAST: tl.constexpr, DOT_PREC: tl.constexpr,
              TRACE: tl.constexpr, PREFETCH: tl.constexpr, TIMELINE: tl.constexpr):
    n_mb = tl.cdiv(N_Q, BLOCK_M)
    if TIMELINE:
        t_begin = cuda.globaltimer()
    if CAUSAL:  # longest rows first: the tail of the grid is short work
        pid_m, bh = causal_order(n_mb, BAND, True)
    else:
        pid_m = tl.program_id(0)
        bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP
    q_base = Q + b.to(tl.int64) * s_qb + h.to(tl.int64) * s_qh
    k_base = K + b.to(tl.int64) * s_kb + hk.to(tl.int64) * s_kh
    v_base = V + b.to(tl.int64) * s_vb + hk.to(tl.int64) * s_vh
    o_base = O + b.to(tl.int64) * s_ob + h.to(tl.int64) * s_oh
    q_src = make_source(q_base, N_Q, s_qn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA, QD)
    k_src = make_source(k_base, N_K, s_kn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, KD)
    v_src = make_source(v_base, N_K, s_vn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, VD)
    o_src = make_source(o_base, N_Q, s_on, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA, OD)
    q_row = first_row(QD, b * H + h, N_Q)
    kv_row = first_row(KD, b * (H // GROUP) + hk, N_K)

    m0 = pid_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    off = N_K - N_Q  # bottom-right causal alignment: key c visible to row r iff c ≤ r + off
    if CAUSAL:
        last_row = tl.minimum(m0 + BLOCK_M, N_Q) - 1
        hi = tl.maximum(tl.minimum(N_K, last_row + off + 1), 0)  # keys [0, hi) are visible
        full_hi = tl.maximum(m0 + off + 1, 0) // BLOCK_N * BLOCK_N  # every row sees these
        full_hi = tl.minimum(full_hi, N_K // BLOCK_N * BLOCK_N)
        full_hi = tl.minimum(full_hi, hi)
    else:
        hi = N_K
        full_hi = N_K // BLOCK_N * BLOCK_N
    n_kv = tl.cdiv(N_K, BLOCK_N)

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    # Q_i stays on chip for the whole program
    q = load_rows(q_src, q_base, q_row + m0, N_Q, s_qn, HEAD_DIM, BLOCK_M, D_PAD, USE_TMA)
    if UPCAST:
        q = q.to(tl.float32)
    P_DTYPE: tl.constexpr = V.dtype.element_ty

    if PREFETCH:
        # S of the next tile is issued before this tile's softmax, so the tensor cores work
        # on it while the exponentials run (FlashAttention-3's overlap within a warpgroup).
        if full_hi > 0:
            k, v = load_kv(k_src, k_base, v_src, v_base, kv_row, N_K, s_kn, s_vn, HEAD_DIM, BLOCK_N,
                           D_PAD, USE_TMA, UPCAST)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
            for start_n in range(0, full_hi - BLOCK_N, BLOCK_N):
                k, v_next = load_kv(k_src, k_base, v_src, v_base, kv_row + start_n + BLOCK_N, N_K,
                                    s_kn, s_vn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, UPCAST)
                s_next = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
                cols = start_n + tl.arange(0, BLOCK_N)
                acc, l, m, alpha = online_softmax_step(acc, l, m, s, v, qk_scale2, rows, cols,
                                                       N_K, off, False, CAUSAL, POS_SCALE,
                                                       P_DTYPE, UPCAST, DOT_PREC)
                if TRACE:  # noqa: SIM102 — compile-time flag outside, runtime test inside
                    if bh == trace_bh:
                        record_state(TR, pid_m, start_n // BLOCK_N, n_kv, m, l, alpha, acc,
                                     BLOCK_M, D_PAD)
                s = s_next
                v = v_next
            cols = full_hi - BLOCK_N + tl.arange(0, BLOCK_N)
            acc, l, m, alpha = online_softmax_step(acc, l, m, s, v, qk_scale2, rows, cols, N_K,
                                                   off, False, CAUSAL, POS_SCALE, P_DTYPE,
                                                   UPCAST, DOT_PREC)
            if TRACE:  # noqa: SIM102 — compile-time flag outside, runtime test inside
                if bh == trace_bh:
                    record_state(TR, pid_m, full_hi // BLOCK_N - 1, n_kv, m, l, alpha, acc,
                                 BLOCK_M, D_PAD)
    else:
        for start_n in range(0, full_hi, BLOCK_N):
            k, v = load_kv(k_src, k_base, v_src, v_base, kv_row + start_n, N_K, s_kn, s_vn,
                           HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, UPCAST)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
            cols = start_n + tl.arange(0, BLOCK_N)
            acc, l, m, alpha = online_softmax_step(acc, l, m, s, v, qk_scale2, rows, cols, N_K,
                                                   off, False, CAUSAL, POS_SCALE, P_DTYPE,
                                                   UPCAST, DOT_PREC)
            if TRACE:  # noqa: SIM102 — compile-time flag outside, runtime test inside
                if bh == trace_bh:
                    record_state(TR, pid_m, start_n // BLOCK_N, n_kv, m, l, alpha, acc, BLOCK_M,
                                 D_PAD)
    for start_n in range(full_hi, hi, BLOCK_N):
        k, v = load_kv(k_src, k_base, v_src, v_base, kv_row + start_n, N_K, s_kn, s_vn, HEAD_DIM,
                       BLOCK_N, D_PAD, USE_TMA, UPCAST)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
        cols = start_n + tl.arange(0, BLOCK_N)
        acc, l, m, alpha = online_softmax_step(acc, l, m, s, v, qk_scale2, rows, cols, N_K, off,
                                               True, CAUSAL, POS_SCALE, P_DTYPE, UPCAST,
                                               DOT_PREC)
        if TRACE:  # noqa: SIM102 — compile-time flag outside, runtime test inside
            if bh == trace_bh:
                record_state(TR, pid_m, start_n // BLOCK_N, n_kv, m, l, alpha, acc, BLOCK_M,
                             D_PAD)

    seen = l > 0
    o = acc / tl.where(seen, l, 1.0)[:, None]
    lse = tl.where(seen, (m + tl.math.log2(tl.where(seen, l, 1.0))) * 0.6931471805599453,
                   float("-inf"))
    tl.store(LSE + bh.to(tl.int64) * N_Q + rows, lse, mask=rows < N_Q)
    store_rows(o_src, o_base, q_row + m0, N_Q, s_on, o.to(O.dtype.element_ty), HEAD_DIM, BLOCK_M,
               D_PAD, USE_TMA)
    if TIMELINE:  # this program's start and end (ns, the GPU's global timer) and its SM
        slot = CLK + 4 * launch_index(n_mb).to(tl.int64)
        tl.store(slot, t_begin)
        tl.store(slot + 1, cuda.globaltimer())
        tl.store(slot + 2, cuda.smid().to(tl.int64))
        tl.store(slot + 3, (bh * n_mb + pid_m).to(tl.int64))


# fmt: on


def check_band(band: int) -> None:
    if isinstance(band, bool) or not isinstance(band, int) or band < 1:
        raise ValueError(f"band must be a whole number of rows ≥ 1, got {band!r}")


def host_descriptors(q, k, v, o, cfg: KernelConfig, d_pad: int, tma: bool, want: bool | None):
    """(Q, K, V, O) descriptors made once on the host, or None where the kernel builds its own."""
    return describe_on_host(
        [(q, cfg.block_m), (k, cfg.block_n), (v, cfg.block_n), (o, cfg.block_m)],
        q.shape[2] % cfg.block_m == 0 and k.shape[2] % cfg.block_n == 0,
        d_pad, tma, want,
    )  # fmt: skip


def describe_on_host(
    tiles: list[tuple[torch.Tensor, int]], whole: bool, d_pad: int, tma: bool, want: bool | None
) -> tuple | None:
    """A descriptor per (tensor, tile rows) over its flattened (B·H·N, d) matrix, or None.

    None when the kernel should build its own: no tensor-memory path, `want` False, or (with
    `want` None) tiles that are not whole or a tensor that does not flatten. With `want` True
    those last two are a ValueError.
    """
    from triton.tools.tensor_descriptor import TensorDescriptor

    if want is False or not tma:
        return None
    if not (whole and all(flat_rows(x) for x, _ in tiles)):
        if want:
            raise ValueError("host descriptors need whole tiles and (B·H·N, d)-flattenable inputs")
        return None

    def desc(x: torch.Tensor, rows: int) -> TensorDescriptor:
        n_rows = x.shape[0] * x.shape[1] * x.shape[2]
        return TensorDescriptor(x, [n_rows, x.shape[3]], [x.stride(2), 1], [rows, d_pad])

    return tuple(desc(x, rows) for x, rows in tiles)


def launch_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float,
    config: KernelConfig | None = None,
    *,
    use_tma: bool | None = None,
    host_desc: bool | None = None,
    trace: tuple[int, torch.Tensor] | None = None,
    band: int = 1,
    timeline: torch.Tensor | None = None,
    use_ws: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the forward kernel on checked inputs: (O (B, H, N_q, d), LSE (B, H, N_q) fp32).

    `trace=(bh, buffer)` compiles the TRACE variant and fills `buffer` for program row bh. `band`:
    rows of a causal grid ordered together (`causal_order`; 1: row by row). `timeline` (GPU only;
    int64, 4 per program): compiles the TIMELINE variant, which stores each program's start and end
    (ns) and SM, and its (batch·head, block) as one index, in launch order
    (`flashscope.kernels.timeline`). `host_desc` (default: where possible) describes Q, K, V and O
    to the copy engine once, on the host, instead of in every program; it needs the tensor-memory
    path, whole tiles on both sides and each tensor flattenable to (B·H·N, d). `use_ws`: None runs
    the warp-specialized Gluon kernel (flashscope.kernels.hopper_forward) where this GPU's tuned
    table routes the call to it and nothing above asks for the Triton kernel (an explicit `config`,
    a trace, a timeline, a band, no tensor-memory path, no host descriptors); False always runs the
    Triton kernel.
    """
    plain = config is None and trace is None and timeline is None and band == 1
    if use_ws is not False and plain and use_tma is not False and host_desc is not False:
        ws = tuned(q, k, v, causal)
        if ws is not None:
            return launch_forward_ws(q, k, v, causal, scale, ws, checked=True)
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    d_pad = pad_dim(d)
    check_band(band)
    cfg = config or choose_config(
        "fwd", q.dtype, d_pad, causal,
        lambda c: launch_forward(q, k, v, causal, scale, c, use_tma=use_tma),
        seq_len=max(n_q, n_k),
    )  # fmt: skip
    o = output(q.shape, q.dtype, q.device)  # (B, H, N_q, d)
    lse = output((b, h, n_q), torch.float32, q.device)
    tma = use_tma_for([q, k, v, o], use_tma)
    tr_bh, tr_buf = trace if trace is not None else (-1, lse)
    grid = (cdiv(n_q, cfg.block_m), b * h)
    descs = host_descriptors(q, k, v, o, cfg, d_pad, tma, host_desc)
    prepare_tma(tma and descs is None)
    launch(
        _attn_fwd, grid,
        (q, k, v, o, lse, tr_buf, lse if timeline is None else timeline, scale * LOG2E,
         *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
         h, h // k.shape[1], n_q, n_k, tr_bh, band, *(descs or (None,) * 4)),
        dict(HEAD_DIM=d, D_PAD=d_pad, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=causal,
             POS_SCALE=scale >= 0, USE_TMA=tma, UPCAST=upcast(q.dtype),
             DOT_PREC=dot_precision(q.dtype), TRACE=trace is not None, PREFETCH=cfg.prefetch,
             TIMELINE=timeline is not None),
        cfg.launch_options(),
    )  # fmt: skip
    return o, lse
