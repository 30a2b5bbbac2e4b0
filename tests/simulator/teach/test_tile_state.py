"""The forward trace's tile state (S, P, the rescale of ℓ and Õ) and its error readout, held to
a float64 recomputation from the trace's own inputs on fresh random problems."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.exactness import UNIT_ROUNDOFF
from flashscope.simulator.teach.tracing import build_trace, random_inputs


def _array(x: list) -> np.ndarray:
    """JSON numbers back to floats, null (−∞ in a trace) as −∞."""
    a = np.array(x, dtype=object)
    a[a == None] = -np.inf  # noqa: E711 (elementwise on an object array)
    return a.astype(np.float64)


def _mean_view(a: np.ndarray, stride: int, masked: bool) -> np.ndarray:
    """Groups of stride × stride averaged; `masked`: over the finite entries only (−∞ if none)."""
    rows, cols = -(-a.shape[0] // stride), -(-a.shape[1] // stride)
    out = np.empty((rows, cols))
    for i in range(rows):
        for j in range(cols):
            g = a[i * stride : (i + 1) * stride, j * stride : (j + 1) * stride]
            if masked:
                g = g[np.isfinite(g)]
                out[i, j] = g.mean() if g.size else -np.inf
            else:
                out[i, j] = g.mean()
    return out


def _columns(a: np.ndarray, stride: int) -> np.ndarray:
    """Groups of `stride` columns averaged (a short last group averages what it has)."""
    return np.stack([a[:, c : c + stride].mean(axis=1) for c in range(0, a.shape[1], stride)], 1)


class Oracle:
    """The problem's scores, running statistics and outputs in float64, from its inputs."""

    def __init__(self, p: AttentionProblem, seed: int) -> None:
        q, k, v = (x.astype(np.float64) for x in random_inputs(p, seed))
        self.v = v
        s = q @ k.T * p.scale  # (Nq, Nk)
        if p.causal:
            keys, rows = np.arange(p.seq_k)[None, :], np.arange(p.seq_q)[:, None]
            s = np.where(keys <= rows + p.seq_k - p.seq_q, s, -np.inf)
        self.s = s
        self.o = self.upto(p.seq_k)

    def stats(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Row max and row sum of e^(S − m) over keys [0, c); m = −∞, ℓ = 0 before any."""
        if c == 0:
            return np.full(self.s.shape[0], -np.inf), np.zeros(self.s.shape[0])
        m = self.s[:, :c].max(axis=1)
        sub = np.where(np.isfinite(m), m, 0.0)
        return m, np.exp(self.s[:, :c] - sub[:, None]).sum(axis=1)

    def upto(self, c: int) -> np.ndarray:
        """softmax over keys [0, c) times V: the output of the keys seen so far (0 if none)."""
        m, l = self.stats(c)
        sub = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(self.s[:, :c] - sub[:, None])
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(l[:, None] > 0, e @ self.v[:c] / np.where(l > 0, l, 1)[:, None], 0)


def _problem(rng: np.random.Generator, dtype: str) -> tuple[AttentionProblem, TileConfig]:
    nq, nk = int(rng.integers(1, 120)), int(rng.integers(1, 150))
    p = AttentionProblem(
        seq_q=nq,
        seq_k=nk,
        head_dim=int(rng.integers(4, 40)),
        causal=bool(rng.integers(2)),
        dtype=dtype,
    )
    return p, TileConfig(int(2 ** rng.integers(2, 6)), int(2 ** rng.integers(2, 6)))


@pytest.mark.parametrize("algo", ["fa2", "fa1"])
@pytest.mark.parametrize("limit", [64, 4])  # 4: tiles averaged over 2 × 2 cells and beyond
def test_s_p_and_the_rescale_equal_a_float64_recomputation(algo, limit):
    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    p, t = _problem(rng, "fp32")
    trace = build_trace(algo, p, t, seed, o_col_limit=limit)
    ref = Oracle(p, seed)
    tiles = 0
    for i in range(len(trace)):
        ev = trace.event(i)
        st = ev["state"]
        if "s" not in st:
            assert ev["kv_block"] is None or ev["phase"] in ("load_kv", "load_q"), ev["phase"]
            continue
        (r0, r1), (c0, c1), stride = st["rows"], st["cols"], st["tile_stride"]
        assert c0 == ev["kv_block"] * t.block_n and r0 == ev["q_block"] * t.block_m
        assert stride == 1 or -(-max(r1 - r0, c1 - c0) // stride) <= limit
        s64 = ref.s[r0:r1, c0:c1]
        want = _mean_view(s64, stride, masked=True)
        got = _array(st["s"])
        msg = f"seed={seed} step {i}"
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=msg)
        np.testing.assert_allclose(got[np.isfinite(got)], want[np.isfinite(want)], atol=2e-5)
        if "p" not in st:
            assert ev["phase"] == "qk"
            continue
        m_prev, l_prev = (x[r0:r1] for x in ref.stats(c0))
        m_tile = s64.max(axis=1)
        m_new = np.maximum(m_prev, m_tile)
        sub = np.where(np.isfinite(m_new), m_new, 0.0)
        if algo == "fa2":  # P = e^(S − m′)
            p64 = np.exp(s64 - sub[:, None])
            assert np.allclose(_array(st["m"]), m_new, atol=1e-5), msg
        else:  # FA-1: P̃ = e^(S − m̃), m̃ the tile's own row max
            p64 = np.exp(s64 - np.where(np.isfinite(m_tile), m_tile, 0.0)[:, None])
        np.testing.assert_allclose(_array(st["p"]), _mean_view(p64, stride, False), atol=2e-5)
        alpha = np.exp(m_prev - sub)
        p_sum = np.exp(s64 - sub[:, None]).sum(axis=1)
        np.testing.assert_allclose(st["l_prev"], l_prev, rtol=2e-5, atol=1e-6, err_msg=msg)
        np.testing.assert_allclose(
            st["l_rescaled"], alpha * l_prev, rtol=2e-5, atol=1e-6, err_msg=msg
        )
        np.testing.assert_allclose(st["p_sum"], p_sum, rtol=2e-5, atol=1e-6, err_msg=msg)
        # α goes out rounded to 6 decimals: up to 5e-7 off, which is large beside a small α.
        np.testing.assert_allclose(st["alpha"], alpha, rtol=2e-5, atol=6e-7, err_msg=msg)
        l_now = np.array(st["l_rescaled"]) + np.array(st["p_sum"])
        np.testing.assert_allclose(
            st["l"], l_now, rtol=1e-6, atol=2e-6, err_msg=msg
        )  # ℓ′ = α·ℓ + Σ
        if ev["phase"] == "pv" and algo == "fa2":  # Õ′ = α·Õ + P·Vⱼ, term by term
            col = st["col_stride"]
            pv = (p64 @ ref.v[c0:c1]).reshape(r1 - r0, -1)
            pv_shown = np.stack([_mean_view(r[None, :], 1, False)[0] for r in pv])
            pv_shown = np.array(
                [[row[c : c + col].mean() for c in range(0, len(row), col)] for row in pv_shown]
            )
            np.testing.assert_allclose(st["pv"], pv_shown, atol=2e-5, err_msg=msg)
            acc_prev = np.exp(ref.s[r0:r1, :c0] - sub[:, None]) @ ref.v[:c0]  # α·Õ in one go
            acc_prev = np.array(
                [[row[c : c + col].mean() for c in range(0, len(row), col)] for row in acc_prev]
            )
            np.testing.assert_allclose(st["o_rescaled"], acc_prev, atol=2e-5, err_msg=msg)
            np.testing.assert_allclose(
                np.array(st["o_rescaled"]) + np.array(st["pv"]), st["o"], atol=5e-5, err_msg=msg
            )
        tiles += 1
    assert tiles > 0 or trace.meta["grid"]["kv_blocks"] == 0


# How many times the dtype's floor u·max|O| the output as written may miss the exact one: fp16
# and bf16 round once when O is written (observed ≤ 1.3); fp32 sums a few roundings of its own
# (observed ≤ 10); FA-1 rounds O to the dtype after every tile (checked per key block below).
FLOOR_MULTIPLE = {"fp32": 32.0, "fp16": 4.0, "bf16": 4.0}


@pytest.mark.parametrize("algo", ["fa2", "fa1"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_error_readout_follows_float64_and_ends_at_the_rounding_floor(algo, dtype):
    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    p, t = _problem(rng, dtype)
    trace = build_trace(algo, p, t, seed)
    ref = Oracle(p, seed)
    u = UNIT_ROUNDOFF[dtype]
    n_kv = trace.meta["grid"]["kv_blocks"]
    # The simulator's O so far differs from the float64 one by its own rounding: P and V in
    # the dtype (and, for FA-1, O stored after every tile).
    tol = (4 if algo == "fa2" else 4 * (n_kv + 1)) * u * float(np.abs(ref.v).max()) + 1e-6
    finals = 0
    for i in range(len(trace)):
        ev = trace.event(i)
        st = ev["state"]
        if ev["q_block"] is None:
            continue
        r0, r1 = st["rows"]
        msg = f"seed={seed} step {i} {ev['phase']}"
        history = st["err_history"]
        seen = len(history) - 1 - (1 if st["final"] else 0)  # key blocks in the output so far
        o_seen = ref.upto(min(seen * t.block_n, p.seq_k))[r0:r1]
        want = np.abs(o_seen - ref.o[r0:r1]).max(axis=1)
        if not st["final"]:
            np.testing.assert_allclose(st["err"], want, atol=tol, rtol=1e-3, err_msg=msg)
            assert max(st["err"], default=0.0) == pytest.approx(history[-1], rel=1e-3, abs=1e-12)
        assert history[0] == pytest.approx(np.abs(ref.o[r0:r1]).max(initial=0.0), rel=1e-3)
        floor = st["err_floor"]
        assert floor == pytest.approx(u * np.abs(ref.o[r0:r1]).max(initial=0.0), rel=1e-6), msg
        if st["final"]:
            finals += 1
            multiple = FLOOR_MULTIPLE[dtype] * (1 if algo == "fa2" or dtype == "fp32" else n_kv + 1)
            assert history[-1] <= multiple * floor + 1e-12, f"{msg}: {history[-1]} vs {floor}"
            assert st["err"] and max(st["err"]) == pytest.approx(history[-1], rel=1e-3)
    assert finals > 0 or algo == "fa1", f"seed={seed}"  # FA-1 skips blocks that see no key


@pytest.mark.parametrize(
    ("algo", "phase"), [("fa2", "softmax"), ("fa1", "softmax"), ("fa2-bwd", "ds")]
)
def test_steppers_open_where_the_algorithm_is_at_work(algo, phase):
    p = AttentionProblem(seq_q=96, seq_k=100, head_dim=8)
    trace = build_trace(algo, p, TileConfig(32, 32), 0)
    k = trace.meta["opening_step"]
    ev = trace.event(k)
    assert ev["phase"] == phase and k > 0
    if algo != "fa2-bwd":  # the second key block: the first α that can be below 1
        assert ev["kv_block"] == 1 and all(a <= 1 for a in ev["state"]["alpha"])
    one_block = build_trace(algo, AttentionProblem(seq_q=8, seq_k=8, head_dim=8), TileConfig(8, 8))
    assert one_block.event(one_block.meta["opening_step"])["phase"] == phase
