"""The `flashscope` command line: serve the app, count traffic, simulate a kernel on a GPU, and
(on a GPU) validate the engine against the kernels and calibrate it.

Errors in arguments print one line naming the argument and exit with code 2 (argparse's rule).
Importing this module imports nothing heavy: each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from flashscope.app.cli import calibrate as cli_calibrate
from flashscope.app.cli import simulate as cli_simulate
from flashscope.app.cli import traffic as cli_traffic
from flashscope.app.cli import validate as cli_validate

if TYPE_CHECKING:
    from pydantic import ValidationError


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (no usage dump), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from flashscope.app.config import Settings
    from flashscope.app.main import create_app

    settings = Settings(host=args.host, port=args.port)
    uvicorn.run(
        create_app(settings),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        ws_max_size=max(settings.ws_max_message_bytes, settings.room_max_message_bytes),
        # a client that stops answering (a closed laptop, a dropped network) is noticed and its
        # sockets closed within ping interval + timeout, not uvicorn's default 40 s
        ws_ping_interval=settings.ws_ping_interval_s,
        ws_ping_timeout=settings.ws_ping_timeout_s,
        # X-Forwarded-For is read by the app, from FLASHSCOPE_TRUSTED_PROXIES only; uvicorn
        # would otherwise believe it from 127.0.0.1 without being told.
        proxy_headers=False,
    )
    return 0


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 1..65535, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from flashscope.app import __version__
    from flashscope.app.config import Settings

    defaults = Settings()
    parser = OneLineParser(
        prog="flashscope", description="FlashAttention, tile by tile: visualizer and simulator."
    )
    parser.add_argument("--version", action="version", version=f"flashscope {__version__}")
    # Any: each command's add_command takes the subparsers of any ArgumentParser class.
    sub: argparse._SubParsersAction[Any] = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND"
    )

    serve = sub.add_parser("serve", help="start the web app")
    serve.add_argument(
        "--host", default=defaults.host, help=f"interface to bind (default {defaults.host})"
    )
    serve.add_argument(
        "--port",
        type=port_number,
        default=defaults.port,
        help=f"port to bind (default {defaults.port})",
    )
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    serve.set_defaults(func=_serve)
    cli_traffic.add_command(sub)
    cli_simulate.add_command(sub)
    cli_validate.add_command(sub)
    cli_calibrate.add_command(sub)
    return parser


def settings_problem(exc: ValidationError) -> str:
    """One line naming each bad FLASHSCOPE_* variable, what it holds and what it must be."""
    parts = []
    for err in exc.errors(include_url=False):
        name = "FLASHSCOPE_" + "_".join(str(x) for x in err["loc"]).upper()
        parts.append(f"{name}={err.get('input')!r}: {err['msg']}")
    return "bad setting " + "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    from pydantic import ValidationError

    from flashscope.app.rooms.store import RedisNotInstalled

    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except ValidationError as exc:
        print(f"flashscope: {settings_problem(exc)}", file=sys.stderr)
        return 2
    except RedisNotInstalled as exc:
        print(f"flashscope: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `flashscope simulate ... | head`: the reader left early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
