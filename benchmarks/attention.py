"""Attention speed on one GPU: flashscope's kernels beside PyTorch SDPA's backends, one process.

Usage (on a GPU machine):  python benchmarks/attention.py [--out DIR] [--quick] [--repeats N]
                               [--table-only] [--modes fwd,bwd] [--masks full,causal]
                               [--dims 64,128] [--lens ...] [--peers sdpa-flash,...]

Protocol (the FlashAttention papers'): batch × N = 16384 tokens, hidden 2048 (heads = 2048 / d), d ∈
{64, 128}, N ∈ {512 … 16384}, causal and not, fp16 and bf16, forward and backward. Useful FLOPs
4·B·H·N²·d forward (halved when causal), backward 2.5× that. The backward is timed alone
(torch.autograd.grad of a saved forward). Also: decode (batch 1, 32 heads, d = 128, a 65536-key
cache) in bytes of K and V read per second against a measured device-to-device copy; forward peak
memory at B = 1, H = 16, N = 65536, d = 64 against sdpa-flash; the instrumented forward's cost with
its flag off and on; the matrix-product and copy ceilings (--table-only leaves those out; the other
options narrow the attention table, and the file names the command). Every time is a median of
do_bench (flashscope.kernels.timing); the attention table is timed in --repeats passes (default 3,
every other one in reverse order) and each row keeps every pass and reports their median. Writes
DIR/attention-<gpu>-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hostinfo import gpu_header, result_path
from benchmarks.workers import run_workers
from flashscope import kernels
from flashscope.kernels import flash_attention, flash_decode
from flashscope.kernels.config import KernelConfig
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.launch import pad_dim
from flashscope.kernels.microbench import copy, matmul
from flashscope.kernels.timing import input_sets, median_ms, tensor_bytes

SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
SDPA = {
    "sdpa-flash": SDPBackend.FLASH_ATTENTION,
    "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def attention_fn(impl: str):
    if impl == "flashscope":
        return lambda q, k, v, causal: flash_attention(q, k, v, causal)

    def run(q, k, v, causal):
        with sdpa_kernel(SDPA[impl]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def flops(b: int, h: int, n: int, d: int, causal: bool, mode: str) -> float:
    f = 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)
    return f * (2.5 if mode == "bwd" else 1.0)


def protocol_inputs(d: int, n: int, dtype: torch.dtype) -> list[tuple[torch.Tensor, ...]]:
    """Random (q, k, v) of the papers' shape (batch × N = 16384, heads = 2048 / d), as many sets
    as it takes for consecutive calls not to find their inputs in L2 (flashscope.kernels.timing)."""
    b, h = 16384 // n, 2048 // d
    sets = input_sets(4 * b * h * n * d * 2)
    return [
        tuple(torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))
        for _ in range(sets)
    ]


def time_case(impl: str, mode: str, dtype: torch.dtype, d: int, n: int, causal: bool) -> float:
    fn = attention_fn(impl)
    calls = []
    for q, k, v in protocol_inputs(d, n, dtype):
        if mode == "fwd":
            calls.append(lambda q=q, k=k, v=v: fn(q, k, v, causal))
        else:
            leaves = [x.requires_grad_() for x in (q, k, v)]
            o = fn(*leaves, causal)
            do = torch.randn_like(o)
            calls.append(
                lambda o=o, leaves=leaves, do=do: torch.autograd.grad(
                    o, leaves, do, retain_graph=True
                )
            )
    return median_ms(calls)


def warm_worker(index: int, count: int) -> None:
    """Compile flashscope's kernels for part of the sweep (the on-disk cache is shared)."""
    cases = [(d, c, t) for d in HEAD_DIMS for c in (False, True) for t in DTYPES]
    for d, causal, t in cases[index::count]:
        q, k, v = (
            torch.randn(32, 2048 // d, 512, d, device="cuda", dtype=DTYPES[t]) for _ in range(3)
        )
        leaves = [x.requires_grad_() for x in (q, k, v)]
        o = flash_attention(*leaves, causal)
        torch.autograd.grad(o, leaves, torch.randn_like(o))
    torch.cuda.synchronize()


def warm(workers: int) -> None:
    run_workers(__file__, "--warm-worker", workers)


def decode_rows() -> list[dict]:
    rows = []
    for h_kv in (32, 8):
        q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.float16)
        k, v = (
            torch.randn(1, h_kv, 65536, 128, device="cuda", dtype=torch.float16) for _ in range(2)
        )
        kv_bytes = tensor_bytes(k, v)
        impls = {"flashscope": lambda q=q, k=k, v=v: flash_decode(q, k, v)}
        if h_kv == 32:
            impls["sdpa-flash"] = lambda q=q, k=k, v=v: attention_fn("sdpa-flash")(q, k, v, False)
        for impl, call in impls.items():
            ms = median_ms([call])
            rows.append(
                {"impl": impl, "batch": 1, "heads": 32, "kv_heads": h_kv, "head_dim": 128,
                 "cache": 65536, "query_tokens": 1, "dtype": "fp16", "ms": ms,
                 "kv_bytes": kv_bytes, "gbs": kv_bytes / (ms * 1e-3) / 1e9}
            )  # fmt: skip
    return rows


def memory_rows() -> list[dict]:
    rows = []
    q, k, v = (torch.randn(1, 16, 65536, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    for impl in ("flashscope", "sdpa-flash"):
        fn = attention_fn(impl)
        fn(q, k, v, False)  # compile and allocate whatever persists
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn(q, k, v, False)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del out
        ms = median_ms([lambda fn=fn: fn(q, k, v, False)])
        rows.append(
            {"impl": impl, "batch": 1, "heads": 16, "seq_len": 65536, "head_dim": 64,
             "dtype": "fp16", "peak_MiB": peak / 2**20, "ms": ms}
        )  # fmt: skip
    return rows


def instrumented_rows() -> list[dict]:
    """The TRACE flag's cost: off (the production kernel), on with no program chosen, on."""
    b, h, n, d = 4, 16, 4096, 128
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    cfg = KernelConfig(128, 64, 8, 3)  # one that also fits with TRACE's extra shared memory
    n_qb, n_kv = triton.cdiv(n, cfg.block_m), triton.cdiv(n, cfg.block_n)
    buf = torch.empty((n_qb, n_kv, cfg.block_m, pad_dim(d) + 3), device="cuda")
    variants = {
        "trace off": None,
        "trace compiled, no program chosen": (-1, buf),
        "trace on, one (batch, head) recorded": (0, buf),
    }
    rows = []
    for name, trace in variants.items():
        ms = median_ms(
            [lambda trace=trace: launch_forward(q, k, v, False, d**-0.5, cfg, trace=trace)]
        )
        rows.append({"variant": name, "batch": b, "heads": h, "seq_len": n, "head_dim": d, "ms": ms,
                     "config": cfg.as_list()})  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--quick", action="store_true", help="N ∈ {2048, 16384}, fp16 only")
    ap.add_argument("--repeats", type=int, default=3, help="timing passes (row ms: their median)")
    ap.add_argument("--table-only", action="store_true", help="no decode, memory, ceilings")
    ap.add_argument("--modes", default="fwd,bwd", help="fwd, bwd or both")
    ap.add_argument("--masks", default="full,causal", help="full, causal or both")
    ap.add_argument("--dims", default=",".join(map(str, HEAD_DIMS)), help="head dims")
    ap.add_argument("--lens", help="sequence lengths (default: the protocol's, or --quick's)")
    ap.add_argument("--peers", default=",".join(SDPA), help="SDPA backends timed beside")
    ap.add_argument("--warm-worker")
    args = ap.parse_args()
    modes = args.modes.split(",")
    kinds = {"full": False, "causal": True}
    dims = [int(x) for x in args.dims.split(",")]
    peers = args.peers.split(",")
    if not set(modes) <= {"fwd", "bwd"} or not set(args.masks.split(",")) <= kinds.keys():
        ap.error("--modes takes fwd and bwd, --masks full and causal")
    if not set(peers) <= SDPA.keys():
        ap.error(f"--peers takes some of {', '.join(SDPA)}")
    masks = [kinds[m] for m in args.masks.split(",")]
    if args.warm_worker:
        i, n = map(int, args.warm_worker.split("/"))
        warm_worker(i, n)
        return
    t0 = time.time()
    warm(8)
    print(f"kernels compiled in {time.time() - t0:.0f} s", flush=True)
    result = {
        **gpu_header(),
        "protocol": "batch*N = 16384, heads = 2048/d; fwd FLOPs 4BHN^2d (x0.5 causal), bwd x2.5; "
        f"median of triton.testing.do_bench; row ms = median of {args.repeats} passes "
        "(every other pass in reverse order)",
        "command": " ".join(sys.argv[1:]),
    }
    if not args.table_only:
        result["ceilings"] = {
            "copy": copy(),
            "matmul_fp16": matmul(torch.float16),
            "matmul_bf16": matmul(torch.bfloat16),
        }
        print(json.dumps(result["ceilings"]), flush=True)
        result["decode"] = decode_rows()
        for r in result["decode"]:
            r["fraction_of_copy"] = r["gbs"] / result["ceilings"]["copy"]["gbs"]
            print(json.dumps(r), flush=True)
        result["memory"] = memory_rows()
        print(json.dumps(result["memory"]), flush=True)
        result["instrumented"] = instrumented_rows()
        print(json.dumps(result["instrumented"]), flush=True)
    seq_lens = (2048, 16384) if args.quick else SEQ_LENS
    if args.lens:
        seq_lens = tuple(int(x) for x in args.lens.split(","))
    dtypes = {"fp16": DTYPES["fp16"]} if args.quick else DTYPES
    cases = [(impl, mode, dname, d, n, causal) for dname in dtypes for d in dims
             for causal in masks for n in seq_lens for mode in modes
             for impl in ("flashscope", *peers)]  # fmt: skip
    passes: dict[tuple, list[float]] = {c: [] for c in cases}
    for i in range(args.repeats):  # every other pass in reverse order: drift hits both ends
        for c in cases if i % 2 == 0 else cases[::-1]:
            impl, mode, dname, d, n, causal = c
            try:
                passes[c].append(time_case(impl, mode, DTYPES[dname], d, n, causal))
            except Exception as e:
                print(f"{impl} {mode} {dname} d={d} N={n}: {e}"[:300], flush=True)
        print(f"pass {i + 1} of {args.repeats} done after {time.time() - t0:.0f} s", flush=True)
    rows = []
    for c, times in passes.items():
        if not times:
            continue
        impl, mode, dname, d, n, causal = c
        b, h = 16384 // n, 2048 // d
        ms = statistics.median(times)
        tflops = flops(b, h, n, d, causal, mode) / ms / 1e9
        row = {"impl": impl, "mode": mode, "dtype": dname, "head_dim": d, "seq_len": n,
               "batch": b, "heads": h, "causal": causal, "ms": ms, "tflops": tflops,
               "ms_passes": times}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    result["rows"] = rows
    path = result_path(args.out, "attention", result)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path} after {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    print("kernels from", kernels.__file__, flush=True)
    main()
