"""`flashscope simulate`: a JSON summary or a table; bad arguments give one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from flashscope.app.cli.main import main

BASE = ["simulate", "--seq", "2048", "--head-dim", "64"]


def test_json_has_the_promised_fields(capsys):
    rc = main(
        [
            *BASE,
            "--gpu",
            "h100",
            "--algo",
            "fa2",
            "--batch",
            "2",
            "--heads",
            "8",
            "--causal",
            "--block-m",
            "64",
            "--block-n",
            "64",
            "--json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in (
        "time_us",
        "tflops",
        "dram_read_bytes",
        "dram_write_bytes",
        "l2_bytes",
        "waves",
        "ctas_per_sm",
        "limiter",
        "floor_us",
    ):
        assert key in out, key
    assert out["gpu"] == "h100-sxm" and out["problem"]["causal"] is True
    assert sum(out["limiter"].values()) == pytest.approx(1.0)
    assert out["floor_us"] <= out["time_us"]
    assert out["ctas_per_sm"] >= 1 and out["waves"] > 0


def test_every_algorithm_and_a_custom_gpu(capsys):
    for algo in ("naive", "fa1", "fa2", "fa2-bwd"):
        assert main([*BASE, "--algo", algo, "--gpu", "a100", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["algo"] == algo
    assert (
        main(
            [
                "simulate",
                "--algo",
                "decode",
                "--seq",
                "1",
                "--seq-k",
                "8192",
                "--head-dim",
                "128",
                "--heads",
                "32",
                "--kv-heads",
                "8",
                "--json",
            ]
        )
        == 0
    )
    # one launch, as flashscope's kernel runs it: each head's last split merges the partials
    assert [k["name"] for k in json.loads(capsys.readouterr().out)["kernels"]] == ["decode_split"]
    assert main([*BASE, "--set", "smem_per_sm_kib=456", "--set", "tensor=0.9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu"] == "h100-sxm+custom"


def test_table_without_json(capsys):
    assert main([*BASE, "--gpu", "h200", "--algo", "fa2-bwd"]) == 0
    out = capsys.readouterr().out
    for needle in ("NVIDIA H200", "time", "floor", "DRAM", "limiters", "bwd_main"):
        assert needle in out, needle


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--gpu", "v100"], "argument --gpu: unknown gpu 'v100'; choose one of h100-sxm"),
        (["--algo", "fa9"], "argument --algo: invalid choice"),
        (["--seq", "0"], "argument --seq: must be ≥ 1"),
        (["--head-dim", "-4"], "argument --head-dim: must be ≥ 1"),
        (["--block-m", "48"], "argument --block-m: must be a power of two"),
        (["--warps", "3"], "argument --warps: must be a power of two"),
        (["--heads", "6", "--kv-heads", "4"], "argument --kv-heads: kv_heads must divide heads"),
        (
            ["--head-dim", "256", "--block-m", "256", "--block-n", "256"],
            "argument --block-m/--block-n/--stages: the tiles need",
        ),
        (["--stages", "9"], "argument --stages: stages must be ≤ 8"),
        (["--maxnreg", "100"], "argument --maxnreg: maxnreg must be a multiple of 8"),
        (["--maxnreg", "300"], "argument --maxnreg: maxnreg must be ≤ 248"),
        (["--algo", "decode", "--causal"], "argument --causal: causal must be false for decode"),
        (["--set", "sram=2"], "argument --set: unknown hardware field 'sram'"),
        (["--set", "sms"], "argument --set: expected NAME=VALUE"),
        (["--set", "power_tflops=1e-308"], "argument --set: power_tflops must stay within 64×"),
        (["--set", "power_exp=0.9999999"], "argument --set: power_exp must be from 0 to 0.9"),
        (["--seq", "1048576", "--heads", "128", "--batch", "64"], "argument --seq:"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(argv, needle, capsys):
    try:
        rc = main([*BASE, *argv])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_command_knows_every_algorithm_of_the_engine():
    from flashscope.app.cli import simulate as cli_simulate
    from flashscope.simulator.timing import fa3
    from flashscope.simulator.timing.workload import ALGOS

    assert (*ALGOS, fa3.ALGO) == cli_simulate.ALGOS


def test_simulate_imports_neither_torch_nor_triton_nor_fastapi():
    code = (
        "import sys, json\n"
        "from flashscope.app.cli.main import main\n"
        "rc = main(['simulate', '--seq', '1024', '--head-dim', '64', '--json'])\n"
        "heavy = sorted(m for m in ('torch', 'triton', 'fastapi') if m in sys.modules)\n"
        "print(json.dumps({'rc': rc, 'heavy': heavy}), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    status = json.loads(out.stderr.strip().splitlines()[-1])
    assert status == {"rc": 0, "heavy": []}
    assert json.loads(out.stdout)["time_us"] > 0
