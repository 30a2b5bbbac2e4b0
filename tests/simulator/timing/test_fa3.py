"""The FA-3 model (simulator/timing/fa3.py): closed forms, orderings the kernel's options must
keep, the interval schema and the fp8 what-if."""

from __future__ import annotations

import dataclasses

import pytest

from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing import fa3
from flashscope.simulator.timing.fa3 import (
    PHASES,
    ROLES,
    Fa3Config,
    costs,
    interval_problems,
    simulate_fa3,
    tile_steps,
)
from flashscope.simulator.timing.fa3_sm import SM, Costs

H100 = hardware.from_name("h100")
KEYS = {"role", "warpgroup", "phase", "tile", "block", "start_ns", "end_ns"}


def problem(**kw) -> AttentionProblem:
    base = {"seq_q": 4096, "head_dim": 128, "heads": 16, "batch": 4}
    return AttentionProblem(**{**base, **kw})


def test_one_block_is_the_sum_of_its_phases():
    """One tile of one key block, one warpgroup: the copies of Q, K and V share the bandwidth
    (the same size here, so their bytes arrive together), then S, the softmax (its FP32 work and its
    exponentials side by side, then its own latency), P·V, the epilogue and O's store (its
    bytes, then a copy's latency, which the program waits for at its end) run one after
    another; each of the three waits (Q, K, V) lasts a barrier's round trip at least."""
    cfg = Fa3Config(consumers=1, block_n=64, pipeline=False)
    p = AttentionProblem(seq_q=64, head_dim=64)
    c = costs(p, cfg, H100, "fp16")
    assert c.q_bytes == c.kv_bytes
    q_lands = 3 * c.q_bytes / c.copy_rate + c.q_latency
    k_lands = 3 * c.kv_bytes / c.copy_rate + c.copy_latency
    cta = (
        max(q_lands + c.barrier_ns, k_lands) + c.barrier_ns
        + c.qk + c.mma_latency
        + max(c.alu + c.rescale, c.exp) + c.softmax_ns
        + c.barrier_ns
        + c.pv + c.mma_latency
        + c.epilogue + c.o_bytes / c.copy_rate + c.copy_latency
    )  # fmt: skip
    r = simulate_fa3(p, cfg, H100)
    assert r.tiles == 1 and r.programs == 1
    assert r.time_ns == pytest.approx(H100.efficiency.cold_start_ns + cta, rel=1e-9)
    phases = [iv["phase"] for iv in r.intervals if iv["role"] == "consumer"]
    # Q, then K; V had landed, its wait is the barrier's round trip
    assert phases == ["wait_k", "wait_k", "qk", "softmax", "wait_v", "pv", "epilogue"]


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


@pytest.mark.parametrize(
    "cfg",
    [Fa3Config(2, 256, 2, False), Fa3Config(3, 128, 2, False), Fa3Config(2, 128, 2, pingpong=True)],
)
def test_a_program_waits_for_its_last_store_once(cfg):
    """A program waits for its O store (its bytes, then a copy's latency) before the next one and
    at its end: a one-tile CTA before the SM takes the next CTA, a persistent program only after
    its last tile, so two tiles in one program take at least that latency less than two
    programs of one tile (benchmarks/results/cta-start-*.json: 0.7-2.6 us a CTA on an H100)."""
    p = AttentionProblem(seq_q=2048, head_dim=64)
    c = costs(p, cfg, H100, "fp16")
    one = fa3._sm_time(c, cfg, ((8, 0, 0),), 1)
    two = fa3._sm_time(c, cfg, ((8, 0, 0),) * 2, 1)
    assert 2 * one - two >= c.copy_latency


def test_tiles_in_turn_leave_a_program_one_rank_where_programs_divide_the_heads():
    """Persistent causal programs taking their tiles in turn (the kernel before its host
    schedule, `scheduled=False`): at N = 1024 a head has six tiles of 192 rows and 132 programs
    are 22 heads' worth, so in bands of one head each program takes the same rank of every head
    it meets, the heaviest or the lightest; in bands of 8 the ranks mix. The H200 measured
    ws[3, 128, 2, 1, 1, 1, 1] at 0.51 ms in band 1 against 0.28 in band 8
    (benchmarks/results/hopper-forward-d64-causal-bands-*.json); the host schedule evens it."""
    h200 = hardware.from_name("h200")
    p = problem(seq_q=1024, head_dim=64, heads=32, batch=16, causal=True)

    def time(band: int, scheduled: bool) -> float:
        cfg = Fa3Config(3, 128, 2, True, 1, pingpong=True, persistent=True, band=band,
                        scheduled=scheduled)  # fmt: skip
        return simulate_fa3(p, cfg, h200).time_ns

    assert time(1, False) > 1.3 * time(8, False)
    assert time(1, True) == pytest.approx(time(8, True), rel=0.1)
    assert time(1, True) < time(1, False) / 1.4


def test_a_whole_last_block_costs_more_than_its_half():
    """HALF_STEPS off (`half_steps=False`): an unpipelined causal tile of 128 rows with 256-key
    blocks computes its half-visible last block whole, as the kernel did before it had them."""
    p = problem(seq_q=2048, head_dim=64, heads=32, batch=8, causal=True)
    half = simulate_fa3(p, Fa3Config(2, 256, 2, False, 1), H100).time_ns
    whole = simulate_fa3(p, Fa3Config(2, 256, 2, False, 1, half_steps=False), H100).time_ns
    assert whole > half


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


# --- the SM's terms, each on hand-made costs (independent of the fitted values) ----------


def sm_costs(**kw) -> Costs:
    """One warpgroup's block at d = 128, 128 keys on the H100 (the model's own work) with the
    terms of this test set apart: no latencies and copies at once unless asked for."""
    c = costs(problem(), Fa3Config(), H100, "fp16")
    base = {"mma_latency": 0.0, "copy_latency": 0.0, "q_latency": 0.0, "softmax_ns": 0.0,
            "copy_rate": 1e12,
            "barrier_ns": 0.0, "mma_drag": 0.0, "blocking_issue": False}  # fmt: skip
    return dataclasses.replace(c, **{**base, **kw})


def run_sm(c: Costs, consumers: int, tiles, pipeline: bool = False, pingpong: bool = False) -> SM:
    return SM(c, consumers, 2, pipeline, pingpong, [list(tiles)], record=0).run()


def phase(sm: SM, name: str, wg: int | None = None) -> list[dict]:
    return [iv for iv in sm.intervals if iv["phase"] == name and wg in (None, iv["warpgroup"])]


def test_products_issued_at_once_share_the_tensor_cores():
    """Two warpgroups' S products issued together take the tensor cores one after the other
    (recorded, plain loop at d = 128: 276 ns for the first S, the second done 591 ns after K
    landed): the second is done one product later than a lone one, and with the issue
    blocking, its recorded S starts when the first is done."""
    for blocking in (False, True):
        c = sm_costs(blocking_issue=blocking)
        one, two = run_sm(c, 1, [1]), run_sm(c, 2, [1])
        s1 = phase(one, "qk", 0)[0]
        s2 = sorted(phase(two, "qk"), key=lambda iv: iv["end_ns"])
        assert s2[0]["end_ns"] == pytest.approx(s1["end_ns"])
        assert s2[1]["end_ns"] == pytest.approx(s1["end_ns"] + c.qk)
        assert max(two.ends) > max(one.ends) + c.qk - 1e-6
        if blocking:
            assert s2[1]["start_ns"] == pytest.approx(s2[0]["end_ns"])
            assert s2[1]["end_ns"] - s2[1]["start_ns"] == pytest.approx(c.qk)


def test_a_masked_step_costs_the_masks_work_and_a_half_step_half_a_block():
    c = sm_costs(mask_alu=200.0)
    whole = max(run_sm(c, 1, [(4, 0, 0)]).ends)
    masked = max(run_sm(c, 1, [(4, 2, 0)]).ends)
    half = max(run_sm(c, 1, [(4, 1, 1)]).ends)
    assert masked == pytest.approx(whole + 2 * 200.0)
    # the half step is half of a masked step's S, softmax (the mask's work too) and P·V
    soft = max(c.alu + 200.0 + c.rescale, c.exp)
    soft_half = max((c.alu + 200.0) / 2 + c.rescale, c.exp / 2)
    saved = (c.qk + c.pv) / 2 + soft - soft_half
    assert half == pytest.approx(whole + 200.0 - saved)


def test_the_softmax_and_barrier_latencies_add_to_a_lone_warpgroup():
    base = max(run_sm(sm_costs(), 1, [4]).ends)
    soft = run_sm(sm_costs(softmax_ns=100.0), 1, [4])
    assert max(soft.ends) == pytest.approx(base + 4 * 100.0)
    assert all(iv["end_ns"] - iv["start_ns"] >= 100.0 for iv in phase(soft, "softmax"))
    # every wait of a consumer lasts the barrier's round trip, data there or not: Q, then K and
    # V of each of the 4 steps
    bar = run_sm(sm_costs(barrier_ns=50.0), 1, [4])
    assert max(bar.ends) == pytest.approx(base + 9 * 50.0)
    assert len(phase(bar, "wait_v")) == 4


def test_products_slow_the_softmax_beside_them():
    """The recorded kernel's pipelined softmax runs under the warpgroup's own P·V (`under_pv`
    1): with mma_drag it runs slower while the product is on the tensor cores."""
    free = run_sm(sm_costs(under_pv=1.0), 1, [4], pipeline=True)
    dragged = run_sm(sm_costs(mma_drag=0.5, under_pv=1.0), 1, [4], pipeline=True)
    assert max(dragged.ends) > max(free.ends)
    assert max(dragged.ends) < max(run_sm(sm_costs(alu=2 * sm_costs().alu, under_pv=1.0), 1,
                                          [4], pipeline=True).ends) + 1e-6  # fmt: skip


def test_a_copy_is_logged_until_a_consumer_sees_it():
    """As the kernel's stamps time it: from the loader's issue to the first consumer past its
    barrier (the copy engine signals only the barrier), so a copy that lands early lasts until
    a consumer comes for it."""
    sm = run_sm(sm_costs(copy_latency=300.0, copy_rate=100.0), 1, [6])
    loads = {iv["block"]: iv for iv in phase(sm, "load_v")}
    pvs = {iv["block"]: iv for iv in phase(sm, "pv")}
    waits = {iv["block"]: iv for iv in phase(sm, "wait_v")}
    for j, load in loads.items():
        seen = waits[j]["end_ns"] if j in waits else pvs[j]["start_ns"]
        assert load["end_ns"] == pytest.approx(seen)


def test_the_timed_kernels_softmax_waits_for_its_own_pv_the_recorded_ones_does_not():
    """ptxas hoists the pipelined step's wait for P_{j-1} V_{j-1} above the softmax in the
    timed kernel (no exp2 of a 128-key block before it), not in the recorded one
    (`Fa3Config.softmax_under_pv`): the timed warpgroup starts its softmax only once its P·V is
    done, the recorded one while it runs; the timed launch is the slower."""
    timed = Fa3Config(consumers=2, block_n=128)
    stamped = dataclasses.replace(timed, recorded=True)
    assert timed.softmax_under_pv(128) < 0.1 and stamped.softmax_under_pv(128) == 1.0
    assert timed.softmax_under_pv(64) < 0.1 and 0.1 < timed.softmax_under_pv(256) < 0.5
    assert dataclasses.replace(timed, block_n=64).softmax_under_pv(128) <= 0.3
    p = problem()
    runs = {}
    for cfg in (timed, stamped):
        r = simulate_fa3(p, cfg, H100, shown_tiles=1)
        runs[cfg.recorded] = r
        pv = {iv["block"]: iv for iv in r.intervals if iv["phase"] == "pv" and iv["warpgroup"] == 0}
        soft: dict[int, list[dict]] = {}
        for iv in r.intervals:
            if iv["phase"] == "softmax" and iv["warpgroup"] == 0:
                soft.setdefault(iv["block"], []).append(iv)
        # how much of block j's softmax runs under P_{j-1} V_{j-1}, in the steady blocks
        for j in range(2, 10):
            a, b = pv[j - 1]["start_ns"], pv[j - 1]["end_ns"]
            total = sum(iv["end_ns"] - iv["start_ns"] for iv in soft[j])
            under = sum(max(0.0, min(b, iv["end_ns"]) - max(a, iv["start_ns"])) for iv in soft[j])
            assert under / total > 0.5 if cfg.recorded else under / total < 0.15, (j, under)
    assert runs[False].time_ns > runs[True].time_ns


def test_the_recorded_kernel_is_a_switch_of_the_configuration():
    with pytest.raises(ValueError, match="recorded"):
        Fa3Config(recorded=1)  # type: ignore[arg-type]
    assert Fa3Config().recorded is False


WIDTHS = [  # head_dim, padded width, S's columns, P V's columns
    (192, 256, 192, 192), (96, 128, 96, 128), (80, 128, 80, 128), (160, 256, 160, 256),
    (120, 128, 128, 128), (176, 256, 256, 256),
]  # fmt: skip


@pytest.mark.parametrize(("d", "pad", "qk", "pv"), WIDTHS)
def test_padded_head_dims_cost_the_kernels_widths(d: int, pad: int, qk: int, pv: int) -> None:
    """The kernel holds its tiles `pad_head_dim` wide, runs S = Q Kᵀ over `qk_columns` (192 of
    256, 96 of 128; 120 and 176 over the whole width) and P V with O's accumulator over
    `pv_columns` (192 of 256 in two parts; the padded width where the second part would be
    under 64): S costs qk/pad of the padded head dim's product, P V, the rescale and the
    epilogue pv/pad; the bytes copied are d's own, and the shared memory the padded width's."""
    cfg = Fa3Config(consumers=2, block_n=64)
    got = costs(AttentionProblem(seq_q=2048, head_dim=d), cfg, H100, "fp16")
    full = costs(AttentionProblem(seq_q=2048, head_dim=pad), cfg, H100, "fp16")
    assert got.qk == pytest.approx(full.qk * qk / pad)
    assert got.pv == pytest.approx(full.pv * pv / pad)
    assert got.rescale == pytest.approx(full.rescale * pv / pad)
    assert got.epilogue < full.epilogue if pv < pad else got.epilogue == full.epilogue
    assert got.kv_bytes == pytest.approx(full.kv_bytes * d / pad)
    assert cfg.shared_bytes(d) == cfg.shared_bytes(pad)
