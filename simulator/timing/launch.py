"""One kernel launch as the timing engine sees it: per-CTA work in launch order (arrays).

Per CTA: the counting convention's counts (hbm/stats/acc elements read and written, tensor FLOPs,
exponentials; their sums equal `simulator/teach/traffic.py`), inner-loop iterations, non-matmul
FLOPs, the K/V head it reads, and where each byte sits in the CTA's life and who else touches it,
for the L2 model.

Byte classes of a CTA (bytes; dtype size for Q/K/V/O/S/P, 4 for stats and acc):
    edge_read / edge_write   outside the inner loop (Q tile before it, O and LSE after it)
    stream_read              loop reads of a block range [stream_lo, stream_hi) of a stream that
                             other CTAs of the launch read too (fa2: K/V of a kv head; fa2-bwd
                             main: Q, dO, LSE, D and the dQ accumulator of a head; fa1: K/V)
    self_read                loop re-reads of data this CTA touched before (fa1's Q, O, ℓ, m on
                             every outer pass after the first; `passes` outer passes)
    seen_read                cold reads of inputs the previous launch of the call read too
                             (the backward's dO and D in the dQ kernel, K and V in the dK/dV
                             kernel after it); `stream_seen` says the same of the share of its
                             streams' first reads
    carry_read               reads of what the previous launch wrote (naive S and P, dQ
                             accumulator, decode partials)
    merge_write              rewrites of recently touched lines (fa1's O, ℓ, m; the dQ
                             accumulator), which a write-back L2 may absorb
    reduce_write             part of the loop's writes that are reduce-adds performed in L2
                             (the atomic backward route's dQ), slower than plain writes
    reduce_ops               how many bulk reduce-adds carry those bytes (one per tile)
    spread_read              part of edge_read the convention charges to this CTA although
                             every CTA of its stream group loads it (naive attention's K and V,
                             charged to the first CTA of each head): for timing, each CTA of
                             the group moves an equal share; the counts stay as charged
    local_load / local_store spilled registers reloaded and stored (local memory) by flashscope's
                             compiled kernels (`compiled.py`): outside the convention's counts,
                             they stay in L1 and L2 (the engine's `spill_l1_miss`)
    local_writeback          of those, the bytes written back to DRAM (measured per kernel and
                             GPU, `compiled.writeback`); where that was not measured, the
                             launch's `local_frame` (a thread's spill slots) lets the engine
                             estimate it (`engine.spill_dram`)
Everything else read is cold (first touch in this launch).

A launch may carry its own tile configuration (`tiles`: the kernels' helper passes, whose
blocks are fixed), may run `concurrent` with the launch before it (a second CUDA stream: it
starts when the previous one starts, and its CTAs take SMs as that launch's CTAs leave them),
and may say what its matrix products are (`mma_shapes`, `Product`s: how wide, how tall, and
whether their A operand comes from shared memory), how many times an iteration waits on
them (`chain`), and how much more matrix-product work the compiled kernel issues than the
counted FLOPs (`mma_pad`: flashscope's kernels pad head_dim to a power of two on chip) and
how many more bytes its tiles move between L2 and the SMs than counted (`l2_pad`), and
how many tensor descriptors each CTA builds on the device (`descriptors`: flashscope's kernels
describe their tensors to the copy engine once on the host only when every tile is whole), and
whether its warpgroups meet at a barrier every iteration (`barrier`: the Gluon backward's, before
dQ's share; engine.lockstep), and how much of the next iteration's work runs before it waits
for the copy engine to read a bulk reduce-add's tile out of shared memory (`reduce_overlap`:
all of it, except in the Gluon backward at head dims past 128, whose tile borrows the
iteration's Q/dO stage and is waited for once the next step's first two products are done).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from flashscope.simulator.core.problem import TileConfig

COUNTS = (
    "hbm_read",
    "hbm_write",
    "stats_read",
    "stats_write",
    "acc_read",
    "acc_write",
    "flops",
    "exps",
)
ACC_BYTES = 4
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_SCALARS = (
    "stream_blocks", "stream_tail", "tiles", "concurrent", "mma_shapes", "chain", "regs",
    "smem", "mma_pad", "descriptors", "host_descriptors", "local_frame", "stream_seen", "l1_miss",
    "l2_pad", "barrier", "split_warps", "compiled_key", "compiled_source", "reduce_overlap",
)  # fmt: skip
_FLOAT = (
    "alu",
    "edge_read",
    "edge_write",
    "stream_read",
    "self_read",
    "carry_read",
    "seen_read",
    "merge_write",
    "spread_read",
    "reduce_write",
    "local_load",
    "local_store",
    "local_writeback",
)


class Product(NamedTuple):
    """One matrix product of a CTA's iteration, as the engine prices it (engine.mma_factor)."""

    share: float  # of the launch's tensor FLOPs
    n: int  # its width N
    rows: int | None = None  # its M where not the CTA's (the atomic route's dQ += dS K)
    a_smem: bool = False  # A read from shared memory (wgmma with both operands there)


@dataclass(frozen=True, eq=False)
class Launch:
    """One kernel launch: per-CTA arrays of length n_ctas, in launch order."""

    name: str
    kind: str  # footprint profile (occupancy.footprint)
    rows: int  # query rows one CTA holds (block_m, or the packed rows of decode)
    grid: tuple[int, ...]
    dtype_bytes: int
    iters: IntArray
    hbm_read: IntArray
    hbm_write: IntArray
    stats_read: IntArray
    stats_write: IntArray
    acc_read: IntArray
    acc_write: IntArray
    flops: IntArray
    exps: IntArray
    alu: FloatArray
    edge_read: FloatArray
    edge_write: FloatArray
    stream_read: FloatArray
    self_read: FloatArray
    carry_read: FloatArray
    seen_read: FloatArray
    merge_write: FloatArray
    spread_read: FloatArray
    reduce_write: FloatArray
    reduce_ops: IntArray
    local_load: FloatArray
    local_store: FloatArray
    local_writeback: FloatArray
    kv_head: IntArray  # the K/V head (batch · kv_heads + kv head) it reads, −1 for none
    stream: IntArray  # stream id, −1 for none
    stream_lo: IntArray
    stream_hi: IntArray
    passes: IntArray
    stream_blocks: int = 0  # blocks of every stream of the launch
    stream_tail: float = 1.0  # the last block's bytes as a fraction of a full block's
    tiles: TileConfig | None = None  # None: the workload's tile configuration
    concurrent: bool = False  # runs beside the previous launch, on another stream
    mma_shapes: tuple[Product, ...] = ()  # its iteration's matrix products: engine.mma_factor
    chain: int = 0  # waits on matrix products per iteration (each exposes their latency)
    regs: int | None = None  # registers per thread of the compiled kernel (None: estimated)
    smem: int | None = None  # shared memory per CTA of the compiled kernel (None: estimated)
    mma_pad: float = 1.0  # matrix-product work issued per counted FLOP (head_dim padded)
    descriptors: int = 0  # tensor descriptors each CTA builds on the device before its work
    host_descriptors: int = 0  # tensor descriptors the host makes for the launch (whole tiles)
    local_frame: float = 0.0  # local bytes a thread keeps (spill slots) where no write-back
    # was measured (0: none, or measured: `local_writeback`)
    stream_seen: float = 0.0  # share of its streams' first reads the previous launch read too
    l1_miss: float | None = None  # share of spill reloads missing L1 (None: `spill_l1_miss`)
    l2_pad: float = 1.0  # bytes between L2 and the SMs per counted byte (head_dim padded)
    barrier: bool = False  # its warpgroups meet at a barrier every iteration (engine.lockstep)
    reduce_overlap: float = 1.0  # share of the next iteration's work its reduce tile's read
    # runs under before the kernel waits for it (0: waited in the iteration that wrote it)
    split_warps: int = 0  # warps splitting a tile's columns, exchanging through shared
    # memory every iteration (engine.XWARP_NS; kernelplan.split_columns)
    compiled_key: str = ""  # its key in the compiled-kernel tables ("": not a Triton kernel)
    compiled_source: str = ""  # where its registers and spills come from (compiled.SOURCES)

    @classmethod
    def make(
        cls, name: str, kind: str, rows: int, grid: tuple[int, ...], e: int, **cols: Any
    ) -> Launch:
        """Fill absent columns with zeros (stream with −1, passes with 1) and fix dtypes."""
        n = int(np.prod(grid))
        out: dict[str, Any] = {
            "stream_blocks": int(cols.pop("stream_blocks", 0)),
            "stream_tail": float(cols.pop("stream_tail", 1.0)),
            "tiles": cols.pop("tiles", None),
            "concurrent": bool(cols.pop("concurrent", False)),
            "mma_shapes": tuple(cols.pop("mma_shapes", ())),
            "chain": int(cols.pop("chain", 0)),
            "regs": cols.pop("regs", None),
            "smem": cols.pop("smem", None),
            "mma_pad": float(cols.pop("mma_pad", 1.0)),
            "descriptors": int(cols.pop("descriptors", 0)),
            "host_descriptors": int(cols.pop("host_descriptors", 0)),
            "local_frame": float(cols.pop("local_frame", 0.0)),
            "stream_seen": float(cols.pop("stream_seen", 0.0)),
            "l1_miss": cols.pop("l1_miss", None),
            "l2_pad": float(cols.pop("l2_pad", 1.0)),
            "barrier": bool(cols.pop("barrier", False)),
            "reduce_overlap": float(cols.pop("reduce_overlap", 1.0)),
        }
        for f in cls.__dataclass_fields__:
            if f in ("name", "kind", "rows", "grid", "dtype_bytes", *_SCALARS):
                continue
            default = -1 if f in ("stream", "kv_head") else (1 if f == "passes" else 0)
            value = cols.pop(f, default)
            dtype = np.float64 if f in _FLOAT else np.int64
            arr = np.asarray(value, dtype=dtype)
            if arr.shape == (n,) and n > 1 and arr.strides != (0,) and _constant(arr):
                arr = arr[:1].copy()  # one value for every CTA: kept once, broadcast (read-only)
            out[f] = arr if arr.shape == (n,) else broadcast(arr, n)
        if cols:
            raise TypeError(f"unknown launch columns {sorted(cols)}")
        return cls(name, kind, rows, grid, e, **out)

    @property
    def n_ctas(self) -> int:
        return len(self.iters)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every per-CTA column by name."""
        skip = ("name", "kind", "rows", "grid", "dtype_bytes", *_SCALARS)
        return {f: getattr(self, f) for f in self.__dataclass_fields__ if f not in skip}

    def reordered(self, order: np.ndarray) -> Launch:
        """The same CTAs launched in another order (`order[k]`: which CTA goes k-th)."""
        n = len(order)
        # a column broadcast from one value (stride 0) stays one: no copy to gather
        cols: dict[str, Any] = {
            k: broadcast(v[:1], n) if v.size and v.strides == (0,) else v[order]
            for k, v in self.arrays().items()
        }
        return dataclasses.replace(self, **cols)

    # The derived columns below are computed once per launch (a launch's columns are never
    # changed in place: `reordered` and dataclasses.replace make a new launch).

    @functools.cached_property
    def read_bytes(self) -> np.ndarray:
        return self._bytes(self.hbm_read, self.stats_read, self.acc_read)

    @functools.cached_property
    def write_bytes(self) -> np.ndarray:
        return self._bytes(self.hbm_write, self.stats_write, self.acc_write)

    def _bytes(self, elements: np.ndarray, stats: np.ndarray, acc: np.ndarray) -> np.ndarray:
        """Per CTA: `elements` in the launch's dtype plus the fp32 `stats` and `acc`."""
        e = self.dtype_bytes
        return _each(lambda h, s, a: h * e + (s + a) * 4.0, elements, stats, acc)

    @functools.cached_property
    def cold_read(self) -> np.ndarray:
        """Reads that are neither stream nor self re-reads (carried reads included)."""
        return _each(lambda r, s, o: r - s - o, self.read_bytes, self.stream_read, self.self_read)

    @functools.cached_property
    def groups(self) -> tuple[np.ndarray, int]:
        """`stream_groups` of its stream ids."""
        return stream_groups(self.stream)

    @functools.cached_property
    def group_runs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(where each run of CTAs of one `groups` group begins, its group) where every group
        is one run of consecutive CTAs; None where one is split."""
        inv, k = self.groups
        if not inv.size:
            return None
        begins = np.flatnonzero(np.r_[True, inv[1:] != inv[:-1]])
        return (begins, inv[begins]) if len(begins) == k else None

    def totals(self) -> dict[str, int]:
        return {k: int(getattr(self, k).sum()) for k in COUNTS}


def broadcast(value: np.ndarray, n: int) -> np.ndarray:
    """np.broadcast_to(value, (n,)): a read-only view of stride 0, made directly where `value`
    holds one element (np.broadcast_to takes several times as long: a launch makes dozens)."""
    if value.size != 1:
        return np.broadcast_to(value, (n,))
    one = np.ascontiguousarray(value).reshape(1)
    out = np.ndarray((n,), one.dtype, one, 0, (0,))
    out.flags.writeable = False
    return out


def _each(f: Any, *cols: np.ndarray) -> np.ndarray:
    """f of per-CTA columns, element by element: worked out once and broadcast where every
    column is one value broadcast (the same figure for every CTA)."""
    n = len(cols[0])
    if n and all(c.strides == (0,) for c in cols):
        return broadcast(f(*(c[:1] for c in cols)), n)
    out: np.ndarray = f(*cols)
    return out


def _constant(arr: np.ndarray) -> bool:
    """Does every element of `arr` hold its first one's bits (-0.0 is not 0.0)?"""
    bits = arr.view(np.int64) if arr.dtype == np.float64 else arr
    return bool((bits == bits[0]).all())


def stream_groups(stream: np.ndarray) -> tuple[np.ndarray, int]:
    """(group index of every CTA, number of groups) for the stream ids of a launch (−1 too)."""
    if stream.size and np.all(stream[1:] >= stream[:-1]):  # the usual case: contiguous ids
        inv = np.concatenate([[0], np.cumsum(stream[1:] != stream[:-1])])
        return inv, int(inv[-1]) + 1
    if stream.size:
        lo, hi = int(stream.min()), int(stream.max())
        if hi - lo < 4 * stream.size + 1024:  # ids are head indices: rank them by a table
            present = np.zeros(hi - lo + 1, dtype=bool)
            present[stream - lo] = True
            rank = np.cumsum(present) - 1  # the rank of each id among those present
            return rank[stream - lo], int(rank[-1]) + 1
    _, inv = np.unique(stream, return_inverse=True)
    return inv, int(inv.max(initial=-1)) + 1
