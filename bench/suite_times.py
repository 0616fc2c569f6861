"""Where the test suite's time goes: the slowest tests, the time per test folder, the budget.

`make test` and `make test-fast` print this summary at their end (the root conftest.py calls
``summary`` with the durations pytest measured). Run as a script it reads a JUnit XML report, e.g.
one written by ``pytest --junitxml=build/junit.xml``, so that two runs can be compared:

    .venv/bin/python bench/suite_times.py build/junit.xml --slowest 30

Budgets: the whole suite in 20 minutes on 2 CPU cores, the fast lane in 5, and no fast-lane test over 5 s.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from collections.abc import Iterable, Mapping

SUITE_BUDGET_S = 20 * 60
FAST_LANE_BUDGET_S = 5 * 60
FAST_TEST_LIMIT_S = 5.0


def folder_of(test_id: str) -> str:
    """``tests/zoo/test_zoo.py::test_x[a]`` -> ``tests/zoo``; a doctest of ``repo_lens/a/b.py`` -> ``repo_lens (doctests)``."""
    path = test_id.split("::", 1)[0]
    parts = path.split("/")
    if parts[0] == "repo_lens":
        return "repo_lens (doctests)"
    return "/".join(parts[:2]) if len(parts) > 2 else path


def summary(durations: Mapping[str, float], wall_s: float, *, fast_lane: bool, slowest: int = 30,
            fast_lane_ids: Iterable[str] = ()) -> str:
    """The closing summary as text: wall time against the budget, time per folder, the slowest tests,
    and the fast-lane tests over ``FAST_TEST_LIMIT_S`` (``fast_lane_ids``: the ids that belong to it).

    >>> print(summary({"tests/a/test_x.py::test_one": 2.0, "tests/a/test_x.py::test_two": 7.0}, 9.5,
    ...               fast_lane=True, slowest=1, fast_lane_ids=["tests/a/test_x.py::test_two"]))
    ... # doctest: +NORMALIZE_WHITESPACE
    suite time: 9.5 s (0.2 min) of the fast lane's 5-minute budget: within it
    time per folder (sum of test times, 2 tests, 9.0 s):
        9.0 s    2 tests  tests/a
    the 1 slowest tests:
        7.0 s  tests/a/test_x.py::test_two
    fast-lane tests over 5 s (move them to the full suite or make them faster):
        7.0 s  tests/a/test_x.py::test_two
    """
    budget = FAST_LANE_BUDGET_S if fast_lane else SUITE_BUDGET_S
    lane = "the fast lane's" if fast_lane else "the whole suite's"
    verdict = "within it" if wall_s <= budget else f"OVER it by {wall_s - budget:.0f} s"
    lines = [f"suite time: {wall_s:.1f} s ({wall_s / 60:.1f} min) of {lane} {budget // 60}-minute budget: {verdict}"]
    per_folder: dict[str, list[float]] = defaultdict(list)
    for test_id, seconds in durations.items():
        per_folder[folder_of(test_id)].append(seconds)
    total = sum(durations.values())
    lines.append(f"time per folder (sum of test times, {len(durations)} tests, {total:.1f} s):")
    for folder, times in sorted(per_folder.items(), key=lambda item: -sum(item[1])):
        lines.append(f"    {sum(times):7.1f} s {len(times):4d} tests  {folder}")
    ranked = sorted(durations.items(), key=lambda item: -item[1])[:slowest]
    lines.append(f"the {len(ranked)} slowest tests:")
    lines += [f"    {seconds:7.1f} s  {test_id}" for test_id, seconds in ranked]
    fast_ids = set(fast_lane_ids)
    over = sorted(((durations[i], i) for i in fast_ids if durations.get(i, 0.0) > FAST_TEST_LIMIT_S), reverse=True)
    if over:
        lines.append(f"fast-lane tests over {FAST_TEST_LIMIT_S:.0f} s (move them to the full suite or make them faster):")
        lines += [f"    {seconds:7.1f} s  {test_id}" for seconds, test_id in over]
    return "\n".join(lines)


def read_junit(path: str) -> tuple[dict[str, float], float]:
    """Per-test seconds and the suite's time from a JUnit XML report written by pytest."""
    root = ElementTree.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise SystemExit(f"{path} holds no <testsuite>: is it a pytest --junitxml report?")
    durations: dict[str, float] = {}
    for case in suite.iter("testcase"):
        module = (case.get("classname") or "").replace(".", "/")
        test_id = f"{module}.py::{case.get('name')}"
        durations[test_id] = durations.get(test_id, 0.0) + float(case.get("time") or 0.0)
    return durations, float(suite.get("time") or sum(durations.values()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="a JUnit XML report written by pytest --junitxml")
    parser.add_argument("--slowest", type=int, default=30, help="how many of the slowest tests to list")
    parser.add_argument("--fast-lane", action="store_true", help="hold the run against the fast lane's budget")
    args = parser.parse_args(argv)
    durations, wall_s = read_junit(args.junit)
    print(summary(durations, wall_s, fast_lane=args.fast_lane, slowest=args.slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
