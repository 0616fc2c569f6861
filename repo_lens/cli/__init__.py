"""The ``repo-lens`` command (also ``python -m repo_lens.cli``): the parser, the error lines and
one module per subcommand (each with ``add``, its arguments, and ``run``, what it does)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from repo_lens.cli import analyze, app, reproduce, tiny, trace, train, zoo
from repo_lens.cli.analyze import summary_json
from repo_lens.cli.app import APP_SCRIPT, app_command
from repo_lens.errors import ContextLengthError, InputError, RepoLensError

__all__ = ["APP_SCRIPT", "app_command", "build_parser", "main", "summary_json"]

DEBUG_VARIABLE = "REPO_LENS_DEBUG"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="repo-lens", description="Look at the positions language models learn.")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in (trace, tiny, train, analyze, reproduce, app, zoo):  # the order of --help
        command.add(commands)
    return parser


class _Parser(argparse.ArgumentParser):
    """Usage errors as one InputError line (``main`` prints it) instead of argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{message} (see {self.prog} --help)")


def _error_line(error: RepoLensError | OSError | UnicodeError, args: argparse.Namespace | None) -> str:
    if isinstance(error, ContextLengthError):
        return error.explain(getattr(args, "context_flags", {}))
    if isinstance(error, RepoLensError):
        return str(error)
    if isinstance(error, UnicodeError):
        return f"text that is not valid UTF-8 ({error}); pass UTF-8 text and files"
    where = f"{error.filename}: " if getattr(error, "filename", None) else ""
    return f"{where}{error.strerror or error}; check the path, its permissions and the free space"


def _one_line(message: str) -> str:
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    """Run the ``repo-lens`` command; bad input is one ``repo-lens: error: ...`` line on stderr and exit code 2,
    an unexpected failure one ``repo-lens: internal error: ...`` line and exit code 3 (the traceback with
    REPO_LENS_DEBUG=1).

    >>> main(["tiny", "/tmp/unused", "--layers", "0"])
    2
    """
    args = None
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "passthrough", False):  # only `app` hands unknown arguments on (to streamlit)
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.extra = extra
        return args.handler(args)
    except (RepoLensError, OSError, UnicodeError) as error:
        print(f"repo-lens: error: {_one_line(_error_line(error, args))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("repo-lens: interrupted (analyze and train resume where they stopped when rerun)", file=sys.stderr)
        return 130
    except Exception as error:
        if os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
            raise
        print(f"repo-lens: internal error: {type(error).__name__}: {_one_line(str(error))} (please report; rerun with "
              f"{DEBUG_VARIABLE}=1 for the traceback)", file=sys.stderr)
        return 3
