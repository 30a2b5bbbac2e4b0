"""The live-run executor: one run of flashscope's kernels, in a run-queue worker process.

    execute(job, device, progress) → dict          (Settings.runs_executor points here)

`job` is a RunRequest as a dict (app/schemas/trace.py); torch and the kernels are imported here, in
the worker, never in the server. What a run does:

    time   on a GPU: the kernel at the request's tile configuration (mode fwd: the forward;
           bwd: the backward with the route the kernels choose), median of do_bench, achieved
           TFLOP/s (the papers' convention), compulsory bytes per second, the extra device
           memory one call allocates, and the engine's prediction for the same configuration.
           Without a GPU: no timing — the interpreter's speed says nothing about a GPU, and the
           result says so.
    trace  mode fwd: the instrumented forward's per-tile trace (flashscope.kernels.instrumented),
    compared
           event by event with the simulator's trace of the same inputs (every field but the
           state equal; the state's largest difference per event and per quantity). mode bwd:
           the backward kernel's gradients against the float64 reference (there is no
           instrumented backward). Without a GPU both run in Triton's interpreter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

STATE_KEYS = ("m", "l", "alpha", "o", "o_hat")
FULL_STATE_ROWS = 256  # beyond this many query rows, events carry m, ℓ, α but not O
NO_GPU = (
    "timing needs a GPU: this server has none, so the kernels run in Triton's interpreter on "
    "the CPU, whose speed says nothing about a GPU's"
)


def _config(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "algo": "fa2" if job.get("mode", "fwd") == "fwd" else "fa2-bwd",
        "impl": "flashscope",
        **{k: job.get(k) for k in ("batch", "heads", "kv_heads", "seq", "seq_k", "head_dim")},
        "causal": bool(job.get("causal", False)),
        "dtype": job.get("dtype", "fp16"),
        **{k: job[k] for k in ("block_m", "block_n", "stages", "warps")},
        **({"maxnreg": job["maxnreg"]} if job.get("maxnreg") else {}),
    }


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _simulated(config: dict[str, Any], device_name: str | None) -> dict[str, Any] | None:
    """The engine's prediction on the preset of this GPU (None when no preset matches)."""
    from flashscope.simulator.calibrate.validation import simulate_config
    from flashscope.simulator.core import hardware

    try:
        gpu = hardware.from_name(hardware.resolve(device_name or ""))
        result = simulate_config({**config, "gpu": gpu.key}, gpu)
    except ValueError:
        return None
    return {"gpu": gpu.key, "time_us": result.time_s * 1e6, "limiter": result.limiter}


def _time(config: dict[str, Any], seed: int, progress: Callable[[str], None]) -> dict[str, Any]:
    from flashscope.kernels.measure import Case, time_case

    progress("building inputs")
    case = Case.build(config, seed=seed)
    progress("compiling and timing (median of do_bench)")
    got = time_case(case)
    return {
        "median_us": got["ms"] * 1e3,
        "tflops": got["tflops"],
        "bandwidth_gbs": got["gbs"],
        "compulsory_bytes": got["compulsory_bytes"],
        "peak_extra_mib": got["peak_extra_mib"],
        "input_sets": got["input_sets"],
        "route": got["route"],
        "convention": "TFLOP/s: 4·B·H·Nq·Nk·d, halved when causal, ×2.5 backward; GB/s: "
        "compulsory bytes (inputs read once, outputs written once) per second",
    }


def _diff(a: Any, b: Any) -> float:
    """Largest |a − b| over two JSON arrays (None = −∞ or NaN; two Nones are equal)."""
    x = np.array(a if a is not None else np.nan, dtype=float)
    y = np.array(b if b is not None else np.nan, dtype=float)
    if x.shape != y.shape:
        return math.inf
    both = np.isnan(x) & np.isnan(y)
    d = np.where(both, 0.0, np.abs(x - y))
    return float(np.nanmax(np.where(np.isnan(d), np.inf, d), initial=0.0))


def _trace(config: dict[str, Any], seed: int, progress: Callable[[str], None]) -> dict[str, Any]:
    from flashscope.kernels.instrumented import measured_trace
    from flashscope.simulator.calibrate.validation import problem_of, tiles_of

    p = problem_of({**config, "batch": 1, "heads": 1, "kv_heads": None})
    progress("running the instrumented forward")
    measured = measured_trace(p, tiles_of(config), seed)
    simulated = measured.extras["simulated"]
    progress("comparing with the simulator's trace, event by event")
    per_event, worst = [], dict.fromkeys(STATE_KEYS, 0.0)
    same_fields = len(measured) == len(simulated)
    events = []
    full = p.seq_q <= FULL_STATE_ROWS
    for i in range(min(len(measured), len(simulated))):
        a, b = measured.event(i), simulated.event(i)
        same_fields &= {k: v for k, v in a.items() if k != "state"} == {
            k: v for k, v in b.items() if k != "state"
        }
        diffs = {k: _diff(a["state"].get(k), b["state"].get(k)) for k in STATE_KEYS}
        for k, v in diffs.items():
            worst[k] = max(worst[k], v)
        per_event.append(_finite(max(diffs.values())))
        if not full:
            a = {**a, "state": {k: v for k, v in a["state"].items() if k not in ("o", "o_hat")}}
        events.append(a)
    return {
        "meta": measured.describe(),
        "events": events,
        "events_carry_o": full,
        "compare": {
            "simulator": "flashscope.simulator.teach.tracing.build_trace('fa2', same problem, "
            "tiles and seed)",
            "fields_equal": bool(same_fields),
            "max_state_diff": {k: _finite(v) for k, v in worst.items()},
            "max_diff_per_event": per_event,
            "max_abs_err_vs_reference": measured.meta["max_abs_err"],
        },
    }


def _gradients(
    config: dict[str, Any], seed: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    """The backward kernel's dQ, dK, dV against flashscope.kernels.reference in float64."""
    import torch

    from flashscope.kernels.backward import launch_backward
    from flashscope.kernels.device import device
    from flashscope.kernels.forward import launch_forward
    from flashscope.kernels.measure import (
        TORCH_DTYPES,
        _forward_config,
        kernel_configs,
        kernel_route,
    )
    from flashscope.kernels.reference import attention_backward
    from flashscope.simulator.calibrate.validation import problem_of

    p = problem_of(config)
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device(), TORCH_DTYPES[p.dtype])

    q = rand(p.batch, p.heads, p.seq_q, p.head_dim)  # (B, H, N_q, d)
    k = rand(p.batch, p.kv_heads, p.seq_k, p.head_dim)  # (B, H_kv, N_k, d)
    v = rand(p.batch, p.kv_heads, p.seq_k, p.head_dim)
    do = rand(p.batch, p.heads, p.seq_q, p.head_dim)
    main, dq_cfg = kernel_configs(config)
    route = kernel_route(config)
    progress(f"running the backward kernel ({route} route)")
    o, lse = launch_forward(q, k, v, p.causal, p.scale, _forward_config(64))
    got = launch_backward(
        q, k, v, o, lse, do, p.causal, p.scale, main, dq_mode=route, dq_config=dq_cfg
    )
    progress("comparing with the float64 reference")
    want = attention_backward(q.cpu(), k.cpu(), v.cpu(), do.cpu(), p.causal, p.scale)
    errs = {
        name: float((g.double().cpu() - w).abs().max())
        for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True)
    }
    return {
        "route": route,
        "max_abs_err": errs,
        "reference": "flashscope.kernels.reference, float64",
    }


def execute(job: dict[str, Any], device: str, progress: Callable[[str], None]) -> dict[str, Any]:
    """Run one live run (see the module docstring); raises on a kernel error."""
    from flashscope.kernels.device import describe, interpreting

    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(int(device.split(":")[1]) if ":" in device else 0)
    config = _config(job)
    what, mode, seed = job.get("what", "time"), job.get("mode", "fwd"), int(job.get("seed", 0))
    on_gpu = not interpreting()
    info = describe()
    out: dict[str, Any] = {
        "backend": "cuda" if on_gpu else "cpu",
        "device": info.get("gpu") if on_gpu else "Triton interpreter (CPU)",
        "config": config,
        "mode": mode,
        "what": what,
        "timing": None,
        "timing_note": None,
        "simulated": None,
        "trace": None,
        "trace_note": None,
        "gradients": None,
    }
    if what in ("time", "both"):
        if on_gpu:
            out["timing"] = _time(config, seed, progress)
            out["simulated"] = _simulated(config, info.get("gpu"))
        else:
            out["timing_note"] = NO_GPU
    if what in ("trace", "both"):
        if mode == "fwd":
            out["trace"] = _trace(config, seed, progress)
        else:
            out["gradients"] = _gradients(config, seed, progress)
            out["trace_note"] = (
                "the instrumented kernel is the forward pass: a bwd run checks the backward "
                "kernel's gradients against the reference instead"
            )
    progress("done")
    return out
