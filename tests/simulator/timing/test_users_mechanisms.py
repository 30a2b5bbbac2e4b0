"""What the users' sweep showed the engine lacked: tensor descriptors built on the device for
tiles that are not whole, the spills' DRAM traffic where no write-back was measured, and the
backward's inputs kept in L2 from one launch to the next."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from flashscope.simulator.core.hardware import from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import engine, kernelplan
from flashscope.simulator.timing.engine import (
    host_time_s,
    l1_miss,
    simulate_workload,
    spill_dram,
    spill_l1,
)
from flashscope.simulator.timing.launch import Launch

H100 = from_name("h100-sxm")
FWD = TileConfig(128, 64, 3, 8)


def _launch(algo, p, t=FWD, gpu="h100-sxm", name=None, **kw):
    w = kernelplan.build(algo, p, t, gpu_key=gpu, **kw)
    return w, {x.name: x for x in w.launches}[name or ("fa2" if algo == "fa2" else "bwd_dkdv")]


@pytest.mark.parametrize(
    ("seq_q", "seq_k", "count"), [(4096, 4096, 0), (4000, 4096, 4), (4096, 1000, 4)]
)
def test_a_forward_builds_its_descriptors_only_where_a_tile_is_not_whole(seq_q, seq_k, count):
    p = AttentionProblem(seq_q=seq_q, seq_k=seq_k, head_dim=128, batch=2, heads=8)
    _, fwd = _launch("fa2", p)
    assert fwd.descriptors == count


def test_descriptors_of_the_backward_kernels_follow_their_tensors_and_the_group():
    p = AttentionProblem(seq_q=1000, head_dim=64, batch=1, heads=8, kv_heads=2)
    t = TileConfig(64, 64, 3, 4)
    w = kernelplan.build("fa2-bwd", p, t, route="separate")
    got = {x.name: x.descriptors for x in w.launches}
    assert got["bwd_dq"] == 5  # Q, dO, K, V, dQ
    assert got["bwd_dkdv"] == 4 + 2 * 4  # K, V, dK, dV, and Q, dO for each of 4 query heads
    assert got["bwd_preprocess"] == 0
    atomic = kernelplan.build("fa2-bwd", p, t, route="atomic")
    assert {x.name: x.descriptors for x in atomic.launches}["bwd_dkdv"] == 4 + 3 * 4


def test_whole_tiles_take_host_descriptors_which_the_host_pays_for():
    eff = H100.efficiency
    whole = AttentionProblem(seq_q=4096, head_dim=128, batch=2, heads=8)
    ragged = AttentionProblem(seq_q=4000, head_dim=128, batch=2, heads=8)
    w, fwd = _launch("fa2", whole)
    assert (fwd.host_descriptors, fwd.descriptors) == (4, 0)
    r, fwd_r = _launch("fa2", ragged)
    assert (fwd_r.host_descriptors, fwd_r.descriptors) == (0, 4)
    extra = host_time_s(w, eff) - host_time_s(r, eff)
    assert extra == pytest.approx(4 * eff.host_descriptor_us * 1e-6)
    assert extra == pytest.approx(20e-6, rel=0.01)  # 5 µs a descriptor on the H100
    bwd = kernelplan.build("fa2-bwd", whole, TileConfig(64, 64, 3, 4), route="separate")
    assert [x.host_descriptors for x in bwd.launches] == [0, 5, 6]  # preprocess, dQ, dK/dV


def test_no_descriptors_off_hopper():
    p = AttentionProblem(seq_q=1000, head_dim=64, batch=1, heads=8)
    _, fwd = _launch("fa2", p, gpu="a100-80gb")
    assert fwd.descriptors == 0


def test_a_ragged_length_costs_its_ctas_the_descriptors_wait():
    # the same work, one length ragged: only the wait before each CTA's loop differs
    p = AttentionProblem(seq_q=4096, seq_k=4095, head_dim=128, batch=2, heads=16)
    w, fwd = _launch("fa2", p)
    slow = simulate_workload(w, H100).time_s
    whole = dataclasses.replace(w, launches=(dataclasses.replace(fwd, descriptors=0),))
    fast = simulate_workload(whole, H100).time_s
    # 4 descriptors of DESCRIPTOR_NS before each of 1024 CTAs, 1 CTA per SM: 8 waves
    assert fwd.n_ctas == 1024
    waves = 8
    assert slow > fast
    assert slow - fast == pytest.approx(4 * engine.DESCRIPTOR_NS * 1e-9 * waves, rel=0.5)


def _spiller(frame: float, n: int = 4096, store: float = 1e6, load: float = 2e6) -> Launch:
    return Launch.make(
        "fa2", "fwd", 64, (n,), 2, iters=4,
        local_store=store, local_load=load, local_frame=frame,
    )  # fmt: skip


def test_spill_slots_far_inside_l2_reach_almost_no_dram():
    cap = H100.l2_bytes * H100.efficiency.l2_reuse_fraction
    t = TileConfig(64, 64, 2, 4)
    w = _spiller(16.0)  # 16 B × 128 threads × 264 CTAs: 1.6% of the usable L2
    write, read = spill_dram(w, t, 264, cap, 4.0)
    assert 0.0 <= write < 1e-8 * w.local_store.sum()
    assert read == 0.0  # reloads reach DRAM only past the L2's capacity


def test_spill_write_back_rises_through_half_where_the_slots_fill_l2():
    t = TileConfig(64, 64, 2, 4)
    w = _spiller(1000.0)
    stores = w.local_store.sum()
    footprint = 1000.0 * 128 * 264
    write, read = spill_dram(w, t, 264, footprint, 4.0)  # x = 1
    assert write == pytest.approx(stores / 2)
    assert read == 0.0
    shares = [spill_dram(w, t, 264, footprint / x, 4.0)[0] / stores for x in (0.5, 0.8, 1.25, 2)]
    k = engine.SPILL_SLOT_EXP
    assert shares == pytest.approx([x**k / (1 + x**k) for x in (0.5, 0.8, 1.25, 2)])
    assert shares == sorted(shares) and shares[0] < 0.05 and shares[-1] > 0.95


def test_spill_slots_past_l2_write_back_their_stores():
    cap = H100.l2_bytes * H100.efficiency.l2_reuse_fraction
    t = TileConfig(64, 64, 2, 4)
    w = _spiller(64_000.0)
    write, read = spill_dram(w, t, 264, cap, 4.0)
    stores, loads = w.local_store.sum(), w.local_load.sum()
    assert 0.9 * stores < write <= stores
    footprint = 64_000.0 * 128 * 264
    hit = (cap / footprint) ** 4.0  # the L2 model's curve past its capacity
    assert read == pytest.approx((1 - hit) * loads * engine.SPILL_RELOAD_DRAM)
    # a grid of a few CTAs keeps few slots, whatever each thread's frame
    few_write, few_read = spill_dram(w, t, 1, cap, 4.0)
    assert few_write < 1e-3 * stores and few_read == 0.0


def test_a_measured_write_back_is_kept_as_measured():
    t = TileConfig(64, 64, 2, 4)
    w = dataclasses.replace(_spiller(0.0), local_writeback=np.full(4096, 10.0))
    assert spill_dram(w, t, 264, 1e6, 4.0) == (40960.0, 0.0)


def test_compiler_entries_give_the_binary_spill_stack_as_the_frame():
    from flashscope.simulator.timing import compiled

    stacks = [e for e in compiled.compiler_table().values() if e.stack > 0]
    assert stacks, "the compiler table carries each binary's spill stack"
    e = stacks[0]
    assert e.frame() == e.stack
    assert compiled.LocalTraffic(1.0, 0.0, 8.0, 4.0).frame() == 12.0


def _dram(algo, p, t, **kw):
    res = simulate_workload(kernelplan.build(algo, p, t, **kw), H100)
    return {k.name: k.dram_read_bytes for k in res.kernels}


def test_the_dkdv_kernel_reads_what_the_dq_kernel_left_in_l2_when_it_fits():
    t = TileConfig(64, 64, 3, 4)
    small = AttentionProblem(seq_q=512, head_dim=64, batch=2, heads=8)
    got = _dram("fa2-bwd", small, t, route="separate")
    inputs = 4 * small.batch * small.heads * small.seq_q * small.head_dim * 2  # Q, K, V, dO
    assert got["bwd_dkdv"] < 0.1 * inputs  # everything it reads, the dQ kernel read just before
    assert got["bwd_dq"] < 0.85 * inputs  # dO: the preprocess pass read it
    big = AttentionProblem(seq_q=16384, head_dim=128, batch=4, heads=16)
    got = _dram("fa2-bwd", big, TileConfig(64, 128, 2, 8), route="separate")
    inputs = 4 * big.batch * big.heads * big.seq_q * big.head_dim * 2
    assert got["bwd_dkdv"] > 0.9 * inputs  # 2 GiB passed through L2 in between


def test_spill_reloads_miss_l1_once_the_slots_outgrow_what_shared_memory_leaves():
    t = TileConfig(64, 64, 2, 4)
    eff = H100.efficiency
    small = spill_l1(_spiller(64.0), t, 2, H100, 64 * 1024)
    assert l1_miss(small, eff) == pytest.approx(eff.spill_l1_miss)
    big = spill_l1(_spiller(2048.0), t, 2, H100, 64 * 1024)
    assert l1_miss(big, eff) > 0.9
    # the same slots beside more shared memory: L1 keeps less
    tight = spill_l1(_spiller(512.0), t, 2, H100, 100 * 1024)
    roomy = spill_l1(_spiller(512.0), t, 2, H100, 16 * 1024)
    assert l1_miss(tight, eff) > l1_miss(roomy, eff)
    # measured kernels (no frame) keep the fitted share
    assert spill_l1(_spiller(0.0), t, 2, H100, 0).l1_miss is None


def test_one_stage_spills_overlap_the_compute_they_interleave_with():
    """A one-stage loop waits for each K/V tile before computing, but its spill reloads and
    stores are the warps' own instructions among the compute: while they take less time than
    the compute, the L1 rate they pass at does not change the kernel's time."""
    p = AttentionProblem(seq_q=4096, head_dim=192, batch=4, heads=8)
    w = kernelplan.build("fa2", p, TileConfig(256, 32, 1, 4))
    assert w.launches[0].local_load.sum() > 1e10  # tens of GB of spill reloads

    def at(gbs):
        eff = dataclasses.replace(H100.efficiency, local_gbs=gbs)
        return simulate_workload(w, dataclasses.replace(H100, efficiency=eff)).time_s

    assert at(H100.efficiency.local_gbs) == pytest.approx(at(1e6), rel=1e-6)
    assert at(5.0) > 2 * at(1e6)  # an L1 too slow for them: the spills set the pace


@pytest.mark.parametrize(
    ("head_dim", "pad"), [(80, 1.6), (96, 128 / 96), (192, 256 / 192), (128, 1.0)]
)
def test_padded_tiles_cross_between_l2_and_the_sms_padded(head_dim, pad):
    """At a head_dim that is not a power of two the tiles move d_pad / d of the counted bytes
    between L2 and the SMs (Nsight Compute's SM-side L2 bytes on the users' sweep: 1.59, 1.33
    and 1.33 at d = 80, 96 and 192); DRAM sees only the tensors' own bytes."""
    p = AttentionProblem(seq_q=2048, head_dim=head_dim, batch=2, heads=8)
    w = kernelplan.build("fa2", p, TileConfig(64, 32, 2, 4), gpu_key="h100-sxm")
    assert w.launches[0].l2_pad == pytest.approx(pad)
    counted = dataclasses.replace(w, launches=(dataclasses.replace(w.launches[0], l2_pad=1.0),))
    got, base = simulate_workload(w, H100), simulate_workload(counted, H100)
    assert got.l2_bytes == pytest.approx(pad * base.l2_bytes, rel=1e-9)
    assert got.dram_read_bytes + got.dram_write_bytes == pytest.approx(
        base.dram_read_bytes + base.dram_write_bytes, rel=1e-9
    )
    assert got.time_s >= base.time_s


def test_the_forwards_accumulator_is_rescaled_at_the_padded_width():
    """O's accumulator is head_dim padded to a power of two wide on chip, so the FP32 work of
    its rescale and normalization at d = 80 is that of d = 128; the convention's count (the
    papers' algorithm) keeps d."""
    from flashscope.simulator.timing.workload import build

    t = TileConfig(128, 64, 3, 8)
    narrow, wide = (AttentionProblem(seq_q=2048, head_dim=d, batch=2, heads=8) for d in (80, 128))
    alu = [kernelplan.build("fa2", q, t).launches[0].alu for q in (narrow, wide)]
    assert np.array_equal(alu[0], alu[1])
    papers = [build("fa2", q, t).launches[0].alu.sum() for q in (narrow, wide)]
    assert papers[0] < papers[1]


@pytest.mark.parametrize(
    ("tiles", "head_dim", "measured"),
    [
        (TileConfig(16, 128, 4, 8), 64, 102456),  # u209: K and V in 3 buffers each, P
        (TileConfig(128, 128, 3, 2), 128, 131104),  # u262: 2 buffers each; Q's buffer reused
        (TileConfig(16, 32, 2, 2), 128, 17432),  # u378: P passes between warps
        (TileConfig(32, 16, 1, 2), 256, 16392),  # u050: one stage, Q's tile the larger
        (TileConfig(64, 64, 1, 2), 256, 40960),  # u018: one stage, K or V and P
    ],
)
def test_warp_level_forwards_ask_the_shared_memory_their_compiled_kernels_did(
    tiles, head_dim, measured
):
    """Forwards whose products are warp-level (fewer than 4 warps or 64 rows) hold Q in
    registers and stages − 1 buffers of K and V: Nsight Compute's dynamic shared memory of the
    users' sweep, where the warpgroup estimate (Q beside `stages` buffers) was far above."""
    from flashscope.simulator.timing.occupancy import RESERVED_SMEM

    p = AttentionProblem(seq_q=4096, head_dim=head_dim, batch=2, heads=8)
    (k,) = simulate_workload(kernelplan.build("fa2", p, tiles), H100).kernels
    smem = k.occupancy.footprint.smem_bytes
    assert smem == pytest.approx(measured, rel=0.005)
    assert k.occupancy.limits["smem"] == H100.smem_per_sm // (smem + RESERVED_SMEM)


@pytest.mark.parametrize(
    ("tiles", "head_dim", "split"),
    [
        (TileConfig(16, 16, 3, 8), 64, 8),  # u044: warpsPerCTA [1, 8] as compiled
        (TileConfig(32, 16, 2, 4), 80, 4),  # d_pad 128 > 32 rows
        (TileConfig(16, 32, 2, 2), 96, 2),
        (TileConfig(32, 16, 2, 2), 32, 0),  # u096: [2, 1], BM = d_pad
        (TileConfig(64, 64, 3, 2), 64, 0),  # u173: [2, 1]
        (TileConfig(64, 64, 3, 4), 256, 0),  # warpgroup products
        (TileConfig(128, 64, 3, 8), 128, 0),
    ],
)
def test_warps_split_the_columns_where_the_tile_has_fewer_rows_than_d_pad(tiles, head_dim, split):
    p = AttentionProblem(seq_q=4096, head_dim=head_dim, batch=2, heads=8)
    assert kernelplan.split_columns(p, tiles) == split
    _, fwd = _launch("fa2", p, tiles)
    assert fwd.split_warps == split


def test_warps_that_split_the_columns_wait_on_their_exchanges_every_step():
    p = AttentionProblem(seq_q=2048, head_dim=64, batch=1, heads=16, causal=True)
    w, fwd = _launch("fa2", p, TileConfig(16, 16, 3, 8))
    t = simulate_workload(w, H100).time_s
    plain = dataclasses.replace(w, launches=(dataclasses.replace(fwd, split_warps=0),))
    t0 = simulate_workload(plain, H100).time_s
    # 16×16 tiles on 8 warps (u044): the exchanges bound each step, not the step's work
    assert t > 1.1 * t0
