"""The fast lane (``make test-fast``: ``pytest -m "not slow"``) misses no module of the package.

A module has a test in the fast lane when a test file with tests in that lane names it, or names something it
defines (``import``, ``from … import``, ``repo_lens.a.b`` attribute chains, a ``"repo_lens.a.b"`` string, a
``repo-lens <subcommand>`` run through the command's ``main``), or when its own doctests run there (they do,
unless the module is marked otherwise). The heavy markers (browser, jupyterlab, latex, smollm2, training,
study) imply ``slow`` (conftest.py), so the lane is what those leave.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import types
from collections.abc import Iterable
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem

import repo_lens.cli

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "repo_lens"
HEAVY = ("slow", "browser", "jupyterlab", "latex", "smollm2", "training", "study")


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")




def only_a_docstring(path: Path) -> bool:
    """A module with nothing but its docstring (a sub-package's ``__init__`` that names what it holds): no code
    to test."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


PACKAGE_MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py")) if not only_a_docstring(path)}
BY_FILE_NAME: dict[str, set[str]] = {}
for _name, _path in PACKAGE_MODULES.items():
    BY_FILE_NAME.setdefault(_path.name, set()).add(_name)
SUBCOMMANDS = {name.rsplit(".", 1)[1] for name in PACKAGE_MODULES if name.startswith("repo_lens.cli.")}


def defining_modules(dotted: str) -> set[str]:
    """The package modules a dotted reference reaches: the longest module prefix, the modules its
    attributes are, and the module that defines the object it ends on."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix not in PACKAGE_MODULES:
            continue
        found = {prefix}
        if prefix.endswith("__main__"):  # importing it would run the command
            return found
        try:
            obj: object = importlib.import_module(prefix)
        except ImportError:  # an optional extra that is not installed (the app without streamlit)
            return found
        for attribute in parts[end:]:
            obj = getattr(obj, attribute, None)
            if isinstance(obj, types.ModuleType):
                found.add(obj.__name__)
                continue
            if getattr(obj, "__module__", None) in PACKAGE_MODULES:
                found.add(obj.__module__)
            break
        return found
    return set()


def references(source: str) -> set[str]:
    """The package modules a test file's code names (see the module's docstring)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("repo_lens"):
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.startswith("repo_lens")]
        elif isinstance(node, ast.Attribute):
            parts, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "repo_lens":
                names = [".".join(["repo_lens", *reversed(parts)])]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("repo_lens."):
            names = [node.value.split()[0]]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in BY_FILE_NAME \
                and node.value != "__init__.py":
            found |= BY_FILE_NAME[node.value]  # PACKAGE / "app" / "streamlit_app.py": a script run by path
        elif isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            strings = [element.value for element in node.elts if isinstance(element, ast.Constant)]
            for flag, module in zip(strings, strings[1:]):
                if flag == "-m" and isinstance(module, str) and f"{module}.__main__" in PACKAGE_MODULES:
                    found.add(f"{module}.__main__")  # [sys.executable, "-m", "repo_lens.cli", …]
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value == "repo-lens" and len(node.elts) > 1:
                first = node.elts[1]  # ["repo-lens", "trace", …]
            if isinstance(first, ast.Constant) and first.value in SUBCOMMANDS:
                names = [f"repo_lens.cli.{first.value}"]
        for name in names:
            found |= defining_modules(name)
    return found


def covered(test_files: Iterable[Path], doctest_modules: Iterable[str]) -> set[str]:
    found = set(doctest_modules)
    for path in set(test_files):
        found |= references(path.read_text(encoding="utf-8"))
    return found


def fast_lane_of_this_session(session: pytest.Session) -> tuple[set[Path], set[str]] | None:
    """The fast lane's test files and doctest modules, read off this session's items when it collected the
    whole suite (None when it collected only part of it)."""
    config = session.config
    whole = sorted(str(ROOT / path) for path in config.getini("testpaths"))
    if config.option.keyword or sorted(str(Path(arg).resolve()) for arg in config.args) != whole:
        return None
    files, doctests = set(), set()
    for item in session.items:
        if any(item.get_closest_marker(marker) for marker in HEAVY):
            continue
        if isinstance(item, DoctestItem):
            doctests.add(module_name(Path(item.path)))
        else:
            files.add(Path(item.path))
    return files, doctests


def fast_lane_collected_anew() -> tuple[set[Path], set[str]]:
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow",
                             "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    files, doctests = set(), set()
    for line in result.stdout.splitlines():
        path = line.split("::", 1)[0]
        if "::" not in line or not path.endswith(".py"):
            continue
        if path.startswith("repo_lens/"):
            doctests.add(module_name(ROOT / path))
        else:
            files.add(ROOT / path)
    return files, doctests


@pytest.mark.slow  # a check on the suite itself, run with the whole suite (make test, CI)
def test_every_package_module_has_a_test_in_the_fast_lane(request):
    lane = fast_lane_of_this_session(request.session) or fast_lane_collected_anew()
    assert len(lane[0]) > 50 and len(lane[1]) > 50, "the fast lane collected too little to judge"
    missing = sorted(set(PACKAGE_MODULES) - covered(*lane))
    assert not missing, ("package modules that no fast-lane test names and whose doctests do not run in the fast "
                         "lane (add a unit test or a doctest that runs in seconds): " + ", ".join(missing))


def test_the_coverage_rule_sees_imports_attributes_strings_and_subcommands():
    found = references("import repo_lens\nfrom repo_lens.analysis import range_stats\n"
                       "repo_lens.plots.export\nmain(['trace', '--model', 'x'])\n"
                       "run(['repo-lens', 'zoo', '--json'])\nrun('repo_lens.cli.tiny')\n"
                       "run([sys.executable, '-m', 'repo_lens.cli', 'zoo'])\nAPP = ROOT / 'streamlit_app.py'\n")
    assert {"repo_lens", "repo_lens.analysis", "repo_lens.plots", "repo_lens.cli.trace", "repo_lens.cli.zoo",
            "repo_lens.cli.tiny", repo_lens.analysis.range_stats.__module__, "repo_lens.cli.__main__",
            "repo_lens.app.streamlit_app", repo_lens.plots.export.__module__} <= found
    assert "repo_lens.cli.train" not in found and "repo_lens.cli.trace" not in references("x = 'trace'\n")


def test_heavy_markers_put_a_test_out_of_the_fast_lane(pytester):
    pytester.makeconftest((ROOT / "conftest.py").read_text(encoding="utf-8"))
    pytester.mkdir("bench").joinpath("suite_times.py").write_text(
        (ROOT / "bench" / "suite_times.py").read_text(encoding="utf-8"), encoding="utf-8")
    pytester.makeini("[pytest]\nmarkers =\n    slow\n    browser\n    jupyterlab\n    latex\n    smollm2\n"
                     "    training\n    study\n")
    pytester.makepyfile(test_two="import pytest\n\n@pytest.mark.browser\ndef test_heavy():\n    pass\n\n"
                                 "def test_light():\n    pass\n")
    result = pytester.runpytest("-m", "not slow", "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, deselected=1)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "--suite-summary=fast")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*where the time went*", "*of the fast lane's 5-minute budget: within it",
                                 "*the 2 slowest tests:*"])


def test_a_module_of_only_a_docstring_has_nothing_to_test(tmp_path):
    (tmp_path / "bare.py").write_text('"""What this sub-package holds."""\n')
    (tmp_path / "code.py").write_text('"""A module."""\n\nVALUE = 1\n')
    assert only_a_docstring(tmp_path / "bare.py") and not only_a_docstring(tmp_path / "code.py")
    assert "repo_lens.model.loaders.grape" not in PACKAGE_MODULES  # its __init__ only names what it holds
    assert "repo_lens.model.loaders.grape.load" in PACKAGE_MODULES
