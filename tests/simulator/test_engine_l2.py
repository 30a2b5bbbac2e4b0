"""The L2 model: what reaches DRAM, against the compulsory traffic and the L2 requests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from simulator.engine import simulate
from simulator.hardware import custom, from_name
from simulator.problem import AttentionProblem, TileConfig

from .engine_cases import cases, run

H100 = from_name("h100")


def test_fa2_reads_q_k_v_once_when_a_head_fits_in_l2():
    rng = np.random.default_rng()
    n = int(rng.integers(1000, 6000))
    heads = int(rng.integers(1, 8))
    p = AttentionProblem(seq_q=n, head_dim=64, batch=2, heads=heads, causal=bool(rng.integers(2)))
    r = simulate("fa2", p, TileConfig(64, 64, 2, 4), H100)
    qkv = 3 * 2 * heads * n * 64 * 2
    assert r.dram_read_bytes == pytest.approx(qkv), (n, heads)
    assert r.dram_write_bytes == pytest.approx(2 * heads * n * (64 * 2 + 4))  # O and LSE
    assert r.l2_read_bytes > 2 * r.dram_read_bytes  # the K/V re-reads land in L2


def test_grouped_heads_share_their_kv_in_l2():
    p = dict(seq_q=4096, head_dim=128, batch=1, heads=16)
    t = TileConfig(128, 64, 2, 8)
    mha = simulate("fa2", AttentionProblem(**p), t, H100)
    gqa = simulate("fa2", AttentionProblem(**p, kv_heads=2), t, H100)
    assert mha.l2_read_bytes == gqa.l2_read_bytes  # the same requests…
    kv = 2 * 16 * 4096 * 128 * 2
    assert mha.dram_read_bytes - gqa.dram_read_bytes == pytest.approx(kv * 7 / 8)  # …fewer misses


def test_a_head_larger_than_l2_is_refetched_every_wave():
    # K/V of one head: 2 × 131072 × 128 × 2 B = 64 MiB, more than the 40 MiB of usable L2
    p = AttentionProblem(seq_q=131072, head_dim=128, batch=1, heads=2)
    t = TileConfig(128, 64, 2, 8)
    r = simulate("fa2", p, t, H100)
    compulsory = 3 * 2 * 131072 * 128 * 2
    assert r.dram_read_bytes > 1.5 * compulsory
    huge = simulate("fa2", p, t, custom(H100, l2_mib=4096))
    assert huge.dram_read_bytes == pytest.approx(compulsory)
    assert huge.time_s <= r.time_s


def test_fa1_rereads_hit_only_while_the_heads_fit():
    t = TileConfig(64, 64, 2, 4)
    small = simulate("fa1", AttentionProblem(seq_q=1024, head_dim=64, heads=8), t, H100)
    first_touch = 8 * 1024 * (4 * 64 * 2 + 2 * 4)  # Q, O, K, V and ℓ, m once per head
    assert small.dram_read_bytes == pytest.approx(first_touch)
    assert small.dram_read_bytes < 0.12 * small.l2_read_bytes
    # 64 heads × (Q + O) of 16384 × 64 × 2 B each: 256 MiB re-read every outer pass
    big = simulate("fa1", AttentionProblem(seq_q=16384, head_dim=64, heads=64), t, H100)
    assert big.dram_read_bytes > 0.9 * big.l2_read_bytes


def test_naive_softmax_finds_s_in_l2_only_when_it_fits():
    t = TileConfig(64, 64, 2, 4)
    small = simulate("naive", AttentionProblem(seq_q=512, head_dim=64, heads=4), t, H100)
    big = simulate("naive", AttentionProblem(seq_q=8192, head_dim=64, heads=16), t, H100)
    k2_small, k2_big = small.kernels[1], big.kernels[1]
    assert k2_small.name == k2_big.name == "naive_softmax"
    assert k2_small.dram_read_bytes < 0.2 * k2_small.l2_read_bytes  # 2 MiB of S: hits
    assert k2_big.dram_read_bytes > 0.95 * k2_big.l2_read_bytes  # 2 GiB of S: misses
    assert big.dram_write_bytes == big.l2_write_bytes  # every S, P and O byte reaches DRAM


@settings(max_examples=30, deadline=None)
@given(case=cases(), grow=st.floats(1.0, 8.0))
def test_more_l2_never_means_more_dram_traffic(case, grow):
    algo, p, t, gpu = case
    assume(algo != "decode" or not p.causal)
    small = run(algo, p, t, gpu, splits=3)
    large = run(algo, p, t, custom(gpu, l2_mib=gpu.l2_mib * grow), splits=3)
    before = small.dram_read_bytes + small.dram_write_bytes
    assert large.dram_read_bytes + large.dram_write_bytes <= before * (1 + 1e-12), case
    assert large.time_s <= small.time_s * (1 + 1e-12)
