"""The SASS of a compiled kernel, read for its local-memory traffic: the listing of `nvdisasm`
cut into basic blocks and natural loops (back edges to a dominating block). The loops that issue
matrix products are the kernel's loops over tiles (busy-waits on barriers are loops too, without
products). Per loop, the local loads and stores (LDL, STL) of its body are paid once per step; a
block outside the loops that only runs when a loop is entered (dominated or post-dominated by its
header: the loop's set-up and drain) once per entry; every other block once per CTA. An outer
loop holding a loop over tiles (the dK/dV kernel's walk over a GQA group's query heads) pays its
own blocks once per step of it.

Pure Python over the listing's text: compiling and disassembling are `ondemand`'s part.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):\s*$")
_TARGET = re.compile(r"`\(([^)]+)\)")
_ENDS = ("BRA", "EXIT", "RET", "BRX", "JMP", "JMX", "CALL")
_WIDTH = {"64": 8, "128": 16}
MMA = ("HGMMA", "HMMA")


@dataclass
class Insn:
    addr: int
    pred: str | None
    op: str
    args: str
    labels: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.op.split(".")[0]


def parse_sass(text: str, function: str) -> list[Insn]:
    """The instructions of `function` in nvdisasm's listing, with the labels before each."""
    out: list[Insn] = []
    pending: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("//---") and ".text." in line:
            inside = line.rstrip("- ").endswith(".text." + function)
            continue
        if not inside:
            continue
        if m := _LABEL.match(line):
            pending.append(m.group(1))
        elif m := _INSN.search(line):
            pred = (m.group(2) or "").strip() or None
            out.append(Insn(int(m.group(1), 16), pred, m.group(3), m.group(4).strip(), pending))
            pending = []
    return out


def local_access(i: Insn) -> tuple[str, int] | None:
    """("load" | "store", bytes per thread) of a local-memory instruction (None otherwise).
    A warp's access of w bytes a thread covers 32·w contiguous bytes (local memory interleaves
    the threads' words), so Nsight Compute's sector bytes per thread equal w, at least 4."""
    if i.base not in ("LDL", "STL"):
        return None
    width = 4
    for part in i.op.split(".")[1:]:
        width = _WIDTH.get(part, width)
    return ("load" if i.base == "LDL" else "store"), width


@dataclass
class Graph:
    spans: list[tuple[int, int]]
    succ: list[set[int]]
    pred: list[set[int]]
    reach: set[int]


def graph(insns: list[Insn]) -> Graph:
    """Basic blocks and their successors (a predicated branch or exit also falls through)."""
    at = {lab: n for n, i in enumerate(insns) for lab in i.labels}
    leaders = {0} | {n for n, i in enumerate(insns) if i.labels}
    leaders |= {n + 1 for n, i in enumerate(insns) if i.base in _ENDS and n + 1 < len(insns)}
    starts = sorted(leaders)
    spans = [
        (s, starts[b + 1] if b + 1 < len(starts) else len(insns)) for b, s in enumerate(starts)
    ]
    block_of = {n: b for b, (s, e) in enumerate(spans) for n in range(s, e)}
    succ: list[set[int]] = [set() for _ in spans]
    for b, (_, e) in enumerate(spans):
        last = insns[e - 1]
        falls = True
        if last.base == "BRA":
            t = _TARGET.search(last.args)
            if t and t.group(1) in at:
                succ[b].add(block_of[at[t.group(1)]])
            falls = last.pred is not None
        elif last.base in ("EXIT", "RET", "JMP", "BRX", "JMX"):
            falls = last.pred is not None
        if falls and e < len(insns):
            succ[b].add(block_of[e])
    pred: list[set[int]] = [set() for _ in spans]
    for b, ss in enumerate(succ):
        for s in ss:
            pred[s].add(b)
    reach, stack = {0}, [0]
    while stack:
        for s in succ[stack.pop()]:
            if s not in reach:
                reach.add(s)
                stack.append(s)
    return Graph(spans, succ, pred, reach)


def _fixpoint(g: Graph, roots: set[int], edges: list[set[int]]) -> dict[int, set[int]]:
    """Dominator sets over `edges` (predecessors: dominators; successors: post-dominators)."""
    sets = {b: ({b} if b in roots else set(g.reach)) for b in g.reach}
    changed = True
    while changed:
        changed = False
        for b in sorted(g.reach):
            if b in roots:
                continue
            inputs = [sets[p] for p in edges[b] if p in g.reach]
            new = (set.intersection(*inputs) if inputs else set()) | {b}
            if new != sets[b]:
                sets[b], changed = new, True
    return sets


@dataclass
class Loop:
    """One loop over tiles: the local bytes per thread of one step, and of the blocks outside
    it that run once per entry (set-up and drain)."""

    head: int  # address of its header
    parent: int | None  # header address of the loop over tiles around it
    step_load: int = 0
    step_store: int = 0
    entry_load: int = 0
    entry_store: int = 0


@dataclass
class Structure:
    """A kernel's local bytes per thread: run once per CTA, and per tile loop."""

    cta_load: int
    cta_store: int
    loops: list[Loop]
    predicated: int  # local accesses under a predicate (counted as if they ran)

    def outer(self) -> list[Loop]:
        return [lp for lp in self.loops if lp.parent is None]

    def inner(self) -> list[Loop]:
        heads = {lp.parent for lp in self.loops}
        return [lp for lp in self.loops if lp.head not in heads]


def structure(insns: list[Insn]) -> Structure:
    """The local bytes of a kernel by where they run: once per CTA, per loop entry, per step."""
    g = graph(insns)
    dom = _fixpoint(g, {0}, g.pred)
    exits = {b for b in g.reach if not g.succ[b]}
    pdom = _fixpoint(g, exits, g.succ)
    bodies: dict[int, set[int]] = {}
    for b in g.reach:
        for s in g.succ[b]:
            if s in dom[b]:  # a back edge b → s: the natural loop of header s
                body, stack = bodies.setdefault(s, {s}), [b]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(p for p in g.pred[x] if p in g.reach)
    tiles = {h: body for h, body in bodies.items()
             if any(insns[n].base in MMA for b in body for n in range(*g.spans[b]))}  # fmt: skip
    heads = sorted(tiles, key=lambda h: g.spans[h][0])

    def parent(h: int) -> int | None:
        around = [x for x in heads if x != h and tiles[h] < tiles[x]]
        return min(around, key=lambda x: len(tiles[x])) if around else None

    parents = {h: parent(h) for h in heads}

    def own(h: int | None) -> set[int]:
        """Blocks at the level of loop h (None: outside every loop over tiles)."""
        inside = tiles[h] if h is not None else set(g.reach)
        nested = [tiles[x] for x in heads if parents[x] == h]
        return inside - set().union(*nested) if nested else set(inside)

    def tally(bs: Iterable[int]) -> tuple[int, int, int]:
        load = store = predicated = 0
        for b in bs:
            for n in range(*g.spans[b]):
                acc = local_access(insns[n])
                if acc:
                    predicated += insns[n].pred is not None
                    if acc[0] == "load":
                        load += acc[1]
                    else:
                        store += acc[1]
        return load, store, predicated

    loops = {h: Loop(insns[g.spans[h][0]].addr, None) for h in heads}
    level: dict[int | None, set[int]] = {None: own(None)} | {h: own(h) for h in heads}
    predicated = 0
    for h in heads:
        p = parents[h]
        loops[h].parent = None if p is None else insns[g.spans[p][0]].addr
        loops[h].step_load, loops[h].step_store, n = tally(level[h])
        predicated += n
    for lv, blocks in level.items():
        children = [h for h in heads if parents[h] == lv]
        left = set(blocks)
        for h in children:
            tied = {b for b in left if h in dom[b] or h in pdom[b]} - (
                {lv} if lv is not None else set()
            )
            left -= tied
            load, store, n = tally(tied)
            loops[h].entry_load, loops[h].entry_store = load, store
            predicated += n
        if lv is None:
            cta_load, cta_store, n = tally(left)
        else:  # the rest of an outer loop's body: once per step of it
            loops[lv].step_load, loops[lv].step_store, n = tally(left)
        predicated += n
    return Structure(cta_load, cta_store, [loops[h] for h in heads], predicated)


def structure_of(d: dict[str, Any]) -> Structure:
    """A Structure from its `dataclasses.asdict` form (as compiled entries keep it)."""
    return Structure(d["cta_load"], d["cta_store"], [Loop(**lp) for lp in d["loops"]],
                     d["predicated"])  # fmt: skip
