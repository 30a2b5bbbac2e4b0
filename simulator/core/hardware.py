"""GPU specifications for the timing engine: frozen datasheet figures plus fitted efficiencies.

A `GPU` holds what a vendor publishes (SMs, clock, tensor and FP32 peaks, memory sizes and
bandwidths, per-SM limits). An `Efficiency` holds what only measurement can tell: the fraction
of each peak a real kernel reaches, latencies, launch overhead and a few structural parameters
of the engine's model. Presets ship with default efficiencies (measured ceilings where the
project has them, estimates elsewhere, each marked); `simulator/core/calibration.py` overwrites them
from `simulator/data/calibration-<key>.json` when such a file exists.

    from_name("h100")                          # H100 SXM, calibrated if a file exists
    custom("h100", smem_per_sm_kib=456, smem_per_block_kib=455)   # "what if SRAM doubled"
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from flashscope.simulator.core.calibration import apply_calibration
from flashscope.simulator.core.gpu import (
    EFFICIENCY_FIELDS,
    GPU,
    GPU_FIELDS,
    MAX_SHARED_COPIES,
    SFU_PER_CLK,
    Efficiency,
)

__all__ = [
    "ALIASES",
    "EFFICIENCY_FIELDS",
    "GPU",
    "GPU_FIELDS",
    "MAX_SHARED_COPIES",
    "PRESETS",
    "SFU_PER_CLK",
    "Efficiency",
    "change_bounds",
    "check_change",
    "custom",
    "from_name",
    "names",
    "resolve",
]


def _gpu(**kw: Any) -> GPU:
    eff = kw.pop("efficiency", {})
    return GPU(efficiency=Efficiency(**eff), **kw)


# Sources: NVIDIA datasheets and architecture whitepapers (H100 Tensor Core GPU datasheet and
# "NVIDIA H100 Tensor Core GPU Architecture"; H200 datasheet; A100 80GB datasheet and "NVIDIA
# A100 Tensor Core GPU Architecture"; L40S datasheet; "NVIDIA Ada GPU Architecture" for the RTX
# 4090), and the CUDA C++ Programming Guide's per-compute-capability limits (shared memory, CTAs
# and warps per SM). Tensor peaks are the dense (no sparsity) figures. The clock is the one the
# tensor peak implies (peak / (SMs × dense FLOP per clock per SM)). L2 bandwidth is never on a
# datasheet: those figures are estimates from published micro-benchmarks (Chips and Cheese,
# 2023, H100 PCIe and RTX 4090 L2 tests), to be replaced by kernels/microbench.l2_read.
PRESETS: dict[str, GPU] = {
    "h100-sxm": _gpu(
        key="h100-sxm",
        name="NVIDIA H100 SXM5 80GB",
        sms=132,  # whitepaper
        clock_ghz=1.83,  # 989.4 TFLOP/s = 132 SMs × 4096 FLOP/clk × 1.83 GHz (whitepaper)
        tensor_tflops=989.4,  # datasheet: 1,979 with sparsity
        fp32_tflops=66.9,  # datasheet
        hbm_gbs=3350,  # datasheet: HBM3, 3.35 TB/s
        hbm_gb=80,  # datasheet
        l2_mib=50,  # whitepaper; torch reports 52,428,800 B (shared/anchors)
        l2_gbs=7500,  # estimate (scaled from the H100 PCIe measurement by SMs × clock)
        smem_per_sm_kib=228,  # programming guide, CC 9.0
        smem_per_block_kib=227,  # programming guide, CC 9.0 (opt-in maximum)
        max_ctas_per_sm=32,
        max_warps_per_sm=64,
        efficiency={
            "tensor": 710 / 989.4,  # measured fp16 matmul ceiling, 710 TFLOP/s (anchors)
            "hbm": 3020 / 3350,  # measured d2d copy, 3.02 TB/s read + write (anchors)
            "launch_us": 2.5,  # estimate
        },
    ),
    "h100-pcie": _gpu(
        key="h100-pcie",
        name="NVIDIA H100 PCIe 80GB",
        sms=114,  # whitepaper
        clock_ghz=1.62,  # 756 TFLOP/s / (114 × 4096 FLOP/clk)
        tensor_tflops=756,  # datasheet: 1,513 with sparsity
        fp32_tflops=51.2,  # datasheet
        hbm_gbs=2000,  # datasheet: HBM2e, 2 TB/s
        hbm_gb=80,
        l2_mib=50,  # whitepaper
        l2_gbs=5500,  # estimate (Chips and Cheese, H100 PCIe L2 bandwidth test)
        smem_per_sm_kib=228,
        smem_per_block_kib=227,
        efficiency={"tensor": 0.70, "hbm": 0.88},  # estimates, by analogy with the SXM part
    ),
    "h200": _gpu(
        key="h200",
        name="NVIDIA H200 SXM 141GB",
        sms=132,  # same GH100 configuration as H100 SXM (datasheet compute figures equal)
        clock_ghz=1.83,
        tensor_tflops=989.4,  # datasheet: 1,979 with sparsity
        fp32_tflops=66.9,  # datasheet
        hbm_gbs=4800,  # datasheet: HBM3e, 4.8 TB/s
        hbm_gb=141,  # datasheet
        l2_mib=60,  # torch reports 62,914,560 B on the measured H200 (shared/anchors)
        l2_gbs=7500,  # estimate, as H100 SXM
        smem_per_sm_kib=228,
        smem_per_block_kib=227,
        efficiency={
            "tensor": 680 / 989.4,  # measured fp16 matmul ceiling, 680 TFLOP/s (anchors)
            "hbm": 4270 / 4800,  # measured d2d copy, 4.27 TB/s read + write (anchors)
            "launch_us": 2.5,  # estimate
        },
    ),
    "a100-80gb": _gpu(
        key="a100-80gb",
        name="NVIDIA A100 SXM4 80GB",
        sms=108,  # whitepaper
        clock_ghz=1.41,  # datasheet boost; 312 TFLOP/s = 108 × 2048 FLOP/clk × 1.41 GHz
        tensor_tflops=312,  # datasheet: 624 with sparsity
        fp32_tflops=19.5,  # datasheet
        hbm_gbs=2039,  # datasheet: HBM2e
        hbm_gb=80,
        l2_mib=40,  # whitepaper
        l2_gbs=4800,  # estimate (about 2.3× V100's L2 bandwidth, whitepaper's ratio)
        smem_per_sm_kib=164,  # programming guide, CC 8.0
        smem_per_block_kib=163,
        efficiency={"tensor": 0.80, "hbm": 0.90, "l2_latency_ns": 230.0, "dram_latency_ns": 650.0},
    ),
    "l40s": _gpu(
        key="l40s",
        name="NVIDIA L40S 48GB",
        sms=142,  # datasheet: 142 RT cores, one per SM
        clock_ghz=2.52,  # datasheet boost
        tensor_tflops=362.05,  # datasheet (fp32 accumulate): 733 with sparsity
        fp32_tflops=91.6,  # datasheet
        hbm_gbs=864,  # datasheet: GDDR6
        hbm_gb=48,
        l2_mib=96,  # Ada whitepaper (AD102 full L2)
        l2_gbs=5000,  # estimate (Chips and Cheese RTX 4090 L2 test, same die)
        smem_per_sm_kib=100,  # programming guide, CC 8.9
        smem_per_block_kib=99,
        max_ctas_per_sm=24,
        max_warps_per_sm=48,
        efficiency={"tensor": 0.75, "hbm": 0.85, "launch_us": 3.5, "dram_latency_ns": 700.0},
    ),
    "rtx-4090": _gpu(
        key="rtx-4090",
        name="NVIDIA GeForce RTX 4090 24GB",
        sms=128,  # Ada whitepaper
        clock_ghz=2.52,  # Ada whitepaper boost
        tensor_tflops=165.2,  # Ada whitepaper, fp16 with fp32 accumulate (330.3 with fp16 acc)
        fp32_tflops=82.6,  # Ada whitepaper
        hbm_gbs=1008,  # Ada whitepaper: GDDR6X
        hbm_gb=24,
        l2_mib=72,  # Ada whitepaper
        l2_gbs=5000,  # estimate (Chips and Cheese RTX 4090 L2 test)
        smem_per_sm_kib=100,
        smem_per_block_kib=99,
        max_ctas_per_sm=24,
        max_warps_per_sm=48,
        efficiency={"tensor": 0.85, "hbm": 0.85, "launch_us": 3.5, "dram_latency_ns": 700.0},
    ),
}

ALIASES: dict[str, str] = {
    "h100": "h100-sxm",
    "h100sxm": "h100-sxm",
    "h100sxm5": "h100-sxm",
    "h10080gbhbm3": "h100-sxm",
    "h100pcie": "h100-pcie",
    "h200": "h200",
    "h200sxm": "h200",
    "a100": "a100-80gb",
    "a10080gb": "a100-80gb",
    "a100sxm": "a100-80gb",
    "l40s": "l40s",
    "4090": "rtx-4090",
    "rtx4090": "rtx-4090",
    "geforcertx4090": "rtx-4090",
}


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum()).removeprefix("nvidia")


def names() -> list[str]:
    """Preset keys, in the order the presets are listed."""
    return list(PRESETS)


def resolve(name: str) -> str:
    """The preset key a friendly name stands for (`h100` → `h100-sxm`); ValueError if none."""
    if not isinstance(name, str):
        raise ValueError(f"gpu must be a name, got {name!r}")
    n = _norm(name)
    for key in PRESETS:
        if _norm(key) == n:
            return key
    if n in ALIASES:
        return ALIASES[n]
    raise ValueError(f"unknown gpu {name!r}; choose one of {', '.join(PRESETS)}")


def from_name(name: str, calibrated: bool = True) -> GPU:
    """The preset for `name`, with its calibration file applied when one exists."""
    gpu = PRESETS[resolve(name)]
    if calibrated:
        gpu = apply_calibration(gpu)
    return gpu


# How far a what-if GPU may move from its preset, at the boundaries that take changes from people
# (POST /api/simulate, `flashscope simulate --set`): within the range the engine's model is meant
# for, so that no change makes it divide by zero or overflow. Datasheet figures and the positive
# scales among the efficiencies (times and power budgets) stay within `factor`× of the preset's;
# the other efficiencies have fixed bounds: fractions of a peak, shares, exponents, counts, and
# effects whose natural value is 0. `custom` itself takes any valid GPU (tests and fits need
# more room).
SCALED_EFFICIENCIES = (
    "launch_us",
    "cta_setup_ns",
    "cta_dispatch_ns",
    "cold_start_ns",
    "l2_latency_ns",
    "dram_latency_ns",
    "bulk_read_ns",
    "power_tflops",
    "power_l2_tbs",
)
_FRACTION, _SHARE = (0.01, 1.0), (0.0, 1.0)
EFFICIENCY_BOUNDS: dict[str, tuple[float, float]] = {
    **dict.fromkeys(("tensor", "hbm", "l2", "sfu", "fp32", "l2_reuse_fraction"), _FRACTION),
    "l2_reduce": _FRACTION,
    **dict.fromkeys(("overlap", "cta_overlap", "lockstep", "two_stage", "spill_l1_miss"), _SHARE),
    "warps_to_saturate": (1, 64),
    "reg_overhead": (0, 255),
    "l2_reuse_exponent": (0.1, 10.0),
    "l2_shared_copies": (1.0, MAX_SHARED_COPIES),
    "smem_feed": (0.0, 8.0),
    "spill_penalty": (0.0, 16.0),
    "wg_split": (0.0, 4.0),
    "lockstep_fill": (0.0, 8.0),
    "reduce_op_ns": (0.0, 1e5),
    "mma_chain_ns": (0.0, 1e5),
    "power_exp": (0.0, 0.9),
    "local_gbs": (0.0, 1e4),
    "host_launch_us": (0.0, 1e4),
    "host_descriptor_us": (0.0, 1e4),
    "host_backward_us": (0.0, 1e4),
}


def change_bounds(gpu: GPU, name: str, factor: float) -> tuple[float, float]:
    """[low, high] a changed value of field `name` must lie in, for a GPU like `gpu`."""
    if name in EFFICIENCY_BOUNDS:
        return EFFICIENCY_BOUNDS[name]
    if name in GPU_FIELDS:
        preset = float(getattr(gpu, name))
    elif name in SCALED_EFFICIENCIES:
        preset = float(getattr(gpu.efficiency, name))
    else:
        fields = ", ".join(GPU_FIELDS + EFFICIENCY_FIELDS)
        raise ValueError(f"unknown hardware field {name!r}; fields: {fields}")
    return preset / factor, preset * factor


def check_change(gpu: GPU, name: str, value: object, factor: float) -> str | None:
    """Why `value` is refused for field `name` of a GPU like `gpu`, or None when it is in range."""
    lo, hi = change_bounds(gpu, name, factor)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{name} must be a number, got {value!r}"
    if not lo <= value <= hi:  # NaN fails too
        if name in EFFICIENCY_BOUNDS:
            return f"{name} must be from {lo:g} to {hi:g}, got {value!r}"
        return (
            f"{name} must stay within {factor:g}× of the preset's {lo * factor:g} "
            f"(from {lo:g} to {hi:g}), got {value!r}"
        )
    return None


# Whole-GPU rates that grow with the SM count and the clock when `custom` changes them.
PER_SM_SCALED = ("tensor_tflops", "fp32_tflops", "l2_gbs")


def custom(base: GPU | str, **changes: object) -> GPU:
    """A GPU like `base` with some fields changed (GPU or Efficiency fields, by name).

    `custom("h100", smem_per_sm_kib=456, smem_per_block_kib=455)` asks what twice the shared
    memory would do; `custom("h200", tensor=0.8)` changes an efficiency. Changing `sms` or
    `clock_ghz` scales the whole-GPU tensor, FP32 and L2 rates with them (unless those are given
    too; per-SM units stay as they are); DRAM bandwidth is off-chip and stays. Unknown names and
    invalid values raise ValueError naming the field.
    """
    gpu = from_name(base) if isinstance(base, str) else base
    gpu_changes: dict[str, Any] = {}
    eff_changes: dict[str, Any] = {}
    for name, value in changes.items():
        if name in EFFICIENCY_FIELDS:
            eff_changes[name] = value
        elif name in GPU_FIELDS:
            gpu_changes[name] = value
        else:
            fields = ", ".join(GPU_FIELDS + EFFICIENCY_FIELDS)
            raise ValueError(f"unknown hardware field {name!r}; fields: {fields}")
    # More SMs bring their own tensor cores, FP32 units and L2 ports; a faster clock speeds all
    # of them up alike. Invalid values are left for GPU's own checks to refuse.
    factor = 1.0
    sms, clock = gpu_changes.get("sms"), gpu_changes.get("clock_ghz")
    if isinstance(sms, int) and not isinstance(sms, bool) and sms >= 1:
        factor *= sms / gpu.sms
    if (
        isinstance(clock, int | float)
        and not isinstance(clock, bool)
        and math.isfinite(clock)
        and clock > 0
    ):
        factor *= clock / gpu.clock_ghz
    if factor != 1.0:
        for name in PER_SM_SCALED:
            gpu_changes.setdefault(name, getattr(gpu, name) * factor)
    eff = dataclasses.replace(gpu.efficiency, **eff_changes) if eff_changes else gpu.efficiency
    if not changes:
        return gpu
    key = gpu.key if gpu.key.endswith("+custom") else f"{gpu.key}+custom"
    name = gpu.name if gpu.name.endswith("(custom)") else f"{gpu.name} (custom)"
    return dataclasses.replace(gpu, key=key, name=name, efficiency=eff, **gpu_changes)
