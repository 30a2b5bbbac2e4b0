"""Which compiled binary each configuration of a sweep runs, with its spills (GPU only).

For every entry: run it once (kernels/measure.py), then list the dK/dV, dQ and forward kernels
Triton compiled for it: registers, spill stores/loads per thread as ptxas reports them
(`n_spills`), and a hash of the binary, so entries that share a binary can be told apart from
entries whose code differs. Written for the spill table's checks (docs/timing-model.md, "Register
spills").

    python benchmarks/spill_probe.py benchmarks/sweeps/spills-causal.json --out probe.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def compiled_kernels(fn) -> dict:
    out = {}
    for cache in getattr(fn, "device_caches", {}).values():
        kernels = cache[0] if isinstance(cache, tuple) else cache
        for key, k in kernels.items():
            binary = getattr(k, "kernel", b"") or b""
            out[str(key)] = {
                "regs": getattr(k, "n_regs", None),
                "spills": getattr(k, "n_spills", None),
                "binary": hashlib.sha1(binary).hexdigest()[:12] if binary else None,
            }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from flashscope.kernels import backward, forward
    from flashscope.kernels.measure import Case
    from flashscope.simulator.calibrate.validation import read_sweep

    fns = {"dkdv": backward._attn_bwd_dkdv, "dq": backward._attn_bwd_dq, "fwd": forward._attn_fwd}
    seen: dict[str, dict] = {name: {} for name in fns}
    rows = []
    for entry in read_sweep(args.sweep):
        Case.build(entry.config).run()
        new = {}
        for name, fn in fns.items():
            now = compiled_kernels(fn)
            added = {k: v for k, v in now.items() if k not in seen[name]}
            seen[name] = now
            if added:
                new[name] = list(added.values())
        rows.append({"id": entry.id, "new_binaries": new})
        print(entry.id, json.dumps(new))
    args.out.write_text(json.dumps({"rows": rows, "all": seen}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
