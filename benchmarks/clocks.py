"""The SM clock each forward tile sustains: the power cap's direct evidence.

The validation datasets time every kernel two ways: back to back (do_bench's median) and one
launch alone (Nsight Compute). The ratio varies by tile configuration (0–22%), which the engine
explains with a power cap (simulator/timing/engine.py, `clock_share`). This script reads the clock
itself: for each forward configuration of a sweep (default: the validation sweep's forward
rows at one sequence length), it runs the kernel back to back for `--seconds` while
`nvidia-smi` samples the SM clock and the board's power every 20 ms, and times

    burst      the first calls after the GPU idled `--idle` seconds (median of five bursts of
               three calls each; the clock has not yet come down to the cap)
    sustained  calls in the second half of the back-to-back run (events around each batch)

and writes {device, date, torch, triton, driver, power_limit_w, max_sm_mhz, rows: [{id, config,
burst_ms, sustained_ms, sm_mhz (median over the second half), power_w, samples}]}.

    python benchmarks/clocks.py --out clocks.json [--seq 4096] [--seconds 2]

Needs a CUDA GPU and nvidia-smi. Leaves the card's settings alone (it only reads them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUERY = "clocks.sm,power.draw"


class Sampler:
    """nvidia-smi's SM clock (MHz) and board power (W) every `ms`, in a background process."""

    def __init__(self, ms: int = 20) -> None:
        cmd = ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", f"-lms={ms}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.samples: list[tuple[float, float, float]] = []  # (host time, MHz, W)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                mhz, watts = (float(x) for x in line.strip().split(","))
            except ValueError:
                continue
            self.samples.append((time.perf_counter(), mhz, watts))

    def between(self, t0: float, t1: float) -> list[tuple[float, float]]:
        return [(m, w) for t, m, w in self.samples if t0 <= t < t1]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)


def _query(field: str) -> str:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else ""


def _timed(call, n: int) -> float:
    """ms per call of n calls back to back (events around them)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def measure(case, sampler: Sampler, seconds: float, idle: float) -> dict:
    import torch

    call = case.calls[0]
    call()
    torch.cuda.synchronize()
    bursts = []
    for _ in range(5):
        time.sleep(idle)
        bursts.append(_timed(call, 3))
    per = _timed(call, 3)
    batch = max(1, int(0.05 / (per * 1e-3)))  # batches of about 50 ms
    t0 = time.perf_counter()
    times = []
    while time.perf_counter() - t0 < seconds:
        times.append((time.perf_counter(), _timed(call, batch)))
    t1 = time.perf_counter()
    half = t0 + (t1 - t0) / 2
    late = [ms for t, ms in times if t >= half] or [times[-1][1]]
    samples = sampler.between(half, t1)
    return {
        "burst_ms": statistics.median(bursts),
        "sustained_ms": statistics.median(late),
        "sm_mhz": statistics.median(m for m, _ in samples) if samples else None,
        "power_w": statistics.median(w for _, w in samples) if samples else None,
        "samples": len(samples),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", type=Path, default=ROOT / "benchmarks/sweeps/validation.json")
    ap.add_argument("--seq", type=int, nargs="+", default=[4096])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--idle", type=float, default=0.5)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import torch
    import triton

    if not torch.cuda.is_available():
        print("clocks.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    from flashscope.kernels.measure import Case

    entries = json.loads(args.sweep.read_text())["entries"]
    chosen = [e for e in entries if e["config"]["algo"] == "fa2" and e["config"]["seq"] in args.seq]
    sampler = Sampler()
    rows = []
    try:
        for e in chosen:
            case = Case.build(e["config"], sets=1)
            got = measure(case, sampler, args.seconds, args.idle)
            rows.append({"id": e["id"], "config": e["config"], **got})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "config"}), flush=True)
            del case
            torch.cuda.empty_cache()
    finally:
        sampler.stop()
    doc = {
        "device": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "driver": _query("driver_version"),
        "power_limit_w": _query("power.limit"),
        "max_sm_mhz": _query("clocks.max.sm"),
        "seconds": args.seconds,
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
