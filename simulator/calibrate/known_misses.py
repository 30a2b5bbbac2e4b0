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

from collections.abc import Mapping
from dataclasses import dataclass


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
        mean_pct=-10.2,
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
