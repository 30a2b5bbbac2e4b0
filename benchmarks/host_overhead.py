"""Host time per call: what flashscope's Python side costs beside its kernels, against SDPA's.

Usage (on a GPU machine):
    python benchmarks/host_overhead.py [--out DIR]

For small problems (the GPU's work is a few microseconds) the time of a call is the host's:
argument checks, configuration lookup, descriptors, Triton's launcher. Per implementation and
problem: `host_us`, the wall time per call of 200 calls issued back to back (one synchronize at
the end; the GPU keeps up, so this is the host's rate), and `gpu_us`, do_bench's median (its L2
flush before each call hides up to the flush's time of host work). A cProfile of flashscope's
forward and backward calls (top functions by cumulative time) is written beside the JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hostinfo import gpu_header, result_path  # noqa: E402
from kernels import flash_attention  # noqa: E402
from kernels.timing import median_ms  # noqa: E402

CALLS = 200
PROBLEMS = [(1, 4, 1024, 64), (1, 4, 1024, 128), (1, 16, 2048, 64)]  # (B, H, N, d)


def _host_us(fn) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / CALLS * 1e6


def _calls(b: int, h: int, n: int, d: int):
    q, k, v = (
        torch.randn(b, h, n, d, device="cuda", dtype=torch.float16, requires_grad=True)
        for _ in range(3)
    )
    do = torch.randn_like(q)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    backends = torch.nn.attention.SDPBackend

    def fs_fwd():
        with torch.no_grad():
            return flash_attention(q, k, v, True)

    def fs_bwd():
        o = flash_attention(q, k, v, True)
        return torch.autograd.grad(o, (q, k, v), do)

    def peer(backend):
        def fwd():
            with torch.no_grad(), torch.nn.attention.sdpa_kernel(backend):
                return sdpa(q, k, v, is_causal=True)

        def bwd():
            with torch.nn.attention.sdpa_kernel(backend):
                o = sdpa(q, k, v, is_causal=True)
                return torch.autograd.grad(o, (q, k, v), do)

        return fwd, bwd

    out = {"flashscope": (fs_fwd, fs_bwd)}
    for name, backend in (("sdpa-flash", backends.FLASH_ATTENTION),
                          ("sdpa-cudnn", backends.CUDNN_ATTENTION)):  # fmt: skip
        out[name] = peer(backend)
    return out


def _profile(fn, calls: int = 100) -> str:
    fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(30)
    return text.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    rows, profiles = [], []
    for b, h, n, d in PROBLEMS:
        for impl, (fwd, bwd) in _calls(b, h, n, d).items():
            for mode, fn in (("fwd", fwd), ("bwd", bwd)):
                try:
                    host, gpu = _host_us(fn), median_ms([fn]) * 1e3
                except RuntimeError as exc:  # a backend that refuses the shape
                    print(f"{impl} {mode} b{b}h{h}n{n}d{d}: {exc}", flush=True)
                    continue
                row = {"impl": impl, "mode": mode, "batch": b, "heads": h, "seq_len": n,
                       "head_dim": d, "causal": True, "dtype": "fp16",
                       "host_us": host, "gpu_us": gpu}  # fmt: skip
                rows.append(row)
                print(f"{impl:11s} {mode} b{b}h{h}n{n}d{d}: host {host:7.1f} µs/call, "
                      f"do_bench {gpu:7.1f} µs", flush=True)  # fmt: skip
                if impl == "flashscope" and (b, h, n, d) == PROBLEMS[0]:
                    profiles.append(f"## flashscope {mode} b{b}h{h}n{n}d{d}\n{_profile(fn)}")
    result = {**gpu_header(), "calls": CALLS, "rows": rows}
    path = result_path(args.out, "host-overhead", result, ".json")
    path.write_text(json.dumps(result, indent=1) + "\n")
    path.with_suffix(".profile.txt").write_text("\n".join(profiles))
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
