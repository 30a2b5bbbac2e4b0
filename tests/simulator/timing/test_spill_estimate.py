"""Spills estimated from the tiles for kernels the compiled table has no entry for, and the
host's floor under a whole call's time."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import compiled, kernelplan
from flashscope.simulator.timing.engine import (
    call_time_s,
    host_time_s,
    simulate_workload,
)
from flashscope.simulator.timing.occupancy import (
    MAX_REGS,
    REG_UNIT,
    WGMMA_ROWS,
    pad_head_dim,
    register_demand,
)

KINDS = ("fwd", "bwd", "bwd_dq")
POW2 = st.sampled_from([16, 32, 64, 128, 256])


def closed_form(kind: str, rows: int, bn: int, d: int, warps: int, e: int, overhead: int) -> int:
    """The registers per thread the module docstring's table gives, written out again."""
    dp = pad_head_dim(d)
    m = max(bn, WGMMA_ROWS) if warps >= 4 else bn
    elems = {
        "fwd": rows * dp + rows * bn * (1 + e / 4),
        "bwd": 2 * m * dp + 3 * rows * m,
        "bwd_dq": rows * dp + 2 * rows * bn,
    }[kind]
    per_thread = math.ceil(elems / (32 * warps)) + overhead
    return math.ceil(per_thread / REG_UNIT) * REG_UNIT


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    rows=POW2,
    bn=POW2,
    d=st.sampled_from([32, 64, 80, 96, 128, 192, 256]),
    warps=st.sampled_from([1, 2, 4, 8]),
    e=st.sampled_from([2, 4]),
    overhead=st.integers(0, 64),
)
def test_register_demand_is_the_tiles_over_the_threads(
    kind: str, rows: int, bn: int, d: int, warps: int, e: int, overhead: int
) -> None:
    demand = register_demand(kind, rows, bn, d, warps, e, overhead)
    assert demand == closed_form(kind, rows, bn, d, warps, e, overhead)
    assert demand % REG_UNIT == 0
    # more warps share the same tiles: never more registers per thread
    assert register_demand(kind, rows, bn, d, 2 * warps, e, overhead) <= demand or warps < 4


@settings(max_examples=200, deadline=None)
@given(
    demand=st.integers(0, 2000),
    maxnreg=st.one_of(st.none(), st.integers(32, 255)),
    overhead=st.integers(0, 64),
    load=st.floats(0.1, 100),
    store=st.floats(0.1, 100),
)
def test_spill_estimate_is_linear_in_the_excess_over_the_cap(
    demand: int, maxnreg: int | None, overhead: int, load: float, store: float
) -> None:
    capped = maxnreg is not None and maxnreg < MAX_REGS
    excess = max(0, demand - overhead - maxnreg) if capped else max(0, demand - MAX_REGS)
    got = compiled.estimate(demand, maxnreg, overhead, load, store)
    if excess == 0:
        assert got is None
        return
    assert got is not None
    assert math.isclose(got.load_step, load * excess)
    assert math.isclose(got.store_step, store * excess)
    assert got.load_cta == got.store_cta == 0.0


def test_table_entries_are_kept_and_unknown_tiles_estimated() -> None:
    """A key the table measured keeps its counts; one it never saw spills from its tiles."""
    p = AttentionProblem(seq_q=4096, head_dim=128, batch=4, heads=16)
    known = kernelplan.build("fa2", p, TileConfig(128, 64, 3, 8))
    (w,) = known.launches
    assert w.regs is not None  # measured: its own (zero) local traffic
    assert not w.local_load.any()
    spread = kernelplan.build("fa2", p, TileConfig(128, 128, 2, 2))
    (w,) = spread.launches
    assert w.regs is None and w.local_load.min() > 0 and w.local_store.min() > 0


def test_heavy_spills_are_much_slower_than_the_same_tiles_on_more_warps() -> None:
    """Forward 128×128 tiles at d = 128 on 2 warps ask for about 670 registers per thread
    (measured: local traffic of tens of kilobytes per thread and step, under 5 TFLOP/s); on 8
    warps they fit in 192 and do not spill."""
    gpu = hardware.from_name("h100-sxm")
    p = AttentionProblem(seq_q=4096, head_dim=128, batch=4, heads=16)
    two = simulate_workload(kernelplan.build("fa2", p, TileConfig(128, 128, 2, 2)), gpu)
    eight = simulate_workload(kernelplan.build("fa2", p, TileConfig(128, 128, 2, 8)), gpu)
    assert two.time_s > 3 * eight.time_s


@settings(max_examples=100, deadline=None)
@given(
    launch_us=st.floats(0, 50),
    descriptor_us=st.floats(0, 50),
    backward_us=st.floats(0, 1000),
    seq=st.integers(128, 2048),
    algo=st.sampled_from(["fa2", "fa2-bwd"]),
)
def test_a_call_takes_the_longer_of_its_kernels_and_the_host(
    launch_us: float, descriptor_us: float, backward_us: float, seq: int, algo: str
) -> None:
    base = hardware.from_name("h100-sxm")
    eff = dataclasses.replace(
        base.efficiency,
        host_launch_us=launch_us,
        host_descriptor_us=descriptor_us,
        host_backward_us=backward_us,
    )
    gpu = dataclasses.replace(base, efficiency=eff)
    p = AttentionProblem(seq_q=seq, head_dim=64, batch=1, heads=2)
    w = kernelplan.build(algo, p, TileConfig(64, 64, 3, 4), gpu_key=gpu.key)
    descriptors = descriptor_us * sum(x.host_descriptors for x in w.launches)
    host = launch_us * len(w.launches) + descriptors + (backward_us if algo == "fa2-bwd" else 0.0)
    host *= 1e-6
    assert math.isclose(host_time_s(w, eff), host, abs_tol=1e-15)
    r = simulate_workload(w, gpu)
    assert call_time_s(r) == max(r.time_s, host)
    assert call_time_s(r) >= r.time_s


@settings(max_examples=20, deadline=None)
@given(rate=st.floats(20, 1000), seq=st.integers(1024, 4096))
def test_local_traffic_through_l1_slows_only_spilling_kernels(rate: float, seq: int) -> None:
    """Every local byte passes the SM's L1 at `local_gbs`: a slower L1 never speeds a
    spilling kernel up, and a kernel that does not spill does not notice it."""
    base = hardware.from_name("h100-sxm")

    def with_rate(gbs: float) -> hardware.GPU:
        eff = dataclasses.replace(base.efficiency, local_gbs=gbs)
        return dataclasses.replace(base, efficiency=eff)

    p = AttentionProblem(seq_q=seq, head_dim=128, batch=2, heads=8)
    # (on 2 warps these tiles hold three CTAs an SM, whose estimated spill slots overflow L2:
    # their DRAM traffic, not L1, then sets the pace at the faster rates)
    spilling = kernelplan.build("fa2", p, TileConfig(128, 128, 2, 4))
    quiet = kernelplan.build("fa2", p, TileConfig(128, 64, 3, 8))
    off, slow, fast = with_rate(0.0), with_rate(rate), with_rate(2 * rate)
    t_off, t_slow, t_fast = (simulate_workload(spilling, g).time_s for g in (off, slow, fast))
    assert t_slow >= t_fast >= t_off
    assert t_slow > t_off
    q = [simulate_workload(quiet, g).time_s for g in (off, slow, fast)]
    assert q[0] == q[1] == q[2]
