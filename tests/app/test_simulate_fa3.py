"""algo fa3 through POST /api/simulate and `flashscope simulate`: the model's answer with its
warpgroup timeline, and the FA-3 options refused with the field and its limit."""

from __future__ import annotations

import json

import pytest

from flashscope.app.cli.main import main
from flashscope.app.schemas.simulate import FA3_MAX_INTERVALS
from flashscope.simulator.timing.fa3 import interval_problems

BODY = {"algo": "fa3", "seq": 2048, "head_dim": 128, "heads": 8, "batch": 2, "block_n": 128}


def test_fa3_answers_with_time_busy_fractions_and_timeline(client):
    r = client.post("/api/simulate", json={**BODY, "pingpong": True, "causal": True})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["algo"] == "fa3" and out["simulated"] is True
    assert out["config"]["pingpong"] and out["config"]["consumers"] == 2
    assert out["time_us"] > 0 and out["tflops"] > 0 and out["tiles"] == 2 * 8 * 16
    assert set(out["busy"]) == {"tensor", "sfu", "loader"}
    intervals = out["timeline"]["intervals"]
    assert 0 < len(intervals) <= FA3_MAX_INTERVALS
    assert interval_problems(intervals, consumers=2) == []
    assert {iv["tile"] for iv in intervals} == {0}  # one tile per program unless persistent
    fig = out["figures"]["explanation"]
    assert fig["data"] and "head_dim 128" in fig["layout"]["title"]["text"]


def test_fp8_and_a_persistent_program(client):
    r = client.post(
        "/api/simulate",
        json={**BODY, "dtype": "fp8", "persistent": True, "program": 3, "shown_tiles": 3},
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["dtype"] == "fp8" and any("simulated" in n for n in out["notes"])
    assert out["timeline"]["program"] == 3
    fp16 = client.post("/api/simulate", json={**BODY, "persistent": True}).json()
    assert out["time_us"] < fp16["time_us"]


@pytest.mark.parametrize(
    "change,field,limit",
    [
        ({"consumers": 4}, "consumers", 3),
        ({"ctas": 3}, "ctas", 2),
        ({"block_n": 32}, "block_n", [64, 256]),
        ({"stages": 5}, "stages", [2, 4]),
        ({"shown_tiles": 9}, "shown_tiles", 4),
        ({"head_dim": 256, "block_n": 64, "stages": 4}, "stages", 232448),
        ({"program": 10_000}, "program", 2 * 8 * 16 - 1),
        ({"dtype": "fp32"}, "dtype", ["fp16", "bf16", "fp8"]),
    ],
)
def test_bad_fa3_options_name_field_and_limit(client, change, field, limit):
    r = client.post("/api/simulate", json={**BODY, **change})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["field"] == field and detail["limit"] == limit


@pytest.mark.parametrize(
    "body,field",
    [
        ({**BODY, "pingpong": True, "pipeline": False}, "pingpong"),
        ({**BODY, "algo": "fa2", "block_n": 64, "consumers": 2}, "consumers"),
        ({**BODY, "algo": "fa2", "block_n": 64, "dtype": "fp8"}, "dtype"),
    ],
)
def test_options_that_do_not_go_together(client, body, field):
    r = client.post("/api/simulate", json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == field


def test_the_tile_limit_holds_for_fa3(client, settings):
    r = client.post("/api/simulate", json={**BODY, "seq": 1_048_576, "heads": 256, "batch": 64})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "seq"


CLI = ["simulate", "--algo", "fa3", "--seq", "2048", "--head-dim", "64", "--heads", "8"]


def test_cli_prints_the_model_as_json(capsys):
    argv = ["--consumers", "3", "--pingpong", "--block-n", "128", "--persistent", "--batch", "4"]
    assert main([*CLI, *argv, "--shown-tiles", "3", "--program", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["algo"] == "fa3" and out["config"]["consumers"] == 3
    assert out["timeline"]["program"] == 5
    assert {iv["tile"] for iv in out["timeline"]["intervals"]} == {0, 1, 2}


def test_cli_table(capsys):
    assert main([*CLI, "--dtype", "fp8", "--persistent"]) == 0
    out = capsys.readouterr().out
    assert "fa3 on" in out and "simulated" in out and "busy" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--consumers", "4"], "argument --consumers: consumers must be one of 1, 2, 3"),
        (["--ctas", "3"], "argument --ctas: ctas must be one of 1, 2"),
        (["--block-n", "32"], "argument --block-n: block_n must be one of 64, 128, 256"),
        (["--stages", "5"], "argument --stages: stages must be one of 2, 3, 4"),
        (["--pingpong", "--no-pipeline"], "argument --pingpong: pingpong needs pipeline"),
        (["--head-dim", "256", "--stages", "4"], "argument --stages: stages 4 with"),
        (["--program", "99999"], "argument --program: program must be from 0 to"),
        (["--dtype", "fp32"], "argument --dtype: dtype must be fp16, bf16 or fp8 for fa3"),
        (["--impl", "flashscope"], "argument --algo: fa3 takes neither"),
        (["--shown-tiles", "5"], "argument --shown-tiles: shown_tiles must be from 1 to 4"),
    ],
)
def test_cli_bad_fa3_arguments_exit_2(argv, needle, capsys):
    assert main([*CLI, *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--pingpong"], "argument --pingpong: --pingpong applies to --algo fa3"),
        (["--dtype", "fp8"], "argument --dtype: dtype fp8 is a what-if of --algo fa3"),
    ],
)
def test_cli_fa3_options_need_fa3(argv, needle, capsys):
    assert main(["simulate", "--seq", "1024", "--head-dim", "64", *argv]) == 2
    assert needle in capsys.readouterr().err
