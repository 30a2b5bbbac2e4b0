"""Tile configurations: the explicit override type and the per-GPU choices the kernels default to.

`KernelConfig(block_m, block_n, num_warps, num_stages)` fixes a launch: for the forward pass
block_m query rows per CTA and block_n keys per inner step; for the backward pass block_n keys
per CTA and block_m query rows per inner step; for decode block_n keys per step (block_m is
ignored: the rows are the query tokens of one K/V head). Defaults come from `tuned.json`, written
on each GPU by `benchmarks/tune.py` and, per sequence length, `tune_forward_n.py` and
`tune_backward_n.py` (the H200 and the H100 SXM so far); a GPU missing from it is autotuned on
first use (`flashscope.kernels.tuning`), and the interpreter uses small fixed tiles. A configuration
may cap the registers per thread (`maxnreg`) to fit one more CTA per SM.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import lru_cache, wraps
from pathlib import Path
from typing import Any, TypeVar

from flashscope.simulator.core.problem import MAX_REG_CAP, MIN_REG_CAP, REG_CAP_STEP
from flashscope.simulator.timing import tuned_tables
from flashscope.simulator.timing.kernelplan import tuned_keys

TUNED_FILE = Path(__file__).with_name("tuned.json")
T = TypeVar("T")


def _power_of_two(x: int) -> bool:
    return x >= 1 and x & (x - 1) == 0


@dataclass(frozen=True)
class KernelConfig:
    """One launch configuration of a kernel (all four are Triton compile-time constants)."""

    block_m: int = 64
    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 2
    prefetch: bool = False  # forward only: issue the next tile's Q Kᵀ before this softmax
    maxnreg: int | None = None  # cap on registers per thread (more CTAs per SM); None: 255

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
            if not (_power_of_two(value) and 16 <= value <= 256):
                raise ValueError(f"{name} must be a power of two in [16, 256], got {value}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps!r}")
        if isinstance(self.num_stages, bool) or self.num_stages not in range(1, 9):
            raise ValueError(f"num_stages must be an integer in [1, 8], got {self.num_stages!r}")
        if not isinstance(self.prefetch, bool):
            raise ValueError(f"prefetch must be a bool, got {self.prefetch!r}")
        cap, lo, hi, step = self.maxnreg, MIN_REG_CAP, MAX_REG_CAP, REG_CAP_STEP
        if cap is not None and (type(cap) is not int or cap not in range(lo, hi + 1, step)):
            msg = f"maxnreg must be a multiple of {step} in [{lo}, {hi}] or None, got {cap!r}"
            raise ValueError(msg)

    def as_list(self) -> list[int]:
        """[block_m, block_n, num_warps, num_stages, prefetch (0/1)] and, with a register cap,
        maxnreg as a sixth entry: as tuned.json holds them."""
        out = [self.block_m, self.block_n, self.num_warps, self.num_stages, int(self.prefetch)]
        return [*out, self.maxnreg] if self.maxnreg is not None else out

    @classmethod
    def from_list(cls, entry: list[int]) -> KernelConfig:
        bm, bn, warps, stages, *rest = entry
        prefetch = bool(rest[0]) if rest else False
        return cls(bm, bn, warps, stages, prefetch, rest[1] if len(rest) > 1 else None)

    def launch_options(self) -> dict[str, int]:
        """Triton launch keywords: warps, stages and, where set, the register cap."""
        out = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        return out | ({"maxnreg": self.maxnreg} if self.maxnreg is not None else {})


def table_key(mode: str, dtype_bits: int, d_pad: int, causal: bool) -> str:
    """Key of a tuned-table entry, e.g. "fwd/16/d128/causal"."""
    return f"{mode}/{dtype_bits}/d{d_pad}/{'causal' if causal else 'full'}"


@lru_cache
def tuned_table() -> dict[str, dict[str, dict]]:
    """GPU name → {"configs": key → [bm, bn, warps, stages, ws], "routes": key → name}."""
    if not TUNED_FILE.exists():
        return {}
    return json.loads(TUNED_FILE.read_text())["gpus"]


MAX_REMEMBERED = 4096  # answers a `per_table` function keeps; it starts again when full


def per_table(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` (of hashable arguments, its answer read from the tuned table) remembering its
    answers until the table is read again (`merge_tuned`, a test's `tuned_table.cache_clear()`):
    a kernel's tuned lookup builds a dozen keys, and runs on every call of the kernel."""
    memo: dict[tuple, T] = {}
    read: list[object] = [None]  # the table the answers come from

    @wraps(fn)
    def remembered(*args: Hashable, **kwargs: Hashable) -> T:
        table = tuned_table()
        if read[0] is not table:
            memo.clear()
            read[0] = table
        key = (args, tuple(kwargs.items()))
        if key not in memo:
            if len(memo) >= MAX_REMEMBERED:
                memo.clear()
            memo[key] = fn(*args, **kwargs)
        return memo[key]

    return remembered


def merge_tuned(gpu: str, chosen: dict[str, object]) -> None:
    """Add a sweep's choices for `gpu` to tuned.json: "bwd-route/…" keys are dQ routes and
    "fwd-route/…" keys the forward's kernel ("triton" or "ws"), "ws/…" keys configurations of the
    warp-specialized forward (flashscope.kernels.hopper_forward.WsConfig lists; None removes one)
    and "ws-edge/…" keys those measured at lengths that fill no tile, "bwd-ws/…" and
    "bwd-ws-edge/…" the warp-specialized backward's (BwdConfig lists), the rest tile
    configurations ([bm, bn, warps, stages, prefetch(, maxnreg)]); every other entry stays."""
    table = json.loads(TUNED_FILE.read_text()) if TUNED_FILE.exists() else {"gpus": {}}
    entry = table["gpus"].setdefault(gpu, {})
    for key, value in chosen.items():
        if key.startswith(("bwd-route/", "fwd-route/")):
            entry.setdefault("routes", {})[key] = value
        elif key.startswith(("ws/", "ws-edge/", "bwd-ws/", "bwd-ws-edge/")):
            section, _, rest = key.partition("/")
            if value is None:  # a bucket no longer routed there
                entry.get(section, {}).pop(rest, None)
            else:
                entry.setdefault(section, {})[rest] = value
        else:
            entry.setdefault("configs", {})[key] = value
    TUNED_FILE.write_text(json.dumps(table, indent=1) + "\n")
    tuned_table.cache_clear()


def lookup(gpu: str, key: str) -> KernelConfig | None:
    entry = tuned_table().get(gpu, {}).get("configs", {}).get(key)
    return KernelConfig.from_list(entry) if entry else None


@per_table
def _lent_tables() -> dict[str, dict[str, Any]]:
    """Every GPU's tables with the lent entries (simulator/timing/tuned_tables.py), worked out
    once per read of the table."""
    return tuned_tables.lend(tuned_table())


def gpu_table(gpu: str) -> dict[str, Any]:
    """`gpu`'s sections of the tuned table with the Gluon kernels' entries it lacks lent by
    another GPU (a GPU the file does not name: only those); not to be changed by the caller."""
    tables = _lent_tables()
    return tables.get(gpu) or tables[tuned_tables.OTHER]


def first_tuned(
    read: Callable[[str, str], T | None], gpu: str, key: str, seq_len: int | None
) -> T | None:
    """`read(gpu, k)` (`lookup`, `route`) for the first of `tuned_keys(key, seq_len)` that
    `gpu`'s table holds (the length bucket's entry before the one tuned at one length)."""
    return next(
        (x for x in (read(gpu, k) for k in tuned_keys(key, seq_len)) if x is not None), None
    )


def route(gpu: str, key: str) -> str | None:
    """A measured choice between two kernel structures (the backward's dQ route, the forward's
    kernel; the latter lent where `gpu` has none at that head dim: `gpu_table`)."""
    return gpu_table(gpu).get("routes", {}).get(key)


def fills_no_tile(n_q: int, n_k: int) -> bool:
    """Whether N_q or N_k is not a multiple of 64: where the Triton kernels mask every block's
    edges, and the Gluon kernels' tuned entries measured at such lengths apply."""
    return n_q % 64 != 0 or n_k % 64 != 0


def tuned_entry(gpu: str, section: str, keys: list[str], edge: bool = False) -> list[int] | None:
    """The first of `keys` (most specific first, as `tuned_keys` gives them) that `gpu`'s
    tuned-table `section` holds: "ws", the warp-specialized forward's configurations; "bwd-ws",
    the warp-specialized backward's, present only where it beat the Triton backward. With
    `edge` (lengths that fill no tile) a key's entry in "<section>-edge", measured at such
    lengths, comes before its own. Where `gpu` has no entry of the kernel at that head dim,
    another GPU's (`gpu_table`)."""
    table = gpu_table(gpu)
    names = (f"{section}-edge", section) if edge else (section,)
    found = (table.get(name, {}).get(key) for key in keys for name in names)
    return next((e for e in found if e is not None), None)


# What the interpreter runs: small tiles keep its per-program NumPy work short, and tiles of
# unequal sides exercise the causal diagonal logic.
INTERPRETER = {
    "fwd": KernelConfig(32, 16, 4, 1),
    "bwd": KernelConfig(16, 32, 4, 1),
    "bwd-atomic": KernelConfig(16, 32, 4, 1),
    "bwd-dq": KernelConfig(32, 16, 4, 1),
    "decode": KernelConfig(16, 32, 4, 1),
}


C = KernelConfig
# Per kind of kernel, per padded head_dim: what an unknown GPU tries (each fits in Hopper's
# 227 KiB of shared memory at that head_dim).
CANDIDATES = {
    "fwd": {
        64: [C(128, 64, 4, 3), C(64, 64, 4, 3), C(128, 128, 8, 2)],
        128: [C(128, 128, 8, 3), C(128, 64, 8, 3), C(64, 64, 4, 3)],
        256: [C(64, 64, 4, 2), C(64, 32, 4, 2), C(128, 32, 8, 2)],
    },
    "bwd": {
        64: [C(64, 64, 4, 3), C(32, 64, 4, 3), C(32, 128, 4, 3)],
        128: [C(64, 64, 4, 2), C(32, 64, 4, 3), C(64, 128, 8, 2)],
        256: [C(32, 64, 4, 2), C(16, 64, 4, 2), C(32, 32, 4, 2)],
    },
    "bwd-dq": {
        64: [C(128, 32, 4, 3), C(128, 64, 8, 3), C(64, 64, 4, 3)],
        128: [C(128, 64, 8, 3), C(128, 32, 4, 3), C(64, 64, 4, 2)],
        256: [C(64, 32, 4, 2), C(32, 32, 4, 2), C(64, 16, 4, 2)],
    },
    "decode": {
        64: [C(16, 64, 4, 3), C(16, 128, 4, 2), C(16, 32, 4, 3)],
        128: [C(16, 64, 4, 3), C(16, 128, 4, 2), C(16, 32, 4, 3)],
        256: [C(16, 64, 4, 2), C(16, 32, 4, 3)],
    },
}
CANDIDATES["bwd-atomic"] = CANDIDATES["bwd"]


def candidates(mode: str, d_pad: int) -> list[KernelConfig]:
    """Configurations worth timing on a GPU that kernels/tuned.json does not list."""
    return CANDIDATES[mode][max(64, d_pad)]
