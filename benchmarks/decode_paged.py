"""Decode over paged K/V caches (block tables) against the contiguous cache, at the bandwidth limit.

    python benchmarks/decode_paged.py [--runs 5] [--out benchmarks/results]

The shape of `tune_decode.py`: 32 query heads over 8 K/V heads, d = 128, one new token, a
65,536-key fp16 cache, at batch 1 and 8. Each run draws fresh inputs (SETS sets, rotated) and
times, on the same inputs, the contiguous cache (tensor descriptors where the GPU has them),
the contiguous cache read through pointers (`use_tma=False`: the paged kernel's way of reading),
and the same keys as page pools of PAGE_SIZES keys a page, the pages in a shuffled order (the
pool holds exactly the cache's pages, so every variant reads the same bytes). Tiles and split
counts are the kernel's defaults (this GPU's decode entry in kernels/tuned.json, else autotuned
once), and the paged caches run again at each of PAGED_TILES: the paged kernel's loads depend on
a table lookup, and its best tiles need not be the contiguous cache's.
Each variant is timed two ways beside a device copy of the same bytes (`tune_decode.steady`):
back to back from CUDA graphs with no L2 flush, as a serving loop runs decode (`rotating_ms`),
and by do_bench, which flushes the L2 before every call. Every run's figures are written, with
each variant's time as a ratio of the contiguous cache's in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hostinfo import gpu_header, result_path
from benchmarks.tune_decode import H_KV, N_CACHE, SETS, D, H, inputs, rotating_ms
from flashscope.kernels.config import KernelConfig, lookup, table_key
from flashscope.kernels.decode import flash_decode, sm_count
from flashscope.kernels.launch import gpu_name
from flashscope.kernels.timing import median_ms, tensor_bytes
from flashscope.simulator.core.problem import decode_splits

PAGE_SIZES = (16, 64, 256)
PAGED_TILES = (KernelConfig(16, 64, 4, 3), KernelConfig(16, 128, 4, 3))
BATCHES = (1, 8)
CONTIGUOUS, POINTERS = "contiguous", "contiguous-pointers"


def tiles_name(cfg: KernelConfig) -> str:
    return "-".join(map(str, cfg.as_list()[1:4]))  # block_n-warps-stages


# name → (page size, None for the contiguous cache; tiles, None for the default; use_tma)
VARIANTS: dict[str, tuple[int | None, KernelConfig | None, bool | None]] = {
    CONTIGUOUS: (None, None, None),
    POINTERS: (None, None, False),
    **{f"paged{p}": (p, None, None) for p in PAGE_SIZES},
    **{f"paged{p}@{tiles_name(c)}": (p, c, None) for c in PAGED_TILES for p in PAGE_SIZES},
}


def paged_cache(
    k: torch.Tensor, v: torch.Tensor, page_size: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """k and v (B, H_kv, N, d), N a multiple of page_size, as page pools (B·N/page_size,
    page_size, H_kv, d) whose pages lie in a shuffled order, and the int32 block table (B,
    N/page_size) that maps each sequence's keys to them."""
    b, h_kv, n, d = k.shape
    per_seq = n // page_size
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(b * per_seq, generator=gen).to(k.device)
    pools = []
    for x in (k, v):
        pool = torch.empty(b * per_seq, page_size, h_kv, d, dtype=x.dtype, device=x.device)
        pool[order] = x.transpose(1, 2).reshape(b * per_seq, page_size, h_kv, d)
        pools.append(pool)
    table = order.view(b, per_seq).to(torch.int32)
    return pools[0], pools[1], table


def variant_call(variant: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seed: int):
    """The decode call that `variant` times, on inputs made from the contiguous q, k, v."""
    page_size, cfg, use_tma = VARIANTS[variant]
    if page_size is None:
        return partial(flash_decode, q, k, v, config=cfg, use_tma=use_tma)
    k_pool, v_pool, table = paged_cache(k, v, page_size, seed)
    return partial(flash_decode, q, k_pool, v_pool, config=cfg, block_table=table)


def copies(nbytes: int) -> list:
    """SETS device-to-device copies of `nbytes` each, as tune_decode.steady times them."""
    srcs = [torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_()
            for _ in range(SETS)]  # fmt: skip
    return [partial(torch.empty_like(s).copy_, s) for s in srcs]


def one_run(batch: int, run: int) -> dict:
    """Every variant on one run's inputs, with the copy they are fractions of."""
    sets = [inputs(batch, 1000 * run + i) for i in range(SETS)]
    nbytes = tensor_bytes(*sets[0][1:])
    copy = copies(nbytes)
    copy_ms, flushed_copy_ms = rotating_ms(copy, graphs=False), median_ms(copy)
    del copy
    copy_gbs, flushed_copy_gbs = 2 * nbytes / copy_ms / 1e6, 2 * nbytes / flushed_copy_ms / 1e6
    out: dict = {"copy_ms": copy_ms, "flushed_copy_ms": flushed_copy_ms, "variants": {}}
    for variant in VARIANTS:
        calls = [variant_call(variant, *x, seed=1000 * run + i) for i, x in enumerate(sets)]
        ms, flushed_ms = rotating_ms(calls), median_ms(calls)
        gbs, flushed_gbs = nbytes / ms / 1e6, nbytes / flushed_ms / 1e6
        out["variants"][variant] = {
            "ms": ms, "gbs": gbs, "of_copy": gbs / copy_gbs,
            "flushed_ms": flushed_ms, "flushed_gbs": flushed_gbs,
            "flushed_of_copy": flushed_gbs / flushed_copy_gbs,
        }  # fmt: skip
        del calls
        torch.cuda.empty_cache()
    base = out["variants"][CONTIGUOUS]
    for row in out["variants"].values():
        row["ms_vs_contiguous"] = row["ms"] / base["ms"]
        row["flushed_ms_vs_contiguous"] = row["flushed_ms"] / base["flushed_ms"]
    del sets
    torch.cuda.empty_cache()
    return out


def summarize(batch: int, runs: list[dict]) -> dict:
    """Per variant, the spread over runs of its fraction of copy and of its time ratio."""
    rows = {}
    for variant in VARIANTS:
        got = [r["variants"][variant] for r in runs]
        rows[variant] = {
            key: [min(x[key] for x in got), max(x[key] for x in got)]
            for key in ("of_copy", "flushed_of_copy", "ms_vs_contiguous",
                        "flushed_ms_vs_contiguous")
        }  # fmt: skip
        s = rows[variant]
        print(f"batch {batch} {variant:>21}: steady {s['of_copy'][0]:.1%}–{s['of_copy'][1]:.1%}"
              f" of copy ({s['ms_vs_contiguous'][0]:.3f}–{s['ms_vs_contiguous'][1]:.3f}× the "
              f"contiguous time), flushed {s['flushed_of_copy'][0]:.1%}–"
              f"{s['flushed_of_copy'][1]:.1%}", flush=True)  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--runs", type=int, default=5, help="runs per batch, fresh inputs each")
    args = ap.parse_args()
    header = gpu_header()
    cfg = lookup(gpu_name(), table_key("decode", 16, D, False))
    rows = []
    for batch in BATCHES:
        runs = [one_run(batch, run) for run in range(args.runs)]
        splits = None
        if cfg is not None:
            splits = decode_splits(batch * H_KV, triton.cdiv(N_CACHE, cfg.block_n), sm_count())
        rows.append({"batch": batch, "splits": splits, "runs": runs,
                     "summary": summarize(batch, runs)})  # fmt: skip
    path = result_path(args.out, "decode-paged", header)
    path.write_text(json.dumps({**header, "kind": "decode, paged against contiguous caches",
        "shape": {"heads": H, "kv_heads": H_KV, "head_dim": D, "cache": N_CACHE,
                  "query_tokens": 1, "dtype": "float16", "page_sizes": list(PAGE_SIZES)},
        "paged_tiles": [c.as_list() for c in PAGED_TILES],
        "config": cfg.as_list() if cfg is not None else "autotuned", "sets": SETS,
        "rows": rows}) + "\n")  # fmt: skip
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
