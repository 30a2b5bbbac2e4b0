"""Write simulator/data/compiled-kernels.json: the registers and spill traffic of flashscope's
compiled kernels.

Reads Nsight Compute's register and local-memory counts from validation datasets (the fit subset
only, so the held-out rows stay a prediction), keeps per kernel and tile configuration its registers
per thread (`flashscope.simulator.timing.compiled.derive_registers`) and the spill bytes per thread
per loop step and per CTA (`flashscope.simulator.timing.compiled.derive`), and reports how well the
table predicts the held-out rows. CPU only.

    python benchmarks/compiled_kernels.py app/data/validation-h100-2026-11-21.json \
        app/data/validation-h200-2026-11-21.json \
        benchmarks/results/register-cap-h200-2026-11-21.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flashscope.simulator.calibrate.validation import compiled_observations
from flashscope.simulator.core import hardware
from flashscope.simulator.timing import compiled


def observations(doc: dict, subset: str) -> list[compiled.Observation]:
    rows = [r for r in doc["rows"] if r.get("subset") == subset]
    return compiled_observations(rows, hardware.from_name(doc["gpu"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=compiled.TABLE_PATH)
    args = ap.parse_args(argv)
    fit_obs, held_obs, sources, triton = [], [], [], set()
    for path in args.datasets:
        if not path.exists():
            print(f"error: {path} does not exist", file=sys.stderr)
            return 2
        doc = json.loads(path.read_text())
        fit_obs += observations(doc, "fit")
        held_obs += observations(doc, "holdout")
        sources.append({"file": str(path.relative_to(ROOT) if path.is_absolute() else path),
                        "device": doc.get("device"), "triton": doc.get("triton")})  # fmt: skip
        triton.add(doc.get("triton"))
    kernels = compiled.derive(fit_obs)
    writeback = compiled.derive_writeback(fit_obs)
    try:
        registers = compiled.derive_registers(fit_obs)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    doc = {
        "format": compiled.FORMAT,
        "what": "flashscope's compiled kernels: registers per thread (Nsight Compute's "
        f"{compiled.REGISTERS}) of every kernel measured, and local-memory (register spill) "
        "bytes per thread of those that spill: per loop step and per CTA, loads and stores "
        f"({compiled.LOCAL_LOAD} and {compiled.LOCAL_STORE})",
        "method": "registers: the one count of each kernel's launches; spills: least squares of "
        "each kernel's measured bytes against threads × loop steps and threads × CTAs; "
        "writeback (per GPU): the same fit of a spilling kernel's DRAM writes "
        f"({compiled.DRAM_WRITE}) beyond the mean of the same problem's launches of that "
        "kernel without local stores; all over the datasets' fit-subset rows",
        "compiler": {"triton": sorted(t for t in triton if t), "arch": "sm_90"},
        "sources": sources,
        "registers": registers,
        "kernels": kernels,
        "writeback": writeback,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(registers)} kernels' registers, {len(kernels)} with local traffic, from "
          f"{len(fit_obs)} measured launches")  # fmt: skip
    unseen = sorted({o.key for o in held_obs if o.key not in registers})
    wrong = sorted({o.key for o in held_obs if o.key in registers and registers[o.key] != o.regs})
    print(f"held-out kernels without a register count: {len(unseen)}; with another count: "
          f"{len(wrong)}")  # fmt: skip
    table = {k: compiled.LocalTraffic.from_entry(e) for k, e in kernels.items()}
    worst = 0.0
    for o in held_obs:
        t = table.get(o.key)
        if t is None:
            if o.load or o.store:
                print(f"  held out, no entry: {o.key} ({o.load / 1e6:.0f} MB loaded)")
            continue
        load, store = t.totals(o.steps, o.ctas, o.threads)
        for got, want in ((load, o.load), (store, o.store)):
            if want > 0:
                worst = max(worst, abs(got / want - 1))
    print(f"held-out launches: {len(held_obs)}; worst miss of the table's local bytes "
          f"{100 * worst:.1f}%")  # fmt: skip
    for o in held_obs:  # the write-back against what the held-out rows measured
        entry = writeback.get(o.gpu, {}).get(o.key)
        if o.writeback is None or entry is None:
            continue
        got = compiled.per_thread(entry).total(o.steps, o.ctas, o.threads)
        print(f"  held out, write-back {o.gpu} {o.key}: {got / 2**20:5.1f} MiB predicted, "
              f"{o.writeback / 2**20:5.1f} MiB measured")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
