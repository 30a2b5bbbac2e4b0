"""Traces of every algorithm: counts end at the closed forms, states end at the exact answer."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import PARTIAL, SKIPPED, TileGrid
from flashscope.simulator.core.trace import COUNTERS
from flashscope.simulator.teach import traffic
from flashscope.simulator.teach.algorithms import ALGORITHMS
from flashscope.simulator.teach.tracing import build_trace

CASES = [  # algo, problem kwargs, tiles
    ("naive", {"seq_q": 50, "seq_k": 70, "causal": True}, (16, 16)),
    ("fa1", {"seq_q": 70, "seq_k": 50, "causal": True}, (16, 32)),
    ("fa1", {"seq_q": 33, "seq_k": 65}, (8, 16)),
    ("fa2", {"seq_q": 50, "seq_k": 90, "causal": True}, (16, 16)),
    ("fa2", {"seq_q": 90, "seq_k": 50, "causal": True}, (32, 8)),
    ("fa2-bwd", {"seq_q": 40, "seq_k": 60, "causal": True}, (16, 16)),
    ("fa2-bwd", {"seq_q": 60, "seq_k": 40}, (32, 8)),
    ("decode", {"seq_q": 2, "seq_k": 300, "heads": 4, "kv_heads": 2}, (16, 32)),
]


def _seed() -> int:
    return int(np.random.default_rng().integers(2**31))


def _trace(algo, kwargs, tiles, seed, **kw):
    p = AttentionProblem(head_dim=24, dtype="fp32", **kwargs)
    return p, TileConfig(*tiles), build_trace(algo, p, TileConfig(*tiles), seed, **kw)


@pytest.mark.parametrize(("algo", "kwargs", "tiles"), CASES)
def test_trace_totals_and_meta(algo, kwargs, tiles):
    seed = _seed()
    p, t, trace = _trace(algo, kwargs, tiles, seed)
    assert len(trace) == ALGORITHMS[algo].n_events(p, t)
    last = trace.event(len(trace) - 1)
    head = traffic.head_for_algo(algo, p, t)
    assert last["totals"] == {c: getattr(head, c) for c in COUNTERS}
    assert trace.meta["traffic"]["algo"]["elements"]["hbm_total"] == head.hbm_total
    assert trace.meta["max_abs_err"] < 1e-5, f"seed={seed}"
    grid = trace.meta["grid"]
    assert grid["order"] == ALGORITHMS[algo].ORDER
    assert len(grid["kinds"]) == grid["q_blocks"]
    assert all(len(row) == grid["kv_blocks"] for row in grid["kinds"])
    marks = trace.meta["marks"]
    assert marks == sorted(set(marks)) and marks[0] == 0
    assert last["state"]["final"]
    # Every event's line stands for its phase, so a page can link lines to figures.
    lines = trace.meta["line_phases"]
    assert len(lines) == len(trace.meta["pseudocode"])
    for k in range(0, len(trace), max(1, len(trace) // 50)):
        ev = trace.event(k)
        assert ev["phase"] in lines[ev["line"]], (k, ev["phase"], ev["line"])


@pytest.mark.parametrize(("algo", "kwargs", "tiles"), [c for c in CASES if c[0] in ("fa1", "fa2")])
def test_flash_events_visit_exactly_the_visible_tiles(algo, kwargs, tiles):
    p, t, trace = _trace(algo, kwargs, tiles, 0)
    kinds = np.array(trace.meta["grid"]["kinds"])
    np.testing.assert_array_equal(kinds, TileGrid(p, t).kinds())
    seen, masked = set(), set()
    for i in range(len(trace)):
        ev = trace.event(i)
        if ev["phase"] == "qk":
            seen.add((ev["q_block"], ev["kv_block"]))
            if ev["masked"]:
                masked.add((ev["q_block"], ev["kv_block"]))
    assert seen == {tuple(x) for x in np.argwhere(kinds != SKIPPED).tolist()}
    assert masked == {tuple(x) for x in np.argwhere(kinds == PARTIAL).tolist()}
    order = [trace.event(i)["kv_block"] for i in range(len(trace))]
    if algo == "fa1":  # kv-outer: key blocks never go back
        kv = [j for j in order if j is not None]
        assert kv == sorted(kv)


@pytest.mark.parametrize(("algo", "kwargs", "tiles"), [c for c in CASES if c[0] in ("fa1", "fa2")])
def test_final_states_hold_exact_attention(algo, kwargs, tiles):
    seed = _seed()
    p, t, trace = _trace(algo, kwargs, tiles, seed)
    o_ref = trace.extras["o_ref"]
    grid = TileGrid(p, t)
    # FA-1 never visits a query block that sees no key: its O stays the initial zeros.
    want = p.seq_q if algo == "fa2" else int(grid.rows[grid.visible > 0].sum())
    finals = 0
    for i in range(len(trace)):
        ev = trace.event(i)
        st = ev["state"]
        if st["final"]:
            r0, r1 = st["rows"]
            np.testing.assert_allclose(st["o_hat"], o_ref[r0:r1], atol=1e-5, err_msg=str(seed))
            finals += r1 - r0
        if ev["phase"] == "softmax":  # m, ℓ move with the op; the accumulator waits for P·V
            nxt = trace.event(i + 1)["state"]
            assert st["m"] == nxt["m"] and st["l"] == nxt["l"]
    assert finals == want


def test_backward_states_end_at_the_gradients():
    seed = _seed()
    *_, trace = _trace("fa2-bwd", CASES[5][1], CASES[5][2], seed)
    ref = trace.extras["ref"]
    dk_seen: dict[int, list] = {}
    for i in range(len(trace)):
        ev = trace.event(i)
        st = ev["state"]
        if ev["phase"] == "convert_dq":
            r0, r1 = st["rows"]
            np.testing.assert_allclose(st["dq"], ref["dq"][r0:r1], atol=1e-5, err_msg=str(seed))
        if ev["phase"] == "store_dkdv":
            c0, c1 = st["cols"]
            np.testing.assert_allclose(st["dk"], ref["dk"][c0:c1], atol=1e-5, err_msg=str(seed))
            np.testing.assert_allclose(st["dv"], ref["dv"][c0:c1], atol=1e-5, err_msg=str(seed))
            assert dk_seen[ev["kv_block"]] == st["dk"]  # the last dk op already held it
        if ev["phase"] == "dk":
            dk_seen[ev["kv_block"]] = st["dk"]
        if ev["phase"] == "recompute_p":
            r0, r1 = st["rows"]
            c0, c1 = st["cols"]
            assert len(st["p"]) == r1 - r0 and len(st["p"][0]) == c1 - c0
            assert "ds" not in st  # dS comes two ops later
        if ev["phase"] == "dq":  # the dq op adds this tile's dS K to the running partial
            before = trace.event(i - 1)["state"]["dq"]
            assert before != st["dq"] or not np.any(st["ds"])


def test_decode_states_partials_and_merge():
    seed = _seed()
    *_, trace = _trace("decode", CASES[7][1], CASES[7][2], seed, splits=3)
    grid = trace.meta["grid"]
    assert (grid["splits"], grid["chunk"], grid["rows"]) == (3, 4, 4)
    o_ref = trace.extras["o_ref"]
    partial, reduce, rounds = [], [], []
    for i in range(len(trace)):
        ev = trace.event(i)
        if ev["phase"] == "store_partial":
            partial.append(ev["state"])
        if ev["phase"] == "reduce":
            reduce.append(ev["state"])
        if ev["phase"] == "load_kv":
            rounds.append((ev["state"]["split"], ev["kv_block"]))
    # The splits run at once: each takes its first key block before any takes its second, and
    # the last split (fewer blocks: 10 over chunks of 4) writes its partial first.
    assert rounds[:6] == [(0, 0), (1, 4), (2, 8), (0, 1), (1, 5), (2, 9)]
    assert [s["split"] for s in partial] == [2, 0, 1]
    assert [s["split"] for s in reduce] == [0, 1, 2]
    partial.sort(key=lambda s: s["split"])
    final = trace.event(len(trace) - 1)["state"]
    np.testing.assert_allclose(final["o"], o_ref, atol=1e-5, err_msg=str(seed))
    np.testing.assert_allclose(reduce[-1]["o"], o_ref, atol=1e-5, err_msg=str(seed))
    assert reduce[-1]["lse"] == final["lse"]
    assert partial[0]["partial_lse"] == reduce[0]["lse"]  # merging one split changes nothing


def test_state_budget_widens_the_column_stride_then_refuses():
    p = AttentionProblem(seq_q=256, head_dim=64, dtype="fp32")
    t = TileConfig(16, 2)  # 128 key blocks × 256 rows of snapshots
    full = build_trace("fa2", p, t, 0)
    assert full.meta["col_stride"] == 1
    small = build_trace("fa2", p, t, 0, budget_bytes=2**20 * 3)
    assert small.meta["col_stride"] > 1
    st = small.event(len(small) - 1)["state"]
    assert len(st["o"][0]) == small.meta["d_shown"] == 64 // small.meta["col_stride"]
    with pytest.raises(ValueError, match="budget"):
        build_trace("fa2", p, t, 0, budget_bytes=2**19)
    with pytest.raises(ValueError, match="over the limit"):
        build_trace("fa2", p, t, 0, max_events=100)
    with pytest.raises(ValueError, match="algo must be one of"):
        build_trace("fa3", p, t, 0)
    with pytest.raises(ValueError, match="causal"):
        build_trace("decode", AttentionProblem(seq_q=1, causal=True), t, 0)
