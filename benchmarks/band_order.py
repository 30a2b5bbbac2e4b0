"""Launch order and the Gluon forward's causal tiles: the same launch with its tiles in bands of
1 or 8 heads (GPU only; the summary also from a run's raw files).

    python benchmarks/band_order.py --out DIR            # on an H100 or H200
    python benchmarks/band_order.py --raw DIR --out DIR  # summarise band-times.json + edges.npz

Causal d = 64, N = 1024, batch 16 × 32 heads, fp16 (the shape where the FA-3 model ranks the
three-warpgroup variants wrong): each configuration of CONFIGS, not persistent (one program per
tile) and persistent, with `band` 1 (each head's tiles launched one after another, heaviest
first) and 8 (the heaviest tile of eight heads, then their next). The kernel's work is the same
in both; only the order in which the GPU starts the tiles changes. Per row: three do_bench
medians, and the launch recorded with only each program's start and end stamped
(kernels/warpgroups.py, `detail=0`): the mean program span, and the mean span of the tiles of
each rank (0: a head's heaviest), which says whether band 1 makes every tile slower or only
packs them worse; and the FA-3 model's time for the same launch.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashscope.kernels.hopper_forward import WsConfig, tile_ranks
from flashscope.simulator.calibrate.fa3_rows import config_of
from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing.fa3 import simulate_fa3

W = WsConfig
SHAPE = (16, 32, 1024, 64)  # batch, heads, N, head_dim
CONFIGS = {
    "np3": W(3, 128, 2, False),
    "np3pp": W(3, 128, 2, True, pingpong=True),
    "np2w": W(2, 256, 2, False),
    "np2pp": W(2, 128, 2, True, pingpong=True),
    "np1x2": W(1, 128, 2, True, 2),
    "p3": W(3, 128, 2, False, persistent=True),
}
BANDS = (1, 8)


def spans(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each program's (start, end) in ns of the global timer, over its roles' stamps
    (edges: programs × roles × (clock0, timer0, clock1, timer1), −1 where not stamped)."""
    t0, t1 = edges[:, :, 1].astype(float), edges[:, :, 3].astype(float)
    ok = (t0 > 0) & (t1 > 0)
    return np.where(ok, t0, np.inf).min(1), np.where(ok, t1, -np.inf).max(1)


def summary(edges: np.ndarray, cfg: WsConfig) -> dict:
    start, end = spans(edges)
    span_us = (end - start) / 1e3
    out = {
        "launch_span_us": float((end.max() - start.min()) / 1e3),
        "mean_program_us": float(span_us.mean()),
    }
    if not cfg.persistent:  # program = tile
        per_head = -(-SHAPE[2] // cfg.tile_m)
        rank = tile_ranks(cfg, SHAPE[0] * SHAPE[1], SHAPE[2])
        out["mean_tile_us_by_rank"] = [float(span_us[rank == r].mean()) for r in range(per_head)]
    return out


def measure(out_dir: Path) -> tuple[dict, dict]:
    """Times and recorded edges on this GPU: (rows, edges by row name)."""
    import torch

    from flashscope.kernels.hopper_forward import REC_HEADER, launch_forward_ws
    from flashscope.kernels.timing import median_ms
    from flashscope.kernels.warpgroups import new_recording, stamps_of

    b, h, n, d = SHAPE
    torch.manual_seed(0)
    x = [torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3)]
    rows, edges = {}, {}
    for name, base in CONFIGS.items():
        for band in BANDS:
            cfg = replace(base, band=band)
            call = partial(launch_forward_ws, *x, True, d**-0.5, cfg)
            ms = [median_ms([call]) for _ in range(3)]
            rec = new_recording(x[0], cfg, detail=0, steps=1, tiles=1)
            for _ in range(3):
                call(record=rec)
            rec_ms = median_ms([partial(call, record=rec)])
            key = f"{name}_b{band}"
            edges[key] = stamps_of(rec, cfg).raw[:, :, -REC_HEADER:][..., :4]
            rows[key] = {"ms": ms, "rec_ms": rec_ms, "cfg": cfg.as_list()}
            print(key, [round(m, 4) for m in ms], round(rec_ms, 4), flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out_dir / "edges.npz", **edges)
    raw = {"device": torch.cuda.get_device_name(), "shape": list(SHAPE), "rows": rows}
    (out_dir / "band-times.json").write_text(json.dumps(raw, indent=1) + "\n")
    return rows, edges


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--raw", type=Path, help="a run's band-times.json and edges.npz, to summarise")
    ap.add_argument("--header", type=Path, help="a result of the same machine whose device, date "
                    "and versions the summary takes (with --raw; the raw times name the device "
                    "only)")  # fmt: skip
    args = ap.parse_args()
    if args.raw is None:
        from benchmarks.hostinfo import gpu_header

        header = gpu_header()
        rows, edges = measure(args.out)
    else:
        raw = json.loads((args.raw / "band-times.json").read_text())
        rows, edges = raw["rows"], dict(np.load(args.raw / "edges.npz"))
        keep = ("device", "sms", "l2_bytes", "date", "python", "torch", "triton")
        header = {"device": raw["device"]}
        if args.header is not None:
            other = json.loads(args.header.read_text())
            if other["device"] != raw["device"]:
                raise SystemExit(f"--header is of {other['device']}, the run of {raw['device']}")
            header = {k: other[k] for k in keep if k in other}
            header["header_from"] = str(args.header)
    gpu = hardware.resolve(header["device"])
    b, h, n, d = SHAPE
    problem = AttentionProblem(batch=b, heads=h, seq_q=n, seq_k=n, head_dim=d, causal=True,
                               dtype="fp16")  # fmt: skip
    for key, row in rows.items():
        name, band = key.rsplit("_b", 1)
        cfg = replace(CONFIGS[name], band=int(band))
        row.update(summary(edges[key], cfg))
        row["median_ms"] = sorted(row["ms"])[1]
        model = config_of(f"ws{cfg.as_list()}")
        row["fa3_model_ms"] = simulate_fa3(problem, model, gpu).time_ns / 1e6
    for name in CONFIGS:
        one, eight = rows[f"{name}_b1"], rows[f"{name}_b8"]
        one["band1_over_band8"] = one["median_ms"] / eight["median_ms"]
        one["fa3_model_band1_over_band8"] = one["fa3_model_ms"] / eight["fa3_model_ms"]
    doc = {**header, "kind": "band order", "shape": list(SHAPE), "causal": True, "dtype": "fp16",
           "rows": rows}  # fmt: skip
    tag = header["device"].replace(" ", "-")
    path = args.out / f"band-order-{tag}-{header.get('date', 'undated')}.json"
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
