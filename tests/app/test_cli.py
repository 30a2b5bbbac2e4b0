"""The command line: bad arguments give one clear line and exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from flashscope.app.cli.main import main


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
        [sys.executable, "-m", "flashscope.app.cli.main", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("flashscope ")


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"FLASHSCOPE_MAX_SEQ": "-5"}, "FLASHSCOPE_MAX_SEQ='-5'"),
        ({"FLASHSCOPE_PORT": "http"}, "FLASHSCOPE_PORT='http'"),
        ({"FLASHSCOPE_ROOM_MAX_CLIENTS": "0"}, "FLASHSCOPE_ROOM_MAX_CLIENTS='0'"),
    ],
)
def test_bad_settings_give_one_line_and_exit_2(env, needle, monkeypatch, capsys):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flashscope: bad setting ") and needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_bad_log_level_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--log-level", "loud"])
    assert exc.value.code == 2
    assert "invalid choice: 'loud'" in capsys.readouterr().err
