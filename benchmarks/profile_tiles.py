"""Nsight Compute's issue and stall figures for one backward kernel at chosen tiles, full and
causal (GPU, ncu).

    python benchmarks/profile_tiles.py --out benchmarks/results

Profiles the dK/dV kernel of `CASES` (d = 64 and 128, N = 4096, B·N = 16384, heads·d = 2048),
each with and without the causal mask, one launch after two warm-up calls, with
`--cache-control none --clock-control none`, and writes per case the duration, instructions,
issue rate, cycles per issued instruction, warps eligible per scheduler, occupancy, tensor pipe
activity and the L2-side against SM-side read bytes. Written for the question the validation
raised: why some compiled dK/dV kernels take longer per FLOP without the mask than with it
(docs/timing-model.md, "Known misses").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (head_dim, block_m, block_n, stages, warps) of the dK/dV kernel; the dQ kernel at 128×32
CASES = ((64, 64, 64, 3, 4), (64, 32, 128, 3, 4), (64, 32, 64, 3, 4), (128, 32, 64, 3, 4))
METRICS = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg",
    "smsp__inst_executed.sum",
    "sm__inst_executed.avg.per_cycle_active",
    "smsp__average_warp_latency_per_inst_issued.ratio",
    "smsp__warps_eligible.avg.per_cycle_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "l1tex__m_xbar2l1tex_read_bytes.sum",
    "launch__registers_per_thread",
)


def child(d: int, bm: int, bn: int, stages: int, warps: int, causal: bool) -> None:
    import torch

    from flashscope.kernels.measure import Case

    n = 4096
    config = {"algo": "fa2-bwd", "impl": "flashscope", "batch": 16384 // n, "heads": 2048 // d,
              "seq": n, "head_dim": d, "causal": causal, "dtype": "fp16", "block_m": bm,
              "block_n": bn, "stages": stages, "warps": warps, "dq_block_m": 128,
              "dq_block_n": 32, "dq_stages": 3, "dq_warps": 4, "route": "separate"}  # fmt: skip
    case = Case.build(config, sets=1)
    for _ in range(3):
        case.run()
    torch.cuda.synchronize()
    print(json.dumps(config), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        *ints, causal = args.child.split(",")
        child(*map(int, ints), causal == "1")  # type: ignore[call-arg]
        return 0
    from benchmarks.hostinfo import gpu_header, result_path
    from flashscope.kernels.nsight import ncu_path, parse_raw_csv

    ncu = ncu_path()
    if ncu is None or args.out is None:
        print("error: needs Nsight Compute (ncu) and --out", file=sys.stderr)
        return 2
    header = gpu_header()
    rows = []
    for case in CASES:
        for causal in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                report = Path(tmp) / "p"
                spec = ",".join(map(str, case)) + f",{int(causal)}"
                cmd = [ncu, "--cache-control", "none", "--clock-control", "none",
                       "-k", "regex:_attn_bwd_dkdv", "--launch-skip", "2", "--launch-count", "1",
                       "--metrics", ",".join(METRICS), "--export", str(report),
                       "--force-overwrite", sys.executable, __file__, "--child", spec]  # fmt: skip
                run = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
                if run.returncode != 0:
                    print(run.stdout[-2000:], run.stderr[-2000:], file=sys.stderr)
                    return 1
                config = next(json.loads(x) for x in run.stdout.splitlines() if x.startswith("{"))
                csv_text = subprocess.run(
                    [ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw",
                     "--print-units", "base"],
                    capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
            (kernel,) = parse_raw_csv(csv_text, list(METRICS))
            rows.append({"config": config, "kernel": kernel})
            print(f"{spec}: {kernel['gpu__time_duration.sum'] / 1e3:,.0f} µs", flush=True)
    path = result_path(args.out, "profile-dkdv", header)
    path.write_text(json.dumps({**header, "metrics": METRICS, "rows": rows}, indent=1) + "\n")
    print(f"→ {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
