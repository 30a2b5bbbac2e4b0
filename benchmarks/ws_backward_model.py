"""The engine's route "ws" (the Gluon backward) against its measured times (no GPU needed).

    .venv/bin/python benchmarks/ws_backward_model.py [--out benchmarks/results] [--fit]

Simulates every `gluon[...]` row of the Hopper backward's dq-fused results (simulator/
calibrate/ws_rows.py says which rows, how, and which half is held out) and writes each row's
model time beside its measured time, per GPU the held-out and fit halves' mean absolute
percentage error, bias, worst error and share within 10%, how many pairs of configurations of
one problem (measured more than 5% apart) the model orders right, and the slowest simulation
of one configuration (best of three), to ws-backward-model-<date>.json. `--fit` first searches
the two fitted terms (kernelplan.WS_CHAIN, WS_FP32) on the fit half and prints the grid; the
record is then of the best (copy them into kernelplan to ship them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flashscope.simulator.calibrate import ws_rows
from flashscope.simulator.timing import kernelplan

CHAINS = (1, 2, 3, 4)
FP32 = tuple(float(x) for x in np.arange(2.0, 6.51, 0.5))


def fit(rows: list[ws_rows.Row]) -> dict[str, object]:
    """The grid of (WS_CHAIN, WS_FP32) on the fit half: its mean |error| at each point."""
    out = ws_rows.held_out(rows)
    half = [r for r in rows if r.problem_key not in out]
    grid = []
    for chain in CHAINS:
        for fp32 in FP32:
            kernelplan.WS_CHAIN, kernelplan.WS_FP32 = chain, fp32
            e = np.array([ws_rows.model_ms(r) / r.ms - 1.0 for r in half])
            grid.append({"chain": chain, "fp32": fp32, "mape": float(np.abs(e).mean())})
            print(json.dumps(grid[-1]), flush=True)
    best = min(grid, key=lambda g: g["mape"])
    kernelplan.WS_CHAIN, kernelplan.WS_FP32 = int(best["chain"]), float(best["fp32"])
    return {"best": best, "grid": grid}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--fit", action="store_true", help="search the fitted terms first")
    args = ap.parse_args(argv)
    rows = ws_rows.all_rows(later=True)  # the rows measured after the fit are held out
    searched = fit(rows) if args.fit else None
    slowest = 0.0
    for r in rows[:: max(1, len(rows) // 24)]:  # one configuration's simulation, best of 3
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            ws_rows.model_ms(r)
            best = min(best, time.perf_counter() - t0)
        slowest = max(slowest, best)
    compared = ws_rows.compare(rows)
    summary = ws_rows.summary(compared)
    doc = {
        "what": "the engine's flashscope backward, route ws, against the Gluon backward's times",
        "date": dt.date.today().isoformat(),
        "results": ws_rows.RESULTS,
        "later": ws_rows.LATER,
        "split": f"by problem, half of each GPU's held out (seed {ws_rows.SPLIT_SEED}); the "
        "rows of 'later' all held out and summarized apart",
        "terms": {"WS_CHAIN": kernelplan.WS_CHAIN, "WS_FP32": kernelplan.WS_FP32},
        "summary": summary,
        "slowest_simulation_ms": round(slowest * 1e3, 1),
        "rows": compared,
    }
    if searched is not None:
        doc["fit"] = searched
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"ws-backward-model-{doc['date']}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"summary": summary, "slowest_simulation_ms": doc["slowest_simulation_ms"]}))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
