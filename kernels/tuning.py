"""Autotuning on first use, for a GPU that kernels/tuned.json does not list.

Each candidate configuration (config.candidates) runs on the caller's own inputs, timed by the
median of `triton.testing.do_bench`; one that fails to compile or launch (too much shared
memory, say) is skipped. The winner is remembered for the life of the process, per GPU and key.
"""

from __future__ import annotations

from collections.abc import Callable

from flashscope.kernels.config import KernelConfig, candidates


class _Choices:
    """The configurations chosen so far in this process: (gpu, key) → KernelConfig."""

    def __init__(self) -> None:
        self.chosen: dict[tuple[str, str], KernelConfig] = {}


_CHOICES = _Choices()


def autotuned(
    gpu: str, mode: str, key: str, d_pad: int, run: Callable[[KernelConfig], object]
) -> KernelConfig:
    """The fastest candidate for `key` on this GPU, timing `run(config)` for each."""
    import triton

    hit = _CHOICES.chosen.get((gpu, key))
    if hit is not None:
        return hit
    best, best_ms = None, float("inf")
    for cfg in candidates(mode, d_pad):
        try:
            ms = triton.testing.do_bench(lambda c=cfg: run(c), warmup=5, rep=20)
        except Exception:
            continue
        if ms < best_ms:
            best, best_ms = cfg, ms
    if best is None:
        raise RuntimeError(f"no candidate configuration ran for {key} on {gpu}")
    _CHOICES.chosen[(gpu, key)] = best
    return best
