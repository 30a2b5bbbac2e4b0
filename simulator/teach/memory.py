"""Peak device memory of one attention forward call: naive attention against FlashAttention.

Bytes, for the whole problem (batch × heads). Q is (B, H, Nq, d); K and V are (B, H_kv, Nk, d).

naive   an eager framework runs three kernels and keeps what the next one needs:
            kernel 1 writes S (B·H·Nq·Nk);  kernel 2 reads S and writes P (S is freed only once
            the softmax returns);  kernel 3 reads P and V and writes O.
        Beyond the inputs, the live set peaks at max(S + P, P + O) — S + P whenever Nk ≥ d.
flash   the score tiles never leave the chip: beyond the inputs it holds O and one fp32
        log-sum-exp per query row (B·H·Nq), which the backward pass reads.

Anchors (an H200, B = 1, H = 16, d = 64, fp16, /work/shared/anchors): PyTorch's naive attention
peaks at 65536 MiB above its inputs at N = 32768 — exactly S + P here — and runs out of memory at
N = 65536 (S + P would be 256 GiB); SDPA's flash kernel needs 128 MiB there, which is O alone:
our 132 MiB adds the 4 MiB LSE that a training forward keeps (3 % more).

GPU memory sizes come from the presets of simulator/core/hardware.py (datasheet, decimal GB).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import STATS_BYTES, AttentionProblem

# Peak memory measured on real GPUs, shipped with flashscope (see its "what" and "source").
MEASURED_PATH = Path(__file__).resolve().parents[1] / "data" / "peak_memory_2026-11-21.json"


def capacity(gpu: str) -> int:
    """Device memory of `gpu` (a preset name or alias of simulator/core/hardware.py) in bytes.

    As sold: the CUDA context and the allocator keep a little of it, so a run can fail slightly
    below this line. ValueError for an unknown GPU.
    """
    return round(hardware.PRESETS[hardware.resolve(gpu)].hbm_gb * 10**9)


@dataclass(frozen=True)
class PeakMemory:
    """What one forward call holds at its peak, in bytes, by tensor."""

    parts: dict[str, int]  # tensor name → bytes live at the peak
    inputs: tuple[str, ...] = ("Q", "K", "V")

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def beyond_inputs(self) -> int:
        """What the call allocates on top of Q, K and V (what a framework's peak counter shows)."""
        return sum(v for k, v in self.parts.items() if k not in self.inputs)

    def fits(self, capacity_bytes: int) -> bool:
        return self.total <= capacity_bytes


def _inputs(p: AttentionProblem) -> dict[str, int]:
    b = p.dtype_bytes
    q = p.batch * p.heads * p.seq_q * p.head_dim * b
    kv = p.batch * p.kv_heads * p.seq_k * p.head_dim * b
    return {"Q": q, "K": kv, "V": kv}


def naive_peak(p: AttentionProblem) -> PeakMemory:
    """Naive attention: inputs plus the larger of (S and P) and (P and O)."""
    b = p.dtype_bytes
    scores = p.batch * p.heads * p.seq_q * p.seq_k * b
    out = p.batch * p.heads * p.seq_q * p.head_dim * b
    live = {"S": scores, "P": scores} if scores >= out else {"P": scores, "O": out}
    return PeakMemory({**_inputs(p), **live})


def flash_peak(p: AttentionProblem) -> PeakMemory:
    """FlashAttention: inputs, O and the fp32 log-sum-exp of every query row."""
    out = p.batch * p.heads * p.seq_q * p.head_dim * p.dtype_bytes
    lse = p.batch * p.heads * p.seq_q * STATS_BYTES
    return PeakMemory({**_inputs(p), "O": out, "LSE": lse})


def largest_fitting(
    peak_fn: Callable[[AttentionProblem], PeakMemory],
    p: AttentionProblem,
    capacity_bytes: int,
    n_max: int,
) -> int | None:
    """The largest N (seq_q = seq_k) ≤ n_max at which `peak_fn` fits, or None below N = 1.

    Peak memory grows with N, so a binary search finds the edge exactly.
    """

    def fits(n: int) -> bool:
        q = AttentionProblem(
            seq_q=n,
            head_dim=p.head_dim,
            batch=p.batch,
            heads=p.heads,
            kv_heads=p.kv_heads,
            dtype=p.dtype,
        )
        return peak_fn(q).fits(capacity_bytes)

    if not fits(1):
        return None
    lo, hi = 1, n_max
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def load_measured(path: Path = MEASURED_PATH) -> dict[str, Any]:
    """The shipped measurements: metadata and, per GPU, rows {impl, n, peak_mib | oom}."""
    with path.open(encoding="utf-8") as f:
        doc: dict[str, Any] = json.load(f)
    return doc
