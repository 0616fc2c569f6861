"""The doctest collector: every ``>>>`` example of every module under ``repo_lens/`` runs with the suite.

pyproject.toml's [tool.pytest.ini_options] turns on ``--doctest-modules`` (options NORMALIZE_WHITESPACE and
ELLIPSIS) and lists ``repo_lens`` beside ``tests`` in ``testpaths``, so ``python -m pytest -q`` (``make test``)
collects them; ``python -m pytest repo_lens`` runs the examples alone. This file keeps that collector to the
package (the test modules are not scanned for examples), runs it offline, and leaves out what cannot be
imported as a module: the Streamlit script (it draws the app when imported) and, where Streamlit is not
installed (it comes with the ``app`` extra), the app's modules. An example that needs what CI lacks
(network, GPU, a browser, a big checkpoint) is marked ``# doctest: +SKIP`` where it is written.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

# before anything imports huggingface_hub (it reads these once, on import): no example reaches the network
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
from _pytest.doctest import DoctestModule  # noqa: E402

PACKAGE = Path(__file__).resolve().parent / "repo_lens"
# scripts run by another program, not modules to import (``__main__.py`` pytest leaves out by itself)
SCRIPTS = {PACKAGE / "app" / "streamlit_app.py"}
# folders whose modules import an optional dependency (an extra of pyproject.toml) when imported
OPTIONAL = {PACKAGE / "app": "streamlit"}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path in SCRIPTS:
        return True
    needs = OPTIONAL.get(collection_path)
    if needs is not None and importlib.util.find_spec(needs) is None:
        return True
    return None


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    """--doctest-modules, restricted to the package: the test files' own collection is left as it is."""
    collected = yield
    if PACKAGE in file_path.parents:
        return collected
    return [item for item in collected or [] if not isinstance(item, DoctestModule)]
