"""Where a launch's CTAs land on the GPU: which SM takes each CTA, in launch order, and which
SMs share a GPC (benchmarks/cta_placement.cu, built with nvcc for sm_90).

Usage (on a GPU machine with nvcc):  python benchmarks/cta_placement.py [--out benchmarks/results]

One CTA per SM (200 KB of shared memory each), 4 × SMs CTAs, three launches: each CTA's SM and
start time. SMs that ran CTAs of one cluster (2, 4, 8 or 16 CTAs, four launches each) share a
GPC; their union gives the GPCs (SMs no cluster of 4 or more reached stay in their pairs). The
result, cta-placement-<device>-<date>.json, gives the first wave's SM and GPC per CTA and, for
the Gluon forward's causal launches in bands of heads (kernels/hopper_forward.py `_tile`:
heaviest first within a band), how many GPCs the first wave puts each head's tiles on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SOURCE = Path(__file__).with_suffix(".cu")


def gpcs(clusters: dict[str, list[int] | str], sms: int) -> list[list[int]]:
    """SMs grouped by the clusters they ran together (union of every cluster's SMs)."""
    parent = list(range(sms))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for name, placed in clusters.items():
        if isinstance(placed, str):  # the launch failed: its error
            continue
        size = int(name.split("-")[0])
        for c in range(len(placed) // size):
            first, *rest = placed[c * size : (c + 1) * size]
            for sm in rest:
                parent[find(sm)] = find(first)
    groups: dict[int, list[int]] = {}
    for sm in range(sms):
        groups.setdefault(find(sm), []).append(sm)
    return sorted(groups.values(), key=min)


def head_spread(gpc_of_cta: list[int], tiles_per_head: int, band: int) -> float:
    """Mean number of GPCs over which the first wave spreads a head's tiles, the launch in bands
    of `band` heads with each band's tiles rank by rank (rank r of head h at r · band + h)."""
    wave = len(gpc_of_cta)
    per_band = tiles_per_head * band
    spans = []
    for first in range(0, wave - per_band + 1, per_band):
        for h in range(band):
            ctas = [first + r * band + h for r in range(tiles_per_head)]
            spans.append(len({gpc_of_cta[c] for c in ctas}))
    return sum(spans) / len(spans)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    from benchmarks.hostinfo import gpu_header, result_path

    header = gpu_header()
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "cta_placement"
        subprocess.run(["nvcc", "-O2", "-arch=sm_90", "-o", str(exe), str(SOURCE)], check=True)
        raw = json.loads(
            subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
        )
    sms = header["sms"]
    groups = gpcs(raw["clusters"], sms)
    gpc_of = {sm: i for i, g in enumerate(groups) for sm in g}
    first_wave = raw["place"][0]["sm"][:sms]
    gpc_of_cta = [gpc_of[sm] for sm in first_wave]
    spread = {
        f"{tiles} tiles a head": {f"band {b}": head_spread(gpc_of_cta, tiles, b) for b in (1, 8)}
        for tiles in (6, 8, 16)
    }
    doc = {
        **header,
        "gpcs": groups,
        "first_wave": {"sm": first_wave, "gpc": gpc_of_cta},
        "head_gpcs_first_wave": spread,
        "raw": raw,
    }
    path = result_path(args.out, "cta-placement", header)
    path.write_text(json.dumps(doc) + "\n")
    print(f"{len(groups)} SM groups, sizes {[len(g) for g in groups]}")
    print("first wave, GPC of each CTA:", gpc_of_cta)
    print("GPCs a head's tiles span in the first wave:", json.dumps(spread))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
