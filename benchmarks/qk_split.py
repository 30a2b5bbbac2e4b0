"""The Gluon forward's products over the head dim's own columns against the padded tile's (GPU).

    python benchmarks/qk_split.py [--out benchmarks/results] [--head-dims 80,96,192]
        [--lengths 1000,3000,5000] [--dtypes fp16,bf16] [--passes 3] [--wait-for FILE]

Head dims that are not a power of two run in the next one's tiles (`pad_dim`); with
`hopper_forward.SPLIT_QK` the S product covers only the columns the head dim fills, rounded up
to 16 (`qk_dim`: 192 = 128 + 64, 96 = 64 + 32, 80 = 64 + 16), instead of the whole tile, and
with `SPLIT_PV` P V and O's accumulator too (`pv_dim`, in two parts). Three forms: "split"
(both), "s-only" (S alone) and "padded" (neither; `--forms` chooses). Each runs the tuned
route's configuration, on the papers' protocol (batch × N ≈ 16384,
heads = 2048 // d), causal and not, fp16 and bf16, in one process: first every case once per
form, each output checked against the Triton forward's (`--wait-for`: then wait until that file
exists, so the timings do not share the GPU with a test run), then `--passes` rounds of each
form and sdpa-cudnn, each the median of do_bench over rotated input sets.
Writes one JSON with the device, date, versions and every raw figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import DTYPES, attention_fn, flops, protocol_inputs
from benchmarks.hostinfo import gpu_header, result_path
from benchmarks.odd_lengths import run, triton_forward_only
from flashscope.kernels import hopper_forward
from flashscope.kernels.hopper_forward import qk_dim, tuned

FORMS = {"split": (True, True), "s-only": (True, False), "padded": (False, False)}


def switch(form: str) -> None:
    hopper_forward.SPLIT_QK, hopper_forward.SPLIT_PV = FORMS[form]


def forward(form: str, q, k, v, causal: bool):
    switch(form)
    return attention_fn("flashscope")(q, k, v, causal)


def timed(form: str, sets: list, causal: bool) -> float:
    """A form's median time (`odd_lengths.run`), or sdpa-cudnn's."""
    if form in FORMS:
        switch(form)
        return run("flashscope", sets, causal)
    return run(form, sets, causal)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--head-dims", default="80,96,192")
    ap.add_argument("--lengths", default="1000,3000,5000")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--wait-for", type=Path, default=None)
    ap.add_argument("--forms", default=",".join(FORMS), help="of " + ", ".join(FORMS))
    args = ap.parse_args()
    head_dims = [int(x) for x in args.head_dims.split(",")]
    lengths = [int(x) for x in args.lengths.split(",")]
    header = gpu_header()
    dtypes = args.dtypes.split(",")
    forms = args.forms.split(",")
    path = result_path(args.out, "qk-split-d" + "-".join(map(str, head_dims)), header)
    cases = []
    for dname in dtypes:
        dtype = DTYPES[dname]
        for d in head_dims:
            for n in lengths:
                for causal in (False, True):
                    cases.append((dname, dtype, d, n, causal))
    rows: list[dict] = []

    def save() -> None:
        path.write_text(json.dumps({**header, "kind": "qk split", "rows": rows}) + "\n")

    for dname, dtype, d, n, causal in cases:  # once per form, checked
        q, k, v = protocol_inputs(d, n, dtype)[0]
        cfg = tuned(q, k, v, causal)
        row = {"dtype": dname, "head_dim": d, "seq": n, "batch": q.shape[0],
               "heads": q.shape[1], "causal": causal, "qk_dim": qk_dim(d),
               "ws_config": cfg.as_list() if cfg else None, "ms": {}, "passes_ms": {}}  # fmt: skip
        if cfg is not None:
            with triton_forward_only():
                ref = attention_fn("flashscope")(q, k, v, causal).float()
            for form in forms:
                o = forward(form, q, k, v, causal).float()
                row[f"max_abs_diff_{form}"] = float((o - ref).abs().max())
        rows.append(row)
        save()
        print("checked", {k: v for k, v in row.items() if k not in ("ms", "passes_ms")}, flush=True)
    if args.wait_for is not None:
        while not args.wait_for.exists():
            time.sleep(2)
    for p in range(args.passes):
        for row, (dname, dtype, d, n, causal) in zip(rows, cases, strict=True):
            if row["ws_config"] is None:
                continue
            sets = protocol_inputs(d, n, dtype)
            for form in (*forms, "sdpa-cudnn"):
                row["passes_ms"].setdefault(form, []).append(timed(form, sets, causal))
            if p == args.passes - 1:
                b, h = row["batch"], row["heads"]
                for form, passes in row["passes_ms"].items():
                    ms = sorted(passes)[len(passes) // 2]
                    row["ms"][form] = ms
                useful = flops(b, h, n, d, causal, "fwd")
                row["tflops"] = {f: useful / ms / 1e9 for f, ms in row["ms"].items()}
                for form in forms:
                    row[f"{form}_vs_cudnn"] = row["ms"]["sdpa-cudnn"] / row["ms"][form]
                ratios = " ".join(f"{f} {row[f'{f}_vs_cudnn']:.3f}" for f in forms)
                print(f"{dname} d={d} N={n} causal={causal!s:5} ÷ cudnn {ratios}", flush=True)
            save()
    switch("split")
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
