"""Parallel worker processes that a GPU benchmark script runs of itself, and the command line
of the per-sequence-length tuning scripts built on them.

Compiling Triton kernels dominates a tuning sweep; each script hands a share of its jobs to
copies of itself (`python script --its-worker-flag i/count …`), which fill Triton's shared disk
cache (or write their results where the script reads them), then times in its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_workers(script: str, flag: str, count: int, *extra: str) -> None:
    """Run `python script flag i/count extra…` for i < count side by side and wait for all.

    The workers import the repository's packages (PYTHONPATH is its root); a worker that fails
    is not an error here: the caller finds its share missing.
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen([sys.executable, script, flag, f"{i}/{count}", *extra], env=env)
        for i in range(count)
    ]
    for proc in procs:
        proc.wait()


def tuning_main(
    script: str,
    kind: str,
    protocol: str,
    compile_worker: Callable[[int, int], None],
    sweep: Callable[[], tuple[list[dict], dict[str, object]]],
    argv: Sequence[str] | None = None,
) -> None:
    """The command line of a tuning script: `script --out DIR [--workers 12] [--write]`.

    `--compile-worker i/n` (how the script runs its copies) compiles that share and returns.
    Otherwise: compile in `--workers` copies of `script`, run `sweep()` → (rows, chosen) in this
    process, write `tune-<kind>-<gpu>-<date>.json` (device, versions, protocol, compile time,
    choices, rows) to DIR, and with --write merge the choices into kernels/tuned.json and copy
    the table beside the result.
    """
    import torch
    import triton

    from flashscope.kernels import config

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--compile-worker")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    if args.compile_worker:
        compile_worker(*map(int, args.compile_worker.split("/")))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    run_workers(script, "--compile-worker", args.workers, "--out", str(args.out))
    compile_s = time.time() - t0
    print(f"compiled in {compile_s:.0f} s", flush=True)
    rows, chosen = sweep()
    gpu = torch.cuda.get_device_name(0)
    result = {
        "device": gpu,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "protocol": protocol,
        "compile_s": compile_s,
        "chosen": chosen,
        "rows": rows,
    }
    name = f"tune-{kind}-{gpu.replace(' ', '-')}-{result['date']}.json"
    (args.out / name).write_text(json.dumps(result, indent=1))
    if args.write:
        config.merge_tuned(gpu, chosen)
        (args.out / "tuned.json").write_text(config.TUNED_FILE.read_text())
    print(f"done in {time.time() - t0:.0f} s; chosen {json.dumps(chosen)}", flush=True)
