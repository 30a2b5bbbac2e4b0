"""The FA-3 model (`simulator/timing/fa3.py`) against the warp-specialized forward's measured
times: the `ws[...]` rows of benchmarks/results/hopper-forward-*.json and the variants of
benchmarks/results/warpgroups-*.json (the kernel's options timed side by side in one process).

The rows are split in two by configuration (`group`: GPU, the kernel's configuration, head_dim
and causal; every length and batch of it goes to the same side): `held_out` is a fixed-seed
random draw of half of them, except the configurations whose recorded timelines set the model's
terms, which are all on the fit side. Only the fit half may be fitted to; the held-out half is
the headline.

Each row names its configuration as the kernel's list (`[consumers, block_n, stages, pipeline,
ctas(, pingpong(, persistent(, band(, merged))))]`), the problem (batch, heads, seq_len for
both N_q and N_k, head_dim, causal, dtype) and the median time. Rows measured before the kernel
had its host schedule and half steps (`BEFORE_SCHEDULE`) are modelled as that kernel ran:
persistent causal programs taking their tiles in turn, unpipelined causal tiles their last
block whole. Rows of the benchmark's switches (an impl with a "/" suffix: "/whole", "/turns")
and of kernels with their causal steps in one loop (`merged`, `config_of`) are left out of the
comparison, which keeps one row per configuration, problem and run, except where a file's
unsuffixed rows are of a kernel that no longer runs (`PIPELINED_HALF`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing.fa3 import TERMS, Fa3Config, Fa3Terms, simulate_with_terms

SPLIT_SEED = 20261126  # the split's seed: change it and the halves change
RANK_MARGIN = 0.05  # variant pairs compared only where their measured times differ by more

# Result files measured before the kernel shared persistent causal tiles by its host schedule
# and computed half steps (commit c178b48, "Gluon forward: an unpipelined causal tile whose last
# key block is more than half out of its sight computes that half alone, and persistent causal
# launches share their tiles by a schedule made on the host … instead of in turn"; each file
# below was committed before it, with the kernel it measured): their rows are modelled with
# both switches off (`Fa3Config.scheduled`, `half_steps`).
BEFORE_SCHEDULE = frozenset(
    (
        "hopper-forward-NVIDIA-H200-2026-11-21.json",
        "hopper-forward-NVIDIA-H100-80GB-HBM3-2026-11-22.json",
        "hopper-forward-d64-NVIDIA-H200-2026-11-22.json",
        "hopper-forward-d64-NVIDIA-H200-2026-11-22-persistent.json",
        "hopper-forward-d128-NVIDIA-H200-2026-11-22.json",
        "hopper-forward-d64-causal-bands-NVIDIA-H200-2026-11-22.json",
    )
)
# Result files measured while the pipelined kernel also computed half steps, which the kernel
# dropped before it was committed (c178b48: "Pipelined, the half step measured slower (kept
# whole there)"): their pipelined rows without a suffix are of that kernel (11% slower than
# the rows beside them), their "/whole" rows of the kernel as committed, which stand for them.
PIPELINED_HALF = frozenset(("hopper-forward-d64-causal-half-vs-whole-NVIDIA-H200-2026-11-22.json",))
_WS = re.compile(r"^ws\[([\d, ]+)\]$")


def full_entry(impl: str) -> tuple[int, ...] | None:
    """The nine entries of the configuration list a row's impl names (`ws[2, 128, 2, 1, 1]`:
    the trailing ones the list leaves out at their defaults, pingpong 0, persistent 0, band 1,
    merged 0), or None for other rows."""
    m = _WS.match(impl)
    if m is None:
        return None
    entry = tuple(int(x) for x in m.group(1).split(","))
    if not 5 <= len(entry) <= 9:
        raise ValueError(f"a configuration has 5 to 9 entries, got {impl!r}")
    return (*entry, *(0, 0, 1, 0)[len(entry) - 5 :])


def config_of(impl: str, merged_as_plain: bool = False) -> Fa3Config | None:
    """The configuration a row's impl names (`ws[2, 128, 2, 1, 1]`), or None for other rows and
    for a kernel whose causal steps run in one loop (`merged`, the list's ninth entry): the
    model times the two loops alike and has no instruction fetch to tell them apart. With
    `merged_as_plain` such a kernel gets the configuration of its two-loop twin (the model's
    time of both), for comparisons that keep the two forms apart themselves."""
    entry = full_entry(impl)
    if entry is None:
        return None
    consumers, block_n, stages, pipeline, ctas, pingpong, persistent, band, merged = entry
    if merged and not merged_as_plain:
        return None
    return Fa3Config(
        consumers,
        block_n,
        stages,
        bool(pipeline),
        ctas,
        pingpong=bool(pingpong),
        persistent=bool(persistent),
        band=band,
    )


def measured_rows(paths: list[Path], merged_as_plain: bool = False) -> list[dict[str, Any]]:
    """Every ws row of these result files, with its GPU preset and configuration (`merged` rows
    only with `merged_as_plain`, as `config_of` says)."""
    rows = []
    for path in paths:
        data = json.loads(path.read_text())
        gpu = hardware.resolve(data["device"])
        for row in data["rows"]:
            cfg = config_of(row["impl"], merged_as_plain)
            if path.name in PIPELINED_HALF:
                whole = config_of(row["impl"].removesuffix("/whole"))
                if cfg is not None and cfg.pipeline:
                    continue  # the dropped pipelined half step's row
                if whole is not None and whole.pipeline and row["impl"].endswith("/whole"):
                    row, cfg = {**row, "impl": row["impl"].removesuffix("/whole")}, whole
            if cfg is not None:
                if path.name in BEFORE_SCHEDULE:
                    cfg = dataclasses.replace(cfg, scheduled=False, half_steps=False)
                rows.append({**row, "gpu": gpu, "config": cfg, "file": path.name})
    return rows


def variant_rows(paths: list[Path], merged_as_plain: bool = False) -> list[dict[str, Any]]:
    """The `variants` of warpgroups result files as rows of the same form (impl `ws[...]`;
    variants with their causal steps merged need `merged_as_plain`, as `config_of` says)."""
    rows = []
    for path in paths:
        data = json.loads(path.read_text())
        gpu = hardware.resolve(data["device"])
        for v in data.get("variants", []):
            impl = "ws" + str(list(v["config"]))
            cfg = config_of(impl, merged_as_plain)
            if cfg is None:
                raise ValueError(f"{path.name}: {impl} runs merged causal steps")
            rows.append(
                {
                    "impl": impl,
                    "variant": v["variant"],
                    "dtype": v["dtype"],
                    "head_dim": v["head_dim"],
                    "seq_len": v["seq"],
                    "batch": v["batch"],
                    "heads": v["heads"],
                    "causal": v["causal"],
                    "ms": v["ms"],
                    "gpu": gpu,
                    "config": cfg,
                    "file": path.name,
                }
            )
    return rows


def group(row: dict[str, Any]) -> str:
    """The configuration a row belongs to for the split."""
    c: Fa3Config = row["config"] if "config" in row else config_of(row["impl"])  # type: ignore[assignment]
    return (
        f"{row['gpu']}|{c.consumers},{c.block_n},{c.stages},{int(c.pipeline)},{c.ctas},"
        f"{int(c.pingpong)},{int(c.persistent)},{c.band}|d{row['head_dim']}|"
        f"{'causal' if row['causal'] else 'full'}"
    )


def held_out(key: str, pinned: frozenset[str] = frozenset()) -> bool:
    """Whether configuration `key` is in the held-out half: a draw seeded by SPLIT_SEED (a hash
    of seed and key, so adding rows moves no configuration), never one in `pinned`."""
    if key in pinned:
        return False
    digest = hashlib.sha256(f"{SPLIT_SEED}|{key}".encode()).digest()
    return digest[0] % 2 == 1


def timeline_groups(paths: list[Path]) -> frozenset[str]:
    """The configurations of recorded timelines (kept on the fit side)."""
    keys = set()
    for path in paths:
        data = json.loads(path.read_text())
        gpu = hardware.resolve(data["device"])
        for run in data["timelines"]:
            cfg = config_of("ws" + str(list(run["config"])))
            row = {"gpu": gpu, "config": cfg, "head_dim": run["head_dim"], "causal": run["causal"]}
            keys.add(group(row))
    return frozenset(keys)


def mape(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean absolute percentage error: all rows, and by GPU, head_dim and causal."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        for key in ("all", r["gpu"], f"d{r['head_dim']}", "causal" if r["causal"] else "full"):
            groups.setdefault(key, []).append(abs(r["error"]))
    return {k: float(np.mean(v)) for k, v in groups.items()}


def apart(a_ms: float, b_ms: float, margin: float = RANK_MARGIN) -> bool:
    """Whether two measured times differ by more than `margin` of the shorter."""
    return abs(a_ms - b_ms) > margin * min(a_ms, b_ms)


def judged_pairs(
    rows: list[dict[str, Any]], margin: float = RANK_MARGIN
) -> Iterator[tuple[dict[str, Any], dict[str, Any], bool]]:
    """(faster, slower, whether the model orders them so) for each pair of `rows` (one
    problem's) whose measured times differ by more than `margin`."""
    for a, b in combinations(rows, 2):
        if not apart(a["ms"], b["ms"], margin):
            continue
        fast, slow = (a, b) if a["ms"] < b["ms"] else (b, a)
        yield fast, slow, (a["ms"] < b["ms"]) == (a["model_ms"] < b["model_ms"])


def ranking(rows: list[dict[str, Any]], margin: float = RANK_MARGIN) -> dict[str, Any]:
    """Variant pairs of one problem (GPU, head_dim, length, batch, heads, causal) timed side by
    side in one run (one result file) whose measured times differ by more than `margin`: the
    share the model orders the same way. Two runs of the same variants are ranked each on its
    own (a variant against itself in another run is no pair)."""
    by_problem: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if "variant" in r:
            key = (r["gpu"], r["head_dim"], r["seq_len"], r["batch"], r["heads"], r["causal"],
                   r["file"])  # fmt: skip
            by_problem.setdefault(key, []).append(r)
    pairs, wrong = 0, []
    for key, group_rows in sorted(by_problem.items()):
        for fast, slow, right in judged_pairs(group_rows, margin):
            pairs += 1
            if not right:
                wrong.append(
                    {
                        "problem": list(key),
                        "faster": fast["variant"],
                        "slower": slow["variant"],
                        "measured_ratio": slow["ms"] / fast["ms"],
                        "model_ratio": slow["model_ms"] / fast["model_ms"],
                    }
                )
    return {
        "pairs": pairs,
        "right": pairs - len(wrong),
        "accuracy": (pairs - len(wrong)) / pairs if pairs else 1.0,
        "wrong": wrong,
        "reproduced": reproduced(rows, margin),
    }


def reproduced(rows: list[dict[str, Any]], margin: float = RANK_MARGIN) -> dict[str, Any]:
    """The ranking on the pairs the GPU itself repeats: variant pairs of one problem timed in two
    or more runs (result files) of the same GPU, counted once where every run puts them more
    than `margin` apart in the same order, and right where the model orders them so. `noisy`:
    pairs more than `margin` apart in some run but not in every one, or in opposite orders (the
    per-run ranking counts them, but a third run may order them either way); `one_run`: pairs
    more than `margin` apart from problems timed in a single run, not judged here."""
    runs: dict[tuple[Any, ...], dict[str, dict[str, dict[str, Any]]]] = {}
    for r in rows:
        if "variant" in r:
            key = (r["gpu"], r["head_dim"], r["seq_len"], r["batch"], r["heads"], r["causal"],
                   r["dtype"])  # fmt: skip
            runs.setdefault(key, {}).setdefault(r["variant"], {})[r["file"]] = r
    pairs = right = noisy = one_run = 0
    wrong = []
    for key, variants in sorted(runs.items()):
        for a, b in combinations(sorted(variants), 2):
            both = sorted(set(variants[a]) & set(variants[b]))
            split = [apart(variants[a][f]["ms"], variants[b][f]["ms"], margin) for f in both]
            a_first = {variants[a][f]["ms"] < variants[b][f]["ms"] for f in both}
            if len(both) < 2:
                one_run += any(split)
                continue
            if not all(split) or len(a_first) > 1:
                noisy += any(split)
                continue
            pairs += 1
            a_faster = a_first.pop()
            if all(
                (variants[a][f]["model_ms"] < variants[b][f]["model_ms"]) == a_faster for f in both
            ):
                right += 1
            else:
                fast, slow = (a, b) if a_faster else (b, a)
                wrong.append({"problem": list(key), "faster": fast, "slower": slow})
    return {
        "pairs": pairs,
        "right": right,
        "accuracy": right / pairs if pairs else 1.0,
        "noisy": noisy,
        "one_run": one_run,
        "wrong": wrong,
    }


def model_times(
    rows: list[dict[str, Any]], terms: Fa3Terms = TERMS
) -> dict[tuple[Any, ...], float]:
    """The model's time (ms) for each distinct simulation the rows ask for."""
    gpus = {key: hardware.from_name(key) for key in {r["gpu"] for r in rows}}
    out: dict[tuple[Any, ...], float] = {}
    for r in rows:
        key = _sim_key(r)
        if key in out:
            continue
        n = r["seq_len"]
        problem = AttentionProblem(
            seq_q=n,
            seq_k=n,
            head_dim=r["head_dim"],
            batch=r["batch"],
            heads=r["heads"],
            causal=r["causal"],
            dtype=r["dtype"],
        )
        res = simulate_with_terms(
            problem, r["config"], gpus[r["gpu"]], terms, shown_tiles=1, max_intervals=1
        )
        out[key] = res.time_ns / 1e6
    return out


def _sim_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["gpu"], r["config"], r["head_dim"], r["seq_len"], r["batch"], r["heads"],
            r["causal"], r["dtype"])  # fmt: skip


def compare(
    rows: list[dict[str, Any]],
    terms: Fa3Terms = TERMS,
    pinned: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Model time beside measured time for every row, each row's side of the split, the mean
    absolute percentage error of each side and of all rows (by GPU, head_dim and causal), and
    the variants' ranking."""
    times = model_times(rows, terms)
    out = []
    for r in rows:
        model_ms = times[_sim_key(r)]
        key = group(r)
        out.append(
            {
                **{k: v for k, v in r.items() if k != "config"},
                "group": key,
                "held_out": held_out(key, pinned),
                "model_ms": model_ms,
                "error": (model_ms - r["ms"]) / r["ms"],
            }
        )
    fit_rows = [r for r in out if not r["held_out"]]
    test_rows = [r for r in out if r["held_out"]]
    return {
        "rows": out,
        "mape": mape(out),
        "mape_fit": mape(fit_rows),
        "mape_held_out": mape(test_rows),
        "groups": {
            "fit": len({r["group"] for r in fit_rows}),
            "held_out": len({r["group"] for r in test_rows}),
        },
        "ranking": ranking(out),
        "count": len(out),
    }


def result_paths(results: Path) -> dict[str, list[Path]]:
    """The measured files of a results folder: forward rows, variants, timelines, and the
    variants' causal rows with merged steps (`routed_ranking`)."""
    return {
        "forward": sorted(results.glob("hopper-forward-*.json")),
        "variants": sorted(
            p for p in results.glob("warpgroups-*.json") if "timelines" not in p.name
        ),
        "timelines": sorted(results.glob("warpgroups-timelines-*.json")),
        "variants_merged": sorted(results.glob("variants-merged-*.json")),
    }


def routed_ranking(
    compared: list[dict[str, Any]],
    merged_paths: list[Path],
    terms: Fa3Terms = TERMS,
    margin: float = RANK_MARGIN,
) -> dict[str, Any]:
    """The variants' ranking in the form the kernel runs them: unmasked, the variants of the
    compared rows (`compare`'s), and causal, the same variants timed with their steps merged
    into one loop (variants-merged-*.json, `benchmarks/warpgroups.py --merged`; the form of
    most causal entries of kernels/tuned.json) in place of their two-loop rows, which stall
    the SMs' instruction fetch, an effect the model leaves out (`config_of`). The merged rows
    are each simulated as its two-loop twin; none of them was fitted to, so their time error
    (`merged_mape`) is of rows the model never saw."""
    merged = compare(variant_rows(merged_paths, merged_as_plain=True), terms)["rows"]
    unmasked = [r for r in compared if "variant" in r and not r["causal"]]
    rows = unmasked + [r for r in merged if r["causal"]]
    return {
        **ranking(rows, margin),
        "merged_rows": len(merged),
        "merged_mape": mape(merged),
        "sources": sorted({r["file"] for r in rows}),
    }


def all_rows(results: Path) -> tuple[list[dict[str, Any]], frozenset[str]]:
    """Every measured row of a results folder, and the configurations pinned to the fit side."""
    paths = result_paths(results)
    rows = measured_rows(paths["forward"]) + variant_rows(paths["variants"])
    return rows, timeline_groups(paths["timelines"])
