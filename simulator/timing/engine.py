"""The cycle-approximate timing engine: a workload's launches on a GPU, CTA by CTA, vectorized.

For each launch, in order (each waits for the previous one, after a launch gap; a launch marked
`concurrent` runs on a second stream instead: it starts one launch gap after the previous
launch, and its CTAs take the SMs' slots as that launch's CTAs leave them):

1. Occupancy: CTAs per SM from shared memory, registers and warps (`occupancy.py`); an SM
   is that many slots. Registers are the compiled kernel's where they were measured
   (`compiled.py`: Nsight Compute's count for that kernel and tile configuration), the
   estimate from the tiles elsewhere.
2. Duration of every CTA given c, the CTAs sharing its SM. Per CTA, at the whole SM's rates:
   tensor T = FLOPs / tensor rate (slower where shared memory cannot feed a narrow product
   whose operands both sit there: `smem_feed`, for tiles of fewer than 64 rows per warpgroup
   and for warpgroups that split columns: `mma_factor`), SFU S =
   exps / exp rate, ALU A = other FLOPs / FP32 rate, loads X = loop bytes / L2→SM rate. The
   tensor cores overlap the warps' own instructions (S + A, one instruction stream) partly: the
   larger of T and S + A plus (1 − h) of the smaller, where h grows from `overlap` (one CTA
   alone; less by `lockstep` / c^`lockstep_fill` where its warpgroups split the rows on a ring
   of two K/V buffers, or meet at a barrier every iteration, and c CTAs share the SM; by
   `two_stage` / c for any other CTA on such a ring) with the other CTAs on the SM
   (`cta_overlap`; on a ring of three or more buffers a CTA's warpgroups along the rows drift
   apart and count as CTAs too, unless they meet at a barrier); a CTA whose registers
   spill is slower by `spill_penalty`, and its local loads and stores all pass its SM's L1 at
   `local_gbs` (with the stores and the reloads that miss L1 at the L2 rate, among its loads:
   X). With stages ≥ 2 loads run ahead of compute (max of the two), with one stage the tile loads
   add to it while the spills' local traffic, the warps' own instructions among the compute, still
   overlaps it (`_one_stage`). Sharing the SM with b CTAs in their loops and too few warps to
   saturate it (u = min(1, b·warps / warps_to_saturate)) stretches this by b / u, where b counts the
   other c − 1 CTAs for the share of their lives they spend in their loops, not in set-up (a fixed
   point: b = 1 + (c − 1)·loop / (loop + set-up wait)). Load latency (L2 hit or DRAM, by this CTA's
   hit rate) and the tile's transfer bound each iteration from below: stages − 1 loads in flight
   give at least (latency + transfer) / (stages − 1) per iteration; one stage pays it every time.
   And a CTA's warps wait on their products: each of an iteration's `chain` waits (as its PTX has
   them) adds a latency `mma_chain_ns` that its warpgroup cannot fill itself, at least (work /
   warpgroups along the rows) + iterations · chain · latency (plus, for bulk reduce-adds, what
   `bulk_read_ns` and the tile's transfer take beyond an iteration's work: the copy engine must have
   read the tile out of its shared-memory buffer before the next iteration's tile goes there, or
   beyond the share of it the kernel runs before waiting for that read, `reduce_overlap`; each
   reduce-add also costs the warps `reduce_op_ns`). Before the loop: CTA set-up, the tensor
   descriptors it builds itself (`DESCRIPTOR_NS` each), the latency of the first load and the edge
   bytes. c is the residency a full GPU has (CTAs per SM), or ⌈CTAs / SMs⌉ when the grid cannot fill
   every slot; the load latency here counts only compulsory misses (see below), shared alike by the
   CTAs of one stream (they wait on the same first fetches).
3. Schedule in launch order as slots free up (`scheduler.py`): waves, the tail of the last
   wave and causal imbalance (light query blocks finish first) come out of it. A slot takes
   `cta_dispatch_ns` to pass from a CTA to the next, and the first wave's CTAs, which all start
   at once, take `cold_start_ns` longer (both measured from recorded schedules). Once the last
   CTA has started, the CTAs left on an SM share it among fewer: as each ends, the others run
   at their durations for the residency left (`scheduler.share_tail`), unless the next launch
   runs beside this one and takes the freed slots.
4. L2 (`l2model.py`): which requests hit, which reach DRAM, from the schedule.
5. DRAM bandwidth shared by all the CTAs of the launch (a fluid model at launch granularity):
   when the launch asks for more bytes than bandwidth × its span, its whole timeline stretches
   until the bytes fit; every CTA running then waits alike. The L2's reduce units are shared
   the same way: a launch's reduce-adds need their bytes at `l2_reduce` of the L2 rate, and
   stretch it likewise.
6. The power cap (before the DRAM stretch): the rates above are at the boost clock (the
   tensor ceiling, measured on a long matrix product held at the cap, is raised by `boost`);
   a launch whose tensor rate and L2 traffic over its span would draw more than the cap runs
   at a lower clock (`clock_share`), and its SM-side time stretches by 1 / clock.
7. Breakdown: each CTA's time split among limiters, weighted by its share of the SM (1/c),
   summed over SMs; idle SM time until the launch ends is `tail`; the DRAM stretch is `memory`.

Monotone by construction: durations depend on the GPU only through its rates and residency,
list scheduling never gets slower with more slots or shorter CTAs (but for which CTAs share
an SM at a launch's end: paired differently, CTAs of unequal work speed up at different times,
a list-scheduling anomaly of a few per cent), and bandwidth enters only
the stretch — so more DRAM bandwidth is never slower, and more SMs are slower only when the
L2 model predicts more DRAM traffic (more CTAs in flight reference more distinct data).

Knowingly left out: DRAM
demand is not resolved within a launch (a per-instant fluid warp was tried: perfectly fair
sharing finishes a memory-bound wave in lockstep and then charges latency-bound stragglers,
which real GPUs, whose CTAs finish staggered, largely overlap); capacity misses do not add
latency (their bandwidth is charged); register spills beyond their L1 and L2 bytes, their
DRAM traffic (`spill_dram`: measured, or from the slots the resident threads keep) and a
fitted `spill_penalty`; bank
conflicts, instruction issue, TLB and DRAM page effects are not modelled; the power cap is
one figure per launch (phases of different demand within it, and the budget concurrent
launches share, are not resolved);
concurrent launches share SMs but not L2 capacity nor DRAM bandwidth (each is split as if it
ran alone).

The engine returns dataclasses and arrays (`results.py`); it never formats output.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from flashscope.simulator.core.hardware import GPU, Efficiency
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing.l2model import (
    L2Split,
    compulsory_hits,
    hit_chance,
    split_traffic,
    streams,
)
from flashscope.simulator.timing.launch import Launch, Product
from flashscope.simulator.timing.occupancy import (
    REG_UNIT,
    WGMMA_ROWS,
    Occupancy,
    footprint,
    occupancy,
    warp_level,
    warp_level_forward_smem,
)
from flashscope.simulator.timing.results import LIMITERS, KernelResult, SimResult
from flashscope.simulator.timing.roofline import floors
from flashscope.simulator.timing.scheduler import list_schedule, share_tail, sm_time_order
from flashscope.simulator.timing.workload import Workload, build

_PARTS = ("tensor", "sfu", "alu", "memory", "latency")
# What a CTA waits for each tensor descriptor it builds on the device (`Launch.descriptors`):
# written to global memory and fenced for the copy engine before the first tile's copy. Fitted
# on the fit half of the users' sweep measured on an H100 (benchmarks/results/
# validation-users-NVIDIA-H100-80GB-HBM3-2026-11-26.json), where forwards whose lengths fill no
# whole tile (so each program builds its own four descriptors) ran 14–23% slower than the engine
# predicted on average (by causal mask and which length is ragged) against 4% slower and 3%
# faster for whole tiles, causal or not (forwards of 64 rows or more that neither spill nor
# wait on the host); with the term the ragged ones err by −6.6%, the whole ones by −0.6%. The
# fit half's mean |log error| is flat from 700 to 1000 ns (0.2247–0.2250, 0.2332 without the
# term). The protocol's lengths fill whole tiles: it has none. Both Hopper presets share the SM
# that builds them.
DESCRIPTOR_NS = 800.0
# Of the reloads of spilled lines L2 evicted, the share read back from DRAM (`spill_dram`):
# fitted on the same fit half's DRAM bytes (MAPE 26.6%, 26.0%, 25.9%, 26.5% at 0.1, 0.25, 0.4,
# 0.6); Nsight Compute's reads came to 0.2–0.9 of the loads of kernels past the L2.
SPILL_RELOAD_DRAM = 0.4
# How sharply the spilled lines written back to DRAM rise with the spill slots' footprint F
# over the usable L2 (`spill_dram`: x^k / (1 + x^k), x = F / capacity, k this exponent). The
# slots share L2 with the launch's own streams, so evictions start before they fill it and
# half of the stores are written back where they would just fill it. Fitted on the fit half of
# the users' sweep (H100, 2026-11-26) by its DRAM bytes: MAPE 14.6%, 12.6%, 12.4%, 12.6%, 13.1%
# at 3, 4, 5, 6, 8 (15.1% with no write-back below the L2's capacity).
SPILL_SLOT_EXP = 5.0
# L1 and shared memory share one array per SM, this much larger than the shared memory an SM
# may give (NVIDIA's A100 and H100 architecture: 192 / 164 KiB, 256 / 228 KiB).
L1_EXTRA_KIB = 28
# The share of the L1 that shared memory leaves which spill slots may keep (`spill_l1`): the
# better of 0.5 and 1 on the users' fit half's L2 bytes (MAPE 12.7% against 12.8%; 17.6%
# with the constant miss share).
SPILL_L1_SHARE = 0.5
# What each loop step of a CTA whose warps split its tiles' columns (`Launch.split_warps`,
# `kernelplan.split_columns`: warp-level forwards with BM < d_pad) waits, per warp, on its
# exchanges through shared memory: the row maximum and the row sum reduced across the warps and
# P handed to the warps that multiply it (7 barriers a step beyond a row-split loop's, in the
# sm_90a SASS), a latency on top of the step's work that other CTAs on the SM can fill. Nsight
# Compute (users' sweep, H100, 2026-11-26,
# benchmarks/results/validation-users-NVIDIA-H100-80GB-HBM3-2026-11-26.json): such forwards on
# 8 warps (16–32-row tiles at d = 32–192, two to four stages) took 1.0–1.5 µs a step per CTA
# whatever the step's work, 25–64% more than the engine (u044, u146, u148, u197, u258, u363,
# u422), while on 2 warps they erred by −1% to +20% without it. Fitted on the fit half: mean
# |log error| 0.1951 without the term, 0.1921 at 35 ns (flat from 30 to 45 ns; a cost per step
# independent of the warps is as good at 40 ns, 0.1920, and takes the 2-warp rows up by up to
# 14%); held out, the time MAPE 19.1% → 18.8%, the spread forwards' 22.0% → 19.4%.
XWARP_NS = 35.0
_BUSY_STEPS = 4  # fixed-point steps for the CTAs sharing the SM in their loops (_durations)


def _pad_rows(rows: int) -> int:
    return max(16, 1 << (rows - 1).bit_length())


class _Rates:
    """Per-SM rates of one GPU for one dtype, efficiencies applied."""

    def __init__(self, gpu: GPU, dtype: str) -> None:
        eff = gpu.efficiency
        self.boost = boost(gpu)
        self.tensor = gpu.tensor_flops(dtype) * eff.tensor * self.boost / gpu.sms
        self.sfu = gpu.sfu_exps * eff.sfu / gpu.sms
        self.alu = gpu.fp32_tflops * 1e12 * eff.fp32 / gpu.sms
        self.l2 = gpu.l2_gbs * 1e9 * eff.l2 / gpu.sms
        self.dram = gpu.hbm_bytes_per_s * eff.hbm
        self.eff = eff


def boost(gpu: GPU) -> float:
    """How much faster the tensor cores run at the boost clock than the measured ceiling.

    The ceiling is a long matrix product's sustained rate R, itself held at the power cap: at
    the boost clock it would run b·R, a demand of b·R / power_tflops, so the cap holds it at
    b^-1 = (b·R / power_tflops)^-power_exp of the boost clock: b = (R / power_tflops)^(γ/(1−γ)).
    1 where no cap is modelled or the product stays under it.
    """
    eff = gpu.efficiency
    ratio = gpu.tensor_flops("fp16") * eff.tensor / (eff.power_tflops * 1e12)
    if eff.power_exp == 0 or ratio <= 1:
        return 1.0
    return float(ratio ** (eff.power_exp / (1.0 - eff.power_exp)))


def l1_miss(w: Launch, eff: Efficiency) -> float:
    """The share of a launch's spill reloads that miss L1 (`spill_l1_miss`, or the launch's
    own where its spill slots outgrow L1: `spill_l1`)."""
    return eff.spill_l1_miss if w.l1_miss is None else w.l1_miss


def spill_l1(w: Launch, t: TileConfig, resident: int, gpu: GPU, smem: int) -> Launch:
    """`w` with the share of its spill reloads that miss L1, where its slots were not measured
    (`Launch.local_frame` > 0) and `resident` CTAs of `smem` bytes of shared memory share an
    SM.

    L1 and shared memory are one array per SM, `L1_EXTRA_KIB` larger than the shared memory
    an SM may give, so L1 keeps what the resident CTAs' shared memory leaves. The resident
    threads' spill slots (frame × threads × resident) compete for it: while they fit in
    `SPILL_L1_SHARE` of it, a reload misses L1 with the fitted chance `spill_l1_miss` (the
    protocol's kernels, whose slots are small); beyond, the hit chance falls off like L2's
    (`l2model.hit_chance`). Nsight Compute supports it (users' sweep on an H100, 2026-11-26):
    the kernels whose slots exceed the room L1 keeps read 0.85–1.0 of their reloads from L2
    (l1tex__m_xbar2l1tex_read_bytes beyond their other reads), where spill_l1_miss says 0.16.
    """
    if w.local_frame <= 0 or not w.local_load.any():
        return w
    eff = gpu.efficiency
    room = max(gpu.smem_per_sm + L1_EXTRA_KIB * 1024 - resident * smem, 1024) * SPILL_L1_SHARE
    slots = np.array([w.local_frame * 32 * t.warps * resident])
    kept = float(hit_chance(slots, room, eff.l2_reuse_exponent)[0])
    return dataclasses.replace(w, l1_miss=1.0 - (1.0 - eff.spill_l1_miss) * kept)


def spill_bytes(w: Launch, eff: Efficiency) -> np.ndarray:
    """Local-memory bytes each CTA moves through L2: every spill store (L1 writes through)
    and the share of its reloads that miss L1 (`l1_miss`)."""
    return w.local_store + l1_miss(w, eff) * w.local_load


def spill_dram(
    w: Launch, t: TileConfig, resident: int, capacity: float, exponent: float
) -> tuple[float, float]:
    """(bytes of spilled lines written back to DRAM, bytes of reloads read from DRAM) of launch
    `w` run with tiles `t`, `resident` CTAs in flight at once.

    Measured per compiled kernel where the table has its write-back (`local_writeback`, no
    reloads from DRAM). Elsewhere from the local memory the resident threads keep: each thread
    `local_frame` bytes of spill slots, rewritten step after step, so `resident` CTAs hold
    F = frame × threads × resident distinct local bytes, x = F / capacity. The slots share L2
    with the launch's streams, so a spilled line is evicted dirty before its next store with
    a chance that rises smoothly through x = 1: x^k / (1 + x^k), k = `SPILL_SLOT_EXP` (half
    the stores where the slots alone would fill the usable L2), and every such store reaches
    DRAM. Reloads wait less long than the next store: a share `SPILL_RELOAD_DRAM` of them is
    read back from DRAM only past the L2's capacity, 1 − h of them, h =
    `l2model.hit_chance`(F, capacity, exponent) (the L2 model's own curve). Nsight Compute
    supports it (users' sweep on an H100, 2026-11-26,
    benchmarks/results/validation-users-NVIDIA-H100-80GB-HBM3-2026-11-26.json; F from the
    binary's spill stack and the launch's occupancy; forwards and dK/dV kernels storing over
    50 MB, fit half): the share of their spill stores written back beyond their other writes
    was a median 3% for x < 0.5 (19 kernels; the curve 0.2%), 15% from 0.5 to 0.8 (10; 8%),
    24% to 1 (2; 37%), 64% to 1.25 (7; 61%), 65% to 2 (7; 79%) and 93% beyond (9; 100%), where
    a curve that writes nothing back below x = 1 said 0, 0, 0, 30%, 65% and 100%. Reloads
    read from DRAM came to 0.2–0.9 of the loads of kernels past the L2, under a tenth of them
    below it. Launches of a few CTAs keep few slots (u111: 8 CTAs, 44 MB of stores, none
    written back).
    """
    back = float(w.local_writeback.sum())
    if w.local_frame <= 0 or not math.isfinite(capacity):
        return back, 0.0
    threads = 32 * t.warps
    footprint = np.array([w.local_frame * threads * resident])
    x = float(footprint[0] / capacity) ** SPILL_SLOT_EXP
    write = float(w.local_store.sum()) * x / (1.0 + x)
    h = float(hit_chance(footprint, capacity, exponent)[0])
    read = float(w.local_load.sum()) * (1.0 - h) * SPILL_RELOAD_DRAM
    return back + write, read


def power_counts(w: Launch, eff: Efficiency) -> tuple[float, float]:
    """(tensor FLOPs, L2 ↔ SM bytes) of a launch: what `clock_share` weighs."""
    l2 = (w.read_bytes.sum() + w.write_bytes.sum()) * w.l2_pad + spill_bytes(w, eff).sum()
    return float(w.flops.sum()), float(l2)


def clock_share(eff: Efficiency, flops: float, l2_bytes: float, span: float) -> float:
    """The share of the boost clock a launch sustains under the power cap (1: under it).

    Its demand relative to the cap: tensor rate / `power_tflops` + L2 traffic / `power_l2_tbs`,
    both over its span at the boost clock; above 1 the clock falls to demand^-`power_exp`.
    """
    if eff.power_exp == 0 or span <= 0:
        return 1.0
    demand = flops / span / (eff.power_tflops * 1e12) + l2_bytes / span / (eff.power_l2_tbs * 1e12)
    return float(max(1.0, demand) ** -eff.power_exp)


def _edge_bytes(w: Launch) -> np.ndarray:
    """Bytes each CTA moves outside its loop, `spread_read` shared evenly in its group."""
    edge = w.edge_read + w.edge_write
    spread = w.spread_read
    if spread.any():
        inv, _ = w.groups
        share = np.bincount(inv, weights=spread) / np.bincount(inv)
        edge = edge - spread + share[inv]
    return edge


def product_rows(w: Launch, t: TileConfig) -> int:
    """The M of a CTA's matrix products: its keys in the dK/dV kernel, else its query rows."""
    return t.block_n if w.kind == "bwd" else _pad_rows(w.rows)


def warpgroup_layout(rows: int, warps: int) -> tuple[int, int, float]:
    """(warpgroups along the rows, warpgroups splitting the columns, row padding factor).

    A CTA's warpgroups (4 warps each) go along the rows while the tile has 64-row slices for
    them, then across the columns; a tile of fewer than 64 rows still issues 64-row
    instructions (padding > 1).
    """
    groups = max(1, warps // 4)
    along_m = max(1, min(groups, rows // WGMMA_ROWS))
    return along_m, max(1, groups // along_m), max(1.0, WGMMA_ROWS * along_m / rows)


def mma_factor(
    shapes: tuple[Product, ...],
    feed: float,
    rows: int | None = None,
    warps: int = 4,
    split: float = 0.0,
) -> float:
    """Tensor time multiplier of products `shapes` against the ceiling.

    With rows (the product's own, else `rows`) the warpgroups are placed as `warpgroup_layout`
    says: padded rows cost their instructions, and each of gn warpgroups splitting the columns
    takes 1/gn of the product's width (and a surcharge `split` per extra warpgroup for the
    operands they exchange through shared memory). Shared memory must feed each 64-row step
    its B operand (N rows of 16) and, where A is not in registers, A's 64 rows as well: with
    `feed` (ρ, `Efficiency.smem_feed`) the time that takes against the tensor time is
    ρ·(1 + 64/N) or ρ, and the product runs at the slower of the two.
    """
    if not shapes:
        return 1.0
    total = 0.0
    for p in shapes:
        m = p.rows if p.rows is not None else rows
        pad, gn = 1.0, 1
        if m is not None:
            _, gn, pad = warpgroup_layout(m, warps)
        width = p.n / gn
        smem = feed * (1.0 + WGMMA_ROWS / width) if p.a_smem else feed
        total += p.share * pad * (1.0 + split * (gn - 1)) * max(1.0, smem)
    return float(total)


def lockstep(w: Launch, t: TileConfig) -> bool:
    """Do the CTA's warpgroups split its rows (≥ 2 slices of 64) and share a two-buffer ring,
    or meet at a barrier every iteration (`Launch.barrier`, at any depth of the ring)?

    Then no warpgroup can run ahead of another by a tile: they wait on the same buffers, their
    softmax and matrix phases coincide, and the overlap within the CTA shrinks (`lockstep`).
    """
    along_m, _, _ = warpgroup_layout(product_rows(w, t), t.warps)
    return bool(w.mma_shapes) and (t.stages == 2 or w.barrier) and along_m >= 2


def two_stage(w: Launch, t: TileConfig) -> bool:
    """A CTA of matrix products on a ring of two K/V buffers, not in lockstep: the next tile's
    copy into a buffer waits until this tile's products reading it are done, so the products of
    consecutive tiles overlap the softmax less (`two_stage`)."""
    return bool(w.mma_shapes) and t.stages == 2 and not lockstep(w, t)


@dataclasses.dataclass(frozen=True)
class _Work:
    """What `_durations` needs of every CTA that does not depend on its co-residency c."""

    tensor: np.ndarray  # (n,) seconds of tensor work at the whole SM's rate
    sfu: np.ndarray  # (n,)
    vector: np.ndarray  # (n,) SFU + ALU: one instruction stream
    loads: np.ndarray  # (n,) loop bytes at the L2 → SM rate
    local: np.ndarray  # (n,) of which the spills' local traffic (L1 and L2)
    edge_bytes: np.ndarray  # (n,)
    fetch_latency: np.ndarray  # (n,) iterations × load latency
    edge_wait: np.ndarray  # (n,) set-up and the first load's latency
    iters: np.ndarray  # (n,)
    wait: np.ndarray | None  # (n,) the waits on products (`chain`), None without
    reduce_write: np.ndarray | None  # (n,) bytes of bulk reduce-adds, None without
    reduce_overlap: float  # share of the next iteration run before a reduce tile's read is waited
    kind: str  # "lockstep", "two_stage" or "" (how the CTA's own overlap depends on c)
    along_m: int
    drift: int

    def tiled(self, reps: int) -> _Work:
        """The same CTAs `reps` times over (to evaluate several co-residencies at once)."""
        cols: dict[str, Any] = {
            f.name: np.tile(v, reps)
            for f in dataclasses.fields(self)
            if isinstance(v := getattr(self, f.name), np.ndarray)
        }
        return dataclasses.replace(self, **cols)


# Launch columns that say where a CTA's data lies (which head, which blocks), not how much work
# it does: they differ from head to head where the work does not.
_PLACE = ("stream", "kv_head", "stream_lo", "stream_hi")


def _period(w: Launch, c: np.ndarray, loop_hit: np.ndarray) -> int:
    """How many CTAs the work of launch `w` repeats after, bit for bit: a row of its grid (its
    first dimension: every head of an attention launch does the same work), where every
    column `_work` may read repeats so (all but `_PLACE`), and c and the hit rates; else all
    of them."""
    n = w.n_ctas
    p = w.grid[0] if len(w.grid) > 1 else n
    if p >= n or n % p or w.spread_read.any():  # spread reads are shared out over a stream
        return n
    cols = [v for k, v in w.arrays().items() if k not in _PLACE]
    if all(v.strides == (0,) or _repeats(v, p) for v in (*cols, c, loop_hit)):
        return p
    return n


def _repeats(v: np.ndarray, p: int) -> bool:
    """Does `v` repeat after its first `p` values, bit for bit?"""
    bits = v.view(np.int64) if v.dtype == np.float64 else v
    return bool(np.array_equal(bits[p:], bits[:-p]))


def _work(w: Launch, t: TileConfig, r: _Rates, loop_hit: np.ndarray, spills: bool) -> _Work:
    """`_Work` of every CTA of launch `w` (from its work: no column of `_PLACE`, which
    `_period` does not compare)."""
    eff = r.eff
    # (`mma_pad`: the padded head_dim's products, beyond the counted FLOPs)
    tensor = w.flops / r.tensor * (w.mma_pad * mma_factor(w.mma_shapes, eff.smem_feed,
                                   product_rows(w, t), t.warps, eff.wg_split))  # fmt: skip
    sfu, alu = w.exps / r.sfu, w.alu / r.alu
    # a bulk reduce-add also costs the CTA's warps its issue: the tile stored to shared
    # memory, a fence and a barrier before the copy engine may read it (one per tile)
    alu = alu + w.reduce_ops * (eff.reduce_op_ns * 1e-9)
    edge_bytes = _edge_bytes(w) * w.l2_pad  # (`l2_pad`: tiles cross padded to head_dim's)
    local = spill_bytes(w, eff) / r.l2
    if eff.local_gbs > 0:  # every local load and store passes the SM's L1, hit or miss
        local = local + (w.local_load + w.local_store) / (eff.local_gbs * 1e9)
    tiles = (w.read_bytes + w.write_bytes - w.edge_read - w.edge_write) * w.l2_pad
    loads = tiles / r.l2 + local
    if spills:  # spilled registers: every iteration waits on local-memory reloads
        tensor, sfu, alu = (x * (1.0 + eff.spill_penalty) for x in (tensor, sfu, alu))
    # The tensor cores run beside the warps' own instructions (exponentials on the SFUs, the
    # rest on the FP32 units: one stream of instructions, so these two add up).
    vector = sfu + alu
    kind = "lockstep" if lockstep(w, t) else "two_stage" if two_stage(w, t) else ""
    # Warpgroups on their own row slices of a ring of three or more buffers drift apart like
    # separate CTAs: each fills the others' serial phases as a co-resident CTA would.
    along_m, _, _ = warpgroup_layout(product_rows(w, t), t.warps)
    drift = along_m if (t.stages >= 3 and w.mma_shapes and not w.barrier) else 1
    latency = (loop_hit * eff.l2_latency_ns + (1.0 - loop_hit) * eff.dram_latency_ns) * 1e-9
    # Each of the iteration's `chain` waits on its products (the softmax needs S, the next
    # product its operands): a warpgroup pays their latency on top of its work, which only
    # other warpgroups (on their own row slices, or in other CTAs) can fill.
    # Warps that split a tile's columns also wait each step on their exchanges through shared
    # memory (`XWARP_NS` per warp of the CTA).
    step_wait = w.chain * eff.mma_chain_ns + w.split_warps * XWARP_NS
    wait = w.iters * (step_wait * 1e-9) if w.chain else None
    reduce_write = w.reduce_write if w.chain and w.reduce_write.any() else None
    # Before its loop a CTA waits (set-up, its first load's latency, the tensor descriptors it
    # builds itself) without using the SM.
    edge_wait = eff.cta_setup_ns * 1e-9 + np.where(w.edge_read > 0, eff.dram_latency_ns * 1e-9, 0.0)
    if w.descriptors:
        edge_wait = edge_wait + w.descriptors * DESCRIPTOR_NS * 1e-9
    return _Work(tensor, sfu, vector, loads, local, edge_bytes, w.iters * latency, edge_wait,
                 w.iters, wait, reduce_write, w.reduce_overlap, kind, along_m, drift)  # fmt: skip


def _durations(
    w: Launch, t: TileConfig, r: _Rates, c: np.ndarray, loop_hit: np.ndarray, spills: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(duration, time before the loop, components (5, n)) of every CTA at co-residency c.

    Where every row of the grid holds the same work (`_period`), one row is computed and
    repeated: the same figures, bit for bit.
    """
    p = _period(w, c, loop_hit)
    if p == w.n_ctas:
        return _durations_of(_work(w, t, r, loop_hit, spills), t, r, c)
    x = _work(w.reordered(np.arange(p)), t, r, loop_hit[:p], spills)
    dur, edge, parts = _durations_of(x, t, r, c[:p])
    reps = w.n_ctas // p
    return np.tile(dur, reps), np.tile(edge, reps), np.tile(parts, (1, reps))


def _one_stage(
    compute: np.ndarray, loads: np.ndarray, local: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(time per CTA, of which memory) of a one-stage loop: compute, `loads` (loop bytes at
    the L2 rate, the spills' `local` traffic among them).

    With one stage nothing is fetched ahead: each K/V tile is waited for before the compute
    that uses it, so the tile loads add to the compute. The spills' local loads and stores are
    not fetched ahead either, but they are the warps' own instructions, interleaved with the
    compute they spill from, so they overlap it as in a pipelined loop: max(compute, local) +
    tiles. Nsight Compute supports it (users' sweep, H100, 2026-11-26,
    benchmarks/results/validation-users-NVIDIA-H100-80GB-HBM3-2026-11-26.json): adding the
    local traffic to the compute at one stage made the spilling calls on spread tiles 18% too
    slow on average (29 calls), where at two to four stages, overlapped, they were 4–17% too
    fast; overlapping it at one stage too took the held-out half from 20.6% to 19.8%.
    """
    tiles = loads - local
    inner = np.maximum(compute, local)
    return inner + tiles, tiles + (inner - compute)


def _durations_of(
    x: _Work, t: TileConfig, r: _Rates, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_durations` of the CTAs whose `_Work` is x."""
    eff = r.eff
    tensor, sfu, vector, loads = x.tensor, x.sfu, x.vector, x.loads
    # A CTA hides a share `overlap` of the shorter side of tensor and vector work; what it
    # leaves serial, other CTAs resident on its SM can fill, as their phases differ
    # (`cta_overlap`, growing with their number).
    # Lockstep warpgroups lose a share of their own overlap; a co-resident CTA's warpgroups
    # run in their common stalls, so with c CTAs on the SM only 1 / c**lockstep_fill of that
    # share is lost (1: each CTA fills its share; more: the stalls seldom coincide).
    own: np.ndarray | float
    if x.kind == "lockstep":
        own = eff.overlap * (1.0 - eff.lockstep / c**eff.lockstep_fill)
    elif x.kind == "two_stage":
        own = eff.overlap * (1.0 - eff.two_stage / c)
    else:
        own = eff.overlap
    hidden = own + (1.0 - own) * eff.cta_overlap * (1.0 - 1.0 / (c * x.drift))  # (n,)
    longer = np.maximum(tensor, vector)
    compute = longer + (1.0 - hidden) * np.minimum(tensor, vector)
    t_w = np.where(tensor >= vector, tensor, (1.0 - hidden) * tensor)
    v_w = np.where(tensor >= vector, (1.0 - hidden) * vector, vector)
    v_share = np.divide(sfu, vector, out=np.zeros_like(sfu), where=vector > 0)
    weights = np.stack([t_w, v_w * v_share, v_w * (1.0 - v_share)])  # (3, n)
    if t.stages >= 2:
        thr = np.maximum(compute, loads)
        mem_part = np.where(loads > compute, loads, 0.0)
    else:
        thr, mem_part = _one_stage(compute, loads, x.local)
    comp_part = thr - mem_part
    chained = None
    if x.wait is not None:
        wait = x.wait
        if x.reduce_write is not None:
            # A bulk reduce-add (the atomic route's dQ tile) must have been read out of shared
            # memory before the next tile's goes there (the kernel waits on that read, not on
            # the reduce's completion, and only just before the next store: an iteration
            # later): what the copy engine's start and the tile's transfer take beyond that
            # iteration's work, or beyond the share of it run before the kernel waits for the
            # read (`reduce_overlap`).
            it = np.maximum(x.iters, 1)
            bulk = eff.bulk_read_ns * 1e-9 + x.reduce_write / it / r.l2
            exposed = np.maximum(bulk - x.reduce_overlap * thr / it, 0.0)
            wait = wait + x.iters * exposed
        chained = thr / x.along_m + wait

    def loop_with(busy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(k, loop time) when `busy` CTAs (this one included) run their loops on the SM."""
        k = busy / np.minimum(1.0, busy * t.warps / eff.warps_to_saturate)
        # stages − 1 tile loads in flight, each taking the latency plus its transfer at this
        # SM's share of the L2 → SM bandwidth: at least (latency + transfer) / (stages − 1)
        # per iteration; one stage waits for every load before computing.
        if t.stages >= 2:
            floor = (x.fetch_latency + busy * loads) / (t.stages - 1)
        else:  # the tiles' fetch, then the iteration (`_one_stage`)
            floor = x.fetch_latency + busy * (loads - x.local) + thr
        loop = np.maximum(k * thr, floor)
        if chained is not None:
            loop = np.maximum(loop, chained)
        return k, loop

    # Before its loop a CTA waits (set-up, its first load's latency) without using the SM's
    # throughput, which the other c − 1 CTAs there take meanwhile: each CTA's loop shares the
    # SM with the others' loops only for the part of their lives they spend in them. A fixed
    # point (the share depends on the loop's length); it decreases monotonically from c.
    edge_wait, edge_bytes = x.edge_wait, x.edge_bytes
    busy = c
    for _ in range(_BUSY_STEPS):
        _, loop = loop_with(busy)
        busy = 1.0 + (c - 1.0) * loop / (loop + edge_wait)
    k, loop = loop_with(busy)
    edge = edge_wait + k * edge_bytes / r.l2
    share = np.divide(weights, weights.sum(axis=0), out=np.zeros_like(weights), where=weights > 0)
    parts = np.empty((5, len(tensor)))
    parts[:3] = busy * comp_part * share
    parts[3] = busy * mem_part + k * edge_bytes / r.l2
    parts[4] = (k - busy) * thr + (loop - k * thr) + edge_wait
    return edge + loop, edge, parts


def _shared_hits(w: Launch, hit: np.ndarray) -> np.ndarray:
    """Loop hit rates for load latency: CTAs of one stream share its compulsory misses.

    CTAs reading the same stream at about the same time wait on the same first fetch of each
    block (later requests merge into the pending miss), so for latency each CTA of a stream
    sees the stream's average hit rate rather than the first CTA taking every miss.
    """
    if not w.stream_read.any():
        return hit
    inv, k = w.groups
    loop_read = np.maximum(w.read_bytes - w.edge_read, 0.0)
    num = np.bincount(inv, weights=hit * loop_read, minlength=k)
    den = np.bincount(inv, weights=loop_read, minlength=k)
    group = np.divide(num, den, out=np.ones(k), where=den > 0)
    return np.where(w.stream >= 0, group[inv], hit)


def _schedule(
    dur: np.ndarray, slots: int, sms: int, free_at: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start, slot = list_schedule(dur, slots, free_at)
    end = start + dur
    sm = slot % sms
    return start, end, sm


def _slots_freed(prev: KernelResult, begin: float, sms: int, per_sm: int) -> np.ndarray:
    """When each slot of a launch that may begin at `begin` beside `prev` first frees (s, from
    `begin`).

    Per SM, the previous kernel's slots empty as its last CTAs there end (its `occ` latest ends
    stand for its slots). Slot k of the new kernel (of per_sm on the SM) needs (k + 1) / per_sm
    of the SM, so it waits until few enough of the previous kernel's slots there are still busy;
    equal occupancies pair slot with slot. Slot k·sms + s of the new launch sits on SM s.
    """
    occ = prev.ctas_per_sm
    order = sm_time_order(prev.sm, prev.end)
    sm_sorted, end_sorted = prev.sm[order], prev.end[order]
    count = np.bincount(sm_sorted, minlength=sms)
    # the rank of each CTA among those of its SM: from where its SM's run begins
    rank = np.arange(len(order)) - (np.cumsum(count) - count)[sm_sorted]
    from_top = count[sm_sorted] - 1 - rank  # 0 for the latest end on its SM
    keep = from_top < occ
    last = np.zeros((occ, sms))  # row m: the (m + 1)-th latest end on each SM
    last[from_top[keep], sm_sorted[keep]] = end_sorted[keep]
    k = np.arange(per_sm)
    still_busy = np.floor(occ * (1.0 - (k + 1) / per_sm) + 1e-9).astype(np.int64)  # (per_sm,)
    free = np.where((still_busy < occ)[:, None], last[np.minimum(still_busy, occ - 1)], 0.0)
    return np.maximum(free.reshape(-1) - begin, 0.0)  # (per_sm · sms,)


def _tail(
    w: Launch,
    t: TileConfig,
    r: _Rates,
    hits: np.ndarray,
    spills: bool,
    schedule: tuple[np.ndarray, np.ndarray, np.ndarray],
    dur: np.ndarray,
    cold: tuple[int, float],
    busy_cta: np.ndarray,
    c: np.ndarray,
) -> None:
    """The launch's last CTAs, once none is left to start: as CTAs on an SM end, the others
    there run at the residency left (their durations at k co-resident CTAs, plus the first
    wave's cold start, `cold` = (CTAs of the first wave, seconds), never slower than with
    more). Re-times those CTAs' ends (in the schedule's `end`) and SM-time shares (busy_cta)
    in place."""
    start, end, sm = schedule
    t0 = float(start.max())
    tail = np.flatnonzero(end > t0)
    if tail.size == 0:
        return
    kmax = max(int(c[0]), int(np.bincount(sm[tail]).max()))
    if kmax <= 1:
        return
    sub = w.reordered(tail)
    extra = np.where(tail < cold[0], cold[1], 0.0)  # (m,)
    # each tail CTA with k = 1 … kmax CTAs on its SM, in one evaluation: (kmax, m) and
    # (5, kmax, m)
    m = tail.size
    ks = np.repeat(np.arange(1, kmax + 1, dtype=np.float64), m)
    x = _work(sub, t, r, hits[tail], spills).tiled(kmax)
    d_all, _, parts_all = _durations_of(x, t, r, ks)
    d_all, parts_all = d_all.reshape(kmax, m), parts_all.reshape(5, kmax, m)
    runs = []  # (duration, parts) of each tail CTA with k = 1 … kmax CTAs on its SM
    for k in range(kmax):
        parts = parts_all[:, k]
        parts[4] += extra
        runs.append((d_all[k] + extra, parts))
    levels = np.minimum.accumulate(np.stack([d for d, _ in runs], axis=1)[:, ::-1], axis=1)
    levels = levels[:, ::-1]  # (m, kmax): alone is never slower than shared
    done = (t0 - start[tail]) / dur[tail]
    new_end, work = share_tail(sm[tail], 1.0 - done, levels, t0)
    end[tail] = new_end
    busy_cta[:, tail] *= done  # the share before t0, at the launch's residency
    for k, (d, parts) in enumerate(runs, start=1):
        # at k resident: the work done then, at its time per unit of work (levels) over k
        busy_cta[:, tail] += parts / d * (work[:, k - 1] * levels[:, k - 1] / k)


def _run_launch(
    w: Launch,
    p: AttentionProblem,
    t: TileConfig,
    gpu: GPU,
    r: _Rates,
    carry: L2Split | None,
    beside: tuple[KernelResult, float] | None = None,
    alone_at_end: bool = True,
    power_cap: bool = True,
    dirty: float = 0.0,
) -> tuple[dict[str, Any], L2Split, float]:
    e = p.dtype_bytes
    fp = footprint(
        w.kind, _pad_rows(w.rows), t.block_n, p.head_dim, t.stages, t.warps, e, gpu, t.maxnreg
    )
    if w.kind == "fwd" and w.mma_shapes and warp_level(_pad_rows(w.rows), t.warps):
        # flashscope's forward with warp-level products: Q in registers, stages − 1 buffers
        smem = warp_level_forward_smem(_pad_rows(w.rows), t.block_n, p.head_dim, t.stages, e)
        fp = dataclasses.replace(fp, smem_bytes=smem)
    if w.smem is not None:  # the compiled kernel's (compiled.shared), where the table has it
        fp = dataclasses.replace(fp, smem_bytes=w.smem)
    if w.regs is not None:  # the compiled kernel's count (compiled.py), and its spills
        spills = bool(w.local_load.any() or w.local_store.any())
        regs = -(-w.regs // REG_UNIT) * REG_UNIT  # allocated in whole units
        fp = dataclasses.replace(fp, regs_per_thread=regs, spills=spills)
    occ: Occupancy = occupancy(fp, gpu)
    n, sms, per_sm = w.n_ctas, gpu.sms, occ.ctas_per_sm
    slots = sms * per_sm
    w = spill_l1(w, t, min(per_sm, math.ceil(n / sms)), gpu, fp.smem_bytes)
    free_at = _slots_freed(beside[0], beside[1], sms, per_sm) if beside else None
    cap = gpu.l2_bytes * r.eff.l2_reuse_fraction
    gamma = r.eff.l2_reuse_exponent

    # Every CTA shares its SM with c others: a full GPU's residency, or fewer when the grid is
    # too small to fill every slot. No SM ever holds more, so no SM outruns its throughput.
    c = np.broadcast_to(float(min(per_sm, math.ceil(n / sms))), (n,))
    layout = streams(w)
    hits = _shared_hits(w, compulsory_hits(w, layout))
    dur, edge, parts = _durations(w, t, r, c, hits, fp.spills)
    # The first CTAs of a launch start together and wait longer (cold caches, every first
    # load at once); a slot takes a moment to pass from one CTA to the next.
    cold = r.eff.cold_start_ns * 1e-9
    first_wave = min(n, slots)
    dur[:first_wave] += cold
    edge[:first_wave] += cold
    parts[4, :first_wave] += cold
    gap = r.eff.cta_dispatch_ns * 1e-9
    start, end, sm = _schedule(dur + gap, slots, sms, free_at)
    end -= gap
    parts /= c
    busy_cta = parts  # (5, n) each CTA's share of its SM's time, by limiter
    if alone_at_end:
        _tail(w, t, r, hits, fp.spills, (start, end, sm), dur, (first_wave, cold), busy_cta, c)
    busy_sm = busy_cta.sum(axis=1)  # (5,)
    del dur, parts, busy_cta  # (large: not held through the L2 model)
    l2 = split_traffic(w, start, end, edge, cap, gamma, carry, r.eff.l2_shared_copies, layout)
    first = float(start.min())  # > 0 only beside a kernel that still holds every slot
    span = float(end.max()) - first
    # The power cap: the durations above are at the boost clock; a launch that demands more
    # than the cap runs at a lower clock, and all of its SM-side time stretches alike (beside
    # another kernel, so do the offsets at which that kernel's slots freed: a small error).
    clock = clock_share(r.eff, *power_counts(w, r.eff), span) if power_cap else 1.0
    span /= clock
    # spilled lines that leave L2 dirty (measured per compiled kernel and GPU, else estimated
    # from the slots the resident threads keep), and the reloads that miss L2 then
    writeback, spill_read = spill_dram(w, t, min(n, slots), cap, gamma)
    # The DRAM time counts every write: a timed call starts on an L2 full of the dirty lines of
    # do_bench's flush (it zeroes a buffer), which its footprint pushes out in place of the
    # lines it leaves dirty. The bytes, as Nsight Compute counts them after a flush that only
    # reads, leave those lines out (`dirty_writes`).
    dram = float(l2.dram_read.sum() + l2.dram_write.sum()) + writeback + spill_read
    # beside a concurrent launch, both launches' references pass through L2 together
    touched = l2.footprint + (carry.footprint if beside is not None and carry is not None else 0.0)
    written, dirty = dirty_writes(float(l2.dram_write.sum()), dirty, touched, cap)
    # The L2's reduce units serve every SM: a launch's reduce-adds take at least their bytes
    # at `l2_reduce` of the L2 rate.
    reduce = float(w.reduce_write.sum()) / (r.l2 * sms * r.eff.l2_reduce)
    stretch = max(1.0, dram / r.dram / span, reduce / span) if span > 0 else 1.0
    warped = span * stretch

    # Breakdown: SM-time by limiter, idle SM time as tail, the DRAM stretch as memory.
    busy = busy_sm / sms / clock  # (5,)
    total_busy = float(busy.sum())
    if total_busy > span:  # rounding only: co-residency never exceeds c here
        busy *= span / total_busy
        total_busy = span
    breakdown = dict(zip(_PARTS, busy.tolist(), strict=True))
    breakdown["memory"] += warped - span
    # the slots' hand-overs between CTAs (each later CTA waited `gap` for its slot)
    handover = min(span - total_busy, (n - first_wave) * gap / (c[0] * sms) / clock)
    breakdown["tail"] = span - total_busy - handover
    breakdown["launch"] = r.eff.launch_us * 1e-6 + handover
    result = {
        "occupancy": occ,
        "waves": n / slots,
        "sm": sm,
        "start": _rescaled(start, first, stretch, clock),  # from the launch's first CTA start
        "end": _rescaled(end, first, stretch, clock),  # (both in place)
        "clock": clock,
        "dram_read_bytes": float(l2.dram_read.sum()) + spill_read,
        "dram_write_bytes": written + writeback,
        "l2_read_bytes": float(
            w.read_bytes.sum() * w.l2_pad + l1_miss(w, r.eff) * w.local_load.sum()
        ),
        "l2_write_bytes": float(w.write_bytes.sum() * w.l2_pad + w.local_store.sum()),
        "spill_l2_bytes": float(spill_bytes(w, r.eff).sum()),
        "spill_dram_bytes": writeback,
        "l2_dirty_bytes": dirty,
        "breakdown": {lim: breakdown[lim] for lim in LIMITERS},
        "span": warped,
        "first": first,
    }
    return result, l2, dirty


def _rescaled(t: np.ndarray, first: float, stretch: float, clock: float) -> np.ndarray:
    """(t − first) · stretch / clock, computed in t's place."""
    t -= first
    t *= stretch
    t /= clock
    return t


def dirty_writes(
    writes: float, dirty: float, footprint: float, capacity: float
) -> tuple[float, float]:
    """(bytes a launch writes to DRAM, dirty bytes it leaves in L2) from the `writes` that
    leave its SMs for DRAM, the `dirty` bytes earlier launches left in L2, the distinct bytes it
    touches (`footprint`) and the L2's usable `capacity`.

    L2 writes back: a written line reaches DRAM only when it is evicted. At the launch's end
    L2 holds its last `capacity` bytes of references, writes among them in proportion, and
    those are not written during the launch; the lines earlier launches left dirty are pushed
    out as its footprint fills L2 (a launch beside a concurrent one counts both footprints).
    Nsight Compute supports it: on the users' sweep (H100, 2026-11-26) the forwards whose
    whole footprint fits in L2 wrote next to nothing to DRAM (their outputs stayed in L2) and
    the backwards of a few MiB per tensor none of their gradients, and on the protocol the
    forward at 64 MiB of output wrote 4 MiB less than it. Without the concurrent launch's
    footprint the separate route's dK/dV kernel kept 10 MiB where it measured 4.
    """
    if footprint <= 0 or not math.isfinite(capacity):
        return writes, dirty
    keep = min(1.0, capacity / footprint)
    evicted = dirty * min(1.0, footprint / capacity)
    resident = writes * keep
    return writes - resident + evicted, dirty - evicted + resident


def simulate_workload(workload: Workload, gpu: GPU, power_cap: bool = True) -> SimResult:
    """Run every launch of `workload` on `gpu`: one after another, or beside the previous one
    where a launch is `concurrent` (another stream). `power_cap` False: every launch at the
    boost clock (as a single launch after idle runs: Nsight Compute's durations)."""
    p, t = workload.problem, workload.tiles
    rates = _Rates(gpu, p.dtype)
    kernels: list[KernelResult] = []
    groups: list[list[int]] = []
    clock = 0.0
    carry = None
    dirty = 0.0  # bytes written to L2 and not yet to DRAM (`dirty_writes`)
    gap = rates.eff.launch_us * 1e-6
    for i, launch in enumerate(workload.launches):
        beside = None
        if launch.concurrent and kernels:
            begin = kernels[-1].offset_s + gap  # issued right after the previous launch
            beside = (kernels[-1], begin)
            groups[-1].append(len(kernels))
        else:
            begin = clock + gap
            groups.append([len(kernels)])
        # A launch followed by one on another stream hands its SMs over as its CTAs end: its
        # last CTAs never run with their SMs to themselves.
        handed_over = i + 1 < len(workload.launches) and workload.launches[i + 1].concurrent
        res, carry, dirty = _run_launch(
            launch, p, launch.tiles or t, gpu, rates, carry, beside,
            alone_at_end=not handed_over, power_cap=power_cap, dirty=dirty,
        )  # fmt: skip
        span = res.pop("span")
        begin += res.pop("first")  # beside a busy kernel: when its first slot frees
        res["start"] += begin
        res["end"] += begin
        kernels.append(
            KernelResult(
                name=launch.name,
                grid=launch.grid,
                offset_s=begin - gap,
                time_s=gap + span,
                end_s=begin + span,
                counts=launch.totals(),
                **res,
            )
        )
        clock = max(clock, begin + span)
    for members in groups:
        if len(members) > 1:  # the group's wall time, shared in proportion to each kernel's
            lo = min(kernels[m].offset_s for m in members)
            hi = max(kernels[m].end_s for m in members)
            total = sum(kernels[m].time_s for m in members)
            for m in members:
                kernels[m] = dataclasses.replace(kernels[m], share=(hi - lo) / total)
    totals = workload.totals()
    fl = floors(workload.algo, p, gpu, totals["flops"], totals["exps"])
    return SimResult(gpu, workload, tuple(kernels), fl)


def host_time_s(workload: Workload, eff: Efficiency) -> float:
    """The least time the host takes to issue a call of `workload`: `host_launch_us` per
    launch, `host_descriptor_us` per tensor descriptor it makes (`Launch.host_descriptors`),
    plus `host_backward_us` for a backward.

    A call timed whole (do_bench of `flash_attention` and its backward) cannot end before the
    host has issued it. In the users' sweep measured on an H100 (2026-11-26), 56 calls, small
    backward problems above all, lasted more than 1 / 0.6 times their kernels' summed Nsight
    Compute durations: those backward calls took 135–633 µs whatever their kernels took
    (`host_backward_us` is fitted on that sweep's fit half; `host_launch_us` is the eager
    launch the ceilings' micro-benchmark measures).

    Where every tile is whole the kernels describe their tensors on the host, and Triton's
    launcher encodes each descriptor for the copy engine at every call. On the H100's sweep,
    forwards of under 25 µs of kernel time took a median 21 µs beyond Nsight Compute's kernel
    time with whole tiles (18 calls; four host descriptors) and 3.3 µs with ragged lengths (26
    calls; none); most host-bound backward calls took 205–240 µs with whole tiles (eleven
    descriptors) and 135–155 µs with ragged ones. `host_descriptor_us` is fitted per GPU with
    `host_backward_us` on its sweep's fit half: 5 µs on the H100 (mean |log error| 0.2099, 0.2213
    without the term), 13 µs on the H200, whose host took about twice the H100's for the same
    calls though its eager launch measured shorter (7.96 µs against 9.26).
    """
    host = eff.host_launch_us * len(workload.launches)
    descriptors = sum(w.host_descriptors for w in workload.launches)
    host += eff.host_descriptor_us * descriptors
    if workload.algo.endswith("-bwd"):
        host += eff.host_backward_us
    return host * 1e-6


def call_time_s(result: SimResult) -> float:
    """A whole call's time: its kernels' (`SimResult.time_s`), or the host's where that is
    longer (`host_time_s`)."""
    return max(result.time_s, host_time_s(result.workload, result.gpu.efficiency))


def simulate(
    algo: str,
    problem: AttentionProblem,
    tiles: TileConfig,
    gpu: GPU,
    splits: int | None = None,
) -> SimResult:
    """Simulate `algo` on `problem` with `tiles` on `gpu` (decode: optional `splits`)."""
    return simulate_workload(build(algo, problem, tiles, sms=gpu.sms, splits=splits), gpu)


def alone_time_s(workload: Workload, gpu: GPU) -> float:
    """The duration of a one-launch workload's kernel, from its first CTA's start to its last
    one's end (no launch gap), at the boost clock: as a single launch after idle runs (what
    Nsight Compute times)."""
    (k,) = simulate_workload(workload, gpu, power_cap=False).kernels
    return k.time_s - gpu.efficiency.launch_us * 1e-6
