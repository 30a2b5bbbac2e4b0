"""Write benchmarks/sweeps/validation.json: the configurations `flashscope validate` measures.

    python benchmarks/make_validation_sweep.py [--routes-from DATASET --out SWEEP]
    python benchmarks/make_validation_sweep.py --capped --out benchmarks/sweeps/register-cap.json

Protocol (the FlashAttention papers'): batch × N = 16384 tokens, heads × d = 2048, fp16,
N ∈ {512 … 16384}, d ∈ {64, 128}, causal and not, forward and backward; five tile
configurations each: the three flashscope.kernels.config.CANDIDATES ("candidate": they fit Hopper's
227 KiB of shared memory; the backward pairs the i-th dK/dV candidate with the i-th dQ
candidate) and two of SPREAD below ("spread"). Calibration may be
fitted on N ∈ {512, 2048, 8192} ("fit"); N ∈ {1024, 4096, 16384} are held out. Nsight Compute
reads the bytes of every entry (one pass of a few metrics takes about a second per kernel).
The backward's route is left to the kernels (recorded when measured); with --routes-from, each
backward entry is pinned to the route that an earlier dataset's row of the same id ran, so a
re-measurement after the kernels' route table changed still measures the same launches.
With --capped it writes the forward tiles that cap the registers per thread instead (CAPPED,
`maxnreg`: one more CTA per SM than uncapped), over the same problems, to check the engine's
register cap against the kernels.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashscope.kernels.config import CANDIDATES, KernelConfig

SEQS = (512, 1024, 2048, 4096, 8192, 16384)
FIT = (512, 2048, 8192)
C = KernelConfig
# Two more tile configurations per problem, chosen to differ from the candidates (fewer stages,
# narrow or small tiles, more warps than the tile needs): the candidates are all good and often
# finish within run-to-run noise of each other, so ranking them alone mostly ranks the noise.
# (forward) and (dK/dV kernel, dQ kernel) pairs per head_dim; each was timed on an H200 in
# benchmarks/tune.py's rounds.
SPREAD = {
    "fwd": {64: [C(64, 32, 4, 2), C(128, 64, 4, 2)], 128: [C(64, 32, 4, 3), C(64, 128, 4, 2)]},
    "bwd": {
        64: [(C(64, 128, 8, 2), C(64, 32, 4, 3)), (C(32, 32, 4, 2), C(64, 32, 4, 2))],
        128: [(C(32, 128, 8, 2), C(128, 32, 8, 3)), (C(64, 64, 8, 2), C(64, 32, 4, 3))],
    },
}


# Forward tiles with a register cap (KernelConfig.maxnreg) and the CTAs per SM it makes room for
# (uncapped: one each). The first is the tuned forward at d = 64 from N = 8192 on both GPUs.
CAPPED = {64: C(128, 128, 8, 2, False, 128), 128: C(128, 64, 8, 2, False, 128)}


def tile_choices(mode: str, d: int) -> list[tuple[str, KernelConfig, KernelConfig | None]]:
    """(tile set, main kernel, dQ kernel) of every tile configuration of one problem."""
    if mode == "fwd":
        cands = [(m, None) for m in CANDIDATES["fwd"][d]]
        spread = [(m, None) for m in SPREAD["fwd"][d]]
    else:
        cands = list(zip(CANDIDATES["bwd"][d], CANDIDATES["bwd-dq"][d], strict=True))
        spread = SPREAD["bwd"][d]
    return [("candidate", m, q) for m, q in cands] + [("spread", m, q) for m, q in spread]


def entries() -> list[dict]:
    out = []
    for algo, mode in (("fa2", "fwd"), ("fa2-bwd", "bwd")):
        for d in (64, 128):
            for causal in (False, True):
                for n in SEQS:
                    for t, (tiles, main, dq) in enumerate(tile_choices(mode, d)):
                        config = {
                            "algo": algo,
                            "impl": "flashscope",
                            "batch": 16384 // n,
                            "heads": 2048 // d,
                            "seq": n,
                            "head_dim": d,
                            "causal": causal,
                            "dtype": "fp16",
                            "block_m": main.block_m,
                            "block_n": main.block_n,
                            "stages": main.num_stages,
                            "warps": main.num_warps,
                        }
                        if dq is not None:
                            config.update(
                                dq_block_m=dq.block_m,
                                dq_block_n=dq.block_n,
                                dq_stages=dq.num_stages,
                                dq_warps=dq.num_warps,
                            )
                        kind = "causal" if causal else "full"
                        out.append(
                            {
                                "id": f"{mode}-d{d}-{kind}-n{n}-t{t}",
                                "subset": "fit" if n in FIT else "holdout",
                                "ncu": True,
                                "tiles": tiles,
                                "config": config,
                            }
                        )
    return out


def capped_entries() -> list[dict]:
    """The forward of every problem of the sweep at its head_dim's CAPPED tiles."""
    out = []
    for e in entries():
        c = e["config"]
        if c["algo"] != "fa2" or not e["id"].endswith("-t0"):
            continue
        cap = CAPPED[c["head_dim"]]
        tiles = {"block_m": cap.block_m, "block_n": cap.block_n, "stages": cap.num_stages,
                 "warps": cap.num_warps, "maxnreg": cap.maxnreg}  # fmt: skip
        out.append({**e, "id": e["id"][: -len("-t0")] + "-cap", "tiles": "spread",
                    "config": {**c, **tiles}})  # fmt: skip
    return out


def pin_routes(out: list[dict], dataset: dict) -> int:
    """Set each backward entry's route to the one its row in `dataset` ran; the count pinned."""
    ran = {r["id"]: r["config"].get("route") for r in dataset["rows"]}
    pinned = 0
    for e in out:
        route = ran.get(e["id"]) if e["config"]["algo"] == "fa2-bwd" else None
        if route:
            e["config"]["route"] = route
            pinned += 1
    return pinned


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes-from", type=Path, default=None, help="dataset whose routes to pin")
    ap.add_argument("--capped", action="store_true", help="the register-capped forward tiles")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "sweeps" / "validation.json")
    args = ap.parse_args()
    doc = {
        "format": 1,
        "description": (
            "flashscope's forward and backward kernels at fixed tile configurations: "
            "batch·N = 16384, heads·d = 2048, fp16; three candidate and two spread tile "
            "configurations per problem; fit on N ∈ {512, 2048, 8192}, hold out "
            "N ∈ {1024, 4096, 16384}; Nsight Compute on every entry"
        ),
        "entries": entries(),
    }
    if args.capped:
        doc["description"] = (
            "flashscope's forward with a register cap per thread (maxnreg) that fits one more "
            "CTA per SM: the validation sweep's forward problems at CAPPED tiles"
        )
        doc["entries"] = capped_entries()
    if args.routes_from is not None:
        pinned = pin_routes(doc["entries"], json.loads(args.routes_from.read_text()))
        doc["description"] += f"; backward routes pinned as in {args.routes_from.name}"
        print(f"{pinned} backward entries pinned to the routes of {args.routes_from}")
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(doc['entries'])} entries → {args.out}")


if __name__ == "__main__":
    main()
