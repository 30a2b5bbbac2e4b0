"""How fast the timing engine runs: in process, and as a whole `flashscope simulate` process.

The issue's case: FlashAttention-2 forward, batch 4, 32 heads, N = 16384, d = 128, 128 × 128
blocks (16,384 CTAs) on an H100. Targets: under 0.5 s in process (median of repeats) and under
2 s for the whole command (median of a few runs). A few other algorithms are timed alongside
for reference, and the same problem through flashscope's kernels (impl flashscope: the launches
/api/simulate and /compare simulate), forward and backward, causal or not.

Every row of the validation datasets the app ships (app/data: the papers' protocol on H100 and
H200, the users' sweep on H100) is simulated as /compare simulates it
(simulator.calibrate.validation.simulate_config: the kernels' launches, the dataset's GPU
preset): once to warm up, then `--row-repeats` times. Target: every row under 50 ms (the
median of its repeats). The record keeps each row's times, the distribution (median, p95,
max) per dataset and over all, and the slowest rows with their shapes.

Writes benchmarks/results/engine-speed-<date>.json with every raw figure and the machine's load
averages before and after (it is shared: run it when the load is lowest).

    .venv/bin/python benchmarks/engine_speed.py [--repeats 15] [--process-runs 5] [--row-repeats 3]
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import gzip
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from hostinfo import cpu_model  # the module beside this script

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flashscope.app.datasets import DATA_DIR, PATTERNS
from flashscope.simulator.calibrate.validation import simulate_config
from flashscope.simulator.core.hardware import from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import kernelplan
from flashscope.simulator.timing.engine import simulate, simulate_workload
from flashscope.simulator.timing.results import SimResult

CASE = {"batch": 4, "heads": 32, "seq": 16384, "head_dim": 128, "block_m": 128, "block_n": 128}
TARGET_IN_PROCESS_S = 0.5
TARGET_PROCESS_S = 2.0
TARGET_ROW_S = 0.05
SLOWEST = 15  # rows listed with their shapes


def _timed(run, repeats: int) -> tuple[SimResult, list[float]]:
    """The last result of `run` and its wall times, after one warm-up call (first-call costs,
    imports and caches, are not the engine's)."""
    r = run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = run()
        times.append(time.perf_counter() - t0)
    return r, times


def _record(algo: str, p: AttentionProblem, t: TileConfig, r: SimResult, times: list) -> dict:
    return {
        "algo": algo,
        "problem": {
            "batch": p.batch,
            "heads": p.heads,
            "seq": p.seq_q,
            "head_dim": p.head_dim,
            "causal": p.causal,
        },
        "tiles": {"block_m": t.block_m, "block_n": t.block_n, "stages": t.stages, "warps": t.warps},
        "ctas": sum(k.n_ctas for k in r.kernels),
        "simulated_time_us": r.time_s * 1e6,
        "seconds": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
    }


def time_in_process(algo: str, p: AttentionProblem, t: TileConfig, repeats: int) -> dict:
    gpu = from_name("h100")
    r, times = _timed(lambda: simulate(algo, p, t, gpu), repeats)
    return _record(algo, p, t, r, times)


def time_kernels(algo: str, p: AttentionProblem, t: TileConfig, repeats: int) -> dict:
    """The same as `time_in_process` for flashscope's kernels (impl flashscope)."""
    gpu = from_name("h100")
    r, times = _timed(
        lambda: simulate_workload(kernelplan.build(algo, p, t, gpu_key=gpu.key), gpu), repeats
    )
    return {
        **_record(algo, p, t, r, times),
        "impl": "flashscope",
        "under_target": statistics.median(times) < TARGET_IN_PROCESS_S,
    }


def shipped_datasets() -> list[tuple[str, dict]]:
    """(file name, dataset) of every validation dataset the app ships."""
    out = []
    for pattern in PATTERNS:
        for path in sorted(DATA_DIR.glob(pattern)):
            raw = path.read_bytes()
            doc = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
            out.append((path.name, doc))
    return out


def _spread(seconds: list[float]) -> dict:
    x = np.array(seconds)
    return {
        "rows": len(x),
        "median_s": float(np.median(x)),
        "p95_s": float(np.percentile(x, 95)),
        "max_s": float(x.max()),
        "rows_over_target": int((x >= TARGET_ROW_S).sum()),
    }


def git_commit() -> str | None:
    """The repository's commit (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    except OSError:
        return None
    return out.stdout.strip() or None


def _minor_faults() -> int:
    """Minor page faults of this process so far (memory the allocator took from the system)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def keep_heap() -> bool:
    """Ask glibc's malloc to keep freed memory (no trimming, no mmap for arrays up to 32 MiB),
    so that a simulation reuses pages instead of faulting them in again. For `--keep-heap`:
    it shows how much of a row's time page faults take; the app does not set it."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    return bool(libc.mallopt(m_trim_threshold, 1 << 30) and libc.mallopt(m_mmap_threshold, 1 << 25))


def time_rows(repeats: int) -> dict:
    """Every row of every shipped dataset, simulated as /compare does: the seconds of each
    repeat (after one warm-up run), and the spread of the rows' medians."""
    files, rows, configs = {}, [], {}
    for name, doc in shipped_datasets():
        gpu = from_name(doc["gpu"])
        medians = []
        for row in doc["rows"]:
            c = configs[(name, row["id"])] = row["config"]
            try:
                simulate_config(c, gpu)  # warm-up (and rows the engine refuses)
            except ValueError as exc:
                rows.append({"dataset": name, "id": row["id"], "error": str(exc)})
                continue
            times, faults = [], []
            for _ in range(repeats):
                f0 = _minor_faults()
                t0 = time.perf_counter()
                simulate_config(c, gpu)
                times.append(time.perf_counter() - t0)
                faults.append(_minor_faults() - f0)
            med = statistics.median(times)
            medians.append(med)
            rows.append({"dataset": name, "id": row["id"], "seconds": times, "median_s": med,
                         "minor_page_faults": faults})  # fmt: skip
        files[name] = {"sweep": doc.get("sweep", "protocol"), "gpu": doc["gpu"], **_spread(medians)}
    timed = [r for r in rows if "median_s" in r]
    slowest = sorted(timed, key=lambda r: -r["median_s"])[:SLOWEST]
    return {
        "path": "simulator.calibrate.validation.simulate_config (kernelplan.build + "
        "engine.simulate_workload on the dataset's GPU preset), as /compare simulates a row",
        "repeats": repeats,
        "target_s": TARGET_ROW_S,
        "all": _spread([r["median_s"] for r in timed]),
        "datasets": files,
        "slowest": [{**r, "config": configs[(r["dataset"], r["id"])]} for r in slowest],
        "rows": rows,
    }


def time_process(runs: int) -> dict:
    exe = shutil.which("flashscope", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "flashscope.app.cli.main"]
    cmd += ["simulate", "--gpu", "h100", "--algo", "fa2", "--batch", str(CASE["batch"])]
    cmd += ["--heads", str(CASE["heads"]), "--seq", str(CASE["seq"])]
    cmd += ["--head-dim", str(CASE["head_dim"]), "--block-m", str(CASE["block_m"])]
    cmd += ["--block-n", str(CASE["block_n"]), "--json"]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
        times.append(time.perf_counter() - t0)
    summary = json.loads(out.stdout)
    return {
        "command": " ".join(["flashscope", *cmd[cmd.index("simulate") :]]),
        "seconds": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "simulated_time_us": summary["time_us"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--process-runs", type=int, default=5)
    ap.add_argument("--row-repeats", type=int, default=3, help="timed runs per dataset row")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument(
        "--keep-heap",
        action="store_true",
        help="keep freed memory in the process (glibc mallopt): page faults apart; "
        "writes engine-speed-<date>-heap-kept.json",
    )
    args = ap.parse_args()
    if args.keep_heap and not keep_heap():
        ap.error("--keep-heap: glibc's mallopt is not available here")

    load_before = os.getloadavg()
    t = TileConfig(CASE["block_m"], CASE["block_n"], 2, 8)
    big = dict(seq_q=CASE["seq"], head_dim=CASE["head_dim"], batch=CASE["batch"])
    main_case = time_in_process(
        "fa2", AttentionProblem(**big, heads=CASE["heads"]), t, args.repeats
    )
    others = [
        time_in_process("fa2", AttentionProblem(**big, heads=32, causal=True), t, args.repeats),
        time_in_process(
            "fa2-bwd", AttentionProblem(**big, heads=32), TileConfig(64, 128, 2, 8), args.repeats
        ),
        time_in_process(
            "naive", AttentionProblem(**big, heads=32), TileConfig(128, 128, 2, 8), args.repeats
        ),
    ]
    kernels = [
        time_kernels(algo, AttentionProblem(**big, heads=32, causal=causal), tiles, args.repeats)
        for algo, tiles in (("fa2", t), ("fa2-bwd", TileConfig(64, 128, 2, 8)))
        for causal in (False, True)
    ]
    rows = time_rows(args.row_repeats)
    process = time_process(args.process_runs)
    from flashscope import app

    today = dt.date.today().isoformat()
    result = {
        "benchmark": "engine_speed",
        "date": today,
        "device": {
            "cpu": cpu_model(platform.processor() or platform.machine()),
            "cores": os.cpu_count(),
            "machine": platform.machine(),
        },
        # the machine is shared: 1-minute load averages before and after, for context
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        "load_average_1_5_15": {"before": list(load_before), "after": list(os.getloadavg())},
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "flashscope": app.__version__,
            "commit": git_commit(),
            "libc": " ".join(platform.libc_ver()),
        },
        # glibc's default hands freed memory back (each call faults its pages in again);
        # --keep-heap keeps it
        "malloc": "kept (mallopt)" if args.keep_heap else "default",
        "targets": {
            "in_process_s": TARGET_IN_PROCESS_S,
            "process_s": TARGET_PROCESS_S,
            "dataset_row_s": TARGET_ROW_S,
        },
        "in_process": main_case,
        "process": process,
        "meets_targets": {
            "in_process": main_case["median_s"] < TARGET_IN_PROCESS_S,
            "process": process["median_s"] < TARGET_PROCESS_S,
            "kernels_in_process": all(k["under_target"] for k in kernels),
            "every_dataset_row": rows["all"]["max_s"] < TARGET_ROW_S,
        },
        "other_cases": others,
        "kernels_cases": kernels,
        "dataset_rows": rows,
    }
    out_dir = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"engine-speed-{today}{'-heap-kept' if args.keep_heap else ''}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    spread = rows["all"]
    print(
        f"in process: median {main_case['median_s'] * 1e3:.1f} ms over {args.repeats} runs "
        f"({main_case['ctas']} CTAs); flashscope's kernels: "
        + ", ".join(
            f"{k['algo']}{' causal' if k['problem']['causal'] else ''} {k['median_s'] * 1e3:.1f} ms"
            for k in kernels
        )
        + f"; {spread['rows']} dataset rows: median {spread['median_s'] * 1e3:.1f} ms, "
        f"p95 {spread['p95_s'] * 1e3:.1f} ms, max {spread['max_s'] * 1e3:.1f} ms "
        f"({rows['slowest'][0]['id']}); whole process: median {process['median_s']:.2f} s "
        f"over {args.process_runs} runs → {path}"
    )


if __name__ == "__main__":
    main()
