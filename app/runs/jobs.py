"""The live-run executor: one run of flashscope's kernels, in a run-queue worker process.

    execute(job, device, progress) → dict          (Settings.runs_executor points here)

`job` is a RunRequest as a dict (app/schemas/trace.py); torch and the kernels are imported here, in
the worker, never in the server. What a run does:

    time      on a GPU (modes fwd and bwd): three times, kept apart: the kernels' own GPU time
              (while at least one of the call's kernels runs, from the profiler's records, L2
              flushed before the call: what the timing engine predicts), the whole
              call as a user makes it (flash_attention; the backward through autograd), host and
              launches included, and do_bench's median (L2 flushed, events around each call: the
              figure of the validation datasets). With the tiles of the request, or (`route`
              default) with the kernel `flash_attention` picks on its own, the Gluon forward on
              Hopper included. Achieved TFLOP/s, compulsory bytes per second, the device memory a
              call allocates, and the engine's prediction for the same kernel. Without a GPU: no
              timing, and the result says why.
    trace     fwd: the instrumented forward's per-tile state against the simulator's, step by
              step; bwd: the backward kernel's gradients against the simulator's and float64;
              decode: each split's partial output and log-sum-exp against the simulator's
              (app/runs/checks.py). Without a GPU these run in Triton's interpreter.
    timeline  fwd on a GPU: when and on which SM each program of the forward ran
              (flashscope.kernels.timeline), beside the engine's schedule of the same launch.
    warpgroups  fwd on an H100 or H200: the Gluon forward of the request's variant (consumers,
              pipeline, pingpong, persistent, block_n, stages) run with its recording on
              (flashscope.kernels.warpgroups): programs 0 and 1 stamp every phase of each
              warpgroup, decoded into the intervals /hopper draws; and the same kernel timed
              plain and recorded (do_bench), so the result says what the recording cost.
              Anywhere else the run fails with the reason (the route refuses it up front where
              it knows the GPU).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flashscope.app.runs.checks import backward_check, decode_check, forward_trace

Progress = Callable[[str], None]
NO_GPU = (
    "timing needs a GPU: this server has none, so the kernels run in Triton's interpreter on "
    "the CPU, whose speed says nothing about a GPU's"
)
PREDICTS = (
    "the timing engine predicts the kernels' own GPU time (kernel_us: while at least one of the "
    "call's kernels runs); span_us adds the gaps between kernels, call_us the host's whole "
    "call (Python, launches, autograd)"
)
NEEDS_HOPPER = "a warpgroup timeline needs an H100 or H200"
NO_GPU_HERE = (
    "this server has no GPU (the Gluon forward has no interpreter path, and the recording reads "
    "the SM's clock)"
)
# What a live recording stamps, as benchmarks/warpgroups.py records the shipped timelines:
# programs 0 and 1 in detail, their first 96 ring steps and 4 tiles.
WARPGROUP_RECORDING = {"detail": 2, "steps": 96, "tiles": 4}
WARPGROUP_PROGRAMS = (0, 1)
WS_FIELDS = ("consumers", "block_n", "stages", "pipeline", "ctas", "pingpong", "persistent")
SPAN_PASSES = 10  # profiled calls whose GPU span gives the median
CALL_PASSES = 20  # whole calls timed on the host clock


def _config(job: dict[str, Any]) -> dict[str, Any]:
    """The validation-style configuration of a run (what the engine and the kernels read)."""
    algo = {"fwd": "fa2", "bwd": "fa2-bwd", "decode": "decode"}[job.get("mode", "fwd")]
    config = {
        "algo": algo,
        "impl": "flashscope",
        **{k: job.get(k) for k in ("batch", "heads", "kv_heads", "seq", "seq_k", "head_dim")},
        "causal": bool(job.get("causal", False)),
        "dtype": job.get("dtype", "fp16"),
        **{k: job[k] for k in ("block_m", "block_n", "stages", "warps")},
        **({"maxnreg": job["maxnreg"]} if job.get("maxnreg") else {}),
    }
    if job.get("route") == "default":
        config["route_choice"] = "default"
    return config


def _simulated(
    config: dict[str, Any], device_name: str | None, compile_opts: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The engine's prediction on the preset of this GPU (None when no preset matches). With
    `compile_opts` (the server's cache and time limit) the kernels no table holds are compiled
    first (simulator/timing/ondemand.py: seconds each) and their figures read from the cache."""
    from flashscope.simulator.calibrate.validation import kernel_keys, simulate_config
    from flashscope.simulator.core import hardware
    from flashscope.simulator.timing import compiled, ondemand

    cache = None
    try:
        gpu = hardware.from_name(hardware.resolve(device_name or ""))
        config = {**config, "gpu": gpu.key}
        if compile_opts is not None:
            cache = Path(compile_opts["cache"])
            timeout = float(compile_opts["timeout_s"])
            ondemand.compile_missing(kernel_keys(config, gpu), gpu.key, cache, timeout)
        with compiled.local_cache(cache):
            result = simulate_config(config, gpu)
    except ValueError:
        return None
    sources = {w.name: w.compiled_source for w in result.workload.launches if w.compiled_key}
    return {"gpu": gpu.key, "time_us": result.time_s * 1e6, "limiter": result.limiter,
            "compiled": sources}  # fmt: skip


def _flush_l2() -> None:
    """Overwrite L2 with a buffer larger than any GPU's, as do_bench does before each call."""
    import torch

    torch.empty(256 << 20, dtype=torch.int8, device="cuda").zero_()
    torch.cuda.synchronize()


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """Time at least one of the intervals covers (µs): kernels that overlap count once, the
    gaps between them (the host launching the next) not at all."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def gpu_time_us(call: Callable[[], object], passes: int = SPAN_PASSES) -> tuple[float, float]:
    """(busy, span): medians over `passes` calls of the time the GPU ran the call's kernels
    (their intervals' union, from the profiler's kernel records) and of the span from the first
    kernel's start to the last one's end; L2 flushed before each call."""
    import statistics

    import torch
    from torch.profiler import ProfilerActivity, profile

    busy, spans = [], []
    cuda = torch.autograd.DeviceType.CUDA  # type: ignore[attr-defined]
    for _ in range(passes):
        _flush_l2()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        kernels = [
            (float(e.time_range.start), float(e.time_range.end))
            for e in prof.events()
            if e.device_type == cuda
        ]
        if kernels:
            busy.append(busy_us(kernels))
            spans.append(max(b for _, b in kernels) - min(a for a, _ in kernels))
    if not busy:
        raise RuntimeError("the profiler recorded no kernel of the call")
    return statistics.median(busy), statistics.median(spans)


def call_us(call: Callable[[], object], passes: int = CALL_PASSES) -> float:
    """Median wall time of one whole call on the host clock (synchronized before and after)."""
    import statistics

    import torch

    times = []
    for _ in range(passes):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def _live_calls(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Inputs of the run's problem and three closures over them: the kernels alone (at the
    request's tiles, or routed as flash_attention would), the whole user call, and what ran."""
    import torch

    from flashscope.kernels import KernelConfig, flash_attention
    from flashscope.kernels.backward import launch_backward
    from flashscope.kernels.device import device
    from flashscope.kernels.forward import launch_forward
    from flashscope.kernels.hopper_forward import tuned
    from flashscope.kernels.measure import TORCH_DTYPES, kernel_configs, kernel_route
    from flashscope.simulator.calibrate.validation import problem_of

    p = problem_of(config)
    default = config.get("route_choice") == "default"
    dtype, dev = TORCH_DTYPES[p.dtype], device()
    gen = torch.Generator(device=dev).manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).to(dtype)

    q = rand(p.batch, p.heads, p.seq_q, p.head_dim)  # (B, H, N_q, d)
    k = rand(p.batch, p.kv_heads, p.seq_k, p.head_dim)  # (B, H_kv, N_k, d)
    v = rand(p.batch, p.kv_heads, p.seq_k, p.head_dim)
    main, dq_cfg = kernel_configs(config)
    tiles: KernelConfig | None = None if default else main
    if config["algo"] == "fa2":
        ws = tuned(q, k, v, p.causal) if default else None
        kernel = (
            f"Gluon warp-specialized forward {ws}"
            if ws is not None
            else "Triton forward, " + ("tuned tiles" if default else f"tiles {main.as_list()}")
        )
        return {
            "kernels": lambda: launch_forward(q, k, v, p.causal, p.scale, tiles),
            "call": lambda: flash_attention(q, k, v, p.causal, config=tiles),
            "kernel": kernel,
            "gluon": ws is not None,
            "call_is": "flash_attention(q, k, v, causal) without gradients",
        }
    route = kernel_route(config)
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
    out = flash_attention(qg, kg, vg, p.causal, config=None if default else main, bwd_config=tiles)
    do = rand(*q.shape)
    o, lse = launch_forward(q, k, v, p.causal, p.scale)
    return {
        "kernels": lambda: launch_backward(
            q,
            k,
            v,
            o,
            lse,
            do,
            p.causal,
            p.scale,
            tiles,
            dq_mode=None if default else route,
            dq_config=None if default else dq_cfg,
        ),
        "call": lambda: out.backward(do, retain_graph=True),  # type: ignore[no-untyped-call]
        "kernel": f"Triton backward ({'its own route' if default else route + ' route'})",
        "gluon": False,
        "call_is": "out.backward(dO) through autograd (the forward not included)",
    }


def _time(config: dict[str, Any], seed: int, progress: Progress) -> dict[str, Any]:
    """The three times of one configuration on this GPU (see the module docstring)."""
    from flashscope.kernels.measure import Case, kernel_route, time_case
    from flashscope.simulator.calibrate.validation import problem_of

    default = config.get("route_choice") == "default"
    progress("building inputs and compiling")
    live = _live_calls(config, seed)
    live["kernels"]()
    progress("timing the kernels on the GPU (profiler, median of 10 calls)")
    kernel, span = gpu_time_us(live["kernels"])
    progress("timing whole calls (host clock, median of 20)")
    whole = call_us(live["call"])
    progress("timing with do_bench (median, L2 flushed)")
    if default:
        route = kernel_route(config) if config["algo"] == "fa2-bwd" else None
        case = Case(config, problem_of(config), route, [live["kernels"]], 0)
    else:
        case = Case.build(config, seed=seed)
    got = time_case(case)
    return {
        "kernel_us": kernel,
        "span_us": span,
        "call_us": whole,
        "median_us": got["ms"] * 1e3,
        "predicts": "kernel_us",
        "predicts_note": PREDICTS,
        "call_is": live["call_is"],
        "kernel": live["kernel"],
        "gluon": live["gluon"],
        "tflops": got["useful_flops"] / (kernel * 1e-6) / 1e12,
        "tflops_do_bench": got["tflops"],
        "bandwidth_gbs": got["compulsory_bytes"] / (kernel * 1e-6) / 1e9,
        "compulsory_bytes": got["compulsory_bytes"],
        "peak_extra_mib": got["peak_extra_mib"],
        "input_sets": got["input_sets"],
        "route": got["route"],
        "measured_row": {"ms": got["ms"], "tflops": got["tflops"], "route": got["route"]},
        "convention": "TFLOP/s: 4·B·H·Nq·Nk·d, halved when causal, ×2.5 backward, over the "
        "kernels' GPU span; GB/s: compulsory bytes (inputs read once, outputs written once) "
        "over the same span",
    }


def _seeded_qkv(p: Any, seed: int) -> tuple[Any, Any, Any]:
    """Q, K and V of problem `p` on the GPU, from `seed` (a run's inputs, as the timeline and
    the warpgroup recording draw them)."""
    import torch

    from flashscope.kernels.measure import TORCH_DTYPES

    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape_q = (p.batch, p.heads, p.seq_q, p.head_dim)
    shape_kv = (p.batch, p.kv_heads, p.seq_k, p.head_dim)
    q, k, v = (
        torch.randn(s, generator=gen, device="cuda").to(TORCH_DTYPES[p.dtype])
        for s in (shape_q, shape_kv, shape_kv)
    )
    return q, k, v


def _timeline(config: dict[str, Any], seed: int, progress: Progress) -> dict[str, Any]:
    """When and where each program of the forward ran, and the engine's schedule beside it."""
    import torch

    from flashscope.kernels.config import KernelConfig
    from flashscope.kernels.timeline import forward_timeline
    from flashscope.simulator.calibrate.validation import problem_of

    p = problem_of(config)
    q, k, v = _seeded_qkv(p, seed)
    cfg = KernelConfig(config["block_m"], config["block_n"], config["warps"], config["stages"])
    progress("running the timeline forward (global timer and SM of every program)")
    t = forward_timeline(q, k, v, p.causal, p.scale, config=cfg)
    props = torch.cuda.get_device_properties(0)
    return {
        "start_us": (t.start * 1e6).tolist(),
        "end_us": (t.end * 1e6).tolist(),
        "sm": t.sm.tolist(),
        "row": t.row.tolist(),
        "block": t.block.tolist(),
        "span_us": t.span * 1e6,
        "sms": props.multi_processor_count,
    }


def ws_config(job: dict[str, Any]) -> Any:
    """The Gluon forward's configuration (kernels/hopper_forward.py `WsConfig`) of a run: a
    causal one with its steps in one loop (`merged`), the form the tuned routes run and
    benchmarks/warpgroups.py records."""
    from flashscope.kernels.hopper_forward import WsConfig

    return WsConfig(
        int(job.get("consumers", 2)),
        int(job["block_n"]),
        int(job["stages"]),
        bool(job.get("pipeline", True)),
        pingpong=bool(job.get("pingpong", False)),
        persistent=bool(job.get("persistent", False)),
        merged=bool(job.get("causal", False)),
    )


def _record(
    job: dict[str, Any], cfg: Any, seed: int, progress: Progress
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The GPU part of a warpgroup run: on an H100 or H200 (else ValueError, with the reason),
    the request's problem on random inputs, run plain and recorded, and timed both ways
    (flashscope.kernels.warpgroups `record_and_time`). Returns (stamps, figures, the GPU's
    device, capability and SMs)."""
    from flashscope.kernels.device import interpreting

    if interpreting():
        raise ValueError(f"{NEEDS_HOPPER}: {NO_GPU_HERE}")
    import torch

    from flashscope.kernels.hopper_forward import supports
    from flashscope.kernels.warpgroups import record_and_time
    from flashscope.simulator.calibrate.validation import problem_of

    name = torch.cuda.get_device_name()
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        raise ValueError(f"{NEEDS_HOPPER}: this GPU, {name}, is compute capability {major}.{minor}")
    p = problem_of(_config(job))
    q, k, v = _seeded_qkv(p, seed)
    why = supports(q, k, v, cfg)
    if why is not None:
        raise ValueError(f"the Hopper forward {why}")
    stamps, figures = record_and_time(
        q, k, v, p.causal, cfg, masked=False, progress=progress, **WARPGROUP_RECORDING
    )
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return stamps, figures, {"device": name, "capability": f"{major}.{minor}", "sms": sms}


def _warpgroups(job: dict[str, Any], seed: int, progress: Progress) -> dict[str, Any]:
    """A warpgroup run (see the module docstring): the recording decoded, program by program,
    into the intervals of the shipped timelines' schema, and the recording's overhead."""
    from flashscope.kernels.warpgroups import recorded_programs

    cfg = ws_config(job)
    stamps, figures, gpu = _record(job, cfg, seed, progress)
    progress("decoding the stamps into each warpgroup's phases")
    batch, heads, seq = int(job.get("batch", 1)), int(job.get("heads", 1)), int(job["seq"])
    seq_k = int(job.get("seq_k") or seq)
    causal = bool(job.get("causal", False))
    shown = tuple(p for p in WARPGROUP_PROGRAMS if p < stamps.raw.shape[0])
    programs = recorded_programs(stamps, batch * heads, seq, seq_k, causal, gpu["sms"], shown)
    return {
        **gpu,
        "config": {f: getattr(cfg, f) for f in WS_FIELDS},
        "head_dim": int(job["head_dim"]),
        "causal": causal,
        "seq": seq,
        "seq_k": seq_k,
        "batch": batch,
        "heads": heads,
        "dtype": job.get("dtype", "fp16"),
        **figures,
        "recorded": dict(WARPGROUP_RECORDING),
        "programs": programs,
    }


# What the jobs import, imported by `prepare` before the worker takes its first job.
PREPARED = (
    "flashscope.kernels",  # first: it chooses the interpreter before Triton loads (device.py)
    "torch",
    "torch.profiler",
    "triton",
    "flashscope.kernels.backward",
    "flashscope.kernels.config",
    "flashscope.kernels.decode",
    "flashscope.kernels.device",
    "flashscope.kernels.forward",
    "flashscope.kernels.hopper_forward",
    "flashscope.kernels.instrumented",
    "flashscope.kernels.launch",
    "flashscope.kernels.measure",
    "flashscope.kernels.reference",
    "flashscope.kernels.sweep",
    "flashscope.kernels.timeline",
    "flashscope.kernels.warpgroups",
    "flashscope.simulator.calibrate.validation",
    "flashscope.simulator.core.hardware",
    "flashscope.simulator.teach.algorithms.hook",
    "flashscope.simulator.teach.exactness",
    "flashscope.simulator.teach.numerics_decode",
    "flashscope.simulator.teach.tracing",
    "flashscope.simulator.timing.compiled",
    "flashscope.simulator.timing.ondemand",
)


def prepare(device: str) -> None:
    """Import torch, Triton and the kernels before the worker says it is ready (the worker calls
    this, app/runs/worker.py). A cancel stops a job by raising inside it wherever it is: one that
    landed in the middle of the first job's `import torch` would leave torch half initialized,
    and the worker would die on its next job."""
    import importlib

    for name in PREPARED:
        importlib.import_module(name)


def execute(job: dict[str, Any], device: str, progress: Progress) -> dict[str, Any]:
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
        "decode": None,
        "timeline": None,
        "warpgroups": None,
    }
    if on_gpu:
        from flashscope.kernels.sweep import environment

        out["env"] = environment()
    if what in ("time", "both"):
        if on_gpu:
            out["timing"] = _time(config, seed, progress)
            gluon = out["timing"]["gluon"]
            out["simulated_config"] = None if gluon else _simulable(config)
            out["simulated"] = (
                None
                if gluon
                else _simulated(_simulable(config), info.get("gpu"), job.get("compile"))
            )
            if gluon:
                out["timing_note"] = (
                    "the timing engine models the Triton kernels; the Gluon forward that "
                    "flash_attention picks here has no model yet"
                )
        else:
            out["timing_note"] = NO_GPU
    if what in ("trace", "both"):
        if mode == "fwd":
            out["trace"] = forward_trace(config, seed, progress)
        elif mode == "bwd":
            out["gradients"] = backward_check(config, seed, progress)
            out["trace_note"] = out["gradients"]["per_tile"]
        else:
            out["decode"] = decode_check(config, seed, job.get("splits"), progress)
    if what == "timeline":
        if not on_gpu:
            raise ValueError("a measured timeline needs a GPU: the interpreter has no clock")
        out["timeline"] = _timeline(config, seed, progress)
    if what == "warpgroups":
        out["warpgroups"] = _warpgroups(job, seed, progress)
    progress("done")
    return out


def _simulable(config: dict[str, Any]) -> dict[str, Any]:
    """The configuration the engine simulates: the request's tiles, or for the default route the
    tiles the kernels chose from this GPU's tuned table."""
    if config.get("route_choice") != "default":
        return config
    from flashscope.kernels.launch import choose_config, pad_dim
    from flashscope.kernels.measure import TORCH_DTYPES

    mode = "fwd" if config["algo"] == "fa2" else "bwd"
    cfg = choose_config(
        mode,
        TORCH_DTYPES[config["dtype"]],
        pad_dim(config["head_dim"]),
        config["causal"],
        lambda c: None,
        seq_len=max(config["seq"], config.get("seq_k") or config["seq"]),
    )
    return {**config, "block_m": cfg.block_m, "block_n": cfg.block_n, "warps": cfg.num_warps,
            "stages": cfg.num_stages}  # fmt: skip
