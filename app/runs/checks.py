"""Live runs that check a kernel against the simulator on the same inputs, in a queue worker.

Each builds the simulator's trace for the request (the inputs are the trace's own random ones,
`flashscope.simulator.teach.algorithms.hook.random_inputs`), runs flashscope's kernel on exactly
those inputs, and reports how far the two sit apart against the dtype's tolerance
(`flashscope.simulator.teach.exactness.state_gap`):

    forward_trace   the instrumented forward's per-tile state (m, ℓ, α, Õ, Õ/ℓ) event by event
    backward_check  the backward kernel's dQ, dK, dV (it records nothing per tile) against the
                    simulator's and against float64
    decode_check    the split kernel's partial outputs and log-sum-exps per split, and the merged
                    output, against the simulator's Flash-Decoding

torch and the kernels are imported inside the functions: this module runs in the worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

Progress = Callable[[str], None]
STATE_KEYS = ("m", "l", "alpha", "o", "o_hat")
SHOWN_KEYS = ("m", "l", "o")  # the diff panel's |Δm|, |Δℓ|, |ΔÕ|
FULL_STATE_ROWS = 256  # beyond this many query rows, events carry m, ℓ, α but not O


def finite(x: float) -> float | None:
    """x, or None where JSON has no number for it (an infinity or NaN)."""
    return float(x) if math.isfinite(x) else None


def _tensor(x: np.ndarray, dtype: str) -> Any:
    """A (1, 1, rows, d) tensor of the kernels' device and dtype holding x."""
    import torch

    from flashscope.kernels.device import device
    from flashscope.kernels.measure import TORCH_DTYPES

    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return t.to(device=device(), dtype=TORCH_DTYPES[dtype]).view(1, 1, *x.shape)


def forward_trace(config: dict[str, Any], seed: int, progress: Progress) -> dict[str, Any]:
    """The instrumented forward's trace of one head, and its gap to the simulator's per step."""
    from flashscope.kernels.instrumented import measured_trace
    from flashscope.simulator.calibrate.validation import problem_of, tiles_of
    from flashscope.simulator.teach.algorithms.hook import random_inputs
    from flashscope.simulator.teach.exactness import STATE_RTOL, state_gap

    p = problem_of({**config, "batch": 1, "heads": 1, "kv_heads": None})
    progress("running the instrumented forward")
    measured = measured_trace(p, tiles_of(config), seed)
    simulated = measured.extras["simulated"]
    v_max = float(np.abs(random_inputs(p, seed)[2]).max())
    progress("comparing with the simulator's trace, event by event")
    same_fields = len(measured) == len(simulated)
    full = p.seq_q <= FULL_STATE_ROWS
    events: list[dict[str, Any]] = []
    gaps: dict[str, list[float | None]] = {k: [] for k in STATE_KEYS}
    ratios: list[float | None] = []
    worst = dict.fromkeys(STATE_KEYS, 0.0)
    for i in range(min(len(measured), len(simulated))):
        a, b = measured.event(i), simulated.event(i)
        same_fields &= {k: v for k, v in a.items() if k != "state"} == {
            k: v for k, v in b.items() if k != "state"
        }
        step_ratio = 0.0
        for key in STATE_KEYS:
            gap, ratio = state_gap(
                key, a["state"].get(key), b["state"].get(key), p.dtype, v_max, b["state"].get("l")
            )
            gaps[key].append(finite(gap))
            worst[key] = max(worst[key], gap)
            if key in SHOWN_KEYS:
                step_ratio = max(step_ratio, ratio)
        ratios.append(finite(step_ratio))
        if not full:
            a = {**a, "state": {k: v for k, v in a["state"].items() if k not in ("o", "o_hat")}}
        events.append(a)
    beyond = [i for i, r in enumerate(ratios) if r is None or r > 1.0]
    return {
        "meta": measured.describe(),
        "events": events,
        "events_carry_o": full,
        "compare": {
            "simulator": "flashscope.simulator.teach.tracing.build_trace('fa2', same problem, "
            "tiles and seed)",
            "fields_equal": bool(same_fields),
            "max_state_diff": {k: finite(v) for k, v in worst.items()},
            "max_diff_per_event": [
                finite(max(math.inf if g is None else g for g in step))
                for step in zip(*(gaps[k] for k in STATE_KEYS), strict=True)
            ],
            "per_step": {k: gaps[k] for k in SHOWN_KEYS},
            "ratio_per_step": ratios,
            "beyond": beyond,
            "tolerance": {
                "rtol": STATE_RTOL[p.dtype],
                "rule": "|kernel − simulator| ≤ rtol·(1 + |simulator|), plus one rounding flip "
                "of a probability for Õ: ulp·ℓ·max|v| (ulp of the dtype)",
                "v_max": v_max,
            },
            "max_abs_err_vs_reference": measured.meta["max_abs_err"],
        },
    }


def backward_check(config: dict[str, Any], seed: int, progress: Progress) -> dict[str, Any]:
    """The backward kernel's gradients of one head on the simulator's inputs: against float64
    and against the simulator's FA-2 backward (the kernel records no per-tile state)."""
    import torch

    from flashscope.kernels.backward import launch_backward
    from flashscope.kernels.forward import launch_forward
    from flashscope.kernels.launch import pad_dim
    from flashscope.kernels.measure import _forward_config, kernel_configs, kernel_route
    from flashscope.kernels.reference import LOWP_FLOOR, attention_backward
    from flashscope.simulator.calibrate.validation import problem_of, tiles_of
    from flashscope.simulator.teach.algorithms.hook import random_inputs
    from flashscope.simulator.teach.exactness import UNIT_ROUNDOFF, compare
    from flashscope.simulator.teach.tracing import build_trace

    p = problem_of({**config, "batch": 1, "heads": 1, "kv_heads": None})
    progress("running the simulator's backward")
    sim = build_trace("fa2-bwd", p, tiles_of(config), seed)
    q, k, v, do = (_tensor(x, p.dtype) for x in random_inputs(p, seed, grad=True))
    main, dq_cfg = kernel_configs(config)
    route = kernel_route(config)
    progress(f"running the backward kernel ({route} route)")
    o, lse = launch_forward(q, k, v, p.causal, p.scale, _forward_config(pad_dim(p.head_dim)))
    got = launch_backward(
        q, k, v, o, lse, do, p.causal, p.scale, main, dq_mode=route, dq_config=dq_cfg
    )
    if q.is_cuda:
        torch.cuda.synchronize()
    progress("comparing with the simulator, PyTorch in the dtype and the float64 reference")
    ref = sim.extras["ref"]
    qc, kc, vc, doc = (x.cpu() for x in (q, k, v, do))
    lowp = attention_backward(qc, kc, vc, doc, p.causal, p.scale, dtype=q.dtype)
    out = []
    for i, (name, g) in enumerate(zip(("dq", "dk", "dv"), got, strict=True)):
        kernel = g[0, 0].double().cpu().numpy()
        simulated = np.asarray(sim.extras[name], dtype=np.float64)
        vs_ref = compare(name, kernel, ref[name], p.dtype)
        torch_err = compare(name, lowp[i][0, 0].double().numpy(), ref[name], p.dtype)
        bound = 2 * torch_err["max_abs_err"] + LOWP_FLOOR[q.dtype]
        out.append(
            {
                "name": {"dq": "dQ", "dk": "dK", "dv": "dV"}[name],
                "kernel_vs_float64": vs_ref["max_abs_err"],
                "simulator_vs_float64": compare(name, simulated, ref[name], p.dtype)["max_abs_err"],
                "torch_vs_float64": torch_err["max_abs_err"],
                "kernel_vs_simulator": float(np.abs(kernel - simulated).max(initial=0.0)),
                "rounding_floor": vs_ref["rounding_floor"],
                "max_abs_ref": vs_ref["max_abs_ref"],
                "bound": bound,
                "within": bool(vs_ref["max_abs_err"] <= bound),
            }
        )
    return {
        "route": route,
        "gradients": out,
        "max_abs_err": {g["name"].lower(): g["kernel_vs_float64"] for g in out},
        "unit_roundoff": UNIT_ROUNDOFF[p.dtype],
        "reference": "flashscope.simulator.teach.oracle (float64), on the simulator's inputs",
        "rule": "the kernel's error against float64 is at most twice that of PyTorch computing "
        "the same gradients in the input dtype, plus a floor (the kernel tests' rule)",
        "per_tile": "the instrumented kernel is the forward pass: the backward kernel records no "
        "per-tile state, so its final dQ, dK and dV are compared",
    }


def decode_check(
    config: dict[str, Any], seed: int, splits: int | None, progress: Progress
) -> dict[str, Any]:
    """Flash-Decoding of one K/V head (its `group` query heads packed as rows): the kernel's
    partial output and log-sum-exp of every split, and the merged output, against the
    simulator's on the same inputs and splits."""
    import torch

    from flashscope.kernels.config import KernelConfig
    from flashscope.kernels.decode import decode_with_partials
    from flashscope.simulator.calibrate.validation import problem_of, tiles_of
    from flashscope.simulator.teach.algorithms.hook import random_inputs
    from flashscope.simulator.teach.exactness import FLIP_ULP, STATE_RTOL
    from flashscope.simulator.teach.numerics_decode import decode_forward

    p = problem_of(config)  # heads = group, kv_heads = 1
    tiles = tiles_of(config)
    progress("running the simulator's Flash-Decoding")
    q, k, v = random_inputs(p, seed, q_rows=p.group * p.seq_q)
    rec = decode_forward(q, k, v, p, tiles, splits=splits, col_stride=1)
    used = rec.plan.used
    progress(f"running the split kernel and its merge ({used} splits)")
    qt = _tensor(q, p.dtype).view(1, p.group, p.seq_q, p.head_dim)
    kt, vt = _tensor(k, p.dtype), _tensor(v, p.dtype)
    cfg = KernelConfig(tiles.block_m, tiles.block_n, tiles.warps, tiles.stages)
    o, part_o, part_l = decode_with_partials(qt, kt, vt, config=cfg, splits=used)
    if qt.is_cuda:
        torch.cuda.synchronize()
    progress("comparing the splits with the simulator's")
    k_o = part_o[0].double().cpu().numpy()  # (S, R, d)
    k_lse = part_l[0].double().cpu().numpy() * math.log(2.0)  # the kernel keeps log2 units
    if k_o.shape[0] != used:
        raise RuntimeError(f"the kernel used {k_o.shape[0]} splits, the simulator {used}")
    rtol = STATE_RTOL[p.dtype]
    o_tol = rtol + FLIP_ULP[p.dtype] * float(np.abs(v).max(initial=0.0))
    per_split = []
    for s in range(used):
        lse_k, lse_s = k_lse[s], np.asarray(rec.partial_lse[s], dtype=float)
        both = np.isneginf(lse_k) & np.isneginf(lse_s)
        d_lse = np.where(both, 0.0, np.abs(lse_k - lse_s))
        lse_gap = float(np.nan_to_num(d_lse, nan=math.inf).max(initial=0))
        o_gap = float(np.abs(k_o[s] - rec.partial_o[s]).max(initial=0.0))
        per_split.append(
            {
                "split": s,
                "lse_kernel": [finite(x) for x in lse_k],
                "lse_simulated": [finite(float(x)) for x in lse_s],
                "max_lse_diff": finite(lse_gap),
                "max_o_diff": o_gap,
                "within": bool(lse_gap <= rtol and o_gap <= o_tol),
            }
        )
    final = o[0].double().cpu().numpy().reshape(-1, p.head_dim)
    return {
        "splits": used,
        "splits_requested": splits,
        "rows": int(q.shape[0]),
        "per_split": per_split,
        "max_o_diff": float(np.abs(final - rec.o).max(initial=0.0)),
        "tolerance": {"lse": rtol, "o": o_tol},
        "note": "partials are fp32 on both sides; the kernel's log-sum-exp is converted from "
        "log2 to natural units",
    }
