"""Causal launch order: heaviest block first within each head, or across a band of heads.

Usage (on a GPU machine):  python benchmarks/launch_order.py [--out DIR] [--repeats N]

A causal grid's programs differ in length (query block i sees i + 1 key blocks). The kernels
take the heaviest block of each (batch, head) first, head after head (band 1), so the last
heads' long programs start late; list scheduling, and the simulator, say the grid's tail then
costs 4–7%. `forward.causal_order` can instead take the heaviest blocks of a band of heads first,
so the grid ends on short work. This script times, in one process and in the papers' shapes
(batch × N = 16384, heads = 2048 / d), causal only: the forward with band 1, an L2-sized band
(`l2_band`: as many heads as keep their K and V within a quarter of L2) and one band of every
head; the backward (launch_backward, both kernels of the tuned route) with band 1 and the
L2-sized band; sdpa-cudnn and sdpa-flash beside them for the ratios. Medians of --repeats
passes (every other one in reverse order). Writes DIR/launch-order-<gpu>-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import DTYPES, HEAD_DIMS, attention_fn, flops
from benchmarks.hostinfo import gpu_header, result_path
from flashscope.kernels.backward import launch_backward
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.timing import input_sets, l2_bytes, median_ms

SEQ_LENS = (1024, 2048, 4096, 8192, 16384)


def l2_band(n: int, d: int, dtype_bytes: int) -> int:
    """Heads whose K and V (n × d each) fit in a quarter of this GPU's L2: at least one."""
    return max(1, l2_bytes() // 4 // (2 * n * d * dtype_bytes))


def inputs(d: int, n: int, dtype: torch.dtype) -> list[tuple[torch.Tensor, ...]]:
    b, h = 16384 // n, 2048 // d
    sets = input_sets(4 * b * h * n * d * 2)
    return [
        tuple(torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(4))
        for _ in range(sets)
    ]


def variants(d: int, n: int, dtype: torch.dtype) -> tuple[dict, dict]:
    """((mode, variant) → a list of calls, one per input set; variant → band)."""
    sets = inputs(d, n, dtype)
    q0 = sets[0][0]
    rows = q0.shape[0] * q0.shape[1]
    bands = {"band1": 1, "l2": l2_band(n, d, q0.element_size()), "all": rows}
    scale = d**-0.5
    out: dict[tuple[str, str], object] = {}
    for name, band in bands.items():
        out[("fwd", name)] = [
            lambda q=q, k=k, v=v, band=band: launch_forward(q, k, v, True, scale, band=band)
            for q, k, v, _ in sets
        ]
    saved = []
    for q, k, v, do in sets:
        o, lse = launch_forward(q, k, v, True, scale)
        saved.append((q, k, v, o, lse, do))
    for name in ("band1", "l2"):
        band = bands[name]
        out[("bwd", name)] = [
            lambda s=s, band=band: launch_backward(*s, True, scale, band=band) for s in saved
        ]
    for impl in ("sdpa-cudnn", "sdpa-flash"):
        fn = attention_fn(impl)
        out[("fwd", impl)] = [lambda q=q, k=k, v=v, fn=fn: fn(q, k, v, True) for q, k, v, _ in sets]
    fn = attention_fn("sdpa-cudnn")
    grads = []
    for q, k, v, do in sets:
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        o = fn(*leaves, True)
        grads.append(
            lambda o=o, leaves=leaves, do=do: torch.autograd.grad(o, leaves, do, retain_graph=True)
        )
    out[("bwd", "sdpa-cudnn")] = grads
    return out, bands


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    t0 = time.time()
    cases = [(dname, d, n) for dname in DTYPES for d in HEAD_DIMS for n in SEQ_LENS]
    times: dict[tuple, list[float]] = {}
    bands_of: dict[tuple, dict] = {}
    for i in range(args.repeats):
        for case in cases if i % 2 == 0 else cases[::-1]:
            dname, d, n = case
            calls, bands = variants(d, n, DTYPES[dname])
            bands_of[case] = bands
            for key, c in calls.items():
                times.setdefault((*case, *key), []).append(median_ms(c))
            del calls
            torch.cuda.empty_cache()
        print(f"pass {i + 1} of {args.repeats} done after {time.time() - t0:.0f} s", flush=True)
    rows = []
    for (dname, d, n, mode, variant), ts in times.items():
        b, h = 16384 // n, 2048 // d
        ms = statistics.median(ts)
        rows.append(
            {"mode": mode, "variant": variant, "dtype": dname, "head_dim": d, "seq_len": n,
             "batch": b, "heads": h, "causal": True,
             "band": bands_of[(dname, d, n)].get(variant), "ms": ms,
             "tflops": flops(b, h, n, d, True, mode) / ms / 1e9, "ms_passes": ts}
        )  # fmt: skip
    by = {(r["mode"], r["variant"], r["dtype"], r["head_dim"], r["seq_len"]): r["ms"] for r in rows}
    for dname, d, n in cases:
        f = {v: by[("fwd", v, dname, d, n)] for v in ("band1", "l2", "all", "sdpa-cudnn",
                                                        "sdpa-flash")}  # fmt: skip
        g = {v: by[("bwd", v, dname, d, n)] for v in ("band1", "l2", "sdpa-cudnn")}
        print(
            f"{dname} d={d} N={n} band={bands_of[(dname, d, n)]['l2']}: fwd band1/l2 "
            f"{f['band1'] / f['l2']:.3f} band1/all {f['band1'] / f['all']:.3f} | "
            f"÷cudnn {f['sdpa-cudnn'] / f['band1']:.3f} → {f['sdpa-cudnn'] / f['l2']:.3f} "
            f"÷flash {f['sdpa-flash'] / f['band1']:.3f} → {f['sdpa-flash'] / f['l2']:.3f} | "
            f"bwd band1/l2 {g['band1'] / g['l2']:.3f} ÷cudnn "
            f"{g['sdpa-cudnn'] / g['band1']:.3f} → {g['sdpa-cudnn'] / g['l2']:.3f}",
            flush=True,
        )
    result = {
        **gpu_header(),
        "protocol": "causal only; batch*N = 16384, heads = 2048/d; median of do_bench; row ms = "
        f"median of {args.repeats} passes (every other in reverse order); bwd = launch_backward "
        "(flashscope) or autograd.grad (sdpa-cudnn)",
        "rows": rows,
    }
    path = result_path(args.out, "launch-order", result)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path} after {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
