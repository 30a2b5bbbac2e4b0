"""One configuration of flashscope's kernels, measured: median time, throughput, bytes, memory.

A configuration is the dict of `flashscope simulate`'s fields
(flashscope.simulator.calibrate.validation.CONFIG_FIELDS): algo "fa2" (the forward kernel) or
"fa2-bwd" (the backward: preprocess, then the route's kernels), the problem, the tile configuration
(KernelConfig(block_m, block_n, warps, stages)), and for the backward the route and the dQ kernel's
tiles. The kernels run exactly at that configuration: nothing is looked up or autotuned.

    case = Case.build(config)          # inputs on the kernel's device, the call to time
    case.run()                         # one call (compiles on first use)
    time_case(case)                    # {"ms", "tflops", "gbs", "peak_extra_mib", …}

Timing is flashscope.kernels.timing's: median of do_bench, L2 flushed before each call, input sets
rotated when one set fits in L2. TFLOP/s use the papers' convention (4·B·H·Nq·Nk·d, ½ causal, ×2.5
backward); GB/s is the compulsory traffic (flashscope.simulator.timing.roofline) over the time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from flashscope.kernels.backward import default_dq_mode, launch_backward
from flashscope.kernels.config import KernelConfig
from flashscope.kernels.device import device, interpreting
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.launch import pad_dim
from flashscope.kernels.timing import input_sets, median_ms
from flashscope.simulator.calibrate.validation import problem_of
from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing.kernelplan import useful_flops
from flashscope.simulator.timing.roofline import compulsory_bytes

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def kernel_configs(config: dict) -> tuple[KernelConfig, KernelConfig]:
    """(main kernel, dQ kernel) configurations; the dQ kernel's default to the main's, and a
    register cap (`maxnreg`) holds for both."""
    cap = config.get("maxnreg")
    main = KernelConfig(
        config["block_m"], config["block_n"], config["warps"], config["stages"], maxnreg=cap
    )
    dq = KernelConfig(
        config.get("dq_block_m") or main.block_m,
        config.get("dq_block_n") or main.block_n,
        config.get("dq_warps") or main.num_warps,
        config.get("dq_stages") or main.num_stages,
        maxnreg=cap,
    )
    return main, dq


def kernel_route(config: dict) -> str:
    """The backward route: the config's, else what the kernels choose on this device."""
    route = config.get("route")
    if route:
        return route
    p = problem_of(config)
    n = max(p.seq_q, p.seq_k or p.seq_q)
    return default_dq_mode(TORCH_DTYPES[p.dtype], pad_dim(p.head_dim), p.causal, n)


def _forward_config(d_pad: int) -> KernelConfig:
    """A configuration that fits any GPU, for making the backward's O and LSE."""
    if interpreting():
        return KernelConfig(32, 16, 4, 1)
    return KernelConfig(64, 64 if d_pad <= 128 else 32, 4, 2)


@dataclass
class Case:
    """One configuration ready to run: `calls` rotate through independent input sets."""

    config: dict
    problem: AttentionProblem
    route: str | None
    calls: list[Callable[[], object]]
    set_bytes: int

    @classmethod
    def build(cls, config: dict, seed: int = 0, sets: int | None = None) -> Case:
        p = problem_of(config)
        algo = config.get("algo", "fa2")
        if algo not in ("fa2", "fa2-bwd"):
            raise ValueError(f"algo must be fa2 or fa2-bwd for the kernels, got {algo!r}")
        main, dq = kernel_configs(config)
        route = kernel_route(config) if algo == "fa2-bwd" else None
        dtype, dev = TORCH_DTYPES[p.dtype], device()
        q_shape = (p.batch, p.heads, p.seq_q, p.head_dim)
        kv_shape = (p.batch, p.kv_heads, p.seq_k, p.head_dim)
        q_bytes = p.batch * p.heads * p.seq_q * p.head_dim * p.dtype_bytes
        kv_bytes = p.batch * p.kv_heads * p.seq_k * p.head_dim * p.dtype_bytes
        # forward: Q, K, V in, O out; backward: Q, K, V, O, dO in, dQ, dK, dV out
        set_bytes = (2 if algo == "fa2" else 4) * (q_bytes + kv_bytes)
        count = sets or (1 if interpreting() else input_sets(set_bytes))
        gen = torch.Generator(device=dev).manual_seed(seed)

        def rand(shape: tuple) -> torch.Tensor:
            return torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).to(dtype)

        calls: list[Callable[[], object]] = []
        for _ in range(count):
            q, k, v = rand(q_shape), rand(kv_shape), rand(kv_shape)  # (B, H, N, d)
            if algo == "fa2":
                calls.append(partial(launch_forward, q, k, v, p.causal, p.scale, main))
                continue
            o, lse = launch_forward(
                q, k, v, p.causal, p.scale, _forward_config(pad_dim(p.head_dim))
            )
            do = rand(q_shape)  # (B, H, N_q, d)
            calls.append(
                partial(
                    launch_backward,
                    q,
                    k,
                    v,
                    o,
                    lse,
                    do,
                    p.causal,
                    p.scale,
                    main,
                    dq_mode=route,
                    dq_config=dq,
                )
            )
        return cls(config, p, route, calls, set_bytes)

    def run(self) -> object:
        return self.calls[0]()

    @property
    def algo(self) -> str:
        return self.config.get("algo", "fa2")


def peak_extra_bytes(case: Case) -> int:
    """Device memory one call allocates beyond what exists before it (outputs, workspaces)."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = case.run()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return int(peak)


def time_case(case: Case, warmup_ms: int = 25, rep_ms: int = 100) -> dict:
    """Median time of one call and what it implies; needs a CUDA GPU."""
    case.run()  # compile and load before timing
    ms = median_ms(case.calls, warmup_ms=warmup_ms, rep_ms=rep_ms)
    p = case.problem
    flops = useful_flops(case.algo, p)
    nbytes = compulsory_bytes(case.algo, p)
    return {
        "ms": ms,
        "tflops": flops / (ms * 1e-3) / 1e12,
        "useful_flops": flops,
        "compulsory_bytes": nbytes,
        "gbs": nbytes / (ms * 1e-3) / 1e9,
        "peak_extra_mib": peak_extra_bytes(case) / 2**20,
        "input_sets": len(case.calls),
        "route": case.route,
    }
