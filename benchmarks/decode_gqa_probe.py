"""Decode with grouped K/V heads: how its time moves with the split count, and from run to run.

    python benchmarks/decode_gqa_probe.py [--out benchmarks/results]

Batch 1 and 8, 32 query heads over 8 K/V heads, d = 128, a 65,536-key fp16 cache: the shape of
most served models, whose bandwidth the attention table reports as swinging from run to run.
For each split count (the occupancy rule's and a spread around it) it times flash_decode five
times (each a median of do_bench, fresh inputs each time) and a device-to-device copy of the
same bytes, so each pass's bandwidth is a fraction of what the GPU copies at that moment.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hostinfo import gpu_header, result_path
from flashscope.kernels.decode import flash_decode, sm_count
from flashscope.kernels.timing import median_ms, tensor_bytes
from flashscope.simulator.core.problem import decode_splits

PASSES = 5


def copy_gbs(nbytes: int) -> float:
    """Device-to-device copy bandwidth (read + write) of a buffer of `nbytes`."""
    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = median_ms([lambda: dst.copy_(src)])
    return 2 * nbytes / (ms * 1e-3) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    header = gpu_header()
    rows = []
    for batch in (1, 8):
        n_blocks = triton.cdiv(65536, 64)
        rule = decode_splits(batch * 8, n_blocks, sm_count())
        for splits in sorted({rule, max(1, rule // 2), rule * 2, 16, 33, 66, 132}):
            passes = []
            for p in range(PASSES):
                torch.manual_seed(p)
                q = torch.randn(batch, 32, 1, 128, device="cuda", dtype=torch.float16)
                k, v = (
                    torch.randn(batch, 8, 65536, 128, device="cuda", dtype=torch.float16)
                    for _ in range(2)
                )
                nbytes = tensor_bytes(k, v)
                ms = median_ms([lambda q=q, k=k, v=v, s=splits: flash_decode(q, k, v, splits=s)])
                copy = copy_gbs(nbytes)
                gbs = nbytes / (ms * 1e-3) / 1e9
                passes.append({"ms": ms, "gbs": gbs, "copy_gbs": copy, "of_copy": gbs / copy})
                del q, k, v
                torch.cuda.empty_cache()
            fracs = [x["of_copy"] for x in passes]
            rows.append(
                {"batch": batch, "splits": splits, "rule": splits == rule, "passes": passes,
                 "of_copy_min": min(fracs), "of_copy_max": max(fracs)}
            )  # fmt: skip
            print(f"batch {batch} splits {splits:4d}{' (rule)' if splits == rule else '       '}: "
                  f"{min(fracs):.0%}–{max(fracs):.0%} of copy", flush=True)  # fmt: skip
    path = result_path(args.out, "decode-gqa-probe", header)
    path.write_text(
        json.dumps({**header, "kind": "decode GQA probe", "rows": rows}, indent=1) + "\n"
    )
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
