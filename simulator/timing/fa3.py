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
   tensor peak × `Fa3Terms.tensor` (a head_dim that is not a power of two at the kernel's
   widths: S over `qk_columns`, P V, the rescale and the epilogue over `pv_columns`);
   64·(block_n + 1) exp2 at `sfu_per_clk` × clock × `efficiency.sfu`; SOFTMAX_OPS FP32
   operations per score (`Fa3Terms.mask_ops` more on a masked step), the rescale's one per
   element of O and the epilogue at `Fa3Terms.softmax_ops_per_clk`;
   copies at `Fa3Terms.copy_gbs` shared by the copies in flight, then `kv_latency_ns` (K, V)
   or `dram_latency_ns` (Q); the latencies of `Fa3Terms` (a product's completion seen, a
   softmax's own, a barrier wait's).
2. One SM in discrete time (`fa3_sm.SM`): the loader and consumers of its resident CTAs, the
   tensor cores (one product at a time, in issue order, an issue returning once its product
   has them), the SFU, FP32 units and copy engine shared among the jobs running at once, the
   SFU and FP32 units slowed while products run (`Fa3Terms.mma_drag`). Pipelined, a warpgroup
   runs its softmax after its own P_{j-1} V_{j-1} is done but for a small share
   (`Fa3Config.softmax_under_pv`: the compiled kernel waits for it first, its SASS shows); the
   recorded kernel, whose timelines set the terms, runs it under that product.
3. The grid (`fa3_grid`): a tile's time on its slot is linear in its key blocks, its masked
   steps and its half step, a + b·n + m·masked + h·half, read from a few short runs of the SM
   (for persistent programs, the cost of a further tile from runs of two tiles); CTAs go to
   slots in launch order, each to the slot free first (`cta_dispatch_ns` between two CTAs);
   persistent programs take their tiles in turn, or, causal, by the kernel's host schedule
   (`Fa3Config.scheduled`; in turn, a program meets the same ranks of every head where the
   programs are a multiple of a head's tiles).
   The first CTAs start `cold_start_ns` late; the time is at least the unique bytes at the HBM
   rate.

What it leaves out: register pressure (three consumers hold 160 registers a thread, and their
step loops compile to the same instructions as two consumers' at 240), the power cap's clock,
L2 misses of K/V and what the order of causal tiles does to them beyond the load balance (one
band of all heads measures 7–27% slower than the model gives), and whatever makes three
consumers under the causal mask slower than the model at N ≤ 2048 (22% on average at N = 1024,
11% at 2048) in launches of one tile per CTA, where no schedule in turn explains it
(docs/timing-model.md).

FP8 (`dtype="fp8"`, e4m3) is a what-if, not a kernel: twice the tensor rate, one byte per
element of Q, K and V (O stays 16-bit), a 4-byte scale per block of Q, K and V, and FP8_OPS more
FP32 operations per score (descaling S, scaling P before its conversion).

Intervals (the measured timeline uses the same schema): dicts {role, warpgroup, phase, tile,
block, start_ns, end_ns}; see PHASES and `fa3_sm`. The configuration and the tiles' order are
in `fa3_config`, the grid's schedules in `fa3_grid`. Past 400 lines for the terms' evidence,
which stays beside the terms.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flashscope.simulator.core import hardware
from flashscope.simulator.core.gpu import GPU
from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing import fa3_grid
from flashscope.simulator.timing.fa3_config import (
    BLOCK_M,
    INTERVAL_KEYS,
    PHASES,
    ROLES,
    SHARED_PER_CTA,
    SHARED_PER_SM,
    Fa3Config,
    interval_problems,
    tile_masks,
    tile_steps,
)
from flashscope.simulator.timing.fa3_sm import SM, Costs, Tile
from flashscope.simulator.timing.occupancy import pv_columns, qk_columns

ALGO = "fa3"
DTYPES = ("fp16", "bf16", "fp8")
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1}
SOFTMAX_OPS = 4  # FP32 operations per score beside its exp2: max, scale-and-subtract, sum, cvt
MASK_OPS = 3  # the former estimate of a masked step's extra work per score (now `Fa3Terms`)
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
    H100; "the timelines" below) and fitted on the fit half of the measured rows together with
    the timelines' phase lengths (`simulator/calibrate/fa3_fit.py`; the split is
    `fa3_rows.held_out`; "the rows" are benchmarks/results/hopper-forward-*.json and the
    variants of warpgroups-*.json). Each term and what supports it:

    tensor: share of the datasheet tensor rate one product runs at. A lone S = QKᵀ of the plain
        loop records 276 ns for 2.1 MFLOP at d = 128 and 151 ns for 1.05 MFLOP at d = 64 (280
        and 140 ns at the datasheet rate); fitted with the issue and drain around it: 0.82.
    mma_latency_ns: from a product's last work to its completion being seen (wgmma wait);
        fitted (42 ns): the timelines' stamps resolve ~20 ns.
    softmax_ops_per_clk: FP32 operations per SM clock for the softmax (SOFTMAX_OPS per score,
        `mask_ops` more on a masked step, the rescale's one per element of O), shared by the
        softmaxes running at once; fitted: 64.6 per clock.
    kv_latency_ns, copy_gbs: a K or V copy takes its bytes at `copy_gbs` per SM, shared by the
        copies in flight, then `kv_latency_ns` to its barrier. A program waits for its O store
        before its next one and at its end (`tma.store_wait`, `cp.async.bulk.wait_group.read`:
        until the copy engine has read O out of shared memory), charged the same latency: a
        CTA per tile pays it once a tile, a persistent program once. The H100 measured 0.7-2.6
        µs more per CTA for one CTA per tile than for persistent programs of the same tiles,
        with its SMs 95-98% occupied and 1-6% more instructions
        (benchmarks/results/cta-start-*.json); whether that time goes to this wait or to the
        CTA's start is not measured, and a start latency offered to the fit beside it stays
        at 0. The plain loop's copies at d = 128 record 3.0–3.1 µs from issue to the consumer
        with three in flight, ping-pong's 1.3–1.7 µs with two; one warpgroup alone per SM
        (block_n 64, three stages at d = 128: 131,436 bytes of shared memory, one CTA) takes
        1.14 ms on the H100 for 4 × 16 × 4096
        (hopper-forward-NVIDIA-H100-80GB-HBM3-2026-11-22.json), ≈ 550 ns per block of 32 KB of
        K and V; fitted: 143 B/ns and 537 ns.
    softmax_ns: a softmax's own latency beside its work (its row reductions' shuffles), on no
        shared unit. Per 64 keys the rows' slopes in N measure 940–965 ns with 64-key blocks
        at d = 128 ([2, 64, 3, 1, 1]) against 808–836 ns with 128-key ones ([2, 128, 2, 1, 1]):
        a cost per block, not per key; fitted: 46 ns.
    barrier_ns: a consumer's wait on an mbarrier however early the arrival: the timelines' V
        waits record 69–119 ns per block where V had landed before (pipelined and ping-pong at
        d = 128: 69–76 ns), the turns 62–102 ns; fitted: 65 ns.
    mma_drag: share of the SFU's and FP32 units' rate lost while products run on the SM (the
        products' operands and accumulators pass through the same register files). The
        timelines' ping-pong softmax at d = 128 records 832–850 ns per block with the tensor
        cores busy through most of it, the plain loop's 698 ns with its rescale and with none
        of its own products beside it; fitted: 0.61.
    mask_ops: FP32 operations more per score on a masked step (the column and row indices, the
        compare, the select, the scale no longer folded into the exponent's operand), on the
        softmax's units. The causal timelines' last block, the only masked one of their first
        tile, records a softmax of 1647 ns in the plain loop at d = 128 against 699 ns for an
        unmasked block, and 1590 ns against 850 under ping-pong: about a microsecond more,
        where three operations a score gave 410–430 ns more; Nsight Compute counts a causal
        launch's instructions at 0.79-0.80 of the full one's for 0.53-0.56 of its key blocks
        (N = 1024, d = 64 and 128, cta-start-*.json: a masked step about twice an unmasked
        one's). Fitted with that block's softmax in the fit's loss (`fa3_fit.CAUSAL_PHASES`):
        5.6.
    blocking_issue: a product's issue returns once the product has the tensor cores. The plain
        loop at d = 128 (the timelines, block 10): both warpgroups wait for the same K; the
        first's S is issued as K lands and done 276 ns later, the second's issue returns only
        then (314 ns after K) and its S is done 277 ns after that.
    """

    tensor: float = 0.8199272052785701
    mma_latency_ns: float = 41.944236212332974
    softmax_ops_per_clk: float = 64.61814018360957
    kv_latency_ns: float = 536.8306405742493
    copy_gbs: float = 143.2151079077043
    softmax_ns: float = 46.26476076890024
    barrier_ns: float = 64.94662359087079
    mma_drag: float = 0.6111056738981667
    mask_ops: float = 5.598091441851832
    blocking_issue: bool = True


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
    # on chip the tiles are the padded width wide; S = Q Kᵀ runs over `qk_columns` of them,
    # P V and O's accumulator over `pv_columns`
    d_qk, d_pv = qk_columns(d), pv_columns(d)
    elem = ELEMENT_BYTES[dtype]
    tensor = gpu.tensor_flops("fp16") * (2 if dtype == "fp8" else 1) * terms.tensor / gpu.sms / 1e9
    sfu = gpu.sfu_per_clk * gpu.clock_ghz * eff.sfu  # exp2 per ns per SM
    fp32 = terms.softmax_ops_per_clk * gpu.clock_ghz  # FP32 operations per ns per SM
    ops = (SOFTMAX_OPS + (FP8_OPS if dtype == "fp8" else 0)) * BLOCK_M * bn
    scale = 4 if dtype == "fp8" else 0  # one fp32 scale per block
    return Costs(
        qk=2 * BLOCK_M * bn * d_qk / tensor,
        pv=2 * BLOCK_M * bn * d_pv / tensor,
        exp=BLOCK_M * (bn + 1) / sfu,
        alu=ops / fp32,
        epilogue=(2 * BLOCK_M * d_pv + 4 * BLOCK_M) / fp32,
        q_bytes=BLOCK_M * d * elem + scale,
        kv_bytes=bn * d * elem + scale,
        o_bytes=BLOCK_M * d * 2,
        copy_rate=terms.copy_gbs,
        mma_latency=terms.mma_latency_ns,
        copy_latency=terms.kv_latency_ns,
        q_latency=eff.dram_latency_ns,
        rescale=BLOCK_M * d_pv / fp32,
        mask_alu=terms.mask_ops * BLOCK_M * bn / fp32,
        softmax_ns=terms.softmax_ns,
        blocking_issue=terms.blocking_issue,
        barrier_ns=terms.barrier_ns,
        mma_drag=terms.mma_drag,
        under_pv=cfg.softmax_under_pv(d),
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
def _sm_time(c: Costs, cfg: Fa3Config, tiles: tuple[Tile, ...], resident: int) -> float:
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


def _linear(
    c: Costs, cfg: Fa3Config, n_max: int, tiles: int, resident: int, masked: bool, half: bool
) -> np.ndarray:
    """(a, b, m, h): `tiles` consecutive tiles of n blocks, k of them masked, the last a half
    step or not (h), take a + b·n + m·k + h·half, from a few short runs of the SM."""
    hi = min(n_max, FIT_BLOCKS)
    lo = max(1, hi // 2)

    def run(n: int, k: int = 0, h: int = 0) -> float:
        return _sm_time(c, cfg, ((n, k, h),) * tiles, resident)

    t_hi = run(hi)
    b = (t_hi - run(lo)) / (hi - lo) if hi > lo else 0.0
    k = min(hi, 2)
    m = (run(hi, k) - t_hi) / k if masked else 0.0
    h = run(hi, 1, 1) - run(hi, 1) if half else 0.0
    return np.array([t_hi - b * hi, b, m, h])


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
    masked, half = tile_masks(cfg, rows, problem.seq_q, problem.seq_k, problem.causal)
    shape = np.stack([np.ones(n_tiles), steps, masked, half])  # (4, tiles)
    n_max, any_masked, any_half = int(steps.max()), bool(masked.any()), bool(half.any())
    tile_fit = _linear(c, cfg, n_max, 1, resident, any_masked, any_half)
    tile_cost = tile_fit @ shape
    if cfg.persistent:
        # a tile after another in the same program
        further = _linear(c, cfg, n_max, 2, resident, any_masked, any_half) @ shape - tile_cost
        if problem.causal and cfg.scheduled:
            host = fa3_grid.host_costs(steps, half)
            busy_program = fa3_grid.scheduled_busy(tile_cost, further, host, programs)
            share = fa3_grid.owners(host, programs, count=programs * shown_tiles)
        else:
            share = np.arange(n_tiles) % programs
            busy_program = np.bincount(share, weights=further, minlength=programs)
            busy_program[: min(programs, n_tiles)] += (tile_cost - further)[:programs]
        busy_slot: np.ndarray = np.bincount(np.arange(programs) % slots, weights=busy_program)
        order = [np.flatnonzero(share == program).astype(np.int64)]
    else:
        busy_slot = fa3_grid.first_free(tile_cost, slots, eff.cta_dispatch_ns)
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

    shown = [(int(steps[t]), int(masked[t]), int(half[t])) for t in order[0][:shown_tiles].tolist()]
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
        tile_ns=(float(tile_fit[0]), float(tile_fit[1])),
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
