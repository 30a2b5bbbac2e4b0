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


def test_serve_pings_websockets_every_ten_seconds_unless_told(monkeypatch):
    """A client that stops answering (a closed laptop) is dropped within 20 s, not 40."""
    seen: list[dict] = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: seen.append(kw))
    assert main(["serve"]) == 0
    monkeypatch.setenv("FLASHSCOPE_WS_PING_INTERVAL_S", "5")
    monkeypatch.setenv("FLASHSCOPE_WS_PING_TIMEOUT_S", "2.5")
    assert main(["serve"]) == 0
    assert [(kw["ws_ping_interval"], kw["ws_ping_timeout"]) for kw in seen] == [
        (10.0, 10.0),
        (5.0, 2.5),
    ]
