"""The cycle-approximate timing engine: a workload's launches on a GPU, CTA by CTA, vectorized.

For each launch, in order (each waits for the previous one, after a launch gap):

1. Occupancy: CTAs per SM from shared memory, registers and warps (`occupancy.py`); an SM
   is that many slots.
2. Duration of every CTA given c, the CTAs sharing its SM. Per CTA, at the whole SM's rates:
   tensor T = FLOPs / tensor rate, SFU S = exps / exp rate, ALU A = other FLOPs / FP32 rate,
   loads X = loop bytes / L2→SM rate. The compute of one step overlaps partly: the largest of
   T, S, A plus (1 − overlap) of the others. With stages ≥ 2 loads run ahead of compute
   (max of the two), with one stage they add. Sharing the SM with c CTAs and too few warps to
   saturate it (u = min(1, c·warps / warps_to_saturate)) stretches this by c / u. Load latency
   (L2 hit or DRAM, by this CTA's hit rate) bounds each iteration from below: stages − 1 loads
   in flight give at least latency / (stages − 1) per iteration; one stage pays it every time.
   Before the loop: CTA set-up, the latency of the first load and the edge bytes.
   c is the residency a full GPU has (CTAs per SM), or ⌈CTAs / SMs⌉ when the grid cannot
   fill every slot; the load latency here counts only compulsory misses (see below).
3. Schedule in launch order as slots free up (`scheduler.py`): waves, the tail of the last
   wave and causal imbalance (light query blocks finish first) come out of it.
4. L2 (`l2model.py`): which requests hit, which reach DRAM, from the schedule.
5. DRAM bandwidth shared by all the CTAs of the launch (a fluid model at launch granularity):
   when the launch asks for more bytes than bandwidth × its span, its whole timeline stretches
   until the bytes fit; every CTA running then waits alike.
6. Breakdown: each CTA's time split among limiters, weighted by its share of the SM (1/c),
   summed over SMs; idle SM time until the launch ends is `tail`; the DRAM stretch is `memory`.

Monotone by construction: durations depend on the GPU only through its rates and residency,
list scheduling never gets slower with more slots or shorter CTAs, and bandwidth enters only
the stretch — so more DRAM bandwidth is never slower, and more SMs are slower only when the
L2 model predicts more DRAM traffic (more CTAs in flight reference more distinct data).

Knowingly left out: a CTA left alone on its SM at the end of a launch does not speed up; DRAM
demand is not resolved within a launch (a per-instant fluid warp was tried: perfectly fair
sharing finishes a memory-bound wave in lockstep and then charges latency-bound stragglers,
which real GPUs, whose CTAs finish staggered, largely overlap); capacity misses do not add
latency (their bandwidth is charged); register spills, bank conflicts, instruction issue,
TLB and DRAM page effects, clock throttling and launch-to-launch overlap are not modelled.

The engine returns dataclasses and arrays (`results.py`); it never formats output.
"""

from __future__ import annotations

import math

import numpy as np

from .hardware import GPU
from .l2model import L2Split, split_traffic
from .launch import Launch, stream_groups
from .occupancy import Occupancy, footprint, occupancy
from .problem import AttentionProblem, TileConfig
from .results import LIMITERS, KernelResult, SimResult
from .roofline import floors
from .scheduler import coresidency, list_schedule
from .workload import Workload, build

_PARTS = ("tensor", "sfu", "alu", "memory", "latency")


def _pad_rows(rows: int) -> int:
    return max(16, 1 << (rows - 1).bit_length())


class _Rates:
    """Per-SM rates of one GPU for one dtype, efficiencies applied."""

    def __init__(self, gpu: GPU, dtype: str) -> None:
        eff = gpu.efficiency
        self.tensor = gpu.tensor_flops(dtype) * eff.tensor / gpu.sms
        self.sfu = gpu.sfu_exps * eff.sfu / gpu.sms
        self.alu = gpu.fp32_tflops * 1e12 * eff.fp32 / gpu.sms
        self.l2 = gpu.l2_gbs * 1e9 * eff.l2 / gpu.sms
        self.dram = gpu.hbm_bytes_per_s * eff.hbm
        self.eff = eff


def _edge_bytes(w: Launch) -> np.ndarray:
    """Bytes each CTA moves outside its loop, `spread_read` shared evenly in its group."""
    edge = w.edge_read + w.edge_write
    spread = w.spread_read
    if spread.any():
        inv, _ = stream_groups(w.stream)
        share = np.bincount(inv, weights=spread) / np.bincount(inv)
        edge = edge - spread + share[inv]
    return edge


def _durations(w: Launch, t: TileConfig, r: _Rates, c: np.ndarray, loop_hit: np.ndarray):
    """(duration, time before the loop, components (5, n)) of every CTA at co-residency c."""
    eff = r.eff
    tensor, sfu, alu = w.flops / r.tensor, w.exps / r.sfu, w.alu / r.alu
    edge_bytes = _edge_bytes(w)
    loads = (w.read_bytes + w.write_bytes - w.edge_read - w.edge_write) / r.l2
    work = np.stack([tensor, sfu, alu])  # (3, n)
    top = work.max(axis=0)
    compute = top + (1.0 - eff.overlap) * (work.sum(axis=0) - top)
    is_top = np.arange(3)[:, None] == work.argmax(axis=0)[None, :]
    weights = np.where(is_top, work, (1.0 - eff.overlap) * work)
    if t.stages >= 2:
        thr = np.maximum(compute, loads)
        mem_part = np.where(loads > compute, loads, 0.0)
    else:
        thr = compute + loads
        mem_part = loads
    comp_part = thr - mem_part
    u = np.minimum(1.0, c * t.warps / eff.warps_to_saturate)
    k = c / u
    latency = (loop_hit * eff.l2_latency_ns + (1.0 - loop_hit) * eff.dram_latency_ns) * 1e-9
    # stages − 1 loads in flight: at least latency / (stages − 1) per iteration; one stage
    # waits for every load before computing.
    floor = w.iters * latency / (t.stages - 1) if t.stages >= 2 else w.iters * latency + thr
    loop = np.maximum(k * thr, floor)
    edge_wait = eff.cta_setup_ns * 1e-9 + np.where(w.edge_read > 0, eff.dram_latency_ns * 1e-9, 0.0)
    edge = edge_wait + k * edge_bytes / r.l2
    share = np.divide(weights, weights.sum(axis=0), out=np.zeros_like(weights), where=weights > 0)
    parts = np.empty((5, w.n_ctas))
    parts[:3] = c * comp_part * share
    parts[3] = c * mem_part + k * edge_bytes / r.l2
    parts[4] = (k - c) * thr + (loop - k * thr) + edge_wait
    return edge + loop, edge, parts


def _schedule(dur: np.ndarray, slots: int, sms: int):
    start, slot = list_schedule(dur, slots)
    end = start + dur
    sm = slot % sms
    return start, end, sm


def _run_launch(
    w: Launch, p: AttentionProblem, t: TileConfig, gpu: GPU, r: _Rates, carry: L2Split | None
):
    e = p.dtype_bytes
    fp = footprint(w.kind, _pad_rows(w.rows), t.block_n, p.head_dim, t.stages, t.warps, e, gpu)
    occ: Occupancy = occupancy(fp, gpu)
    n, sms, per_sm = w.n_ctas, gpu.sms, occ.ctas_per_sm
    slots = sms * per_sm
    cap = gpu.l2_bytes * r.eff.l2_reuse_fraction
    gamma = r.eff.l2_reuse_exponent

    # Every CTA shares its SM with c others: a full GPU's residency, or fewer when the grid is
    # too small to fill every slot. No SM ever holds more, so no SM outruns its throughput.
    c = np.full(n, float(min(per_sm, math.ceil(n / sms))))
    ideal = split_traffic(w, np.zeros(n), np.zeros(n), np.zeros(n), math.inf, gamma, None)
    dur, edge, parts = _durations(w, t, r, c, ideal.loop_hit)
    start, end, sm = _schedule(dur, slots, sms)
    l2 = split_traffic(w, start, end, edge, cap, gamma, carry)
    span = float(end.max())
    dram = float(l2.dram_read.sum() + l2.dram_write.sum())
    stretch = max(1.0, dram / r.dram / span) if span > 0 else 1.0
    warped = span * stretch

    # Breakdown: SM-time by limiter, idle SM time as tail, the DRAM stretch as memory.
    busy = (parts / c).sum(axis=1) / sms  # (5,)
    total_busy = float(busy.sum())
    if total_busy > span:  # rounding only: co-residency never exceeds c here
        busy *= span / total_busy
        total_busy = span
    breakdown = dict(zip(_PARTS, busy.tolist(), strict=True))
    breakdown["memory"] += warped - span
    breakdown["tail"] = span - total_busy
    breakdown["launch"] = r.eff.launch_us * 1e-6
    result = {
        "occupancy": occ,
        "waves": n / slots,
        "sm": sm,
        "start": start * stretch,
        "end": end * stretch,
        "coresidency": coresidency(start, end, sm),
        "dram_read_bytes": float(l2.dram_read.sum()),
        "dram_write_bytes": float(l2.dram_write.sum()),
        "l2_read_bytes": float(w.read_bytes.sum()),
        "l2_write_bytes": float(w.write_bytes.sum()),
        "breakdown": {lim: breakdown[lim] for lim in LIMITERS},
        "span": warped,
    }
    return result, l2


def simulate_workload(workload: Workload, gpu: GPU) -> SimResult:
    """Run every launch of `workload` on `gpu`, one after another."""
    p, t = workload.problem, workload.tiles
    rates = _Rates(gpu, p.dtype)
    kernels = []
    clock = 0.0
    carry = None
    for launch in workload.launches:
        res, carry = _run_launch(launch, p, t, gpu, rates, carry)
        gap = rates.eff.launch_us * 1e-6
        offset = clock + gap
        span = res.pop("span")
        res["start"] = res["start"] + offset
        res["end"] = res["end"] + offset
        kernels.append(
            KernelResult(
                name=launch.name,
                grid=launch.grid,
                offset_s=offset,
                time_s=gap + span,
                counts=launch.totals(),
                **res,
            )
        )
        clock = offset + span
    totals = workload.totals()
    fl = floors(workload.algo, p, gpu, totals["flops"], totals["exps"])
    return SimResult(gpu, workload, tuple(kernels), fl)


def simulate(
    algo: str,
    problem: AttentionProblem,
    tiles: TileConfig,
    gpu: GPU,
    splits: int | None = None,
) -> SimResult:
    """Simulate `algo` on `problem` with `tiles` on `gpu` (decode: optional `splits`)."""
    return simulate_workload(build(algo, problem, tiles, sms=gpu.sms, splits=splits), gpu)
