"""The package layout's rules: which part may import which, and no two modules in a cycle.

Read from the source with `ast` (imports inside functions count too), so a rule breaks here
before it breaks an installation. The rules are DESIGN's:

    simulator.core        ← everything else in the simulator
    simulator.teach       imports core only
    simulator.timing      imports core only
    simulator.calibrate   imports core and timing
    simulator             imports neither kernels nor app
    kernels               imports the simulator, never app
    app.figures           imports the simulator only (pure figure builders)
    app.routes            imported by app.main alone; app.cli by nothing in app
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("app", "simulator", "kernels")


def _modules() -> dict[str, Path]:
    """flashscope.* dotted name → source file, for every module of the three packages."""
    out = {}
    for top in TOPS:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(["flashscope", *parts])] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The flashscope modules `name` imports (a package's __init__ counts as the package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{name}: relative import (use flashscope.* names)"
            base = node.module or ""
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _part(name: str) -> str:
    """The layer a module belongs to: e.g. simulator.timing, app.routes, kernels."""
    parts = name.split(".")[1:]
    return ".".join(parts[:2]) if parts[0] in ("simulator", "app") and len(parts) > 2 else parts[0]


ALLOWED = {
    "simulator.core": {"simulator.core"},
    "simulator.teach": {"simulator.core", "simulator.teach"},
    "simulator.timing": {"simulator.core", "simulator.timing"},
    "simulator.calibrate": {"simulator.core", "simulator.timing", "simulator.calibrate"},
    "app.figures": {"app.figures", "simulator.core", "simulator.teach", "simulator.timing"},
}


def test_the_layout_has_the_subpackages_it_promises():
    parts = {_part(n) for n in MODULES}
    assert set(ALLOWED) <= parts
    assert {"app.cli", "app.schemas", "app.rooms", "app.runs", "app.middleware"} <= parts
    assert {"app.routes"} <= parts


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_what_it_may(layer):
    allowed = ALLOWED[layer]
    bad = [
        f"{name} → {target}"
        for name, targets in GRAPH.items()
        if _part(name) == layer
        for target in targets
        if _part(target) not in allowed and target != "flashscope.simulator"
    ]
    assert not bad, "\n".join(bad)


def test_the_simulator_imports_neither_kernels_nor_app_and_kernels_never_app():
    bad = [
        f"{name} → {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if (
            name.startswith("flashscope.simulator")
            and not target.startswith("flashscope.simulator")
        )
        or (name.startswith("flashscope.kernels") and target.startswith("flashscope.app"))
    ]
    assert not bad, "\n".join(bad)


def test_routes_are_leaves_and_nothing_in_the_app_imports_the_cli():
    bad = []
    for name, targets in GRAPH.items():
        if _part(name) == "app.routes" or name == "flashscope.app.main":
            continue
        bad += [f"{name} → {t}" for t in targets if _part(t) == "app.routes"]
    for name, targets in GRAPH.items():
        if name.startswith("flashscope.app") and _part(name) != "app.cli":
            bad += [f"{name} → {t}" for t in targets if _part(t) == "app.cli"]
    assert not bad, "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_two_modules_import_each_other():
    # A package's __init__ that imports its own submodules (a registry) is not a cycle of the
    # layout: drop the edge from a submodule back up to its own package.
    graph = {
        name: {t for t in targets if not name.startswith(t + ".")}
        for name, targets in GRAPH.items()
    }
    assert not _cycles(graph)
