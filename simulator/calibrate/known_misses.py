"""The timing engine's known misses: configuration classes it predicts badly, measured.

Each entry names a class of configurations (in words, and as the config fields its validation
rows share), the GPUs it was measured on, the error over its rows, (simulated / measured − 1) in
per cent, and the effect the engine lacks. `explain.notes` quotes the entries whose `note` names
a kind of note; the others are kept for the documentation and /compare to list.

The figures of entries measured on the shipped datasets (app/data/validation-*.json) are held
to those datasets by tests; an entry with `modelled` set records the miss from before the
engine charged its effect with that fitted term.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KnownMiss:
    """One measured miss: which configurations, on which GPUs, how far off, and why."""

    key: str
    configs: str  # the class of configurations, in words
    where: Mapping[str, object]  # the config fields its validation rows share
    gpus: tuple[str, ...]  # preset keys (simulator/core/hardware.py)
    error_pct: tuple[float, float]  # lowest and highest (simulated / measured − 1) · 100
    lacks: str  # the effect the engine does not model
    source: str  # where the measurement and its analysis are
    note: str | None  # the kind of note (explain.notes) that quotes it; None: documentation only
    kernel: str | None = None  # one kernel simulated alone against Nsight Compute's duration
    mean_pct: float | None = None  # the mean error over its rows, where recorded
    modelled: str | None = None  # the fitted term added since: error_pct is from before it

    @property
    def measure(self) -> str:
        """What is off: the whole call's time, or one kernel's time alone."""
        return "time" if self.kernel is None else f"{self.kernel} alone"

    @property
    def worst_pct(self) -> float:
        """The largest error over its rows, in per cent, either way."""
        return max(abs(x) for x in self.error_pct)

    @property
    def span(self) -> str:
        """Its range as the notes print it: "11–25%" (one-sided misses as magnitudes)."""
        low, high = self.error_pct
        if low < 0 < high:
            return f"{low:+.0f}…{high:+.0f}%"
        a, b = sorted((abs(low), abs(high)))
        return f"{a:.0f}–{b:.0f}%"

    @property
    def direction(self) -> str:
        """ "under-predicted", "over-predicted", or "off" where its rows err both ways."""
        low, high = self.error_pct
        return "under-predicted" if high <= 0 else "over-predicted" if low >= 0 else "off"

    @property
    def on(self) -> str:
        """Its GPUs as the notes name them: "the H200", "the H100 and the H200"."""
        return " and ".join(f"the {gpu_label(g)}" for g in self.gpus)


def gpu_label(key: str) -> str:
    """The short name of a preset key in a note: h200 → H200, h100-sxm → H100."""
    return key.split("-")[0].upper()


_ATOMIC_LACKS = (
    "the transpose of dSᵀ through shared memory for the fifth product, and the longer wait per "
    "instruction of its unmasked kernels, whose CTAs read a head's Q and dO in lockstep"
)
_ALONE_LACKS = (
    "not isolated: the fit is on whole calls, where the separate route's two concurrent kernels "
    "err in opposite directions; fitting on the kernels alone too (calibrate --alone-weight 1) "
    "moved them nearer but took the tile ranking below 0.9"
)
_SEPARATE = {"algo": "fa2-bwd", "route": "separate"}
_ALONE_SOURCE = "docs/validation.md; the datasets' kernels_alone (Nsight Compute)"

KNOWN_MISSES: tuple[KnownMiss, ...] = (
    KnownMiss(
        key="lockstep-warpgroups",
        configs="forward CTAs whose warpgroups take their own 64-row slices and share a ring of "
        "two K/V buffers (128×128 tiles, 8 warps, 2 stages, d = 64)",
        where={
            "algo": "fa2",
            "block_m": 128,
            "block_n": 128,
            "warps": 8,
            "stages": 2,
            "head_dim": 64,
        },
        gpus=("h100-sxm", "h200"),
        error_pct=(-35.0, -8.0),
        lacks="warpgroups that wait on the same two buffers run in lockstep, so their softmax "
        "and matrix phases overlap less",
        source="docs/timing-model.md (lockstep)",
        note="structure",
        modelled="lockstep",
    ),
    KnownMiss(
        key="atomic-route",
        configs="the atomic backward route (one kernel reduce-adding dQ into L2; 30 rows, all "
        "unmasked)",
        where={"algo": "fa2-bwd", "route": "atomic"},
        gpus=("h200",),
        error_pct=(-25.0, -11.0),
        lacks=_ATOMIC_LACKS,
        source="benchmarks/profile_tiles.py",
        note="structure",
    ),
    KnownMiss(
        key="bwd-dq-alone",
        configs="the separate backward route's dQ kernel",
        where=_SEPARATE,
        gpus=("h100-sxm",),
        error_pct=(-8.0, 34.0),
        mean_pct=12.6,
        kernel="bwd_dq",
        lacks=_ALONE_LACKS,
        source=_ALONE_SOURCE,
        note=None,
    ),
    KnownMiss(
        key="bwd-dq-alone",
        configs="the separate backward route's dQ kernel",
        where=_SEPARATE,
        gpus=("h200",),
        error_pct=(-6.0, 41.0),
        mean_pct=17.5,
        kernel="bwd_dq",
        lacks=_ALONE_LACKS,
        source=_ALONE_SOURCE,
        note=None,
    ),
    KnownMiss(
        key="bwd-dkdv-alone",
        configs="the separate backward route's dK/dV kernel",
        where=_SEPARATE,
        gpus=("h100-sxm",),
        error_pct=(-31.0, 17.0),
        mean_pct=-10.3,
        kernel="bwd_dkdv",
        lacks=_ALONE_LACKS,
        source=_ALONE_SOURCE,
        note=None,
    ),
    KnownMiss(
        key="bwd-dkdv-alone",
        configs="the separate backward route's dK/dV kernel",
        where=_SEPARATE,
        gpus=("h200",),
        error_pct=(-25.0, 11.0),
        mean_pct=-4.8,
        kernel="bwd_dkdv",
        lacks=_ALONE_LACKS,
        source=_ALONE_SOURCE,
        note=None,
    ),
    KnownMiss(
        key="atomic-dkdv-alone",
        configs="the atomic backward route's kernel (dK/dV with dQ reduce-added)",
        where={"algo": "fa2-bwd", "route": "atomic"},
        gpus=("h200",),
        error_pct=(-30.0, -13.0),
        mean_pct=-24.8,
        kernel="bwd_dkdv-atomic",
        lacks=_ATOMIC_LACKS,
        source=_ALONE_SOURCE,
        note=None,
    ),
)


def known_miss(key: str, gpu: str | None = None) -> KnownMiss:
    """The entry called `key` (on `gpu`, where the key has one per GPU); KeyError if none."""
    for miss in KNOWN_MISSES:
        if miss.key == key and (gpu is None or gpu in miss.gpus):
            return miss
    raise KeyError(f"no known miss {key!r}" + (f" on {gpu}" if gpu else ""))


# --- the classes a dataset's rows fall in, and the misses they measure ----------------------
#
# KNOWN_MISSES above quote figures measured once; the table below is computed from a dataset's
# rows each time it is asked for: every row falls in the first class whose test it passes, and
# a class whose rows of one subset (the held-out half by default) are off by more than
# MISS_BEYOND_PCT on average is a miss, with the effect the engine lacks for that class.

# A call is bound by the host where its kernels' GPU time (Nsight Compute's durations, summed)
# is less than this share of the time the call took.
HOST_BOUND_SHARE = 0.6
MISS_BEYOND_PCT = 10.0

_NOT_ISOLATED = "not isolated yet: "


def kernels_share(row: Mapping[str, Any]) -> float | None:
    """The share of a row's measured call time its kernels ran on the GPU (Nsight Compute's
    durations summed), or None where Nsight Compute did not time them."""
    from flashscope.simulator.calibrate.validation import ncu_kernels
    from flashscope.simulator.timing.compiled import NCU_DURATION

    kernels = ncu_kernels(dict(row))
    call = row.get("measured_us")
    if not kernels or not call or any(not k.get(NCU_DURATION) for k in kernels):
        return None
    return sum(float(k[NCU_DURATION]) for k in kernels) * 1e-3 / float(call)


def host_bound(row: Mapping[str, Any]) -> bool:
    """Whether the host bounds the row's call: its kernels ran under HOST_BOUND_SHARE of it."""
    share = kernels_share(row)
    return share is not None and share < HOST_BOUND_SHARE


def spills(row: Mapping[str, Any]) -> bool:
    """Whether Nsight Compute saw any of the row's kernels reload from local memory."""
    from flashscope.simulator.calibrate.validation import ncu_kernels
    from flashscope.simulator.timing.compiled import LOCAL_LOAD

    return any((k.get(LOCAL_LOAD) or 0) > 0 for k in ncu_kernels(dict(row)))


# The fewest registers per thread a kernel compiles to: one that spills at this count keeps
# nearly all its live values in local memory (compiled.py).
FLOOR_REGISTERS = 32


def kernel_in_local_memory(kernel: Mapping[str, Any]) -> bool:
    """Whether a kernel Nsight Compute measured compiled to FLOOR_REGISTERS and reloads from
    local memory (its registers and local loads)."""
    from flashscope.simulator.timing.compiled import LOCAL_LOAD, REGISTERS

    return kernel.get(REGISTERS) == FLOOR_REGISTERS and (kernel.get(LOCAL_LOAD) or 0) > 0


def in_local_memory(row: Mapping[str, Any]) -> bool:
    """Whether one of the row's kernels is in local memory (`kernel_in_local_memory`)."""
    from flashscope.simulator.calibrate.validation import ncu_kernels

    return any(kernel_in_local_memory(k) for k in ncu_kernels(dict(row)))


def _config(row: Mapping[str, Any]) -> Mapping[str, Any]:
    config: Mapping[str, Any] = row.get("config") or {}
    return config


def _spread(row: Mapping[str, Any]) -> bool:
    return row.get("tiles") == "spread"


def _forward(row: Mapping[str, Any]) -> bool:
    return _config(row).get("algo") == "fa2"


def _backward(row: Mapping[str, Any]) -> bool:
    return _config(row).get("algo") == "fa2-bwd"


def _where(where: Mapping[str, object]) -> Callable[[Mapping[str, Any]], bool]:
    return lambda row: all(_config(row).get(k) == v for k, v in where.items())


@dataclass(frozen=True)
class MissClass:
    """A class of configurations a dataset's row may fall in, and what the engine lacks for
    it (what the table says where the class is off)."""

    key: str
    name: str  # a few words: what a table's row calls it
    configs: str  # the class, in words
    lacks: str
    test: Callable[[Mapping[str, Any]], bool]


_STRUCTURAL = tuple(
    MissClass(
        m.key,
        m.key.replace("-", " "),
        m.configs,
        m.lacks
        if m.modelled is None
        else f"{m.lacks} (charged since by the fitted {m.modelled} term; what is left of it)",
        _where(m.where),
    )
    for m in KNOWN_MISSES
    if m.kernel is None
)

MISS_CLASSES: tuple[MissClass, ...] = (
    MissClass(
        "host-bound",
        "host-bound calls",
        "calls bound by the host: their kernels ran on the GPU for under "
        f"{HOST_BOUND_SHARE:.0%} of the call (Nsight Compute), small backward problems above all",
        "a host cost that varies from call to call and from machine to machine (the same "
        "call measured 0.3-5.3 times as long on the H200's host as on the H100's, its kernels "
        "within 9%: benchmarks/host_noise.py): the engine floors a call at one fitted "
        "cost per launch, one per tensor descriptor the host makes and one per backward "
        "(host_launch_us, host_descriptor_us, host_backward_us)",
        host_bound,
    ),
    *_STRUCTURAL,
    MissClass(
        "local-memory",
        "kernels in local memory",
        f"kernels compiled to {FLOOR_REGISTERS} registers a thread that spill: 2-warp tiles "
        "asking for far more than the 255 a thread may hold, whose live values stay in local "
        "memory (all 18 of either sweep's were spread tiles)",
        "reloads that wait one after another: Nsight Compute counts 4-19 GB/s of them per SM, "
        "other spilling kernels up to 58; the engine charges them as any spill's (local_gbs "
        "and the L2's rate), so alone they come out 14-93% too fast. A rate of their own "
        "fitted 3-10 times what they measured and was not kept (docs/validation.md)",
        in_local_memory,
    ),
    MissClass(
        "spills-spread",
        "spilling kernels, spread tiles",
        "kernels that spill registers to local memory, on spread tiles: Nsight Compute "
        "measured none of them for the compiled-kernel table; their registers and spills are "
        "the compiler's, read from the SASS (simulator/data/compiled-spills.json)",
        _NOT_ISOLATED + "the local bytes are the compiler's and their DRAM traffic follows "
        "the slots the resident threads keep; what a step that waits on its reloads loses "
        "beyond their L1, L2 and DRAM time is not modelled",
        lambda row: spills(row) and _spread(row),
    ),
    MissClass(
        "spills-candidate",
        "spilling kernels, candidate tiles",
        "kernels that spill registers to local memory, on the kernels' candidate tiles "
        "(the backward at large head_dim above all)",
        _NOT_ISOLATED + "the engine charges their local bytes at the L1 rate (local_gbs), "
        "the reloads that miss L1 (more once the slots outgrow it) at the L2 rate and the "
        "slots L2 cannot keep at DRAM's; what a step that waits on its reloads loses beyond "
        "that is not modelled",
        spills,
    ),
    MissClass(
        "forward-spread",
        "forwards, spread tiles",
        "forwards on spread tiles that do not spill (tiles of 16–64 rows or columns, one or "
        "two stages, more warps than the tile has 64-row slices)",
        _NOT_ISOLATED + "the engine charges the exchanges of warps that split a tile's columns "
        "(engine.XWARP_NS per warp and step), but one-stage loops on 8 warps stay about 23% "
        "too fast (there the step's load wait outweighs it; the exchanges likely add to it), "
        "the wait per barrier looks longer at 4 CTAs per SM than at 1–2 (u148, 53% too fast), "
        "and 4-warp one-stage forwards at d = 256 are 25–60% too slow",
        lambda row: _forward(row) and _spread(row),
    ),
    MissClass(
        "forward-candidate",
        "forwards, candidate tiles",
        "forwards on the kernels' candidate tiles that do not spill",
        _NOT_ISOLATED + "calls of under 32 µs (35% too slow: each launch is charged the "
        "protocol's fitted launch_us, 12 µs, where do_bench took 2–6 µs beyond Nsight "
        "Compute's kernel time) and 128×32 tiles at d = 192 and 256 (11–12% too fast); the "
        "padded head_dim's extra products and tiles and the descriptors that lengths filling "
        "no whole tile build are charged",
        _forward,
    ),
    MissClass(
        "backward",
        "backwards",
        "backwards that neither spill nor wait on the host",
        _NOT_ISOLATED + "the shapes the protocol never varied, as for the forward; the "
        "backward's two kernels, concurrent on the separate route, err apart",
        _backward,
    ),
    MissClass(
        "other", "others", "the other configurations", _NOT_ISOLATED.removesuffix(": "), bool
    ),
)


def miss_class(row: Mapping[str, Any], classes: Sequence[MissClass] = MISS_CLASSES) -> str:
    """The key of the first class whose test `row` passes ("other" where none does)."""
    return next((c.key for c in classes if c.test(row)), "other")


def class_table(
    rows: Sequence[Mapping[str, Any]],
    subset: str | None = "holdout",
    classes: Sequence[MissClass] = MISS_CLASSES,
) -> list[dict[str, Any]]:
    """Each class with rows of `subset` (None: all rows) that were both measured and simulated:
    its rows, time MAPE, bias (mean error) and worst error in per cent, the worst row's id, the
    share within 10%, and what the engine lacks for it; in the order of `classes`."""
    from flashscope.simulator.calibrate.validation import error_stats

    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if subset is not None and r.get("subset") != subset:
            continue
        if not r.get("measured_us") or not r.get("simulated_us"):
            continue
        groups.setdefault(miss_class(r, classes), []).append(r)
    out = []
    for c in classes:
        rs = groups.get(c.key)
        if not rs:
            continue
        stats = error_stats(
            [str(r.get("id")) for r in rs],
            [r["measured_us"] for r in rs],
            [r["simulated_us"] for r in rs],
        )
        out.append(
            {
                "key": c.key,
                "name": c.name,
                "configs": c.configs,
                "rows": stats["n"],
                "mape_pct": stats["mape_pct"],
                "bias_pct": stats["bias_pct"],
                "worst_pct": stats["worst_pct"],
                "worst_id": stats["worst_id"],
                "within_10pct": stats["within_10pct"],
                "lacks": c.lacks,
            }
        )
    return out


def measured_misses(
    rows: Sequence[Mapping[str, Any]],
    subset: str | None = "holdout",
    beyond_pct: float = MISS_BEYOND_PCT,
    classes: Sequence[MissClass] = MISS_CLASSES,
) -> list[dict[str, Any]]:
    """The classes of `class_table` whose time MAPE is beyond `beyond_pct`, worst first."""
    table = [c for c in class_table(rows, subset, classes) if c["mape_pct"] > beyond_pct]
    return sorted(table, key=lambda c: -c["mape_pct"])
