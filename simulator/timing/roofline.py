"""Roofline floors: no kernel beats its FLOPs at peak nor its compulsory bytes at peak bandwidth.

Compulsory bytes are what any implementation must move between DRAM and the chip: each input
read once and each output written once. Forward (fa2, fa1, naive, decode): Q, K, V and O; query
rows that see no key under a causal mask (seq_q > seq_k) need not be read. Backward (fa2-bwd):
Q, K, V, O, dO and the fp32 LSE read, dQ, dK and dV written (O, dO and dQ for every row).
K, V, dK and dV are per kv head.
Peaks are the datasheet figures, without efficiencies, so the floors are hard lower bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from flashscope.simulator.core.hardware import GPU
from flashscope.simulator.core.problem import STATS_BYTES, AttentionProblem


@dataclass(frozen=True)
class Floors:
    """Lower bounds on the time of one algorithm on one GPU (seconds) and where they come from."""

    tensor_s: float  # tensor FLOPs / dense tensor peak
    sfu_s: float  # exponentials / SFU peak
    memory_s: float  # compulsory bytes / DRAM peak
    compulsory_bytes: int
    flops: int
    peak_flops: float
    peak_bandwidth: float

    @property
    def floor_s(self) -> float:
        return max(self.tensor_s, self.sfu_s, self.memory_s)

    @property
    def bound(self) -> str:
        """Which floor is highest: "compute", "sfu" or "memory"."""
        pairs = {"compute": self.tensor_s, "sfu": self.sfu_s, "memory": self.memory_s}
        return max(pairs, key=pairs.__getitem__)

    @property
    def intensity(self) -> float:
        """FLOPs per compulsory byte."""
        return self.flops / self.compulsory_bytes if self.compulsory_bytes else 0.0

    @property
    def ridge(self) -> float:
        """The intensity above which the GPU is compute-bound."""
        return self.peak_flops / self.peak_bandwidth


def compulsory_bytes(algo: str, p: AttentionProblem) -> int:
    e, d = p.dtype_bytes, p.head_dim
    q_rows = min(p.seq_q, p.seq_k) if p.causal else p.seq_q
    per_q_head = p.batch * p.heads * d * e
    per_kv_head = p.batch * p.kv_heads * p.seq_k * d * e
    if algo == "fa2-bwd":
        lse = p.batch * p.heads * q_rows * STATS_BYTES
        return per_q_head * (q_rows + 3 * p.seq_q) + 4 * per_kv_head + lse
    return per_q_head * (q_rows + p.seq_q) + 2 * per_kv_head


def floors(algo: str, p: AttentionProblem, gpu: GPU, flops: int, exps: int) -> Floors:
    peak = gpu.tensor_flops(p.dtype)
    nbytes = compulsory_bytes(algo, p)
    return Floors(
        tensor_s=flops / peak,
        sfu_s=exps / gpu.sfu_exps,
        memory_s=nbytes / gpu.hbm_bytes_per_s,
        compulsory_bytes=nbytes,
        flops=flops,
        peak_flops=peak,
        peak_bandwidth=gpu.hbm_bytes_per_s,
    )
