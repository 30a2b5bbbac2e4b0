"""Kernels compiled to 32 registers a thread, which keep their live values in local memory,
against the timing engine (no GPU: the shipped users' datasets, re-simulated).

    python benchmarks/local_memory.py --out benchmarks/results/local-memory-kernels-DATE.json

A 2-warp Triton kernel whose tiles ask for far more registers than the 255 a thread may hold
can compile to 32 of them and reload nearly every operand from local memory
(docs/validation.md). Per GPU, this script lists every such kernel Nsight Compute measured in
the users' sweep (its registers, `launch__registers_per_thread`, at 32 and local loads above
zero): its local loads per SM and second (over min(CTAs, SMs) SMs), against those of every other
spilling kernel, and the engine's time for it alone against Nsight Compute's duration. Then it
tries one remedy: a local rate of their own (`--rates`, GB/s per SM, in place of
`local_gbs` for launches whose compiled registers are 32) and re-simulates the whole calls,
fit and held-out halves apart (`validation.error_stats`), where 0 is the engine as shipped.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime as dt
import gzip
import json
import platform
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np

from benchmarks.hostinfo import cpu_model
from flashscope.simulator.calibrate.known_misses import FLOOR_REGISTERS, kernel_in_local_memory
from flashscope.simulator.calibrate.validation import (
    error_stats,
    ncu_kernels,
    simulate_config,
    workload_of,
)
from flashscope.simulator.core import hardware
from flashscope.simulator.core.gpu import GPU
from flashscope.simulator.timing import compiled, engine
from flashscope.simulator.timing.workload import alone

DATASETS = {
    "h100-sxm": ROOT / "app" / "data" / "validation-users-h100-2026-11-26.json.gz",
    "h200": ROOT / "app" / "data" / "validation-users-h200-2026-11-27.json.gz",
}


def _local_loads(k: dict[str, Any]) -> float:
    return float(k.get(compiled.LOCAL_LOAD) or 0.0)


def kernels(rows: list[dict[str, Any]], gpu: GPU) -> tuple[list[dict[str, Any]], list[float]]:
    """(each kernel at FLOOR_REGISTERS that reloads from local memory, with the engine's time
    for it alone; the local loads per SM and second of every other kernel that reloads)."""
    floor, others = [], []
    for row in rows:
        for k in ncu_kernels(row):
            ns, name = k.get(compiled.NCU_DURATION), compiled.KERNEL_LAUNCH.get(k.get("name", ""))
            if not ns or name is None or _local_loads(k) <= 0:
                continue
            seconds = float(ns) * 1e-9
            sms = min(int(k.get("launch__grid_size") or gpu.sms), gpu.sms)
            rate = _local_loads(k) / seconds / sms / 1e9
            if not kernel_in_local_memory(k):
                others.append(rate)
                continue
            simulated = engine.alone_time_s(alone(workload_of(row["config"], gpu), name), gpu)
            c = row["config"]
            floor.append({"id": row["id"], "subset": row["subset"], "kernel": name,
                          "tiles": [c["block_m"], c["block_n"], c["warps"], c["stages"]],
                          "head_dim": c["head_dim"], "spread": row.get("tiles") == "spread",
                          "local_load_gbs_per_sm": rate, "measured_us": seconds * 1e6,
                          "simulated_us": simulated * 1e6,
                          "error_pct": (simulated / seconds - 1) * 100})  # fmt: skip
    return floor, others


@contextlib.contextmanager
def own_rate(gbs: float) -> Iterator[None]:
    """The engine with launches compiled to FLOOR_REGISTERS charging local bytes at `gbs` GB/s
    per SM (0: as shipped)."""
    work = engine._work

    def patched(w, t, r, hit, spills):  # type: ignore[no-untyped-def]
        if gbs > 0 and w.regs is not None and w.regs <= FLOOR_REGISTERS:
            r = copy.copy(r)
            r.eff = dataclasses.replace(r.eff, local_gbs=gbs)
        return work(w, t, r, hit, spills)

    engine._work = patched
    try:
        yield
    finally:
        engine._work = work


def halves(rows: list[dict[str, Any]], gpu: GPU) -> dict[str, Any]:
    """Time error stats of the whole calls, re-simulated, per subset."""
    out = {}
    for subset in ("fit", "holdout"):
        rs = [r for r in rows if r["subset"] == subset]
        sim = [engine.call_time_s(simulate_config(r["config"], gpu)) * 1e6 for r in rs]
        out[subset] = error_stats([r["id"] for r in rs], [r["measured_us"] for r in rs], sim)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rates", default="0,20,40,50,60,80,130",
                    help="GB/s per SM to try, comma-separated")  # fmt: skip
    args = ap.parse_args()
    rates = [float(x) for x in args.rates.split(",")]
    result: dict[str, Any] = {
        "benchmark": "kernels in local memory",
        "date": dt.date.today().isoformat(),
        "cpu": cpu_model(),
        "versions": {"python": platform.python_version(), "numpy": np.__version__},
        "gpus": {},
    }
    for preset, path in DATASETS.items():
        gpu = hardware.from_name(preset)
        rows = json.loads(gzip.decompress(path.read_bytes()))["rows"]
        floor, others = kernels(rows, gpu)
        errors = [k["error_pct"] for k in floor]
        floor_rates = [k["local_load_gbs_per_sm"] for k in floor]
        trials = {}
        for gbs in rates:
            with own_rate(gbs):
                trials[f"{gbs:g}"] = halves(rows, gpu)
        summary = {
            "kernels": len(floor),
            "all_spread": all(k["spread"] for k in floor),
            "local_load_gbs_per_sm": [min(floor_rates), float(np.median(floor_rates)),
                                      max(floor_rates)],
            "others_local_load_gbs_per_sm": [float(np.median(others)),
                                             float(np.percentile(others, 90)), max(others)],
            "alone_error_pct": [min(errors), float(np.median(errors)), max(errors)],
        }  # fmt: skip
        result["gpus"][preset] = {"dataset": str(path.relative_to(ROOT)), "kernels": floor,
                                  "summary": summary, "own_rate_trials": trials}  # fmt: skip
        print(preset, json.dumps(summary), flush=True)
        for rate, t in trials.items():
            print(f"  {rate:>4} GB/s/SM: fit {t['fit']['mape_pct']:.2f}%, "
                  f"held out {t['holdout']['mape_pct']:.2f}%", flush=True)  # fmt: skip
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
