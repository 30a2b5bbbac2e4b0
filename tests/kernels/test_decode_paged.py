"""Flash-Decoding over paged K/V caches (block tables) against the float64 reference.

Each test scatters a contiguous cache into page pools whose pages are shuffled, with spare pages,
NaN in every slot the kernel must not read (the tail of a last page, the spare pages, and the
page that the block table's unused entries point to), then gathers the pages back through the
block table into a contiguous cache for the reference: any read of a slot past a batch's length
or of an unused table entry turns the output NaN.
"""

from __future__ import annotations

import pytest
import torch

from flashscope.kernels import KernelConfig, flash_decode
from flashscope.kernels.config import INTERPRETER
from flashscope.kernels.reference import attention_forward

from .conftest import DEV, assert_close, rand
from .test_decode import reference

F16, F32, BF16 = torch.float16, torch.float32, torch.bfloat16
SPARE_PAGES = 3


def to_pages(
    k: torch.Tensor, v: torch.Tensor, lens: list[int], page_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pools (num_pages, page_size, H_kv, d) and an int32 block table (B, max_pages) holding the
    first lens[b] keys of each batch of k and v (B, H_kv, max_pages · page_size, d), pages in a
    random order; NaN wherever no key was written."""
    b, h_kv, n, d = k.shape
    max_pages = n // page_size
    used = [-(-n_b // page_size) for n_b in lens]
    num_pages = sum(used) + SPARE_PAGES + 1  # the last drawn page: where unused entries point
    order = torch.randperm(num_pages).tolist()
    pools = [
        torch.full((num_pages, page_size, h_kv, d), float("nan"), dtype=k.dtype) for _ in range(2)
    ]
    table = torch.full((b, max_pages), order[-1], dtype=torch.int32)
    nxt = iter(order)
    for i, n_b in enumerate(lens):
        for j in range(used[i]):
            page, lo = next(nxt), j * page_size
            hi = min(lo + page_size, n_b)
            table[i, j] = page
            for pool, src in zip(pools, (k, v), strict=True):
                pool[page, : hi - lo] = src[i, :, lo:hi].transpose(0, 1).cpu()
    k_pool, v_pool = (p.to(DEV) for p in pools)
    return k_pool, v_pool, table.to(DEV)


def gather(pool: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The contiguous cache (B, H_kv, max_pages · page_size, d) that a block table describes."""
    b, max_pages = table.shape
    _, page_size, h_kv, d = pool.shape
    rows = pool[table.long()].reshape(b, max_pages * page_size, h_kv, d)
    return rows.transpose(1, 2)


def check(q, k_pool, v_pool, table, lens, o, what, seed) -> None:
    kg, vg = gather(k_pool, table), gather(v_pool, table)
    ref = reference(q, kg, vg, lens, torch.float64)
    lowp = reference(q, kg, vg, lens, q.dtype)
    assert o.shape == q.shape and o.dtype == q.dtype, what
    assert_close(o, ref, lowp, what, seed)


def inputs(b, h, h_kv, n_q, d, page_size, n_pages, lens, dtype):
    q = rand(b, h, n_q, d, dtype=dtype)
    k, v = (rand(b, h_kv, n_pages * page_size, d, dtype=dtype) for _ in range(2))
    k_pool, v_pool, table = to_pages(k, v, lens, page_size)
    kg = gather(k_pool, table)
    for i, n_b in enumerate(lens):  # the test's own plumbing: pages hold what was scattered
        assert torch.equal(kg[i, :, :n_b], k[i, :, :n_b])
    return q, k_pool, v_pool, table


CASES = [  # page_size, n_q, h, h_kv, d, dtype, pages per sequence, cache_seqlens
    (1, 1, 4, 1, 32, F16, 40, [37, 1, 0]),  # a page a key
    (1, 3, 8, 1, 16, F32, 24, [24]),  # full
    (16, 1, 8, 2, 64, F16, 8, [0, 1, 100, 128]),  # pages smaller than the block
    (16, 4, 8, 1, 32, F32, 6, [77, 16]),
    (16, 16, 1, 1, 16, F16, 3, [47]),
    (64, 1, 8, 1, 64, F16, 4, [1, 200, 256]),  # a block inside one page
    (64, 5, 4, 4, 32, F32, 3, [130, 0]),
    (64, 2, 16, 2, 80, BF16, 2, [97]),  # head_dim padded on chip
    (256, 2, 8, 1, 32, F16, 2, [300, 512, 1]),
    (256, 7, 4, 1, 16, F32, 1, [255]),
]


def test_the_cases_take_both_ways_of_reading_pages() -> None:
    """Pages smaller than the interpreter's key block (a page per key row) and pages holding
    whole blocks (one table lookup per block)."""
    block = INTERPRETER["decode"].block_n
    assert {case[0] < block for case in CASES} == {True, False}


@pytest.mark.parametrize(("page_size", "n_q", "h", "h_kv", "d", "dtype", "n_pages", "lens"), CASES)
def test_paged_decode(seed, page_size, n_q, h, h_kv, d, dtype, n_pages, lens) -> None:
    q, k_pool, v_pool, table = inputs(len(lens), h, h_kv, n_q, d, page_size, n_pages, lens, dtype)
    o = flash_decode(q, k_pool, v_pool, torch.tensor(lens, device=DEV), block_table=table)
    what = f"paged decode page={page_size} n_q={n_q} h={h}/{h_kv} d={d} {dtype} lens={lens}"
    check(q, k_pool, v_pool, table, lens, o, what, seed)


@pytest.mark.parametrize("page_size", [16, 64])
def test_without_lengths_every_listed_page_is_full(seed: int, page_size: int) -> None:
    n = 3 * page_size
    q, k_pool, v_pool, table = inputs(2, 4, 2, 2, 32, page_size, 3, [n, n], F16)
    o = flash_decode(q, k_pool, v_pool, block_table=table)
    check(q, k_pool, v_pool, table, [n, n], o, f"paged decode page={page_size} no lens", seed)


@pytest.mark.parametrize(
    ("page_size", "block_n", "splits"),
    [(16, 16, 3), (16, 64, 2), (64, 16, 5), (4, 32, 1), (32, 32, 4)],
)
def test_pages_against_blocks_and_splits(seed: int, page_size: int, block_n: int, splits: int):
    """Pages equal to, smaller than and larger than the key block, splits crossing pages."""
    n_pages = 320 // page_size
    lens = [301, 190]
    q, k_pool, v_pool, table = inputs(2, 8, 2, 3, 32, page_size, n_pages, lens, F16)
    o = flash_decode(
        q, k_pool, v_pool, torch.tensor(lens, dtype=torch.int32, device=DEV),
        config=KernelConfig(16, block_n, 4, 1), splits=splits, block_table=table,
    )  # fmt: skip
    what = f"paged decode page={page_size} block_n={block_n} splits={splits}"
    check(q, k_pool, v_pool, table, lens, o, what, seed)


def test_strided_pools_and_table(seed: int) -> None:
    """K and V interleaved in one pool (num_pages, page_size, 2, H_kv, d), the block table a
    column slice of a wider one: strides, not copies."""
    lens = [90, 33]
    q, k_pool, v_pool, table = inputs(2, 4, 2, 1, 32, 16, 6, lens, F16)
    both = torch.stack((k_pool, v_pool), dim=2)
    wide = torch.zeros(2, 12, dtype=torch.int32, device=DEV)
    wide[:, ::2] = table
    o = flash_decode(
        q, both[:, :, 0], both[:, :, 1], torch.tensor(lens, device=DEV), block_table=wide[:, ::2]
    )
    check(q, k_pool, v_pool, table, lens, o, "paged decode strided", seed)


def test_paged_equals_contiguous_bit_for_bit() -> None:
    """Same tiles, same splits, same order of operations: paging changes only where rows come
    from (the NaN past each length included: neither path reads them)."""
    lens = [200, 75]
    q, k_pool, v_pool, table = inputs(2, 8, 2, 2, 32, 16, 16, lens, F16)
    seqlens = torch.tensor(lens, device=DEV)
    paged = flash_decode(q, k_pool, v_pool, seqlens, block_table=table, splits=2)
    k, v = (gather(x, table) for x in (k_pool, v_pool))
    dense = flash_decode(q, k, v, seqlens, splits=2)
    assert torch.equal(paged, dense)


def _bad(**change):
    """A valid paged call (2 batches, 4 pages of 16 a sequence) with some arguments replaced."""
    q = rand(2, 4, 1, 32)
    pool = rand(10, 16, 2, 32)
    args = dict(
        q=q,
        k_cache=pool,
        v_cache=pool.clone(),
        cache_seqlens=torch.tensor([64, 3], device=DEV),
        block_table=torch.arange(8, dtype=torch.int32, device=DEV).view(2, 4),
    )
    args.update(change)
    return args


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(block_table=[[0, 1]]), "block_table must be a torch.Tensor or None, got list"),
        (dict(block_table=torch.zeros(2, 4, dtype=torch.int64)), "block_table must be int32"),
        (dict(block_table=torch.zeros(8, dtype=torch.int32)), r"block_table must have shape \(2"),
        (dict(block_table=torch.zeros(3, 4, dtype=torch.int32)), r"got \(3, 4\)"),
        (dict(block_table=torch.zeros(2, 0, dtype=torch.int32)), "max_pages ≥ 1"),
        (
            dict(block_table=torch.zeros(2, 4, dtype=torch.int32, device="meta")),
            "block_table must be on",
        ),
        (
            dict(cache_seqlens=torch.tensor([65, 3], device=DEV)),
            r"cache_seqlens must lie in \[0, 64\] \(max_pages 4 · page_size 16\)",
        ),
        (
            dict(k_cache=rand(10, 48, 2, 32), v_cache=rand(10, 48, 2, 32)),
            r"page_size \(k_cache.shape\[1\]\) must be a power of two, got 48",
        ),
        (
            dict(k_cache=rand(10, 16, 2, 64), v_cache=rand(10, 16, 2, 64)),
            "head_dim mismatch: q has 32",
        ),
        (
            dict(k_cache=rand(10, 16, 3, 32), v_cache=rand(10, 16, 3, 32)),
            r"heads of q \(4\) must be divisible",
        ),
        (dict(k_cache=rand(10, 8, 2, 32)), "k_cache and v_cache must have the same"),
        (dict(v_cache=rand(10, 16, 2, 32, dtype=F32)), "must share a dtype"),
        (dict(k_cache=rand(10, 16, 64)), "k_cache must be a page pool"),
        (dict(q=rand(2, 4, 17, 32)), "decode takes 1 to 16 query tokens"),
    ],
)
def test_paged_errors(change: dict, message: str) -> None:
    args = _bad(**change)
    with pytest.raises(ValueError, match=message):
        flash_decode(
            args["q"], args["k_cache"], args["v_cache"], args["cache_seqlens"],
            block_table=args["block_table"],
        )  # fmt: skip


def test_the_valid_call_of_the_error_tests_runs(seed: int) -> None:
    """The errors above come from the one changed argument, not from a broken base call."""
    args = _bad()
    o = flash_decode(
        args["q"], args["k_cache"], args["v_cache"], args["cache_seqlens"],
        block_table=args["block_table"],
    )  # fmt: skip
    assert not torch.isnan(o).any(), f"seed={seed}"


def test_the_benchmarks_calls_give_the_reference(seed: int) -> None:
    """benchmarks/decode_paged.py at a small size: its pools and table hold the cache, and every
    call it times, paged or not, at the default tiles or its own, is within the reference's
    bound."""
    from benchmarks.decode_paged import VARIANTS, paged_cache, variant_call

    q, k, v = rand(2, 4, 1, 16), rand(2, 1, 256, 16), rand(2, 1, 256, 16)
    k_pool, v_pool, table = paged_cache(k, v, 16, seed)
    assert k_pool.shape == (32, 16, 1, 16) and table.dtype == torch.int32
    assert torch.equal(gather(k_pool, table), k) and torch.equal(gather(v_pool, table), v)
    ref, lowp = reference(q, k, v, None, torch.float64), reference(q, k, v, None, F16)
    for variant in VARIANTS:
        assert_close(variant_call(variant, q, k, v, seed)(), ref, lowp, variant, seed)


@pytest.mark.gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs a CUDA GPU (TRITON_INTERPRET=0)")
@pytest.mark.parametrize("page_size", [16, 64, 256])
@pytest.mark.parametrize("lens", [[32768, 20001, 4097, 1], [30001]], ids=["batch4", "batch1"])
def test_paged_matches_contiguous_on_gpu(seed: int, page_size: int, lens: list[int]) -> None:
    """32 query heads over 8 K/V heads, d = 128, 32,768 keys in shuffled pages with NaN past each
    length: the contiguous cache's output, and within the reference's bound. At batch 1 the
    split grid has at most one CTA per SM, so the paged call may take other tiles
    (`paged_config`) than the contiguous one."""
    from benchmarks.decode_paged import paged_cache

    b = len(lens)
    q = rand(b, 32, 1, 128)
    k, v = rand(b, 8, 32768, 128), rand(b, 8, 32768, 128)
    k_nan, v_nan = k.clone(), v.clone()
    for b, n in enumerate(lens):
        k_nan[b, :, n:], v_nan[b, :, n:] = float("nan"), float("nan")
    k_pool, v_pool, table = paged_cache(k_nan, v_nan, page_size, seed)
    seqlens = torch.tensor(lens, device=DEV, dtype=torch.int32)
    paged = flash_decode(q, k_pool, v_pool, seqlens, block_table=table)
    dense = flash_decode(q, k_nan, v_nan, seqlens)
    what = f"paged decode page={page_size}"
    assert not torch.isnan(dense).any(), f"contiguous decode: NaN, seed={seed}"
    assert not torch.isnan(paged).any(), f"{what}: NaN, seed={seed}"
    diff = float((paged.float() - dense.float()).abs().max())
    assert diff < 1e-3, f"{what}: {diff:.3g} from the contiguous cache's, seed={seed}"
    for b, n in enumerate(lens):
        args = (q[b : b + 1], k[b : b + 1, :, :n], v[b : b + 1, :, :n])
        ref, _ = attention_forward(*args)
        lowp, _ = attention_forward(*args, dtype=F16)
        assert_close(paged[b : b + 1], ref, lowp, f"{what} batch {b}", seed)


def test_a_paged_grid_of_one_cta_per_sm_takes_the_solo_tiles(seed: int) -> None:
    """`paged_config`: the GPU's "decode-paged-solo" entry where the split grid leaves each SM at
    most one CTA and the entry reads as many keys per step; the given tiles otherwise."""
    import random

    from flashscope.kernels.config import lookup
    from flashscope.kernels.decode import paged_config

    rng = random.Random(seed)
    gpu, sms = "NVIDIA H100 80GB HBM3", rng.randint(100, 200)
    solo = lookup(gpu, "decode-paged-solo/16/d128/full")
    entry = KernelConfig(16, 128, 2, 2)
    assert solo is not None and solo != entry and solo.block_n == entry.block_n
    for dtype in (F16, BF16):
        assert paged_config(entry, gpu, dtype, 128, rng.randint(1, sms), sms) == solo
        assert paged_config(entry, gpu, dtype, 128, rng.randint(sms + 1, 4 * sms), sms) == entry
    other = KernelConfig(16, 64, 4, 3)  # another number of keys per step keeps its own tiles
    assert paged_config(other, gpu, F16, 128, 1, sms) == other
    assert paged_config(entry, gpu, F32, 128, 1, sms) == entry  # no fp32 entry
    assert paged_config(entry, "a GPU without a table", F16, 128, 1, sms) == entry
