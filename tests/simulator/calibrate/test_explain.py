"""flashscope.simulator.calibrate.explain: the notes on why a configuration's prediction differs
from its measurement."""

from __future__ import annotations

import random

from flashscope.app.datasets import DATA_DIR
from flashscope.simulator.calibrate.explain import notes
from flashscope.simulator.calibrate.validation import simulate_config

LOCKSTEP = {"algo": "fa2", "impl": "flashscope", "seq": 4096, "head_dim": 64, "batch": 4,
            "heads": 32, "block_m": 128, "block_n": 128, "stages": 2, "warps": 8,
            "gpu": "h200"}  # fmt: skip


def _structure(config: dict) -> list[str]:
    measured = random.uniform(500.0, 5000.0)
    found = notes({"measured_us": measured, "measured": {}}, simulate_config(config))
    assert found[0]["kind"] == "error" and f"{measured:,.1f} µs measured" in found[0]["text"]
    return [n["text"] for n in found if n["kind"] == "structure"]


def test_lockstep_is_named_with_the_share_of_ctas_that_recover_it():
    one = _structure(LOCKSTEP)
    assert len(one) == 1 and "lockstep" in one[0] and "CTAs per SM" not in one[0]
    two = _structure({**LOCKSTEP, "maxnreg": 128})
    assert len(two) == 1 and "divided by the 2 CTAs per SM" in two[0]
    fill = simulate_config(LOCKSTEP).gpu.efficiency.lockstep_fill
    assert f"lockstep_fill = {fill:.2f}, i.e. by {2**fill:.1f}" in two[0]
    assert _structure({**LOCKSTEP, "stages": 3}) == []  # a third buffer: no lockstep


def test_a_two_buffer_ring_outside_lockstep_is_named_with_its_share():
    from flashscope.simulator.core.hardware import custom, from_name

    config = {**LOCKSTEP, "block_n": 64, "warps": 4}  # one warpgroup, two stages
    gpu = custom(from_name("h200"), two_stage=0.25)
    found = notes({"measured_us": 1000.0, "measured": {}}, simulate_config(config, gpu))
    texts = [n["text"] for n in found if n["kind"] == "structure"]
    assert len(texts) == 1 and "two_stage = 0.25" in texts[0] and "lockstep" not in texts[0]
    off = custom(gpu, two_stage=0.0)
    assert not [n for n in notes({}, simulate_config(config, off)) if n["kind"] == "structure"]


def test_a_kernel_held_at_the_power_cap_is_named_with_the_measured_slowdown():
    from flashscope.simulator.core.hardware import custom, from_name

    config = {**LOCKSTEP, "block_n": 64, "warps": 4, "stages": 3, "head_dim": 128}
    capped = custom(from_name("h200", calibrated=False), power_tflops=300.0, power_l2_tbs=5.0,
                    power_exp=random.uniform(0.1, 0.4))  # fmt: skip
    result = simulate_config(config, capped)
    clock = result.kernels[0].clock
    assert clock < 0.99
    alone = random.uniform(500.0, 900.0)
    row = {"measured_us": 1000.0,
           "measured": {"ncu": {"kernels": [{"name": "_attn_fwd",
                                             "gpu__time_duration.sum": alone * 1e3}]}}}  # fmt: skip
    (text,) = [n["text"] for n in notes(row, result) if n["kind"] == "clock"]
    assert f"runs at {clock:.0%} of the boost clock" in text
    assert f"{alone:,.1f} µs alone" in text and f"{alone / 1000:.0%} of the single" in text
    free = custom(capped, power_exp=0.0)  # no cap modelled: no note
    assert not [n for n in notes(row, simulate_config(config, free)) if n["kind"] == "clock"]


def test_a_spilling_kernel_is_named_with_the_spill_bytes_the_engine_moves():
    import json

    shipped = DATA_DIR
    rows = json.loads((shipped / "validation-h100-2026-11-21.json").read_text())["rows"]
    row = next(r for r in rows if r["id"] == "bwd-d128-causal-n4096-t0")
    result = simulate_config(row["config"])
    (dkdv,) = [k for k in result.kernels if k.name == "bwd_dkdv"]
    assert dkdv.spill_l2_bytes > 0
    texts = [n["text"] for n in notes(row, result) if n["kind"] == "registers"]
    assert any(f"moves {dkdv.spill_l2_bytes / 1e6:,.0f} MB of them through L2" in t for t in texts)
    assert dkdv.spill_dram_bytes > 0
    back = f"writes {dkdv.spill_dram_bytes / 1e6:,.0f} MB of spilled lines back to DRAM"
    assert any(back in t for t in texts)
    assert any("takes the compiled count (256 as allocated)" in t for t in texts)
    # a tile configuration the table lists as not spilling: the note says no spill bytes move
    unlisted = {**row["config"], "warps": 8}
    quiet = simulate_config(unlisted)
    assert all(k.spill_l2_bytes == 0 for k in quiet.kernels)
    texts = [n["text"] for n in notes(row, quiet) if n["kind"] == "registers"]
    assert any("moves no spill bytes" in t for t in texts)
    # a GPU whose binaries were not measured: the registers and spills are the engine's
    # estimate from the tiles
    other = simulate_config({**row["config"], "gpu": "a100-80gb"})
    texts = [n["text"] for n in notes(row, other) if n["kind"] == "registers"]
    assert any("The engine estimates" in t and "beyond the cap" in t for t in texts)
