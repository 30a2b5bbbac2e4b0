"""What the recorded Hopper forward costs, form by form (GPU only).

Usage (on an H100 or H200):
    python benchmarks/recording_modes.py --out FILE [--rounds 3]

A recording in one launch (`kernels/warpgroups.py`, RECORD mode 2, its first form) holds each
role's loop twice: a copy with the step stamps, which the first `detail` programs take, and one
without, which every other program takes; three ping-pong warpgroups causal ran about a tenth
slower so recorded than plain. This times, for a few launches of `benchmarks/warpgroups.py`, in
one process and in alternating rounds (plain first in each):

- `plain`: the kernel without RECORD;
- `split`: the recording as launched (`Recording.mode` 6, `hopper_forward.split_launches`):
  programs 0 and 1 in a stamping kernel over their first tiles (RECORD 7; RECORD 3 when the
  committed result was taken, the same for one tile a program) and the rest of their tiles in
  one after it (RECORD 8), the others beside them with their start and end stamps (RECORD 5),
  all behind a gate on the GPU (its time, `gate_ms`, timed alone each round and taken off
  the median; `passes` keep the raw times), compared with `plain_gated`, the plain kernel
  behind the same gate;
- `one_launch`: mode 2, programs 0 and 1 stamping their steps;
- `no_detail`: mode 2 with no program stamping its steps (both copies compiled, only the plain
  one run);
- `edges_only`: mode 4 alone, one copy of each loop, every program stamping only its roles'
  start and end.

So `no_detail` against `edges_only` is what holding the second copy costs the programs that
never run it, `one_launch` against `no_detail` what the two stamping programs add, and `split`
against `plain_gated` what the recording costs as launched. The spans by the global timer are
kept for the recorded forms. Writes one JSON with the device, date,
versions and every raw figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hostinfo import gpu_header
from benchmarks.warpgroups import VARIANTS, inputs, protocol
from flashscope.kernels.hopper_forward import gate_ms, gated, launch_forward_ws
from flashscope.kernels.timing import median_ms
from flashscope.kernels.warpgroups import new_recording, stamps_of

LAUNCHES = [  # (head_dim, variant, causal, N)
    (64, "pingpong", True, 4096), (64, "pingpong", True, 1024), (64, "pingpong", False, 4096),
    (64, "plain", True, 4096), (128, "pingpong", True, 4096),
]  # fmt: skip
FORMS = ("plain", "plain_gated", "split", "one_launch", "no_detail", "edges_only")


def time_forms(d: int, name: str, causal: bool, n: int, rounds: int) -> dict:
    """One launch in every form, `rounds` alternating rounds; causal launches merged, as the
    tuned tables route them and the recording runs them."""
    cfg = replace(VARIANTS[d][name], merged=causal)
    b, h = protocol(n, d)
    q, k, v = inputs(b, h, n, d, 1)[0]
    call = partial(launch_forward_ws, q, k, v, causal, d**-0.5, cfg)
    recordings = {
        "split": new_recording(q, cfg, detail=2, steps=96, tiles=4),
        "one_launch": replace(new_recording(q, cfg, detail=2, steps=96, tiles=4), mode=2),
        "no_detail": replace(new_recording(q, cfg, detail=0, steps=96, tiles=4), mode=2),
        "edges_only": replace(new_recording(q, cfg, detail=0, steps=96, tiles=4), mode=4),
    }
    plain = call()
    same = {f: all(torch.equal(a, b) for a, b in zip(plain, call(record=r), strict=True))
            for f, r in recordings.items()}  # fmt: skip
    passes: dict[str, list[float]] = {f: [] for f in FORMS}
    spans: dict[str, list[float]] = {f: [] for f in recordings}
    gates = []
    for _ in range(rounds):
        passes["plain"].append(median_ms([call]))
        gates.append(gate_ms())
        passes["plain_gated"].append(median_ms([partial(gated, call)]))
        for form, rec in recordings.items():
            passes[form].append(median_ms([partial(call, record=rec)]))
            spans[form].append(stamps_of(rec, cfg).span_ns() * 1e-6)
    ms = {f: statistics.median(p) for f, p in passes.items()}
    gate = statistics.median(gates)
    for form in ("split", "plain_gated"):  # behind the gate, timed alone
        ms[form] -= gate
    base = {f: "plain_gated" if f == "split" else "plain" for f in FORMS[1:]}
    span_ms = {f: statistics.median(s) for f, s in spans.items()}
    row = {"variant": name, "config": cfg.as_list(), "head_dim": d, "seq": n, "batch": b,
           "heads": h, "causal": causal, "dtype": "fp16", "same_output": same, "ms": ms,
           "vs_plain": {f: ms[f] / ms[base[f]] - 1 for f in FORMS[1:]},
           "span_vs_plain": {f: span_ms[f] / ms[base[f]] - 1 for f in spans},
           "span_ms": span_ms,
           "passes": passes, "span_passes": spans, "gate_ms": gate,
           "gate_passes": gates}  # fmt: skip
    print(f"{name} d={d} causal={causal} N={n}: " + ", ".join(
        f"{f} {ms[f]:.4f}" for f in FORMS), flush=True)  # fmt: skip
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be 1 or more, got {args.rounds}")
    if not torch.cuda.is_available():
        print("recording_modes.py needs a CUDA GPU", file=sys.stderr)
        return 2
    record = {**gpu_header(), "command": " ".join(sys.argv), "forms": list(FORMS), "rows": []}
    for d, name, causal, n in LAUNCHES:
        record["rows"].append(time_forms(d, name, causal, n, args.rounds))
        Path(args.out).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
