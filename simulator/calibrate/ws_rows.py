"""The Gluon backward's measured rows, their split, and the engine's route "ws" against them.

The rows: every `gluon[...]` time of the Hopper backward's dq-fused results (`RESULTS`: the
protocol on an H100 and an H200, the odd lengths and head_dims on an H100), each a problem
(head_dim d, length N, causal, dtype; batch ≈ 16384 / N and 2048 / d heads, as
benchmarks/hopper_backward.py runs them) and a configuration [consumers, block_m, stages(,
band)] with its measured milliseconds. The split is by problem (`held_out`: a seeded shuffle,
half the problems of each GPU held out), so every held-out problem keeps all its
configurations and their ranking can be checked. The rows of `LATER` (head_dim 256, whose
kernel came after the fit) are held out whole and summarized apart (`summary`'s "later"). The
engine runs each as `kernelplan.build(..., route="ws", ws=...)`: the preprocess that zeroes the
dQ buffer, the kernel, the cast.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashscope.simulator.calibrate.validation import error_stats
from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import kernelplan
from flashscope.simulator.timing.engine import call_time_s, simulate_workload

RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
# The results of the kernel as it ships (dQ reduce-added from shared memory, the buffer zeroed
# by the preprocess); the older hopper-backward-*.json measured earlier versions of it.
RESULTS = {
    "h100-sxm": (
        "hopper-backward-NVIDIA-H100-80GB-HBM3-2026-11-26-dq-fused.json",
        "hopper-backward-odd-NVIDIA-H100-80GB-HBM3-2026-11-26-dq-fused.json",
    ),
    "h200": ("hopper-backward-NVIDIA-H200-2026-11-27-dq-fused.json",),
}
# Results of kernels measured after WS_CHAIN and WS_FP32 were fitted: every row held out. The
# head_dim 256 kernel as it ships (its stage given back a step later): first beside the one
# before it, where its kinds carry the suffix "+defer" (`LATER_KINDS`), then on its own.
LATER = {
    "h100-sxm": (
        "hopper-backward-d256-deferred-release-NVIDIA-H100-80GB-HBM3-2026-11-27.json",
        "hopper-backward-NVIDIA-H100-80GB-HBM3-2026-11-27-d256-deferred.json",
        "hopper-backward-odd-NVIDIA-H100-80GB-HBM3-2026-11-27-d256-deferred.json",
    ),
}
LATER_KINDS = {LATER["h100-sxm"][0]: "+defer"}
LATER_FILES = frozenset(f for files in LATER.values() for f in files)
SPLIT_SEED = 20261127
# Pairs of one problem whose measured times differ by more than this share count for ranking.
RANK_GAP = 0.05
# Any placeholder: the Gluon backward has tiles of its own (`kernelplan.WsConfig`).
_TILES = TileConfig(64, 64, 2, 4)


@dataclass(frozen=True)
class Row:
    gpu: str  # preset key
    source: str  # result file
    problem: AttentionProblem
    config: kernelplan.WsConfig
    ms: float  # measured

    @property
    def problem_key(self) -> tuple[str, str, int, int, bool, str]:
        p = self.problem
        return (self.gpu, self.source, p.head_dim, p.seq_q, p.causal, p.dtype)


def problem_of(row: dict[str, Any]) -> AttentionProblem:
    d, n = row["d"], row["n"]
    return AttentionProblem(
        seq_q=n,
        head_dim=d,
        batch=max(1, round(16384 / n)),
        heads=2048 // d,
        causal=bool(row["causal"]),
        dtype={"float16": "fp16", "bfloat16": "bf16"}[row["dtype"]],
    )


def all_rows(later: bool = False) -> list[Row]:
    """The rows of `RESULTS`, and with `later` those of `LATER` after them."""
    rows = []
    sources = [(g, f) for g, files in RESULTS.items() for f in files]
    if later:
        sources += [(g, f) for g, files in LATER.items() for f in files]
    for gpu, name in sources:
        suffix = LATER_KINDS.get(name, "")
        for r in json.loads((RESULTS_DIR / name).read_text())["time"]:
            p = problem_of(r)
            for kind, ms in r["ms"].items():
                listed = kind.removeprefix("gluon")
                if listed == kind or not listed.endswith(suffix):
                    continue
                cfg = kernelplan.WsConfig(*json.loads(listed.removesuffix(suffix)))
                rows.append(Row(gpu, name, p, cfg, float(ms)))
    return rows


def held_out(rows: list[Row]) -> set[tuple[Any, ...]]:
    """The held-out problems: per GPU, half of those of `RESULTS` (rounded down) at random
    (`SPLIT_SEED`), and every one of `LATER`."""
    out: set[tuple[Any, ...]] = {r.problem_key for r in rows if r.source in LATER_FILES}
    for gpu in RESULTS:
        keys = sorted({r.problem_key for r in rows if r.gpu == gpu and r.source not in LATER_FILES})
        random.Random(f"{SPLIT_SEED}/{gpu}").shuffle(keys)
        out.update(keys[: len(keys) // 2])
    return out


def model_ms(row: Row) -> float:
    gpu = hardware.from_name(row.gpu)
    w = kernelplan.build("fa2-bwd", row.problem, _TILES, gpu_key=row.gpu, route="ws", ws=row.config)
    return call_time_s(simulate_workload(w, gpu)) * 1e3


def errors(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean absolute percentage error, bias (mean signed error), worst, share within 10%, as
    fractions, from rows carrying their model time (`model` key): `validation.error_stats`."""
    if not rows:
        return {"rows": 0}
    ids = [str(i) for i in range(len(rows))]
    st = error_stats(ids, [r["ms"] for r in rows], [r["model"] for r in rows])
    return {
        "rows": st["n"],
        "mape": st["mape_pct"] / 100,
        "bias": st["bias_pct"] / 100,
        "worst": st["worst_pct"] / 100,
        "within_10": st["within_10pct"],
    }


def ranking(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Pairs of configurations of one problem whose measured times differ by more than
    RANK_GAP, and how many of them the model orders the same way."""
    by: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["gpu"], r["source"], *r["problem"]), []).append(r)
    pairs = right = 0
    for group in by.values():
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                if abs(a["ms"] / b["ms"] - 1.0) <= RANK_GAP:
                    continue
                pairs += 1
                right += (a["ms"] < b["ms"]) == (a["model"] < b["model"])
    return {"pairs": pairs, "right": right}


def compare(rows: list[Row] | None = None) -> list[dict[str, Any]]:
    """Every row (or `rows`, some of them) with its model time and side of the split."""
    every = all_rows(later=True)
    rows = every if rows is None else rows
    out = held_out(every)
    return [
        {
            "gpu": r.gpu,
            "source": r.source,
            "problem": list(r.problem_key[2:]),
            "config": [r.config.consumers, r.config.block_m, r.config.stages, r.config.band],
            "ms": r.ms,
            "model": model_ms(r),
            "held_out": r.problem_key in out,
        }
        for r in rows
    ]


def summary(compared: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per GPU and side of the split: `errors` and `ranking`; "later": the rows of `LATER`."""
    out: dict[str, dict[str, Any]] = {}
    for gpu in RESULTS:
        mine = [r for r in compared if r["gpu"] == gpu]
        parts = {
            "held_out": [r for r in mine if r["held_out"] and r["source"] not in LATER_FILES],
            "fit": [r for r in mine if not r["held_out"]],
            "later": [r for r in mine if r["source"] in LATER_FILES],
        }
        for side, part in parts.items():
            if part or side != "later":
                out.setdefault(gpu, {})[side] = {**errors(part), "ranking": ranking(part)}
    return out
