"""The same checks on a CUDA GPU at long sequences (up to 16384), bf16 and strided inputs.

Marked `gpu`: skipped where there is no CUDA device (CI runs the interpreter tests instead).
tests/conftest.py turns the interpreter on unless told otherwise, so on a GPU machine run
`TRITON_INTERPRET=0 python -m pytest -m gpu tests/kernels`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from flashscope.kernels import KernelConfig, flash_attention, flash_attention_lse, flash_decode
from flashscope.kernels.backward import launch_backward
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.instrumented import measured_trace
from flashscope.kernels.reference import attention_backward, attention_forward
from flashscope.kernels.timeline import forward_timeline
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.tracing import build_trace

from .conftest import assert_close, rand

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
F16, BF16 = torch.float16, torch.bfloat16


def grads(q, k, v, do, causal, **kw):
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    return torch.autograd.grad(flash_attention(*leaves, causal, **kw), leaves, do)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("n", "d"), [(16384, 128), (4096, 64), (3001, 80), (1000, 256)])
def test_long_sequences(seed: int, n: int, d: int, causal: bool, dtype: torch.dtype) -> None:
    q, k, v, do = (
        rand(1, 2, n, d, dtype=dtype),
        rand(1, 1, n, d, dtype=dtype),
        rand(1, 1, n, d, dtype=dtype),
        rand(1, 2, n, d, dtype=dtype),
    )
    o, lse = flash_attention_lse(q, k, v, causal)
    ref, ref_lse = attention_forward(q, k, v, causal)
    lowp, _ = attention_forward(q, k, v, causal, dtype=dtype)
    what = f"n={n} d={d} causal={causal} {dtype}"
    assert_close(o, ref, lowp, f"O {what}", seed)
    assert torch.allclose(lse, ref_lse.to(lse.device), atol=1e-3, rtol=1e-4), (
        f"LSE {what}, seed={seed}"
    )
    del ref, lowp
    got = grads(q, k, v, do, causal)
    ref = attention_backward(q, k, v, do, causal)
    lowp = attention_backward(q, k, v, do, causal, dtype=dtype)
    for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
        assert_close(g, r, lp, f"{name} {what}", seed)


@pytest.mark.parametrize("use_tma", [False, True], ids=["pointers", "descriptors"])
@pytest.mark.parametrize("route", ["separate", "atomic"])
def test_ragged_gqa_both_routes(seed: int, route: str, use_tma: bool) -> None:
    q, k, v, do = (
        rand(2, 8, 1537, 64),
        rand(2, 2, 2049, 64),
        rand(2, 2, 2049, 64),
        rand(2, 8, 1537, 64),
    )
    for causal in (False, True):
        o, lse = flash_attention_lse(q, k, v, causal, use_tma=use_tma)
        ref, _ = attention_forward(q, k, v, causal)
        assert_close(
            o, ref, attention_forward(q, k, v, causal, dtype=F16)[0], f"O causal={causal}", seed
        )
        got = launch_backward(q, k, v, o, lse, do, causal, 0.125, dq_mode=route, use_tma=use_tma)
        ref = attention_backward(q, k, v, do, causal)
        lowp = attention_backward(q, k, v, do, causal, dtype=F16)
        for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
            assert_close(g, r, lp, f"{name} {route} causal={causal} tma={use_tma}", seed)


def test_strided_bf16(seed: int) -> None:
    q = rand(2, 3000, 4, 128, dtype=BF16).transpose(1, 2)  # (B, H, N, d) views, no copy
    k = rand(2, 2500, 4, 128, dtype=BF16).transpose(1, 2)
    v = rand(2, 2500, 4, 128, dtype=BF16).transpose(1, 2)
    do = rand(2, 3000, 4, 128, dtype=BF16).transpose(1, 2)
    o = flash_attention(q, k, v, True)
    ref, _ = attention_forward(q, k, v, True)
    assert_close(o, ref, attention_forward(q, k, v, True, dtype=BF16)[0], "strided O", seed)
    got = grads(q, k, v, do, True)
    ref = attention_backward(q, k, v, do, True)
    lowp = attention_backward(q, k, v, do, True, dtype=BF16)
    for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
        assert_close(g, r, lp, f"strided {name}", seed)


@pytest.mark.parametrize(("h", "h_kv", "n_q"), [(32, 32, 1), (32, 8, 4), (16, 2, 16)])
def test_decode_long_cache(seed: int, h: int, h_kv: int, n_q: int) -> None:
    q, k, v = rand(2, h, n_q, 128), rand(2, h_kv, 65536, 128), rand(2, h_kv, 65536, 128)
    lens = torch.tensor([65536, 40001], device="cuda")
    o = flash_decode(q, k, v, lens)
    for b, n in enumerate((65536, 40001)):
        args = (q[b : b + 1], k[b : b + 1, :, :n], v[b : b + 1, :, :n])
        ref, _ = attention_forward(*args)
        lowp, _ = attention_forward(*args, dtype=F16)
        assert_close(o[b : b + 1], ref, lowp, f"decode h={h}/{h_kv} n_q={n_q} batch {b}", seed)


def test_instrumented_trace_on_gpu(seed: int) -> None:
    problem = AttentionProblem(seq_q=300, head_dim=64, dtype="fp16")
    tiles = TileConfig(64, 64)
    measured, simulated = (
        measured_trace(problem, tiles, seed),
        build_trace("fa2", problem, tiles, seed),
    )
    last = len(measured) - 1
    for key in ("m", "l", "o_hat"):
        x = np.array(measured.event(last)["state"][key], dtype=float)
        y = np.array(simulated.event(last)["state"][key], dtype=float)
        assert np.allclose(x, y, atol=2e-2, rtol=2e-2), f"{key}, seed={seed}"


def test_fixed_config_matches_default(seed: int) -> None:
    q, k, v = rand(1, 4, 2048, 64), rand(1, 4, 2048, 64), rand(1, 4, 2048, 64)
    a = flash_attention(q, k, v, True)
    b = flash_attention(q, k, v, True, config=KernelConfig(64, 32, 4, 2))
    assert float((a.float() - b.float()).abs().max()) < 2e-3, f"seed={seed}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_host_descriptors_match_in_kernel_ones(seed: int, causal: bool) -> None:
    """Whole tiles, GQA (4 heads over 2), N_q ≠ N_k: both descriptor routes give the reference."""
    from flashscope.kernels.forward import host_descriptors, launch_forward

    cfg = KernelConfig(128, 64, 8, 3)
    q = rand(2, 4, 1024, 128, dtype=F16)
    k, v = (rand(2, 2, 1536, 128, dtype=F16) for _ in range(2))
    ref, _ = attention_forward(q, k, v, causal)
    lowp, _ = attention_forward(q, k, v, causal, dtype=F16)
    outs = {
        want: launch_forward(q, k, v, causal, 128**-0.5, cfg, host_desc=want)[0]
        for want in (True, False)
    }
    for want, o in outs.items():
        assert_close(o, ref, lowp, f"O host_desc={want} causal={causal}", seed)
    assert host_descriptors(q, k, v, q, cfg, 128, True, None) is not None
    ragged = rand(2, 4, 1000, 128, dtype=F16)
    assert host_descriptors(ragged, k, v, ragged, cfg, 128, True, None) is None
    with pytest.raises(ValueError, match="whole tiles"):
        launch_forward(ragged, k, v, causal, 128**-0.5, cfg, host_desc=True)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_with_host_descriptors_matches_the_reference(seed: int, causal: bool) -> None:
    """Both backward kernels of the separate route, whole tiles, GQA, N_q ≠ N_k, both routes."""
    q, do = (rand(2, 4, 1024, 128, dtype=F16) for _ in range(2))
    k, v = (rand(2, 2, 1536, 128, dtype=F16) for _ in range(2))
    o, lse = flash_attention_lse(q, k, v, causal)
    ref = attention_backward(q, k, v, do, causal)
    lowp = attention_backward(q, k, v, do, causal, dtype=F16)
    for route in ("separate", "atomic"):
        for want in (True, False):
            got = launch_backward(
                q, k, v, o, lse, do, causal, 128**-0.5, dq_mode=route, host_desc=want
            )
            for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
                assert_close(g, r, lp, f"{name} {route} host_desc={want} causal={causal}", seed)


@pytest.mark.parametrize("band", [1, 3])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_timeline_records_every_program_once(seed: int, causal: bool, band: int) -> None:
    """One entry per program; ends after starts; real SMs; O as the kernel without the flag."""
    b, h, n, d = 2, 5, 1000, 64
    q, k, v = (rand(b, h, n, d) for _ in range(3))
    cfg = KernelConfig(128, 64, 4, 3)
    tl = forward_timeline(q, k, v, causal, config=cfg, band=band)
    n_mb = -(-n // cfg.block_m)
    assert len(tl.start) == n_mb * b * h
    assert sorted(zip(tl.row.tolist(), tl.block.tolist(), strict=True)) == [
        (r, i) for r in range(b * h) for i in range(n_mb)
    ]
    assert (tl.end > tl.start).all() and tl.start.min() == 0.0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert tl.sm.min() >= 0 and tl.sm.max() < sms
    buf = torch.empty((n_mb * b * h, 4), dtype=torch.int64, device="cuda")
    with_flag, _ = launch_forward(q, k, v, causal, d**-0.5, cfg, band=band, timeline=buf)
    plain, _ = launch_forward(q, k, v, causal, d**-0.5, cfg, band=band)
    assert torch.equal(with_flag, plain)


@pytest.mark.parametrize("route", ["separate", "atomic"])
def test_repeated_calls_skip_tritons_binding_and_stay_right(seed: int, route: str) -> None:
    """The second call of a signature goes straight to the compiled kernels
    (flashscope.kernels.fastlaunch):
    fresh inputs, the same answers as the reference, bit for bit the Triton path's output."""
    from flashscope.kernels import fastlaunch

    def views(*shape: int, skew: int) -> torch.Tensor:  # skew: elements off a 16-byte address
        b, h, n, d = shape
        return rand(b, h, n, d + 8)[..., skew : skew + d]

    shapes = [(2, 4, 700, 64), (2, 2, 900, 64), (2, 2, 900, 64), (2, 4, 700, 64)]  # q k v dO
    for skew in (0, 1):  # aligned (descriptors on Hopper), then misaligned (pointers)
        for causal in (False, True):
            for _ in range(2):
                q, k, v, do = (views(*s, skew=skew) for s in shapes)
                before = fastlaunch.stats()["direct"]
                o, lse = flash_attention_lse(q, k, v, causal)
                with fastlaunch.through_triton():
                    o_triton, _ = flash_attention_lse(q, k, v, causal)
                assert torch.equal(o, o_triton), f"skew={skew} causal={causal} seed={seed}"
                got = launch_backward(q, k, v, o, lse, do, causal, 0.125, dq_mode=route)
                direct = fastlaunch.stats()["direct"] - before
                what = f"{route} skew={skew} causal={causal}"
                ref, _ = attention_forward(q, k, v, causal)
                assert_close(o, ref, attention_forward(q, k, v, causal, dtype=F16)[0], what, seed)
                ref = attention_backward(q, k, v, do, causal)
                lowp = attention_backward(q, k, v, do, causal, dtype=F16)
                for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
                    assert_close(g, r, lp, f"{name} {what}", seed)
            # the second round: forward, preprocess and the dK/dV kernel (and the dQ kernel)
            assert direct >= (3 if route == "atomic" else 4), f"{what}: {direct} direct launches"
    q, k, v = rand(1, 8, 4, 128), rand(1, 2, 5000, 128), rand(1, 2, 5000, 128)
    first, second = flash_decode(q, k, v), flash_decode(q, k, v)
    assert torch.equal(first, second), f"decode, seed={seed}"


def _ws_configs() -> list:
    """(WsConfig, head_dim) pairs this GPU's tuned table routes to the Gluon forward."""
    from flashscope.kernels.hopper_forward import tuned_configs

    return tuned_configs(torch.cuda.get_device_name()) if torch.cuda.is_available() else []


# A twelfth of the configurations each: compiling one takes about a minute in its variants
# (masks, edges), so that the parts spread over a GPU host's cores (pytest -n).
WS_PARTS = 12


@pytest.mark.parametrize("part", range(WS_PARTS))
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
def test_warp_specialized_forward_matches_the_reference(
    seed: int, dtype: torch.dtype, part: int
) -> None:
    from flashscope.kernels.hopper_forward import WsConfig, launch_forward_ws, supports

    configs = _ws_configs()
    if not configs:
        pytest.skip("this GPU's tuned table routes nothing to the Gluon forward")
    # and, tuned or not, three warpgroups (whose top tile starts above row 0 where 192 does not
    # divide N_q), the ping-pong schedule and persistent programs (causal tiles in bands)
    extra = [(WsConfig(3, 128, 2, True), 64), (WsConfig(3, 128, 2, True, pingpong=True), 64),
             (WsConfig(2, 128, 2, True, pingpong=True), 128),
             (WsConfig(3, 128, 2, True, pingpong=True, persistent=True, band=2), 64),
             (WsConfig(2, 256, 2, False, persistent=True, band=0), 64)]  # fmt: skip
    for cfg, d in (configs + [c for c in extra if c not in configs])[part::WS_PARTS]:
        t, bn = cfg.tile_m, cfg.block_n
        shapes = [  # (B, H, H_kv, N_q, N_k): GQA, N_q ≠ N_k both ways (rows that see no key)
            (2, 4, 4, 2 * t, 2 * bn), (1, 8, 2, 3 * t, 5 * bn), (1, 4, 1, 4 * t, bn),
            (1, 2, 2, 16 * t, 16 * bn), (2, 3, 3, 64, 2 * bn), (1, 4, 2, 2 * t + 64, 3 * bn),
            # lengths that fill no tile: masked last key blocks, a straddling top warpgroup
            (1, 4, 2, 1000, 1000), (2, 2, 2, 777, 2049), (1, 2, 1, 1, 3001), (1, 2, 2, 3001, 777),
        ]  # fmt: skip
        n = len(shapes)
        for (b, h, hk, n_q, n_k), causal in zip(shapes * 2, [False] * n + [True] * n, strict=True):
            q = rand(b, h, n_q, d, dtype=dtype)
            k, v = rand(b, hk, n_k, d, dtype=dtype), rand(b, hk, n_k, d, dtype=dtype)
            why = supports(q, k, v, cfg)
            if n_q == 1 and why is not None:  # Triton 3.6's compiler cannot take it
                assert "one-query" in why, why
                continue
            assert why is None, why
            o, lse = launch_forward_ws(q, k, v, causal, d**-0.5, cfg)
            ref, ref_lse = attention_forward(q, k, v, causal)
            lowp, _ = attention_forward(q, k, v, causal, dtype=dtype)
            what = f"{cfg.as_list()} d={d} {(b, h, hk, n_q, n_k)} causal={causal} {dtype}"
            assert_close(o, ref, lowp, f"O {what}", seed)
            ref_lse = ref_lse.to(lse.device)
            assert torch.equal(lse.isinf(), ref_lse.isinf()), f"LSE −∞ rows {what}"
            seen = ~ref_lse.isinf()
            assert torch.allclose(lse[seen], ref_lse[seen].float(), atol=1e-3, rtol=1e-4), what


@pytest.mark.parametrize("d", [40, 80, 96, 120, 144, 160, 192, 256])
def test_padded_head_dims_match_the_reference(seed: int, d: int) -> None:
    """Head dims that are not a power of two run in the next one's tiles (the copy engine loads
    zeros past d and stores none of it), 256 too (O through Q's stage): every configuration tuned
    for that tile width, at lengths that fill no tile too, both dtypes; outputs poisoned first."""
    from flashscope.kernels.hopper_forward import WsConfig, launch_forward_ws, supports
    from flashscope.kernels.launch import pad_dim

    extra = (
        {WsConfig(2, 64, 3, True)}
        if pad_dim(d) <= 128  # at 256 columns one warpgroup's tiles fit shared memory
        else {WsConfig(2, 64, 2, True), WsConfig(1, 64, 2, False, persistent=True)}
    )
    configs = {cfg for cfg, dd in _ws_configs() if dd == pad_dim(d)} | extra
    shapes = [(2, 3, 3, 256, 384), (1, 4, 2, 1000, 1000), (1, 2, 2, 777, 2049)]
    for cfg in sorted(configs, key=lambda c: c.as_list()):
        for (b, h, hk, n_q, n_k), causal, dtype in zip(
            shapes * 2, [False, True] * 3, [F16] * 3 + [BF16] * 3, strict=True
        ):
            q = rand(b, h, n_q, d, dtype=dtype)
            k, v = rand(b, hk, n_k, d, dtype=dtype), rand(b, hk, n_k, d, dtype=dtype)
            assert supports(q, k, v, cfg) is None, supports(q, k, v, cfg)
            o, lse = launch_forward_ws(q, k, v, causal, d**-0.5, cfg)
            ref, ref_lse = attention_forward(q, k, v, causal)
            lowp, _ = attention_forward(q, k, v, causal, dtype=dtype)
            what = f"{cfg.as_list()} d={d} {(b, h, hk, n_q, n_k)} causal={causal} {dtype}"
            assert o.shape == q.shape, what
            assert_close(o, ref, lowp, f"O {what}", seed)
            ref_lse = ref_lse.to(lse.device)
            seen = ~ref_lse.isinf()
            assert torch.equal(lse.isinf(), ref_lse.isinf()), f"LSE −∞ rows {what}"
            assert torch.allclose(lse[seen], ref_lse[seen].float(), atol=1e-3, rtol=1e-4), what
    if pad_dim(d) == 128 and _ws_configs():  # both tables route d = 128, N = 2048 to it
        from flashscope.kernels.hopper_forward import tuned

        q = rand(1, 16, 2048, d)
        assert tuned(q, q, q, False) is not None, f"d={d} is not routed to the Gluon forward"


def test_the_tuned_route_runs_the_gluon_forward(seed: int, monkeypatch) -> None:
    import flashscope.kernels.forward as forward

    configs = _ws_configs()
    if not configs:
        pytest.skip("this GPU's tuned table routes nothing to the Gluon forward")
    ran = []
    real = forward.launch_forward_ws
    monkeypatch.setattr(
        forward, "launch_forward_ws", lambda *a, **kw: ran.append(a[-1]) or real(*a, **kw)
    )
    q, k, v, do = (rand(1, 16, 2048, 128) for _ in range(4))
    tuned = forward.tuned(q, k, v, False)
    assert tuned is not None  # the H200 and H100 tables route d = 128, N = 2048 here
    o, lse = launch_forward(q, k, v, False, 128**-0.5)
    assert ran == [tuned]
    # a second call of the same signature goes straight to the compiled kernel, bit for bit
    from flashscope.kernels.fastlaunch import stats

    direct = stats()["direct"]
    o2, lse2 = launch_forward(q, k, v, False, 128**-0.5)
    assert stats()["direct"] == direct + 1 and torch.equal(o, o2) and torch.equal(lse, lse2)
    ran.clear()
    o_triton, lse_triton = launch_forward(q, k, v, False, 128**-0.5, use_ws=False)
    assert ran == []  # use_ws=False: the Triton kernel
    assert_close(o, o_triton.double(), attention_forward(q, k, v, False, dtype=F16)[0], "O", seed)
    assert torch.allclose(lse, lse_triton, atol=1e-3, rtol=1e-4)
    # and the backward takes the Gluon forward's O and LSE
    got = grads(q, k, v, do, False)
    assert ran == [tuned]
    ref = attention_backward(q, k, v, do, False)
    lowp = attention_backward(q, k, v, do, False, dtype=F16)
    for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
        assert_close(g, r, lp, name, seed)


def test_a_planned_gluon_call_is_bit_for_bit_a_call_through_triton(seed: int) -> None:
    """The Gluon forward's second call of a geometry (its plan, its descriptors copied, the
    plan's fastlaunch key) on fresh inputs goes straight to the kernel, and gives what a call
    through Triton's binding gives: persistent scheduled causal tiles over GQA at lengths that
    fill no tile, three warpgroups at N_q ≠ N_k, one at head_dim 256."""
    from flashscope.kernels import fastlaunch
    from flashscope.kernels.hopper_forward import WsConfig, launch_forward_ws

    cases = [  # configuration, (B, H, H_kv, N_q, N_k, d), causal
        (WsConfig(2, 128, 2, True, pingpong=True, persistent=True, band=2),
         (2, 4, 2, 1000, 1000, 128), True),
        (WsConfig(3, 128, 2, True), (1, 8, 8, 777, 2049, 64), False),
        (WsConfig(1, 64, 2, False, persistent=True), (1, 2, 2, 1000, 1000, 256), True),
    ]  # fmt: skip
    for cfg, (b, h, hk, n_q, n_k, d), causal in cases:
        for dtype in (F16, BF16, F16):
            q = rand(b, h, n_q, d, dtype=dtype)
            k, v = rand(b, hk, n_k, d, dtype=dtype), rand(b, hk, n_k, d, dtype=dtype)
            before = fastlaunch.stats()["direct"]
            o, lse = launch_forward_ws(q, k, v, causal, d**-0.5, cfg)
            direct = fastlaunch.stats()["direct"] - before
            with fastlaunch.through_triton():
                o_triton, lse_triton = launch_forward_ws(q, k, v, causal, d**-0.5, cfg)
            what = f"{cfg.as_list()} {(b, h, hk, n_q, n_k, d)} {dtype} seed={seed}"
            assert torch.equal(o, o_triton) and torch.equal(lse, lse_triton), what
        assert direct == 1, f"{what}: the third call went through Triton"


def test_the_recorded_forward_computes_the_same_and_stamps_every_phase(seed: int) -> None:
    from flashscope.kernels.hopper_forward import SPLIT_RECORDING, WsConfig, launch_forward_ws

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon forward needs a Hopper GPU")
    # the last two: persistent programs of many tiles each, more than the stamping programs
    # stamp (their rest runs in a launch after theirs)
    small, many = (1, 4, 1024), (8, 32, 1024)
    for cfg, d, causal, (b, h, n) in [
        (WsConfig(2, 128, 2, True, pingpong=True), 128, False, small),
        (WsConfig(2, 128, 2, False), 64, True, small),
        (WsConfig(3, 128, 2, True, persistent=True), 64, True, small),
        (WsConfig(3, 128, 2, True, pingpong=True, merged=True), 64, True, small),
        (WsConfig(2, 128, 2, True, pingpong=True, persistent=True, band=8, merged=True), 128,
         True, many),
        (WsConfig(2, 128, 2, True, pingpong=True, persistent=True), 128, False, many),
    ]:  # fmt: skip
        q, k, v = (rand(b, h, n, d) for _ in range(3))
        plain = launch_forward_ws(q, k, v, causal, d**-0.5, cfg)
        for mode in (SPLIT_RECORDING, 2):  # side by side (the default); one launch, loops twice
            check_recording(q, k, v, cfg, d, causal, plain, mode)


def check_recording(q, k, v, cfg, d: int, causal: bool, plain: tuple, mode: int) -> None:
    """A recording of RECORD `mode` computes what the plain kernel does and stamps every phase
    of the programs that stamp their steps, only the start and end of the others."""
    from flashscope.kernels.hopper_forward import (
        REC_HEADER,
        REC_STEP_EVENTS,
        REC_TILE_EVENTS,
        launch_forward_ws,
    )
    from flashscope.kernels.warpgroups import (
        new_recording,
        program_tiles,
        stamps_of,
        timeline_intervals,
    )

    b, h, n, _ = q.shape
    rec = replace(new_recording(q, cfg, steps=48, tiles=3), mode=mode)
    for _ in range(3):  # compiles every launch; then the host issues them at its usual pace
        launch_forward_ws(q, k, v, causal, d**-0.5, cfg, record=rec)
    rec.buffer.fill_(-1)
    recorded = launch_forward_ws(q, k, v, causal, d**-0.5, cfg, record=rec)
    what = f"{cfg.as_list()} d={d} causal={causal} mode={mode}"
    assert all(torch.equal(x, y) for x, y in zip(plain, recorded, strict=True)), what
    stamps = stamps_of(rec, cfg)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = program_tiles(cfg, b * h, n, n, causal, sms, 0)
    got = timeline_intervals(stamps, tiles, 0)
    assert 0.2 < stamps.ns_per_cycle(0) < 2.0, what  # a clock of 0.5 to 5 GHz
    recorded_tiles = []
    steps = 0
    for n_steps in tiles[: stamps.tiles]:
        if steps + n_steps > stamps.steps:
            break
        recorded_tiles.append(n_steps)
        steps += n_steps
    assert recorded_tiles, what
    for c in range(cfg.consumers):
        for phase in ("qk", "pv", "softmax"):
            keys = {(x["tile"], x["block"]) for x in got
                    if x["warpgroup"] == c and x["phase"] == phase}  # fmt: skip
            want = {(i, j) for i, m in enumerate(recorded_tiles) for j in range(m)}
            assert keys == want, f"{what}: consumer {c} {phase}"
    # a product takes time; the program's intervals fit its lifetime by the global timer
    assert all(x["end_ns"] > x["start_ns"] for x in got if x["phase"] in ("qk", "pv")), what
    assert max(x["end_ns"] for x in got) <= stamps.span_ns() * 1.01, what
    # programs past the first `detail` run the loop without stamps: their steps' and tiles'
    # regions untouched, their roles' start and end stamped
    buf = rec.buffer.cpu()
    assert buf.shape[0] > rec.detail, what
    loops = rec.steps * REC_STEP_EVENTS + rec.tiles * REC_TILE_EVENTS
    assert (buf[rec.detail :, :, :loops] == -1).all(), what
    assert (buf[rec.detail :, :, loops] > 0).all(), what  # each role's start
    assert (buf[: rec.detail, :, : rec.steps * REC_STEP_EVENTS] > 0).any(), what
    # the gate lets the launches start together: the stamping programs and the others within
    # 0.1 ms of each other (issued one after the other, a launch's host time apart; in a
    # process's first calls on an H200 the others started 13 µs after the stamping ones ended)
    starts = buf[:, :, -REC_HEADER + 1]
    stamping, others = slice(None, rec.detail), slice(rec.detail, None)
    assert abs(int(starts[others].min()) - int(starts[stamping].min())) < 100_000, what


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
def test_gluon_backward_matches_the_reference(seed: int, dtype: torch.dtype, monkeypatch) -> None:
    """The warp-specialized backward on a Hopper GPU, every candidate configuration, against the
    float64 gradients: GQA, N_q ≠ N_k both ways (rows that see no key), lengths that fill no tile,
    one query, head dims run padded; outputs poisoned first, so an element it leaves unwritten
    fails."""
    from flashscope.kernels.hopper_backward import (
        CANDIDATES,
        BwdConfig,
        launch_backward_ws,
        supports,
    )

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon backward needs a Hopper GPU")
    monkeypatch.setenv("FLASHSCOPE_POISON", "1")
    shapes = [(2, 4, 4, 256, 256), (1, 8, 2, 384, 640), (1, 4, 1, 1000, 1000),
              (2, 2, 2, 777, 2049), (1, 2, 2, 2049, 777), (1, 2, 1, 1, 129),
              (1, 2, 2, 130, 70)]  # fmt: skip
    # head dims that run at the candidate's, on two of the shapes
    padded = {64: 40, 128: 96, 256: 192}
    for d_pad, configs in CANDIDATES.items():
        cases = [(d_pad, s, c) for s in shapes for c in (False, True)]
        cases += [(padded[d_pad], s, c) for s in shapes[1:3] for c in (False, True)]
        for cfg in configs:
            for d, (b, h, hk, n_q, n_k), causal in cases:
                q, do = rand(b, h, n_q, d, dtype=dtype), rand(b, h, n_q, d, dtype=dtype)
                k, v = rand(b, hk, n_k, d, dtype=dtype), rand(b, hk, n_k, d, dtype=dtype)
                assert supports(q, k, v, cfg) is None
                o, lse = launch_forward(q, k, v, causal, d**-0.5)
                got = launch_backward_ws(q, k, v, o, lse, do, causal, d**-0.5, cfg)
                ref = attention_backward(q, k, v, do, causal)
                lowp = attention_backward(q, k, v, do, causal, dtype=dtype)
                what = f"{cfg.as_list()} d={d} {(b, h, hk, n_q, n_k)} causal={causal} {dtype}"
                for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
                    assert_close(g, r, lp, f"{name} {what}", seed)
    # bands that do not divide the heads (8 = 3 + 3 + 2), or hold more heads than there are:
    # every key block of every head still runs once
    for band, (b, h, hk, n_q, n_k) in ((3, (2, 4, 4, 640, 640)), (5, (1, 8, 2, 384, 640))):
        cfg = BwdConfig(2, 64, 2, band)
        q, do = rand(b, h, n_q, 128, dtype=dtype), rand(b, h, n_q, 128, dtype=dtype)
        k, v = rand(b, hk, n_k, 128, dtype=dtype), rand(b, hk, n_k, 128, dtype=dtype)
        o, lse = launch_forward(q, k, v, True, 128**-0.5)
        got = launch_backward_ws(q, k, v, o, lse, do, True, 128**-0.5, cfg)
        ref = attention_backward(q, k, v, do, True)
        lowp = attention_backward(q, k, v, do, True, dtype=dtype)
        for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
            assert_close(g, r, lp, f"{name} band={band} {(b, h, hk, n_q, n_k)} {dtype}", seed)


@pytest.mark.parametrize(
    "shape",
    [(2, 4, 2048, 64), (1, 4, 1000, 96), (1, 4, 2048, 256), (1, 4, 1000, 192)],
    ids=["whole", "edge", "whole-256", "edge-192"],
)
def test_the_tuned_route_runs_the_gluon_backward(seed: int, shape: tuple, monkeypatch) -> None:
    """Where the tuned table names a configuration, a plain backward through autograd runs the
    Gluon kernel (and gets the Triton kernel's gradients); FLASHSCOPE_WS_BWD=0 keeps Triton.
    Every shape is routed on an H100: whole tiles at d = 64 and 256 (the head dimension split
    between the warpgroups), and lengths that fill no tile at head dims run padded to 128 and
    256."""
    from flashscope.kernels import attention, hopper_backward

    q, k, v, do = (rand(*shape) for _ in range(4))
    cfg = hopper_backward.tuned(q, k, v, False)
    if cfg is None:
        pytest.skip("this GPU's tuned table routes no backward here to the Gluon kernel")
    calls = []
    real = hopper_backward.launch_backward_ws
    monkeypatch.setattr(attention, "launch_backward_ws",
                        lambda *a, **kw: calls.append(a[8]) or real(*a, **kw))  # fmt: skip
    got = grads(q, k, v, do, False)
    assert calls == [cfg]
    monkeypatch.setenv("FLASHSCOPE_WS_BWD", "0")
    triton_grads = grads(q, k, v, do, False)
    assert calls == [cfg]
    for g, t in zip(got, triton_grads, strict=True):
        assert torch.allclose(g.float(), t.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(
    ("name", "shape", "causal"),
    [("NVIDIA H200", (1, 4, 1000, 256), True), ("NVIDIA H200", (2, 4, 2048, 192), False),
     ("NVIDIA GH200 480GB", (2, 4, 3000, 96), True), ("NVIDIA H800", (2, 8, 2048, 64), False)],
    ids=["h200-256", "h200-192", "unnamed-96", "unnamed-64"],
)  # fmt: skip
def test_lent_entries_run_the_gluon_kernels(seed: int, name, shape, causal, monkeypatch) -> None:
    """Entries chosen on another GPU than the one running them: the H200's own at d = 256 (and
    192, run padded to it), and those a Hopper GPU the table does not name is lent
    (simulator/timing/tuned_tables.py): the forward and the backward through autograd run the
    Gluon kernels with them and get the float64 reference's outputs and gradients within twice
    PyTorch's error."""
    from flashscope.kernels import attention, forward, hopper_backward, hopper_forward

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon kernels need a Hopper GPU")
    for module in (hopper_forward, hopper_backward):
        monkeypatch.setattr(module, "gpu_name", lambda: name)
    q, k, v, do = (rand(*shape) for _ in range(4))
    fwd, bwd = hopper_forward.tuned(q, k, v, causal), hopper_backward.tuned(q, k, v, causal)
    assert fwd is not None and bwd is not None, f"no Gluon entry for {name} at {shape}"
    calls = []
    real_fwd, real_bwd = hopper_forward.launch_forward_ws, hopper_backward.launch_backward_ws
    monkeypatch.setattr(forward, "launch_forward_ws",
                        lambda *a, **kw: calls.append(a[5]) or real_fwd(*a, **kw))  # fmt: skip
    monkeypatch.setattr(attention, "launch_backward_ws",
                        lambda *a, **kw: calls.append(a[8]) or real_bwd(*a, **kw))  # fmt: skip
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    o = flash_attention(*leaves, causal)
    got = torch.autograd.grad(o, leaves, do)
    assert calls == [fwd, bwd]
    ref, _ = attention_forward(q, k, v, causal)
    lowp, _ = attention_forward(q, k, v, causal, dtype=F16)
    what = f"{name} {shape} causal={causal}"
    assert_close(o.detach(), ref, lowp, f"O {what}", seed)
    refs = attention_backward(q, k, v, do, causal)
    lowps = attention_backward(q, k, v, do, causal, dtype=F16)
    for g, r, lp, part in zip(got, refs, lowps, ("dQ", "dK", "dV"), strict=True):
        assert_close(g, r, lp, f"{part} {what}", seed)


def test_decode_counters_in_graphs_and_on_two_streams(seed: int) -> None:
    """The split kernel's arrival counters: a CUDA graph replays right (the counters are back at
    zero after each replay), and calls on two streams at once with different split counts each
    merge their own splits."""
    q, k, v = rand(2, 32, 1, 128), rand(2, 8, 8192, 128), rand(2, 8, 8192, 128)
    ref, _ = attention_forward(q, k, v)
    lowp, _ = attention_forward(q, k, v, dtype=F16)
    eager = flash_decode(q, k, v)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        flash_decode(q, k, v)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        captured = flash_decode(q, k, v)
    for i in range(3):
        captured.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, eager), f"graph replay {i}, seed={seed}"
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs = []
    for _ in range(4):
        for stream, splits in zip(streams, (7, 16), strict=True):
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                outs.append((splits, flash_decode(q, k, v, splits=splits)))
    torch.cuda.synchronize()
    for splits, o in outs:
        assert_close(o, ref, lowp, f"decode on two streams, splits={splits}", seed)
