"""Flash-Decoding (split kernel, the last split merging) against the float64 reference."""

from __future__ import annotations

import pytest
import torch

from flashscope.kernels import KernelConfig, decode, flash_decode
from flashscope.kernels.decode import sm_count
from flashscope.kernels.reference import attention_forward
from flashscope.simulator.core.problem import decode_splits

from .conftest import DEV, assert_close, rand


def reference(q, k, v, lens, dtype):
    """Per batch over its valid keys; a batch with no key gets zeros."""
    outs = []
    for b in range(q.shape[0]):
        n = k.shape[2] if lens is None else int(lens[b])
        if n == 0:
            outs.append(torch.zeros((1, *q.shape[1:]), dtype=torch.float64))
            continue
        o, _ = attention_forward(
            q[b : b + 1], k[b : b + 1, :, :n], v[b : b + 1, :, :n], dtype=dtype
        )
        outs.append(o.double().cpu())
    return torch.cat(outs)


@pytest.mark.parametrize(
    ("n_q", "h", "h_kv", "n_cache", "d", "dtype", "lens"),
    [
        (1, 4, 1, 300, 64, torch.float16, None),
        (5, 8, 2, 1000, 80, torch.bfloat16, [1000, 1]),
        (16, 2, 2, 77, 128, torch.float32, [77, 0]),
        (3, 6, 3, 513, 16, torch.float16, [200, 513, 64]),
    ],
)
def test_decode(seed, n_q, h, h_kv, n_cache, d, dtype, lens) -> None:
    b = 1 if lens is None else len(lens)
    q, k, v = (
        rand(b, h, n_q, d, dtype=dtype),
        rand(b, h_kv, n_cache, d, dtype=dtype),
        rand(b, h_kv, n_cache, d, dtype=dtype),
    )
    seqlens = None if lens is None else torch.tensor(lens, device=DEV)
    o = flash_decode(q, k, v, seqlens)
    what = f"decode n_q={n_q} h={h}/{h_kv} cache={n_cache} d={d} {dtype} lens={lens}"
    assert o.shape == q.shape and o.dtype == dtype, what
    assert_close(
        o, reference(q, k, v, lens, torch.float64), reference(q, k, v, lens, dtype), what, seed
    )


@pytest.mark.parametrize("splits", [None, 1, 3])
def test_rows_past_each_length_are_never_used(seed: int, splits: int | None) -> None:
    """A serving cache holds whatever was there before past each batch's length (here NaN and
    infinities in K and V): the output is that of the valid keys alone, whatever the splits."""
    lens = [300, 129, 64, 1, 0]
    q = rand(len(lens), 4, 2, 32)
    k, v = rand(len(lens), 2, 300, 32), rand(len(lens), 2, 300, 32)
    dirty_k, dirty_v = k.clone(), v.clone()
    for b, n in enumerate(lens):
        dirty_k[b, :, n:], dirty_v[b, :, n:] = float("nan"), float("inf")
    seqlens = torch.tensor(lens, device=DEV)
    o = flash_decode(q, dirty_k, dirty_v, seqlens, splits=splits)
    what = f"decode past lengths {lens} splits={splits}"
    assert not o.isnan().any(), f"{what}: NaN, seed={seed}"
    ref, lowp = reference(q, k, v, lens, torch.float64), reference(q, k, v, lens, torch.float16)
    assert_close(o, ref, lowp, what, seed)


@pytest.mark.parametrize("splits", [1, 3, 7])
def test_explicit_split_counts(seed: int, splits: int) -> None:
    q, k, v = rand(1, 2, 2, 32), rand(1, 1, 450, 32), rand(1, 1, 450, 32)
    o = flash_decode(q, k, v, splits=splits, config=KernelConfig(16, 64, 4, 1))
    ref, lowp = reference(q, k, v, None, torch.float64), reference(q, k, v, None, torch.float16)
    assert_close(o, ref, lowp, f"decode splits={splits}", seed)


def test_default_split_count_follows_the_simulator() -> None:
    assert decode_splits(32, 2048, sm_count()) == -(-sm_count() // 32)


def test_the_last_split_merges_and_leaves_the_counters_at_zero(seed: int) -> None:
    """One launch: the program that finishes last merges the partials and zeroes its counter,
    so calls of other split counts on the same heads start from zero. 40 splits exceed the
    merge's 32 per load (a second block of splits, merged online), and a batch with no key
    merges to zeros."""
    q, k, v = rand(2, 4, 1, 16), rand(2, 2, 1300, 16), rand(2, 2, 1300, 16)
    lens = [1300, 0]
    seqlens = torch.tensor(lens, device=DEV)
    ref, lowp = reference(q, k, v, lens, torch.float64), reference(q, k, v, lens, torch.float16)
    cfg = KernelConfig(16, 32, 4, 1)  # 41 key blocks
    for splits in (40, 3, 1):
        o = flash_decode(q, k, v, seqlens, splits=splits, config=cfg)
        assert_close(o, ref, lowp, f"decode splits={splits}", seed)
        left = decode.counters(4, q.device)[:4]
        assert not left.any(), f"splits={splits}: counters left at {left.tolist()}"
