"""benchmarks/compiled_ablation.py: the tables switched off and back, and its error figures."""

from __future__ import annotations

import json
import random
from pathlib import Path

from benchmarks.compiled_ablation import groups, resimulate, tables_off
from flashscope.simulator.timing import compiled


def test_the_tables_answer_unknown_inside_and_come_back_after() -> None:
    keys = sorted(compiled.compiler_registers())
    key = random.choice(keys)
    before = compiled.registers(key)
    assert before is not None
    with tables_off():
        assert compiled.registers(key) is None
        assert compiled.lookup(key) is None and compiled.shared(key) is None
        assert not compiled.measured(key)
    assert compiled.registers(key) == before


def test_a_dataset_resimulated_without_the_tables_takes_the_estimates(tmp_path) -> None:
    """Rows of the users' sweep on spread backward tiles (whose kernels the tables hold): as
    shipped they keep their simulated times; without the tables, the estimates from their tiles
    move most of them (57 of 76 in all), and the groups' figures follow from the rows."""
    src = Path(
        "benchmarks/results/validation-users-NVIDIA-H100-80GB-HBM3-2026-11-26-resimulated.json"
    )
    doc = json.loads(src.read_text())
    spread = [r for r in doc["rows"] if r["tiles"] == "spread" and r["config"]["algo"] == "fa2-bwd"]
    doc["rows"] = random.sample(spread, 12)  # all 12 among the 19 unmoved: about 1 in 10^7
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(doc))
    shipped = resimulate(path)
    with tables_off():
        off = resimulate(path)
    was = [r["simulated_us"] for r in doc["rows"]]
    assert [r["simulated_us"] for r in shipped["rows"]] == was
    assert [r["simulated_us"] for r in off["rows"]] != was
    g = groups(off["rows"])
    errs = [abs(r["simulated_us"] / r["measured_us"] - 1) * 100 for r in off["rows"]]
    assert g["all"]["rows"] == g["fa2-bwd/spread"]["rows"] == 12
    assert abs(g["all"]["time"]["mape_pct"] - sum(errs) / 12) < 1e-9


def test_extra_compiler_figures_add_keys_and_keep_the_shipped_ones(tmp_path) -> None:
    """`--extra-compiler`: a key only the extra file holds takes its figures, a key both hold
    keeps the shipped one's, and everything is as shipped again after."""
    from benchmarks.compiled_ablation import compiler_extra

    shipped = random.choice(sorted(compiled.compiler_registers()))
    new = "fwd/d64/128x16/w2/s4/causal/ragged"
    assert new not in compiled.compiler_registers()
    extra = {"registers": {new: 40, shipped: 7}, "shared": {new: 4096},
             "kernels": {new: {"load_step": 96.0, "load_cta": 0.0, "store_step": 80.0,
                               "store_cta": 8.0, "stack": 512}}}  # fmt: skip
    path = tmp_path / "extra.json"
    path.write_text(json.dumps(extra))
    before = compiled.registers(shipped)
    with compiler_extra(path):
        assert compiled.registers(new) == 40 and compiled.shared(new) == 4096
        assert compiled.lookup(new).store_step == 80.0
        assert compiled.registers(shipped) == before
    assert compiled.registers(new) is None and compiled.registers(shipped) == before
