"""flashscope.simulator.calibrate.known_misses: the measured misses, their figures held to the
shipped datasets, and each one quoted by a note or kept for the documentation alone."""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest

from flashscope.app.datasets import DATA_DIR
from flashscope.simulator.calibrate.explain import KNOWN_MISSES, notes
from flashscope.simulator.calibrate.known_misses import KnownMiss, gpu_label, known_miss
from flashscope.simulator.calibrate.validation import simulate_config
from flashscope.simulator.core.hardware import from_name


def _rows(miss: KnownMiss, gpu: str) -> list[dict[str, Any]]:
    """The shipped validation rows of `gpu` in the miss's configuration class."""
    (path,) = [
        p for p in DATA_DIR.glob("validation-*.json") if json.loads(p.read_text())["gpu"] == gpu
    ]
    rows = json.loads(path.read_text())["rows"]
    return [r for r in rows if all(r["config"].get(k) == v for k, v in miss.where.items())]


def _name(miss: KnownMiss) -> str:
    return f"{miss.key}@{'+'.join(miss.gpus)}"


def test_each_miss_is_named_once_per_gpu_and_reads_as_the_notes_print_it():
    pairs = [(m.key, g) for m in KNOWN_MISSES for g in m.gpus]
    assert len(pairs) == len(set(pairs))
    for m in KNOWN_MISSES:
        low, high = m.error_pct
        assert low <= high and m.configs and m.lacks and m.source and m.where
        assert all(known_miss(m.key, g) is m for g in m.gpus)
    atomic = known_miss("atomic-route")
    assert (atomic.span, atomic.direction, atomic.on) == ("11–25%", "under-predicted", "the H200")
    assert gpu_label("h100-sxm") == "H100"
    with pytest.raises(KeyError):
        known_miss("atomic-route", "h100-sxm")


@pytest.mark.parametrize("miss", [m for m in KNOWN_MISSES if m.note], ids=_name)
def test_a_quoted_miss_is_quoted_on_every_gpu_it_was_measured_on(miss):
    for gpu in miss.gpus:
        rows = _rows(miss, gpu)
        assert rows, f"no shipped {gpu} row of {miss.key}"
        row = rows[len(rows) // 2]
        found = notes(row, simulate_config(row["config"], from_name(gpu)))
        texts = [n["text"] for n in found if n["kind"] == miss.note]
        assert any(f"{miss.worst_pct:.0f}%" in t for t in texts), (gpu, texts)


def test_every_miss_is_quoted_by_a_rule_or_kept_for_the_documentation_only():
    quoted = {m.key for m in KNOWN_MISSES if m.note is not None}
    documentation_only = {m.key for m in KNOWN_MISSES if m.note is None}
    assert quoted == {"lockstep-warpgroups", "atomic-route"}
    assert documentation_only == {"bwd-dq-alone", "bwd-dkdv-alone", "atomic-dkdv-alone"}


@pytest.mark.parametrize("miss", [m for m in KNOWN_MISSES if not m.modelled], ids=_name)
def test_a_miss_still_in_the_engine_spans_the_shipped_rows_errors(miss):
    for gpu in miss.gpus:
        rows = _rows(miss, gpu)
        if miss.kernel is None:
            errors = [r["error_pct"] for r in rows]
        else:
            errors = [k["error_pct"] for r in rows for k in r.get("kernels_alone") or []
                      if k["name"] == miss.kernel]  # fmt: skip
        assert errors, f"no shipped {gpu} figures of {miss.key}"
        assert (round(min(errors)), round(max(errors))) == miss.error_pct
        if miss.mean_pct is not None:
            assert round(statistics.mean(errors), 1) == miss.mean_pct
