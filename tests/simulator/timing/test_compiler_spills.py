"""The compiler-derived spill table (simulator/data/compiled-spills.json): its loader, the
engine's use of it where Nsight Compute measured nothing, and its agreement with what Nsight
Compute measured where both exist."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flashscope.simulator.calibrate.validation import (
    compiled_observations,
    ncu_kernels,
    simulate_config,
)
from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import compiled, kernelplan

DATA = Path(__file__).resolve().parents[3] / "app" / "data"
FIELDS = ("load_step", "load_cta", "store_step", "store_cta")


def test_the_shipped_table_loads_with_a_register_count_for_every_spilling_key() -> None:
    doc = json.loads(compiled.COMPILER_PATH.read_text())
    assert doc["format"] == compiled.FORMAT
    assert doc["compiler"]["arch"] == "sm_90a"
    spills, regs = compiled.compiler_table(), compiled.compiler_registers()
    assert len(regs) > 500 and len(spills) > 50
    assert set(spills) <= set(regs)
    assert all(0 < r <= 255 for r in regs.values())
    for k, t in spills.items():
        assert t.load_step >= 0 and t.store_step >= 0, k
        assert t.load_step + t.load_cta + t.store_step + t.store_cta > 0, k
    # the keys are the engine's: one it builds for a spread forward of the users' sweep
    p = AttentionProblem(seq_q=3790, head_dim=96, batch=15, heads=8, causal=True)
    assert compiled.key("fa2", p, TileConfig(128, 16, 2, 8)) in regs


def test_an_absent_file_has_no_entries(tmp_path: Path) -> None:
    assert compiled.compiler_table(tmp_path / "none.json") == {}
    assert compiled.compiler_registers(tmp_path / "none.json") == {}


def _unmeasured_spilling_key() -> tuple[str, compiled.LocalTraffic]:
    for k, t in sorted(compiled.compiler_table().items()):
        plain = "/ragged" not in k and "/gqa" not in k and "/r" not in k.split("/", 6)[-1]
        if k.startswith("fwd/d128/") and plain and k.count("/") == 5 and not compiled.measured(k):
            return k, t
    raise AssertionError("no unmeasured spilling forward at d = 128 in the table")


def test_the_engine_takes_the_compilers_entry_for_a_key_nobody_measured() -> None:
    k, entry = _unmeasured_spilling_key()
    _, _, tiles, warps, stages, mask = k.split("/")[:6]
    bm, bn = (int(x) for x in tiles.split("x"))
    t = TileConfig(bm, bn, int(stages[1:]), int(warps[1:]))
    p = AttentionProblem(seq_q=2048, head_dim=128, batch=2, heads=4, causal=mask == "causal")
    assert compiled.key("fa2", p, t) == k
    (w,) = kernelplan.build("fa2", p, t).launches
    assert w.regs == compiled.compiler_registers()[k]
    load, store = entry.bytes(w.iters, 32 * t.warps)
    np.testing.assert_allclose(w.local_load, load)
    np.testing.assert_allclose(w.local_store, store)
    # another architecture compiles other code: the estimate from the tiles, no count
    (a,) = kernelplan.build("fa2", p, t, gpu_key="a100-80gb").launches
    assert a.regs is None


def test_measured_entries_come_first() -> None:
    k = "dkdv/d128/64x64/w4/s2/full"
    assert compiled.measured(k)
    assert compiled.lookup(k) == compiled.table()[k]
    assert compiled.registers(k) == compiled.register_table()[k]


@pytest.mark.parametrize(
    "name", ["validation-h100-2026-11-21.json", "validation-h200-2026-11-21.json"]
)
def test_the_compilers_entries_predict_nsight_computes_local_bytes(name: str) -> None:
    """Every launch of the protocol's datasets (fit and held-out rows) whose key the compiler
    table holds: its registers are Nsight Compute's, and the local bytes the entry gives the
    engine's loop steps are near the measured ones (exact where every CTA runs the same loops;
    the causal kernels' per-CTA term is a mean over CTAs)."""
    doc = json.loads((DATA / name).read_text())
    obs = compiled_observations(doc["rows"], hardware.from_name(doc["gpu"]))
    regs, spills = compiled.compiler_registers(), compiled.compiler_table()
    checked = spilled = 0
    for o in obs:
        if o.key not in regs:
            continue
        checked += 1
        assert regs[o.key] == o.regs, o.key
        entry = spills.get(o.key)
        load, store = (0.0, 0.0) if entry is None else entry.totals(o.steps, o.ctas, o.threads)
        spilled += o.load > 0
        # loads within 2%; stores within 6% (the SASS of the atomic d = 64 32×128 dK/dV kernel
        # holds a 4-byte store per CTA on a path its launches never take)
        assert abs(load - o.load) <= 0.02 * o.load, (o.key, load, o.load)
        assert abs(store - o.store) <= 0.06 * o.store, (o.key, store, o.store)
    assert checked >= 100 and spilled >= 20


USERS = (
    Path(__file__).resolve().parents[3]
    / "benchmarks"
    / "results"
    / "validation-users-NVIDIA-H100-80GB-HBM3-2026-11-26-resimulated.json"
)


def _users_launches():
    """(row id, Nsight Compute's kernel row, the engine's simulated kernel) for every Triton
    kernel of the users' sweep that Nsight Compute read."""
    doc = json.loads(USERS.read_text())
    gpu = hardware.from_name(doc["gpu"])
    for r in doc["rows"]:
        kernels = [k for k in ncu_kernels(r) if k.get("name") in compiled.KERNEL_LAUNCH]
        if not kernels:
            continue
        sim = {k.name: k for k in simulate_config(r["config"], gpu).kernels}
        for k in kernels:
            yield r["id"], k, sim[compiled.KERNEL_LAUNCH[k["name"]]]


def test_the_compilers_shared_memory_is_what_the_kernels_launched_with() -> None:
    """Every launch of the users' sweep (forward, dQ and dK/dV, spread tiles included): the
    engine's shared memory per CTA is the compiled kernel's, Nsight Compute's dynamic
    allocation, and where shared memory limits the occupancy the engine holds as many CTAs
    on an SM as ran (the estimate was more than 5% off for most dK/dV launches)."""
    shared = compiled.compiler_shared()
    assert len(shared) == len(compiled.compiler_registers())
    checked = limited = same_binary = 0
    for rid, k, s in _users_launches():
        real = k["launch__shared_mem_per_block_dynamic"]
        assert s.occupancy.footprint.smem_bytes == real, (rid, k["name"])
        checked += 1
        limits = [k[f"launch__occupancy_limit_{f}"] for f in ("registers", "shared_mem", "warps")]
        if k["launch__occupancy_limit_shared_mem"] == min(limits):
            assert s.occupancy.ctas_per_sm == min(limits), (rid, k["name"])
            limited += 1
        # registers as allocated (multiples of 8): where the key's binary has the launch's
        # count (607 of 620), every limit holds (a key can stand for another binary: u011's dK/dV,
        # whole N_q and ragged N_k, where the representative has both ragged)
        if (
            -(-int(k["launch__registers_per_thread"]) // 8) * 8
            == s.occupancy.footprint.regs_per_thread
        ):
            assert s.occupancy.ctas_per_sm == min(limits), (rid, k["name"])
            same_binary += 1
    assert checked >= 600 and limited >= 100 and same_binary >= 600


def test_shared_memory_comes_from_the_compiler_only_on_hopper() -> None:
    k = "dkdv/d128/64x128/w8/s2/causal"
    assert compiled.shared(k) == compiled.compiler_shared()[k] > 0
    assert compiled.shared(k, "a100-80gb") is None
    assert compiled.shared("dkdv/d128/1x1/w8/s2/causal") is None  # a key nobody compiled
    assert compiled.compiler_shared(Path("/nonexistent/none.json")) == {}


def test_registers_hold_warps_in_whole_subpartitions() -> None:
    """The register limit counts warps per scheduler: 2-warp CTAs at 144 registers fit 6 to an
    SM (Nsight Compute, u259 and u378 of the users' sweep), not 65536 / (144 × 64) = 7; CTAs of
    4 and 8 warps are unchanged by the rounding."""
    from flashscope.simulator.timing.occupancy import Footprint, occupancy, regs_warps

    h100 = hardware.from_name("h100-sxm")
    assert regs_warps(144, h100) == 12 and regs_warps(200, h100) == 8 and regs_warps(96, h100) == 20
    assert occupancy(Footprint(1024, 144, 2, False), h100).limits["regs"] == 6
    for regs in range(8, 256, 8):
        for warps in (4, 8):
            got = occupancy(Footprint(1024, regs, warps, False), h100).limits["regs"]
            assert got == 65536 // (regs * 32 * warps), (regs, warps)
