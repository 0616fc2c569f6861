"""``repo-lens app``: the Streamlit app, served on 127.0.0.1."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from repo_lens.errors import RepoLensError

APP_SCRIPT = Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py"  # the script `repo-lens app` serves

APP_FLAGS = ("--server.address", "127.0.0.1", "--server.headless", "true")  # local only; no browser started


def app_command(extra: list[str]) -> list[str]:
    """The ``streamlit run`` command ``repo-lens app`` runs: the app on 127.0.0.1, then ``extra``
    (further ``streamlit run`` options, e.g. ``--server.port 8502``; a leading ``--`` is dropped).

    >>> command = app_command(["--", "--server.port", "8502"])
    >>> command[1:4], " ".join(command[5:])
    (['-m', 'streamlit', 'run'], '--server.address 127.0.0.1 --server.headless true --server.port 8502')
    """
    extra = extra[1:] if extra[:1] == ["--"] else extra
    return [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT), *APP_FLAGS, *extra]


def run(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("streamlit") is None:
        raise RepoLensError('the app needs Streamlit, which is not installed; install it with: '
                            'pip install "repo_lens[app]"')
    command = app_command(args.extra)
    if os.name == "posix":
        os.execv(command[0], command)  # the server takes this process' place, so Ctrl-C and signals reach it
    import subprocess

    return subprocess.call(command)


def add(commands: argparse._SubParsersAction) -> None:
    """``app``: the Streamlit app."""
    app = commands.add_parser("app", help="serve the Streamlit app on 127.0.0.1:8501 (needs repo_lens[app])",
                              description="Serve the Streamlit app on 127.0.0.1. Further arguments go to "
                                          "`streamlit run`, e.g. repo-lens app --server.port 8502.")
    app.set_defaults(handler=run, passthrough=True)
