"""Why causal launches of one CTA per tile run faster in wider bands: their recorded copies.

Usage (on a Hopper GPU):
    python benchmarks/band_latency.py [--out benchmarks/results]

Causal launches of the Gluon forward (kernels/hopper_forward.py) with one CTA per tile get
faster as the band of heads whose tiles are interleaved widens (three warpgroups, d = 64,
N = 1024: 0.381 ms in bands of 1, 0.306 in bands of 32, forward-sweep-...-bands.json), while
the FA-3 model, and unmasked launches, stay flat. In bands of 1 a head's tiles are launched one
after another and start together, their loaders asking for the same K and V blocks at once; in
wide bands the same head's tiles are a band apart. This records every program of each launch
(`kernels/warpgroups.py`: the copy engine's K, V and Q copies from issue to the first consumer
that saw them land, the consumers' waits) and times it plain, so the copies' latency can be
compared across bands, tile by tile, with how many tiles of the same head had started in the
copy's window. Protocol shapes (batch × N = 16384, heads = 2048 / d), fp16. The result,
band-latency-<device>-<date>.json, holds per launch the plain times (three do_bench medians),
the recorded span and, per tile rank, the median copy latencies and waits.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [  # (head_dim, N, configuration list: one CTA per tile, causal)
    (64, 1024, [3, 128, 2, 0, 1, 0, 0, 1]),
    (64, 1024, [3, 128, 2, 0, 1, 0, 0, 32]),
    (64, 1024, [2, 256, 2, 0, 1, 0, 0, 1]),
    (64, 1024, [2, 256, 2, 0, 1, 0, 0, 16]),
    (64, 4096, [3, 128, 2, 0, 1, 0, 0, 1]),
    (64, 4096, [3, 128, 2, 0, 1, 0, 0, 32]),
    (128, 1024, [2, 128, 2, 1, 1, 1, 0, 1]),
    (128, 1024, [2, 128, 2, 1, 1, 1, 0, 16]),
]


def med(xs: list[float]) -> float | None:
    return float(np.median(xs)) if xs else None


def one(d: int, n: int, entry: list[int]) -> dict:
    import torch

    from flashscope.kernels.hopper_forward import WsConfig, _sms, launch_forward_ws, tile_rows
    from flashscope.kernels.timing import median_ms
    from flashscope.kernels.warpgroups import (
        program_tiles,
        timeline_intervals,
        warpgroup_timeline,
    )

    b, h = 16384 // n, 2048 // d
    cfg = WsConfig.from_list(entry)
    sets = [[torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3)]
            for _ in range(3)]  # fmt: skip
    calls = [partial(launch_forward_ws, *s, True, d**-0.5, cfg) for s in sets]
    calls[0]()
    plain = [median_ms(calls) for _ in range(3)]
    rows, sms = b * h, _sms(0)
    tiles = cfg.tiles(rows, n)
    steps = -(-n // cfg.block_n)
    stamps = warpgroup_timeline(*sets[0], True, cfg, detail=tiles, steps=steps, tiles=1)
    head = stamps.raw[:, :, -4:]
    start = head[..., 1].min(axis=1).astype(float)  # global ns, each program's first role
    end = head[..., 3].max(axis=1).astype(float)
    origin = start.min()
    row, rank = tile_rows(cfg, rows, n)
    by_rank: dict[int, dict[str, list[float]]] = {}
    for p in range(tiles):
        blocks = program_tiles(cfg, rows, n, n, True, sms, p)
        iv = timeline_intervals(stamps, blocks, p)
        # tiles of the same head that started before this one and had not ended at its start
        same = (row == row[p]) & (start < start[p]) & (end > start[p])
        cell = by_rank.setdefault(int(rank[p]), {})

        def put(key: str, value: float, cell=cell) -> None:
            cell.setdefault(key, []).append(value)

        put("tile_ns", end[p] - start[p])
        put("start_ns", start[p] - origin)
        put("same_head_running", float(same.sum()))
        for x in iv:
            span = x["end_ns"] - x["start_ns"]
            if x["phase"] == "load_k":
                put("load_k_first_ns" if x["block"] == 0 else "load_k_later_ns", span)
            elif x["phase"] == "load_v":
                put("load_v_first_ns" if x["block"] == 0 else "load_v_later_ns", span)
            elif x["phase"] == "load_q" and x["role"] == "loader":
                put("load_q_ns", span)
            elif x["role"] == "consumer" and x["warpgroup"] == 0:
                put(x["phase"] + "_ns", span)
        put("ns_per_cycle", stamps.ns_per_cycle(p))
    summary = {
        str(k): {key: med(v) for key, v in sorted(cell.items())} | {"tiles": len(cell["tile_ns"])}
        for k, cell in sorted(by_rank.items())
    }
    every = {key: med([x for c in by_rank.values() for x in c.get(key, [])])
             for key in ("tile_ns", "load_k_first_ns", "load_k_later_ns", "load_q_ns",
                         "same_head_running", "qk_ns", "softmax_ns", "pv_ns", "wait_k_ns",
                         "wait_v_ns", "epilogue_ns", "ns_per_cycle")}  # fmt: skip
    return {"head_dim": d, "n": n, "batch": b, "heads": h, "config": entry, "tiles": tiles,
            "plain_ms": plain, "span_ms": (end.max() - origin) * 1e-6, "median": every,
            "by_rank": summary}  # fmt: skip


METRICS = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
    "sm__cycles_active.avg",
    "sm__cycles_elapsed.avg",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "lts__t_sectors.sum",
)


def child(cases: list) -> None:
    """Each case's launch once between cudaProfilerStart and Stop (under ncu)."""
    import torch

    from flashscope.kernels.hopper_forward import WsConfig, launch_forward_ws

    for d, n, entry in cases:
        b, h = 16384 // n, 2048 // d
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        cfg = WsConfig.from_list(entry)
        launch_forward_ws(q, k, v, True, d**-0.5, cfg)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        launch_forward_ws(q, k, v, True, d**-0.5, cfg)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


def profile(cases: list, clocks: str) -> list[dict[str, float]] | str:
    """Nsight Compute's metrics of each case's launch (`clocks`: ncu's --clock-control;
    "stalls": its warp-state section, the warps' stall reasons per issued instruction)."""
    import subprocess

    from flashscope.kernels.nsight import parse_raw_csv, raw_csv_columns

    what = (
        ["--section", "WarpStateStats", "--metrics", "smsp__inst_executed.sum"]
        if clocks == "stalls"
        else ["--clock-control", clocks, "--metrics", ",".join(METRICS)]
    )
    args = ["ncu", "--profile-from-start", "off", "--csv", "--page", "raw", "--print-units",
            "base", *what, sys.executable, __file__, "--child", json.dumps(cases)]  # fmt: skip
    try:
        text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"ncu failed: {exc}"
    if clocks != "stalls":
        return [{m: row[m] for m in METRICS} for row in parse_raw_csv(text, list(METRICS))]
    wanted = [h for h in raw_csv_columns(text) if "issue_stalled" in h
              and h.endswith("per_issue_active.ratio") and "not_issued" not in h]  # fmt: skip
    wanted.append("smsp__inst_executed.sum")
    return [{m: row[m] for m in wanted} for row in parse_raw_csv(text, wanted)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return 0
    from benchmarks.hostinfo import gpu_header, result_path

    header = gpu_header()
    rows = []
    for d, n, entry in CASES:
        r = one(d, n, entry)
        rows.append(r)
        m = r["median"]
        print(f"d={d} N={n} {entry}: plain {sorted(r['plain_ms'])[1]:.4f} ms, recorded span "
              f"{r['span_ms']:.4f}; medians: tile {m['tile_ns']:.0f} ns, first K "
              f"{m['load_k_first_ns']:.0f}, later K {m['load_k_later_ns']}, Q {m['load_q_ns']:.0f},"
              f" same head running {m['same_head_running']}", flush=True)  # fmt: skip
        print("   " + ", ".join(f"{a}={v:.3g}" for a, v in m.items() if v is not None))
        for k, c in r["by_rank"].items():
            print(f"   rank {k}: " + ", ".join(f"{a}={v:.3g}" for a, v in c.items()
                                              if v is not None), flush=True)  # fmt: skip
    for clocks in ("base", "none", "stalls"):
        found = profile(CASES, clocks)
        print(f"ncu, clocks {clocks}:", flush=True)
        if isinstance(found, str) or len(found) != len(rows):
            print(f"   {found if isinstance(found, str) else len(found)}", flush=True)
            continue
        for r, m in zip(rows, found, strict=True):
            r[f"ncu_clocks_{clocks}"] = m
            print(f"   d={r['head_dim']} N={r['n']} {r['config']}: " + ", ".join(
                f"{k.replace('smsp__average_warps_issue_stalled_', '')}={v:.4g}"
                for k, v in m.items() if v), flush=True)  # fmt: skip
    path = result_path(args.out, "band-latency", header)
    doc = {**header, "protocol": "batch*N = 16384, heads = 2048/d, fp16, causal", "rows": rows}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
