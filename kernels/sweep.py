"""Measure a validation sweep on this GPU: compile in parallel, time each entry, read its bytes.

    measure_sweep(entries, workdir, ncu_timeout_s=300, progress=print) → {"env": …, "rows": …}

1. Compile: worker processes (`python -m flashscope.kernels.sweep WARM.json i n`) each run a small
problem
   of their share of the configurations once; Triton's on-disk cache then serves this process.
   A small problem compiles the same kernels: sizes are run-time arguments, and every sweep
   size is a multiple of 16 (Triton specializes integers on that).
2. Time: flashscope.kernels.measure.time_case per entry (median of do_bench; one failing entry is
   recorded as an error, the others go on). With `repeats` > 1, further passes over the whole
   sweep (alternately in reverse order) time every entry again; a row keeps every pass
   (`ms_passes`) and its time becomes their median.
3. Bytes: Nsight Compute on the entries marked `ncu` (flashscope.kernels.nsight), when ncu is
installed;
   then, as time allows, a second ncu pass of diagnostics (SM-side L2 traffic, register spills
   to local memory, tensor-pipe utilization) merged into each kernel's row.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch
import triton

from flashscope.kernels.measure import Case, kernel_route, time_case
from flashscope.kernels.nsight import DIAGNOSTICS, ncu_path, profile
from flashscope.kernels.timing import median_ms


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        "device": torch.cuda.get_device_name(0),
        "sms": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
    }


def _small(config: dict) -> dict:
    """The same kernels on a small problem (compiles what `config` compiles)."""
    # Two K/V heads, not one: Triton would make an integer argument equal to 1 a constant.
    group = config.get("heads", 1) // (config.get("kv_heads") or config.get("heads", 1))
    return {**config, "batch": 1, "heads": 2 * group, "kv_heads": 2, "seq": 512, "seq_k": None}


def warm(configs: list[dict], workdir: Path, workers: int) -> float:
    """Compile every configuration's kernels in `workers` processes; returns seconds taken."""
    t0 = time.monotonic()
    unique = list({json.dumps(_small(c), sort_keys=True): _small(c) for c in configs}.values())
    path = workdir / "warm.json"
    path.write_text(json.dumps(unique))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "flashscope.kernels.sweep", str(path), str(i), str(workers)]
        )
        for i in range(workers)
    ]
    for p in procs:
        p.wait()
    return time.monotonic() - t0


def _warm_worker(path: str, index: int, count: int) -> None:
    configs = json.loads(Path(path).read_text())
    for config in configs[index::count]:
        try:
            Case.build(config, sets=1).run()
        except Exception as exc:  # the timing pass reports the failure with its entry
            print(f"warm: {type(exc).__name__}: {exc}", file=sys.stderr)
    torch.cuda.synchronize()


def measure_sweep(
    entries: list,
    workdir: Path,
    *,
    ncu_timeout_s: float = 300.0,
    use_ncu: bool = True,
    diagnostics: bool = True,
    workers: int | None = None,
    repeats: int = 1,
    progress: Callable[[str], None] = print,
) -> dict:
    """Time every entry (and read the bytes of those marked ncu): {"env", "rows", "ncu"}."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = environment()
    configs = [e.config for e in entries]
    workers = workers or max(1, min(12, (os.cpu_count() or 2) - 2))
    env["compile_s"] = warm(configs, workdir, workers)
    progress(f"compiled in {env['compile_s']:.0f} s with {workers} processes")
    rows = []
    t0 = time.monotonic()
    for k, e in enumerate(entries):
        row: dict = {"id": e.id}
        try:
            case = Case.build(e.config)
            row.update(time_case(case))
            del case
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
        torch.cuda.empty_cache()
        rows.append(row)
        if k == 2 and all("error" in r for r in rows):
            raise RuntimeError(f"the first three entries failed; the first: {rows[0]['error']}")
        if "ms" in row:
            progress(f"[{k + 1}/{len(entries)}] {e.id}: {row['ms'] * 1e3:,.1f} µs")
        else:
            progress(f"[{k + 1}/{len(entries)}] {e.id}: {row['error']}")
    for extra in range(1, repeats):
        _timing_pass(entries, rows, extra, progress)
    if repeats > 1:
        for row in rows:
            _take_median(row)
    env["timing_s"] = time.monotonic() - t0
    env["timing_passes"] = repeats
    (workdir / "timings.json").write_text(json.dumps({"env": env, "rows": rows}))
    ncu_info: dict = {"ran": False}
    marked = [i for i, e in enumerate(entries) if e.ncu]
    if use_ncu and marked and ncu_path():
        cfgs = [{**entries[i].config, "route": kernel_route(entries[i].config)} for i in marked]
        t1 = time.monotonic()
        info = profile(cfgs, workdir, ncu_timeout_s)
        ncu_info = {k: v for k, v in info.items() if k != "results"}
        ncu_info["ran"], ncu_info["s"] = True, time.monotonic() - t1
        ncu_info["version"] = _ncu_version()
        for i, res in zip(marked, info["results"], strict=True):
            rows[i]["ncu"] = res
        got = sum(1 for r in info["results"] if r and "dram_bytes" in r)
        progress(f"ncu: bytes of {got}/{len(marked)} entries in {ncu_info['s']:.0f} s")
        left = ncu_timeout_s - ncu_info["s"]
        if diagnostics and left > 60:
            t2 = time.monotonic()
            diag = profile(cfgs, workdir, left, wanted=DIAGNOSTICS, tag="ncu-diag")
            ncu_info["diagnostics"] = {k: v for k, v in diag.items() if k != "results"}
            for i, res in zip(marked, diag["results"], strict=True):
                if res and rows[i].get("ncu") and "kernels" in res:
                    for k, extra in zip(rows[i]["ncu"]["kernels"], res["kernels"], strict=False):
                        k.update({m: v for m, v in extra.items() if m != "name" and v is not None})
            progress(f"ncu diagnostics in {time.monotonic() - t2:.0f} s")
    elif use_ncu and marked:
        ncu_info["why"] = "ncu is not on PATH"
    return {"env": env, "rows": rows, "ncu": ncu_info}


def _timing_pass(entries: list, rows: list[dict], index: int, progress) -> None:
    """Time every entry again, in the reverse order of the pass before (drift spreads evenly)."""
    order = range(len(entries)) if index % 2 == 0 else range(len(entries) - 1, -1, -1)
    t0 = time.monotonic()
    for k in order:
        row = rows[k]
        if "ms" not in row:
            continue
        try:
            case = Case.build(entries[k].config)
            case.run()
            row.setdefault("ms_passes", [row["ms"]]).append(median_ms(case.calls))
            del case
        except Exception as exc:  # keep the first pass's figure; say the repeat failed
            row.setdefault("pass_errors", []).append(f"{type(exc).__name__}: {exc}")
        torch.cuda.empty_cache()
    progress(f"timing pass {index + 1} in {time.monotonic() - t0:.0f} s")


def _take_median(row: dict) -> None:
    """The row's time becomes the median of its passes; rates follow it."""
    passes = row.get("ms_passes")
    if not passes or len(passes) < 2:
        return
    ms = statistics.median(passes)
    scale = row["ms"] / ms
    row["ms"] = ms
    for key in ("tflops", "gbs"):
        if key in row:
            row[key] *= scale


def _ncu_version() -> str | None:
    path = ncu_path()
    if not path:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1] if out.strip() else None


if __name__ == "__main__":
    _warm_worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
