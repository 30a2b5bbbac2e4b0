"""Ship the fresh users' sweeps to /compare as one dataset (no GPU needed).

    python benchmarks/fresh_dataset.py DATASET [DATASET …] \
        --out app/data/validation-fresh-<gpu>-<date>.json.gz

The datasets of sweeps drawn after the engine was last fitted (`make_user_sweep.py` with other
seeds; docs/validation.md, "Configurations in no committed sweep") become one dataset of sweep
"fresh": each row's id gets its sweep's seed in front (the sweeps number their rows alike),
every row is held out (nothing was fitted on any of them; the generator's fit/held-out labels
do not apply), and the rows are re-simulated with the current engine by
`flashscope validate --measured`, which writes the summary. Written gzipped with no timestamp
in the header, so the same inputs give the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.compiled_ablation import report, resimulated

SWEEP = "fresh"


def merged(paths: list[Path]) -> dict[str, Any]:
    docs = [json.loads(p.read_text()) for p in paths]
    if len({d["gpu"] for d in docs}) != 1:
        raise SystemExit("the datasets must come from one GPU")
    rows = []
    for doc in docs:
        seed = json.loads((ROOT / doc["sweep_file"]).read_text())["seed"]
        for row in doc["rows"]:
            rows.append({**row, "id": f"s{seed}-{row['id']}", "subset": "holdout"})
    out = {**docs[0], "sweep": SWEEP, "rows": rows}
    out["sweep_file"] = ", ".join(d["sweep_file"] for d in docs)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    paths = [p.resolve() for p in args.datasets]
    doc = resimulated(merged(paths))
    doc["merged_from"] = [str(p.relative_to(ROOT)) for p in paths]
    name = args.out.name.removesuffix(".gz")
    with open(args.out, "wb") as f, gzip.GzipFile(name, "wb", 9, f, mtime=0) as z:
        z.write(json.dumps(doc).encode())
    report(doc, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
