"""Why a simulated configuration differs from its measurement: notes from one dataset row.

Given a validation row (simulator/calibrate/validation.py) and the engine's result for its
configuration, `notes` lists what a person should look at, each note one sentence, strongest first:

    error      how far off the prediction is and in which direction
    limiter    what the engine says binds the time
    occupancy  CTAs per SM the engine assumed against what Nsight Compute reported
    registers  the engine's register estimate against the compiled kernel's; local-memory
               traffic (spills), which the engine moves through L2 only where it was measured
    alone      a kernel's time alone (the engine's, at the boost clock) against Nsight
               Compute's duration of it, where they differ by more than 10%
    overlap    concurrent kernels (the separate backward route): ncu serializes them
    structure  tile structures the engine models only in part: two or more warpgroups on their
               own 64-row slices sharing a ring of two K/V buffers (they run in lockstep; a
               fitted loss of overlap), any other CTA on such a ring (a smaller fitted loss),
               and the atomic backward route's bulk reductions
    clock      the share of the boost clock the power cap leaves a kernel, against how much
               slower the measured kernel ran back to back than alone under Nsight Compute
    fixed      small problems, where per-CTA set-up and launch gaps dominate
    bytes      DRAM and L2 bytes against ncu's

Each kind comes from a rule: a small function of the row's `Context` (RULES, in order; the
occupancy, alone and register rules run per kernel, the structure rules per launch). The
measured misses a note quotes are data, `KNOWN_MISSES` (simulator/calibrate/known_misses.py).
The rules share their thresholds and wording, so they stay in this one module of ~450 lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flashscope.simulator.calibrate.known_misses import KNOWN_MISSES, known_miss
from flashscope.simulator.core.problem import TileConfig
from flashscope.simulator.timing.compiled import KERNEL_LAUNCH, NCU_DURATION
from flashscope.simulator.timing.engine import alone_time_s, lockstep, two_stage
from flashscope.simulator.timing.launch import Launch
from flashscope.simulator.timing.results import SimResult
from flashscope.simulator.timing.workload import alone

__all__ = [
    "KERNEL_RULES",
    "KNOWN_MISSES",
    "LAUNCH_RULES",
    "RULES",
    "Context",
    "kernel_rows",
    "measured_kernel",
    "ncu_occupancy",
    "notes",
]

Note = dict[str, str]  # {"kind", "level", "text"}
KernelRow = dict[str, Any]  # one entry of kernel_rows

# The comparison's targets: the mean error and the worst, in per cent (level "warn" / "bad")
TARGET_MEAN_PCT, TARGET_WORST_PCT = 10, 25
ALONE_PCT = 10  # a kernel alone further off than this gets a note
BYTES_PCT = 10  # DRAM or L2 bytes further off than this get a note
REGS_SLACK = 24  # compiled against estimated registers per thread: a note beyond this
MINOR_SHARE = 0.1  # kernels under this share of the simulated time get no kernel notes
FIXED_SHARE = 0.3  # latency and launch gaps above this share of the time get a note

# The engine's launch names → the kernels' names in Nsight Compute (the preprocess kernel has
# no compiled entry: it never spills, and its registers are not read)
_NCU_NAMES = {launch: kernel for kernel, launch in KERNEL_LAUNCH.items()}
_NCU_NAMES["bwd_preprocess"] = "_bwd_preprocess"


def measured_kernel(name: str, measured: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ncu row of the kernel the engine calls `name` (None when ncu has none)."""
    want = _NCU_NAMES.get(name)
    return next((k for k in measured if want and want in k.get("name", "")), None)


def ncu_occupancy(k: Mapping[str, Any]) -> int | None:
    """CTAs per SM Nsight Compute's occupancy limits allow (the least of them); None if unread."""
    names = ("registers", "shared_mem", "warps")
    limits = [v for x in names if (v := k.get(f"launch__occupancy_limit_{x}")) is not None]
    return int(min(limits)) if limits else None


def kernel_rows(result: SimResult, measured: list[dict[str, Any]]) -> list[KernelRow]:
    """Each simulated kernel beside its ncu row: time, CTAs/SM, registers, spills; and where
    ncu timed it, the engine's time for the kernel alone (its own stream, the boost clock, no
    launch gap), which is what Nsight Compute's duration measures."""
    out: list[KernelRow] = []
    launches = {w.name: w for w in result.workload.launches}
    for k in result.kernels:
        m = measured_kernel(k.name, measured)
        fp = k.occupancy.footprint
        launch = launches.get(k.name)
        row: KernelRow = {
            "name": k.name,
            "simulated_us": k.time_s * 1e6,
            "ctas_per_sm": k.ctas_per_sm,
            "regs_per_thread": fp.regs_per_thread,
            # the compiled kernel's count (compiled.py) or the engine's estimate from the tiles
            "regs_source": "compiled" if launch is not None and launch.regs else "estimated",
            "smem_bytes": fp.smem_bytes,
            "spills": fp.spills,
            "spill_l2_bytes": k.spill_l2_bytes,
            "spill_dram_bytes": k.spill_dram_bytes,
            "clock": k.clock,
            "measured_us": None,
            "simulated_alone_us": None,
            "measured_ctas_per_sm": None,
            "measured_regs_per_thread": None,
            "measured_smem_bytes": None,
            "local_load_bytes": None,
        }
        if m is not None:
            dur = m.get(NCU_DURATION)
            row.update(
                measured_us=dur / 1e3 if dur is not None else None,
                measured_ctas_per_sm=ncu_occupancy(m),
                measured_regs_per_thread=m.get("launch__registers_per_thread"),
                measured_smem_bytes=m.get("launch__shared_mem_per_block_dynamic"),
                local_load_bytes=m.get("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"),
                simulated_alone_us=alone_time_s(alone(result.workload, k.name), result.gpu) * 1e6,
            )
        out.append(row)
    return out


def _pct(a: float, b: float) -> float:
    """How far `a` is off `b`, in per cent of `b`."""
    return (a / b - 1) * 100


def _note(kind: str, level: str, text: str) -> Note:
    """One note: its kind (the module doc's list), level (ok, info, warn, bad) and sentence."""
    return {"kind": kind, "level": level, "text": text}


@dataclass(frozen=True)
class Context:
    """One dataset row beside the engine's result for its configuration: what a rule reads."""

    row: Mapping[str, Any]  # the dataset row (measured_us, measured bytes, ncu's kernels)
    result: SimResult
    kernels: list[KernelRow]  # kernel_rows of the two

    @property
    def concurrent(self) -> bool:
        """Whether some of the call's kernels run concurrently (the separate backward route)."""
        return any(launch.concurrent for launch in self.result.workload.launches)


Rule = Callable[[Context], list[Note]]
KernelRule = Callable[[Context, KernelRow], list[Note]]
LaunchRule = Callable[[Context, Launch, TileConfig], list[Note]]


def _error(c: Context) -> list[Note]:
    """How far the prediction is off the measured time, against the comparison's targets."""
    meas, sim = c.row.get("measured_us"), c.result.time_s * 1e6
    if not meas:
        return []
    err = _pct(sim, meas)
    side = "under" if err < 0 else "over"
    level = "bad" if abs(err) > TARGET_WORST_PCT else "warn" if abs(err) > TARGET_MEAN_PCT else "ok"
    return [
        _note(
            "error",
            level,
            f"The engine predicts {sim:,.1f} µs against {meas:,.1f} µs measured: "
            f"{abs(err):.1f}% {side} (targets: {TARGET_MEAN_PCT}% on average, "
            f"{TARGET_WORST_PCT}% at worst).",
        )
    ]


def _limiter(c: Context) -> list[Note]:
    """The three limiters that bind most of the simulated time, with their shares."""
    shares = sorted(c.result.limiter.items(), key=lambda kv: -kv[1])
    top = ", ".join(f"{k} {v:.0%}" for k, v in shares[:3] if v >= 0.01)
    return [_note("limiter", "info", f"Simulated time by limiter: {top}.")]


def _occupancy(c: Context, k: KernelRow) -> list[Note]:
    """A kernel whose CTAs per SM differ from the compiled kernel's (ncu's occupancy limits)."""
    mc = k["measured_ctas_per_sm"]
    if mc is None or mc == k["ctas_per_sm"]:
        return []
    text = (
        f"{k['name']}: the engine runs {k['ctas_per_sm']} CTA(s) per SM, "
        f"the compiled kernel fits {mc} (ncu's occupancy limits)."
    )
    return [_note("occupancy", "warn", text)]


def _alone(c: Context, k: KernelRow) -> list[Note]:
    """A kernel whose time alone is off Nsight Compute's duration of it by more than ALONE_PCT."""
    alone_us, ncu_us = k["simulated_alone_us"], k["measured_us"]
    if not (alone_us and ncu_us and abs(_pct(alone_us, ncu_us)) > ALONE_PCT):
        return []
    err = _pct(alone_us, ncu_us)
    hidden = "; the call's time can hide this where its kernels overlap." if c.concurrent else "."
    text = (
        f"{k['name']} alone: the engine gives {alone_us:,.1f} µs at the boost clock against "
        f"Nsight Compute's {ncu_us:,.1f} µs, {abs(err):.0f}% {'over' if err > 0 else 'under'}"
        + hidden
    )
    return [_note("alone", "bad" if abs(err) > TARGET_WORST_PCT else "warn", text)]


def _register_source(k: KernelRow) -> str:
    """Where the engine's register count of kernel `k` comes from and when it charges spills."""
    if k["regs_source"] == "compiled":
        return (
            f"The engine takes the compiled count ({k['regs_per_thread']} as allocated) and "
            "charges a fitted slowdown where the compiled kernel was measured spilling"
        )
    return (
        f"The engine estimates {k['regs_per_thread']} and charges a fitted slowdown only "
        "where its estimate exceeds 255 (or, under a register cap, where the tiles alone "
        "exceed it)"
    )


def _spill_bytes(c: Context, k: KernelRow) -> str:
    """What the engine does with kernel `k`'s spilled bytes: through L2 (and back to DRAM)."""
    moved, back = k["spill_l2_bytes"], k["spill_dram_bytes"]
    if not moved > 0:
        return (
            "it has no measured spill counts for this kernel and tile configuration, "
            "so it moves no spill bytes"
            if k["regs_source"] == "compiled"
            else "its tiles fit in 255 registers (the cap) and no spill counts were measured "
            "for this kernel and tile configuration, so it moves no spill bytes"
        )
    source = (
        "from the counts measured for this compiled kernel"
        if k["regs_source"] == "compiled"
        else "estimated from the registers its tiles ask for beyond the cap"
    )
    back_text = (
        f" and writes {back / 1e6:,.0f} MB of spilled lines back to DRAM (measured for "
        "this kernel on this GPU)"
        if back > 0
        else ""
    )
    return (
        f"it moves {moved / 1e6:,.0f} MB of them through L2 (the stores and a fitted "
        f"{c.result.gpu.efficiency.spill_l1_miss:.0%} of the reloads, {source})"
        f"{back_text} but does not slow the loop by "
        "their latency"
    )


def _spills(c: Context, k: KernelRow) -> list[Note]:
    """A kernel that Nsight Compute saw reload spilled registers from local memory."""
    local = k["local_load_bytes"] or 0
    if not local > 0:
        return []
    text = (
        f"{k['name']} spills registers: {local / 1e6:,.0f} MB of local-memory loads at "
        f"{k['measured_regs_per_thread']:.0f} registers per thread. {_register_source(k)}; "
        f"{_spill_bytes(c, k)}."
    )
    return [_note("registers", "warn", text)]


def _register_estimate(c: Context, k: KernelRow) -> list[Note]:
    """A kernel that does not spill whose estimated registers are far from the compiled count."""
    measured, estimated = k["measured_regs_per_thread"], k["regs_per_thread"]
    if (
        (k["local_load_bytes"] or 0) > 0
        or k["regs_source"] != "estimated"
        or measured is None
        or not abs(measured - estimated) > REGS_SLACK
    ):
        return []
    text = f"{k['name']}: {measured:.0f} registers per thread compiled, {estimated} estimated."
    return [_note("registers", "info", text)]


# Per kernel, in this order, for the kernels of MINOR_SHARE or more of the simulated time
KERNEL_RULES: tuple[KernelRule, ...] = (_occupancy, _alone, _spills, _register_estimate)


def _each_kernel(c: Context) -> list[Note]:
    """The kernel rules, kernel by kernel (the short helper passes explain little: skipped)."""
    total = sum(k["simulated_us"] for k in c.kernels) or 1.0
    out: list[Note] = []
    for k in c.kernels:
        if k["simulated_us"] < MINOR_SHARE * total:
            continue
        for rule in KERNEL_RULES:
            out.extend(rule(c, k))
    return out


def _lockstep(c: Context, launch: Launch, t: TileConfig) -> list[Note]:
    """Warpgroups on their own row slices of a two-buffer ring: the fitted lockstep loss."""
    if not lockstep(launch, t):
        return []
    eff = c.result.gpu.efficiency
    per_sm = next((k.ctas_per_sm for k in c.result.kernels if k.name == launch.name), 1)
    shared = (
        f", divided by the {per_sm} CTAs per SM raised to lockstep_fill = "
        f"{eff.lockstep_fill:.2f}, i.e. by {per_sm**eff.lockstep_fill:.1f}"
        if per_sm > 1
        else ""
    )
    before = known_miss("lockstep-warpgroups")
    text = (
        f"{launch.name}: {t.warps // 4} warpgroups on their own 64-row slices share a ring of "
        "two K/V buffers, so they run in lockstep and their softmax and matrix phases overlap "
        "less. The engine charges this as a fitted loss of overlap within the CTA (lockstep = "
        f"{eff.lockstep:.2f} of it{shared}: another CTA runs in their common stalls); before it "
        f"did, such kernels were up to {before.worst_pct:.0f}% faster in the engine than "
        "measured."
    )
    return [_note("structure", "warn", text)]


def _two_stage(c: Context, launch: Launch, t: TileConfig) -> list[Note]:
    """Any other CTA on a ring of two K/V buffers: the fitted two-stage loss, where fitted."""
    share = c.result.gpu.efficiency.two_stage
    if not (two_stage(launch, t) and share > 0):
        return []
    text = (
        f"{launch.name}: a ring of two K/V buffers refills a buffer only once the products "
        "reading it are done, so consecutive tiles overlap the softmax less; the engine charges "
        f"a fitted share of the CTA's overlap (two_stage = {share:.2f}, divided by the CTAs "
        "per SM)."
    )
    return [_note("structure", "info", text)]


# Per launch, in this order (a launch is in lockstep or on two stages, never both)
LAUNCH_RULES: tuple[LaunchRule, ...] = (_lockstep, _two_stage)


def _each_launch(c: Context) -> list[Note]:
    """The launch rules, launch by launch, each with its own tiles (or the workload's)."""
    out: list[Note] = []
    for launch in c.result.workload.launches:
        t = launch.tiles or c.result.workload.tiles
        for rule in LAUNCH_RULES:
            out.extend(rule(c, launch, t))
    return out


def _atomic_route(c: Context) -> list[Note]:
    """The atomic backward route: what the engine charges its reduce-adds, and what it lacks."""
    if c.result.workload.route != "atomic":
        return []
    miss = known_miss("atomic-route")
    text = (
        "The atomic route reduce-adds each dQ tile into L2; the engine charges the launch's "
        "reduce-adds to the L2's shared reduce units (their bytes at a fitted rate, l2_reduce), "
        "each one's issue to its CTA's warps (a fitted time, reduce_op_ns: shorter query steps "
        "mean more, smaller reductions), and the copy engine's read of the tile out of shared "
        "memory (bulk_read_ns and the transfer) where it outlasts the next iteration's work, "
        "which the kernel does before it stores the next tile there. Not modelled: "
        f"{miss.lacks} ({miss.source}): this route's rows are {miss.direction} by {miss.span} "
        f"on {miss.on}."
    )
    return [_note("structure", "info", text)]


def _overlap(c: Context) -> list[Note]:
    """Concurrent kernels, which Nsight Compute times one at a time."""
    if not c.concurrent:
        return []
    text = (
        "The dQ and dK/dV kernels run concurrently on two streams; the per-kernel times ncu "
        "reports were taken one kernel at a time, so they add up to more than the measured total."
    )
    return [_note("overlap", "info", text)]


def _clock(c: Context) -> list[Note]:
    """Kernels the power cap slows, with the measured slowdown where one kernel was timed both
    back to back and alone (Nsight Compute's single launch runs at the boost clock)."""
    eff = c.result.gpu.efficiency
    out: list[Note] = []
    for k in c.kernels:
        if k["clock"] >= 0.995 or eff.power_exp == 0:
            continue
        demand = k["clock"] ** (-1.0 / eff.power_exp)
        text = (
            f"{k['name']} runs at {k['clock']:.0%} of the boost clock in the engine: at the "
            f"boost clock its tensor rate and L2 traffic would draw {demand:.2f}× what the power "
            f"cap allows (fitted: {eff.power_tflops:.0f} TFLOP/s or {eff.power_l2_tbs:.1f} TB/s "
            f"alone reach it; clock = demand^-{eff.power_exp:.2f})."
        )
        single, sustained = k["measured_us"], c.row.get("measured_us")
        if single and sustained and len(c.kernels) == 1:
            text += (
                f" Measured: {single:,.1f} µs alone (Nsight Compute), {sustained:,.1f} µs back "
                f"to back, i.e. {single / sustained:.0%} of the single launch's pace."
            )
        out.append(_note("clock", "info", text))
    return out


def _fixed(c: Context) -> list[Note]:
    """Small problems: CTA set-up, load latency and launch gaps weigh most of the time."""
    latency = c.result.limiter.get("latency", 0.0) + c.result.limiter.get("launch", 0.0)
    if not latency > FIXED_SHARE:
        return []
    text = (
        f"{latency:.0%} of the simulated time is CTA set-up, load latency and launch gaps: fixed "
        "costs, fitted from the measured small problems, weigh most here."
    )
    return [_note("fixed", "info", text)]


def _bytes(c: Context) -> list[Note]:
    """DRAM and L2 bytes further off ncu's than BYTES_PCT."""
    out: list[Note] = []
    for level in ("dram", "l2"):
        m, s = c.row.get(f"measured_{level}_bytes"), c.row.get(f"simulated_{level}_bytes")
        if m and s and abs(_pct(s, m)) > BYTES_PCT:
            text = (
                f"{level.upper()} bytes: {s / 1e6:,.0f} MB simulated, {m / 1e6:,.0f} MB "
                f"measured ({_pct(s, m):+.0f}%)."
            )
            out.append(_note("bytes", "warn", text))
    return out


# The rules, in the order their notes are listed
RULES: tuple[Rule, ...] = (
    _error,
    _limiter,
    _each_kernel,
    _each_launch,
    _atomic_route,
    _overlap,
    _clock,
    _fixed,
    _bytes,
)


def notes(
    row: Mapping[str, Any], result: SimResult, kernels: list[KernelRow] | None = None
) -> list[Note]:
    """What explains the gap between `row`'s measurement and `result` (see the module doc);
    `kernels`: `kernel_rows` of the two, where the caller has them already."""
    if kernels is None:
        measured = (row.get("measured") or {}).get("ncu", {}) or {}
        kernels = kernel_rows(result, measured.get("kernels") or [])
    context = Context(row, result, kernels)
    return [note for rule in RULES for note in rule(context)]
