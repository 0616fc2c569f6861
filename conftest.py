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

# pytest-xdist's workers (make test runs two, one per core): one torch thread each, set before torch is imported,
# so that two workers do not fight over the cores (subprocesses the tests start inherit it)
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

# before anything imports huggingface_hub (it reads these once, on import): no example reaches the network
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
from _pytest.doctest import DoctestModule  # noqa: E402

pytest_plugins = ["pytester"]  # tests/test_lanes.py runs pytest on a conftest of its own

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


# The two lanes. `make test` runs everything; `make test-fast` (``-m "not slow"``) leaves out what needs a browser,
# JupyterLab, LaTeX, SmolLM2-scale models, training runs or whole studies, which carry one of these markers (or
# ``slow`` itself). pyproject.toml declares them; tests/test_lanes.py checks that the fast lane misses no module.
HEAVY_MARKERS = ("browser", "jupyterlab", "latex", "smollm2", "training", "study")


@pytest.hookimpl(tryfirst=True)  # before -m deselects: "not slow" must see the slow marker added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(marker) for marker in HEAVY_MARKERS):
            item.add_marker(pytest.mark.slow)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--suite-summary", choices=("full", "fast"), default=None,
                     help="print where the time went at the end, against the whole suite's or the fast lane's budget")


_SUITE_TIMES: dict[str, float] = {}
_FAST_IDS: set[str] = set()
_SUITE_START: list[float] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    import time

    _SUITE_START.append(time.monotonic())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _SUITE_TIMES[report.nodeid] = _SUITE_TIMES.get(report.nodeid, 0.0) + report.duration
    if report.when == "call" and "slow" not in report.keywords:
        _FAST_IDS.add(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    import time

    lane = config.getoption("--suite-summary")
    if lane is None or not _SUITE_START:
        return
    spec = importlib.util.spec_from_file_location("suite_times", Path(__file__).parent / "bench" / "suite_times.py")
    assert spec is not None and spec.loader is not None
    suite_times = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite_times)
    wall_s = time.monotonic() - _SUITE_START[0]
    terminalreporter.section("where the time went")
    terminalreporter.write_line(suite_times.summary(_SUITE_TIMES, wall_s, fast_lane=lane == "fast",
                                                    fast_lane_ids=_FAST_IDS))
