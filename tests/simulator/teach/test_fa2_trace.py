"""The FlashAttention-2 forward trace: exact output, exact counts, consistent per-step state."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach import traffic
from flashscope.simulator.teach.numerics import fa2_forward, naive_attention, online_softmax
from flashscope.simulator.teach.tracing import build_trace, random_inputs

SIZES = [  # (seq_q, seq_k, head_dim, block_m, block_n): square, ragged, tiny, blocks > N
    (256, 256, 64, 64, 64),
    (97, 97, 16, 32, 16),
    (200, 200, 80, 64, 128),
    (1, 1, 8, 16, 16),
    (130, 77, 32, 16, 64),
    (64, 300, 24, 128, 32),
]


@pytest.mark.parametrize(("nq", "nk", "d", "bm", "bn"), SIZES)
def test_final_output_matches_naive_attention(nq, nk, d, bm, bn):
    seed = int(np.random.default_rng().integers(2**31))  # fresh inputs every run
    p = AttentionProblem(seq_q=nq, seq_k=nk, head_dim=d, dtype="fp32")
    trace = build_trace("fa2", p, TileConfig(bm, bn), seed)
    o, o_ref = trace.extras["o"], trace.extras["o_ref"]
    assert o.shape == (nq, d)
    np.testing.assert_allclose(o, o_ref, atol=2e-6, rtol=1e-5, err_msg=f"seed={seed}")
    assert trace.meta["max_abs_err"] == pytest.approx(float(np.abs(o - o_ref).max()))


@pytest.mark.parametrize("block", [1, 2, 3, 5, 64, 1000])
def test_online_softmax_equals_softmax(block):
    rng = np.random.default_rng()
    x = rng.standard_normal(37) * 10
    x[5] = 1000.0  # large values must not overflow
    x[9] = -np.inf  # a key nobody may see
    want = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    got = online_softmax(x, block)
    np.testing.assert_allclose(got["softmax"], want, rtol=1e-12, atol=0)
    assert got["m"][-1] == x.max()
    assert len(got["m"]) == -(-37 // block)


def test_recording_matches_a_per_block_loop():
    """The vectorized recording equals the textbook per-block loop, state for state."""
    rng = np.random.default_rng()
    nq, nk, d, bm, bn = 50, 70, 16, 16, 32
    q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for n in (nq, nk, nk))
    scale = 0.25
    problem = AttentionProblem(seq_q=nq, seq_k=nk, head_dim=d, dtype="fp32", sm_scale=scale)
    rec = fa2_forward(q, k, v, problem, TileConfig(bm, bn))
    for i in range(0, nq, bm):
        m = np.full(min(bm, nq - i), -np.inf)
        l = np.zeros_like(m)
        acc = np.zeros((len(m), d))
        for j, c in enumerate(range(0, nk, bn)):
            s = q[i : i + bm].astype(np.float64) @ k[c : c + bn].T.astype(np.float64) * scale
            m_new = np.maximum(m, s.max(1))
            alpha = np.exp(m - m_new)
            p = np.exp(s - m_new[:, None])
            l = alpha * l + p.sum(1)
            acc = alpha[:, None] * acc + p @ v[c : c + bn]
            m = m_new
            np.testing.assert_allclose(rec.m[j, i : i + bm], m, rtol=1e-6)
            np.testing.assert_allclose(rec.l[j, i : i + bm], l, rtol=1e-5)
            np.testing.assert_allclose(rec.alpha[j, i : i + bm], alpha, rtol=1e-5, atol=1e-30)
            np.testing.assert_allclose(rec.acc[j, i : i + bm], acc, rtol=1e-4, atol=1e-5)


def test_event_sums_equal_closed_form_on_random_shapes():
    from flashscope.simulator.teach.algorithms import fa2

    rng = np.random.default_rng()
    for _ in range(25):
        nq, nk = (int(x) for x in rng.integers(1, 400, size=2))
        d = int(rng.integers(1, 9)) * 8
        bm, bn = (int(2 ** rng.integers(1, 8)) for _ in range(2))
        p = AttentionProblem(seq_q=nq, seq_k=nk, head_dim=d)
        t = TileConfig(bm, bn)
        totals = fa2.program(p, t).totals()
        want = traffic.fa2_head(p, t)
        assert (totals["hbm_read"], totals["hbm_write"]) == (want.hbm_read, want.hbm_write), (
            nq,
            nk,
            d,
            bm,
            bn,
        )
        assert totals["stats_write"] == want.stats_write
        assert totals["flops"] == 4 * nq * nk * d


@pytest.mark.parametrize(
    ("n", "naive", "flash"),
    [
        (256, 327_680, 98_304),
        (512, 1_179_648, 327_680),
        (1024, 4_456_448, 1_179_648),
        (2048, 17_301_504, 4_456_448),
        (4096, 68_157_440, 17_301_504),
    ],
)
def test_seed_hbm_access_table(n, naive, flash):
    """The seed's table: d = 64, 128×128 tiles, one head."""
    p = AttentionProblem(seq_q=n, head_dim=64)
    t = TileConfig(128, 128)
    assert traffic.naive_head(p).hbm_total == naive
    assert traffic.fa2_head(p, t).hbm_total == flash
    assert traffic.seed_flash_head(n, 64, 128, 128) == flash


def test_trace_counters_at_n2048_match_the_seed():
    p = AttentionProblem(seq_q=2048, head_dim=64)
    trace = build_trace("fa2", p, TileConfig(128, 128), 0)
    last = trace.event(len(trace) - 1)
    assert last["totals"]["hbm_read"] + last["totals"]["hbm_write"] == 4_456_448
    assert trace.meta["traffic"]["naive"]["elements"]["hbm_total"] == 17_301_504
    assert trace.meta["traffic"]["naive"]["elements"]["hbm_read"] == 8_781_824
    assert trace.meta["traffic"]["naive"]["elements"]["hbm_write"] == 8_519_680


def test_events_carry_the_state_of_their_block():
    p = AttentionProblem(seq_q=100, head_dim=32, dtype="fp32")
    t = TileConfig(32, 16)
    trace = build_trace("fa2", p, t, 7)
    q, k, v = random_inputs(p, 7)
    o_ref = naive_attention(q, k, v, p.scale)
    phases = [trace.event(i)["phase"] for i in range(len(trace))]
    assert phases[:6] == ["load_q", "load_kv", "qk", "softmax", "pv", "load_kv"]
    stores = [i for i, ph in enumerate(phases) if ph == "store"]
    assert len(stores) == t.q_blocks(p)
    for i in stores:
        ev = trace.event(i)
        r0, r1 = ev["state"]["rows"]
        assert ev["state"]["final"]
        np.testing.assert_allclose(np.array(ev["state"]["o_hat"]), o_ref[r0:r1], atol=1e-5)
    first = trace.event(0)["state"]
    assert first["m"] == [None] * 32 and first["l"] == [0.0] * 32 and first["alpha"] is None
    # The softmax op has new m and ℓ but the accumulator of the previous block.
    sm, pv = trace.event(7), trace.event(8)
    assert (sm["phase"], pv["phase"]) == ("softmax", "pv")
    assert sm["state"]["m"] == pv["state"]["m"]
    assert sm["state"]["o"] == trace.event(6)["state"]["o"] != pv["state"]["o"]


def test_wide_heads_are_downsampled_over_d():
    p = AttentionProblem(seq_q=16, head_dim=256, dtype="fp32")
    trace = build_trace("fa2", p, TileConfig(16, 16), 0, o_col_limit=64)
    st = trace.event(len(trace) - 1)["state"]
    assert st["col_stride"] == 4
    assert len(st["o"][0]) == 64
    want = trace.extras["o"].reshape(16, 64, 4).mean(-1)
    np.testing.assert_allclose(np.array(st["o_hat"]), want, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seq_q": 0}, "seq_q must be ≥ 1"),
        ({"head_dim": 2.5}, "head_dim must be an integer"),
        ({"heads": 6, "kv_heads": 4}, "kv_heads must divide heads"),
        ({"dtype": "fp8"}, "dtype must be one of"),
    ],
)
def test_problem_validates_itself(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AttentionProblem(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block_m": 48}, "block_m must be a power of two"),
        ({"block_n": 0}, "block_n must be ≥ 1"),
        ({"warps": 3}, "warps must be a power of two"),
        ({"stages": 0}, "stages must be ≥ 1"),
    ],
)
def test_tiles_validate_themselves(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TileConfig(**kwargs)
