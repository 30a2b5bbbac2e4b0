"""Kernel timing as every flashscope benchmark does it: median of `triton.testing.do_bench`.

`do_bench` warms up (the first calls compile and load the kernel), flushes L2 before each timed
call and times with CUDA events. When one set of inputs fits in L2, the caller supplies several
sets and consecutive calls rotate through them, so no call finds its inputs left in L2 by the
previous one. Inputs are random, never zeros (zeros run faster than real data).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import cycle

import torch


def l2_bytes() -> int:
    props = torch.cuda.get_device_properties(0)
    return int(getattr(props, "L2_cache_size", 50 << 20))


def input_sets(bytes_per_set: int, limit: int = 8) -> int:
    """How many input sets to rotate: 1 when a set exceeds L2, else enough to cover 2× L2."""
    if bytes_per_set >= l2_bytes():
        return 1
    return max(2, min(limit, -(-2 * l2_bytes() // max(bytes_per_set, 1))))


def median_ms(
    calls: Sequence[Callable[[], object]], warmup_ms: int = 25, rep_ms: int = 100
) -> float:
    """Median time in ms of one call, rotating through `calls` (one per input set)."""
    import triton

    nxt = cycle(calls)

    def one() -> object:
        return next(nxt)()

    return float(triton.testing.do_bench(one, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def tensor_bytes(*xs: torch.Tensor) -> int:
    return sum(x.numel() * x.element_size() for x in xs)
