"""Host time per call: what flashscope's Python side costs beside its kernels, against SDPA's.

Usage (on a GPU machine):
    python benchmarks/host_overhead.py [--out DIR]

For small problems (the GPU's work is a few microseconds) the time of a call is the host's: argument
checks, configuration lookup, descriptors, Triton's launcher. Per implementation and problem:
`host_us`, the median over 5 passes of the wall time per call of 200 calls issued back to back (one
synchronize at the end of each pass; the GPU keeps up, so this is the host's rate), and `gpu_us`,
do_bench's median (its L2 flush before each call hides up to the flush's time of host work). A
cProfile of flashscope's forward and backward calls (top functions by cumulative time) is written
beside the JSON. `stages_us`: the host time of each step of a call alone (checks, configuration,
outputs, descriptors, one launch), both ways. `flashscope-triton-launch` is flashscope with every
launch bound by Triton's JIT (`flashscope.kernels.fastlaunch.through_triton()`), as before the
direct launches.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hostinfo import gpu_header, result_path
from flashscope.kernels import fastlaunch, flash_attention
from flashscope.kernels.timing import median_ms

CALLS = 200
PASSES = 5  # the host's rate wanders by tens of per cent between passes: medians


class _Same(torch.autograd.Function):
    """x → x: what autograd itself costs for a custom function, forward and backward."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        return g


@triton.jit
def _empty(x, n):  # Triton's own floor: a launch of two arguments that does nothing
    pass


PROBLEMS = [(1, 4, 1024, 64), (1, 4, 1024, 128), (1, 16, 2048, 64)]  # (B, H, N, d)


def _host_us(fn, passes: int = PASSES) -> float:
    """Median over `passes` of the wall time per call of CALLS calls issued back to back."""
    for _ in range(10):
        fn()
    times = []
    for _ in range(passes):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / CALLS * 1e6)
    return statistics.median(times)


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

    def through_triton(fn):  # every launch bound by Triton, as before flashscope.kernels.fastlaunch
        def call():
            with fastlaunch.through_triton():
                return fn()

        return call

    out = {
        "flashscope": (fs_fwd, fs_bwd),
        "flashscope-triton-launch": (through_triton(fs_fwd), through_triton(fs_bwd)),
    }
    for name, backend in (("sdpa-flash", backends.FLASH_ATTENTION),
                          ("sdpa-cudnn", backends.CUDNN_ATTENTION)):  # fmt: skip
        out[name] = peer(backend)
    return out


def _stages(b: int, h: int, n: int, d: int) -> dict[str, float]:
    """Host µs per call of each step of a causal fp16 call, each timed alone, back to back."""
    from flashscope.kernels import backward, forward
    from flashscope.kernels.inputs import check_attention
    from flashscope.kernels.launch import choose_config, output, pad_dim, use_tma_for

    q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(4))
    scale, d_pad = d**-0.5, pad_dim(d)
    o, lse = forward.launch_forward(q, k, v, True, scale)
    cfg = choose_config("fwd", q.dtype, d_pad, True, None, seq_len=n)
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    steps = {
        "check_attention": lambda: check_attention(q, k, v, True, None),
        "choose_config": lambda: choose_config("fwd", q.dtype, d_pad, True, None, seq_len=n),
        "two_outputs": lambda: (
            output(q.shape, q.dtype, q.device),
            output((b, h, n), torch.float32, q.device),
        ),
        "use_tma_for": lambda: use_tma_for([q, k, v, o]),
        "host_descriptors": lambda: forward.host_descriptors(q, k, v, o, cfg, d_pad, True, None),
        "launch_forward": lambda: forward.launch_forward(q, k, v, True, scale),
        "preprocess": lambda: backward.preprocess(o, do),
        "launch_backward": lambda: backward.launch_backward(q, k, v, o, lse, do, True, scale),
        "empty_triton_kernel": lambda: _empty[(1,)](q, 1),
        "launch_forward (in-kernel descriptors)": lambda: forward.launch_forward(
            q, k, v, True, scale, host_desc=False
        ),
        "launch_forward (pointers)": lambda: forward.launch_forward(
            q, k, v, True, scale, use_tma=False
        ),
        "launch_backward (pointers)": lambda: backward.launch_backward(
            q, k, v, o, lse, do, True, scale, use_tma=False
        ),
        "forward+backward without autograd": lambda: backward.launch_backward(
            q, k, v, *forward.launch_forward(q, k, v, True, scale), do, True, scale
        ),
        "forward+backward through autograd": lambda: torch.autograd.grad(
            flash_attention(*leaves, True), leaves, do
        ),
        "an empty autograd function, forward+backward": lambda: torch.autograd.grad(
            _Same.apply(leaves[0]), leaves[0], do
        ),
    }
    out = {}
    for name, fn in steps.items():
        out[name] = _host_us(fn, 3)
        with fastlaunch.through_triton():
            out[name + " (triton launch)"] = _host_us(fn, 3)
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
    stages = {f"b{b}h{h}n{n}d{d}": _stages(b, h, n, d) for b, h, n, d in PROBLEMS[:2]}
    for problem, times in stages.items():
        print(problem, {k: round(t, 1) for k, t in times.items()}, flush=True)
    result = {**gpu_header(), "calls": CALLS, "passes": PASSES, "rows": rows, "stages_us": stages}
    path = result_path(args.out, "host-overhead", result, ".json")
    path.write_text(json.dumps(result, indent=1) + "\n")
    path.with_suffix(".profile.txt").write_text("\n".join(profiles))
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
