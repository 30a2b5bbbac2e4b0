"""Micro-benchmarks that measure a GPU's ceilings for the simulator's calibration.

Each returns measured figures (medians of `triton.testing.do_bench`, in ms) and the rate they
imply: dense fp16/bf16 matrix products (tensor-core FLOP/s), a device-to-device copy (HBM bytes
read + written per second), an exp-bound Triton kernel (exponentials per second on the SFUs), an
empty Triton kernel (launch overhead: back to back in a CUDA graph, and issued one by one from
Python as flashscope's kernels are) and repeated reads of a buffer that fits in L2 (L2 read
bandwidth, from the difference of two pass counts). Inputs are random, never zeros. Needs a
CUDA GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from flashscope.kernels.launch import cdiv


def _bench(fn, warmup: int = 25, rep: int = 100) -> float:
    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def matmul(dtype: torch.dtype, n: int = 8192) -> dict[str, float]:
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ms = _bench(lambda: a @ b)
    return {"ms": ms, "n": n, "tflops": 2 * n**3 / (ms * 1e-3) / 1e12}


def copy(nbytes: int = 2 << 30) -> dict[str, float]:
    src = torch.randn(nbytes // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = _bench(lambda: dst.copy_(src))
    return {"ms": ms, "bytes": 2 * nbytes, "gbs": 2 * nbytes / (ms * 1e-3) / 1e9}


@triton.jit
def _exp_kernel(x_ptr, y_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    # Each element goes through ITERS dependent exp2s: the SFU, not memory, sets the pace.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    acc = x
    for _ in range(ITERS):
        acc = tl.exp2(acc * -0.5)
    tl.store(y_ptr + offs, acc, mask=mask)


def exp_rate(n: int = 1 << 24, iters: int = 256) -> dict[str, float]:
    x = torch.randn(n, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    block = 1024
    grid = (cdiv(n, block),)
    ms = _bench(lambda: _exp_kernel[grid](x, y, n, ITERS=iters, BLOCK=block))
    return {"ms": ms, "exps": n * iters, "exps_per_s": n * iters / (ms * 1e-3)}


@triton.jit
def _empty_kernel(x_ptr):
    pass


def launch_overhead(launches: int = 200) -> dict[str, float]:
    """Time per empty launch, from a CUDA graph of back-to-back launches (no Python in between)."""
    x = torch.empty(1, device="cuda")
    _empty_kernel[(1,)](x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            _empty_kernel[(1,)](x)
    ms = _bench(graph.replay)
    return {"ms": ms, "launches": launches, "us_per_launch": ms * 1e3 / launches}


def launch_eager(launches: int = 200) -> dict[str, float]:
    """Time per empty launch issued one by one from Python, as flashscope's kernels are."""
    x = torch.empty(1, device="cuda")

    def many() -> None:
        for _ in range(launches):
            _empty_kernel[(1,)](x)

    ms = _bench(many, warmup=10, rep=50)
    return {"ms": ms, "launches": launches, "us_per_launch": ms * 1e3 / launches}


@triton.jit
def _sum_kernel(x_ptr, out_ptr, n_per_prog, REPEAT: tl.constexpr, BLOCK: tl.constexpr):
    # Each program reads its slice REPEAT times; the slices together fit in L2, so after the
    # first pass the reads are L2 hits (never L1 hits: the loads bypass L1).
    base = tl.program_id(0) * n_per_prog
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(REPEAT):
        for start in range(0, n_per_prog, BLOCK):
            # .cg: cached in L2 only, so every pass reads L2 (an SM's L1 would hold its slice)
            acc += tl.load(x_ptr + base + start + tl.arange(0, BLOCK), cache_modifier=".cg")
    tl.store(out_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), acc)


def l2_read(l2_bytes: int, programs: int, repeat: int = 64, base: int = 8) -> dict[str, float]:
    """L2 → SM read bandwidth from the extra time of `repeat` over `base` passes.

    do_bench flushes L2 before every call, so each call's first pass reads DRAM, and each call
    pays its launch: both cancel in the difference of two pass counts over the same buffer.
    """
    block = 1024
    per_prog = max(block, (l2_bytes // 4 // 2 // programs) // block * block)  # half of L2
    x = torch.randn(per_prog * programs, device="cuda", dtype=torch.float32)
    out = torch.empty(programs * block, device="cuda", dtype=torch.float32)

    def timed(r: int) -> float:
        return _bench(lambda: _sum_kernel[(programs,)](x, out, per_prog, REPEAT=r, BLOCK=block))

    ms, ms_base = timed(repeat), timed(base)
    nbytes = x.numel() * 4 * (repeat - base)
    return {
        "ms": ms,
        "ms_base": ms_base,
        "passes": repeat,
        "base_passes": base,
        "buffer_bytes": x.numel() * 4,
        "bytes": nbytes,
        "gbs": nbytes / ((ms - ms_base) * 1e-3) / 1e9,
    }


def measure_all() -> dict[str, dict[str, float]]:
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    return {
        "matmul_fp16": matmul(torch.float16),
        "matmul_bf16": matmul(torch.bfloat16),
        "copy": copy(),
        "exp": exp_rate(),
        "launch": launch_overhead(),
        "launch_eager": launch_eager(),
        "l2_read": l2_read(l2, programs=props.multi_processor_count * 4),
    }
