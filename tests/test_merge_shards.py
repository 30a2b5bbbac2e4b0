"""benchmarks/merge_shards.py: a sweep measured in parts on several GPUs, put back together."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from benchmarks.merge_shards import merged

DATASET = Path("benchmarks/results/validation-users-unseen-3-NVIDIA-H100-80GB-HBM3-2026-11-27.json")


def _parts(doc: dict, n: int) -> list[dict]:
    rows = doc["rows"][:]
    random.shuffle(rows)
    return [{**doc, "rows": rows[i::n], "seconds": {"compile": 1.0 + i, "timing": 10.0},
             "ncu": {**doc["ncu"], "attempts": [{"part": i}]}} for i in range(n)]  # fmt: skip


def test_parts_come_back_in_the_sweeps_order() -> None:
    doc = json.loads(DATASET.read_text())
    n = random.randint(2, 5)
    out = merged(_parts(doc, n))
    assert [r["id"] for r in out["rows"]] == [r["id"] for r in doc["rows"]]
    assert out["rows"] == doc["rows"] and out["parts"] == n
    assert out["seconds"] == {"compile": sum(1.0 + i for i in range(n)), "timing": 10.0 * n}
    assert out["ncu"]["attempts"] == [{"part": i} for i in range(n)]


def test_parts_of_other_runs_are_refused() -> None:
    doc = json.loads(DATASET.read_text())
    a, b = _parts(doc, 2)
    with pytest.raises(SystemExit, match="gpu"):
        merged([a, {**b, "gpu": "h200"}])
    with pytest.raises(SystemExit, match="more than one part"):
        merged([a, {**b, "rows": b["rows"] + a["rows"][:1]}])
