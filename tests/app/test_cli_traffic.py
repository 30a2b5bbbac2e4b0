"""`flashscope traffic`: JSON and table output, one-line errors, no heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from flashscope.app.cli.main import main
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.traffic import summary

BASE = ["traffic", "--seq", "512", "--head-dim", "64", "--block-m", "64", "--block-n", "128"]


@pytest.mark.parametrize("algo", ["naive", "fa1", "fa2", "fa2-bwd", "decode"])
def test_json_equals_the_closed_forms(algo, capsys):
    extra = ["--heads", "8", "--kv-heads", "2", "--batch", "3", "--seq-k", "700"]
    if algo != "decode":
        extra.append("--causal")
    assert main([*BASE, "--algo", algo, *extra, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    p = AttentionProblem(
        seq_q=512,
        seq_k=700,
        head_dim=64,
        batch=3,
        heads=8,
        kv_heads=2,
        causal=algo != "decode",
        dtype="fp16",
    )
    assert out == summary(algo, p, TileConfig(64, 128))
    for key in ("hbm_read", "hbm_write", "hbm_total", "stats_read", "stats_write", "acc_read"):
        assert key in out["elements"] and key in out["bytes"]


def test_seed_figures_and_table(capsys):
    main(["traffic", "--algo", "naive", "--seq", "2048", "--head-dim", "64", "--block-m", "128",
          "--block-n", "128", "--json"])  # fmt: skip
    assert json.loads(capsys.readouterr().out)["elements"]["hbm_total"] == 17_301_504
    main([*BASE, "--algo", "fa2-bwd", "--dtype", "bf16"])
    text = capsys.readouterr().out
    assert text.startswith("fa2-bwd:") and "acc_write" in text and "flops" in text


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--algo", "fa2", "--seq", "0"], "argument --seq: must be ≥ 1, got 0"),
        (["--algo", "fa2", "--block-m", "48"], "argument --block-m: must be a power of two"),
        (["--algo", "fa2", "--block-n", "x"], "argument --block-n: not an integer"),
        (["--algo", "fa2", "--heads", "6", "--kv-heads", "4"], "argument --kv-heads: must divide"),
        (["--algo", "fa3"], "argument --algo: invalid choice"),
        (["--algo", "decode", "--causal"], "argument --causal: decode has no causal mask"),
        (["--algo", "fa2", "--splits", "2"], "argument --splits: applies to --algo decode"),
        (["--algo", "fa2", "--dtype", "fp8"], "argument --dtype: invalid choice"),
    ],
)
def test_bad_arguments_one_line_exit_2(argv, needle, capsys):
    base = ["traffic", "--seq", "64", "--head-dim", "64", "--block-m", "64", "--block-n", "64"]
    with pytest.raises(SystemExit) as exc:
        main([*base, *argv])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and needle in captured.err, captured.err


def test_traffic_imports_neither_torch_nor_triton_nor_fastapi():
    code = (
        "import io, contextlib, json, sys\n"
        "from flashscope.app.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['traffic', '--algo', 'fa2', '--seq', '4096', '--head-dim', '64',\n"
        "          '--block-m', '128', '--block-n', '128', '--json'])\n"
        "print(json.dumps([m for m in ('torch', 'triton', 'fastapi') if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
