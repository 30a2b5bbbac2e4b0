"""Read the tile grid of /tiles and /backward back from its Plotly figure: which tiles are
skipped (the heatmap), done and current (fills drawn as path shapes over it)."""

from __future__ import annotations

import re

CELL = re.compile(r"M(-?[\d.]+),(-?[\d.]+)H(-?[\d.]+)V(-?[\d.]+)H-?[\d.]+Z")
DONE, CURRENT = "#60a5fa", "#f59e0b"


def _cells(path: str) -> set[tuple[int, int]]:
    out = set()
    for x0, y0, x1, y1 in CELL.findall(path):
        out.add((round((float(y0) + float(y1)) / 2), round((float(x0) + float(x1)) / 2)))
    return out


def grid_status(page, div: str = "grid") -> dict:
    """{"z": rows of 0 skipped / 1 not yet / 2 done / 3 current, "strokes": partial count}."""
    fig = page.evaluate(
        f"() => {{ const d = document.getElementById('{div}');"
        " return {z: d.data[0].z, shapes: d.layout.shapes}; }"
    )
    z = [list(row) for row in fig["z"]]
    strokes = 0
    for shape in fig["shapes"]:
        if shape.get("type") != "path":
            continue
        if shape.get("fillcolor") in (DONE, CURRENT):
            code = 2 if shape["fillcolor"] == DONE else 3
            for i, j in _cells(shape["path"]):
                z[i][j] = code
        else:
            strokes = shape["path"].count("M")
    return {"z": z, "strokes": strokes}
