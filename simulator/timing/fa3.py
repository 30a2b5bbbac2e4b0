"""FA-3 on Hopper (`algo` "fa3"): a per-warpgroup model of flashscope's warp-specialized forward.

The kernel is `kernels/hopper_forward.py` (its `WsConfig`, mirrored here by `Fa3Config`): one
loader warp copies Q and then K and V block by block into a ring of `stages` shared-memory
slots; `consumers` warpgroups of 64 query rows each issue S = Q Kᵀ, run the online softmax
(exp2 on the SFU, the rest on the FP32 units), rescale O and issue O += P V; `pipeline` issues
S_j before P_{j-1} V_{j-1} so that the softmax of S_j runs under that product; `pingpong` makes
the warpgroups take turns issuing their products; `persistent` launches one program per CTA
slot (SMs × `ctas`) looping over tiles, its loader fetching the next tile's Q early.

How the time is made:
1. Per-block work of one warpgroup (`costs`): each product's FLOPs at the SM's share of the
   tensor peak × `efficiency.tensor`; 64·(block_n + 1) exp2 at `sfu_per_clk` × clock ×
   `efficiency.sfu`; SOFTMAX_OPS FP32 operations per score plus the rescale at the SM's FP32
   rate × `efficiency.fp32`; copies at the SM's share of the L2 bandwidth × `efficiency.l2`,
   after `l2_latency_ns` (K, V) or `dram_latency_ns` (Q); each product's completion is seen
   WGMMA_LATENCY_NS after its last work.
2. One SM in discrete time (`fa3_sm.SM`): the loader and consumers of its `ctas` CTAs, the
   tensor cores, SFU, FP32 units and copy engine shared among the jobs running at once.
3. The grid: a tile's time on its slot is linear in its key blocks, a + b·n, read from two
   short runs of the SM (for persistent programs, the cost of a further tile from runs of two
   tiles); tiles go to slots in launch order, each to the first free one (non-persistent:
   `cta_dispatch_ns` between CTAs), persistent programs take theirs in turn (causal: the
   host's schedule, approximated by the same first-free rule). The first CTAs start
   `cold_start_ns` late; the time is at least the unique bytes at the HBM rate.

What it leaves out: the causal masks' extra FP32 work and the kernel's half steps (HALF_STEPS),
register pressure, the power cap's clock, L2 misses of K/V.

FP8 (`dtype="fp8"`, e4m3) is a what-if, not a kernel: twice the tensor rate, one byte per
element of Q, K and V (O stays 16-bit), a 4-byte scale per block of Q, K and V, and FP8_OPS more
FP32 operations per score (descaling S, scaling P before its conversion).

Intervals (the measured timeline will use the same schema): dicts {role, warpgroup, phase,
tile, block, start_ns, end_ns}; see PHASES and `fa3_sm`. The configuration and the tiles'
order are in `fa3_config`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flashscope.simulator.core import hardware
from flashscope.simulator.core.gpu import GPU
from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing.fa3_config import (
    BLOCK_M,
    INTERVAL_KEYS,
    PHASES,
    ROLES,
    SHARED_PER_CTA,
    SHARED_PER_SM,
    Fa3Config,
    interval_problems,
    tile_steps,
)
from flashscope.simulator.timing.fa3_sm import SM, Costs

ALGO = "fa3"
DTYPES = ("fp16", "bf16", "fp8")
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1}
SOFTMAX_OPS = 4  # FP32 operations per score beside its exp2: max, scale-and-subtract, sum, cvt
FP8_OPS = 1  # fp8: P scaled before its conversion (S's descale folds into the softmax scale)
WGMMA_LATENCY_NS = 40.0  # the former estimate of a product's drain (now `Fa3Terms`)
__all__ = [
    "BLOCK_M",
    "INTERVAL_KEYS",
    "PHASES",
    "ROLES",
    "SHARED_PER_CTA",
    "SHARED_PER_SM",
    "TERMS",
    "Fa3Config",
    "Fa3Result",
    "Fa3Terms",
    "costs",
    "explain",
    "interval_problems",
    "simulate_fa3",
    "tile_steps",
]
FIT_BLOCKS = 12  # the longest tile the grid's linear cost is read from


@dataclass(frozen=True)
class Fa3Terms:
    """The model's own per-phase terms for a Hopper SM, read from the kernel's recorded
    timelines (benchmarks/results/warpgroups-timelines-*.json, nine launches at N = 4096 on an
    H100) and, where a timeline cannot separate two of them, fitted on the fit half of the
    measured rows (`simulator/calibrate/fa3_fit.py`; the split is `fa3_rows.held_out`).

    tensor: share of the datasheet tensor rate one product runs at. A lone S = QKᵀ (plain
        loop, the other warpgroup in its softmax) measures 276 ns for 2.1 MFLOP at d = 128 and
        151 ns for 1.05 MFLOP at d = 64: the datasheet rate (280 and 140 ns), not the 0.737 a
        whole matmul reaches. Products issued while another runs queue behind it (one queue).
    mma_latency_ns: from a product's last work to its completion being seen (wgmma wait);
        fitted (52 ns): the timelines' stamps resolve ~20 ns.
    softmax_ops_per_clk: FP32 operations per SM clock the softmax gets (SOFTMAX_OPS per score
        and the rescale's one per element of O). A plain-loop softmax of 64 × 128 scores
        measures 675–720 ns at d = 128 with the other warpgroup's softmax partly beside it; the
        exponentials run beside this work (`fa3_sm`), so the FP32 rate is what the plain
        softmax's length leaves; fitted: 37.6 per clock.
    kv_latency_ns: from a K or V copy's issue to its barrier, beside its bytes at `copy_gbs`.
        A 32 KB K block measures 1.2 µs from issue to the waiting consumer at d = 128, 16 KB
        0.8–0.9 µs at d = 64 (ping-pong, two stages); fitted: 1130 ns.
    copy_gbs: bytes per ns one SM's copies move from L2 when all SMs copy (the copy engine's
        share), shared by the copies in flight. Two stages at d = 128 move 64 KB per block in
        1.77–1.88 µs per SM measured: latency, not bandwidth, sets the ring's pace; fitted:
        128 B/ns (the rows cannot pin it further).
    """

    tensor: float = 1.0
    mma_latency_ns: float = 52.0
    softmax_ops_per_clk: float = 37.6
    kv_latency_ns: float = 1130.0
    copy_gbs: float = 128.0


TERMS = Fa3Terms()


def costs(
    problem: AttentionProblem,
    cfg: Fa3Config,
    gpu: GPU,
    dtype: str,
    terms: Fa3Terms = TERMS,
) -> Costs:
    """One warpgroup's work per key block on `gpu` (see the module docstring, step 1)."""
    eff, d, bn = gpu.efficiency, problem.head_dim, cfg.block_n
    elem = ELEMENT_BYTES[dtype]
    tensor = gpu.tensor_flops("fp16") * (2 if dtype == "fp8" else 1) * terms.tensor / gpu.sms / 1e9
    sfu = gpu.sfu_per_clk * gpu.clock_ghz * eff.sfu  # exp2 per ns per SM
    fp32 = terms.softmax_ops_per_clk * gpu.clock_ghz  # FP32 operations per ns per SM
    ops = (SOFTMAX_OPS + (FP8_OPS if dtype == "fp8" else 0)) * BLOCK_M * bn
    scale = 4 if dtype == "fp8" else 0  # one fp32 scale per block
    return Costs(
        qk=2 * BLOCK_M * bn * d / tensor,
        pv=2 * BLOCK_M * bn * d / tensor,
        exp=BLOCK_M * (bn + 1) / sfu,
        alu=ops / fp32,
        epilogue=(2 * BLOCK_M * d + 4 * BLOCK_M) / fp32,
        q_bytes=BLOCK_M * d * elem + scale,
        kv_bytes=bn * d * elem + scale,
        o_bytes=BLOCK_M * d * 2,
        copy_rate=terms.copy_gbs,
        mma_latency=terms.mma_latency_ns,
        copy_latency=terms.kv_latency_ns,
        q_latency=eff.dram_latency_ns,
        rescale=BLOCK_M * d / fp32,
    )


def explain(c: Costs, cfg: Fa3Config, head_dim: int) -> dict[str, Any]:
    """Per key block of one warpgroup: the exponentials' time against the two products' (why the
    exponentials bound the time or not). With k warpgroups on the SM (consumers × ctas) each
    unit does k times its share; perfect overlap leaves the busiest unit as the floor."""
    products, alu = c.qk + c.pv, c.alu + c.rescale
    softmax = c.exp + alu
    k = cfg.consumers * cfg.ctas
    units = {"tensor cores": k * products, "SFU (exp2)": k * c.exp, "FP32 units": k * alu}
    bound = max(units, key=lambda u: units[u])
    return {
        "head_dim": head_dim,
        "block": [BLOCK_M, cfg.block_n],
        "qk_ns": c.qk,
        "pv_ns": c.pv,
        "products_ns": products,
        "exp_ns": c.exp,
        "softmax_other_ns": alu,
        "softmax_ns": softmax,
        "exp_over_products": c.exp / products,
        "warpgroups_per_sm": k,
        "sm_unit_ns": units,
        "bound": bound,
        "serial_ns": products + softmax,
        "text": (
            f"At head_dim {head_dim} one warpgroup's block of {BLOCK_M}×{cfg.block_n} scores "
            f"takes {products:.0f} ns on the tensor cores (S and P·V), {c.exp:.0f} ns of exp2 "
            f"on the SFU and {alu:.0f} ns of other softmax work. Alone, one after the other: "
            f"{products + softmax:.0f} ns. With {k} warpgroups on the SM overlapping perfectly, "
            f"the {bound} set the floor: {units[bound]:.0f} ns per block of all {k}."
        ),
    }


@dataclass(frozen=True)
class Fa3Result:
    """The model's answer for one launch (times in ns from the launch's start)."""

    problem: AttentionProblem
    config: Fa3Config
    gpu: GPU
    dtype: str
    time_ns: float
    useful_flops: float
    tiles: int
    programs: int
    busy: dict[str, float]  # tensor, sfu, loader: fractions of the SMs' time, whole kernel
    tile_ns: tuple[float, float]  # a, b: a tile of n blocks takes a + b·n on its slot
    hbm_floor_ns: float
    program: int  # the program the timeline shows
    intervals: list[dict[str, Any]]
    truncated: bool
    per_block: dict[str, float]
    explanation: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def tflops(self) -> float:
        return self.useful_flops / self.time_ns / 1e3

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the figures, the configuration and the timeline."""
        return {
            "algo": ALGO,
            "simulated": True,
            "gpu": self.gpu.key,
            "gpu_name": self.gpu.name,
            "dtype": self.dtype,
            "problem": self.problem.shape(),
            "config": {
                "consumers": self.config.consumers,
                "block_m": BLOCK_M,
                "block_n": self.config.block_n,
                "stages": self.config.stages,
                "pipeline": self.config.pipeline,
                "ctas": self.config.ctas,
                "pingpong": self.config.pingpong,
                "persistent": self.config.persistent,
                "band": self.config.band,
            },
            "time_us": self.time_ns / 1e3,
            "tflops": self.tflops,
            "tiles": self.tiles,
            "programs": self.programs,
            "busy": self.busy,
            "tile_ns": {"fixed": self.tile_ns[0], "per_block": self.tile_ns[1]},
            "hbm_floor_us": self.hbm_floor_ns / 1e3,
            "per_block": self.per_block,
            "explanation": self.explanation,
            "timeline": {
                "program": self.program,
                "truncated": self.truncated,
                "intervals": self.intervals,
            },
            "notes": self.notes,
        }


@functools.lru_cache(maxsize=4096)
def _sm_time(c: Costs, cfg: Fa3Config, tiles: tuple[int, ...], resident: int) -> float:
    """Time for each of the SM's `resident` CTAs to run `tiles` (the same list for each);
    remembered, as one sweep asks for the same short runs again and again."""
    sm = SM(
        c,
        cfg.consumers,
        cfg.stages,
        cfg.pipeline,
        cfg.pingpong,
        [list(tiles)] * resident,
        record=None,
    ).run()
    return max(sm.ends)


def _linear(c: Costs, cfg: Fa3Config, n_max: int, tiles: int, resident: int) -> tuple[float, float]:
    """(a, b): `tiles` consecutive tiles of n blocks take a + b·n, from two short runs."""
    hi = min(n_max, FIT_BLOCKS)
    lo = max(1, hi // 2)
    t_hi = _sm_time(c, cfg, (hi,) * tiles, resident)
    if hi == lo:
        return t_hi, 0.0
    t_lo = _sm_time(c, cfg, (lo,) * tiles, resident)
    b = (t_hi - t_lo) / (hi - lo)
    return t_hi - b * hi, b


def _first_free(cost: np.ndarray, slots: int) -> np.ndarray:
    """Each slot's busy time when tiles (in order, with these costs) go, `slots` at a time, to
    the slots free first (list scheduling, one wave at a time)."""
    free = np.zeros(slots)
    for at in range(0, cost.size, slots):
        chunk = cost[at : at + slots]
        order = np.argsort(free, kind="stable")[: chunk.size]
        free[order] += chunk
    return free


def simulate_fa3(
    problem: AttentionProblem,
    config: Fa3Config | None = None,
    gpu: GPU | str = "h100-sxm",
    *,
    dtype: str | None = None,
    program: int = 0,
    shown_tiles: int = 2,
    max_intervals: int = 2000,
) -> Fa3Result:
    """Model the warp-specialized forward on `problem` (its dtype, or `dtype`: fp16, bf16 or the
    fp8 what-if) with `config` on `gpu`; the timeline shows `program`'s first `shown_tiles`
    tiles, at most `max_intervals` intervals."""
    return simulate_with_terms(
        problem,
        config,
        gpu,
        TERMS,
        dtype=dtype,
        program=program,
        shown_tiles=shown_tiles,
        max_intervals=max_intervals,
    )


def simulate_with_terms(
    problem: AttentionProblem,
    config: Fa3Config | None,
    gpu: GPU | str,
    terms: Fa3Terms,
    *,
    dtype: str | None = None,
    program: int = 0,
    shown_tiles: int = 2,
    max_intervals: int = 2000,
) -> Fa3Result:
    """`simulate_fa3` with other per-phase terms (the fit's trial values)."""
    cfg = config if config is not None else Fa3Config()
    gpu = hardware.from_name(gpu) if isinstance(gpu, str) else gpu
    dtype = dtype if dtype is not None else problem.dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} for fa3, got {dtype!r}")
    why = cfg.fits(problem.head_dim, ELEMENT_BYTES[dtype])
    if why is not None:
        raise ValueError(why)
    rows = problem.batch * problem.heads
    steps = tile_steps(cfg, rows, problem.seq_q, problem.seq_k, problem.causal)
    n_tiles = steps.size
    programs = min(n_tiles, gpu.sms * cfg.ctas) if cfg.persistent else n_tiles
    if not 0 <= program < programs:
        raise ValueError(f"program must be from 0 to {programs - 1}, got {program}")
    c = costs(problem, cfg, gpu, dtype, terms)
    eff = gpu.efficiency
    resident = cfg.resident(problem.head_dim, ELEMENT_BYTES[dtype])
    slots = gpu.sms * resident
    a1, b1 = _linear(c, cfg, int(steps.max()), 1, resident)
    tile_cost = a1 + b1 * steps
    if cfg.persistent:
        a2, b2 = _linear(c, cfg, int(steps.max()), 2, resident)
        further = (a2 + b2 * steps) - tile_cost  # a tile after another in the same program
        if problem.causal:
            share = _assigned(steps + 1.0, programs)
        else:
            share = np.arange(n_tiles) % programs
        first = np.zeros(n_tiles, dtype=bool)
        first[np.unique(share, return_index=True)[1]] = True
        per_tile = np.where(first, tile_cost, further)
        busy_program = np.bincount(share, weights=per_tile, minlength=programs)
        busy_slot: np.ndarray = np.bincount(np.arange(programs) % slots, weights=busy_program)
        order = [np.flatnonzero(share == program).astype(np.int64)]
    else:
        gap = eff.cta_dispatch_ns
        busy_slot = _first_free(tile_cost + gap, slots) - gap
        order = [np.array([program], dtype=np.int64)]
    makespan = float(busy_slot.max()) + eff.cold_start_ns
    elem = ELEMENT_BYTES[dtype]
    d = problem.head_dim
    unique = (
        rows * problem.seq_q * d * (elem + 2)
        + 2 * problem.batch * problem.kv_heads * problem.seq_k * d * elem
    )
    floor = unique / (gpu.hbm_gbs * eff.hbm)
    time_ns = max(makespan, floor)

    blocks = float(steps.sum()) * cfg.consumers
    copy_ns = (
        float(steps.sum()) * 2 * c.kv_bytes + n_tiles * cfg.consumers * (c.q_bytes + c.o_bytes)
    ) / c.copy_rate
    span = gpu.sms * time_ns
    busy = {
        "tensor": min(1.0, blocks * (c.qk + c.pv) / span),
        "sfu": min(1.0, blocks * c.exp / span),
        "loader": min(1.0, copy_ns / span),
    }

    shown = [int(n) for n in steps[order[0][:shown_tiles]]]
    sm = SM(
        c,
        cfg.consumers,
        cfg.stages,
        cfg.pipeline,
        cfg.pingpong,
        [shown] * resident,
        record=0,
        max_intervals=max_intervals,
    ).run()
    intervals = sorted(sm.intervals, key=lambda r: (r["start_ns"], r["warpgroup"]))
    flops = 4.0 * rows * problem.seq_q * problem.seq_k * d * (0.5 if problem.causal else 1.0)
    notes = []
    if resident < cfg.ctas:
        notes.append(f"{cfg.ctas} CTAs per SM do not fit in shared memory: {resident} at once")
    if dtype == "fp8":
        notes.append("fp8 (e4m3) is a simulated what-if: flashscope's kernel runs fp16 and bf16")
    if problem.causal:
        notes.append("causal: masks' extra FP32 work and the kernel's half steps left out")
    return Fa3Result(
        problem=problem,
        config=cfg,
        gpu=gpu,
        dtype=dtype,
        time_ns=time_ns,
        useful_flops=flops,
        tiles=n_tiles,
        programs=programs,
        busy=busy,
        tile_ns=(a1, b1),
        hbm_floor_ns=floor,
        program=program,
        intervals=intervals,
        truncated=sm.truncated,
        per_block={
            "qk_ns": c.qk,
            "pv_ns": c.pv,
            "exp_ns": c.exp,
            "softmax_other_ns": c.alu + c.rescale,
            "epilogue_ns": c.epilogue,
            "k_copy_ns": c.kv_bytes / c.copy_rate,
            "q_copy_ns": c.q_bytes / c.copy_rate,
        },
        explanation=explain(c, cfg, d),
        notes=notes,
    )


def _assigned(cost: np.ndarray, programs: int) -> np.ndarray:
    """The program each tile goes to when tiles, in launch order, go to the program free first
    (the kernel's host schedule for persistent causal launches, one wave at a time)."""
    free = np.zeros(programs)
    owner = np.empty(cost.size, dtype=np.int64)
    for at in range(0, cost.size, programs):
        chunk = cost[at : at + programs]
        order = np.argsort(free, kind="stable")[: chunk.size]
        owner[at : at + chunk.size] = order
        free[order] += chunk
    return owner
