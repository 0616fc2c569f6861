"""The example notebooks (notebooks/*.ipynb) are committed without outputs and run without errors."""

from __future__ import annotations

from pathlib import Path

import nbclient  # the `notebooks` extra, installed by `make setup`
import nbformat
import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}; run `python notebooks/build_notebooks.py`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_notebook_is_stripped(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code_cells, f"{path.name} has no code cells"
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.outputs == [], f"{path.name} cell {index} has outputs; rebuild with notebooks/build_notebooks.py"
        assert cell.execution_count is None, f"{path.name} cell {index} has execution_count {cell.execution_count}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the kernel inherits the environment
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [output for output in cell.outputs if output.output_type == "error"]
        assert not errors, (
            f"{path.name} cell {index} raised {errors[0].ename}: {errors[0].evalue}"
        )
