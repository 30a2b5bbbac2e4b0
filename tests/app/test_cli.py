"""The command line: bad arguments give one clear line and exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.cli import main


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["serve", "--port", "0"], "port must be in 1..65535"),
        (["serve", "--port", "http"], "not a port number"),
        (["nosuch"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("flashscope ")
