"""What flashscope's own Triton kernels launch, as workloads of the timing engine.

The counting convention's algorithms (`workload.py`) are the papers' algorithms. The kernels in
kernels/forward.py and kernels/backward.py (see docs/kernels.md) differ from them
in ways a timing shows, so `impl="flashscope"` builds these launches instead:

    fa2       one launch, CTA per (query block, batch·head); causal query blocks are launched
              heaviest first (program 0 runs the last query block). Counts equal fa2's.
    fa2-bwd   preprocess D = rowsum(dO∘O) in 64-row blocks (32 beyond d = 128), then a route:
      separate  the dQ kernel (CTA per (query block, batch·head), heaviest first; per visible
                tile reads Kⱼ, Vⱼ; 3 products: S, dP, dQ += dS K; writes dQ in the dtype) on a
                side stream, concurrently with the dK/dV kernel (CTA per (key block, batch ·
                kv_head); the group's query heads and their visible query blocks inside; per
                tile reads Qᵢ, dOᵢ, LSEᵢ, Dᵢ; 4 products: Sᵀ, dPᵀ, dV += Pᵀ dO, dK += dSᵀ Q)
      atomic    PyTorch zero-fills an fp32 dQ buffer; the dK/dV kernel adds a 5th product dS K
                per tile and reduce-adds its fp32 (BM × d) result into that buffer inside L2
                (a bulk reduction: the kernel never reads the buffer); PyTorch then scales it
                (fp32 → fp32) and casts it (fp32 → dtype): two more passes over Nq·d per head.
      ws        the warp-specialized Gluon backward (kernels/hopper_backward.py; `WsConfig`): the
                preprocess also zero-fills the fp32 dQ buffer; one kernel of CTAs per (key block
                of 64·consumers keys, batch · kv_head), one per SM, the atomic route's dK/dV
                work with its five products per step, dQ's share reduce-added from shared memory,
                the consumers meeting at a barrier every step (`Launch.barrier`), programs in
                bands of heads where the configuration says (`band_order`); then one cast of dQ.

The dQ kernel may have its own tiles (`dq_tiles`, default the main tiles); the preprocess and
the PyTorch passes have fixed 64-row blocks of 4 warps. `kernel_route` reads the route the
kernels choose per GPU and sequence-length bucket from kernels/tuned.json ("routes"; a test
holds the two lookups equal); elsewhere "separate". `default_route` puts a call on "ws" where
the table's "bwd-ws" sections send it to the Gluon backward (`ws_config`, as
kernels/hopper_backward.tuned_config reads them, with the entries a Hopper GPU lacks lent by
another: `tuned_tables`), as `flash_attention` does on Hopper.

Byte classes, beyond fa2's (see launch.py): the atomic route's reduce-adds are L2 write
requests that a write-back L2 absorbs while the line stays (merge_write), and the first CTA of a
head (key block 0, which every query block sees) fetches the zeroed buffer into L2 (an acc_read
carried from the fill): so the buffer reaches DRAM about once each way. Closed forms:
`traffic.flashscope`. SRAM counts are not modelled here. The forward, dQ and dK/dV launches
carry the local-memory traffic of their compiled kernels where `compiled.py` has measured it
(register spills: outside the counts above), and their matrix products run at head_dim padded
to a power of two, as the kernels hold their tiles on chip (`padded`).
"""

from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from flashscope.simulator.core.gpu import Efficiency
from flashscope.simulator.core.problem import STATS_BYTES, AttentionProblem, TileConfig, cdiv
from flashscope.simulator.timing import compiled, tuned_tables
from flashscope.simulator.timing.engine import _pad_rows, warpgroup_layout
from flashscope.simulator.timing.launch import ACC_BYTES, Launch, Product
from flashscope.simulator.timing.occupancy import pad_head_dim, register_demand, warp_level
from flashscope.simulator.timing.workload import (
    Workload,
    _fa2,
    _heads,
    _kv_stream,
    _query_grid,
    per_head,
)

IMPLS = ("convention", "flashscope")
KERNEL_ALGOS = ("fa2", "fa2-bwd")
BWD_ROUTES = ("separate", "atomic", "ws")
TUNED_FILE = Path(__file__).resolve().parents[2] / "kernels" / "tuned.json"
# The GPU presets whose kernels were tuned, by the name the GPU reports (kernels/tuned.json).
TUNED_GPUS = {"NVIDIA H200": "h200", "NVIDIA H100 80GB HBM3": "h100-sxm"}
# The Hopper presets no sweep has tuned: `flash_attention` there takes the Gluon kernels' entries
# another GPU lends (`tuned_tables`), and so does the engine.
OTHER_HOPPER = ("h100-pcie",)
# Sequence-length buckets of the tuned table: an entry ".../n2048" holds 1025–2048 (the kernels look
# their tiles and routes up with the same rule: flashscope.kernels.launch imports `tuned_keys`).
SEQ_BUCKETS = (1024, 2048, 4096, 8192, 16384)
HELPER_WARPS = 4
# FP32-pipe instructions per score element in the unmasked loop, counted in the compiled
# kernels' PTX (benchmarks/ptx_loops.py; the same for every tile configuration the datasets
# measured but the dK/dV kernel's 4-warp 32-row tiles at 32 and 128 keys, 5.25): the dQ kernel's
# S·scale − LSE, dP − D, P·(dP − D) and dS's conversion; the dK/dV kernel's the same, Pᵀ's
# conversion and the compares and selects (setp, selp) its PTX has beside them. The forward's
# count follows its formula in workload._fa2, 4 + d_pad / BN per element (O's accumulator is
# head_dim padded to a power of two wide: `padded`), within 10% of the PTX's.
# (Both were 6 before they were counted.)
DQ_FP32 = 3.5
DKDV_FP32 = 6.5


@lru_cache
def tuned_routes() -> dict[str, dict[str, str]]:
    """GPU preset → the kernels' measured dQ routes ("bwd-route/16/d64/full[/n2048]" → name)."""
    if not TUNED_FILE.exists():
        return {}
    gpus = json.loads(TUNED_FILE.read_text())["gpus"]
    return {TUNED_GPUS[name]: e.get("routes", {}) for name, e in gpus.items() if name in TUNED_GPUS}


def tuned_keys(key: str, seq_len: int | None) -> list[str]:
    """The tuned table's keys to try, most specific first: the length bucket's ("…/n2048" holds
    1025–2048; beyond the last bucket, the last), then the key tuned at one length."""
    if seq_len is None:
        return [key]
    bucket = next((b for b in SEQ_BUCKETS if seq_len <= b), SEQ_BUCKETS[-1])
    return [f"{key}/n{bucket}", key]


def kernel_route(gpu_key: str, p: AttentionProblem) -> str:
    """The backward route flashscope's kernels take for `p` on GPU preset `gpu_key`: the one
    measured for its sequence-length bucket, else for its (head_dim, causal), else separate."""
    if p.dtype == "fp32":
        return "separate"
    routes = tuned_routes().get(gpu_key.removesuffix("+custom"), {})
    key = f"bwd-route/16/d{pad_head_dim(p.head_dim)}/{'causal' if p.causal else 'full'}"
    found = (routes[k] for k in tuned_keys(key, max(p.seq_q, p.seq_k or p.seq_q)) if k in routes)
    return next(found, "separate")


def preprocess_rows(p: AttentionProblem) -> int:
    """Rows per CTA of the preprocess kernel (kernels/backward.preprocess)."""
    return 64 if pad_head_dim(p.head_dim) <= 128 else 32


def check(algo: str, route: str | None, dq_tiles: TileConfig | None) -> None:
    if algo not in KERNEL_ALGOS:
        raise ValueError(f"algo must be one of {', '.join(KERNEL_ALGOS)} with impl flashscope")
    if route is not None and route not in BWD_ROUTES:
        raise ValueError(f"route must be one of {', '.join(BWD_ROUTES)}, got {route!r}")
    if algo != "fa2-bwd" and (route is not None or dq_tiles is not None):
        raise ValueError("route and the dQ tiles apply to fa2-bwd only")


def _rowwise(name: str, p: AttentionProblem, rows_per_cta: int, **per_row: float) -> Launch:
    """A pass over the Nq rows of every head in blocks of `rows_per_cta` (per-row counts × r)."""
    n_q = cdiv(p.seq_q, rows_per_cta)
    rows = np.minimum(rows_per_cta, p.seq_q - np.arange(n_q, dtype=np.int64) * rows_per_cta)
    rows = np.tile(rows, p.batch * p.heads)  # (n_q · B·H,)
    cols = {k: v * rows for k, v in per_row.items()}
    tiles = TileConfig(rows_per_cta, 64, 3, HELPER_WARPS)
    return Launch.make(
        name, "rowwise", rows_per_cta, (n_q, p.batch * p.heads), p.dtype_bytes, iters=1,
        tiles=tiles, **cols,
    )  # fmt: skip


def _dq_kernel(p: AttentionProblem, t: TileConfig) -> Launch:
    e, d, bh_n = p.dtype_bytes, p.head_dim, p.batch * p.heads
    rows, vis, vcols, _ = _query_grid(p, t)
    n_q = len(rows)
    area = rows * vcols
    _, kv = _heads(p, n_q)  # one value per head: the same in either order

    def tile(x: npt.ArrayLike) -> np.ndarray:  # causal: each head's heaviest block first
        return per_head(x, bh_n, heavy_first=p.causal)

    return Launch.make(
        "bwd_dq", "bwd_dq", t.block_m, (n_q, bh_n), e,
        iters=tile(vis),
        hbm_read=tile(2 * rows * d + 2 * d * vcols),
        hbm_write=tile(rows * d),
        stats_read=tile(2 * rows),
        flops=tile(6 * d * area),
        exps=tile(area),
        alu=tile(DQ_FP32 * area),
        edge_read=tile(2.0 * rows * d * e + 2 * rows * STATS_BYTES),
        # dO and D, which the preprocess pass before it read and wrote
        seen_read=tile(1.0 * rows * d * e + rows * STATS_BYTES),
        edge_write=tile(1.0 * rows * d * e),
        stream_read=tile(2.0 * d * vcols * e),
        kv_head=kv,
        stream=np.where(tile(vis) > 0, kv, -1),
        stream_hi=tile(vis),
        tiles=t,
        concurrent=False,
        # S and dP read both operands from shared memory; dQ += dS K takes dS from registers
        mma_shapes=(Product(2 / 3, t.block_n, a_smem=True), Product(1 / 3, pad_head_dim(d))),
        # the compiled loop (PTX) waits on S (with the previous tile's dQ product, left in
        # flight across iterations), then on dP: two waits
        chain=2,
        **_kv_stream(p, t),
    )  # fmt: skip


def _dkdv_kernel(
    p: AttentionProblem, t: TileConfig, atomic: bool, fp32_per_score: float | None = None
) -> Launch:
    """The dK/dV kernel (with dQ's reduce-adds where `atomic`); `fp32_per_score`: its FP32
    work per score element, by default the Triton kernel's (`DKDV_FP32` and its layout)."""
    e, d, nk = p.dtype_bytes, p.head_dim, p.seq_k
    g = p.group
    hk_n = p.batch * p.kv_heads
    rows, vis, _, n_kv = _query_grid(p, t)
    n_q = len(rows)
    bn = t.block_n
    cols = np.minimum(bn, nk - np.arange(n_kv, dtype=np.int64) * bn)  # (n_kv,)
    lo = np.searchsorted(vis, np.arange(n_kv), side="right")  # first query block seeing j
    suffix = np.concatenate([np.cumsum(rows[::-1])[::-1], [0]])  # Σ r_i for i ≥ k
    sr = g * suffix[lo]  # (n_kv,) query rows met, over the group's heads
    products = 5 if atomic else 4
    if fp32_per_score is None:
        # ×gn where warpgroups split the keys' columns (each then holds the whole tile's
        # elementwise work: the PTX's count doubles)
        fp32_per_score = DKDV_FP32 * warpgroup_layout(bn, t.warps)[1]
    stream_bytes = sr * (2 * d * e + 2 * STATS_BYTES)

    def tk(x: npt.ArrayLike) -> np.ndarray:
        return np.tile(x, hk_n)

    steps = tk(g * (n_q - lo))  # query steps of each CTA, over the group's heads
    cols_extra: dict[str, Any] = {}
    if atomic:
        acc = d * sr  # reduce-added elements
        first = np.zeros(n_kv, dtype=np.int64)
        first[0] = d * sr[0]  # key block 0 meets every row that any key block meets
        cols_extra = {
            "acc_write": tk(acc),
            "acc_read": tk(first),
            "carry_read": tk(first * float(ACC_BYTES)),
            "merge_write": tk((acc - first) * float(ACC_BYTES)),
            "reduce_write": tk(acc * float(ACC_BYTES)),
            "reduce_ops": steps,  # one block_m × d tile per query step
        }
    kv = np.repeat(np.arange(hk_n, dtype=np.int64), n_kv)
    return Launch.make(
        "bwd_dkdv", "bwd", t.block_m, (n_kv, hk_n), e,
        iters=steps,
        hbm_read=tk(2 * cols * d + 2 * d * sr),
        hbm_write=tk(2 * cols * d),
        stats_read=tk(2 * sr),
        flops=tk(2 * products * d * cols * sr),
        exps=tk(cols * sr),
        alu=tk(fp32_per_score * cols * sr),
        edge_read=tk(2.0 * cols * d * e),
        # after the dQ kernel (separate route) every input it reads the dQ kernel read: K and
        # V, and its streams of Q, dO, LSE and D; on the atomic route dO and D, which the
        # preprocess pass read and wrote before the accumulator's fill
        seen_read=0.0 if atomic else tk(2.0 * cols * d * e),
        stream_seen=(d * e + STATS_BYTES) / (2 * d * e + 2 * STATS_BYTES) if atomic else 1.0,
        edge_write=tk(2.0 * cols * d * e),
        stream_read=tk(stream_bytes.astype(np.float64)),
        kv_head=kv,
        stream=kv,
        stream_lo=tk(lo),
        stream_hi=n_q,
        stream_blocks=n_q,
        stream_tail=float(rows[-1]) / t.block_m,
        tiles=t,
        concurrent=not atomic,
        # Sᵀ and dPᵀ are BM wide, both operands in shared memory; dV and dK are d wide with
        # Pᵀ and dSᵀ in registers (all BN rows); the atomic route's dQ = dS K is d wide with
        # BM rows, dS in registers
        mma_shapes=(Product(2 / products, t.block_m, a_smem=True),
                    Product(2 / products, pad_head_dim(d)))
        + ((Product(1 / products, pad_head_dim(d), t.block_m),) if atomic else ()),
        # the compiled loop (PTX) waits on Sᵀ (with the previous tile's dV and dK products,
        # left in flight), then on dPᵀ; the atomic route once more, on dQ, whose tile it stores
        # for the reduce-add
        chain=3 if atomic else 2,
        **cols_extra,
    )  # fmt: skip


def _backward(
    p: AttentionProblem, t: TileConfig, route: str, dq_tiles: TileConfig
) -> tuple[Launch, ...]:
    d = p.head_dim
    pre = _preprocess(p)
    if route == "separate":
        return pre, _dq_kernel(p, dq_tiles), _dkdv_kernel(p, t, atomic=False)
    fill = _rowwise("dq_zero_fill", p, 64, acc_write=d)
    scale = _rowwise(
        "dq_scale", p, 64, acc_read=d, acc_write=d, alu=1.0 * d, carry_read=float(d * ACC_BYTES)
    )
    return pre, fill, _dkdv_kernel(p, t, atomic=True), scale, _dq_cast(p)


def _preprocess(p: AttentionProblem, zero_dq: bool = False) -> Launch:
    """D = rowsum(dO ∘ O); `zero_dq`: the fp32 dQ buffer zero-filled in the same pass."""
    d = p.head_dim
    return _rowwise(
        "bwd_preprocess", p, preprocess_rows(p),
        hbm_read=2 * d, stats_write=1, alu=2.0 * d, **({"acc_write": d} if zero_dq else {}),
    )  # fmt: skip


def _dq_cast(p: AttentionProblem) -> Launch:
    """The fp32 dQ buffer cast to the dtype."""
    d = p.head_dim
    return _rowwise(
        "dq_cast", p, 64, acc_read=d, hbm_write=d, alu=1.0 * d, carry_read=float(d * ACC_BYTES)
    )


# The warp-specialized Gluon backward (route "ws", kernels/hopper_backward.py): which calls run it,
# and its launch. Its configurations are the tuned table's [consumers, block_m, stages(, band)].
WS_SECTIONS = ("bwd-ws", "bwd-ws-edge")
WS_DTYPES = ("fp16", "bf16")
WS_HEAD_DIMS = (33, 256)  # head dims it runs, multiples of 8 (kernels/hopper_backward.supports)
KEYS_PER_CONSUMER = 64  # keys one consumer warpgroup owns
# The registers a CTA launches with (BwdConfig.registers: 4·(consumers + 1) warps of 248 or 168),
# per consumer thread (the engine counts the consumers' warps): one CTA per SM either way, as
# its shared memory does too (BwdConfig.shared_bytes at d = 128: 145 KB with one consumer,
# 193–226 KB with two).
WS_REGS = {1: 496, 2: 252}
# Waits per step that a consumer warpgroup cannot fill with its own work (each costs the
# engine's `mma_chain_ns`): on Sᵀ (issued a step ahead), on dPᵀ, and at the barrier the consumers
# meet before dQ's share (every warpgroup's dSᵀ in shared memory), the share's product waited on
# with it. Fitted (1 to 4 tried) with WS_FP32 on the fit half of the Gluon backward's measured
# rows (simulator/calibrate/ws_rows.py, benchmarks/ws_backward_model.py --fit): 3 gives the
# fit half 3.45% mean error; 1 or 2, 3.50%; 4, 4.17%.
WS_CHAIN = 3
# FP32-pipe instructions per score element: the elementwise steps of the Triton dK/dV kernel
# (Sᵀ·scale − LSE, dPᵀ − D, Pᵀ ∘ (dPᵀ − D), the conversions of Pᵀ and dSᵀ), here with no compares
# and selects outside the masked steps. Fitted (2 to 6.5 tried, steps of 0.5) on the same half:
# 3.5 (the dQ kernel's count, DQ_FP32) against DKDV_FP32's 6.5 (4.74% on the fit half) and 2.0
# (3.80%).
WS_FP32 = 3.5
# Past d = 128 (`_attn_bwd_split`) the share of a step the copy engine's read of the previous
# step's dQ tiles runs under before the kernel waits for it: the next step's Sᵀ and dPᵀ, two of
# its five products, each 2 · 64 · 32 · 256 FLOP per warpgroup (from the kernel, not fitted).
WS_SPLIT_OVERLAP = 2 / 5


def ws_splits_head_dim(head_dim: int) -> bool:
    """Whether the Gluon backward runs `head_dim` with its two warpgroups sharing 64 keys by
    halves of the head dimension (kernels/hopper_backward.splits_head_dim: past 128 as run)."""
    return pad_head_dim(head_dim) > 128


@dataclasses.dataclass(frozen=True)
class WsConfig:
    """One launch of the warp-specialized backward (kernels/hopper_backward.BwdConfig):
    consumers warpgroups of 64 keys each (at a head_dim run at 256, two sharing 64 keys by
    halves of the head dimension), block_m query rows per step, a ring of `stages` Q/dO
    buffers, programs in bands of `band` heads (0: head after head)."""

    consumers: int = 2
    block_m: int = 64
    stages: int = 2
    band: int = 0

    def __post_init__(self) -> None:
        if self.consumers not in (1, 2) or self.block_m not in (64, 128):
            raise ValueError("the ws backward takes 1 or 2 consumers and block_m 64 or 128")
        if self.stages not in (1, 2, 3) or not 0 <= self.band <= 256:
            raise ValueError("the ws backward takes 1 to 3 stages and bands of 0 to 256 heads")

    def keys(self, head_dim: int) -> int:
        """Keys per program (kernels/hopper_backward.BwdConfig.keys)."""
        return KEYS_PER_CONSUMER * (1 if ws_splits_head_dim(head_dim) else self.consumers)

    def tiles(self, head_dim: int) -> TileConfig:
        return TileConfig(self.block_m, self.keys(head_dim), self.stages, 4 * self.consumers)


@lru_cache
def tuned_ws() -> dict[str, dict[str, dict[str, list[int]]]]:
    """GPU preset → section ("bwd-ws", "bwd-ws-edge") → the Gluon backward's configurations,
    with the entries a Hopper GPU lacks at a head dim lent by another (`tuned_tables.lend`, as
    the kernels read them): the tuned presets their own, the other Hopper presets
    (`OTHER_HOPPER`) only lent ones."""
    if not TUNED_FILE.exists():
        return {}
    gpus = tuned_tables.lend(json.loads(TUNED_FILE.read_text())["gpus"])
    presets = {key: name for name, key in TUNED_GPUS.items()} | {
        key: tuned_tables.OTHER for key in OTHER_HOPPER
    }
    return {
        key: {s: gpus.get(name, {}).get(s, {}) for s in WS_SECTIONS}
        for key, name in presets.items()
    }


def ws_supports(p: AttentionProblem) -> bool:
    """Whether the Gluon backward can run `p` (kernels/hopper_backward.supports, less the
    tensors' layout): fp16 or bf16, head_dim 33 to 256 with rows on 16-byte boundaries."""
    lo, hi = WS_HEAD_DIMS
    return p.dtype in WS_DTYPES and lo <= p.head_dim <= hi and p.head_dim * p.dtype_bytes % 16 == 0


def ws_config(gpu_key: str, p: AttentionProblem) -> WsConfig | None:
    """The configuration the kernels' tuned table routes `p`'s backward to on GPU preset
    `gpu_key` (kernels/hopper_backward.tuned_config: the head_dim as run, the mask, the length
    bucket; at lengths that fill no 64-row tile the "-edge" entries first), else None."""
    if not ws_supports(p):
        return None
    table = tuned_ws().get(gpu_key.removesuffix("+custom"), {})
    key = f"bwd/16/d{pad_head_dim(p.head_dim)}/{'causal' if p.causal else 'full'}"
    keys = tuned_keys(key, max(p.seq_q, p.seq_k or p.seq_q))
    edge = p.seq_q % 64 != 0 or p.seq_k % 64 != 0
    names = WS_SECTIONS[::-1] if edge else WS_SECTIONS[:1]
    found = (table.get(s, {}).get(k) for k in keys for s in names)
    entry = next((e for e in found if e is not None), None)
    return None if entry is None else WsConfig(*entry)


def default_ws(p: AttentionProblem) -> WsConfig:
    """The configuration route "ws" takes where the table names none: the kernels' first
    candidate at its head_dim (kernels/hopper_backward.CANDIDATES)."""
    return WsConfig(2, 128 if pad_head_dim(p.head_dim) <= 64 else 64, 2)


def default_route(gpu_key: str, p: AttentionProblem) -> str:
    """The backward `flash_attention` runs for `p` on `gpu_key`: "ws" where the tuned table
    routes it to the Gluon backward, else the Triton backward's route (`kernel_route`)."""
    return "ws" if ws_config(gpu_key, p) is not None else kernel_route(gpu_key, p)


def band_order(n_kv: int, heads: int, band: int) -> np.ndarray:
    """Launch order of a grid (n_kv key blocks, heads) in bands of `band` heads
    (kernels/hopper_backward._block): program k runs CTA order[k] (head · n_kv + key block)."""
    k = np.arange(n_kv * heads, dtype=np.int64)
    if band <= 0:
        return k
    b = k // (band * n_kv)
    r = k - b * band * n_kv
    size = np.minimum(heads - b * band, band)
    order: np.ndarray = (b * band + r % size) * n_kv + r // size
    return order


def _ws_kernel(p: AttentionProblem, cfg: WsConfig) -> Launch:
    """The Gluon backward's kernel: the atomic route's dK/dV kernel with the key block split
    between `consumers` warpgroups (at head_dim 256: 64 keys, the head dimension split) and
    dQ's share reduce-added from shared memory."""
    t = cfg.tiles(p.head_dim)
    w = _dkdv_kernel(p, t, atomic=True, fp32_per_score=WS_FP32)
    n_kv = cdiv(p.seq_k, t.block_n)
    w = dataclasses.replace(
        w,
        name="bwd_ws",
        regs=WS_REGS[cfg.consumers],
        chain=WS_CHAIN,
        barrier=True,  # the consumers meet before dQ's share every step
        # past d = 128 the dQ tiles borrow the step's Q/dO stage, which goes back to the loader
        # once the copy engine has read them: the kernel waits for that read in the next step,
        # after its Sᵀ and dPᵀ, two of a step's five products of equal size (a kernel measured
        # with dQ computed but not written ran 0.60x the time,
        # benchmarks/results/hopper-backward-d256-dq-ablation-*)
        reduce_overlap=WS_SPLIT_OVERLAP if ws_splits_head_dim(p.head_dim) else 1.0,
        # Q, K, V, dO and the dQ buffer described once on the host (TMA)
        host_descriptors=5,
    )
    return w.reordered(band_order(n_kv, p.batch * p.kv_heads, cfg.band))


def _ws_backward(p: AttentionProblem, cfg: WsConfig) -> tuple[Launch, ...]:
    """The preprocess (D, and the fp32 dQ buffer zeroed in the same pass), the kernel, the
    cast of dQ to the dtype."""
    return _preprocess(p, zero_dq=True), _ws_kernel(p, cfg), _dq_cast(p)


def with_local_traffic(
    launch: Launch, p: AttentionProblem, t: TileConfig, route: str | None, gpu_key: str
) -> Launch:
    """`launch` with what is known of its compiled kernel: registers, shared memory, spill loads
    and stores, and the spills' DRAM write-back where it was measured."""
    tiles = launch.tiles or t
    if launch.name not in compiled.LAUNCH_KERNEL:
        return launch
    k = compiled.key(launch.name, p, tiles, route)
    found = compiled.known(k, gpu_key)
    launch = dataclasses.replace(
        launch, regs=found.registers, smem=found.shared, compiled_key=k,
        compiled_source=found.source,
    )  # fmt: skip
    traffic = found.traffic
    if traffic is None and launch.regs is None:
        # a kernel the table does not know: its spills from the registers its tiles ask for
        overhead = Efficiency().reg_overhead
        demand = register_demand(
            launch.kind, _pad_rows(launch.rows), tiles.block_n, p.head_dim, tiles.warps,
            p.dtype_bytes, overhead,
        )  # fmt: skip
        traffic = compiled.estimate(demand, tiles.maxnreg, overhead)
    if traffic is None:
        return launch
    threads = 32 * tiles.warps
    heads = p.group if launch.name == "bwd_dkdv" else 1  # query heads each dK/dV CTA walks
    load, store = traffic.bytes(launch.iters, threads, heads)
    cols: dict[str, Any] = {"local_load": load, "local_store": store}
    back = compiled.writeback(k, gpu_key)
    if back is not None:
        cols["local_writeback"] = back.bytes(launch.iters, threads)
    elif not compiled.measured(k):  # the compiler's or the estimate's spills: the engine
        # estimates their DRAM traffic and L1 misses from the slots a thread keeps
        cols["local_frame"] = traffic.frame(heads)
    return dataclasses.replace(launch, **cols)


def padded(launch: Launch, p: AttentionProblem) -> Launch:
    """`launch` charged the matrix-product work its compiled kernel issues: every tile of Q, K,
    V, dO and of the accumulators is `pad_head_dim(d)` columns wide on chip (masked loads read
    zeros beyond d), so each product reducing over head_dim or as wide as it does d_pad / d of
    the counted FLOPs. Nsight Compute's tensor-pipe activity on the users' sweep (H100,
    2026-11-26) supports it: per useful FLOP/s, the forwards that neither spill nor wait on the
    host keep the pipe 1.7, 1.3 and 1.4 times as busy at d = 80, 96 and 192 as at d = 128 and
    256 (medians; the padding says 1.6, 1.33 and 1.33).

    The tiles cross between L2 and the SMs padded too (`l2_pad`, the same d_pad / d; what
    reaches DRAM is the tensors' own bytes): on the same sweep the SMs' L2 bytes
    (l1tex__m_xbar2l1tex_read_bytes + l1tex__m_l1tex2xbar_write_bytes) of the calls that do
    not spill were a median 1.59, 1.33 and 1.33 times the counted bytes at d = 80, 96 and 192
    in the forward (38, 30 and 23 calls; 1.58 and 1.31 in the backward at d = 80 and 96), and
    1.000–1.005 at d = 32, 64, 128 and 256, where nothing is padded. For the same reason the
    forward's O accumulator is d_pad wide, and its rescale each step and normalization at the
    end run over d_pad columns (`build`: the FP32 work per score element is 4 + d_pad / BN;
    with it the fit half's mean |log error| goes from 0.2017 to 0.2009)."""
    if not launch.mma_shapes:
        return launch
    pad = pad_head_dim(p.head_dim) / p.head_dim
    return dataclasses.replace(launch, mma_pad=pad, l2_pad=pad)


def with_descriptors(
    launch: Launch, p: AttentionProblem, t: TileConfig, route: str | None, gpu_key: str
) -> Launch:
    """`launch` with the tensor descriptors each of its CTAs builds on the device.

    On Hopper flashscope's kernels read and write through the copy engine's tensor
    descriptors, made once on the host when every tile is whole (N_q a multiple of the query
    block, N_k of the key block), else by every program for itself (kernels/forward.py,
    `host_descriptors`; kernels/backward.py): the forward's Q, K, V and O; the dQ kernel's Q,
    dO, K, V and dQ; the dK/dV kernel's K, V, dK and dV, and Q and dO (with the atomic route
    its dQ accumulator too) for each query head of its group. The engine charges each
    `DESCRIPTOR_NS` of waiting before the CTA's loop (`engine._work`)."""
    kernel = compiled.LAUNCH_KERNEL.get(launch.name)
    if kernel is None or gpu_key not in compiled.ARCH_PRESETS:
        return launch
    tiles = launch.tiles or t
    if p.seq_q % tiles.block_m == 0 and p.seq_k % tiles.block_n == 0:
        # one descriptor per tensor, made on the host for the whole launch
        host = {"fwd": 4, "dq": 5}.get(kernel, 7 if route == "atomic" else 6)
        return dataclasses.replace(launch, host_descriptors=host)
    count = {"fwd": 4, "dq": 5}.get(kernel, 4 + (3 if route == "atomic" else 2) * p.group)
    return dataclasses.replace(launch, descriptors=count)


def split_columns(p: AttentionProblem, t: TileConfig) -> int:
    """How many warps of a forward CTA split its tiles' columns (0: they split the rows).

    With warp-level products (`occupancy.warp_level`) Triton lays a chain of products' warps
    out by P·V's shape (BM × d_pad): along the rows where BM ≥ d_pad, else all of them along
    the columns. Compiled for sm_90a with the Triton 3.6.0 the users' sweep ran, its 111
    forwards on spread tiles all follow this rule (warpsPerCTA [1, W] exactly where
    BM < d_pad). Warps that split the columns each hold a slice of every row, so each loop step
    reduces the row maximum and the row sum across them and hands P to the warps that
    multiply it through shared memory: the loop body has 10 barriers (18 at one stage) against
    3 (10) where the warps split the rows, with shared-memory stores and loads beside them
    (`engine.XWARP_NS`)."""
    rows = _pad_rows(t.block_m)
    if t.warps < 2 or not warp_level(rows, t.warps) or rows >= pad_head_dim(p.head_dim):
        return 0
    return t.warps


def useful_flops(algo: str, p: AttentionProblem) -> float:
    """The papers' convention: 4·B·H·Nq·Nk·d, halved when causal, × 2.5 for the backward."""
    useful = 4.0 * p.batch * p.heads * p.seq_q * p.seq_k * p.head_dim
    if p.causal:
        useful /= 2
    return 2.5 * useful if algo == "fa2-bwd" else useful


def build(
    algo: str,
    p: AttentionProblem,
    t: TileConfig,
    *,
    gpu_key: str = "h100-sxm",
    route: str | None = None,
    dq_tiles: TileConfig | None = None,
    ws: WsConfig | None = None,
) -> Workload:
    """The launches flashscope's kernels make for `algo` (fa2 or fa2-bwd) on `p` with `t`.

    fa2-bwd: `route` None takes the kernels' choice on `gpu_key` (`default_route`); `dq_tiles`
    None: `t`. Route "ws" runs `ws`, else the tuned table's configuration, else `default_ws`
    (the Gluon backward ignores `t`).
    """
    check(algo, route, dq_tiles)
    if ws is not None and (algo != "fa2-bwd" or (route or default_route(gpu_key, p)) != "ws"):
        raise ValueError("a ws configuration applies to the fa2-bwd route ws only")
    if algo == "fa2":
        d = pad_head_dim(p.head_dim)
        # causal: each head's heaviest block first; O's accumulator is d_pad wide (`padded`)
        (launch,) = _fa2(p, t, heavy_first=p.causal, acc_cols=d)
        # one wait per iteration (PTX): on S, with the previous tile's P·V, left in flight
        shapes = (Product(0.5, t.block_n, a_smem=True), Product(0.5, d))  # S (smem), P·V (regs)
        launch = dataclasses.replace(
            launch, mma_shapes=shapes, chain=1, split_warps=split_columns(p, t)
        )
        launches: tuple[Launch, ...] = (launch,)
        chosen = None
    else:
        chosen = route or default_route(gpu_key, p)
        if chosen == "ws":
            if not ws_supports(p):
                lo, hi = WS_HEAD_DIMS
                raise ValueError(
                    f"route ws (the Gluon backward) takes fp16 or bf16 and head_dim {lo}-{hi}, "
                    "a multiple of 8"
                )
            cfg = ws or ws_config(gpu_key, p) or default_ws(p)
            launches = _ws_backward(p, cfg)
        else:
            launches = _backward(p, t, chosen, dq_tiles or t)
    launches = tuple(with_local_traffic(w, p, t, chosen, gpu_key) for w in launches)
    launches = tuple(padded(w, p) for w in launches)
    launches = tuple(with_descriptors(w, p, t, chosen, gpu_key) for w in launches)
    return Workload(algo, p, t, launches, useful_flops(algo, p), impl="flashscope", route=chosen)


def compiled_keys(
    algo: str,
    p: AttentionProblem,
    t: TileConfig,
    *,
    gpu_key: str = "h100-sxm",
    route: str | None = None,
    dq_tiles: TileConfig | None = None,
) -> list[str]:
    """The compiled-kernel keys (`compiled.key`) of the Triton kernels `build` launches for these
    arguments, without building anything (the Gluon backward's route: none)."""
    check(algo, route, dq_tiles)
    if algo == "fa2":
        return [compiled.key("fa2", p, t)]
    chosen = route or default_route(gpu_key, p)
    if chosen == "ws":
        return []
    keys = [compiled.key("bwd_dkdv", p, t, chosen)]
    if chosen == "separate":
        keys.append(compiled.key("bwd_dq", p, dq_tiles or t, chosen))
    return keys


def ctas_of(
    algo: str,
    p: AttentionProblem,
    t: TileConfig,
    *,
    gpu_key: str = "h100-sxm",
    route: str | None = None,
    dq_tiles: TileConfig | None = None,
) -> int:
    """How many CTAs `build` would launch in all, without building anything (for limits)."""
    check(algo, route, dq_tiles)
    bh = p.batch * p.heads
    if algo == "fa2":
        return cdiv(p.seq_q, t.block_m) * bh
    dkdv = cdiv(p.seq_k, t.block_n) * p.batch * p.kv_heads
    pre = cdiv(p.seq_q, preprocess_rows(p)) * bh
    chosen = route or default_route(gpu_key, p)
    if chosen == "ws":
        cfg = ws_config(gpu_key, p) or default_ws(p)
        keys = cfg.keys(p.head_dim)
        return pre + cdiv(p.seq_k, keys) * p.batch * p.kv_heads + cdiv(p.seq_q, 64) * bh
    if chosen == "separate":
        return pre + cdiv(p.seq_q, (dq_tiles or t).block_m) * bh + dkdv
    return pre + 3 * cdiv(p.seq_q, 64) * bh + dkdv
