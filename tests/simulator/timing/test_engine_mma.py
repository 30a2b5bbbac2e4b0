"""How the engine places a CTA's warpgroups on Hopper's 64-row matrix instructions."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from flashscope.simulator.calibrate.validation import workload_of
from flashscope.simulator.core.hardware import custom, from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import kernelplan
from flashscope.simulator.timing.compiled import KERNEL_LAUNCH
from flashscope.simulator.timing.engine import (
    mma_factor,
    product_rows,
    simulate_workload,
    warpgroup_layout,
)
from flashscope.simulator.timing.launch import Product


def _feed(rho: float, n: float, a_smem: bool) -> float:
    """Closed form: a 64-row step N wide reads N rows of B, and 64 of A where A is in smem."""
    return max(1.0, rho * (1 + 64 / n) if a_smem else rho)


def test_shared_memory_slows_only_narrow_products_that_read_both_operands_there():
    rho = random.uniform(0.35, 0.6)
    shapes = (Product(0.25, 32, a_smem=True), Product(0.25, 64, a_smem=True),
              Product(0.25, 128, a_smem=True), Product(0.25, 32))  # fmt: skip
    want = 0.25 * (_feed(rho, 32, True) + _feed(rho, 64, True) + _feed(rho, 128, True) + 1.0)
    assert mma_factor(shapes, rho) == pytest.approx(want)
    assert _feed(rho, 32, True) > 1.0  # 3ρ > 1: a 32-wide product waits on shared memory
    assert _feed(rho, 256, True) == 1.0  # a wide one (cuBLAS's, the ceiling's) never does
    # A in registers: only B is read, and at ρ < 1 shared memory keeps up at any width
    assert mma_factor((Product(1.0, 16),), rho) == 1.0
    assert mma_factor((Product(1.0, 16),), 1.5) == pytest.approx(1.5)
    assert mma_factor(shapes, 0.0) == 1.0  # ρ = 0: the old engine
    assert mma_factor((), rho, 32, 8, 2.0) == 1.0  # no products, nothing to slow


@pytest.mark.parametrize(
    ("rows", "warps", "pad", "gn"),
    [
        (128, 8, 1.0, 1),  # two warpgroups, one 64-row slice each
        (64, 4, 1.0, 1),
        (64, 8, 1.0, 2),  # one slice for two warpgroups: they split the columns
        (32, 4, 2.0, 1),  # a 32-row tile still issues 64-row instructions
        (64, 16, 1.0, 4),
        (256, 8, 1.0, 1),  # more slices than warpgroups: each takes two
    ],
)
def test_warpgroups_fill_rows_first_then_split_columns(rows, warps, pad, gn):
    split = random.uniform(0.0, 2.0)
    shapes = (Product(1.0, 128, a_smem=True),)
    surcharge = pad * (1 + split * (gn - 1))
    assert mma_factor(shapes, 0.0, rows, warps, split) == pytest.approx(surcharge)
    rho = random.uniform(0.4, 0.7)
    # each warpgroup's product is 128 / gn wide
    want = surcharge * _feed(rho, 128 / gn, True)
    assert mma_factor(shapes, rho, rows, warps, split) == pytest.approx(want)


def test_a_column_split_backward_slows_only_with_its_surcharge():
    gpu = from_name("h200", calibrated=False)
    p = AttentionProblem(seq_q=2048, head_dim=128, batch=2, heads=8)
    split8 = kernelplan.build("fa2-bwd", p, TileConfig(64, 64, 2, 8), route="separate",
                              dq_tiles=TileConfig(64, 64, 2, 4))  # fmt: skip
    base = simulate_workload(split8, custom(gpu, wg_split=0.0)).kernels[-1].time_s
    slow = simulate_workload(split8, custom(gpu, wg_split=1.0)).kernels[-1].time_s
    assert slow > 1.2 * base
    # four warps on the same tile place one warpgroup per 64 rows: the surcharge changes nothing
    four = kernelplan.build("fa2-bwd", p, TileConfig(64, 64, 2, 4), route="separate",
                            dq_tiles=TileConfig(64, 64, 2, 4))  # fmt: skip
    a = simulate_workload(four, custom(gpu, wg_split=0.0)).time_s
    b = simulate_workload(four, custom(gpu, wg_split=1.0)).time_s
    assert a == b


def test_a_product_with_its_own_rows_is_placed_on_them():
    rho, split = random.uniform(0.4, 0.7), random.uniform(0.0, 2.0)
    # the atomic route's dK/dV CTA: 128-row products, and dQ = dS K on 32 rows (padded to 64)
    shapes = (Product(0.4, 32, a_smem=True), Product(0.4, 64), Product(0.2, 64, 32))
    want = 0.4 * _feed(rho, 32, True) + 0.4 + 0.2 * 2.0
    assert mma_factor(shapes, rho, 128, 4, split) == pytest.approx(want)
    # with 8 warps the 128-row products get a warpgroup per slice; the 64-row dQ product is
    # split by columns between the two: half as wide, and the surcharge
    shapes8 = (Product(0.4, 32, a_smem=True), Product(0.4, 64), Product(0.2, 64, 64, True))
    want8 = 0.4 * _feed(rho, 32, True) + 0.4 + 0.2 * (1 + split) * _feed(rho, 32, True)
    assert mma_factor(shapes8, rho, 128, 8, split) == pytest.approx(want8)
    # a shape's own rows equal to the CTA's change nothing
    same = (Product(0.6, 64, 128, True), Product(0.4, 128, 128))
    plain = (Product(0.6, 64, a_smem=True), Product(0.4, 128))
    assert mma_factor(same, rho, 128, 8, split) == pytest.approx(
        mma_factor(plain, rho, 128, 8, split)
    )


def test_each_kernel_reads_its_operands_where_its_ptx_does():
    """sm_90 PTX of every kernel the datasets measured: S, dP (and Sᵀ, dPᵀ) read both operands
    from shared memory; P V, dQ += dS K, dV and dK take their A operand from registers."""
    p = AttentionProblem(seq_q=1024, head_dim=80, batch=1, heads=4)
    t = TileConfig(64, 32, 3, 4)
    (fwd,) = kernelplan.build("fa2", p, t).launches
    assert fwd.mma_shapes == (Product(0.5, 32, a_smem=True), Product(0.5, 128))
    shapes = {}
    for route in ("separate", "atomic"):
        w = kernelplan.build("fa2-bwd", p, t, route=route, dq_tiles=TileConfig(128, 64, 3, 8))
        shapes[route] = {x.name: x.mma_shapes for x in w.launches if x.mma_shapes}
    assert shapes["separate"]["bwd_dq"] == (Product(2 / 3, 64, a_smem=True), Product(1 / 3, 128))
    assert shapes["separate"]["bwd_dkdv"] == (Product(0.5, 64, a_smem=True), Product(0.5, 128))
    assert shapes["atomic"]["bwd_dkdv"] == (
        Product(0.4, 64, a_smem=True), Product(0.4, 128), Product(0.2, 128, 64)
    )  # fmt: skip


def test_the_atomic_dkdv_kernel_pays_for_its_dq_product_rows():
    p = AttentionProblem(seq_q=2048, head_dim=64, batch=2, heads=8)
    t = TileConfig(32, 128, 3, 4)  # 32 query rows per step: dQ's products pad to 64 rows
    atomic = kernelplan.build("fa2-bwd", p, t, route="atomic")
    (dkdv,) = [w for w in atomic.launches if w.name == "bwd_dkdv"]
    assert dkdv.mma_shapes[-1] == Product(1 / 5, 64, 32)
    assert mma_factor(dkdv.mma_shapes, 0.0, 128, 4) == pytest.approx(4 / 5 + 2 / 5)
    separate = kernelplan.build("fa2-bwd", p, t, route="separate")
    (plain,) = [w for w in separate.launches if w.name == "bwd_dkdv"]
    assert all(s.rows is None for s in plain.mma_shapes)  # its four products all have 128 rows


@pytest.mark.parametrize(("algo", "tiles"), [("fa2", TileConfig(128, 128, 2, 8)),
                                             ("fa2-bwd", TileConfig(64, 128, 2, 8))])  # fmt: skip
def test_lockstep_warpgroups_lose_overlap_only_on_a_two_buffer_ring(algo, tiles):
    gpu = custom(from_name("h100", calibrated=False), overlap=random.uniform(0.3, 0.9))
    p = AttentionProblem(seq_q=4096, head_dim=64, batch=2, heads=16)
    w2 = kernelplan.build(algo, p, tiles, route="separate" if algo == "fa2-bwd" else None)
    name = "fa2" if algo == "fa2" else "bwd_dkdv"

    def kernel_s(lock: float) -> float:
        result = simulate_workload(w2, custom(gpu, lockstep=lock))
        return next(k.time_s for k in result.kernels if k.name == name)

    base, slow = kernel_s(0.0), kernel_s(1.0)
    assert slow > 1.02 * base
    # a third buffer lets the warpgroups drift apart; 4 warps are one warpgroup
    for other in (dataclasses.replace(tiles, stages=3), dataclasses.replace(tiles, warps=4)):
        w = kernelplan.build(algo, p, other, route="separate" if algo == "fa2-bwd" else None)
        a = simulate_workload(w, custom(gpu, lockstep=0.0)).time_s
        b = simulate_workload(w, custom(gpu, lockstep=1.0)).time_s
        assert a == b, other
    # no overlap to lose: nothing changes
    flat = custom(gpu, overlap=0.0, cta_overlap=0.0)
    a = simulate_workload(w2, custom(flat, lockstep=0.0)).time_s
    b = simulate_workload(w2, custom(flat, lockstep=1.0)).time_s
    assert a == b
    with pytest.raises(ValueError, match="lockstep"):
        custom(gpu, lockstep=1.5)


def test_a_co_resident_cta_recovers_part_of_the_lockstep_loss():
    """The loss is lockstep / c with c CTAs on the SM: with a register cap that fits a second
    CTA, the full loss (lockstep = 1) costs less than with one CTA per SM."""
    gpu = custom(from_name("h200", calibrated=False), overlap=0.8, cta_overlap=0.0)
    p = AttentionProblem(seq_q=8192, head_dim=64, batch=2, heads=32)
    slowdown = {}
    for cap in (None, 128):
        w = kernelplan.build("fa2", p, TileConfig(128, 128, 2, 8, maxnreg=cap))
        times = [simulate_workload(w, custom(gpu, lockstep=x)).main for x in (0.0, 1.0)]
        assert times[0].ctas_per_sm == (1 if cap is None else 2)
        slowdown[cap] = times[1].time_s / times[0].time_s
    assert slowdown[None] > slowdown[128] > 1.0


def test_lockstep_fill_sets_how_fast_co_resident_ctas_recover_the_loss():
    """lockstep / c**lockstep_fill stays lost: alone on its SM (c = 1) the exponent changes
    nothing; with a second CTA a larger one recovers more, and lockstep 0 loses nothing."""
    gpu = custom(from_name("h200", calibrated=False), overlap=0.8, cta_overlap=0.0, lockstep=1.0)
    p = AttentionProblem(seq_q=random.choice([4096, 4000]), head_dim=64, batch=2, heads=32)
    fills = sorted(random.sample([1.0, 1.5, 2.0, 3.0, 4.0], 3))
    for cap in (None, 128):
        w = kernelplan.build("fa2", p, TileConfig(128, 128, 2, 8, maxnreg=cap))
        times = [simulate_workload(w, custom(gpu, lockstep_fill=f)).time_s for f in fills]
        if cap is None:
            assert times[0] == times[1] == times[2]
        else:
            assert times[0] > times[1] > times[2]
            free = simulate_workload(w, custom(gpu, lockstep=0.0)).time_s
            assert times[2] > free


def test_a_two_buffer_ring_costs_overlap_outside_lockstep_too():
    """`two_stage`: one warpgroup on a two-buffer ring loses that share of its overlap (divided
    by the CTAs per SM); three buffers, or a CTA already in lockstep, are not affected."""
    gpu = custom(from_name("h200", calibrated=False), overlap=0.8, cta_overlap=0.0)
    p = AttentionProblem(seq_q=4096, head_dim=64, batch=2, heads=16)

    def time_s(tiles: TileConfig, share: float) -> float:
        w = kernelplan.build("fa2", p, tiles)
        return simulate_workload(w, custom(gpu, two_stage=share, lockstep=0.3)).time_s

    one_wg = TileConfig(128, 64, 2, 4)
    assert time_s(one_wg, 1.0) > 1.02 * time_s(one_wg, 0.0)
    for other in (TileConfig(128, 64, 3, 4), TileConfig(128, 128, 2, 8)):  # 3 stages; lockstep
        assert time_s(other, 1.0) == time_s(other, 0.0), other
    with pytest.raises(ValueError, match="two_stage"):
        custom(gpu, two_stage=1.2)


def test_warpgroups_that_can_drift_apart_fill_each_others_serial_phases():
    """With three buffers, warpgroups on their own row slices count as co-resident CTAs for
    `cta_overlap`; with two (lockstep) or one warpgroup they do not."""
    gpu = custom(from_name("h200", calibrated=False), overlap=0.3, lockstep=0.0, two_stage=0.0)
    p = AttentionProblem(seq_q=4096, head_dim=128, batch=2, heads=16)

    def kernel(tiles: TileConfig, share: float):
        w = kernelplan.build("fa2", p, tiles)
        return simulate_workload(w, custom(gpu, cta_overlap=share)).main

    drifting = TileConfig(128, 128, 3, 8)  # 224 KiB of shared memory: one CTA per SM
    alone, filled = kernel(drifting, 0.0), kernel(drifting, 0.6)
    assert alone.ctas_per_sm == filled.ctas_per_sm == 1
    assert filled.time_s < 0.99 * alone.time_s
    for other in (TileConfig(128, 128, 2, 8), TileConfig(64, 128, 3, 4)):  # lockstep; one group
        a, b = kernel(other, 0.0), kernel(other, 0.6)
        if a.ctas_per_sm == 1:
            assert a.time_s == b.time_s, other


def test_each_kernel_counts_the_waits_its_loop_has():
    """The waits on matrix products in each compiled loop (PTX, sm_90): the forward once (on
    S, with the previous tile's P V left in flight until then); the dQ kernel on S (with the
    previous dQ product) and on dP; the dK/dV kernel on Sᵀ (with the previous dV and dK) and on
    dPᵀ, and on the atomic route once more, on dQ, whose tile it stores for the reduce-add."""
    p = AttentionProblem(seq_q=1024, head_dim=64, batch=1, heads=4)
    t = TileConfig(64, 64, 3, 4)
    assert [w.chain for w in kernelplan.build("fa2", p, t).launches] == [1]
    chains = {}
    for route in ("separate", "atomic"):
        w = kernelplan.build("fa2-bwd", p, t, route=route)
        chains[route] = {launch.name: launch.chain for launch in w.launches}
    assert chains["separate"] == {"bwd_preprocess": 0, "bwd_dq": 2, "bwd_dkdv": 2}
    assert chains["atomic"]["bwd_dkdv"] == 3
    assert {k: v for k, v in chains["atomic"].items() if k != "bwd_dkdv"} == dict.fromkeys(
        ("bwd_preprocess", "dq_zero_fill", "dq_scale", "dq_cast"), 0
    )


def test_a_cta_alone_on_its_sm_pays_its_product_chain():
    """`mma_chain_ns`: with one CTA per SM and nothing to fill the wait, every iteration's
    products add their latency; with many CTAs per SM a short chain hides under the others."""
    gpu = from_name("h200", calibrated=False)
    chain = random.uniform(2000.0, 3000.0)
    # 32 CTAs on 132 SMs: each alone; 16 iterations of one wait
    alone = AttentionProblem(seq_q=1024, head_dim=64, batch=1, heads=4)
    w = kernelplan.build("fa2", alone, TileConfig(128, 64, 3, 4))
    base = simulate_workload(w, custom(gpu, mma_chain_ns=0.0)).main.time_s
    slow = simulate_workload(w, custom(gpu, mma_chain_ns=chain)).main.time_s
    added = 16 * 1 * chain * 1e-9
    assert added - base <= slow - base <= added
    assert slow - base > 0.5 * added  # the kernel is short beside its chain

    many = AttentionProblem(seq_q=8192, head_dim=64, batch=4, heads=32)
    w = kernelplan.build("fa2", many, TileConfig(64, 32, 2, 4))
    runs = [simulate_workload(w, custom(gpu, mma_chain_ns=x)).main for x in (0.0, 5.0)]
    assert runs[0].ctas_per_sm >= 4
    assert runs[0].time_s == runs[1].time_s
    with pytest.raises(ValueError, match="mma_chain_ns"):
        custom(gpu, mma_chain_ns=-1.0)


def test_the_atomic_route_waits_for_each_reduction_to_leave_shared_memory():
    """Each tile's bulk reduce-add costs its CTA `bulk_read_ns` (the copy engine reading it
    out of shared memory) before the next tile's dQ can take its buffer; the separate route's
    dK/dV kernel has no such wait (with three buffers its loads wait half the load latency per
    tile, here as long as the bulk read)."""
    lat = random.uniform(4000.0, 6000.0)
    gpu = custom(from_name("h200", calibrated=False), l2_latency_ns=lat, dram_latency_ns=lat,
                 bulk_read_ns=lat, mma_chain_ns=0.0)  # fmt: skip
    p = AttentionProblem(seq_q=1024, head_dim=64, batch=1, heads=2)  # 16 CTAs: one per SM
    t = TileConfig(32, 64, 3, 4)
    times = {}
    for route in ("separate", "atomic"):
        w = kernelplan.build("fa2-bwd", p, t, route=route, dq_tiles=t)
        dkdv = next(x for x in w.launches if x.name == "bwd_dkdv")
        times[route] = next(k for k in simulate_workload(w, gpu).kernels if k.name == "bwd_dkdv")
        iters = int(dkdv.iters.max())
    assert iters == 32
    assert times["atomic"].time_s >= iters * lat * 1e-9
    assert times["separate"].time_s < 0.75 * iters * lat * 1e-9
    # the wait is on the copy engine's read, not on the reduce reaching L2: with a quick read
    # the atomic route waits no L2 round trip per tile
    w = kernelplan.build("fa2-bwd", p, t, route="atomic", dq_tiles=t)
    quick = simulate_workload(w, custom(gpu, bulk_read_ns=0.0))
    assert next(k for k in quick.kernels if k.name == "bwd_dkdv").time_s < 0.75 * iters * lat * 1e-9


def test_reduce_adds_take_the_l2s_reduce_units_at_least_their_bytes():
    """All SMs share the L2's reduce units: a launch of reduce-adds lasts at least their bytes
    at l2_reduce of the L2 rate, and where that bound binds, not much longer (the stretch, not
    a sum with the loop). Each reduce-add also costs its CTA's warps reduce_op_ns (the tile's
    store to shared memory, a fence, a barrier): tiles half as tall issue twice as many."""
    gpu = custom(from_name("h200", calibrated=False), l2_reduce=0.05, reduce_op_ns=0.0)
    p = AttentionProblem(seq_q=random.choice([2000, 2048, 2100]), head_dim=64, batch=2, heads=16)
    for block_m in (32, 64):
        w = kernelplan.build("fa2-bwd", p, TileConfig(block_m, 64, 3, 4), route="atomic")
        dkdv = next(x for x in w.launches if x.name == "bwd_dkdv")
        k = next(k for k in simulate_workload(w, gpu).kernels if k.name == "bwd_dkdv")
        rate = gpu.l2_gbs * 1e9 * gpu.efficiency.l2 * gpu.efficiency.l2_reduce
        need = dkdv.reduce_write.sum() / rate
        span = k.time_s - gpu.efficiency.launch_us * 1e-6
        assert need * (1 - 1e-9) <= span <= need * (1 + 1e-9)
        assert k.breakdown["memory"] > 0.5 * span
    # the operations' cost is the CTAs' own: it grows with their number, not a shared bound
    op_ns = random.uniform(500.0, 1500.0)
    costly = custom(from_name("h200", calibrated=False), reduce_op_ns=op_ns)
    free = custom(costly, reduce_op_ns=0.0)
    times = {}
    for block_m in (32, 64):
        w = kernelplan.build("fa2-bwd", p, TileConfig(block_m, 64, 3, 4), route="atomic")
        t_cost, t_free = (simulate_workload(w, g).time_s for g in (costly, free))
        assert t_cost > t_free
        times[block_m] = t_cost - t_free
    assert times[32] > times[64]  # twice the reduce-adds


def test_dkdv_registers_count_products_at_least_64_rows_tall():
    """The dK/dV kernel's accumulators and scores are BN rows tall, padded to a warpgroup's
    64-row instruction: 32-key tiles hold as many registers as 64-key ones (they compiled to
    168–204 registers, where 32 rows would give 88)."""
    from flashscope.simulator.timing.occupancy import footprint

    gpu = from_name("h200", calibrated=False)
    d, r = random.choice([64, 128]), random.choice([16, 32, 64])
    regs = {bn: footprint("bwd", r, bn, d, 2, 4, 2, gpu).regs_per_thread for bn in (16, 32, 64)}
    assert regs[16] == regs[32] == regs[64]
    want = 2 * 128 * d + 3 * r * 128  # 128 keys: no padding
    over = gpu.efficiency.reg_overhead + -(-want // 256)
    assert footprint("bwd", r, 128, d, 2, 8, 2, gpu).regs_per_thread == min(255, -(-over // 8) * 8)


PTX = sorted(
    (Path(__file__).resolve().parents[3] / "benchmarks" / "results").glob("ptx-loops-*.json")
)


def _ptx_rows():
    return json.loads(PTX[-1].read_text())["rows"]


def _ptx_launch(r: dict, causal: bool):
    """The engine's launch of a PTX row's kernel, for its configuration with `causal`."""
    config = dict(r["config"], impl="flashscope", causal=causal)
    w = workload_of(config, from_name(config["gpu"]))
    launch = next(x for x in w.launches if x.name == KERNEL_LAUNCH[r["kernel"]])
    return launch, launch.tiles or w.tiles


@pytest.mark.parametrize("i", range(70))
def test_the_engine_counts_the_waits_and_operands_the_compiled_loops_have(i):
    """Against the PTX of every kernel the datasets measured (benchmarks/ptx_loops.py, full and
    causal alike): an iteration waits `chain` times on its products (a wgmma wait, or the
    synchronous mma.sync of the atomic route's 32-row dQ product), and the products that read
    A from shared memory are as wide, per warpgroup, as the engine's `a_smem` products, those
    with A in registers as its others. Kernels of mma.sync alone (the 32×32 dK/dV tile) are
    priced as padded 64-row products: only their waits are not checked."""
    rows = _ptx_rows()
    assert len(rows) == 70
    r = rows[i]
    c = r["config"]
    launch, tiles = _ptx_launch(r, c["causal"])
    loops = r["loops"]
    assert loops and all(body == loops[0] for body in loops)  # masked or not, one structure
    ops = [op.split(" x")[0] for op in loops[0]]
    products = [op for op in ops if op.startswith(("wgmma", "mma.sync"))]
    if all(op.startswith("mma.sync") for op in products):
        assert tiles.block_m == tiles.block_n == 32
        return
    waits = ops.count("wait 0") + (1 if any(op.startswith("mma.sync") for op in ops) else 0)
    assert waits == launch.chain, (r["kernel"], ops)
    got = {"A-smem": set(), "A-reg": set()}
    for op in products:
        if op.startswith("wgmma"):
            n = int(op.split(".")[1].split("n")[1].split("k")[0])
            got[op.split(".")[2]].add(n)
    want = {"A-smem": set(), "A-reg": set()}
    for prod in launch.mma_shapes:
        rows_ = prod.rows if prod.rows is not None else product_rows(launch, tiles)
        if rows_ < 64:
            continue  # a 32-row product: mma.sync in the PTX
        _, gn, _ = warpgroup_layout(rows_, tiles.warps)
        want["A-smem" if prod.a_smem else "A-reg"].add(prod.n // gn)
    assert got == want, (r["kernel"], c)


@pytest.mark.parametrize("i", range(70))
def test_the_engines_fp32_work_per_score_element_is_the_compiled_loops(i):
    """The FP32-pipe instructions a thread issues per iteration of the unmasked loop (the
    smaller count where a kernel has a masked loop beside it), per score element, against the
    engine's ALU FLOPs per score element: within 10%, but for the dK/dV kernel's 4-warp 32-row
    tiles at 32 and 128 keys, which issue 5.25 where the engine counts 6.5 (documented in
    kernelplan.DKDV_FP32)."""
    r = _ptx_rows()[i]
    c = r["config"]
    launch, tiles = _ptx_launch(r, causal=False)  # every score element visible
    ptx = min(r["fp32_per_thread"]) * 32 * tiles.warps / (tiles.block_m * tiles.block_n)
    engine = float(launch.alu.sum() / launch.exps.sum())
    if r["kernel"] == "_attn_fwd":  # its exponentials count the rescale's too
        engine = float(launch.alu.sum()) / (c["batch"] * c["heads"] * c["seq"] ** 2)
    small = (tiles.block_m, tiles.warps) == (32, 4) and tiles.block_n != 64
    if r["kernel"] == "_attn_bwd_dkdv" and small:
        assert ptx == pytest.approx(5.25) and engine == pytest.approx(6.5)
        return
    assert engine == pytest.approx(ptx, rel=0.10), (r["kernel"], c, engine, ptx)
