"""Forward kernel (through the interpreter on CPU) against the float64 reference."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from flashscope.kernels import KernelConfig, flash_attention, flash_attention_lse
from flashscope.kernels.forward import causal_order, launch_forward
from flashscope.kernels.reference import attention_forward

from .conftest import DEV, assert_close, rand

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32


def check_forward(seed, b, h, h_kv, n_q, n_k, d, causal, dtype=F16, scale=None, **kw):
    q, k, v = (
        rand(b, h, n_q, d, dtype=dtype),
        rand(b, h_kv, n_k, d, dtype=dtype),
        rand(b, h_kv, n_k, d, dtype=dtype),
    )
    if "band" in kw:  # launch order: the kernel's own entry point
        o, lse = launch_forward(q, k, v, causal, scale or d**-0.5, kw.pop("config"), **kw)
    else:
        o, lse = flash_attention_lse(q, k, v, causal, scale, **kw)
    ref, ref_lse = attention_forward(q, k, v, causal, scale)
    lowp, _ = attention_forward(q, k, v, causal, scale, dtype=dtype)
    what = f"O b={b} h={h}/{h_kv} n={n_q}x{n_k} d={d} causal={causal} {dtype}"
    assert o.shape == q.shape and o.dtype == dtype
    assert_close(o, ref, lowp, what, seed)
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse.cpu()), empty), f"LSE −∞ rows differ: {what}, seed={seed}"
    assert torch.allclose(lse.cpu()[~empty], ref_lse[~empty], atol=1e-3, rtol=1e-4), (
        f"LSE: {what}, seed={seed}"
    )
    return o


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", [1, 17, 97, 200, 300])
def test_square_lengths(seed: int, n: int, causal: bool) -> None:
    check_forward(seed, 1, 2, 1, n, n, 64, causal)


@pytest.mark.parametrize("d", [16, 80, 128])
def test_head_dims(seed: int, d: int) -> None:
    check_forward(seed, 2, 2, 2, 97, 97, d, True)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("n_q", "n_k"), [(17, 200), (200, 17), (97, 300)])
def test_unequal_lengths(seed: int, n_q: int, n_k: int, causal: bool) -> None:
    """N_q > N_k with causal leaves rows that see no key: O = 0 and LSE = −∞ there."""
    check_forward(seed, 1, 4, 2, n_q, n_k, 64, causal)


@pytest.mark.parametrize(
    ("dtype", "n_q", "n_k"), [(BF16, 97, 97), (BF16, 200, 150), (F32, 97, 130)]
)
def test_dtypes(seed: int, dtype: torch.dtype, n_q: int, n_k: int) -> None:
    check_forward(seed, 1, 2, 1, n_q, n_k, 64, True, dtype)


def test_tensor_descriptor_path(seed: int) -> None:
    check_forward(seed, 1, 2, 1, 97, 130, 80, True, use_tma=True)


@pytest.mark.parametrize(
    "config",
    [
        KernelConfig(16, 64, 4, 1),
        KernelConfig(64, 16, 4, 1),
        KernelConfig(32, 32, 4, 1, True),
        KernelConfig(32, 32, 4, 1, False, 128),
    ],
    ids=["16x64", "64x16", "prefetch", "maxnreg"],
)
def test_tile_configurations(seed: int, config: KernelConfig) -> None:
    check_forward(seed, 1, 2, 1, 150, 131, 32, True, config=config)


@pytest.mark.parametrize("scale", [-0.2, 0.0, 1.7])
def test_explicit_scales(seed: int, scale: float) -> None:
    check_forward(seed, 1, 1, 1, 40, 70, 32, False, scale=scale)


def test_strided_inputs(seed: int) -> None:
    """q, k, v as (B, N, H, d) views transposed to (B, H, N, d): no copy, strides honored."""
    q = rand(2, 50, 4, 32).transpose(1, 2)
    k = rand(2, 70, 2, 32).transpose(1, 2)
    v = rand(2, 2, 32, 70).transpose(2, 3)  # columns strided: the wrapper copies this one
    o = flash_attention(q, k, v, causal=True)
    ref, _ = attention_forward(q, k, v, True)
    lowp, _ = attention_forward(q, k, v, True, dtype=q.dtype)
    assert_close(o, ref, lowp, "strided O", seed)


@triton.jit
def _order_probe(OUT, n_blocks, band, HEAVY_LAST: tl.constexpr):
    block, row = causal_order(n_blocks, band, HEAVY_LAST)
    pid = tl.program_id(0) + tl.program_id(1) * n_blocks
    tl.store(OUT + 2 * pid, block)
    tl.store(OUT + 2 * pid + 1, row)


@pytest.mark.parametrize("heavy_last", [True, False], ids=["query-blocks", "key-blocks"])
@pytest.mark.parametrize("band", [1, 2, 3, 7, 10])
def test_causal_order_covers_the_grid_in_band_order(band: int, heavy_last: bool) -> None:
    """Every (block, row) once; launch order: a band's rows heaviest block first, band by band."""
    n_blocks, rows = 5, 7
    out = torch.full((n_blocks * rows, 2), -1, dtype=torch.int32, device=DEV)
    _order_probe[(n_blocks, rows)](out, n_blocks, band, HEAVY_LAST=heavy_last)
    got = [tuple(x) for x in out.cpu().tolist()]
    want = []
    for first in range(0, rows, band):
        for step in range(n_blocks):
            block = n_blocks - 1 - step if heavy_last else step
            want += [(block, r) for r in range(first, min(first + band, rows))]
    assert got == want
    assert sorted(got) == [(b, r) for b in range(n_blocks) for r in range(rows)]


@pytest.mark.parametrize("band", [2, 3])
def test_banded_causal_order_gives_the_same_output(seed: int, band: int) -> None:
    """Five (batch, head) rows in bands of 2 or 3 (the last band short), ragged blocks."""
    check_forward(seed, 1, 5, 1, 97, 97, 32, True, config=KernelConfig(32, 16, 4, 1), band=band)


@pytest.mark.parametrize("band", [0, -1, 1.5, True])
def test_band_must_be_a_positive_whole_number(band) -> None:
    q = rand(1, 1, 8, 16)
    with pytest.raises(ValueError, match="band"):
        launch_forward(q, q, q, True, 0.25, KernelConfig(16, 16, 4, 1), band=band)
