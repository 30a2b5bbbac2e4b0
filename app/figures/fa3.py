"""The FA-3 model's response (POST /api/simulate with algo fa3) and its explanation figure: per
key block, the exponentials' time beside the two products' on this GPU."""

from __future__ import annotations

from typing import Any

from flashscope.simulator.timing.fa3 import Fa3Result


def explanation_figure(e: dict[str, Any]) -> dict[str, Any]:
    """Stacked bars (Plotly): one warpgroup's block alone (S, P·V; exp2, other softmax work),
    then every unit's work for all the SM's warpgroups (the busiest is the floor)."""
    alone = [
        {
            "type": "bar",
            "name": name,
            "x": ["alone:<br>products", "alone:<br>softmax"],  # one warpgroup's block
            "y": ys,
            "hovertemplate": f"one warpgroup alone, {name}: %{{y:.0f}} ns<extra></extra>",
        }
        for name, ys in (
            ("S = QKᵀ", [e["qk_ns"], 0]),
            ("P·V", [e["pv_ns"], 0]),
            ("exp2 (SFU)", [0, e["exp_ns"]]),
            ("other softmax (FP32)", [0, e["softmax_other_ns"]]),
        )
    ]
    units = e["sm_unit_ns"]
    sm = {
        "type": "bar",
        "name": f"all {e['warpgroups_per_sm']} warpgroups of the SM",
        "x": [f"SM:<br>{u.split()[0]}" for u in units],  # short: five labels side by side
        "customdata": list(units),
        "hovertemplate": "%{customdata}: %{y:.0f} ns<extra></extra>",
        "y": list(units.values()),
    }
    return {
        "data": [*alone, sm],
        "layout": {
            "barmode": "stack",
            "title": {"text": f"Per key block at head_dim {e['head_dim']}: {e['bound']} bound"},
            "xaxis": {"tickangle": 0},
            "yaxis": {"title": {"text": "ns per key block"}},
        },
    }


def response(result: Fa3Result) -> dict[str, Any]:
    """The JSON body: the model's figures, the timeline and the explanation figure."""
    out = result.as_dict()
    out["figures"] = {"explanation": explanation_figure(result.explanation)}
    return out
