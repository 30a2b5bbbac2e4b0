"""One validation dataset from the parts of a sweep measured side by side on several GPUs of one
host (`flashscope validate --sweep S --only <ids> …` per GPU), re-simulated (no GPU needed).

    python benchmarks/merge_shards.py PART.json [PART.json …] --out DATASET.json

The parts must share the sweep, the GPU and the software; their rows are put back in the sweep's
order, their compile and timing seconds added up and Nsight Compute's attempts kept side by side
(`parts` says how many), and `flashscope validate --measured` writes the summary
(`compiled_ablation.resimulated`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.compiled_ablation import report, resimulated

SAME = ("sweep", "sweep_file", "gpu", "device", "torch", "triton", "cuda", "sms", "l2_bytes")


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The parts as one dataset (before re-simulation); SystemExit where they do not match."""
    for field in SAME:
        if len({json.dumps(p.get(field)) for p in parts}) != 1:
            raise SystemExit(f"the parts differ in {field}")
    order = [e["id"] for e in json.loads((ROOT / parts[0]["sweep_file"]).read_text())["entries"]]
    rows = {r["id"]: r for p in parts for r in p["rows"]}
    if len(rows) != sum(len(p["rows"]) for p in parts):
        raise SystemExit("a row is in more than one part")
    out = dict(parts[0])
    out["rows"] = [rows[i] for i in order if i in rows]
    out["seconds"] = {k: sum((p.get("seconds") or {}).get(k) or 0.0 for p in parts)
                      for k in ("compile", "timing")}  # fmt: skip
    ncu = dict(parts[0].get("ncu") or {})
    ncu["attempts"] = [a for p in parts for a in (p.get("ncu") or {}).get("attempts", [])]
    out["ncu"] = ncu
    out["parts"] = len(parts)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    out = resimulated(merged([json.loads(p.read_text()) for p in args.parts]))
    out["parts"] = len(args.parts)  # the re-simulation keeps only a dataset's own fields
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    report(out, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
