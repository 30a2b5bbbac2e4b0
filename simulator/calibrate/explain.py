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
"""

from __future__ import annotations

from flashscope.simulator.timing.compiled import KERNEL_LAUNCH, NCU_DURATION
from flashscope.simulator.timing.engine import alone_time_s, lockstep, two_stage
from flashscope.simulator.timing.results import SimResult
from flashscope.simulator.timing.workload import alone

# The engine's launch names → the kernels' names in Nsight Compute (the preprocess kernel has
# no compiled entry: it never spills, and its registers are not read)
_NCU_NAMES = {launch: kernel for kernel, launch in KERNEL_LAUNCH.items()}
_NCU_NAMES["bwd_preprocess"] = "_bwd_preprocess"


def measured_kernel(name: str, measured: list[dict]) -> dict | None:
    """The ncu row of the kernel the engine calls `name` (None when ncu has none)."""
    want = _NCU_NAMES.get(name)
    return next((k for k in measured if want and want in k.get("name", "")), None)


def ncu_occupancy(k: dict) -> int | None:
    limits = [k.get(f"launch__occupancy_limit_{x}") for x in ("registers", "shared_mem", "warps")]
    limits = [v for v in limits if v is not None]
    return int(min(limits)) if limits else None


def kernel_rows(result: SimResult, measured: list[dict]) -> list[dict]:
    """Each simulated kernel beside its ncu row: time, CTAs/SM, registers, spills; and where
    ncu timed it, the engine's time for the kernel alone (its own stream, the boost clock, no
    launch gap), which is what Nsight Compute's duration measures."""
    out = []
    launches = {w.name: w for w in result.workload.launches}
    for k in result.kernels:
        m = measured_kernel(k.name, measured)
        fp = k.occupancy.footprint
        launch = launches.get(k.name)
        row = {
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
    return (a / b - 1) * 100


def notes(row: dict, result: SimResult, kernels: list[dict] | None = None) -> list[dict]:
    """What explains the gap between `row`'s measurement and `result` (see the module doc);
    `kernels`: `kernel_rows` of the two, where the caller has them already."""
    out: list[dict] = []
    meas, sim = row.get("measured_us"), result.time_s * 1e6
    if meas:
        err = _pct(sim, meas)
        side = "under" if err < 0 else "over"
        level = "bad" if abs(err) > 25 else "warn" if abs(err) > 10 else "ok"
        out.append(
            {
                "kind": "error",
                "level": level,
                "text": f"The engine predicts {sim:,.1f} µs against {meas:,.1f} µs measured: "
                f"{abs(err):.1f}% {side} (targets: 10% on average, 25% at worst).",
            }
        )
    shares = sorted(result.limiter.items(), key=lambda kv: -kv[1])
    top = ", ".join(f"{k} {v:.0%}" for k, v in shares[:3] if v >= 0.01)
    out.append({"kind": "limiter", "level": "info", "text": f"Simulated time by limiter: {top}."})
    if kernels is None:
        measured = (row.get("measured") or {}).get("ncu", {}) or {}
        kernels = kernel_rows(result, measured.get("kernels") or [])
    total = sum(k["simulated_us"] for k in kernels) or 1.0
    concurrent = any(launch.concurrent for launch in result.workload.launches)
    for k in kernels:
        if k["simulated_us"] < 0.1 * total:  # the short helper passes explain little
            continue
        mc = k["measured_ctas_per_sm"]
        if mc is not None and mc != k["ctas_per_sm"]:
            out.append(
                {
                    "kind": "occupancy",
                    "level": "warn",
                    "text": f"{k['name']}: the engine runs {k['ctas_per_sm']} CTA(s) per SM, "
                    f"the compiled kernel fits {mc} (ncu's occupancy limits).",
                }
            )
        alone_us, ncu_us = k["simulated_alone_us"], k["measured_us"]
        if alone_us and ncu_us and abs(_pct(alone_us, ncu_us)) > 10:
            err = _pct(alone_us, ncu_us)
            out.append(
                {
                    "kind": "alone",
                    "level": "bad" if abs(err) > 25 else "warn",
                    "text": f"{k['name']} alone: the engine gives {alone_us:,.1f} µs at the "
                    f"boost clock against Nsight Compute's {ncu_us:,.1f} µs, "
                    f"{abs(err):.0f}% {'over' if err > 0 else 'under'}"
                    + (
                        "; the call's time can hide this where its kernels overlap."
                        if concurrent
                        else "."
                    ),
                }
            )
        local = k["local_load_bytes"] or 0
        if k["regs_source"] == "compiled":
            regs = (
                f"The engine takes the compiled count ({k['regs_per_thread']} as allocated) and "
                "charges a fitted slowdown where the compiled kernel was measured spilling"
            )
        else:
            regs = (
                f"The engine estimates {k['regs_per_thread']} and charges a fitted slowdown only "
                "where its estimate exceeds 255 (or, under a register cap, where the tiles alone "
                "exceed it)"
            )
        if local > 0:
            moved, back = k["spill_l2_bytes"], k["spill_dram_bytes"]
            back_text = (
                f" and writes {back / 1e6:,.0f} MB of spilled lines back to DRAM (measured for "
                "this kernel on this GPU)"
                if back > 0
                else ""
            )
            bytes_text = (
                f"it moves {moved / 1e6:,.0f} MB of them through L2 (the stores and a fitted "
                f"{result.gpu.efficiency.spill_l1_miss:.0%} of the reloads, from the counts "
                f"measured for this compiled kernel){back_text} but does not slow the loop by "
                "their latency"
                if moved > 0
                else "it has no measured spill counts for this kernel and tile configuration, "
                "so it moves no spill bytes"
            )
            out.append(
                {
                    "kind": "registers",
                    "level": "warn",
                    "text": f"{k['name']} spills registers: {local / 1e6:,.0f} MB of local-memory "
                    f"loads at {k['measured_regs_per_thread']:.0f} registers per thread. {regs}; "
                    f"{bytes_text}.",
                }
            )
        elif (
            k["regs_source"] == "estimated"
            and k["measured_regs_per_thread"] is not None
            and abs(k["measured_regs_per_thread"] - k["regs_per_thread"]) > 24
        ):
            out.append(
                {
                    "kind": "registers",
                    "level": "info",
                    "text": f"{k['name']}: {k['measured_regs_per_thread']:.0f} registers per "
                    f"thread compiled, {k['regs_per_thread']} estimated.",
                }
            )
    for launch in result.workload.launches:
        t = launch.tiles or result.workload.tiles
        if lockstep(launch, t):
            eff = result.gpu.efficiency
            lost = eff.lockstep
            per_sm = next((k.ctas_per_sm for k in result.kernels if k.name == launch.name), 1)
            shared = (
                f", divided by the {per_sm} CTAs per SM raised to lockstep_fill = "
                f"{eff.lockstep_fill:.2f}, i.e. by {per_sm**eff.lockstep_fill:.1f}"
                if per_sm > 1
                else ""
            )
            out.append(
                {
                    "kind": "structure",
                    "level": "warn",
                    "text": f"{launch.name}: {t.warps // 4} warpgroups on their own 64-row "
                    "slices share a ring of two K/V buffers, so they run in lockstep and their "
                    "softmax and matrix phases overlap less. The engine charges this as a "
                    f"fitted loss of overlap within the CTA (lockstep = {lost:.2f} of it"
                    f"{shared}: another CTA runs in their common stalls); "
                    "before it did, such kernels were up to 35% faster in the engine than "
                    "measured.",
                }
            )
        elif two_stage(launch, t) and result.gpu.efficiency.two_stage > 0:
            out.append(
                {
                    "kind": "structure",
                    "level": "info",
                    "text": f"{launch.name}: a ring of two K/V buffers refills a buffer only "
                    "once the products reading it are done, so consecutive tiles overlap the "
                    "softmax less; the engine charges a fitted share of the CTA's overlap "
                    f"(two_stage = {result.gpu.efficiency.two_stage:.2f}, divided by the CTAs "
                    "per SM).",
                }
            )
    if result.workload.route == "atomic":
        out.append(
            {
                "kind": "structure",
                "level": "info",
                "text": "The atomic route reduce-adds each dQ tile into L2; the engine charges "
                "the launch's reduce-adds to the L2's shared reduce units (their bytes at a "
                "fitted rate, l2_reduce), each one's issue to its CTA's warps (a fitted time, "
                "reduce_op_ns: shorter query steps mean more, smaller reductions), and the "
                "copy engine's read of the tile out of shared memory (bulk_read_ns and the "
                "transfer) where it outlasts the next iteration's work, which the kernel does "
                "before it stores the next tile there. Not modelled: the transpose of dSᵀ "
                "through shared memory for the fifth product, and the longer wait per "
                "instruction of its unmasked kernels, whose CTAs read a head's Q and dO in "
                "lockstep (benchmarks/profile_tiles.py): this route's rows are under-predicted "
                "by 11–25% on the H200.",
            }
        )
    if concurrent:
        out.append(
            {
                "kind": "overlap",
                "level": "info",
                "text": "The dQ and dK/dV kernels run concurrently on two streams; the per-kernel "
                "times ncu reports were taken one kernel at a time, so they add up to more than "
                "the measured total.",
            }
        )
    out.extend(_clock_notes(row, result, kernels))
    latency = result.limiter.get("latency", 0.0) + result.limiter.get("launch", 0.0)
    if latency > 0.3:
        out.append(
            {
                "kind": "fixed",
                "level": "info",
                "text": f"{latency:.0%} of the simulated time is CTA set-up, load latency and "
                "launch gaps: fixed costs, fitted from the measured small problems, weigh most "
                "here.",
            }
        )
    for level in ("dram", "l2"):
        m, s = row.get(f"measured_{level}_bytes"), row.get(f"simulated_{level}_bytes")
        if m and s and abs(_pct(s, m)) > 10:
            out.append(
                {
                    "kind": "bytes",
                    "level": "warn",
                    "text": f"{level.upper()} bytes: {s / 1e6:,.0f} MB simulated, {m / 1e6:,.0f} "
                    f"MB measured ({_pct(s, m):+.0f}%).",
                }
            )
    return out


def _clock_notes(row: dict, result: SimResult, kernels: list[dict]) -> list[dict]:
    """Kernels the power cap slows, with the measured slowdown where one kernel was timed both
    back to back and alone (Nsight Compute's single launch runs at the boost clock)."""
    eff = result.gpu.efficiency
    out = []
    for k in kernels:
        if k["clock"] >= 0.995 or eff.power_exp == 0:
            continue
        demand = k["clock"] ** (-1.0 / eff.power_exp)
        text = (
            f"{k['name']} runs at {k['clock']:.0%} of the boost clock in the engine: at the "
            f"boost clock its tensor rate and L2 traffic would draw {demand:.2f}× what the power "
            f"cap allows (fitted: {eff.power_tflops:.0f} TFLOP/s or {eff.power_l2_tbs:.1f} TB/s "
            f"alone reach it; clock = demand^-{eff.power_exp:.2f})."
        )
        alone, sustained = k["measured_us"], row.get("measured_us")
        if alone and sustained and len(kernels) == 1:
            text += (
                f" Measured: {alone:,.1f} µs alone (Nsight Compute), {sustained:,.1f} µs back "
                f"to back, i.e. {alone / sustained:.0%} of the single launch's pace."
            )
        out.append({"kind": "clock", "level": "info", "text": text})
    return out
