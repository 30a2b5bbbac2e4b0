"""The FA-3 model (simulator/timing/fa3.py): closed forms, orderings the kernel's options must
keep, the interval schema and the fp8 what-if."""

from __future__ import annotations

import pytest

from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing.fa3 import (
    PHASES,
    ROLES,
    Fa3Config,
    costs,
    interval_problems,
    simulate_fa3,
    tile_steps,
)

H100 = hardware.from_name("h100")
KEYS = {"role", "warpgroup", "phase", "tile", "block", "start_ns", "end_ns"}


def problem(**kw) -> AttentionProblem:
    base = {"seq_q": 4096, "head_dim": 128, "heads": 16, "batch": 4}
    return AttentionProblem(**{**base, **kw})


def test_one_block_is_the_sum_of_its_phases():
    """One tile of one key block, one warpgroup: the copies of Q, K and V share the bandwidth
    (the same size here, so their bytes arrive together), then S, the softmax (its FP32 work and its
    exponentials side by side), P·V, the epilogue and O's store run one after another."""
    cfg = Fa3Config(consumers=1, block_n=64, pipeline=False)
    p = AttentionProblem(seq_q=64, head_dim=64)
    c = costs(p, cfg, H100, "fp16")
    assert c.q_bytes == c.kv_bytes
    q_lands = 3 * c.q_bytes / c.copy_rate + c.q_latency
    k_lands = 3 * c.kv_bytes / c.copy_rate + c.copy_latency
    cta = (
        max(q_lands, k_lands)
        + c.qk + c.mma_latency
        + max(c.alu + c.rescale, c.exp)
        + c.pv + c.mma_latency
        + c.epilogue + c.o_bytes / c.copy_rate
    )  # fmt: skip
    r = simulate_fa3(p, cfg, H100)
    assert r.tiles == 1 and r.programs == 1
    assert r.time_ns == pytest.approx(H100.efficiency.cold_start_ns + cta, rel=1e-9)
    phases = [iv["phase"] for iv in r.intervals if iv["role"] == "consumer"]
    assert phases == ["wait_k", "wait_k", "qk", "softmax", "pv", "epilogue"]  # Q, then K


def test_intervals_follow_the_schema():
    cfg = Fa3Config(consumers=3, block_n=128, pingpong=True, persistent=True)
    r = simulate_fa3(problem(head_dim=64, causal=True), cfg, H100, shown_tiles=2)
    assert r.intervals and not r.truncated
    for iv in r.intervals:
        assert set(iv) == KEYS
        assert iv["role"] in ROLES and iv["phase"] in PHASES
        assert 0 <= iv["start_ns"] <= iv["end_ns"] <= r.time_ns
        assert iv["tile"] in (0, 1)
        if iv["role"] == "loader":
            assert iv["warpgroup"] == -1 and iv["phase"].startswith("load_")
        else:
            assert iv["warpgroup"] in (0, 1, 2) and not iv["phase"].startswith("load_")
        if iv["phase"] in ("load_q", "epilogue"):
            assert iv["block"] == -1
    assert interval_problems(r.intervals, consumers=3) == []
    blocks = {iv["block"] for iv in r.intervals if iv["phase"] == "qk" and iv["tile"] == 0}
    steps = tile_steps(cfg, 16 * 4, 4096, 4096, causal=True)
    assert blocks == set(range(int(steps[0])))


def test_interval_problems_catches_each_break_of_the_schema():
    good = {"role": "consumer", "warpgroup": 1, "phase": "qk", "tile": 0, "block": 3,
            "start_ns": 10.0, "end_ns": 20.0}  # fmt: skip
    assert interval_problems([good], consumers=2) == []
    breaks = [
        ({"warpgroup": 2}, "consumer is warpgroup 0..1"),
        ({"role": "loader"}, "loader is warpgroup -1"),
        ({"phase": "rescale"}, "unknown phase"),
        ({"phase": "epilogue"}, "per tile"),
        ({"tile": -1}, "tile must be"),
        ({"block": 1.5}, "block must be"),
        ({"start_ns": 30.0}, "start_ns ≤ end_ns"),
        ({"end_ns": float("nan")}, "finite"),
        ({"extra": 1}, "keys must be"),
    ]
    for change, needle in breaks:
        problems = interval_problems([{**good, **change}], consumers=2)
        assert len(problems) == 1 and needle in problems[0], (change, problems)


def test_the_timeline_is_bounded():
    r = simulate_fa3(problem(seq_q=65536), Fa3Config(), H100, max_intervals=300)
    assert r.truncated and len(r.intervals) == 300


def test_pipelining_is_never_slower_at_head_dim_128():
    """With the ring deep enough for the slot that pipelining holds longer (V of the previous
    block stays until after this block's softmax): the kernel's tuned pairs at head_dim 128."""
    for block_n, stages in ((64, 3), (128, 2)):
        plain = simulate_fa3(
            problem(), Fa3Config(block_n=block_n, stages=stages, pipeline=False), H100
        )
        piped = simulate_fa3(problem(), Fa3Config(block_n=block_n, stages=stages), H100)
        assert piped.time_ns <= plain.time_ns


@pytest.mark.parametrize("head_dim,block_n", [(64, 64), (128, 64), (64, 128)])
def test_more_stages_are_never_slower(head_dim, block_n):
    """Within 1%: a deeper ring only waits less (a few copies more in flight share the
    bandwidth, which may cost a fraction of a percent)."""
    times = [
        simulate_fa3(problem(head_dim=head_dim), Fa3Config(block_n=block_n, stages=s), H100).time_ns
        for s in (2, 3, 4)
    ]
    assert times[0] >= 0.99 * times[1] and times[1] >= 0.99 * times[2]


def test_consumers_share_the_tensor_cores():
    """A block of every warpgroup takes at least all their products at the SM's one tensor rate,
    three consumers longer per block than two, and the whole launch (the same work) about as
    long."""
    p = problem()
    two = simulate_fa3(p, Fa3Config(consumers=2), H100)
    three = simulate_fa3(p, Fa3Config(consumers=3), H100)
    c = costs(p, Fa3Config(), H100, "fp16")
    for r, k in ((two, 2), (three, 3)):
        assert r.tile_ns[1] >= k * (c.qk + c.pv) * (1 - 1e-9)
    assert three.tile_ns[1] > two.tile_ns[1]


def test_pingpong_puts_one_softmax_under_the_other_products():
    cfg = Fa3Config(consumers=2, block_n=128, pingpong=True)
    r = simulate_fa3(problem(head_dim=64), cfg, H100, shown_tiles=1)
    soft = [iv for iv in r.intervals if iv["phase"] == "softmax" and iv["warpgroup"] == 0]
    products = [iv for iv in r.intervals if iv["phase"] in ("qk", "pv") and iv["warpgroup"] == 1]
    overlaps = sum(
        min(a["end_ns"], b["end_ns"]) - max(a["start_ns"], b["start_ns"]) > 0
        for a in soft
        for b in products
    )
    assert overlaps >= len(soft) // 2
    issued = sorted((iv["start_ns"], iv["warpgroup"]) for iv in r.intervals if iv["phase"] == "qk")
    order = [w for _, w in issued]
    assert order == [0, 1] * (len(order) // 2)  # the turns: one warpgroup's S, then the other's


def test_persistent_matters_only_with_many_tiles():
    few = problem(seq_q=1024, batch=1)  # 128 tiles: fewer than the SMs
    many = problem(seq_q=1024, batch=40)  # 5120 tiles
    for p in (few, many):
        plain = simulate_fa3(p, Fa3Config(), H100)
        pers = simulate_fa3(p, Fa3Config(persistent=True), H100)
        if p is few:
            assert pers.programs == plain.programs == 128
            assert pers.time_ns == pytest.approx(plain.time_ns)
        else:
            assert pers.programs == H100.sms and plain.programs == 5120
            assert pers.time_ns < plain.time_ns


def test_fp8_is_faster_where_the_products_bound_the_time():
    for head_dim, cfg in ((128, Fa3Config()), (256, Fa3Config(consumers=1, block_n=64))):
        p = problem(head_dim=head_dim)
        half = simulate_fa3(p, cfg, H100)
        eight = simulate_fa3(p, cfg, H100, dtype="fp8")
        assert eight.time_ns < half.time_ns
        assert eight.dtype == "fp8" and any("simulated" in n for n in eight.notes)
        assert eight.as_dict()["simulated"] is True


def test_busy_fractions_and_explanation():
    r = simulate_fa3(problem(head_dim=64), Fa3Config(), H100)
    assert set(r.busy) == {"tensor", "sfu", "loader"}
    assert all(0 < v <= 1 for v in r.busy.values())
    e = r.explanation
    assert e["exp_ns"] == pytest.approx(64 * 129 / (16 * H100.clock_ghz * H100.efficiency.sfu))
    assert e["products_ns"] == pytest.approx(e["qk_ns"] + e["pv_ns"])
    assert str(round(e["products_ns"])) in e["text"]


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="consumers"):
        Fa3Config(consumers=4)
    with pytest.raises(ValueError, match="pingpong"):
        Fa3Config(pipeline=False, pingpong=True)
    with pytest.raises(ValueError, match=r"^stages"):
        simulate_fa3(problem(head_dim=256), Fa3Config(block_n=64, stages=4), H100)
    with pytest.raises(ValueError, match="dtype"):
        simulate_fa3(problem(dtype="fp32"), Fa3Config(), H100)
    with pytest.raises(ValueError, match="program"):
        simulate_fa3(problem(seq_q=256, batch=1, heads=1), Fa3Config(), H100, program=5)
