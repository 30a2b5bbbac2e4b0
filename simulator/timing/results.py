"""What the engine returns: per-kernel timelines and totals, and the whole run's figures.

Times are seconds from the start of the run (the first launch). Byte counts are bytes. The
breakdown splits each kernel's time among the limiters below; the shares of a run sum to 1.

    tensor   tensor-core matmul work was the binding resource
    sfu      exponentials on the special-function units
    alu      the softmax's other arithmetic on the FP32 cores
    memory   moving bytes: L2 → SM bandwidth inside a CTA, and DRAM bandwidth shared by all
    latency  waiting: load latency the pipeline does not hide, CTA start-up, and too few
             resident warps to keep the tensor cores busy
    launch   kernel launch overhead
    tail     SMs idle while others finish: the last partial wave and uneven CTAs (causal)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from flashscope.simulator.core.hardware import GPU
from flashscope.simulator.timing.occupancy import Occupancy
from flashscope.simulator.timing.roofline import Floors
from flashscope.simulator.timing.scheduler import coresidency
from flashscope.simulator.timing.workload import Workload

LIMITERS = ("tensor", "sfu", "alu", "memory", "latency", "launch", "tail")


@dataclass(frozen=True, eq=False)
class KernelResult:
    """One launch as simulated."""

    name: str
    grid: tuple[int, ...]
    occupancy: Occupancy
    waves: float  # CTAs / (SMs × CTAs per SM)
    offset_s: float  # when the launch begins (its launch gap comes first)
    time_s: float  # launch gap + the span of its CTAs
    sm: np.ndarray  # (n,) SM each CTA ran on
    start: np.ndarray  # (n,) seconds from the run's start
    end: np.ndarray  # (n,)
    dram_read_bytes: float
    dram_write_bytes: float
    l2_read_bytes: float
    l2_write_bytes: float
    counts: dict[str, int]  # the counting convention's totals (elements, FLOPs, exps)
    breakdown: dict[str, float]  # seconds by limiter; sums to time_s
    end_s: float = 0.0  # when its last CTA ends (seconds from the run's start)
    share: float = 1.0  # of time_s that adds to the run's (< 1 beside a concurrent kernel)
    clock: float = 1.0  # share of the boost clock it sustains (< 1: held at the power cap)
    spill_l2_bytes: float = 0.0  # of l2_read/write_bytes: register spills (compiled.py)
    spill_dram_bytes: float = 0.0  # of dram_write_bytes: spilled lines written back
    l2_dirty_bytes: float = 0.0  # written, still in L2 at its end: not yet DRAM (engine)

    @property
    def n_ctas(self) -> int:
        return len(self.start)

    @functools.cached_property
    def coresidency(self) -> np.ndarray:
        """(n,) mean CTAs sharing the SM with each CTA (itself included): computed when asked
        (no figure of a run needs it)."""
        return coresidency(self.start, self.end, self.sm)

    @property
    def ctas_per_sm(self) -> int:
        return self.occupancy.ctas_per_sm


@dataclass(frozen=True, eq=False)
class SimResult:
    """A simulated run of one algorithm: its kernels in order and the totals."""

    gpu: GPU
    workload: Workload
    kernels: tuple[KernelResult, ...]
    floors: Floors

    @property
    def algo(self) -> str:
        return self.workload.algo

    @property
    def time_s(self) -> float:
        """Until the last kernel ends (concurrent kernels overlap)."""
        return max((k.end_s for k in self.kernels), default=0.0)

    def _sum(self, name: str) -> float:
        return float(sum(getattr(k, name) for k in self.kernels))

    @property
    def dram_read_bytes(self) -> float:
        return self._sum("dram_read_bytes")

    @property
    def dram_write_bytes(self) -> float:
        return self._sum("dram_write_bytes")

    @property
    def l2_read_bytes(self) -> float:
        return self._sum("l2_read_bytes")

    @property
    def l2_write_bytes(self) -> float:
        return self._sum("l2_write_bytes")

    @property
    def l2_bytes(self) -> float:
        return self.l2_read_bytes + self.l2_write_bytes

    @property
    def flops(self) -> int:
        return sum(k.counts["flops"] for k in self.kernels)

    @property
    def tflops(self) -> float:
        """Useful TFLOP/s in the papers' convention (comparable with measured figures)."""
        return self.workload.useful_flops / self.time_s / 1e12

    @property
    def tflops_executed(self) -> float:
        """Tensor FLOPs the kernels execute (masked elements of visible tiles included)."""
        return self.flops / self.time_s / 1e12

    @property
    def main(self) -> KernelResult:
        """The kernel that takes longest (its waves and occupancy describe the run)."""
        return max(self.kernels, key=lambda k: k.time_s)

    @property
    def breakdown(self) -> dict[str, float]:
        """Seconds by limiter; concurrent kernels count in proportion to their shares."""
        return {lim: sum(k.breakdown[lim] * k.share for k in self.kernels) for lim in LIMITERS}

    @property
    def limiter(self) -> dict[str, float]:
        """Shares of the total time by limiter; they sum to 1."""
        total = self.time_s
        return {lim: v / total for lim, v in self.breakdown.items()}
