"""The host schedule's tile costs for persistent causal forwards, A/B in one process.

Usage (on a Hopper GPU):
    python benchmarks/schedule_costs.py [--out benchmarks/results]

Persistent causal launches of the Gluon forward (kernels/hopper_forward.py) share their tiles by
a schedule worked out on the host (`schedule`), which costs each tile as its key blocks plus a
fixed part (`TILE_FIXED_COST`, one step's worth) and, optionally, an extra per masked diagonal
step (`MASKED_STEP_COST`). This times the routed persistent causal configurations (and the
candidates at N = 1024, where the Triton forward is routed) under several settings of the two
costs, the tiles shared in turn (no schedule) and sdpa-cudnn beside them, rotating the order of
the settings between three passes. The papers' protocol: batch × N = 16384, heads = 2048 / d,
fp16. The result, schedule-costs-<device>-<date>.json, holds every pass's do_bench median.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (fixed part, extra per masked step); None: tiles shared in turn
SETTINGS = [(1.0, 0.0), None, (2.0, 0.0), (3.0, 0.0), (1.0, 0.5), (2.0, 0.5), (1.0, 1.0),
            (2.0, 1.0)]  # fmt: skip
CASES = [
    (64, 1024, [3, 128, 2, 0, 1, 0, 1, 8]),
    (64, 1024, [2, 256, 2, 0, 1, 0, 1, 8]),
    (64, 2048, [2, 256, 2, 0, 1, 0, 1, 8]),
    (64, 2048, [3, 128, 2, 0, 1, 0, 1, 8]),
    (64, 4096, [2, 256, 2, 0, 1, 0, 1, 16]),
    (64, 8192, [3, 128, 2, 0, 1, 0, 1, 8]),
    (64, 16384, [3, 128, 2, 0, 1, 0, 1]),
    (128, 1024, [2, 128, 2, 1, 1, 1, 1, 8]),
    (128, 2048, [2, 128, 2, 1, 1, 1, 1, 8]),
    (128, 4096, [2, 128, 2, 1, 1, 1, 1, 8]),
    (128, 8192, [2, 128, 2, 1, 1, 1, 1, 8]),
    (256, 1024, [1, 64, 2, 1, 1, 0, 1]),
]
PASSES = 3


def label(setting) -> str:
    return "turns" if setting is None else f"fixed={setting[0]:g},masked={setting[1]:g}"


def apply(hf, setting) -> None:
    hf.SCHEDULE_TILES = setting is not None
    if setting is not None:
        hf.TILE_FIXED_COST, hf.MASKED_STEP_COST = setting


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from benchmarks.hostinfo import gpu_header, result_path
    from flashscope.kernels import hopper_forward as hf
    from flashscope.kernels.timing import median_ms

    header = gpu_header()
    rows = []
    for d, n, entry in CASES:
        b, h = 16384 // n, 2048 // d
        cfg = hf.WsConfig.from_list(entry)
        sets = [
            [torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3)]
            for _ in range(3)
        ]
        calls = [partial(hf.launch_forward_ws, *s, True, d**-0.5, cfg) for s in sets]

        def cudnn(s):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(*s, is_causal=True)

        ms: dict[str, list[float]] = {label(s): [] for s in SETTINGS}
        ms["sdpa-cudnn"] = []
        for rep in range(PASSES):
            order = SETTINGS if rep % 2 == 0 else SETTINGS[::-1]
            for setting in order:
                apply(hf, setting)
                calls[0]()
                torch.cuda.synchronize()
                ms[label(setting)].append(median_ms(calls))
            ms["sdpa-cudnn"].append(median_ms([partial(cudnn, s) for s in sets]))
        apply(hf, SETTINGS[0])
        med = {k: sorted(v)[len(v) // 2] for k, v in ms.items()}
        base = med[label(SETTINGS[0])]
        rows.append({"d": d, "n": n, "batch": b, "heads": h, "config": entry, "ms": ms})
        print(
            f"d={d} N={n} {entry} cudnn/base {med['sdpa-cudnn'] / base:.3f}; "
            + " ".join(f"{k}:{base / v:.3f}" for k, v in med.items() if k != "sdpa-cudnn"),
            flush=True,
        )
        del sets, calls
    path = result_path(args.out, "schedule-costs", header)
    doc = {**header, "protocol": "batch*N = 16384, heads = 2048/d, fp16, causal",
           "passes": PASSES, "rows": rows}  # fmt: skip
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
