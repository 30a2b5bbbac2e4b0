"""The GPU types of the timing engine: datasheet figures (`GPU`) and measured efficiencies.

A `GPU` holds what a vendor publishes (SMs, clock, tensor and FP32 peaks, memory sizes and
bandwidths, per-SM limits). An `Efficiency` holds what only measurement can tell: the fraction
of each peak a real kernel reaches, latencies, launch overhead and a few structural parameters
of the engine's model. The presets are in `simulator/core/hardware.py`; calibration files
(`simulator/core/calibration.py`) replace a preset's efficiencies with fitted ones.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

# MUFU (special-function unit) throughput for exp2 on compute capability 8.0–9.0: 16 results
# per clock per SM, 4 in each of its 4 partitions (CUDA C++ Programming Guide, "Arithmetic
# Instructions" throughput table). On an H100 SXM that is 16 × 132 SMs × 1.83 GHz = 3.9 T exp2/s,
# the "3.9 TFLOPS of special functions" the FlashAttention-3 paper (Shah et al., 2024) sets against
# 989 TFLOP/s of fp16 matrix products; the FA-3 model (simulator/timing/fa3.py) charges every
# exponential of the softmax at this rate times `Efficiency.sfu`.
SFU_PER_CLK = 16
# At most one copy of a line per L2 partition; no GPU here has more than two.
MAX_SHARED_COPIES = 2.0


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of the peaks and the fitted behaviour of one GPU.

    Fractions are in (0, 1]. Times are in microseconds or nanoseconds as named. Calibration
    fits these from micro-benchmarks (kernels/microbench.py) and FlashAttention timings.
    """

    tensor: float = 0.70  # of dense fp16/bf16 tensor peak (cuBLAS-class large matmul)
    hbm: float = 0.90  # of HBM bandwidth (device-to-device copy, read + write)
    l2: float = 0.90  # of L2 → SM bandwidth
    sfu: float = 0.90  # of the exp2 (MUFU) rate
    fp32: float = 0.80  # of FP32 (non-tensor) rate, for the softmax arithmetic
    launch_us: float = 3.0  # gap a kernel launch adds between back-to-back kernels
    cta_setup_ns: float = 300.0  # fixed cost of starting one CTA (prologue, index math)
    # Measured, not fitted (the forward's recorded schedules on an H100 and an H200,
    # benchmarks/timeline.py; medians 0.22-0.29 µs and 1.5-2.5 µs on both):
    cta_dispatch_ns: float = 250.0  # from a CTA's end to the next one's start in its slot
    cold_start_ns: float = 2000.0  # extra time of a launch's first CTAs (all start at once)
    l2_latency_ns: float = 200.0  # load latency of an L2 hit
    dram_latency_ns: float = 600.0  # load latency of an L2 miss
    overlap: float = 0.3  # share of the non-dominant compute (tensor/SFU/FP32) hidden
    warps_to_saturate: int = 8  # resident warps an SM needs to keep its tensor cores busy
    l2_reuse_fraction: float = 0.8  # share of L2 capacity that holds reusable data (measured
    # where benchmarks/l2_reuse_probe.py ran: `flashscope calibrate --l2-probe`)
    l2_reuse_exponent: float = 2.0  # hit chance = min(1, (capacity / reuse distance)^this)
    l2_shared_copies: float = 1.0  # room a line of a shared stream (read by CTAs all over the
    # GPU at once) takes in L2, against a line that one CTA reads: over 1 where the L2 is in
    # partitions that each cache for their own side's SMs (Hopper, Ampere), so such a line
    # can sit in both (simulator/timing/l2model.py)
    reg_overhead: int = 32  # registers per thread beyond the tiles (addresses, m, ℓ, loop)
    cta_overlap: float = 0.0  # of what one CTA leaves serial, hidden by other CTAs on its SM
    smem_feed: float = 0.0  # ρ: time shared memory takes to feed a product's B operand,
    # relative to the product's time on the tensor cores at the ceiling. A 64-row step N wide
    # reads N rows of B, and 64 rows of A too where A sits in shared memory (Hopper's wgmma
    # with both operands there): it runs at max(1, ρ·(1 + 64/N)) of the ceiling's time, or
    # max(1, ρ) with A in registers (engine.mma_factor; the PTX says which)
    spill_penalty: float = 0.0  # loop slowdown of a CTA whose registers spill (0.5: 1.5×)
    spill_l1_miss: float = 0.15  # share of spill reloads that miss L1 and go to L2 (the
    # stores all do); the kernels' local bytes themselves are measured (compiled.py)
    local_gbs: float = 0.0  # GB/s per SM at which L1 serves a CTA's local-memory (spill)
    # loads and stores, hits included: they pass the SM's load/store path whether or not
    # they reach L2 (engine._durations); 0: only their L2 bytes are charged
    wg_split: float = 0.0  # tensor-time surcharge per extra warpgroup splitting a product's
    # columns (more warps than the tile has 64-row slices: operands cross warpgroups via smem)
    l2_reduce: float = 1.0  # reduce-adds into L2 (atomics) move at this fraction of the L2 rate
    reduce_op_ns: float = 0.0  # warp time one bulk reduce-add costs its CTA beyond its
    # bytes (the tile's store to shared memory, a fence, a barrier, the issue: a tile half as
    # tall costs as much; engine._durations)
    bulk_read_ns: float = 200.0  # from issuing a bulk reduce-add until the copy engine has
    # read its tile out of shared memory, beyond the tile's transfer: what a CTA waits before
    # it may reuse that buffer (the wait is on the read, not on the L2's completion)
    lockstep: float = 0.0  # share of `overlap` lost by a CTA whose warpgroups split its rows
    # and share a two-buffer K/V ring (they cannot drift apart; engine.lockstep)
    lockstep_fill: float = 1.0  # with c CTAs on the SM, lockstep / c**this of it stays lost
    mma_chain_ns: float = 0.0  # latency each wait on matrix products adds to its warpgroup's
    # iteration beyond its work (Launch.chain waits, as the PTX has them; engine._durations)
    two_stage: float = 0.0  # share of `overlap` lost by any other CTA on a two-buffer ring: a
    # buffer is refilled only once the products reading it are done (engine.two_stage)
    # The power cap (engine._Rates.boost, engine._run_launch): a launch's power demand, relative
    # to the cap, is its tensor rate over `power_tflops` plus its L2 traffic over `power_l2_tbs`
    # (both at the boost clock); above 1 the clock falls to demand^-`power_exp` of the boost
    # clock (0: no cap modelled). Fitted from sustained against single-launch (Nsight) times.
    power_tflops: float = 1000.0  # tensor TFLOP/s that alone would reach the cap
    power_l2_tbs: float = 10.0  # L2 ↔ SM TB/s that alone would reach the cap
    power_exp: float = 0.0  # in [0, 1); about 1/3 where the voltage follows the clock
    # The host's share of a call (engine.host_time_s): a call takes at least what the host
    # spends issuing it, `host_launch_us` per kernel launch, `host_descriptor_us` per tensor
    # descriptor it makes for a launch (`Launch.host_descriptors`: Triton's launcher encodes
    # each for the copy engine at every call) plus `host_backward_us` for a backward
    # (autograd's bookkeeping and PyTorch's allocations around the kernels). Fitted on calls
    # timed whole (do_bench) whose kernels' own durations were far shorter; 0: the call is its
    # kernels.
    host_launch_us: float = 0.0
    host_descriptor_us: float = 0.0
    host_backward_us: float = 0.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{f.name} must be a finite number ≥ 0, got {value!r}")
        for name in ("tensor", "hbm", "l2", "sfu", "fp32", "l2_reuse_fraction", "l2_reduce"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be a fraction in (0, 1], got {value!r}")
        for name in ("overlap", "cta_overlap", "lockstep", "two_stage", "spill_l1_miss"):
            if getattr(self, name) > 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")
        if not isinstance(self.warps_to_saturate, int) or self.warps_to_saturate < 1:
            raise ValueError(
                f"warps_to_saturate must be an integer ≥ 1, got {self.warps_to_saturate}"
            )
        if not isinstance(self.reg_overhead, int) or self.reg_overhead > 255:
            raise ValueError(
                f"reg_overhead must be an integer in [0, 255], got {self.reg_overhead}"
            )
        if self.dram_latency_ns < self.l2_latency_ns:
            raise ValueError(
                f"dram_latency_ns ({self.dram_latency_ns:g}) must be ≥ l2_latency_ns "
                f"({self.l2_latency_ns:g}): a miss goes through L2 first"
            )
        if self.power_exp >= 1:
            raise ValueError(f"power_exp must be in [0, 1), got {self.power_exp}")
        for name in ("power_tflops", "power_l2_tbs"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.l2_reuse_exponent <= 0:
            raise ValueError(f"l2_reuse_exponent must be > 0, got {self.l2_reuse_exponent}")
        if not 1 <= self.l2_shared_copies <= MAX_SHARED_COPIES:
            raise ValueError(
                f"l2_shared_copies must be in [1, {MAX_SHARED_COPIES}], "
                f"got {self.l2_shared_copies!r}"
            )


@dataclass(frozen=True)
class GPU:
    """Datasheet figures of one GPU (dense peaks; 1 GB/s = 1e9 B/s; KiB/MiB are binary)."""

    key: str
    name: str
    sms: int
    clock_ghz: float  # SM clock the tensor peak below assumes
    tensor_tflops: float  # dense fp16/bf16 with fp32 accumulate; tf32 (fp32 inputs) is half
    fp32_tflops: float  # non-tensor FP32
    hbm_gbs: float  # DRAM bandwidth
    hbm_gb: float  # DRAM size
    l2_mib: float
    l2_gbs: float  # aggregate L2 → SM read bandwidth
    smem_per_sm_kib: int
    smem_per_block_kib: int
    regs_per_sm: int = 65536
    max_ctas_per_sm: int = 32
    max_warps_per_sm: int = 64
    sfu_per_clk: int = SFU_PER_CLK
    efficiency: Efficiency = field(default_factory=Efficiency)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name in ("key", "name", "efficiency"):
                continue
            value = getattr(self, f.name)
            if f.type in ("int",):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"{f.name} must be an integer ≥ 1, got {value!r}")
            elif (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"{f.name} must be a finite number > 0, got {value!r}")
        if self.smem_per_block_kib > self.smem_per_sm_kib:
            raise ValueError(
                f"smem_per_block_kib ({self.smem_per_block_kib}) cannot exceed "
                f"smem_per_sm_kib ({self.smem_per_sm_kib})"
            )
        if not isinstance(self.efficiency, Efficiency):
            raise ValueError("efficiency must be an Efficiency")

    # Derived rates (whole GPU unless named per SM).
    def tensor_flops(self, dtype: str = "fp16") -> float:
        """Dense tensor peak in FLOP/s; fp32 inputs run as TF32 at half the fp16 rate."""
        return self.tensor_tflops * 1e12 / (2 if dtype == "fp32" else 1)

    @property
    def sfu_exps(self) -> float:
        """exp2 results per second, whole GPU."""
        return self.sfu_per_clk * self.sms * self.clock_ghz * 1e9

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbs * 1e9

    @property
    def l2_bytes(self) -> int:
        return int(self.l2_mib * 2**20)

    @property
    def smem_per_sm(self) -> int:
        return self.smem_per_sm_kib * 1024

    @property
    def smem_per_block(self) -> int:
        return self.smem_per_block_kib * 1024

    @property
    def launch_us(self) -> float:
        """Kernel launch overhead (fitted, so it lives in the efficiencies)."""
        return self.efficiency.launch_us

    def specs(self) -> dict[str, Any]:
        """Every field as plain JSON-ready values, efficiencies nested."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["efficiency"] = dataclasses.asdict(self.efficiency)
        return out


GPU_FIELDS = tuple(
    f.name for f in dataclasses.fields(GPU) if f.name not in ("key", "name", "efficiency")
)
EFFICIENCY_FIELDS = tuple(f.name for f in dataclasses.fields(Efficiency))
