"""Reading the Hopper forward's recorded stamps into warpgroup intervals (no GPU: the stamps
are written here as the kernel would write them; tests/kernels/test_gpu.py runs the kernel)."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.kernels.hopper_forward import (
    REC_HEADER,
    REC_STEP_EVENTS,
    REC_TILE_EVENTS,
    WsConfig,
    record_size,
    schedule,
    split_launches,
)
from flashscope.kernels.warpgroups import (
    PHASES,
    Stamps,
    busy_fractions,
    program_tiles,
    timeline_intervals,
)

PIPELINED_ORDER = (0, 1, 2, 3, 4, 5, 6, 7, 8)  # a pipelined step's stamps in time order
PLAIN_ORDER = (0, 2, 5, 6, 3, 4, 7)


def synthetic(cfg: WsConfig, tile_steps: list[int], steps: int, tiles: int, rng) -> Stamps:
    """Stamps in the order the kernel takes them, with random gaps (cycles), and a global timer
    running at 3 ns a cycle."""
    roles = cfg.consumers + 1
    raw = np.full((1, roles, record_size(steps, tiles)), -1, dtype=np.int64)
    n_step, n_tile = steps * REC_STEP_EVENTS, tiles * REC_TILE_EVENTS
    for r in range(roles):
        clock = 1000 + int(rng.integers(0, 50))
        start = clock
        step = raw[0, r, :n_step].reshape(steps, REC_STEP_EVENTS)
        tile = raw[0, r, n_step : n_step + n_tile].reshape(tiles, REC_TILE_EVENTS)

        def tick() -> int:
            nonlocal clock
            clock += int(rng.integers(1, 40))
            return clock

        g = 0
        for i, n in enumerate(tile_steps):
            if r == cfg.consumers:  # the loader
                for c in range(cfg.consumers):
                    tile[i, c] = tick()
                for _ in range(n):
                    for code in (0, 1, 2):
                        t = tick()
                        if g < steps:  # the kernel stamps its first `steps` steps only
                            step[g, code] = t
                    g += 1
                continue
            tile[i, 0], tile[i, 1] = tick(), tick()
            for j in range(n):
                if cfg.pipeline:
                    order = (0, 1, 2, 5, 6) if j == 0 else PIPELINED_ORDER
                else:
                    order = PLAIN_ORDER
                for code in order:
                    t = tick()
                    if g < steps:
                        step[g, code] = t
                g += 1
            if cfg.pipeline:
                for code in (2, 3, 4):
                    tile[i, code] = tick()
            tile[i, 5], tile[i, 6] = tick(), tick()
        head = raw[0, r, n_step + n_tile : n_step + n_tile + REC_HEADER]
        end = tick()
        head[:] = (start, 3 * start, end, 3 * end, end, 3 * end)
    return Stamps(raw, cfg, steps, tiles)


@pytest.mark.parametrize(
    "cfg",
    [
        WsConfig(2, 128, 2, True, pingpong=True),
        WsConfig(3, 128, 2, True),
        WsConfig(2, 128, 2, False),
    ],
    ids=["pingpong", "pipelined", "plain"],
)
def test_every_block_gets_its_products_softmax_and_copies(cfg: WsConfig, seed: int) -> None:
    rng = np.random.default_rng(seed)
    tile_steps = [int(x) for x in rng.integers(1, 5, size=3)]
    stamps = synthetic(cfg, tile_steps, steps=sum(tile_steps) + 2, tiles=4, rng=rng)
    got = timeline_intervals(stamps, tile_steps)
    assert {x["phase"] for x in got} <= set(PHASES)
    blocks = sum(tile_steps)
    for c in range(cfg.consumers):
        mine = [x for x in got if x["role"] == "consumer" and x["warpgroup"] == c]
        for phase in ("qk", "pv", "wait_k", "wait_v"):
            keys = {(x["tile"], x["block"]) for x in mine if x["phase"] == phase}
            want = {(i, j) for i, n in enumerate(tile_steps) for j in range(n)}
            assert keys == want, f"consumer {c} {phase}: {sorted(keys)} against {sorted(want)}"
        assert len([x for x in mine if x["phase"] == "epilogue"]) == len(tile_steps)
        turns = [x for x in mine if x["phase"] == "wait_turn"]
        assert len(turns) == (blocks if cfg.pingpong else 0)
    loader = [x for x in got if x["role"] == "loader"]
    assert all(x["warpgroup"] == -1 for x in loader)
    assert len([x for x in loader if x["phase"] == "load_k"]) == blocks
    assert len([x for x in loader if x["phase"] == "load_q"]) == len(tile_steps) * cfg.consumers
    assert all(x["end_ns"] >= x["start_ns"] >= 0 for x in got)
    # 3 ns a cycle: every time is a whole number of cycles from the first stamp
    assert all(x["start_ns"] % 3 == 0 and x["end_ns"] % 3 == 0 for x in got)


def test_a_pipelined_product_spans_its_issue_to_its_completion(seed: int) -> None:
    cfg = WsConfig(2, 128, 2, True)
    rng = np.random.default_rng(seed)
    stamps = synthetic(cfg, [3], steps=4, tiles=1, rng=rng)
    got = timeline_intervals(stamps, [3])
    step = stamps.role(0, 0)[0]
    origin = min(stamps.role(0, r)[2][0] for r in range(3))
    ns = 3
    qk1 = next(x for x in got if x["warpgroup"] == 0 and x["phase"] == "qk" and x["block"] == 1)
    assert (
        qk1["start_ns"] == (step[1, 2] - origin) * ns
        and qk1["end_ns"] == (step[1, 5] - origin) * ns
    )
    pv0 = next(x for x in got if x["warpgroup"] == 0 and x["phase"] == "pv" and x["block"] == 0)
    assert (
        pv0["start_ns"] == (step[1, 3] - origin) * ns
        and pv0["end_ns"] == (step[1, 7] - origin) * ns
    )


def test_tiles_beyond_the_recorded_steps_are_left_out(seed: int) -> None:
    cfg = WsConfig(2, 128, 2, True)
    rng = np.random.default_rng(seed)
    stamps = synthetic(
        cfg, [2, 2], steps=3, tiles=4, rng=rng
    )  # the second tile's last step is not recorded
    got = timeline_intervals(stamps, [2, 2])
    assert {x["tile"] for x in got} == {0}


def test_the_clock_is_scaled_within_one_launch_and_the_span_runs_to_the_last_end(seed) -> None:
    """A stamping program's rest runs in a launch of its own, maybe on another SM, whose
    counter is not the first's: its last end stamps a counter that must not be used."""
    cfg = WsConfig(2, 128, 2, True)
    rng = np.random.default_rng(seed)
    stamps = synthetic(cfg, [2, 2], steps=4, tiles=2, rng=rng)
    want = stamps.ns_per_cycle(0)
    first_end = stamps.span_ns()
    heads = stamps.raw[0, :, -REC_HEADER:]
    later = int(heads[:, 5].max()) + int(rng.integers(1_000, 100_000))
    heads[0, 4:] = (int(rng.integers(1, 10**15)), later)  # another SM's counter, a later end
    assert stamps.ns_per_cycle(0) == want == pytest.approx(3.0)
    assert stamps.span_ns() == later - heads[:, 1].min() > first_end


def test_busy_fractions_count_overlaps_once() -> None:
    iv = [
        {"phase": "qk", "start_ns": 0.0, "end_ns": 4.0},
        {"phase": "pv", "start_ns": 2.0, "end_ns": 6.0},  # overlaps the first: 6 in all
        {"phase": "softmax", "start_ns": 6.0, "end_ns": 8.0},
        {"phase": "load_k", "start_ns": 9.0, "end_ns": 10.0},
    ]
    got = busy_fractions(iv)
    assert got == pytest.approx({"tensor": 0.6, "softmax": 0.2, "copy": 0.1})


def test_a_programs_tiles_follow_the_launch_order() -> None:
    cfg = WsConfig(2, 128, 2, True)  # 128-row tiles
    # 2 heads of 512 queries and keys: 4 tiles each, 4 key blocks each, not causal
    assert program_tiles(cfg, 2, 512, 512, False, sms=132, program=0) == [4]
    persistent = WsConfig(2, 128, 2, True, persistent=True)
    assert program_tiles(persistent, 2, 512, 512, False, sms=3, program=0) == [4, 4, 4]
    # causal: the heaviest first; all the program's tiles together see every block once per row
    steps = [program_tiles(persistent, 1, 512, 512, True, sms=2, program=p) for p in (0, 1)]
    assert sorted(steps[0] + steps[1]) == [1, 2, 3, 4]


def launched_tiles(sched, tiles: int, programs: int, rec_tiles: int, pid: int, mode: int):
    """The tiles program `pid` runs in a launch of RECORD `mode`, as the kernel's `_share`,
    `_window` and `_tile_at` take them (`sched`: the host schedule, or None: tiles in turn)."""
    if sched is None:
        first, end, stride = pid, tiles, programs
    else:
        first, end, stride = int(sched[pid]), int(sched[pid + 1]), 1
    if mode == 7:
        end = min(end, first + rec_tiles * stride)
    elif mode == 8:
        first += rec_tiles * stride
    ks = range(first, end, stride)
    return [int(sched[programs + 1 + k]) for k in ks] if sched is not None else list(ks)


def test_a_recordings_launches_run_every_tile_once(seed: int) -> None:
    """A recording side by side (`split_launches`) runs each tile of the launch once, whatever
    the shares: tiles in turn (one each, or persistent) or a causal host schedule's uneven ones
    (`schedule`), as the kernel's `_program`, `_share` and `_window` take them: RECORD 7 the
    first `rec_tiles` entries of a stamping program's share, RECORD 8 the rest, RECORD 5 the
    whole shares of the programs numbered from `detail` on."""
    rng = np.random.default_rng(seed)
    for case in range(200):
        tiles = int(rng.integers(1, 600))
        persistent, scheduled = bool(rng.integers(2)), bool(rng.integers(2))
        programs = min(tiles, int(rng.integers(1, 160))) if persistent else tiles
        detail, rec_tiles = int(rng.integers(0, min(programs, 3) + 1)), int(rng.integers(1, 6))
        sched = schedule(rng.uniform(1.0, 40.0, tiles), programs) if scheduled else None

        launches = split_launches(programs, tiles, detail)
        ran = np.zeros(tiles, dtype=int)
        for mode, grid, side in launches:
            assert side == (mode == 5), (seed, case, launches)
            for g in range(grid):
                pid = g + (detail if mode == 5 else 0)
                for t in launched_tiles(sched, tiles, programs, rec_tiles, pid, mode):
                    ran[t] += 1
        what = f"seed={seed} case={case}: {tiles} tiles, {programs} programs, detail {detail}"
        assert (ran == 1).all(), f"{what}, scheduled={scheduled}: {launches}"
        assert [m for m, _, _ in launches][:1] == ([7] if detail else [5]), what


def test_record_and_time_alternates_its_rounds_and_keeps_the_medians(monkeypatch) -> None:
    """`record_and_time` (no GPU here: the launch, the timer and the stamps stood in for) times
    plain, then recorded, round after round, so that a clock drifting over the rounds reaches
    both alike, and gives each figure as the median of its rounds with every round kept."""
    import torch

    import flashscope.kernels.hopper_forward as hf
    import flashscope.kernels.timing as timing
    import flashscope.kernels.warpgroups as wg

    rng = np.random.default_rng()
    rounds = int(rng.integers(3, 6))
    order: list[str] = []
    drift = iter(np.linspace(1.0, 1.3, 4 * rounds))  # every timing slower than the last
    spans = iter(rng.uniform(0.5, 2.0, rounds))
    gates = iter(rng.uniform(0.1, 0.3, rounds))  # the gate before a recording's launches

    def launch(q, k, v, causal, scale, cfg, record=None):
        return (q.clone(), q.sum(-1))  # the same output recorded or not

    def median_ms(calls):
        (call,) = calls
        mode = getattr(call.keywords.get("record"), "mode", None)
        order.append("gated" if call.func is hf.gated else
                     {None: "plain", 1: "masked"}.get(mode, "branch"))  # fmt: skip
        return float(next(drift))

    class FakeStamps:
        def __init__(self) -> None:
            self.span = float(next(spans)) * 1e6

        def span_ns(self) -> float:
            return self.span

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *_: None)
    monkeypatch.setattr(hf, "launch_forward_ws", launch)
    monkeypatch.setattr(timing, "median_ms", median_ms)
    monkeypatch.setattr(wg, "new_recording", lambda q, cfg, **_: hf.Recording(q, 1, 1, 1, 1))
    monkeypatch.setattr(wg, "stamps_of", lambda rec, cfg: FakeStamps())
    monkeypatch.setattr(hf, "gate_ms", lambda: float(next(gates)))
    q = torch.zeros(1, 1, 8, 4)
    _, fig = wg.record_and_time(q, q, q, False, WsConfig(2), masked=True, rounds=rounds)
    assert order == ["plain", "gated", "masked", "branch"] * rounds
    assert fig["same_output"] and fig["mode"] == hf.SPLIT_RECORDING
    for key, name in (("plain_gated_passes", "plain_ms"), ("plain_passes", "plain_ungated_ms"),
                      ("branch_passes", "recorded_branch_ms"), ("masked_passes", "recorded_ms"),
                      ("span_passes", "span_ms"), ("gate_passes", "gate_ms")):  # fmt: skip
        assert len(fig[key]) == rounds
        assert fig[name] == pytest.approx(float(np.median(fig[key])))
    # the recording's launches wait behind a gate: its time is taken off the recorded
    # timing and the plain one taken behind it, round by round
    for raw, rec, gated, gate in zip(
        fig["branch_raw_passes"],
        fig["branch_passes"],
        fig["plain_gated_passes"],
        fig["gate_passes"],
        strict=True,
    ):
        assert rec == pytest.approx(raw - gate)
        # the drift reached plain and recorded alike: each round's recorded timing comes after
        # its plain one, so neither median is from the start or the end of the drift alone
        assert gated + gate < raw
    assert fig["branch_raw_passes"][0] < fig["plain_gated_passes"][-1] + fig["gate_passes"][-1]
    assert fig["overhead"] == pytest.approx(fig["recorded_branch_ms"] / fig["plain_ms"] - 1)
    assert fig["span_vs_plain"] == pytest.approx(fig["span_ms"] / fig["plain_ms"] - 1)
    assert fig["overhead_masked"] == pytest.approx(fig["recorded_ms"] / fig["plain_ungated_ms"] - 1)
    with pytest.raises(ValueError, match="rounds must be 1 or more"):
        wg.record_and_time(q, q, q, False, WsConfig(2), rounds=0)
