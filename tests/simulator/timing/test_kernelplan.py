"""flashscope's own kernels as engine workloads: closed forms, launch order, routes, overlap."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashscope.simulator.core.hardware import custom, from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach import traffic
from flashscope.simulator.timing import kernelplan
from flashscope.simulator.timing.engine import simulate_workload
from flashscope.simulator.timing.launch import COUNTS
from flashscope.simulator.timing.workload import build

ROOT = Path(__file__).resolve().parents[3]
BLOCKS = st.sampled_from([16, 32, 64, 128])


@st.composite
def cases(draw):
    heads, kv = draw(st.sampled_from([(1, 1), (2, 2), (4, 2), (6, 3), (4, 1)]))
    p = AttentionProblem(
        seq_q=draw(st.sampled_from([1, 17, 97, 200, draw(st.integers(1, 700))])),
        seq_k=draw(st.sampled_from([1, 17, 97, 200, draw(st.integers(1, 700))])),
        head_dim=draw(st.sampled_from([8, 40, 64, 128])),
        batch=draw(st.integers(1, 3)),
        heads=heads,
        kv_heads=kv,
        causal=draw(st.booleans()),
    )
    t = TileConfig(draw(BLOCKS), draw(BLOCKS), draw(st.integers(1, 3)), 4)
    dq = draw(st.one_of(st.none(), st.builds(TileConfig, BLOCKS, BLOCKS)))
    return p, t, dq


@settings(max_examples=60, deadline=None)
@given(case=cases(), route=st.sampled_from(["separate", "atomic"]))
def test_totals_equal_the_closed_forms(case, route):
    p, t, dq = case
    w = kernelplan.build("fa2-bwd", p, t, route=route, dq_tiles=dq)
    want = traffic.flashscope("fa2-bwd", p, t, route, dq)
    assert w.totals() == {k: getattr(want, k) for k in COUNTS}, (p, t, dq, route)
    assert kernelplan.ctas_of("fa2-bwd", p, t, route=route, dq_tiles=dq) == sum(
        x.n_ctas for x in w.launches
    )
    fwd = kernelplan.build("fa2", p, t)
    assert fwd.totals() == build("fa2", p, t).totals()  # the forward counts as the convention


def test_causal_forward_launches_the_heaviest_query_block_first():
    p = AttentionProblem(seq_q=300, head_dim=16, batch=2, heads=2, causal=True)
    (launch,) = kernelplan.build("fa2", p, TileConfig(64, 64)).launches
    assert launch.iters.tolist()[:5] == [5, 4, 3, 2, 1]  # the convention's grid runs 1 … 5
    assert launch.iters.tolist()[5:10] == [5, 4, 3, 2, 1]
    (plain,) = kernelplan.build(
        "fa2", AttentionProblem(seq_q=300, head_dim=16), TileConfig(64, 64)
    ).launches
    assert plain.iters.tolist() == [5] * 5


def test_backward_routes_launch_what_the_kernels_launch():
    p = AttentionProblem(seq_q=512, head_dim=64, heads=4, causal=True)
    t = TileConfig(32, 64, 3, 4)
    sep = kernelplan.build("fa2-bwd", p, t, route="separate", dq_tiles=TileConfig(128, 32))
    assert [x.name for x in sep.launches] == ["bwd_preprocess", "bwd_dq", "bwd_dkdv"]
    assert [x.concurrent for x in sep.launches] == [False, False, True]
    assert sep.launches[1].grid == (4, 4) and sep.launches[2].grid == (8, 4)
    assert sep.launches[0].rows == 64  # the preprocess works in 64-row blocks
    atomic = kernelplan.build("fa2-bwd", p, t, route="atomic")
    names = [x.name for x in atomic.launches]
    assert names == ["bwd_preprocess", "dq_zero_fill", "bwd_dkdv", "dq_scale", "dq_cast"]
    # five products per tile instead of four (and the dQ kernel's three are gone)
    assert atomic.launches[2].flops.sum() * 4 == sep.launches[2].flops.sum() * 5
    assert not any(x.concurrent for x in atomic.launches)
    # one bulk reduce-add of a block_m × d fp32 tile per query step (the last one ragged)
    dkdv = atomic.launches[2]
    assert dkdv.reduce_ops.tolist() == dkdv.iters.tolist()
    assert dkdv.reduce_write.sum() == dkdv.acc_write.sum() * 4
    assert not any(x.reduce_ops.any() for x in sep.launches)
    with pytest.raises(ValueError, match="route"):
        kernelplan.build("fa2-bwd", p, t, route="fast")
    with pytest.raises(ValueError, match="fa2-bwd only"):
        kernelplan.build("fa2", p, t, route="atomic")


def test_the_default_route_is_the_kernels_choice_in_tuned_json():
    tuned = json.loads((ROOT / "kernels" / "tuned.json").read_text())["gpus"]
    keys = {"NVIDIA H200": "h200", "NVIDIA H100 80GB HBM3": "h100-sxm"}
    assert keys == kernelplan.TUNED_GPUS
    lows = dict(zip(kernelplan.SEQ_BUCKETS, (0, *kernelplan.SEQ_BUCKETS), strict=False))
    seen = set()
    for name, entry in tuned.items():
        routes = entry.get("routes", {})
        for key, route in routes.items():
            if not key.startswith(
                "bwd-route/"
            ):  # the forward's kernel (flashscope.kernels.hopper_forward)
                continue
            _, _bits, d, mask, *bucket = key.split("/")
            if bucket:  # a length in that bucket takes it
                hi = int(bucket[0][1:])
                n = random.randint(lows[hi] + 1, hi)
            else:  # a length whose bucket has no entry falls back to it (none: pick a bucket)
                free = [b for b in kernelplan.SEQ_BUCKETS if f"{key}/n{b}" not in routes]
                if not free:
                    continue
                n = free[0]
            p = AttentionProblem(seq_q=n, seq_k=random.randint(1, n), head_dim=int(d[1:]),
                                 causal=mask == "causal")  # fmt: skip
            assert kernelplan.kernel_route(keys[name], p) == route, (key, n)
            seen.add(route)
    assert seen == {"separate", "atomic"}
    assert kernelplan.kernel_route("h100-sxm", AttentionProblem(head_dim=64)) == "separate"


def test_the_simulator_buckets_lengths_as_the_kernels_do():
    from flashscope.kernels import config

    # one rule for tiles and routes: the kernels bucket lengths as the simulator does
    assert config.tuned_keys is kernelplan.tuned_keys


def test_concurrent_kernels_overlap_and_their_shares_sum_to_one():
    gpu = from_name("h100")
    p = AttentionProblem(seq_q=1024, head_dim=64, batch=2, heads=8, causal=True)
    t = TileConfig(64, 64, 3, 4)
    r = simulate_workload(kernelplan.build("fa2-bwd", p, t, route="separate"), gpu)
    pre, dq, dkdv = r.kernels
    assert dkdv.offset_s < dq.end_s  # the dK/dV kernel starts before the dQ kernel ends
    assert r.time_s < pre.time_s + dq.time_s + dkdv.time_s
    assert r.time_s == pytest.approx(max(k.end_s for k in r.kernels))
    assert sum(r.limiter.values()) == pytest.approx(1.0)
    for k in r.kernels:
        assert sum(k.breakdown.values()) == pytest.approx(k.time_s)
    # never more CTAs on an SM than fit: the two kernels share slots as they free
    starts = np.concatenate([dq.start, dkdv.start])
    ends = np.concatenate([dq.end, dkdv.end])
    sms = np.concatenate([dq.sm, dkdv.sm])
    for sm in range(0, gpu.sms, 17):
        on = sms == sm
        events = sorted([(s, 1) for s in starts[on]] + [(e, -1) for e in ends[on]])
        live = np.cumsum([d for _, d in events])
        assert live.max(initial=0) <= max(dq.ctas_per_sm, dkdv.ctas_per_sm), sm


def test_structural_parameters_default_to_the_old_engine():
    """New efficiency fields at their defaults change nothing for the convention's algorithms."""
    gpu = from_name("h100-sxm", calibrated=False)
    p = AttentionProblem(seq_q=2048, head_dim=64, batch=2, heads=8, causal=True)
    t = TileConfig(128, 64, 2, 8)
    base = simulate_workload(build("fa2", p, t), gpu).time_s
    same = custom(
        gpu, cta_overlap=0.0, smem_feed=0.0, spill_penalty=0.0, l2_reduce=1.0, wg_split=2.0
    )
    assert simulate_workload(build("fa2", p, t), same).time_s == base
    wide = custom(gpu, smem_feed=0.9)  # narrow products slow only flashscope's kernels
    assert simulate_workload(build("fa2", p, t), wide).time_s == base
    fs = kernelplan.build("fa2", p, t)
    assert simulate_workload(fs, wide).time_s > simulate_workload(fs, gpu).time_s
    slow_red = custom(gpu, l2_reduce=0.1)
    atomic = kernelplan.build("fa2-bwd", p, TileConfig(64, 64, 3, 4), route="atomic")
    assert simulate_workload(atomic, slow_red).time_s > simulate_workload(atomic, gpu).time_s
