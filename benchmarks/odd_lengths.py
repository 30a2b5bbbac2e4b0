"""The forward at lengths that fill no tile, beside cuDNN and FlashAttention-2 (GPU only).

    python benchmarks/odd_lengths.py [--out benchmarks/results] [--head-dims 64,128]
        [--lengths 1000,3000,5000] [--passes 3]

N ∈ {1000, 3000, 5000} (batch × N ≈ 16384, heads = 2048 // d, as in the papers' protocol), d ∈
{64, 128} (or the head dims given: 80 and 96 run padded to 128), causal and not, fp16 and bf16,
in one process, each timing repeated `--passes` times (the median kept, every pass recorded):
`flash_attention` as routed (the Gluon forward where kernels/tuned.json routes the length bucket
to it, which now takes any N_q and N_k), the Triton forward alone (FLASHSCOPE_WS=0), sdpa-cudnn
and sdpa-flash; each the median of do_bench over rotated input sets. Each routed output is
checked against the Triton forward's before it is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import DTYPES, attention_fn, flops, protocol_inputs
from benchmarks.hostinfo import gpu_header, result_path
from flashscope.kernels.hopper_forward import tuned
from flashscope.kernels.timing import median_ms

LENGTHS = (1000, 3000, 5000)
IMPLS = ("flashscope", "flashscope-triton", "sdpa-cudnn", "sdpa-flash")
KIND = "forward at odd lengths"


@contextmanager
def triton_forward_only() -> Iterator[None]:
    """flash_attention on the Triton forward alone (FLASHSCOPE_WS=0, read at each call)."""
    os.environ["FLASHSCOPE_WS"] = "0"
    try:
        yield
    finally:
        os.environ.pop("FLASHSCOPE_WS", None)


def run(impl: str, sets: list, causal: bool) -> float:
    fn = attention_fn("flashscope" if impl.startswith("flashscope") else impl)
    with triton_forward_only() if impl == "flashscope-triton" else nullcontext():
        return median_ms([lambda s=s: fn(*s, causal) for s in sets])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--head-dims", default="64,128", help="comma-separated head dims")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="comma-separated N")
    ap.add_argument("--passes", type=int, default=1, help="timings per case (median kept)")
    args = ap.parse_args()
    head_dims = [int(x) for x in args.head_dims.split(",")]
    lengths = [int(x) for x in args.lengths.split(",")]
    header = gpu_header()
    dims = "" if head_dims == [64, 128] else "-d" + "-".join(map(str, head_dims))
    path = result_path(args.out, "odd-lengths" + dims, header)
    rows: list[dict] = []
    for dname, dtype in DTYPES.items():
        for d in head_dims:
            for n in lengths:
                sets = protocol_inputs(d, n, dtype)
                b, h = sets[0][0].shape[:2]
                for causal in (False, True):
                    q, k, v = sets[0]
                    cfg = tuned(q, k, v, causal)
                    routed = attention_fn("flashscope")(q, k, v, causal)
                    with triton_forward_only():
                        triton_o = attention_fn("flashscope")(q, k, v, causal)
                    err = float((routed.float() - triton_o.float()).abs().max())
                    row = {"dtype": dname, "head_dim": d, "seq": n, "batch": b, "heads": h,
                           "causal": causal, "route": "ws" if cfg else "triton",
                           "ws_config": cfg.as_list() if cfg else None,
                           "max_abs_diff_vs_triton": err, "ms": {}, "tflops": {},
                           "passes_ms": {}}  # fmt: skip
                    for impl in IMPLS:
                        try:
                            passes = [run(impl, sets, causal) for _ in range(args.passes)]
                        except Exception as e:  # a backend that refuses the shape
                            row["ms"][impl] = None
                            row.setdefault("errors", {})[impl] = f"{type(e).__name__}: {e}"[:200]
                            continue
                        ms = sorted(passes)[len(passes) // 2]
                        row["ms"][impl] = ms
                        row["passes_ms"][impl] = passes
                        row["tflops"][impl] = flops(b, h, n, d, causal, "fwd") / ms / 1e9
                    cudnn = row["ms"].get("sdpa-cudnn")
                    if cudnn:
                        row["vs_cudnn"] = cudnn / row["ms"]["flashscope"]
                    rows.append(row)
                    # written after every row, so a run stopped by a time limit keeps them
                    path.write_text(json.dumps({**header, "kind": KIND, "rows": rows}) + "\n")
                    print(f"{dname} d={d} N={n} causal={causal!s:5} route={row['route']:6} "
                          f"diff={err:.1e} " + " ".join(
                              f"{i}={row['tflops'].get(i, 0) or 0:.0f}" for i in IMPLS)
                          + f" vs cudnn {row.get('vs_cudnn', 0):.2f}", flush=True)  # fmt: skip
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
