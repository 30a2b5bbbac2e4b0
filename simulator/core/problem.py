"""The attention problem and the tile configuration, as frozen, self-validating dataclasses."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

# Bytes per element of each storage dtype the simulator knows.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}
# Statistics (m, l, LSE) are kept in fp32 by every FlashAttention kernel.
STATS_BYTES = 4


def _check_int(name: str, value: object, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < lo:
        raise ValueError(f"{name} must be ≥ {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be ≤ {hi}, got {value}")


# A register cap per thread, as Triton's `maxnreg` takes it: registers are allocated in units of
# 8 and a thread has at most 255.
MIN_REG_CAP, MAX_REG_CAP, REG_CAP_STEP = 24, 248, 8


# The head dimensions flashscope's kernels run (kernels/inputs.py): multiples of 8, whose rows
# load as 16-byte vectors of fp16, up to 256. Every page, API and command takes a head_dim by
# this one rule, so whatever the simulator shows, the kernels can run beside it; the simulator's
# own functions take any head_dim ≥ 1 (its tests use tiny ones).
HEAD_DIM_STEP, MAX_HEAD_DIM = 8, 256


def head_dim_refusal(head_dim: int, limit: int = MAX_HEAD_DIM) -> tuple[str, int] | None:
    """(why, the bound crossed) when the kernels cannot run this head_dim or it is beyond
    `limit` (a server's own, lower bound); None when it is fine."""
    top = min(limit, MAX_HEAD_DIM) // HEAD_DIM_STEP * HEAD_DIM_STEP
    if HEAD_DIM_STEP <= head_dim <= top and head_dim % HEAD_DIM_STEP == 0:
        return None
    why = (
        f"head_dim must be a multiple of {HEAD_DIM_STEP} from {HEAD_DIM_STEP} to {top} "
        f"(the head dimensions the kernels run), got {head_dim}"
    )
    return why, top if head_dim > top else HEAD_DIM_STEP


def is_power_of_two(x: int) -> bool:
    return x >= 1 and (x & (x - 1)) == 0


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative integers."""
    return -(-a // b)


@dataclass(frozen=True)
class AttentionProblem:
    """One attention call: O = softmax(Q Kᵀ · scale [+ causal mask]) V.

    Shapes: Q is (batch, heads, seq_q, head_dim); K and V are (batch, kv_heads, seq_k, head_dim).
    With `causal`, query row i may attend to key j only when j ≤ i + (seq_k − seq_q): the mask is
    aligned to the bottom-right corner, as FlashAttention-2 does when seq_q ≠ seq_k.
    """

    # seq_k and kv_heads accept None (the constructor's signature below says so) and hold an int
    # once constructed: __post_init__ fills them in.
    seq_q: int = 256
    head_dim: int = 64
    seq_k: int = None  # type: ignore[assignment]  # None: same as seq_q
    batch: int = 1
    heads: int = 1
    kv_heads: int = None  # type: ignore[assignment]  # None: same as heads (no grouping)
    causal: bool = False
    dtype: str = "fp16"
    sm_scale: float | None = field(default=None, compare=True)  # None: 1/sqrt(head_dim)

    if TYPE_CHECKING:

        def __init__(
            self,
            seq_q: int = 256,
            head_dim: int = 64,
            seq_k: int | None = None,
            batch: int = 1,
            heads: int = 1,
            kv_heads: int | None = None,
            causal: bool = False,
            dtype: str = "fp16",
            sm_scale: float | None = None,
        ) -> None: ...

    def __post_init__(self) -> None:
        if self.seq_k is None:
            object.__setattr__(self, "seq_k", self.seq_q)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        _check_int("seq_q", self.seq_q, 1)
        _check_int("seq_k", self.seq_k, 1)
        _check_int("head_dim", self.head_dim, 1)
        _check_int("batch", self.batch, 1)
        _check_int("heads", self.heads, 1)
        _check_int("kv_heads", self.kv_heads, 1)
        if self.heads % self.kv_heads:
            raise ValueError(
                f"kv_heads must divide heads (grouped-query attention), "
                f"got heads={self.heads}, kv_heads={self.kv_heads}"
            )
        if not isinstance(self.dtype, str) or self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")
        if not isinstance(self.causal, bool):
            raise ValueError(f"causal must be true or false, got {self.causal!r}")
        if self.sm_scale is not None and (
            isinstance(self.sm_scale, bool)
            or not (isinstance(self.sm_scale, int | float) and math.isfinite(self.sm_scale))
        ):
            raise ValueError(f"sm_scale must be a finite number, got {self.sm_scale!r}")

    @property
    def scale(self) -> float:
        return self.sm_scale if self.sm_scale is not None else 1.0 / math.sqrt(self.head_dim)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def group(self) -> int:
        """Query heads that share one K/V head."""
        return self.heads // self.kv_heads

    @property
    def causal_offset(self) -> int:
        """Key j is visible to query i when j ≤ i + causal_offset (bottom-right alignment)."""
        return self.seq_k - self.seq_q

    def shape(self) -> dict[str, int | bool]:
        """The call's shape as the API reports it (batch, heads, kv_heads, seq, seq_k, head_dim,
        causal): what the engine's and the FA-3 model's responses both show."""
        return {"batch": self.batch, "heads": self.heads, "kv_heads": self.kv_heads,
                "seq": self.seq_q, "seq_k": self.seq_k, "head_dim": self.head_dim,
                "causal": self.causal}  # fmt: skip


@dataclass(frozen=True)
class TileConfig:
    """How a kernel tiles the problem: query rows per CTA, keys per inner step, pipeline, warps."""

    block_m: int = 64
    block_n: int = 64
    stages: int = 2
    warps: int = 4
    maxnreg: int | None = None  # cap on registers per thread (Triton's maxnreg); None: 255

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            _check_int(name, value, 1)
            if not is_power_of_two(value):
                raise ValueError(f"{name} must be a power of two, got {value}")
        _check_int("stages", self.stages, 1, 8)
        _check_int("warps", self.warps, 1, 32)
        if not is_power_of_two(self.warps):
            raise ValueError(f"warps must be a power of two, got {self.warps}")
        if self.maxnreg is not None:
            _check_int("maxnreg", self.maxnreg, MIN_REG_CAP, MAX_REG_CAP)
            if self.maxnreg % REG_CAP_STEP:
                raise ValueError(
                    f"maxnreg must be a multiple of {REG_CAP_STEP}, got {self.maxnreg}"
                )

    def q_blocks(self, problem: AttentionProblem) -> int:
        return cdiv(problem.seq_q, self.block_m)

    def kv_blocks(self, problem: AttentionProblem) -> int:
        return cdiv(problem.seq_k, self.block_n)


def decode_splits(ctas_without_split: int, kv_blocks: int, sms: int = 132) -> int:
    """How many chunks Flash-Decoding splits the KV length into.

    Enough CTAs to give every SM about one (⌈sms / ctas⌉), never more chunks than key blocks,
    and no split at all when batch × kv_heads alone already fills the GPU. Where that would
    overfill the SMs by a sliver (at most a tenth of them), one chunk fewer: 8 K/V heads on an
    H100's 132 SMs take 16 chunks (128 CTAs), not 17 (136), which measured 3-4% slower at a
    65,536-key cache (benchmarks/results/decode-steady-*.json).
    """
    _check_int("ctas_without_split", ctas_without_split, 1)
    _check_int("kv_blocks", kv_blocks, 1)
    _check_int("sms", sms, 1)
    splits = cdiv(sms, ctas_without_split)
    if splits > 1 and ctas_without_split * splits - sms <= sms // 10:
        splits -= 1
    return max(1, min(kv_blocks, splits))
