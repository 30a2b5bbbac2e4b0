"""Flash-Decoding in Triton: a few new query tokens against a long K/V cache, split over the cache.

    flash_decode(q, k_cache, v_cache, cache_seqlens=None, sm_scale=None, *, config=None,
                 splits=None, block_table=None) → O

q (B, H, N_q, d) with 1 ≤ N_q ≤ 16; k_cache and v_cache (B, H_kv, N_cache, d); cache_seqlens
(B,) integers in [0, N_cache]: batch b attends to its first cache_seqlens[b] keys (all of them
when None). Every query token sees every valid key (no causal mask); a batch with no valid key
gets O = 0, the fully-masked-row convention of the other kernels.

Paged caches (vLLM's block tables, in FlashAttention's `flash_attn_with_kvcache` layout): with
`block_table`, k_cache and v_cache are pools of pages (num_pages, page_size, H_kv, d), page_size
a power of two, and block_table is int32 (B, max_pages): key n of batch b lives in page
block_table[b, n // page_size], slot n % page_size. N_cache is then max_pages · page_size, and
cache_seqlens, when None, is N_cache for every batch (every listed page full). The kernel reads
the entries of a batch's first ⌈cache_seqlens[b] / page_size⌉ pages only, and no slot past
cache_seqlens[b]: the rest of the table and of the last page may hold anything. The indices it
reads must lie in [0, num_pages): they are not checked (that would wait for the GPU), and one
out of range reads outside the pool. Each key block gathers its rows page by page; where
page_size is a multiple of the block (block_n keys), a block lies in one page and costs one
table lookup. Paged reads go through pointers, never tensor descriptors.

Loop order: the split kernel runs one program per (split s, batch · K/V head). It packs the group =
H / H_kv query heads that share the K/V head, times N_q tokens, into one tile of R = group · N_q
rows (padded to 16 on chip), so each K/V block is read once for all of them, and streams the key
blocks [s·b, (s+1)·b) of its chunk (b = ⌈n_blocks / S⌉) with the online softmax. It writes a
normalized fp32 partial O and the partial LSE for its R rows (−∞ for an empty chunk), then
counts itself done on its (batch · K/V head)'s counter; the program that arrives last merges the
S partials of the rows by their LSE and writes O, and sets the counter back to 0 for the next
call. One launch instead of a split kernel and a reduce kernel: the merge starts as soon as the
last chunk is read, without a second launch's gap, and reads each split's row as one tile
instead of one split after another (the counters live per device and stream, so concurrent calls
on two streams do not share them).
S = flashscope.simulator.core.problem.decode_splits(B · H_kv, n_blocks, SMs).

Leaves out: appending new keys to the cache, causal masking among the new tokens, rotary
embeddings, fp8 caches.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from flashscope.kernels.config import KernelConfig, lookup
from flashscope.kernels.device import interpreting
from flashscope.kernels.fastlaunch import launch
from flashscope.kernels.forward import load_rows, make_source
from flashscope.kernels.inputs import (
    DTYPES,
    MAX_HEAD_DIM,
    Shapes,
    check_alike,
    check_attention,
    check_scale,
    last_dim_contiguous,
)
from flashscope.kernels.launch import (
    cdiv,
    choose_config,
    dot_precision,
    dtype_key,
    gpu_name,
    next_pow2,
    output,
    pad_dim,
    prepare_tma,
    upcast,
    use_tma_for,
)
from flashscope.simulator.core.problem import decode_splits

LOG2E = 1.4426950408889634
MAX_QUERY_TOKENS = 16
MAX_S_BLOCK = 32  # splits merged per load of the last program
_COUNTERS: dict[tuple[str, int], torch.Tensor] = {}


# Triton kernels keep compact argument lists, as in Triton's own tutorials.
# fmt: off
@triton.jit
def block_pages(bt_row, n0, stop, BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr):
    """The page of each key of the block [n0, n0 + BLOCK_N) from its batch's block-table row: one
    scalar when PAGE_SIZE is a multiple of BLOCK_N (n0 is a multiple of BLOCK_N, so the block lies
    in one page), else a (BLOCK_N,) vector; page 0 for keys ≥ stop, whose entries are not read."""
    if PAGE_SIZE >= BLOCK_N:
        pages = tl.load(bt_row + n0 // PAGE_SIZE, mask=n0 < stop, other=0).to(tl.int64)
    else:
        n = n0 + tl.arange(0, BLOCK_N)
        pages = tl.load(bt_row + n // PAGE_SIZE, mask=n < stop, other=0).to(tl.int64)
    return pages


@triton.jit
def load_paged(base, pages, n0, stop, s_page, s_slot, HEAD_DIM: tl.constexpr,
               BLOCK_N: tl.constexpr, D_PAD: tl.constexpr, PAGE_SIZE: tl.constexpr):
    """A (BLOCK_N, D_PAD) tile of keys n0 … from a page pool: key n at slot n % PAGE_SIZE of its
    page in `pages` (`block_pages`); keys ≥ stop and columns ≥ HEAD_DIM read as 0, so the unused
    slots of a last page (never written, perhaps NaN) reach neither the scores nor P·V."""
    n = n0 + tl.arange(0, BLOCK_N)
    c = tl.arange(0, D_PAD)
    if PAGE_SIZE >= BLOCK_N:
        slots = (n0 % PAGE_SIZE + tl.arange(0, BLOCK_N)).to(tl.int64)
    else:
        slots = (n % PAGE_SIZE).to(tl.int64)
    rows = base + pages * s_page + slots * s_slot  # (BLOCK_N,) row starts
    mask = (n < stop)[:, None] & (c < HEAD_DIM)[None, :]
    return tl.load(rows[:, None] + c[None, :], mask=mask, other=0.0)


@triton.jit
def _attend_block(q, k, v, m, l, acc, n0, stop, qk_scale2, BLOCK_N: tl.constexpr,
                  UPCAST: tl.constexpr, DOT_PREC: tl.constexpr):
    """One key block [n0, n0 + BLOCK_N) into the running (m, ℓ, acc) of the online softmax;
    keys ≥ stop are masked out of the scores (their K and V rows must read as numbers)."""
    pv_type = v.dtype
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    cols = n0 + tl.arange(0, BLOCK_N)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC) * qk_scale2  # (R_PAD, BN)
    s = tl.where((cols < stop)[None, :], s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    alpha = tl.math.exp2(m - m_new)  # every visited block has a valid key: m_new is finite
    p = tl.math.exp2(s - m_new[:, None])
    l = l * alpha + tl.sum(p, 1)
    pv = p.to(pv_type)
    if UPCAST:
        pv = pv.to(tl.float32)
    acc = tl.dot(pv, v, acc * alpha[:, None], input_precision=DOT_PREC)
    return m_new, l, acc


@triton.jit
def _decode_split(Q, K, V, LENS, BT, PO, PL, O, COUNT, qk_scale2,
                  s_qb, s_qh, s_qn, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_bt, s_ob, s_oh, s_on,
                  H_KV, GROUP, N_Q, N_CACHE, BLOCKS_PER_SPLIT, SPLITS,
                  HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, R_PAD: tl.constexpr,
                  BLOCK_N: tl.constexpr, HAS_LENS: tl.constexpr, USE_TMA: tl.constexpr,
                  UPCAST: tl.constexpr, DOT_PREC: tl.constexpr, PAGED: tl.constexpr,
                  PAGE_SIZE: tl.constexpr, S_BLOCK: tl.constexpr):
    # PAGED: K and V are page pools, s_kb/s_vb the page strides, s_kn/s_vn the slot strides, and
    # BT the block table (row stride s_bt); N_CACHE = max_pages · PAGE_SIZE.
    split = tl.program_id(0)
    bhk = tl.program_id(1)
    b = bhk // H_KV
    hk = bhk % H_KV
    n_rows = GROUP * N_Q
    r = tl.arange(0, R_PAD)
    c = tl.arange(0, D_PAD)
    head = hk * GROUP + r // N_Q  # row r is token r % N_q of query head hk · group + r // N_q
    q_ptrs = (Q + b.to(tl.int64) * s_qb + head.to(tl.int64)[:, None] * s_qh
              + (r % N_Q)[:, None] * s_qn + c[None, :])
    q = tl.load(q_ptrs, mask=(r < n_rows)[:, None] & (c < HEAD_DIM)[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    length = N_CACHE
    if HAS_LENS:
        length = tl.load(LENS + b).to(tl.int32)
    start = split * BLOCKS_PER_SPLIT * BLOCK_N
    stop = tl.minimum(start + BLOCKS_PER_SPLIT * BLOCK_N, length)
    if PAGED:
        k_base = K + hk.to(tl.int64) * s_kh
        v_base = V + hk.to(tl.int64) * s_vh
        bt_row = BT + b.to(tl.int64) * s_bt
        pages_next = block_pages(bt_row, start, stop, BLOCK_N, PAGE_SIZE)
    else:
        k_base = K + b.to(tl.int64) * s_kb + hk.to(tl.int64) * s_kh
        v_base = V + b.to(tl.int64) * s_vb + hk.to(tl.int64) * s_vh
        k_src = make_source(k_base, N_CACHE, s_kn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, None)
        v_src = make_source(v_base, N_CACHE, s_vn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA, None)

    m = tl.full([R_PAD], float("-inf"), tl.float32)
    l = tl.zeros([R_PAD], tl.float32)
    acc = tl.zeros([R_PAD, D_PAD], tl.float32)
    if PAGED:
        for n0 in range(start, stop, BLOCK_N):
            # Pages are looked up a block ahead: the loads of a block then wait on no lookup
            # (with 3 stages, 1.15-1.35x faster at batch 1 on an H100; the same at 2 stages).
            pages = pages_next
            pages_next = block_pages(bt_row, n0 + BLOCK_N, stop, BLOCK_N, PAGE_SIZE)
            k = load_paged(k_base, pages, n0, stop, s_kb, s_kn, HEAD_DIM, BLOCK_N, D_PAD,
                           PAGE_SIZE)
            v = load_paged(v_base, pages, n0, stop, s_vb, s_vn, HEAD_DIM, BLOCK_N, D_PAD,
                           PAGE_SIZE)
            m, l, acc = _attend_block(q, k, v, m, l, acc, n0, stop, qk_scale2, BLOCK_N, UPCAST,
                                      DOT_PREC)
    else:
        # Whole blocks below `stop` as they come; a last block that `stop` cuts is read through
        # masked pointers, so the cache's rows past a batch's length (unwritten, perhaps NaN)
        # reach neither the scores nor P·V.
        stop = tl.maximum(stop, start)
        whole = start + (stop - start) // BLOCK_N * BLOCK_N
        for n0 in range(start, whole, BLOCK_N):
            k = load_rows(k_src, k_base, n0, N_CACHE, s_kn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA)
            v = load_rows(v_src, v_base, n0, N_CACHE, s_vn, HEAD_DIM, BLOCK_N, D_PAD, USE_TMA)
            m, l, acc = _attend_block(q, k, v, m, l, acc, n0, stop, qk_scale2, BLOCK_N, UPCAST,
                                      DOT_PREC)
        if whole < stop:
            k = load_rows(k_base, k_base, whole, stop, s_kn, HEAD_DIM, BLOCK_N, D_PAD, False)
            v = load_rows(v_base, v_base, whole, stop, s_vn, HEAD_DIM, BLOCK_N, D_PAD, False)
            m, l, acc = _attend_block(q, k, v, m, l, acc, whole, stop, qk_scale2, BLOCK_N,
                                      UPCAST, DOT_PREC)
    seen = l > 0
    o = acc / tl.where(seen, l, 1.0)[:, None]
    lse2 = tl.where(seen, m + tl.math.log2(tl.where(seen, l, 1.0)), float("-inf"))
    part = (bhk * SPLITS + split).to(tl.int64) * n_rows
    keep = r < n_rows
    tl.store(PL + part + r, lse2, mask=keep)
    tl.store(PO + (part + r)[:, None] * HEAD_DIM + c[None, :], o,
             mask=keep[:, None] & (c < HEAD_DIM)[None, :])
    # Every thread's stores come before the count (the barrier), and the count releases them to
    # the program that reads it last (acquire): that program sees all S partials.
    tl.debug_barrier()
    arrived = tl.atomic_add(COUNT + bhk, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLITS - 1:
        _merge_splits(PO, PL, O, bhk, b, hk, s_ob, s_oh, s_on, GROUP, N_Q, SPLITS, HEAD_DIM,
                      D_PAD, S_BLOCK)
        tl.atomic_xchg(COUNT + bhk, 0, sem="relaxed", scope="gpu")


@triton.jit
def _merge_splits(PO, PL, O, bhk, b, hk, s_ob, s_oh, s_on, GROUP, N_Q, SPLITS,
                  HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, S_BLOCK: tl.constexpr):
    """O's rows of K/V head `bhk` from the SPLITS partials: per row, S_BLOCK splits' (LSE, O)
    loaded at once and merged by their LSE (online across blocks of splits when there are more).
    Loads bypass L1 (.cg): the partials were written by other programs of this launch."""
    n_rows = GROUP * N_Q
    c = tl.arange(0, D_PAD)
    sp = tl.arange(0, S_BLOCK)
    for r in range(n_rows):
        m = tl.max(tl.full([S_BLOCK], float("-inf"), tl.float32), 0)
        w = tl.sum(tl.zeros([S_BLOCK], tl.float32), 0)
        acc = tl.zeros([D_PAD], tl.float32)
        for s0 in range(0, SPLITS, S_BLOCK):
            split = s0 + sp
            row = (bhk * SPLITS + split).to(tl.int64) * n_rows + r
            lse2 = tl.load(PL + row, mask=split < SPLITS, other=float("-inf"), cache_modifier=".cg")
            o = tl.load(PO + row[:, None] * HEAD_DIM + c[None, :],
                        mask=(split < SPLITS)[:, None] & (c < HEAD_DIM)[None, :], other=0.0,
                        cache_modifier=".cg")
            m_new = tl.maximum(m, tl.max(lse2, 0))
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key yet: weights 0
            alpha = tl.math.exp2(m - m_sub)
            beta = tl.math.exp2(lse2 - m_sub)  # (S_BLOCK,)
            w = w * alpha + tl.sum(beta, 0)
            acc = acc * alpha + tl.sum(o * beta[:, None], 0)
            m = m_new
        out = acc / tl.where(w > 0, w, 1.0)
        o_ptrs = (O + b.to(tl.int64) * s_ob + (hk * GROUP + r // N_Q).to(tl.int64) * s_oh
                  + (r % N_Q) * s_on + c)
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=c < HEAD_DIM)


# fmt: on


def _check_lens(
    cache_seqlens: object, batch: int, n_cache: int, device: torch.device, limit: str = ""
) -> None:
    if not isinstance(cache_seqlens, torch.Tensor):
        raise ValueError(
            f"cache_seqlens must be a tensor or None, got {type(cache_seqlens).__name__}"
        )
    if cache_seqlens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"cache_seqlens must be int32 or int64, got {cache_seqlens.dtype}")
    if tuple(cache_seqlens.shape) != (batch,):
        raise ValueError(
            f"cache_seqlens must have shape ({batch},), got {tuple(cache_seqlens.shape)}"
        )
    if cache_seqlens.device != device:
        raise ValueError(f"cache_seqlens must be on {device}, got {cache_seqlens.device}")
    lo, hi = int(cache_seqlens.min()), int(cache_seqlens.max())
    if lo < 0 or hi > n_cache:
        raise ValueError(
            f"cache_seqlens must lie in [0, {n_cache}]{limit}, got values in [{lo}, {hi}]"
        )


def _check_pool(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(
            f"with block_table, {name} must be a page pool (num_pages, page_size, kv_heads, "
            f"head_dim), got shape {tuple(x.shape)}"
        )
    if any(s == 0 for s in x.shape):
        raise ValueError(f"{name} must not have an empty dimension, got shape {tuple(x.shape)}")
    return x


def check_paged(
    q: object, k_cache: object, v_cache: object, block_table: object, sm_scale: object
) -> tuple[Shapes, int]:
    """Validate a paged decode call (page pools and block table); returns its sizes, N_cache
    being max_pages · page_size, and the page size. Page indices are not checked."""
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        got = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise ValueError(f"q must be a 4-D tensor (batch, heads, seq, head_dim), got {got}")
    k, v = _check_pool("k_cache", k_cache), _check_pool("v_cache", v_cache)
    if q.dtype not in DTYPES:
        raise ValueError(f"q dtype must be float16, bfloat16 or float32, got {q.dtype}")
    check_alike(q, k, v, "k_cache", "v_cache")
    b, h, n_q, d = q.shape
    _, page_size, h_kv, dk = k.shape
    if page_size & (page_size - 1):
        raise ValueError(f"page_size (k_cache.shape[1]) must be a power of two, got {page_size}")
    if dk != d:
        raise ValueError(f"head_dim mismatch: q has {d}, the page pools k_cache and v_cache {dk}")
    if d % 8 or d > MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be a multiple of 8 and at most {MAX_HEAD_DIM}, got {d}")
    if h % h_kv:
        raise ValueError(
            f"heads of q ({h}) must be divisible by the page pools' kv_heads "
            f"(k_cache.shape[2] = {h_kv})"
        )
    if not isinstance(block_table, torch.Tensor):
        raise ValueError(
            f"block_table must be a torch.Tensor or None, got {type(block_table).__name__}"
        )
    if block_table.dtype != torch.int32:
        raise ValueError(f"block_table must be int32, got {block_table.dtype}")
    if block_table.dim() != 2 or block_table.shape[0] != b or block_table.shape[1] < 1:
        raise ValueError(
            f"block_table must have shape ({b}, max_pages) with max_pages ≥ 1, got "
            f"{tuple(block_table.shape)}"
        )
    if block_table.device != q.device:
        raise ValueError(f"block_table must be on {q.device}, got {block_table.device}")
    n_cache = block_table.shape[1] * page_size
    return Shapes(b, h, h_kv, n_q, n_cache, d, check_scale(sm_scale, d)), page_size


def paged_config(
    cfg: KernelConfig, gpu: str, dtype: torch.dtype, d_pad: int, ctas: int, sms: int
) -> KernelConfig:
    """The tiles of a paged call whose split grid is `ctas` programs: where each SM gets at most
    one, the GPU's "decode-paged-solo" entry (same keys per step) when it has one, else `cfg`.

    A lone CTA on its SM must hide each block's page-table lookup with its own pipeline, where
    several CTAs hide each other's: on an H100 at batch 1 (128 CTAs) three stages and four warps
    read pages of 16/64/256 keys at 87/89/91% of copy bandwidth against 63/65/77% with the
    contiguous entry's two, while at batch 8 (192 CTAs) they lose up to 13%
    (benchmarks/results/decode-paged-NVIDIA-H100-80GB-HBM3-2026-11-26.json)."""
    if ctas > sms:
        return cfg
    solo = lookup(gpu, dtype_key("decode-paged-solo", dtype, d_pad, False))
    return solo if solo is not None and solo.block_n == cfg.block_n else cfg


def counters(n: int, device: torch.device) -> torch.Tensor:
    """At least `n` int32 arrival counters, zero between calls, for this device and its current
    stream (each call's last program sets its counters back to 0; calls on one stream run one
    after another, so they can share them). Grown, never shrunk: a new buffer is zeroed on the
    stream, after whatever still uses the old one."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
        _COUNTERS[key] = buf
    return buf


def sm_count() -> int:
    """Streaming multiprocessors of this GPU (132, an H100's, under the interpreter)."""
    return 132 if interpreting() else torch.cuda.get_device_properties(0).multi_processor_count


def flash_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor | None = None,
    sm_scale: float | None = None,
    *,
    config: KernelConfig | None = None,
    splits: int | None = None,
    use_tma: bool | None = None,
    block_table: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of 1–16 query tokens per head over a K/V cache, contiguous (B, H_kv, N, d) or,
    with `block_table` (B, max_pages) int32, paged (num_pages, page_size, H_kv, d): see the
    module's docstring. Returns O (B, H, N_q, d)."""
    return decode_with_partials(
        q, k_cache, v_cache, cache_seqlens, sm_scale, config=config, splits=splits,
        use_tma=use_tma, block_table=block_table,
    )[0]  # fmt: skip


def decode_with_partials(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor | None = None,
    sm_scale: float | None = None,
    *,
    config: KernelConfig | None = None,
    splits: int | None = None,
    use_tma: bool | None = None,
    block_table: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`flash_decode`, also returning what the split programs wrote for the merge: O, the partial
    outputs (B·H_kv, S, R, d) fp32 and their log-sum-exps (B·H_kv, S, R) in log2 units, row r
    being token r % N_q of query head r // N_q of the K/V head's group."""
    page_size = 0
    if block_table is None:
        shapes = check_attention(q, k_cache, v_cache, False, sm_scale)
    else:
        shapes, page_size = check_paged(q, k_cache, v_cache, block_table, sm_scale)
    if shapes.seq_q > MAX_QUERY_TOKENS:
        raise ValueError(f"decode takes 1 to {MAX_QUERY_TOKENS} query tokens, got {shapes.seq_q}")
    if config is not None and not isinstance(config, KernelConfig):
        raise ValueError(f"config must be a KernelConfig or None, got {type(config).__name__}")
    if cache_seqlens is not None:
        pages = shapes.seq_k // max(page_size, 1)
        limit = f" (max_pages {pages} · page_size {page_size})" if page_size else ""
        _check_lens(cache_seqlens, shapes.batch, shapes.seq_k, q.device, limit)
    q, k, v = (last_dim_contiguous(x) for x in (q, k_cache, v_cache))
    b, _, n_q, d = q.shape
    h_kv, n_cache = shapes.kv_heads, shapes.seq_k
    d_pad = pad_dim(d)
    cfg = config or choose_config(
        "decode", q.dtype, d_pad, False,
        lambda c: flash_decode(q, k, v, cache_seqlens, sm_scale, config=c, use_tma=use_tma,
                               block_table=block_table),
    )  # fmt: skip
    n_blocks = cdiv(n_cache, cfg.block_n)
    if splits is None:
        splits = decode_splits(b * h_kv, n_blocks, sm_count())
    if block_table is not None and config is None and not interpreting():
        cfg = paged_config(cfg, gpu_name(), q.dtype, d_pad, b * h_kv * splits, sm_count())
    if isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= n_blocks:
        raise ValueError(f"splits must be an integer in [1, {n_blocks}], got {splits!r}")
    per_split = cdiv(n_blocks, splits)
    splits = cdiv(n_blocks, per_split)  # drop splits that would have no block at all
    rows = shapes.group * n_q
    r_pad = max(16, next_pow2(rows))
    part_o = output((b * h_kv, splits, rows, d), torch.float32, q.device)
    part_l = output((b * h_kv, splits, rows), torch.float32, q.device)
    o = output(q.shape, q.dtype, q.device)  # (B, H, N_q, d)
    lens = cache_seqlens if cache_seqlens is not None else part_l
    if block_table is None:
        tma = use_tma_for([k, v], use_tma)
        prepare_tma(tma)
        table, s_bt = None, 0
        k_strides, v_strides = k.stride()[:3], v.stride()[:3]  # (batch, head, key)
    else:  # pools (page, slot, head, d): strides passed as (page, head, slot)
        tma = False
        table = block_table if block_table.stride(1) == 1 else block_table.contiguous()
        s_bt = table.stride(0)
        k_strides = (k.stride(0), k.stride(2), k.stride(1))
        v_strides = (v.stride(0), v.stride(2), v.stride(1))
    launch(
        _decode_split, (splits, b * h_kv),
        (q, k, v, lens, table, part_o, part_l, o, counters(b * h_kv, q.device),
         shapes.scale * LOG2E, *q.stride()[:3], *k_strides, *v_strides, s_bt, *o.stride()[:3],
         h_kv, shapes.group, n_q, n_cache, per_split, splits),
        dict(HEAD_DIM=d, D_PAD=d_pad, R_PAD=r_pad, BLOCK_N=cfg.block_n,
             HAS_LENS=cache_seqlens is not None, USE_TMA=tma, UPCAST=upcast(q.dtype),
             DOT_PREC=dot_precision(q.dtype), PAGED=block_table is not None,
             PAGE_SIZE=page_size, S_BLOCK=min(next_pow2(splits), MAX_S_BLOCK)),
        cfg.launch_options(),
    )  # fmt: skip
    return o, part_o, part_l
