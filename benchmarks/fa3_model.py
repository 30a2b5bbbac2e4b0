"""The FA-3 model against the Hopper forward's measured times (no GPU needed).

    .venv/bin/python benchmarks/fa3_model.py [--out benchmarks/results]

Runs simulator/timing/fa3.py on every `ws[...]` row of benchmarks/results/hopper-forward-*.json
(simulator/calibrate/fa3_rows.py says which rows and how), with the GPU preset's calibrated
efficiencies and nothing fitted to these rows, and writes each row's model time beside its
measured time and the mean absolute percentage error, overall and by GPU, head_dim and
causal, to fa3-model-vs-hopper-forward-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flashscope.simulator.calibrate.fa3_rows import compare, measured_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    paths = sorted((ROOT / "benchmarks" / "results").glob("hopper-forward-*.json"))
    t0 = time.perf_counter()
    result = compare(measured_rows(paths))
    seconds = time.perf_counter() - t0
    for key, value in sorted(result["mape"].items()):
        print(f"MAPE {key:10s} {value:6.1%}")
    print(f"{result['count']} rows in {seconds:.1f} s")
    now = dt.datetime.now(dt.UTC)
    record = {
        "benchmark": "fa3_model",
        "date": now.isoformat(timespec="seconds"),
        "sources": [p.name for p in paths],
        "seconds": seconds,
        **result,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"fa3-model-vs-hopper-forward-{now.date().isoformat()}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
