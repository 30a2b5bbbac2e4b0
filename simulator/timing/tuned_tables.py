"""The Gluon kernels' tuned entries a Hopper GPU takes where it has none of its own.

kernels/tuned.json holds, per GPU name, what a sweep measured on that GPU. The warp-specialized
Gluon kernels run only where an entry sends them: the forward where "fwd-route/…" says "ws",
with its configuration from "ws" (and "ws-edge" at lengths that fill no tile); the backward where
"bwd-ws" (and "bwd-ws-edge") names one. A GPU swept at some head dims only (the H200 at 64 and
128), or a Hopper GPU the file does not name (an H100 PCIe, a GH200, an H800), would otherwise
run the Triton kernels there, at a quarter to a third of cuDNN's speed at d = 256 on an H100
(benchmarks/results/hopper-backward-*.json), while the same compiled kernel, correct on every
Hopper GPU, is 3-4× faster.

`lend` fills those gaps a head dim at a time, per kernel (`FAMILIES`): a GPU that has any entry
of a kernel at a padded head dim keeps all of its own there (its measured choices, Triton's wins
included, stand); one that has none takes every entry of that kernel and head dim from the GPU
whose table holds the most of them (ties: the name first in order), and `LENT` records from
whom. `OTHER` is the table every GPU the file does not name takes: only lent entries. The
kernels (kernels/config.py) and the timing engine (`kernelplan.ws_config`) both read the tables
through `lend`, so the engine simulates what `flash_attention` runs. Lent entries are tuned
elsewhere: correct (the same kernel, checked on the GPU it came from), their speed on the
borrower unmeasured until a sweep there writes entries of its own, which then replace them.
"""

from __future__ import annotations

import copy
from typing import Any

OTHER = "*"  # the table of a GPU the tuned file does not name
LENT = "lent"  # per GPU: "<family>/d<head_dim>" → the GPU the entries came from
# kernel → (its sections of configurations, the prefix of its routes in "routes" or None)
FAMILIES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "fwd": (("ws", "ws-edge"), "fwd-route/"),
    "bwd": (("bwd-ws", "bwd-ws-edge"), None),
}


def head_dim_of(key: str) -> int:
    """The padded head dim of a table key: "fwd/16/d128/causal/n2048" → 128."""
    return int(key.split("/")[2].removeprefix("d"))


def _entries(table: dict[str, Any], family: str, d: int) -> dict[tuple[str, str], Any]:
    """(section, key) → value of every entry of `family` at head dim `d` in one GPU's table."""
    sections, route_prefix = FAMILIES[family]
    found = {
        (s, k): v for s in sections for k, v in table.get(s, {}).items() if head_dim_of(k) == d
    }
    if route_prefix is not None:
        for k, v in table.get("routes", {}).items():
            if k.startswith(route_prefix) and head_dim_of(k) == d:
                found["routes", k] = v
    return found


def _head_dims(table: dict[str, Any], family: str) -> set[int]:
    sections, route_prefix = FAMILIES[family]
    keys = [k for s in sections for k in table.get(s, {})]
    keys += [k for k in table.get("routes", {}) if route_prefix and k.startswith(route_prefix)]
    return {head_dim_of(k) for k in keys}


def lend(gpus: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The tuned file's GPUs (name → sections), each with the Gluon entries it lacks lent by
    another, plus `OTHER`; a new dict (the argument is left as it is)."""
    out = copy.deepcopy(gpus)
    out[OTHER] = {}
    for family in FAMILIES:
        own = {name: _head_dims(table, family) for name, table in gpus.items()}
        for d in sorted(set().union(*own.values())):
            donor = min(gpus, key=lambda name: (-len(_entries(gpus[name], family, d)), name))
            lent = _entries(gpus[donor], family, d)
            for name, table in out.items():
                if d in own.get(name, ()):
                    continue
                for (section, key), value in lent.items():
                    table.setdefault(section, {})[key] = copy.deepcopy(value)
                table.setdefault(LENT, {})[f"{family}/d{d}"] = donor
    return out
