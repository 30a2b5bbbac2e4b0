"""The validation sweep's writer (benchmarks/make_validation_sweep.py): entries, pinned routes."""

from __future__ import annotations

import json
import random
from pathlib import Path

from benchmarks.make_validation_sweep import CAPPED, capped_entries, entries, pin_routes
from flashscope.simulator.calibrate.validation import check_config, problem_key

SWEEP = Path(__file__).resolve().parents[1] / "benchmarks" / "sweeps" / "validation.json"


def test_the_committed_sweep_is_what_the_writer_makes():
    committed = json.loads(SWEEP.read_text())["entries"]
    assert committed == entries()
    for e in committed:
        check_config(e["config"])


def test_routes_are_pinned_to_an_earlier_datasets_backward_rows_only():
    out = entries()
    backward = [e["id"] for e in out if e["config"]["algo"] == "fa2-bwd"]
    chosen = random.sample(backward, 7)
    routes = {i: random.choice(["separate", "atomic"]) for i in chosen}
    forward_id = next(e["id"] for e in out if e["config"]["algo"] == "fa2")
    dataset = {
        "rows": [{"id": i, "config": {"route": r}} for i, r in routes.items()]
        + [{"id": forward_id, "config": {"route": "atomic"}}]  # a forward row: never pinned
        + [{"id": "not-in-the-sweep", "config": {"route": "atomic"}}]
    }
    assert pin_routes(out, dataset) == 7
    got = {e["id"]: e["config"].get("route") for e in out if "route" in e["config"]}
    assert got == routes
    for e in out:
        check_config(e["config"])


def test_the_register_cap_sweep_is_the_forward_problems_at_capped_tiles():
    doc = json.loads((SWEEP.parent / "register-cap.json").read_text())["entries"]
    assert doc == capped_entries()
    forward = {problem_key(e["config"]) for e in entries() if e["config"]["algo"] == "fa2"}
    assert {problem_key(e["config"]) for e in doc} == forward
    for e in doc:
        check_config(e["config"])
        assert e["config"]["maxnreg"] == CAPPED[e["config"]["head_dim"]].maxnreg
