"""How local traffic is read from SASS (simulator/timing/sass.py) and put in the engine's units
with the kernels' loop bounds (simulator/timing/ondemand.py), and which kernels
benchmarks/compile_spills.py compiles (the compiling itself: tests/test_ondemand.py)."""

from __future__ import annotations

from flashscope.simulator.timing.ondemand import (
    Kernel,
    engine_form,
    key_block_trips,
    per_cta,
    query_block_trips,
)
from flashscope.simulator.timing.sass import Loop, Structure, parse_sass, structure

# A kernel with one loop over tiles behind a guard: a store and a load once per CTA, a
# preheader store and an exit load once per entry of the loop, a 16-byte load and a 4-byte
# store in each step; a busy-wait loop without products counts as no loop over tiles.
SASS = """
//--------------------- .text.k                  --------------------------
k:
.text.k:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   STL [R1], R2 ;
        /*0020*/                   ISETP.GE.AND P0, PT, R3, 0x1, PT ;
        /*0030*/              @!P0 BRA `(.L_x_1) ;
        /*0040*/                   STL.64 [R1+0x8], R4 ;
.L_x_0:
        /*0050*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], RZ ;
        /*0060*/                   LDL.128 R8, [R1+0x10] ;
        /*0070*/                   STL [R1+0x20], R9 ;
        /*0080*/               @P1 BRA `(.L_x_0) ;
        /*0090*/                   LDL R10, [R1+0x8] ;
.L_x_1:
        /*00a0*/                   LDL.64 R12, [R1] ;
.L_x_2:
        /*00b0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR8], R3 ;
        /*00c0*/              @!P2 BRA `(.L_x_2) ;
        /*00d0*/                   EXIT ;
"""


def test_local_bytes_are_split_by_where_they_run() -> None:
    s = structure(parse_sass(SASS, "k"))
    assert (s.cta_load, s.cta_store) == (8, 4)
    (loop,) = s.loops
    assert (loop.step_load, loop.step_store) == (16, 4)
    assert (loop.entry_load, loop.entry_store) == (4, 8)


def test_the_loop_bounds_follow_the_kernels() -> None:
    # causal, square: every query block sees its diagonal block masked, the ones before whole
    assert query_block_trips(256, 256, 64, 64, True) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    # a ragged length masks the last key block of every query block
    assert query_block_trips(200, 200, 64, 64, False) == [(3, 1)] * 4
    # dK/dV: (masked, unmasked) query steps; the ragged last key block is masked throughout
    assert key_block_trips(256, 256, 64, 64, True) == [(1, 3), (1, 2), (1, 1), (1, 0)]
    assert key_block_trips(200, 200, 64, 64, False)[-1] == (4, 0)


def test_the_engines_units_take_the_unmasked_step_and_a_mean_per_cta() -> None:
    """The listing's loop as a causal forward's unmasked loop, beside a masked loop of 40 and 4
    bytes a step: the step is the unmasked one; the first query block never enters the
    unmasked loop (8 + 40 bytes loaded), the others pay its entry and a masked step beside
    their unmasked ones (8 + 4 + 40 beyond 16 a step): the per-CTA term is their mean."""
    s = structure(parse_sass(SASS, "k"))
    masked = Loop(0x100, None, step_load=40, step_store=4)
    both = Structure(s.cta_load, s.cta_store, [s.loops[0], masked], 0)
    k = Kernel("fwd", 128, "fp16", 64, 64, 4, 2, True, 256, 256, 2, 2)
    assert [c[2] for c in per_cta(both, k)] == [1, 2, 3, 4]
    form = engine_form(both, k)
    assert (form["load_step"], form["store_step"]) == (16.0, 4.0)
    assert form["load_cta"] == (32 + 36 * 3) / 4
    assert form["load_head"] == form["store_head"] == 0.0


def test_a_table_of_given_sweeps_holds_their_kernels_alone() -> None:
    """`--sweeps`: the keys of those sweeps' kernels (separate route), none of the candidate or
    tuned tiles the shipped table adds; every entry's kernel appears."""
    import json
    import random
    from pathlib import Path

    from benchmarks.compile_spills import kernels_of, table_configs

    root = Path(__file__).resolve().parents[1]
    sweep = "benchmarks/sweeps/users-unseen-2.json"
    got = table_configs([sweep])
    assert len(got) == len(set(got)) and got == sorted(got, key=str)
    entries = json.loads((root / sweep).read_text())["entries"]
    for e in random.sample(entries, 10):
        for k in kernels_of(e["config"], "separate"):
            ragged = bool(k.seq_q % 16 or k.seq_k % 16)
            key = (k.kernel, k.head_dim, k.block_m, k.block_n, k.warps, k.stages, k.maxnreg,
                   k.causal, ragged, k.group > 1)  # fmt: skip
            assert key in got, (e["id"], key)
    assert len(got) < len(table_configs())  # the shipped table's keys are more
    kernels = {c[0] for c in got}
    assert "dkdv-atomic" not in kernels  # the users' space runs the separate route
