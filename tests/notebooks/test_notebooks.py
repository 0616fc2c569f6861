"""The example notebooks: each ``notebooks/NN_*.py`` (jupytext percent format, the source) has its
``.ipynb`` committed with the outputs of a clean run of that very source (notebooks/execute.py),
every figure responsive, in one template, with a static picture (image/png); the sources pass ruff and use only the public API; the text
quotes no number that no output above it shows; and (slow) every notebook runs again without an
error, giving the same kinds of output, when its code or the package changed since its outputs were
stored, and a figure shows as a plotly chart in a real JupyterLab."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import repo_lens
from repo_lens.plots import export_unavailable

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
_spec = importlib.util.spec_from_file_location("notebook_runner", NOTEBOOK_DIR / "execute.py")
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)
SOURCES = runner.SOURCES
IDS = [source.stem for source in SOURCES]
PUBLIC_SUBPACKAGES = {"analysis", "data", "plots", "zoo"}  # what the notebooks may import from


def test_every_source_has_its_notebook_and_no_notebook_lacks_a_source():
    assert len(SOURCES) >= 5
    assert sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb")) == sorted(IDS)
    assert not (NOTEBOOK_DIR / "build_notebooks.py").exists()


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_committed_outputs_come_from_the_current_source(source):
    assert runner.problems(source) == []


def test_the_freshness_check_catches_a_stale_notebook(tmp_path):
    source = tmp_path / SOURCES[0].name
    shutil.copy(SOURCES[0], source)
    shutil.copy(runner.notebook_of(SOURCES[0]), runner.notebook_of(source))
    assert runner.problems(source) == []
    source.write_text(source.read_text(encoding="utf-8").replace("import repo_lens\n", "import repo_lens  # edited\n"),
                      encoding="utf-8")
    found = runner.problems(source)
    assert any("hold different cells" in problem for problem in found)
    assert any("were not produced by the code" in problem for problem in found)
    stored = nbformat.read(runner.notebook_of(SOURCES[0]), as_version=4)
    figure = next(output for cell in stored.cells for output in cell.get("outputs", [])
                  if runner.PLOTLY_MIME in output.get("data", {}))
    figure.data.pop("image/png")
    figure.data[runner.PLOTLY_MIME]["layout"]["width"] = 1100
    figure.data[runner.PLOTLY_MIME]["layout"]["template"] = {"layout": {"plot_bgcolor": "#E5ECF6"}}
    stored.cells[0].source += " A position $z = f(h)$."
    for cell in stored.cells:
        if cell.cell_type == "code":
            cell.execution_count = None
            break
    nbformat.write(stored, runner.notebook_of(source))
    shutil.copy(SOURCES[0], source)
    found = "\n".join(runner.problems(source))
    assert "without a static PNG" in found and "1100 px wide" in found and "grey default template" in found
    assert "writes math in TeX ('$z = f(h)$')" in found and "top to bottom" in found


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_every_notebook_shows_figures_and_stays_small(source):
    nb = nbformat.read(runner.notebook_of(source), as_version=4)
    figures = [output for cell in nb.cells for output in cell.get("outputs", [])
               if runner.PLOTLY_MIME in output.get("data", {})]
    assert figures, f"{source.stem} shows no figure"
    assert runner.notebook_of(source).stat().st_size < 3_000_000


def test_sources_pass_ruff():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is in the dev extra: make setup)")
    result = subprocess.run([ruff, "check", "--no-cache", str(NOTEBOOK_DIR)], capture_output=True, text=True,
                            cwd=NOTEBOOK_DIR)
    assert result.returncode == 0, result.stdout + result.stderr


def _repo_lens_references(tree: ast.AST) -> list[tuple[str, int]]:
    """Every ``repo_lens.a.b`` reached by an import or by attributes of the name ``repo_lens``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("repo_lens"):
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.startswith("repo_lens")]
        elif isinstance(node, ast.Attribute):
            parts, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "repo_lens":
                found.append((".".join(["repo_lens", *reversed(parts)]), node.lineno))
    return found


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_notebooks_use_only_the_public_api(source):
    tree = ast.parse(source.read_text(encoding="utf-8"))
    bad = []
    for name, line in _repo_lens_references(tree):
        parts = name.split(".")
        if len(parts) == 1:
            continue
        if parts[1] in PUBLIC_SUBPACKAGES:
            module = importlib.import_module(f"repo_lens.{parts[1]}")
            public = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
            if len(parts) > 2 and parts[2] not in public:
                bad.append(f"line {line}: {name} (not in repo_lens.{parts[1]}'s public names)")
        elif parts[1] not in repo_lens.__all__:
            bad.append(f"line {line}: {name} (repo_lens.{parts[1]} is not public)")
    for node in ast.walk(tree):  # the model's internals: its config, its blocks
        if isinstance(node, ast.Attribute) and node.attr in {"cfg", "blocks"}:
            bad.append(f"line {node.lineno}: .{node.attr}")
    assert not bad, f"{source.name} reaches past the public API:\n" + "\n".join(bad)


NUMBER = re.compile(r"(?<![\w.§-])\d+\.\d+(?![\w.])")
NOT_RESULTS = re.compile(r"arXiv \d{4}\.\d{4,5}|§\s?\d+(\.\d+)*|App\. [A-Z]|Eq\. \d+")


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_numbers_in_the_text_come_from_outputs_above(source):
    """A decimal number in a markdown cell is a result shown by an output above it, or a setting
    the notebook's code passes (``eps=0.2``, ``reference=0.5``); citations (arXiv ids, §, Eq.) aside."""
    nb = nbformat.read(runner.notebook_of(source), as_version=4)
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    shown, missing = code, []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            text = NOT_RESULTS.sub("", cell.source)
            missing += [f"cell {index}: {number}" for number in NUMBER.findall(text) if number not in shown]
        else:
            shown += "\n".join(runner.output_text(output) for output in cell.get("outputs", []))
    assert not missing, f"{source.name}: numbers in the text that no output above shows: {missing}"


@pytest.mark.jupyterlab
@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_notebook_runs_on_the_current_code_with_the_same_kinds_of_output(source):
    """A notebook whose code or package changed since its outputs were stored runs again (make test's two
    workers run two at a time), without an error and giving the same kinds of output; one whose stored outputs
    came from this very code and package needs no new run to show that (``runner.needs_run``, keyed on the
    SHA-256 of both; REPO_LENS_RUN_NOTEBOOKS=1 runs it all the same)."""
    stored = nbformat.read(runner.notebook_of(source), as_version=4)
    if runner.needs_run(source) is None and os.environ.get("REPO_LENS_RUN_NOTEBOOKS") != "1":
        assert stored.metadata["repo_lens"]["package_sha256"] == runner.package_sha256()
        return
    nb, _ = runner.execute(source)  # raises CellExecutionError (naming the cell) when a cell fails
    no_picture = export_unavailable() is not None  # no Chromium: figures come without their static image

    def kinds(notebook):
        found = []
        for cell in (cell for cell in notebook.cells if cell.cell_type == "code"):
            mimes = {mime for output in cell.outputs if output.output_type != "stream" for mime in output.data}
            if no_picture and runner.PLOTLY_MIME in mimes:
                mimes.discard("image/png")
            found.append(sorted(mimes))
        return found

    assert kinds(nb) == kinds(stored)
    assert runner.code_sha256(nb) == stored.metadata["repo_lens"]["code_sha256"]


def test_a_notebook_runs_again_when_its_code_or_the_package_changes(tmp_path, monkeypatch):
    source = tmp_path / SOURCES[0].name
    shutil.copy(SOURCES[0], source)
    stored = nbformat.read(runner.notebook_of(SOURCES[0]), as_version=4)
    stored.metadata["repo_lens"]["package_sha256"] = runner.package_sha256()
    nbformat.write(stored, runner.notebook_of(source))
    assert runner.needs_run(source) is None
    package = tmp_path / "package"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "module.py").write_text("x = 1\n")
    monkeypatch.setattr(runner, "PACKAGE", package)
    before = runner.package_sha256(package)
    (package / "sub" / "__pycache__").mkdir()
    (package / "sub" / "__pycache__" / "module.cpython-311.pyc").write_bytes(b"compiled")
    assert runner.package_sha256(package) == before  # compiled caches are not the package
    (package / "sub" / "module.py").write_text("x = 2\n")
    assert runner.package_sha256(package) != before
    monkeypatch.setattr(runner, "package_sha256", lambda package=package: "another package")
    assert "package changed" in runner.needs_run(source)
    monkeypatch.undo()
    source.write_text(source.read_text(encoding="utf-8") + "\nprint('one more cell')\n", encoding="utf-8")
    assert "code of" in runner.needs_run(source)


@pytest.mark.jupyterlab
@pytest.mark.browser
def test_a_figure_shows_as_a_plotly_chart_in_jupyterlab(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from notebook_browser import CHROMEDRIVER, CHROMIUM, first_chart

    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Chromium and chromedriver (make browser)")
    chart = first_chart(runner.notebook_of(SOURCES[0]), screenshot=tmp_path / "jupyterlab.png")
    assert chart["width"] > 300 and chart["height"] > 200 and chart["charts"] >= 1
    assert chart["width"] <= chart["output_area_width"]  # responsive: no part of the figure behind a scrollbar
    assert (tmp_path / "jupyterlab.png").stat().st_size > 10_000
