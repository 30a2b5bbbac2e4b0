"""The FA-3 model against the Hopper forward's measured times and timelines (no GPU needed).

    .venv/bin/python benchmarks/fa3_model.py [--out benchmarks/results] [--fit]

Runs simulator/timing/fa3.py on every `ws[...]` row of benchmarks/results/hopper-forward-*.json
and every variant of benchmarks/results/warpgroups-*.json (simulator/calibrate/fa3_rows.py says
which rows, how, and which half of them is held out), and on the recorded timelines
(simulator/calibrate/fa3_timelines.py). Writes each row's model time beside its measured time,
the mean absolute percentage error of the fit half, the held-out half and all rows (by GPU,
head_dim and causal), the variants' ranking (also as the kernel routes them, causal steps
merged: `fa3_rows.routed_ranking`), the timelines' phase lengths, and the time one
configuration takes to simulate from a cold cache (the cases of benchmarks/simulator_speed.py
at N = 16384, each the best of three runs), to fa3-model-<date>.json. `--fit` first fits the
model's terms on the fit half and the timelines (simulator/calibrate/fa3_fit.py) and prints
them; the record is then of the fitted terms (copy them into `fa3.TERMS` to ship them).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.simulator_speed import fa3_problems
from flashscope.simulator.calibrate import fa3_fit
from flashscope.simulator.calibrate.fa3_rows import (
    all_rows,
    compare,
    result_paths,
    routed_ranking,
)
from flashscope.simulator.calibrate.fa3_timelines import compare_phases, recorded, unseen
from flashscope.simulator.timing import fa3
from flashscope.simulator.timing.fa3 import TERMS, Fa3Terms


def cold_ms(terms: Fa3Terms) -> dict[str, float]:
    """Milliseconds to simulate one configuration with nothing remembered (best of three), for
    the FA-3 cases of benchmarks/simulator_speed.py."""
    out = {}
    for name, p, cfg in fa3_problems():
        runs = []
        for _ in range(3):
            fa3._sm_time.cache_clear()
            t0 = time.perf_counter()
            fa3.simulate_with_terms(p, cfg, "h100-sxm", terms)
            runs.append((time.perf_counter() - t0) * 1e3)
        out[name] = min(runs)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--fit", action="store_true", help="fit the terms first")
    parser.add_argument("--evals", type=int, default=200, help="the fit's loss evaluations")
    args = parser.parse_args()
    results = ROOT / "benchmarks" / "results"
    paths = result_paths(results)
    rows, pinned = all_rows(results)
    runs = [run for path in paths["timelines"] for run in recorded(path)]
    terms = TERMS
    t0 = time.perf_counter()
    if args.fit:
        terms, best, start = fa3_fit.fit(rows, runs, pinned, max_evals=args.evals)
        print(f"fit: loss {start:.4f} -> {best:.4f}")
        print(terms)
    result = compare(rows, terms, pinned)
    routed = routed_ranking(result["rows"], paths["variants_merged"], terms)
    phases = compare_phases(runs, terms=terms)
    # the recordings in the variants' files made after the fitted timelines (a file of the same
    # day records the same kernel again), whose phases no term was fitted to
    fitted = max(json.loads(p.read_text())["date"] for p in paths["timelines"])
    later = [p for p in paths["variants"] if json.loads(p.read_text())["date"] > fitted]
    recorded_apart = unseen(later, terms)
    seconds = time.perf_counter() - t0
    speed = cold_ms(terms)
    for side in ("mape_held_out", "mape_fit", "mape"):
        for key, value in sorted(result[side].items()):
            print(f"{side:14s} {key:10s} {value:6.1%}")
    rank = result["ranking"]
    print(f"ranking: {rank['right']} of {rank['pairs']} pairs ({rank['accuracy']:.0%})")
    rep = rank["reproduced"]
    print(
        f"  on the pairs every run of their GPU repeats: {rep['right']} of {rep['pairs']} "
        f"({rep['noisy']} pairs apart in some runs only, {rep['one_run']} of one run)"
    )
    rep = routed["reproduced"]
    print(
        f"ranking as routed (causal variants with merged steps): {routed['right']} of "
        f"{routed['pairs']} pairs ({routed['accuracy']:.0%}); on the pairs every run repeats "
        f"{rep['right']} of {rep['pairs']}; merged rows' time MAPE "
        f"{routed['merged_mape']['all']:.1%} ({routed['merged_rows']} rows, never fitted)"
    )
    for gpu, v in recorded_apart.items():
        if gpu != "sources":
            errs = ", ".join(f"{k} {e:.0%}" for k, e in v["phase_median_error"].items())
            print(f"timelines never fitted, {gpu}: {v['launches']} launches, phases {errs}")
    print(f"{result['count']} rows, {result['groups']} configurations, {seconds:.1f} s")
    print("one configuration, cold: " + ", ".join(f"{v:.0f}" for v in speed.values()) + " ms")
    now = dt.datetime.now(dt.UTC)
    record = {
        "benchmark": "fa3_model",
        "date": now.isoformat(timespec="seconds"),
        "sources": [p.name for group in paths.values() for p in group],
        "terms": dataclasses.asdict(terms),
        "seconds": seconds,
        "cold_ms": speed,
        "load_average_1_5_15": list(os.getloadavg()),
        "timelines": phases,
        "timelines_unseen": recorded_apart,
        **result,
        "ranking_routed": routed,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"fa3-model-{now.date().isoformat()}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
