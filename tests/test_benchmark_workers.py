"""The worker fan-out the GPU benchmark scripts share (benchmarks/workers.py)."""

from __future__ import annotations

import random

from benchmarks.workers import run_workers


def test_every_worker_runs_once_with_its_share_and_the_extra_arguments(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import sys, pathlib, flashscope.kernels.config\n"  # the repository's packages import
        "flag, share, out = sys.argv[1], sys.argv[2], sys.argv[4]\n"
        "i, n = share.split('/')\n"
        "pathlib.Path(out, f'{i}-of-{n}').write_text(flag + ' ' + sys.argv[3])\n"
    )
    count = random.randint(1, 4)
    run_workers(str(script), "--a-worker", count, "--out", str(tmp_path))
    written = sorted(p.name for p in tmp_path.glob("*-of-*"))
    assert written == sorted(f"{i}-of-{count}" for i in range(count))
    assert all((tmp_path / w).read_text() == "--a-worker --out" for w in written)


def test_a_tuning_script_compiles_in_copies_sweeps_and_writes_its_choices(tmp_path, monkeypatch):
    import json

    import torch

    import flashscope.kernels.config as config
    from benchmarks.workers import tuning_main

    table = tmp_path / "tuned.json"
    table.write_text(config.TUNED_FILE.read_text())
    monkeypatch.setattr(config, "TUNED_FILE", table)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _=0: "Some GPU")
    script = tmp_path / "copy.py"  # the copies each leave a mark
    script.write_text(
        "import sys, pathlib\n"
        "pathlib.Path(sys.argv[4], 'w-' + sys.argv[2].replace('/', '-')).write_text('')\n"
    )
    out = tmp_path / "out"
    bm = random.choice([32, 64, 128])
    chosen = {"fwd/16/d64/full/n2048": [bm, 64, 4, 3, 0]}
    rows = [{"impl": "flashscope", "ms": random.random()}]
    argv = ["--out", str(out), "--workers", "2", "--write"]

    def sweep():
        return rows, chosen

    tuning_main(str(script), "forward-n", "a protocol", lambda i, n: None, sweep, argv)
    assert sorted(p.name for p in out.glob("w-*")) == ["w-0-2", "w-1-2"]
    (result,) = out.glob("tune-forward-n-Some-GPU-*.json")
    doc = json.loads(result.read_text())
    assert (doc["device"], doc["protocol"], doc["chosen"], doc["rows"]) == (
        "Some GPU",
        "a protocol",
        chosen,
        rows,
    )
    assert json.loads(table.read_text())["gpus"]["Some GPU"]["configs"] == chosen
    assert (out / "tuned.json").read_text() == table.read_text()
    config.tuned_table.cache_clear()
    # a copy runs only its share of the compiling
    shares = []

    def no_sweep():
        raise AssertionError("a copy does not sweep")

    argv = ["--out", str(out), "--compile-worker", "1/3"]
    tuning_main(str(script), "forward-n", "", lambda i, n: shares.append((i, n)), no_sweep, argv)
    assert shares == [(1, 3)]
