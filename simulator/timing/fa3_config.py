"""The FA-3 model's launch configuration (the Hopper kernel's `WsConfig`, which kernels/ holds
and the simulator cannot import) and the order of its tiles (the kernel's `_tile`, on the host).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashscope.simulator.core.problem import cdiv

BLOCK_M = 64  # one warpgroup's query rows
SHARED_PER_SM = 233472  # bytes of shared memory all CTAs of an SM may use (Hopper)
SHARED_PER_CTA = 232448


@dataclass(frozen=True)
class Fa3Config:
    """One launch of the warp-specialized forward (the kernel's WsConfig, block_m fixed at 64)."""

    consumers: int = 2
    block_n: int = 128
    stages: int = 2
    pipeline: bool = True
    ctas: int = 1
    pingpong: bool = False
    persistent: bool = False
    band: int = 1

    def __post_init__(self) -> None:
        checks = (
            ("consumers", (1, 2, 3)),
            ("block_n", (64, 128, 256)),
            ("stages", (2, 3, 4)),
            ("ctas", (1, 2)),
        )
        for name, allowed in checks:
            value = getattr(self, name)
            if isinstance(value, bool) or value not in allowed:
                raise ValueError(
                    f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}"
                )
        for name in ("pipeline", "pingpong", "persistent"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.band, bool) or not isinstance(self.band, int) or self.band < 0:
            raise ValueError(f"band must be 0 (all rows) or more, got {self.band!r}")
        if self.pingpong and (self.consumers < 2 or not self.pipeline):
            raise ValueError("pingpong needs pipeline and two or more consumers")

    @property
    def tile_m(self) -> int:
        return BLOCK_M * self.consumers

    def shared_bytes(self, head_dim: int, elem: int = 2) -> int:
        """Q's and O's stages, the K/V ring and the mbarriers (the kernel's count)."""
        q_and_o = 2 * self.tile_m * head_dim * elem
        kv = 2 * self.stages * self.block_n * head_dim * elem
        return q_and_o + kv + 8 * (3 * self.consumers + 4 * self.stages)

    def fits(self, head_dim: int, elem: int = 2) -> str | None:
        """Why one CTA of this configuration does not fit in shared memory, or None."""
        need = self.shared_bytes(head_dim, elem)
        if need > SHARED_PER_CTA:
            return (
                f"stages {self.stages} with consumers {self.consumers} and block_n "
                f"{self.block_n} need {need} bytes of shared memory per CTA at head_dim "
                f"{head_dim}; the limit is {SHARED_PER_CTA}"
            )
        return None

    def resident(self, head_dim: int, elem: int = 2) -> int:
        """CTAs one SM holds at once: `ctas`, or fewer where their shared memory does not fit
        (the launch still runs, its CTAs taking turns)."""
        return max(1, min(self.ctas, SHARED_PER_SM // (self.shared_bytes(head_dim, elem) + 1024)))


def tile_steps(cfg: Fa3Config, rows: int, n_q: int, n_k: int, causal: bool) -> np.ndarray:
    """Key blocks of every tile in launch order (the kernel's `_tile` on the host): tiles go
    head by head; causal ones in bands of `band` (batch, head) rows, heaviest first."""
    n_mb = cdiv(n_q, cfg.tile_m)
    t = np.arange(rows * n_mb)
    if not causal:
        return np.full(t.size, max(cdiv(n_k, cfg.block_n), 1), dtype=np.int64)
    band = cfg.band or rows
    first = t // (band * n_mb) * band
    size = np.minimum(band, rows - first)
    rank = (t - first * n_mb) // size
    m0 = n_q - (rank + 1) * cfg.tile_m
    hi = np.clip(np.minimum(n_k, m0 + cfg.tile_m + n_k - n_q), 0, None)
    steps: np.ndarray = np.maximum(-(-hi // cfg.block_n), 1).astype(np.int64)
    return steps
