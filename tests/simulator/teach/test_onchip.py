"""On-chip contents of trace events: tied to the tile programs' SRAM counts and to occupancy."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.hardware import from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import SKIPPED, TileGrid
from flashscope.simulator.teach.tracing import build_trace
from flashscope.simulator.timing.occupancy import footprint

KIND = {"fa2": "fwd", "fa1": "fa1", "fa2-bwd": "bwd"}


def _rng() -> tuple[np.random.Generator, int]:
    seed = int(np.random.default_rng().integers(2**31))
    return np.random.default_rng(seed), seed


@pytest.mark.parametrize("algo", ["fa2", "fa1", "fa2-bwd"])
def test_peak_shared_memory_equals_the_occupancy_footprint_with_one_stage(algo):
    rng, seed = _rng()
    bm, bn = (int(x) for x in rng.choice([16, 32, 64], size=2))
    d = int(rng.choice([16, 32, 64, 128]))
    dtype = str(rng.choice(["fp32", "fp16", "bf16"]))
    p = AttentionProblem(seq_q=3 * bm, seq_k=2 * bn, head_dim=d, dtype=dtype)
    trace = build_trace(algo, p, TileConfig(bm, bn), seed)
    want = footprint(KIND[algo], bm, bn, d, 1, 4, p.dtype_bytes, from_name("h100")).smem_bytes
    assert trace.meta["onchip_peak"]["smem_bytes"] == want, f"seed={seed} {bm}x{bn} d={d} {dtype}"


LOADS = {  # phase → buffers it brings into shared memory (their bytes = sram_write · dtype)
    "fa2": {"load_q": {"Qᵢ"}, "load_kv": {"Kⱼ", "Vⱼ"}},
    "fa1": {"load_q": {"Qᵢ", "Oᵢ"}, "load_kv": {"Kⱼ", "Vⱼ"}},
    "fa2-bwd": {"load_q_bwd": {"Qᵢ", "dOᵢ"}, "load_kv_bwd": {"Kⱼ", "Vⱼ"}},
    "decode": {"load_q": {"Q"}, "load_kv": {"Kⱼ", "Vⱼ"}},
}


@pytest.mark.parametrize("algo", ["fa2", "fa1", "fa2-bwd", "decode"])
def test_loads_bring_exactly_what_the_program_counts_on_ragged_causal_sizes(algo):
    rng, seed = _rng()
    nq = int(rng.integers(1, 5)) if algo == "decode" else int(rng.integers(1, 98))
    nk = int(rng.integers(1, 200))
    d = int(rng.choice([8, 24, 40]))
    kw = {"heads": int(rng.choice([1, 2, 4]))} if algo == "decode" else {"causal": True}
    p = AttentionProblem(seq_q=nq, seq_k=nk, head_dim=d, dtype="fp16", **kw)
    t = TileConfig(int(rng.choice([8, 16, 32])), int(rng.choice([8, 16, 32])))
    trace = build_trace(algo, p, t, seed)
    grid, kinds = TileGrid(p, t), TileGrid(p, t).kinds()
    n_loads = 0
    for i in range(len(trace)):
        ev = trace.event(i)
        names = {b["name"]: b for b in ev["onchip"]["buffers"]}
        smem = sum(b["bytes"] for b in names.values() if b["where"] == "smem")
        assert smem == ev["onchip"]["smem_bytes"], f"seed={seed} step {i}"
        loaded = LOADS[algo].get(ev["phase"])
        if loaded:
            n_loads += 1
            assert sum(names[n]["bytes"] for n in loaded) == ev["sram_write"] * 2, (seed, i)
        if ev["q_block"] is not None and ev["kv_block"] is not None and algo != "decode":
            assert kinds[ev["q_block"], ev["kv_block"]] != SKIPPED, f"seed={seed} step {i}"
            r, c = int(grid.rows[ev["q_block"]]), int(grid.cols[ev["kv_block"]])
            assert names["Kⱼ"]["shape"] == [c, d] and names["Qᵢ"]["shape"] == [r, d], (seed, i)
    assert n_loads > 0


def test_decode_reduce_holds_the_partials_in_fp32_registers():
    p = AttentionProblem(seq_q=2, seq_k=300, head_dim=32, heads=4, kv_heads=1, dtype="bf16")
    trace = build_trace("decode", p, TileConfig(16, 32), 1, splits=3)
    reduce = [trace.event(i) for i in range(len(trace)) if trace.event(i)["phase"] == "reduce"]
    assert len(reduce) == 3
    for ev in reduce:
        chip = ev["onchip"]
        assert chip["smem_bytes"] == 0
        assert chip["reg_bytes"] == 2 * (8 * 32 * 4) + 2 * 8 * 4  # O, Oₛ (R × d) and two LSEs
