"""Redis is an extra: without the package, FLASHSCOPE_REDIS_URL is refused at start-up, by name."""

from __future__ import annotations

import sys

import pytest

from flashscope.app.cli.main import main
from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.app.rooms.store import RedisNotInstalled

URL = "redis://127.0.0.1:6379/0"
HINT = "pip install 'flashscope[redis]'"


@pytest.fixture
def no_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The redis package as if it were not installed (an import of it fails)."""
    for name in [m for m in sys.modules if m == "redis" or m.startswith("redis.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "redis", None)


def test_the_app_refuses_a_redis_url_naming_the_extra(no_redis: None) -> None:
    with pytest.raises(RedisNotInstalled, match="FLASHSCOPE_REDIS_URL") as exc:
        create_app(Settings(redis_url=URL))
    assert HINT in str(exc.value)


def test_serve_says_so_in_one_line_and_exits_2(
    no_redis: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def serve_anyway(*args: object, **kwargs: object) -> None:
        raise AssertionError("the server started without the redis package")

    monkeypatch.setattr("uvicorn.run", serve_anyway)
    monkeypatch.setenv("FLASHSCOPE_REDIS_URL", URL)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flashscope: FLASHSCOPE_REDIS_URL is set") and HINT in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_rooms_in_this_process_need_no_redis(no_redis: None) -> None:
    app = create_app(Settings())
    assert type(app.state.rooms.store).__name__ == "MemoryRoomStore"
