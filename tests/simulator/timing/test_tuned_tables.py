"""The Gluon kernels' entries one GPU lends another (simulator/timing/tuned_tables.py)."""

from __future__ import annotations

import copy
import json
import random

import numpy as np

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import kernelplan
from flashscope.simulator.timing.tuned_tables import FAMILIES, LENT, OTHER, lend

T = TileConfig(64, 64, 4, 2)
DIMS = (64, 128, 256)


def _random_tables(rng: np.random.Generator) -> dict[str, dict]:
    """A few GPUs, each with entries of either kernel at some head dims, beside sections and
    routes that are not the Gluon kernels' (Triton tiles, the backward's dQ route)."""
    gpus = {}
    for g in range(int(rng.integers(1, 5))):
        table: dict = {"configs": {f"fwd/16/d64/full/n{1024 << g}": [g, 64, 4, 3, 0]}}
        table["routes"] = {f"bwd-route/16/d{int(rng.choice(DIMS))}/full": "atomic"}
        for d in DIMS:
            if rng.random() < 0.5:  # this GPU swept the forward at d
                for n in rng.choice([1024, 2048, 4096], size=int(rng.integers(1, 4))):
                    mask = "causal" if rng.random() < 0.5 else "full"
                    table["routes"][f"fwd-route/16/d{d}/{mask}/n{n}"] = str(
                        rng.choice(["ws", "triton"])
                    )
                    if rng.random() < 0.7:
                        section = str(rng.choice(["ws", "ws-edge"]))
                        table.setdefault(section, {})[f"fwd/16/d{d}/{mask}/n{n}"] = [g, d, 2]
            if rng.random() < 0.5:  # and the backward
                for n in rng.choice([1024, 2048, 4096], size=int(rng.integers(1, 4))):
                    section = str(rng.choice(["bwd-ws", "bwd-ws-edge"]))
                    table.setdefault(section, {})[f"bwd/16/d{d}/full/n{n}"] = [2, 64, 2, g]
        gpus[f"GPU {g}"] = table
    return gpus


def _own(table: dict, family: str, d: int) -> dict:
    """(section, key) → value of the kernel's entries at head dim d: its sections' keys, and the
    forward's routes, whose third part is "d<d>" (written here apart from the module's)."""
    sections = ("ws", "ws-edge", "routes") if family == "fwd" else ("bwd-ws", "bwd-ws-edge")
    return {
        (section, key): value
        for section in sections
        for key, value in table.get(section, {}).items()
        if key.split("/")[2] == f"d{d}" and (section != "routes" or key.startswith("fwd-route/"))
    }


def test_a_gpu_keeps_its_own_and_takes_what_it_lacks_from_the_richest_table() -> None:
    seed = random.SystemRandom().randrange(2**31)
    rng = np.random.default_rng(seed)
    for trial in range(200):
        gpus = _random_tables(rng)
        before = copy.deepcopy(gpus)
        out = lend(gpus)
        what = f"seed={seed} trial={trial}"
        assert gpus == before, what  # the argument is left as it is
        assert set(out) == {*gpus, OTHER}, what
        for name, table in out.items():
            # sections that are not the Gluon kernels' are the GPU's own, unchanged
            raw = gpus.get(name, {})
            assert table.get("configs") == raw.get("configs"), what
            bwd_routes = {k: v for k, v in table.get("routes", {}).items() if k.startswith("bwd")}
            assert bwd_routes == {
                k: v for k, v in raw.get("routes", {}).items() if k.startswith("bwd")
            }
            for family in FAMILIES:
                for d in DIMS:
                    own = _own(raw, family, d)
                    counts = {g: len(_own(t, family, d)) for g, t in gpus.items()}
                    best = max(counts.values())
                    donor = min(g for g, c in counts.items() if c == best)
                    got = _own(table, family, d)
                    if own:  # its own entries stand, nothing added
                        assert got == own, what
                        assert f"{family}/d{d}" not in table.get(LENT, {}), what
                    elif best:
                        assert got == _own(gpus[donor], family, d), what
                        assert table[LENT][f"{family}/d{d}"] == donor, what
                    else:
                        assert got == {}, what


def test_the_shipped_table_keeps_each_gpus_own_entries() -> None:
    """The H100 and the H200 were each swept at head dims 64, 128 and 256 (192 runs padded):
    every entry stays their own and nothing is lent to them; a GPU the file does not name takes
    only lent entries, at every head dim."""
    raw = json.loads(kernelplan.TUNED_FILE.read_text())["gpus"]
    out = lend(raw)
    for family in FAMILIES:
        for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
            for d in DIMS:
                assert _own(out[name], family, d) == _own(raw[name], family, d) != {}
            assert LENT not in out[name]
        for d in DIMS:
            assert _own(out[OTHER], family, d) != {}
    assert set(out[OTHER]) - {LENT, "routes", *FAMILIES["fwd"][0], *FAMILIES["bwd"][0]} == set()


def test_the_engine_runs_the_lent_backward_where_the_kernels_do() -> None:
    """On the H200 at d = 256 (its own entries) and on an H100 PCIe (no table of its own: lent
    ones) the engine simulates the Gluon backward; a GPU that is not a Hopper stays on Triton."""
    p = AttentionProblem(seq_q=4096, head_dim=256, causal=True, heads=2)
    assert kernelplan.ws_config("h200", p) is not None
    assert kernelplan.build("fa2-bwd", p, T, gpu_key="h200").route == "ws"
    for d in (64, 128, 256):
        q = AttentionProblem(seq_q=2048, head_dim=d, heads=2)
        assert kernelplan.build("fa2-bwd", q, T, gpu_key="h100-pcie").route == "ws"
        assert kernelplan.build("fa2-bwd", q, T, gpu_key="a100-80gb").route != "ws"
