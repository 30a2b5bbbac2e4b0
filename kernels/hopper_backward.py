"""A warp-specialized FlashAttention backward for Hopper, written in Gluon.

Why a second backward: the Triton backward (`kernels/backward.py`) holds dK, dV, Sᵀ, dPᵀ and
the operands of five products in one thread's registers and spills at head_dim 128, which is
why its five-product (atomic dQ) route loses to recomputing dQ in a kernel of its own. Here the
work of one key block is split between warpgroups, after FlashAttention-3's backward:

- one *loader* warp copies the block's K and V once, then, step by step, each query block's Q
  and dO (with the tensor-memory copy engine) and its LSE and D into a ring of shared-memory
  stages;
- CONSUMERS warpgroups each own 64 of the block's keys (the block has 64·CONSUMERS) and keep
  their dK and dV in fp32 registers. Per query block of BLOCK_M rows a warpgroup has Sᵀ = K Qᵀ
  (issued a step ahead), issues dPᵀ = V dOᵀ and rebuilds Pᵀ = exp(Sᵀ − LSE) from the forward's
  log-sum-exp (staged in shared memory by the loader) while dPᵀ is on the tensor cores, then
  issues dV += Pᵀ dO and, with dSᵀ = Pᵀ ∘ (dPᵀ − D), dK += dSᵀ Q (Pᵀ and dSᵀ from registers);
- dQ is shared: each warpgroup writes its dSᵀ to shared memory, and once every warpgroup's is in
  each computes its share of dS K over the whole block (its rows or its columns), puts it in a
  shared fp32 tile and has the copy engine add the tile into an fp32 buffer in global memory
  (cp.reduce.async.bulk, as FlashAttention-3 does), while the next step's Sᵀ runs. Against
  per-element atomics (`red.global.add.f32`) this took the backward from 0.73–0.91× of
  sdpa-cudnn to 0.84–1.05× on an H100 (benchmarks/results/hopper-backward-dq-*.json). The
  warpgroups meet at that one barrier per step; one's exponentials can still run under
  another's products;
- the loader gives its registers up to the consumers (`warp_specialize`'s budgets).

At head dims past 128 (`_attn_bwd_split`) a warpgroup's dK and dV of 64 keys would not fit its
registers, so the two warpgroups share one block of 64 keys by halves of the head dimension:
each finds Pᵀ and dSᵀ for half the step's query rows, both halves meet in shared memory, and
each then runs dV, dK and dQ for its half of the columns. dQ's tiles go out through the step's
Q and dO stage once both warpgroups are done with it (shared memory holds nothing else free),
and the stage goes back to the loader in the next step, once the copy engine has read them.
Against per-element atomics for dQ the stage took d = 256 from 0.68–0.75× sdpa-cudnn to
0.79–0.92× on an H100, and giving it back a step later to 0.89–1.07×
(benchmarks/results/hopper-backward-*-d256*.json).

The pass that computes D = rowsum(dO ∘ O) also zeroes the fp32 dQ buffer, the kernel adds dQ
already scaled, and one cast finishes it: two passes over the buffer fewer than the Triton
backward's atomic route (a fill of its own and a scale), which took about 5% off a d = 128,
N = 2048 call on an H100. Five products per tile pair, as the FlashAttention-2 paper counts them.

Limits (`supports` says why a call does not qualify; the Triton backward runs everything else):
a Hopper GPU, fp16 or bf16, head_dim 33 to 256 (past 128: two consumers, 64-row query blocks),
inputs that flatten to (B·H·N, d) with rows on 16-byte boundaries. A head_dim that is not 64,
128 or 256 runs at the next of them: the copy engine
fills the columns past d with zeros on the way in and drops them on the way out, and dK and dV
store d columns. Any N_q and N_k: a last key block that N_k does not fill masks its keys and
stores only its own rows; a last query block that N_q does not fill reads no LSE or D past N_q
(its P is zero there, so its dQ rows add zeros). Causal is aligned bottom-right as in the
forward; grouped-query attention sums the group's query heads into one dK/dV on chip. Rows that
saw no key (LSE = −∞) get zero gradients. As the forward's Gluon kernel, there is no
interpreter path: CI compiles it for sm_90a on the CPU and the GPU tests run it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from flashscope.kernels.config import fills_no_tile, per_table, table_key, tuned_entry
from flashscope.kernels.device import interpreting
from flashscope.kernels.fastlaunch import launch
from flashscope.kernels.hopper_forward import (
    _GL_DTYPES,
    LOADER_REGS,
    REGS_PER_SM,
    SHARED_LIMIT,
    _descriptor,
    copy_engine_reason,
    cubin_resources,
    warmup_sm90,
)
from flashscope.kernels.launch import LOG2E, flat_rows, gpu_name, output, pad_dim
from flashscope.simulator.timing.kernelplan import tuned_keys

_LOADER_REGS = gl.constexpr(LOADER_REGS)
KEYS_PER_CONSUMER = 64  # one warpgroup's rows of a wgmma


@gluon.constexpr_function
def dq_share(block_m, head_dim, consumers):
    """(rows, columns) of one warpgroup's share of a step's dQ = dS K, the tile it adds into the
    fp32 buffer: its own 64 query rows by head_dim where the query block has 64 rows per
    warpgroup, else every row of the block by head_dim / consumers (head_dim padded)."""
    if block_m == KEYS_PER_CONSUMER * consumers:
        return (KEYS_PER_CONSUMER, head_dim)
    return (block_m, head_dim // consumers)


MAX_BAND = 256


def splits_head_dim(d_pad: int) -> bool:
    """Whether a head_dim run at `d_pad` takes the program whose two warpgroups share one key
    block by halves of the head dimension (`_attn_bwd_split`): past 128, where one
    warpgroup's dK and dV of 64 keys would not fit its registers."""
    return d_pad > 128


@dataclass(frozen=True)
class BwdConfig:
    """One launch of the warp-specialized backward.

    consumers: warpgroups per program, each owning 64 keys (the key block is 64·consumers;
    at head_dim 256 two warpgroups share a block of 64 keys by halves of the head dimension,
    `_attn_bwd_split`); block_m: query rows per step; stages: depth of the Q/dO ring; band: the
    programs in bands of that many heads, key block by key block (`_block`); 0: head after head.
    """

    consumers: int = 2
    block_m: int = 64
    stages: int = 2
    band: int = 0

    def __post_init__(self) -> None:
        if self.consumers not in (1, 2):
            raise ValueError(f"consumers must be 1 or 2, got {self.consumers!r}")
        if self.block_m not in (64, 128):
            raise ValueError(f"block_m must be 64 or 128, got {self.block_m!r}")
        if self.stages not in (1, 2, 3):
            raise ValueError(f"stages must be 1, 2 or 3, got {self.stages!r}")
        if not (isinstance(self.band, int) and 0 <= self.band <= MAX_BAND):
            raise ValueError(f"band must be 0 to {MAX_BAND}, got {self.band!r}")

    def keys(self, head_dim: int) -> int:
        """Keys per program (the key block) at `head_dim` as run."""
        return KEYS_PER_CONSUMER * (1 if splits_head_dim(head_dim) else self.consumers)

    def as_list(self) -> list[int]:
        """As the tuned table holds it (a band of 0 left out)."""
        return [self.consumers, self.block_m, self.stages] + ([self.band] if self.band else [])

    def registers(self) -> tuple[int, int]:
        """(registers per thread at launch, per consumer thread once the loader's warpgroup
        has given its own up)."""
        warps = 4 * (self.consumers + 1)
        launch_regs = min(REGS_PER_SM // (32 * warps) // 8 * 8, 248)
        consumer = (launch_regs * warps - LOADER_REGS * 4) // (4 * self.consumers) // 8 * 8
        return launch_regs, min(consumer, 256)

    def shared_bytes(self, head_dim: int, elem: int = 2) -> int:
        """K and V of the block, the Q/dO ring with each step's LSE and D (fp32), two buffers
        of the block's dSᵀ (and of Pᵀ at head_dim 256), the fp32 dQ tiles the copy engine adds
        (none at 256: they borrow the step's Q/dO stage) and the mbarriers (at 256 one more per
        stage: both warpgroups done with it)."""
        keys = self.keys(head_dim)
        kv = 2 * keys * head_dim * elem
        ring = self.stages * self.block_m * (2 * head_dim * elem + 2 * 4)
        split = splits_head_dim(head_dim)
        ds = 2 * keys * self.block_m * elem * (2 if split else 1)
        dq = 0 if split else self.block_m * head_dim * 4
        return kv + ring + ds + dq + 8 * (5 + (3 if split else 2) * self.stages)


# The configurations benchmarks/hopper_backward.py times per head_dim (and the tuned table picks
# from): two warpgroups of 64 keys; at 64, query blocks of 64 or 128 rows; at 128, a ring of 2 or
# 3 stages (the registers leave no room for 128-row query blocks); the fastest of each also in
# bands of 16 heads (`_block`). At 256 the two warpgroups share 64 keys, and shared memory holds
# a ring of two stages at most; the bands there are narrower: a head's Q, dO and fp32 dQ take
# 6 MB at N = 3000, so sixteen heads at a time no longer fit the L2 (on an H100, causal, bands of
# 4 or 8 heads ran 2-9% faster than head after head and bands of 16, which lost up to half the
# speed without the mask).
CANDIDATES = {
    64: (BwdConfig(2, 64, 2), BwdConfig(2, 128, 2), BwdConfig(2, 128, 2, 16)),
    128: (BwdConfig(2, 64, 2), BwdConfig(2, 64, 3), BwdConfig(2, 64, 2, 16)),
    256: (BwdConfig(2, 64, 2), BwdConfig(2, 64, 2, 4), BwdConfig(2, 64, 2, 8)),
}


@builtin
def _reduce_add(desc, coord, src, _semantic=None):
    """Add the shared-memory tile `src` into the global tile of `desc` at `coord` with the copy
    engine (PTX cp.reduce.async.bulk.tensor .add). Triton has the operation (its descriptors'
    atomic_add lowers to it) but Gluon's Hopper module does not name it."""
    from triton._C.libtriton import ir

    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(
        ir.DESCRIPTOR_REDUCE_KIND.ADD, desc.handle, coord, src.handle
    )


# Gluon kernels keep compact argument lists, as Triton's own tutorials do.
# fmt: off
@gluon.jit
def _steps(j, N_Q, N_K, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Key block j's query blocks, per query head: (first, first unmasked, end). Causal
    (bottom-right: key c visible to row r iff c ≤ r + N_K − N_Q), blocks before `first` see no
    key of the block and blocks from `first` to `unmasked` cross the diagonal; not causal,
    every block is unmasked (the key edge is the caller's)."""
    n_qb = gl.cdiv(N_Q, BLOCK_M)
    if CAUSAL:
        off = N_K - N_Q
        k0 = j * BLOCK_N
        first = gl.minimum(gl.maximum(k0 - off, 0) // BLOCK_M, n_qb)
        unmasked = gl.minimum(gl.maximum(gl.cdiv(k0 + BLOCK_N - 1 - off, BLOCK_M), first), n_qb)
    else:
        first = 0
        unmasked = 0
    return first, unmasked, n_qb


@gluon.jit
def _block(BAND: gl.constexpr):
    """(key block, batch · K/V head) of this program. The GPU starts programs in the grid's
    order; BAND 0 keeps it (a head's key blocks one after another). BAND > 0 takes the heads
    BAND at a time and, within a band, starts key block 0 of each head, then key block 1, and so
    on. Causal, key block 0 sees every query block and the last sees the fewest, so the grid
    ends on its shortest programs instead of a head's longest one; a band keeps the heads read
    at the same time few enough for their Q and dO to stay in L2."""
    j = gl.program_id(0)
    bkv = gl.program_id(1)
    if BAND > 0:
        n_kb = gl.num_programs(0)
        p = bkv * n_kb + j
        band = p // (BAND * n_kb)
        r = p - band * (BAND * n_kb)
        heads = gl.minimum(gl.num_programs(1) - band * BAND, BAND)
        j = r // heads
        bkv = band * BAND + r % heads
    return j, bkv


@gluon.jit
def _q_row(bkv, g, H, GROUP, N_Q):
    """The flattened row of query head g (of K/V head bkv's group) where its queries start."""
    h_kv = H // GROUP
    return ((bkv // h_kv) * H + (bkv % h_kv) * GROUP + g) * N_Q


@gluon.jit
def _loader(args, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
            CAUSAL: gl.constexpr, BAND: gl.constexpr):
    """One warp: the block's K and V, then Q and dO of every step into the ring."""
    (q_desc, k_desc, v_desc, do_desc, k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem,
     kv_ready, q_ready, q_empty, LSE, DELTA, N_Q, N_K, H, GROUP) = args
    rows_layout: gl.constexpr = gl.BlockedLayout([BLOCK_M // 32], [32], [1], [0])
    j, bkv = _block(BAND)
    kv_row = bkv * N_K + j * BLOCK_N
    KV_BYTES: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes
    STEP_BYTES: gl.constexpr = q_desc.block_type.nbytes + do_desc.block_type.nbytes
    mbarrier.expect(kv_ready, KV_BYTES)
    tma.async_copy_global_to_shared(k_desc, [kv_row, 0], kv_ready, k_smem)
    tma.async_copy_global_to_shared(v_desc, [kv_row, 0], kv_ready, v_smem)
    first, _, n_qb = _steps(j, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL)
    s = 0
    for g in range(GROUP):
        q_row0 = _q_row(bkv, g, H, GROUP, N_Q)
        for qb in range(first, n_qb):
            slot = s % STAGES
            mbarrier.wait(q_empty.index(slot), ((s // STAGES) & 1) ^ 1)
            mbarrier.expect(q_ready.index(slot), STEP_BYTES)
            row = q_row0 + qb * BLOCK_M
            tma.async_copy_global_to_shared(q_desc, [row, 0], q_ready.index(slot),
                                            q_smem.index(slot))
            tma.async_copy_global_to_shared(do_desc, [row, 0], q_ready.index(slot),
                                            do_smem.index(slot))
            # the block's LSE (log2 domain; +∞ for a row that saw no key, or past N_q, so that
            # its P is 0) and D, for the consumers to read when they need them
            within = qb * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows_layout)
            inside = within < N_Q
            lse = gl.load(LSE + q_row0 + within, mask=inside, other=float("inf"))
            lse = gl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
            lse_smem.index(slot).store(lse)
            delta_smem.index(slot).store(gl.load(DELTA + q_row0 + within, mask=inside, other=0.0))
            mbarrier.arrive(q_ready.index(slot), count=1)
            s += 1


@gluon.jit
def _issue(k_c, q_smem, q_ready, s, s_layout: gl.constexpr, ROWS: gl.constexpr,
           ROW0: gl.constexpr, STAGES: gl.constexpr):
    """Issue Sᵀ = K Qᵀ of ring step s against the step's ROWS query rows from ROW0
    (asynchronous), once its Q and dO landed."""
    slot = s % STAGES
    mbarrier.wait(q_ready.index(slot), (s // STAGES) & 1)
    zero = gl.zeros([64, ROWS], gl.float32, s_layout)
    q = q_smem.index(slot).slice(ROW0, ROWS)
    return warpgroup_mma(k_c, q.permute((1, 0)), zero, use_acc=False, is_async=True)


@gluon.jit
def _step(dk, dv, st, s, qb, q_row0, key0, masked, ctx, s_layout: gl.constexpr,
          dq_layout: gl.constexpr, op_layout: gl.constexpr, HEAD_DIM: gl.constexpr,
          BLOCK_M: gl.constexpr, STAGES: gl.constexpr, C: gl.constexpr,
          CONSUMERS: gl.constexpr, ROW_SPLIT: gl.constexpr, NEXT: gl.constexpr):
    """Ring step s, query block qb, against warpgroup C's 64 keys from key0, its Sᵀ already
    computed (st): dPᵀ = V dOᵀ runs while Pᵀ is rebuilt. `masked`: hide key c from row r unless
    c ≤ r + off and c < N_K. NEXT: issue the next step's Sᵀ before waiting for this step's dQ,
    so that it runs on the tensor cores while this step's dQ is added (returned with dK and
    dV). (The next dPᵀ too would not fit the registers beside dK, dV and dQ at head_dim 128.)"""
    (k_c, v_c, k_all, ds_smem, q_smem, do_smem, lse_smem, delta_smem, q_ready, q_empty, ds_ready,
     ds_free, DQ, dq_smem, qk_scale2, scale, bounds) = ctx
    dtype: gl.constexpr = k_all.dtype
    KEYS: gl.constexpr = 64
    off, _, n_k = bounds
    slot = s % STAGES
    zero = gl.zeros([KEYS, BLOCK_M], gl.float32, s_layout)
    dpt = warpgroup_mma(v_c, do_smem.index(slot).permute((1, 0)), zero, use_acc=False,
                        is_async=True)
    m0 = qb * BLOCK_M
    cols = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    lse2 = lse_smem.index(slot).load(gl.SliceLayout(0, s_layout))
    pt = gl.exp2(st * qk_scale2 - lse2[None, :])
    if masked:
        rows = key0 + gl.arange(0, KEYS, layout=gl.SliceLayout(1, s_layout))
        keep = (rows[:, None] <= cols[None, :] + off) & (rows < n_k)[:, None]
        pt = gl.where(keep, pt, 0.0)
    dpt = warpgroup_mma_wait(0, deps=(dpt,))
    delta = delta_smem.index(slot).load(gl.SliceLayout(0, s_layout))
    ds16 = (pt * (dpt - delta[None, :])).to(dtype)
    p16 = pt.to(dtype)
    dv = warpgroup_mma(gl.convert_layout(p16, op_layout), do_smem.index(slot), dv, is_async=True)
    dk = warpgroup_mma(gl.convert_layout(ds16, op_layout), q_smem.index(slot), dk, is_async=True)
    # dSᵀ of the warpgroup's keys into the step's buffer (two, in turn); once every warpgroup's
    # is in, dQ of the step is dS K over the whole key block: each warpgroup takes a share (its
    # 64 query rows where the block has 64 per warpgroup, else its columns) and adds it into
    # the fp32 buffer
    buf = s % 2
    mbarrier.wait(ds_free.index(buf), ((s // 2) & 1) ^ 1)  # a fresh barrier counts as freed
    ds_smem.index(buf).slice(C * KEYS, KEYS).store(ds16)
    fence_async_shared()
    mbarrier.arrive(ds_ready.index(buf), count=1)
    mbarrier.wait(ds_ready.index(buf), (s // 2) & 1)
    ds = ds_smem.index(buf).permute((1, 0))  # (BLOCK_M, BLOCK_N)
    DQ_M: gl.constexpr = dq_share(BLOCK_M, HEAD_DIM, CONSUMERS)[0]
    DQ_N: gl.constexpr = dq_share(BLOCK_M, HEAD_DIM, CONSUMERS)[1]
    if ROW_SPLIT:
        a = ds.slice(C * KEYS, KEYS)
        b = k_all
        row0 = m0 + C * KEYS
        col0 = 0
    else:
        a = ds
        b = k_all.slice(C * DQ_N, DQ_N, dim=1)
        row0 = m0
        col0 = C * DQ_N
    dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))
    mbarrier.arrive(q_empty.index(slot), count=1)
    dq = warpgroup_mma(a, b, gl.zeros([DQ_M, DQ_N], gl.float32, dq_layout), use_acc=False,
                       is_async=True)
    if NEXT:
        st = _issue(k_c, q_smem, q_ready, s + 1, s_layout, BLOCK_M, 0, STAGES)
        dq = warpgroup_mma_wait(1, deps=(dq,))
    else:
        dq = warpgroup_mma_wait(0, deps=(dq,))
    mbarrier.arrive(ds_free.index(buf), count=1)
    # scaled, through shared memory, added by the copy engine (cp.reduce.async.bulk): rows
    # past N_q hold zeros (their P is 0), so the tile needs no mask
    tma.store_wait(0)  # the last step's tile has been read out
    dq_smem.store(dq * scale)
    fence_async_shared()
    _reduce_add(DQ, [q_row0 + row0, col0], dq_smem)
    if NEXT:
        # (waited here, not at the next step: an accumulator still in flight across the loop's
        # back edge gets copied, and ptxas then serializes every wgmma of the kernel)
        st = warpgroup_mma_wait(0, deps=(st,))
        return dk, dv, st
    else:
        return dk, dv


@gluon.jit
def _store_dkdv(dk, dv, c, DK, DV, row0, key0, N_K, scale, o_layout: gl.constexpr,
                KEY_EDGE: gl.constexpr, NARROW: gl.constexpr, DIM: gl.constexpr):
    """Store dK (scaled) and dV of the 64 keys from flattened row `row0` (key `key0` of its
    head), columns `c`: where the block may pass N_K (KEY_EDGE) or columns reach past DIM
    (NARROW), only the keys before N_K and the columns before DIM."""
    dtype: gl.constexpr = DK.dtype.element_ty
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, o_layout))
    offs = (row0 + r).to(gl.int64)[:, None] * DIM + c[None, :]
    if KEY_EDGE or NARROW:
        inside = ((key0 + r) < N_K)[:, None] & (c < DIM)[None, :]
        gl.store(DK + offs, (dk * scale).to(dtype), mask=inside)
        gl.store(DV + offs, dv.to(dtype), mask=inside)
    else:
        gl.store(DK + offs, (dk * scale).to(dtype))
        gl.store(DV + offs, dv.to(dtype))


@gluon.jit
def _consumer(args, C: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              KEY_EDGE: gl.constexpr, CONSUMERS: gl.constexpr, DIM: gl.constexpr,
              BAND: gl.constexpr):
    """Warpgroup C: keys [64·C, 64·C + 64) of the block through every step (the group's query
    heads in turn, each over the query blocks that see the block), then their dK (scaled) and
    dV."""
    (k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, ds_smem, dq_smem, kv_ready, q_ready,
     q_empty, ds_ready, ds_free, DQ, DK, DV, qk_scale2, scale, N_Q, N_K, H, GROUP) = args
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    DQ_N: gl.constexpr = dq_share(BLOCK_M, HEAD_DIM, CONSUMERS)[1]
    ROW_SPLIT: gl.constexpr = DQ_N == HEAD_DIM  # each warpgroup adds its own rows' dQ
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, DQ_N, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    KEYS: gl.constexpr = 64
    j, bkv = _block(BAND)
    key0 = j * BLOCK_N + C * KEYS  # the warpgroup's first key within the head
    k_c = k_smem.slice(C * KEYS, KEYS)
    v_c = v_smem.slice(C * KEYS, KEYS)
    dk = gl.zeros([KEYS, HEAD_DIM], gl.float32, o_layout)
    dv = gl.zeros([KEYS, HEAD_DIM], gl.float32, o_layout)
    first, unmasked, n_qb = _steps(j, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL)
    # Steps that need a mask: causal, the query blocks crossing the diagonal; not causal, every
    # step of a last key block that N_K does not fill (keys hidden past N_K alone).
    if CAUSAL:
        off = N_K - N_Q
        edge = False
    else:
        off = N_K + N_Q
        edge = KEY_EDGE and (j + 1) * BLOCK_N > N_K
    ctx = (k_c, v_c, k_smem, ds_smem, q_smem, do_smem, lse_smem, delta_smem, q_ready, q_empty,
           ds_ready, ds_free, DQ, dq_smem.index(C), qk_scale2, scale, (off, N_Q, N_K))
    per_head = n_qb - first
    total = GROUP * per_head
    mbarrier.wait(kv_ready, 0)
    if total > 0:
        st = _issue(k_c, q_smem, q_ready, 0, s_layout, BLOCK_M, 0, STAGES)
        st = warpgroup_mma_wait(0, deps=(st,))
        for s in range(total - 1):
            g = s // per_head
            qb = first + s - g * per_head
            q_row0 = _q_row(bkv, g, H, GROUP, N_Q)
            dk, dv, st = _step(dk, dv, st, s, qb, q_row0, key0,
                                    edge or qb < unmasked, ctx, s_layout, dq_layout, op_layout,
                                    HEAD_DIM, BLOCK_M, STAGES, C, CONSUMERS, ROW_SPLIT,
                                    True)
        s = total - 1
        q_row0 = _q_row(bkv, GROUP - 1, H, GROUP, N_Q)
        dk, dv = _step(dk, dv, st, s, n_qb - 1, q_row0, key0, edge or n_qb - 1 < unmasked,
                       ctx, s_layout, dq_layout, op_layout, HEAD_DIM, BLOCK_M, STAGES, C,
                       CONSUMERS, ROW_SPLIT, False)
        tma.store_wait(0)  # (before the program's shared memory goes)
    # dK and dV of the warpgroup's keys, DIM of the HEAD_DIM columns
    c = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    _store_dkdv(dk, dv, c, DK, DV, bkv * N_K + key0, key0, N_K, scale, o_layout, KEY_EDGE,
                DIM < HEAD_DIM, DIM)


@gluon.jit
def _attn_bwd_ws(q_desc, k_desc, v_desc, do_desc, LSE, DELTA, DQ, DK, DV, qk_scale2, scale, H,
                 GROUP, N_Q, N_K, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                 CONSUMERS: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                 KEY_EDGE: gl.constexpr, CONSUMER_REGS: gl.constexpr, DIM: gl.constexpr,
                 BAND: gl.constexpr):
    """Program (j, b · H_kv + h_kv): key block j of that K/V head, over every query head of
    its group."""
    BLOCK_N: gl.constexpr = 64 * CONSUMERS
    dtype: gl.constexpr = q_desc.dtype
    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
    row_layout: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
    lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], row_layout)
    delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], row_layout)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_layout)
    # one fp32 tile per warpgroup: its share of a step's dQ (`_step`)
    DQ_M: gl.constexpr = dq_share(BLOCK_M, HEAD_DIM, CONSUMERS)[0]
    DQ_N: gl.constexpr = dq_share(BLOCK_M, HEAD_DIM, CONSUMERS)[1]
    dq_smem = gl.allocate_shared_memory(gl.float32, [CONSUMERS, DQ_M, DQ_N], DQ.layout)
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ds_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(q_ready.index(s), count=2)  # the copies' bytes, and LSE and D stored
        mbarrier.init(q_empty.index(s), count=CONSUMERS)
    for b in gl.static_range(2):
        mbarrier.init(ds_ready.index(b), count=CONSUMERS)
        mbarrier.init(ds_free.index(b), count=CONSUMERS)

    shared = (k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, ds_smem, dq_smem, kv_ready,
              q_ready, q_empty, ds_ready, ds_free, DQ, DK, DV, qk_scale2, scale, N_Q, N_K, H, GROUP)
    loads = (q_desc, k_desc, v_desc, do_desc, k_smem, v_smem, q_smem, do_smem, lse_smem,
             delta_smem, kv_ready, q_ready, q_empty, LSE, DELTA, N_Q, N_K, H, GROUP)
    if CONSUMERS == 1:
        gl.warp_specialize([(_consumer, (shared, 0, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL,
                                         KEY_EDGE, CONSUMERS, DIM, BAND)),
                            (_loader, (loads, BLOCK_M, BLOCK_N, STAGES, CAUSAL, BAND))],
                           [1], [_LOADER_REGS])
    else:
        gl.warp_specialize([(_consumer, (shared, 0, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL,
                                         KEY_EDGE, CONSUMERS, DIM, BAND)),
                            (_consumer, (shared, 1, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL,
                                         KEY_EDGE, CONSUMERS, DIM, BAND)),
                            (_loader, (loads, BLOCK_M, BLOCK_N, STAGES, CAUSAL, BAND))],
                           [4, 1], [CONSUMER_REGS, _LOADER_REGS])
# fmt: on


# fmt: off
@gluon.jit
def _split_step(dk, dv, st, s, qb, q_row0, key0, masked, ctx, s_layout: gl.constexpr,
                o_layout: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                STAGES: gl.constexpr, C: gl.constexpr, DIM: gl.constexpr, NEXT: gl.constexpr):
    """Ring step s, query block qb, for warpgroup C of the head-dim split (`_split_consumer`):
    its half of the block's queries against all 64 keys for Pᵀ and dSᵀ, then its half of the
    head dim for dK, dV and dQ over the whole step. NEXT: issue the next step's Sᵀ (returned
    with dK and dV). The copy engine's read of this step's dQ tile is waited for in the next
    step (or after the program's dK and dV stores), which gives its stage back then."""
    (k_smem, v_smem, pt_smem, ds_smem, q_smem, do_smem, lse_smem, delta_smem, q_ready, q_empty,
     q_used, ds_ready, ds_free, DQ, qk_scale2, scale, bounds) = ctx
    dtype: gl.constexpr = k_smem.dtype
    HALF_M: gl.constexpr = BLOCK_M // 2
    HALF_D: gl.constexpr = HEAD_DIM // 2
    off, _, n_k = bounds
    slot = s % STAGES
    zero = gl.zeros([64, HALF_M], gl.float32, s_layout)
    do_c = do_smem.index(slot).slice(C * HALF_M, HALF_M)
    dpt = warpgroup_mma(v_smem, do_c.permute((1, 0)), zero, use_acc=False, is_async=True)
    m0 = qb * BLOCK_M + C * HALF_M  # the warpgroup's first query row of the step
    cols = m0 + gl.arange(0, HALF_M, layout=gl.SliceLayout(0, s_layout))
    lse2 = lse_smem.index(slot).slice(C * HALF_M, HALF_M).load(gl.SliceLayout(0, s_layout))
    pt = gl.exp2(st * qk_scale2 - lse2[None, :])
    if masked:
        rows = key0 + gl.arange(0, 64, layout=gl.SliceLayout(1, s_layout))
        keep = (rows[:, None] <= cols[None, :] + off) & (rows < n_k)[:, None]
        pt = gl.where(keep, pt, 0.0)
    if s > 0:
        # the previous step's dQ tile, read by now while this step's dPᵀ ran and its Pᵀ was
        # rebuilt: its stage goes back to the loader (waited at the end of that step instead,
        # the kernel took 1.08-1.23x the time on an H100)
        tma.store_wait(0)
        mbarrier.arrive(q_empty.index((s + STAGES - 1) % STAGES), count=1)
    dpt = warpgroup_mma_wait(0, deps=(dpt,))
    delta = delta_smem.index(slot).slice(C * HALF_M, HALF_M).load(gl.SliceLayout(0, s_layout))
    ds16 = (pt * (dpt - delta[None, :])).to(dtype)
    p16 = pt.to(dtype)
    # Pᵀ and dSᵀ of the warpgroup's queries into the step's buffers (two, in turn); once both
    # warpgroups' halves are in, each runs its columns of dV += Pᵀ dO, dK += dSᵀ Q and
    # dQ = dS K over the whole step
    buf = s % 2
    mbarrier.wait(ds_free.index(buf), ((s // 2) & 1) ^ 1)  # a fresh barrier counts as freed
    pt_smem.index(buf).slice(C * HALF_M, HALF_M, dim=1).store(p16)
    ds_smem.index(buf).slice(C * HALF_M, HALF_M, dim=1).store(ds16)
    fence_async_shared()
    mbarrier.arrive(ds_ready.index(buf), count=1)
    mbarrier.wait(ds_ready.index(buf), (s // 2) & 1)
    # the step's three products over the warpgroup's columns; the stage is reused for dQ's tile
    # only once all three (and the other warpgroup's) are done
    dq = warpgroup_mma(ds_smem.index(buf).permute((1, 0)),
                       k_smem.slice(C * HALF_D, HALF_D, dim=1),
                       gl.zeros([BLOCK_M, HALF_D], gl.float32, o_layout), use_acc=False,
                       is_async=True)
    dv = warpgroup_mma(pt_smem.index(buf), do_smem.index(slot).slice(C * HALF_D, HALF_D, dim=1),
                       dv, is_async=True)
    dk = warpgroup_mma(ds_smem.index(buf), q_smem.index(slot).slice(C * HALF_D, HALF_D, dim=1),
                       dk, is_async=True)
    dq = warpgroup_mma_wait(2, deps=(dq,))
    dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))
    mbarrier.arrive(ds_free.index(buf), count=1)
    # The warpgroup's columns of dQ, scaled, go out through shared memory and the copy engine
    # adds them into the fp32 buffer (cp.reduce.async.bulk). Shared memory has no room left for
    # a tile of its own: once both warpgroups are done with the step's Q and dO, warpgroup 0
    # puts its 64 × HEAD_DIM/2 fp32 tile where Q was and warpgroup 1 where dO was (32 KiB each),
    # and the stage goes back to the loader once the copy engine has read it (in the next
    # step). Rows past N_q hold zeros (their P is 0), so the tile needs no mask.
    mbarrier.arrive(q_used.index(slot), count=1)
    mbarrier.wait(q_used.index(slot), (s // STAGES) & 1)
    if C == 0:
        tile = q_smem.index(slot)._reinterpret(gl.float32, [BLOCK_M, HALF_D], DQ.layout)
    else:
        tile = do_smem.index(slot)._reinterpret(gl.float32, [BLOCK_M, HALF_D], DQ.layout)
    tile.store(dq * scale)
    fence_async_shared()
    _reduce_add(DQ, [q_row0 + qb * BLOCK_M, C * HALF_D], tile)
    if NEXT:
        st = _issue(k_smem, q_smem, q_ready, s + 1, s_layout, HALF_M, C * HALF_M, STAGES)
        # (waited here, not at the next step: an accumulator in flight across the loop's back
        # edge makes ptxas serialize every wgmma of the kernel)
        st = warpgroup_mma_wait(0, deps=(st,))
        return dk, dv, st
    else:
        return dk, dv


@gluon.jit
def _split_consumer(args, C: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                    STAGES: gl.constexpr, CAUSAL: gl.constexpr, KEY_EDGE: gl.constexpr,
                    DIM: gl.constexpr, BAND: gl.constexpr):
    """Warpgroup C of two sharing a block of 64 keys at head_dim 256: columns
    [HEAD_DIM/2 · C, HEAD_DIM/2 · (C + 1)) of the block's dK and dV through every step, then
    their store."""
    (k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, pt_smem, ds_smem, kv_ready, q_ready,
     q_empty, q_used, ds_ready, ds_free, DQ, DK, DV, qk_scale2, scale, N_Q, N_K, H, GROUP) = args
    HALF_D: gl.constexpr = HEAD_DIM // 2
    HALF_M: gl.constexpr = BLOCK_M // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF_M, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF_D, 16])
    j, bkv = _block(BAND)
    key0 = j * 64
    dk = gl.zeros([64, HALF_D], gl.float32, o_layout)
    dv = gl.zeros([64, HALF_D], gl.float32, o_layout)
    first, unmasked, n_qb = _steps(j, N_Q, N_K, BLOCK_M, 64, CAUSAL)
    if CAUSAL:
        off = N_K - N_Q
        edge = False
    else:
        off = N_K + N_Q
        edge = KEY_EDGE and (j + 1) * 64 > N_K
    ctx = (k_smem, v_smem, pt_smem, ds_smem, q_smem, do_smem, lse_smem, delta_smem, q_ready,
           q_empty, q_used, ds_ready, ds_free, DQ, qk_scale2, scale, (off, N_Q, N_K))
    per_head = n_qb - first
    total = GROUP * per_head
    mbarrier.wait(kv_ready, 0)
    if total > 0:
        st = _issue(k_smem, q_smem, q_ready, 0, s_layout, HALF_M, C * HALF_M, STAGES)
        st = warpgroup_mma_wait(0, deps=(st,))
        for s in range(total - 1):
            g = s // per_head
            qb = first + s - g * per_head
            q_row0 = _q_row(bkv, g, H, GROUP, N_Q)
            dk, dv, st = _split_step(dk, dv, st, s, qb, q_row0, key0, edge or qb < unmasked,
                                     ctx, s_layout, o_layout, HEAD_DIM, BLOCK_M, STAGES, C,
                                     DIM, True)
        s = total - 1
        q_row0 = _q_row(bkv, GROUP - 1, H, GROUP, N_Q)
        dk, dv = _split_step(dk, dv, st, s, n_qb - 1, q_row0, key0, edge or n_qb - 1 < unmasked,
                             ctx, s_layout, o_layout, HEAD_DIM, BLOCK_M, STAGES, C, DIM, False)
    # the warpgroup's columns of dK and dV, those below DIM
    c = C * HALF_D + gl.arange(0, HALF_D, layout=gl.SliceLayout(0, o_layout))
    _store_dkdv(dk, dv, c, DK, DV, bkv * N_K + key0, key0, N_K, scale, o_layout, KEY_EDGE,
                DIM < HEAD_DIM, DIM)
    tma.store_wait(0)  # the last dQ tile read before the program ends


@gluon.jit
def _attn_bwd_split(q_desc, k_desc, v_desc, do_desc, LSE, DELTA, DQ, DK, DV, qk_scale2, scale,
                    H, GROUP, N_Q, N_K, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                    STAGES: gl.constexpr, CAUSAL: gl.constexpr, KEY_EDGE: gl.constexpr,
                    CONSUMER_REGS: gl.constexpr, DIM: gl.constexpr, BAND: gl.constexpr):
    """Program (j, b · H_kv + h_kv) at head_dim 256: key block j (64 keys) of that K/V head,
    over every query head of its group, two warpgroups sharing the block by halves of the head
    dimension (`_split_consumer`)."""
    dtype: gl.constexpr = q_desc.dtype
    k_smem = gl.allocate_shared_memory(dtype, [64, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [64, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
    row_layout: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
    lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], row_layout)
    delta_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], row_layout)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, BLOCK_M], dtype)
    pt_smem = gl.allocate_shared_memory(dtype, [2, 64, BLOCK_M], p_layout)
    ds_smem = gl.allocate_shared_memory(dtype, [2, 64, BLOCK_M], p_layout)
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ds_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    q_used = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(q_ready.index(s), count=2)  # the copies' bytes, and LSE and D stored
        mbarrier.init(q_empty.index(s), count=2)
        mbarrier.init(q_used.index(s), count=2)  # both warpgroups' products have read it
    for b in gl.static_range(2):
        mbarrier.init(ds_ready.index(b), count=2)
        mbarrier.init(ds_free.index(b), count=2)

    shared = (k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, pt_smem, ds_smem, kv_ready,
              q_ready, q_empty, q_used, ds_ready, ds_free, DQ, DK, DV, qk_scale2, scale, N_Q, N_K,
              H, GROUP)
    loads = (q_desc, k_desc, v_desc, do_desc, k_smem, v_smem, q_smem, do_smem, lse_smem,
             delta_smem, kv_ready, q_ready, q_empty, LSE, DELTA, N_Q, N_K, H, GROUP)
    gl.warp_specialize([(_split_consumer, (shared, 0, HEAD_DIM, BLOCK_M, STAGES, CAUSAL, KEY_EDGE,
                                           DIM, BAND)),
                        (_split_consumer, (shared, 1, HEAD_DIM, BLOCK_M, STAGES, CAUSAL, KEY_EDGE,
                                           DIM, BAND)),
                        (_loader, (loads, BLOCK_M, 64, STAGES, CAUSAL, BAND))],
                       [4, 1], [CONSUMER_REGS, _LOADER_REGS])
# fmt: on


def supports(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: BwdConfig) -> str | None:
    """None when this kernel can run the backward of the call with `cfg`, else why not."""
    if q.dtype not in _GL_DTYPES:
        return f"needs fp16 or bf16, got {q.dtype}"
    d = q.shape[3]
    if pad_dim(d) not in (64, 128, 256):
        return f"needs a head_dim of 33 to 256, got {d}"
    if pad_dim(d) == 256 and (cfg.consumers, cfg.block_m) != (2, 64):
        return f"runs head_dim {d} with 2 consumers and 64-row query blocks only, got {cfg}"
    need = cfg.shared_bytes(pad_dim(d))
    if need > SHARED_LIMIT:
        return f"needs {need} bytes of shared memory per CTA with {cfg} at head_dim {d}"
    return copy_engine_reason(q, k, v)


def _arguments(q, k, v, do, lse, delta, dq_acc, dk, dv, causal: bool, scale: float,
               cfg: BwdConfig) -> tuple:  # fmt: skip
    """The kernel's (positional arguments, constexprs, launch options)."""
    h, n_q, n_k = q.shape[1], q.shape[2], k.shape[2]
    d_pad = pad_dim(q.shape[3])
    keys = cfg.keys(d_pad)
    launch_regs, consumer_regs = cfg.registers()
    args = (
        _descriptor(q, cfg.block_m),
        _descriptor(k, keys),
        _descriptor(v, keys),
        _descriptor(do, cfg.block_m),
        lse,
        delta,
        _dq_descriptor(dq_acc, cfg),
        dk,
        dv,
        scale * LOG2E,
        scale,
        h,
        h // k.shape[1],
        n_q,
        n_k,
    )
    constexprs = dict(
        HEAD_DIM=d_pad,
        DIM=q.shape[3],
        BLOCK_M=cfg.block_m,
        STAGES=cfg.stages,
        CAUSAL=causal,
        KEY_EDGE=n_k % keys != 0,
        CONSUMER_REGS=consumer_regs,
        BAND=cfg.band,
    )
    if not splits_head_dim(d_pad):
        constexprs["CONSUMERS"] = cfg.consumers
    return args, constexprs, {"num_warps": 4, "maxnreg": launch_regs}


def _kernel(head_dim: int):
    """The kernel that runs `head_dim` (as a program of Triton's)."""
    return _attn_bwd_split if splits_head_dim(pad_dim(head_dim)) else _attn_bwd_ws


def _dq_descriptor(dq_acc: torch.Tensor, cfg: BwdConfig):
    """The fp32 dQ buffer as (B·H·N_q, d) in tiles of one warpgroup's share of a step
    (`dq_share`; d padded to a power of two: the copy engine drops the columns past d)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    d, d_pad = dq_acc.shape[3], pad_dim(dq_acc.shape[3])
    block = list(dq_share(cfg.block_m, d_pad, cfg.consumers))
    layout = gl.NVMMASharedLayout.get_default_for(block, gl.float32)
    rows = dq_acc.shape[0] * dq_acc.shape[1] * dq_acc.shape[2]
    return TensorDescriptor(dq_acc, [rows, d], [d, 1], block, layout)


def _grid(k: torch.Tensor, cfg: BwdConfig) -> tuple[int, int]:
    return (-(-k.shape[2] // cfg.keys(pad_dim(k.shape[3]))), k.shape[0] * k.shape[1])


def launch_backward_ws(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    do: torch.Tensor,
    causal: bool,
    scale: float,
    cfg: BwdConfig,
    *,
    dlse: torch.Tensor | None = None,
    checked: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ (like q), dK and dV (like k) by the warp-specialized kernel; ValueError where it
    cannot run them (`checked`: the caller has had `supports` pass)."""
    from flashscope.kernels.backward import preprocess

    why = None if checked else supports(q, k, v, cfg)
    if why is None and not (flat_rows(do) and do.stride(3) == 1 and do.stride(2) % 8 == 0):
        do = do.contiguous()
    if why is not None:
        raise ValueError(f"the warp-specialized backward {why}")
    if do.data_ptr() % 16 != 0:
        do = do.clone()
    # the fp32 dQ buffer the kernel adds into, zeroed by the pass that computes D; the kernel
    # adds dQ scaled, so one cast finishes it
    dq_acc = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    delta = preprocess(o, do, dlse, zero_dq=dq_acc)
    dk = output(k.shape, k.dtype, k.device)
    dv = output(v.shape, v.dtype, v.device)
    args, constexprs, options = _arguments(
        q, k, v, do, lse, delta, dq_acc, dk, dv, causal, scale, cfg
    )
    launch(_kernel(q.shape[3]), _grid(k, cfg), args, constexprs, options)
    return dq_acc.to(q.dtype), dk, dv


@per_table
def tuned_config(
    gpu: str, d_pad: int, causal: bool, seq_len: int, edge: bool = False
) -> BwdConfig | None:
    """The configuration `gpu`'s tuned table routes (head_dim as run, mask, length bucket) to,
    where this kernel beat the Triton backward there; else None. `edge`: lengths that fill no
    64-row tile, where the Triton backward masks every block's edges: the entries measured at
    such lengths first, then the others (measured on an H100: at N = 1000, 3000 and 5000 the
    Triton backward ran 0.58-0.72x sdpa-cudnn, this kernel 0.82-1.02x;
    benchmarks/results/hopper-backward-odd-*.json)."""
    keys = tuned_keys(table_key("bwd", 16, d_pad, causal), seq_len)
    entry = tuned_entry(gpu, "bwd-ws", keys, edge)
    return None if entry is None else BwdConfig(*entry)


def tuned(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> BwdConfig | None:
    """The tuned configuration for the backward of this call where the table routes it here and
    it qualifies (`supports`); else None. FLASHSCOPE_WS_BWD=0 in the environment keeps every
    backward on Triton."""
    if interpreting() or not q.is_cuda or os.environ.get("FLASHSCOPE_WS_BWD") == "0":
        return None
    if q.dtype not in _GL_DTYPES:
        return None
    n_q, n_k = q.shape[2], k.shape[2]
    edge = fills_no_tile(n_q, n_k)
    cfg = tuned_config(gpu_name(), pad_dim(q.shape[3]), causal, max(n_q, n_k), edge)
    return cfg if cfg is not None and supports(q, k, v, cfg) is None else None


def compile_sm90(
    cfg: BwdConfig,
    head_dim: int,
    causal: bool,
    dtype: torch.dtype = torch.float16,
    edges: bool = False,
):
    """Compile the kernel for an H100/H200 on any machine (CPU tensors stand in for the inputs;
    nothing runs; `edges`: for lengths that fill neither tile): Triton's CompiledKernel."""
    if interpreting():
        raise RuntimeError("compile_sm90 needs TRITON_INTERPRET unset (run it in a process apart)")
    n = 2 * cfg.keys(pad_dim(head_dim)) * cfg.block_m - (7 if edges else 0)
    q = torch.empty(1, 2, n, head_dim, dtype=dtype)
    lse = torch.empty(1, 2, n)
    acc = torch.empty(1, 2, n, head_dim)
    args, constexprs, options = _arguments(q, q, q, q, lse, lse, acc, q, q, causal, 0.1, cfg)
    return warmup_sm90(_kernel(head_dim), args, constexprs, options)


def compile_report(configs: list[tuple[BwdConfig, int]], edges: bool = False) -> list[dict]:
    """Per (configuration, head_dim) and causal: what the compiled kernel holds (its shared
    memory, its registers and spill stack as cuobjdump reads them from the cubin, its products
    and atomics in the PTX), and whether ptxas serialized its wgmma (its C7510-C7519 notes: an
    accumulator read while in flight, or too few registers to keep products in flight)."""
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    rows = []
    for cfg, d in configs:
        for causal in (False, True):
            kernel = compile_sm90(cfg, d, causal, edges=edges)
            found = cubin_resources(kernel.asm["cubin"])
            with tempfile.TemporaryDirectory() as tmp:
                ptx = Path(tmp) / "k.ptx"
                ptx.write_text(kernel.asm["ptx"])
                again = Path(tmp) / "again.cubin"
                notes = subprocess.run(
                    [ptxas, "-v", "--gpu-name", "sm_90a", ptx, "-o", again],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stderr
            rows.append(
                {
                    "config": cfg.as_list(),
                    "head_dim": d,
                    "causal": causal,
                    "edges": edges,
                    "shared": kernel.metadata.shared,
                    "regs": found["REG"],
                    "stack": found["STACK"],
                    "local": found["LOCAL"],
                    "wgmma": kernel.asm["ptx"].count("wgmma.mma_async"),
                    "atomics": kernel.asm["ptx"].count("atom.global"),
                    "reduces": kernel.asm["ptx"].count("cp.reduce.async.bulk"),
                    "serialized": re.findall(r"\(C751\d\)[^\n]*", notes),
                }
            )
    return rows


if __name__ == "__main__":
    import json
    import sys

    # The configurations given as JSON [[[consumers, block_m, stages], head_dim], …], or every
    # candidate; "--edges" compiles for lengths that fill no tile.
    given = [a for a in sys.argv[1:] if a != "--edges"]
    if given:
        wanted = [(BwdConfig(*c), d) for c, d in json.loads(given[0])]
    else:
        wanted = [(cfg, d) for d, cfgs in CANDIDATES.items() for cfg in cfgs]
    json.dump(compile_report(wanted, "--edges" in sys.argv), sys.stdout)
