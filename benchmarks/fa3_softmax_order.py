"""Where the compiled Hopper forward waits for a warpgroup's own P·V: the evidence behind the FA-3
model's `Fa3Config.softmax_under_pv` (simulator/timing/fa3_config.py, UNDER_PV). No GPU needed.

    .venv/bin/python benchmarks/fa3_softmax_order.py [--record] [JSON list of [config, head_dim]]

Compiles kernels/hopper_forward.py for sm_90a on the CPU (`compile_sm90`, causal and not; with
`--record` the variant that stamps its timeline) and reads the SASS of every pipelined loop (a
back edge whose body waits for S with WARPGROUP.DEPBAR.LE gsb0, 0x1 before waiting for every
product with gsb0, 0x0). Prints, per loop, the exp2 (MUFU.EX2) issued between the two waits out
of the loop's, and the share of the softmax's FP32, SFU and shuffle instructions issued there:
the work that runs under the warpgroup's own P_{j-1} V_{j-1}. The source issues the whole
softmax between them (`_pipelined_step`); ptxas 12.8 (Triton 3.6.0 and 3.7.1) hoists the second
wait above it in the timed kernel. To read the measured rows' compiler, put Triton 3.6.0 first
(`pip install --no-deps --target /tmp/t36 triton==3.6.0`, then PYTHONPATH=/tmp/t36).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TRITON_INTERPRET"] = "0"  # Gluon compiles, never interprets

SOFTMAX = ("FADD", "FMUL", "FFMA", "FMNMX", "FSEL", "FSETP", "F2FP", "MUFU", "SHFL")
# the configurations of the measured rows' families (d = 256: 64-key blocks, one or two groups)
DEFAULT = [
    ([2, 128, 2, 1, 1], 128),
    ([2, 128, 2, 1, 1, 1], 128),
    ([2, 128, 2, 1, 1, 1], 64),
    ([3, 128, 2, 1, 1], 64),
    ([3, 128, 2, 1, 1, 1], 64),
    ([1, 128, 2, 1, 2], 64),
    ([2, 64, 3, 1, 1], 128),
    ([1, 64, 2, 1, 1], 256),
]
_LINE = re.compile(r"/\*([0-9a-f]{4,6})\*/\s+(.*?)\s*;")


def sass(cubin: bytes) -> list[tuple[int, str]]:
    """(address, instruction) of a cubin, as cuobjdump disassembles it."""
    from flashscope.kernels.hopper_forward import cuobjdump

    text = cuobjdump(cubin, "-sass")
    return [
        (int(m.group(1), 16), m.group(2)) for line in text.splitlines() if (m := _LINE.search(line))
    ]


def _op(ins: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0].split(".")[0]


def pipelined_loops(code: list[tuple[int, str]]) -> list[dict[str, float]]:
    """Each pipelined loop body's exp2 and softmax instructions before the wait for P·V."""
    at = {a: i for i, (a, _) in enumerate(code)}
    out = []
    for i, (a, ins) in enumerate(code):
        m = re.search(r"BRA (0x[0-9a-f]+)", ins)
        if m is None or int(m.group(1), 16) >= a or int(m.group(1), 16) not in at:
            continue
        body = [x for _, x in code[at[int(m.group(1), 16)] : i + 1]]
        if not 200 < len(body) < 1500:  # the step loops (not busy-waits, not the tile loop)
            continue
        s_wait = [j for j, x in enumerate(body) if "DEPBAR.LE gsb0, 0x1" in x]
        all_wait = [j for j, x in enumerate(body) if "DEPBAR.LE gsb0, 0x0" in x]
        if not s_wait or not all_wait or s_wait[0] > all_wait[0]:
            continue
        lo, hi = s_wait[0], all_wait[0]
        exps = [j for j, x in enumerate(body) if "MUFU.EX2" in x]
        before = sum(_op(x) in SOFTMAX for x in body[lo:hi])
        after = sum(_op(x) in SOFTMAX for x in body[hi:])
        out.append(
            {
                "exp2_before": sum(lo <= j < hi for j in exps),
                "exp2": len(exps),
                "share_before": before / max(1, before + after),
            }
        )
    return out


def main() -> int:
    from flashscope.kernels.hopper_forward import WsConfig, compile_sm90

    record = "--record" in sys.argv
    given = [a for a in sys.argv[1:] if a != "--record"]
    wanted = json.loads(given[0]) if given else DEFAULT
    for config, head_dim in wanted:
        for causal in (False, True):
            k = compile_sm90(WsConfig.from_list(config), head_dim, causal, record=3 * record)
            loops = pipelined_loops(sass(k.asm["cubin"]))
            text = ", ".join(
                f"{x['exp2_before']}/{x['exp2']} exp2, {x['share_before']:.0%}" for x in loops
            )
            print(f"{config} d={head_dim} causal={causal}: {text or 'no pipelined loop'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
