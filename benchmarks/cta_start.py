"""One CTA per tile against persistent programs, the same tiles: where the difference goes.

Usage (on a Hopper GPU, with Nsight Compute's `ncu` on the PATH):
    python benchmarks/cta_start.py [--lens 1024,2048] [--out benchmarks/results]

For each configuration pair of the Gluon forward (kernels/hopper_forward.py) that differs only in
`persistent` (d = 64: three warpgroups of 128-key steps and two of 256-key steps, unpipelined;
d = 128: two ping-pong warpgroups; bands of 8 heads; fp16, causal and not; the papers' protocol,
batch × N = 16384, heads = 2048 / d), it times each launch (three do_bench medians) and profiles
it once under Nsight Compute (clocks locked by ncu, so its durations are longer than the
timings): the SMs' active cycles against the elapsed ones (an SM is active while it holds a
CTA: idle SMs between CTAs would show as a lower share), the spread of the active cycles over
the SMs (balance), the instructions executed, the L2 hit rate and the DRAM bytes read. The
result, cta-start-<device>-<date>.json, gives each pair's time per tile and SM slot spent beyond
the persistent launch's (`extra_us_per_cta`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

METRICS = (
    "gpu__time_duration.sum",
    "sm__cycles_active.avg",
    "sm__cycles_active.min",
    "sm__cycles_active.max",
    "sm__cycles_elapsed.avg",
    "smsp__inst_executed.sum",
    "lts__t_sector_hit_rate.pct",
    "dram__bytes_read.sum",
)
# (head_dim, the configuration list without its persistent flag and band): each runs with
# persistent 0 and 1, band 8
PAIRS = ((64, [3, 128, 2, 0, 1, 0]), (64, [2, 256, 2, 0, 1, 0]), (128, [2, 128, 2, 1, 1, 1]))
BAND = 8


def cases(lens: list[int]) -> list[dict]:
    out = []
    for n in lens:
        for d, base in PAIRS:
            for causal in (False, True):
                for persistent in (0, 1):
                    entry = [*base, persistent, BAND]
                    out.append({"n": n, "d": d, "causal": causal, "config": entry})
    return out


def run_child(todo: list[dict], profile: bool) -> list[dict]:
    """Time (or, under ncu, profile once between cudaProfilerStart/Stop) each case."""
    import torch

    from flashscope.kernels.hopper_forward import WsConfig, launch_forward_ws
    from flashscope.kernels.timing import median_ms

    rows = []
    for case in todo:
        n, d = case["n"], case["d"]
        b, h = 16384 // n, 2048 // d
        cfg = WsConfig.from_list(case["config"])
        sets = [
            [torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3)]
            for _ in range(3)
        ]
        run = partial(launch_forward_ws, causal=case["causal"], scale=d**-0.5, cfg=cfg)
        calls = [partial(run, *s) for s in sets]
        calls[0]()
        torch.cuda.synchronize()
        if profile:
            torch.cuda.cudart().cudaProfilerStart()
            calls[1]()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
        else:
            ms = [median_ms(calls) for _ in range(3)]
            tiles = cfg.tiles(b * h, n)
            rows.append({**case, "batch": b, "heads": h, "tiles": tiles, "ms": ms})
            print(case["config"], n, d, case["causal"], [round(x, 4) for x in ms], flush=True)
        del sets, calls
    return rows


def profile(todo: list[dict]) -> list[dict[str, float]]:
    """Nsight Compute's metrics of each case's launch, in order."""
    from flashscope.kernels.nsight import parse_raw_csv

    args = [
        "ncu", "--profile-from-start", "off", "--csv", "--page", "raw", "--print-units", "base",
        "--metrics", ",".join(METRICS), sys.executable, __file__, "--child", json.dumps(todo),
    ]  # fmt: skip
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    found = [{m: row[m] for m in METRICS} for row in parse_raw_csv(text, list(METRICS))]
    if len(found) != len(todo):
        raise SystemExit(f"ncu profiled {len(found)} launches, expected {len(todo)}")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lens", default="1024,2048")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_child(json.loads(args.child), profile=True)
        return 0
    from benchmarks.hostinfo import gpu_header, result_path

    header = gpu_header()
    todo = cases([int(x) for x in args.lens.split(",")])
    rows = run_child(todo, profile=False)
    for row, metrics in zip(rows, profile(todo), strict=True):
        row["ncu"] = metrics
        row["sm_active_share"] = (
            metrics["sm__cycles_active.avg"] / metrics["sm__cycles_elapsed.avg"]
        )
    sms = header["sms"]
    for a, b in zip(rows[::2], rows[1::2], strict=True):  # (one CTA per tile, persistent)
        waves = a["tiles"] / sms
        extra = (sorted(a["ms"])[1] - sorted(b["ms"])[1]) * 1e3 / waves
        a["extra_us_per_cta"] = b["extra_us_per_cta"] = extra
    path = result_path(args.out, "cta-start", header)
    doc = {**header, "protocol": "batch*N = 16384, heads = 2048/d, fp16, band 8", "rows": rows}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for a, b in zip(rows[::2], rows[1::2], strict=True):
        print(
            f"{a['config'][:6]} d={a['d']} N={a['n']} {'causal' if a['causal'] else 'full'}: "
            f"+{a['extra_us_per_cta']:.2f} us a CTA; SMs active {a['sm_active_share']:.3f} / "
            f"{b['sm_active_share']:.3f}; instructions x"
            f"{a['ncu']['smsp__inst_executed.sum'] / b['ncu']['smsp__inst_executed.sum']:.3f}"
        )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
