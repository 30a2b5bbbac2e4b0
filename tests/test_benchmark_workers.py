"""The worker fan-out the GPU benchmark scripts share (benchmarks/workers.py)."""

from __future__ import annotations

import random

from benchmarks.workers import run_workers


def test_every_worker_runs_once_with_its_share_and_the_extra_arguments(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import sys, pathlib, kernels.config\n"  # the repository's packages import
        "flag, share, out = sys.argv[1], sys.argv[2], sys.argv[4]\n"
        "i, n = share.split('/')\n"
        "pathlib.Path(out, f'{i}-of-{n}').write_text(flag + ' ' + sys.argv[3])\n"
    )
    count = random.randint(1, 4)
    run_workers(str(script), "--a-worker", count, "--out", str(tmp_path))
    written = sorted(p.name for p in tmp_path.glob("*-of-*"))
    assert written == sorted(f"{i}-of-{count}" for i in range(count))
    assert all((tmp_path / w).read_text() == "--a-worker --out" for w in written)
