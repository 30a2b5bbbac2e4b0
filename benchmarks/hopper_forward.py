"""The warp-specialized Gluon forward (kernels/hopper_forward.py) checked and timed on a Hopper GPU.

Usage (on a GPU machine):
    python benchmarks/hopper_forward.py check [--dims 64,128]
    python benchmarks/hopper_forward.py time --out FILE [--dtypes fp16,bf16] [--lens 2048,4096]
                                             [--dims 64,128] [--masks full,causal]
                                             [--configs JSON] [--whole-too] [--turns-too]
                                             [--merged] [--merged-too]
    python benchmarks/hopper_forward.py choose FILE [--write]      (anywhere; reads a `time` file)

`check` runs each candidate configuration on awkward and protocol shapes (GQA, N_q ≠ N_k, causal,
fp16 and bf16, outputs poisoned first) against flashscope.kernels.reference in float64, within twice
the error of the same computation by PyTorch in the input dtype plus 2e-3. `time` times, in one
process with the papers' protocol (batch × N = 16384, heads = 2048 / d), every candidate beside
sdpa-cudnn, sdpa-flash and flashscope's Triton forward, and writes the rows as JSON with the device,
date and versions; --whole-too also times each causal candidate computing the diagonal's last step
whole (`HALF_STEPS` off; rows "ws[…]/whole"), --turns-too each persistent causal one sharing its
tiles in turn rather than by the host's schedule (`SCHEDULE_TILES` off; rows "ws[…]/turns");
`choose` leaves those rows out. --merged turns every candidate's `merged` on (a causal tile's
steps in one loop) for `check` and `time`; --merged-too times each causal candidate both ways,
as two candidates. `choose` picks, per (head_dim, causal, length bucket), the faster of
the best candidate and the Triton forward (times summed over the file's dtypes) and, with --write,
stores the choice in kernels/tuned.json ("fwd-route/…" → "ws" or "triton", "ws/fwd/…" → the
configuration) for the file's GPU. A length that fills no 64-row tile (`--lens 1000,3000,5000`)
gives its bucket's "ws-edge" entry instead (the best candidate where it beats the Triton
forward; the bucket's route stays as timed at whole lengths).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import attention_fn, flops, protocol_inputs
from benchmarks.hostinfo import gpu_header
from flashscope.kernels import hopper_forward
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.hopper_forward import WsConfig, launch_forward_ws, supports
from flashscope.kernels.reference import attention_forward
from flashscope.kernels.timing import median_ms

W = WsConfig
PP = partial(WsConfig, pipeline=True, pingpong=True)  # ping-pong (pipelined)
PS = partial(WsConfig, persistent=True)
CANDIDATES = {
    64: [W(2, 256, 2, False), W(1, 128, 2, True, 2), W(3, 128, 2, False), PP(3, 128, 2),
         PP(3, 128, 3), PS(2, 256, 2, False), PS(1, 128, 2, True, 2), PS(3, 128, 2, False),
         PS(2, 128, 2, True, pingpong=True), PS(3, 128, 2, True, pingpong=True),
         PS(3, 128, 3, True, pingpong=True), PS(2, 256, 2, False, band=8),
         PS(2, 256, 2, False, band=16), PS(2, 256, 2, False, band=32),
         PS(3, 128, 2, False, band=8)],
    128: [W(2, 128, 2, True), W(2, 64, 3, True), PP(2, 128, 2), PS(2, 128, 2, True),
          PS(2, 128, 2, True, pingpong=True), PS(2, 64, 3, True),
          PS(2, 128, 2, True, pingpong=True, band=8)],
    # at 256 columns two K/V stages of 64 keys fit shared memory beside two warpgroups' Q where
    # O leaves through Q's stage (one tile a program), beside one warpgroup's Q and O otherwise;
    # causal, bands of 8 or 16 heads keep fewer heads' K and V in the L2 at once
    256: [W(2, 64, 2, True), W(2, 64, 2, False), PP(2, 64, 2), W(1, 64, 2, True),
          PS(1, 64, 2, True), PS(1, 64, 2, False), W(2, 64, 2, True, band=8),
          W(2, 64, 2, True, band=16), PP(2, 64, 2, band=8)],
}  # fmt: skip
MARGIN = 0.02  # `choose` routes to the Gluon kernel only where it is this much faster
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def check(dims: list[int]) -> int:
    torch.manual_seed(0)
    shapes = [  # (B, H, H_kv, N_q, N_k, causal)
        (2, 4, 4, 256, 256, False), (2, 4, 4, 384, 384, True), (1, 8, 2, 384, 768, True),
        (1, 8, 2, 768, 384, True), (3, 2, 1, 1152, 1152, False), (1, 4, 4, 2048, 2048, True),
        (2, 3, 3, 192 * 4, 256 * 3, False), (2, 2, 1, 64, 256, False), (1, 4, 2, 320, 640, True),
        (2, 2, 2, 640, 256, True), (1, 2, 2, 4096, 4096, True),
    ]  # fmt: skip
    failures = 0
    for d in dims:
        for cfg in CANDIDATES[d]:
            for dtype in DTYPES.values():
                for b, h, hk, n_q, n_k, causal in shapes:
                    q = torch.randn(b, h, n_q, d, device="cuda", dtype=dtype)
                    k = torch.randn(b, hk, n_k, d, device="cuda", dtype=dtype)
                    v = torch.randn(b, hk, n_k, d, device="cuda", dtype=dtype)
                    why = supports(q, k, v, cfg)
                    if why is not None:
                        continue
                    scale = d**-0.5
                    os.environ["FLASHSCOPE_POISON"] = "1"
                    o, lse = launch_forward_ws(q, k, v, causal, scale, cfg)
                    ref_o, ref_lse = attention_forward(q, k, v, causal, scale)  # float64
                    mine, _ = attention_forward(q, k, v, causal, scale, dtype=dtype)
                    torch_err = (mine.double() - ref_o).abs().max().item()
                    err = (o.double() - ref_o).abs().max().item()
                    seen = ref_lse > float("-inf")
                    lse_err = (lse - ref_lse)[seen].abs().max().item()
                    ok = err <= 2 * torch_err + 2e-3 and lse_err <= 1e-3 and not o.isnan().any()
                    ok = ok and bool((lse[~seen] == float("-inf")).all())
                    failures += not ok
                    print(
                        f"{'ok  ' if ok else 'FAIL'} d={d} {cfg.as_list()} {dtype} "
                        f"{(b, h, hk, n_q, n_k, causal)} err={err:.2e} torch={torch_err:.2e} "
                        f"lse={lse_err:.2e}",
                        flush=True,
                    )
    print("failures:", failures)
    return 1 if failures else 0


def time_all(
    out: Path,
    dtypes: list[str],
    lens: list[int],
    dims: list[int],
    masks: list[bool],
    whole_too: bool = False,
    turns_too: bool = False,
    merged_too: bool = False,
) -> None:
    """`time` (the module's docstring): every candidate of `dims` and the peers, per dtype,
    head_dim, mask and length, into `out`."""
    rows: list[dict[str, object]] = []
    header = {
        **gpu_header(),
        "protocol": "batch × N = 16384, heads = 2048 / d; median of do_bench, L2 flushed",
    }
    for name in dtypes:
        dtype = DTYPES[name]
        for d in dims:
            for causal in masks:
                cfgs = CANDIDATES[d]
                if causal and merged_too:
                    cfgs = [c for cfg in cfgs for c in (cfg, replace(cfg, merged=not cfg.merged))]
                for n in lens:
                    sets = protocol_inputs(d, n, dtype)
                    b, h = sets[0][0].shape[:2]
                    scale = d**-0.5
                    found: dict[str, float] = {}
                    for impl in ("sdpa-cudnn", "sdpa-flash"):
                        fn = attention_fn(impl)
                        calls = [lambda s=s, fn=fn, c=causal: fn(*s, c) for s in sets]
                        found[impl] = median_ms(calls)
                    triton_fwd = partial(launch_forward, causal=causal, scale=scale, use_ws=False)
                    calls = [partial(triton_fwd, *s) for s in sets]
                    found["triton"] = median_ms(calls)
                    for cfg in cfgs:
                        if supports(*sets[0], cfg) is not None:
                            continue
                        run = partial(launch_forward_ws, causal=causal, scale=scale, cfg=cfg)
                        calls = [partial(run, *s) for s in sets]
                        variants = [("", True, True)]  # (row suffix, HALF_STEPS, SCHEDULE_TILES)
                        if causal and whole_too:
                            variants.append(("/whole", False, True))
                        if causal and cfg.persistent and turns_too:
                            variants.append(("/turns", True, False))
                        for suffix, half, scheduled in variants:
                            hopper_forward.HALF_STEPS = half
                            hopper_forward.SCHEDULE_TILES = scheduled
                            try:
                                found["ws" + json.dumps(cfg.as_list()) + suffix] = median_ms(calls)
                            except Exception as exc:  # recorded; the sweep goes on
                                print(f"{cfg}: {type(exc).__name__}: {exc}", flush=True)
                        hopper_forward.HALF_STEPS = hopper_forward.SCHEDULE_TILES = True
                    f = flops(b, h, n, d, causal, "fwd")
                    cudnn = found["sdpa-cudnn"]
                    flash = found["sdpa-flash"]
                    best = min((ms, k) for k, ms in found.items() if k.startswith("ws"))
                    print(
                        f"{name} d={d} causal={causal} N={n}: cudnn {cudnn:.3f} flash "
                        f"{flash:.3f} triton {found['triton']:.3f} ({cudnn / found['triton']:.3f}"
                        f"×cudnn) best ws {best[1]} {best[0]:.3f} ({cudnn / best[0]:.3f}×cudnn, "
                        f"{flash / best[0]:.3f}×flash)",
                        flush=True,
                    )
                    for impl, ms in found.items():
                        rows.append(dict(impl=impl, dtype=name, head_dim=d, seq_len=n, batch=b,
                                         heads=h, causal=causal, ms=ms,
                                         tflops=f / ms / 1e9))  # fmt: skip
                    # written after every length, so a sweep stopped by a time limit keeps
                    # what it measured
                    out.write_text(json.dumps({**header, "rows": rows}, indent=1) + "\n")


def choose(path: Path, write: bool) -> dict[str, object]:
    """Per (head_dim, causal, N): the route and, for "ws", the configuration (see the module's
    docstring); printed, and merged into kernels/tuned.json with `write`."""
    from flashscope.kernels.config import fills_no_tile, merge_tuned, table_key
    from flashscope.simulator.timing.kernelplan import tuned_keys

    data = json.loads(path.read_text())
    totals: dict[tuple, dict[str, float]] = {}
    for r in data["rows"]:
        if r["impl"].startswith("sdpa") or r["impl"].endswith(("/whole", "/turns")):
            continue
        cell = totals.setdefault((r["head_dim"], r["causal"], r["seq_len"]), {})
        cell[r["impl"]] = cell.get(r["impl"], 0.0) + r["ms"]
    chosen: dict[str, object] = {}
    for (d, causal, n), times in sorted(totals.items()):
        best_ms, best = min((ms, impl) for impl, ms in times.items() if impl.startswith("ws"))
        fast = best_ms < times["triton"] * (1 - MARGIN)
        if fills_no_tile(n, n):  # an edge length: the bucket's "ws-edge" entry, its route kept
            bucket = tuned_keys(table_key("fwd", 16, d, causal), n)[0]
            if fast:
                chosen["ws-edge/" + bucket] = json.loads(best[2:])
            where = "ws-edge " + bucket if fast else "no edge entry"
            print(f"d={d} causal={causal} N={n}: triton {times['triton']:.3f} ms, {best} "
                  f"{best_ms:.3f} ms → {where}")  # fmt: skip
            continue
        route_key = table_key("fwd-route", 16, d, causal) + f"/n{n}"
        chosen[route_key] = "ws" if fast else "triton"
        # the configuration where routed here; else none (an older choice is removed)
        ws_key = "ws/" + table_key("fwd", 16, d, causal) + f"/n{n}"
        chosen[ws_key] = json.loads(best[2:]) if fast else None
        print(f"d={d} causal={causal} N={n}: triton {times['triton']:.3f} ms, {best} "
              f"{best_ms:.3f} ms → {chosen[route_key]}")  # fmt: skip
    if write:
        merge_tuned(data["device"], chosen)
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["check", "time", "choose"])
    parser.add_argument("file", type=Path, nargs="?", help="choose: a `time` results file")
    parser.add_argument("--write", action="store_true", help="choose: update kernels/tuned.json")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dtypes", default="fp16")
    parser.add_argument("--lens", default="1024,2048,4096,8192,16384")
    parser.add_argument("--dims", default="64,128", help="head dims whose candidates run")
    parser.add_argument("--masks", default="full,causal", help="full, causal or both")
    parser.add_argument("--configs", help="JSON list of configuration lists: the candidates")
    parser.add_argument(
        "--whole-too",
        action="store_true",
        help="time: causal candidates also with the last diagonal step whole",
    )
    parser.add_argument(
        "--turns-too",
        action="store_true",
        help="time: persistent causal candidates also sharing their tiles in turn",
    )
    parser.add_argument(
        "--merged",
        action="store_true",
        help="check and time every candidate with `merged` on (causal steps in one loop)",
    )
    parser.add_argument(
        "--merged-too",
        action="store_true",
        help="time: each causal candidate also with `merged` flipped, as a candidate",
    )
    args = parser.parse_args()
    dims = [int(x) for x in args.dims.split(",")]
    if args.configs:
        for d in dims:
            CANDIDATES[d] = [WsConfig.from_list(c) for c in json.loads(args.configs)]
    if args.merged:
        for d in CANDIDATES:
            CANDIDATES[d] = [replace(cfg, merged=True) for cfg in CANDIDATES[d]]
    if args.what == "check":
        return check(dims)
    if args.what == "choose":
        if args.file is None:
            parser.error("choose needs a results file")
        choose(args.file, args.write)
        return 0
    if args.out is None:
        parser.error("time needs --out")
    lens = [int(x) for x in args.lens.split(",")]
    kinds = {"full": False, "causal": True}
    if not set(args.masks.split(",")) <= kinds.keys():
        parser.error(f"argument --masks: full, causal or both, got {args.masks!r}")
    masks = [kinds[m] for m in args.masks.split(",")]
    time_all(
        args.out,
        args.dtypes.split(","),
        lens,
        dims,
        masks,
        args.whole_too,
        args.turns_too,
        args.merged_too,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
