"""The FA-3 model's phases beside the kernel's recorded ones (benchmarks/warpgroups.py's
timelines, benchmarks/results/warpgroups-timelines-*.json).

A phase's length is compared per key block of one warpgroup, in the steady part of the first
tile: blocks 1 to n − 2 (the first and last blocks issue differently), every interval of that
phase of a block summed (a pipelined block has two softmax intervals: the softmax and, once P·V
is done, the rescale), and a wait that did not happen counted as 0 ns. Copies are the mean of
their intervals from issue to landing. `softmax_last` is the softmax of the first tile's last
block (under the causal mask, a masked block), per warpgroup. The recorded kernel is modelled
as such (`Fa3Config.recorded`: its softmax runs under its own P·V, the timed kernel's does not).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing.fa3 import TERMS, Fa3Terms, simulate_with_terms

BLOCK_PHASES = ("wait_k", "wait_v", "wait_turn", "qk", "softmax", "pv")
COPY_PHASES = ("load_k", "load_v")


def phase_lengths(intervals: list[dict[str, Any]], consumers: int) -> dict[str, float]:
    """Mean ns per block and warpgroup of each consumer phase, and per copy of K and V, over
    blocks 1 … n − 2 of tile 0; and the softmax of its last block (`softmax_last`)."""
    first = [iv for iv in intervals if iv["tile"] == 0]
    blocks = {iv["block"] for iv in first if iv["phase"] == "qk"}
    n = max(blocks) + 1 if blocks else 0
    steady = range(1, n - 1)
    out: dict[str, float] = {}
    for phase in BLOCK_PHASES:
        total = sum(
            iv["end_ns"] - iv["start_ns"]
            for iv in first
            if iv["phase"] == phase and iv["block"] in steady
        )
        out[phase] = total / max(1, consumers * len(steady))
    last = sum(
        iv["end_ns"] - iv["start_ns"]
        for iv in first
        if iv["phase"] == "softmax" and iv["block"] == n - 1
    )
    out["softmax_last"] = last / max(1, consumers)
    for phase in COPY_PHASES:
        spans = [
            iv["end_ns"] - iv["start_ns"]
            for iv in first
            if iv["phase"] == phase and iv["block"] in steady
        ]
        out[phase] = float(np.mean(spans)) if spans else 0.0
    return out


def recorded(path: Path) -> list[dict[str, Any]]:
    """The recorded runs of a timelines file (program 0 of each)."""
    return list(json.loads(path.read_text())["timelines"])


def compare_phases(
    runs: list[dict[str, Any]], gpu: str = "h100-sxm", terms: Fa3Terms = TERMS
) -> list[dict[str, Any]]:
    """For each recorded run: the configuration, the measured and the model's phase lengths and
    launch times (the plain kernel's median for the measured one)."""
    from flashscope.simulator.calibrate.fa3_rows import config_of

    out = []
    for run in runs:
        cfg = config_of("ws" + str(list(run["config"])))
        assert cfg is not None
        problem = AttentionProblem(
            seq_q=run["seq"],
            seq_k=run["seq"],
            head_dim=run["head_dim"],
            batch=run["batch"],
            heads=run["heads"],
            causal=run["causal"],
            dtype=run["dtype"],
        )
        prog = run["programs"][0]
        # the phases are the recorded kernel's (`Fa3Config.recorded`), the time the plain one's
        recorded_cfg = dataclasses.replace(cfg, recorded=True)
        res = simulate_with_terms(
            problem, recorded_cfg, gpu, terms, shown_tiles=1, max_intervals=100_000
        )
        timed = simulate_with_terms(problem, cfg, gpu, terms, shown_tiles=1, max_intervals=1)
        out.append(
            {
                "variant": run["variant"],
                "config": list(run["config"]),
                "head_dim": run["head_dim"],
                "causal": run["causal"],
                "measured_ms": run["plain_ms"],
                "model_ms": timed.time_ns / 1e6,
                "measured": phase_lengths(prog["intervals"], cfg.consumers),
                "model": phase_lengths(res.intervals, cfg.consumers),
            }
        )
    return out


UNSEEN_PHASES = ("qk", "softmax", "pv", "load_k", "load_v")


def unseen(paths: list[Path], terms: Fa3Terms = TERMS) -> dict[str, Any]:
    """The model's phases against recorded launches whose phases no term was fitted to (the
    timelines of benchmarks/results/warpgroups-*.json runs, each on its own GPU's preset): per
    GPU, the launches and the median |model − recorded| / recorded of each phase's length over
    them (a recorded length of 0 left out). Their launches' times are not judged here: the same
    configurations' variant rows are in `fa3_rows`' dataset."""
    from flashscope.simulator.core import hardware

    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        doc = json.loads(path.read_text())
        runs = [r for r in doc.get("timelines", []) if "programs" in r]
        if runs:
            gpu = hardware.resolve(doc["device"])
            by_gpu.setdefault(gpu, []).extend(compare_phases(runs, gpu, terms))
    out: dict[str, Any] = {"sources": [p.name for p in paths]}
    for gpu, rows in sorted(by_gpu.items()):
        phases = {}
        for phase in UNSEEN_PHASES:
            errors = [
                abs(r["model"][phase] - r["measured"][phase]) / r["measured"][phase]
                for r in rows
                if r["measured"][phase] > 0
            ]
            phases[phase] = float(np.median(errors))
        out[gpu] = {"launches": len(rows), "phase_median_error": phases}
    return out
