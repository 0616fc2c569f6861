"""Run the example notebooks and store them with their outputs; check that stored outputs are current.

    python notebooks/execute.py               # run every notebook (make notebooks)
    python notebooks/execute.py 03 05         # run some, by number or name
    python notebooks/execute.py --check       # check only, run nothing (exit status 1 on a problem)

Each ``NN_name.py`` here (jupytext percent format: the source, edited and reviewed as Python) is
run top to bottom in a fresh kernel of this Python, in this folder, and written to
``NN_name.ipynb`` with its outputs. The notebook's metadata records under ``repo_lens`` the SHA-256
of the code cells that produced the outputs (``code_sha256``), the SHA-256 of the repo_lens package
they ran against (``package_sha256``: every file of it), the run's wall time and the repo_lens version,
so :func:`problems` (and tests/notebooks/test_notebooks.py) can tell when the stored outputs no longer
come from the source, without comparing floating-point output byte for byte, and the tests run a
notebook again only when its code or the package changed since its outputs were stored
(:func:`needs_run`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "repo_lens"
SOURCES = sorted(HERE.glob("[0-9][0-9]_*.py"))
PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_DEFAULT_BACKGROUND = "#E5ECF6"  # plotly's own template (grey), which repo_lens.plots.notebook_setup replaces
TEX = re.compile(r"(?<![\\$\w])\$[^$\s][^$\n]*\$(?!\w)|\$\$|\\\(|\\\[")  # $z$, $$…$$, \(…\), \[…\]
TIMEOUT_S = 600  # per cell


def notebook_of(source: Path) -> Path:
    return source.with_suffix(".ipynb")


def read_source(source: Path) -> nbformat.NotebookNode:
    return jupytext.read(source)


def code_sha256(nb: nbformat.NotebookNode) -> str:
    """SHA-256 of the notebook's code cells, in order (markdown edits do not change it)."""
    sources = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    return hashlib.sha256(json.dumps(sources, ensure_ascii=False).encode()).hexdigest()


def package_sha256(package: Path = PACKAGE) -> str:
    """SHA-256 of every file of the package (its path and bytes; caches of compiled Python left out)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and p.suffix not in {".pyc", ".pyo"}):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def needs_run(source: Path) -> str | None:
    """Why the notebook of ``source`` must run again to show that it still runs (None: its stored outputs
    came from a run of this very code against this very package, so a new run would prove nothing more)."""
    path = notebook_of(source)
    if not path.exists():
        return f"{path.name} is missing"
    stored = nbformat.read(path, as_version=4).metadata.get("repo_lens", {})
    if stored.get("code_sha256") != code_sha256(read_source(source)):
        return f"the code of {source.name} changed since {path.name} was run"
    if stored.get("package_sha256") != package_sha256():
        return f"the repo_lens package changed since {path.name} was run"
    return None


def kernel_environment() -> dict[str, str]:
    """This process's environment for the kernel, with no Hub access and, unless set, one thread
    per process for torch (the zoo's models are tiny: on a busy machine one thread runs them many
    times faster than several competing for the cores)."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def execute(source: Path) -> tuple[nbformat.NotebookNode, float]:
    """The notebook of ``source`` after a clean run in a fresh kernel (raises on the first failing
    cell: nbclient's CellExecutionError names it), and the run's wall time in seconds."""
    import repo_lens

    nb = read_source(source)
    client = NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(source.parent)}})
    start = time.perf_counter()
    client.execute(env=kernel_environment())
    seconds = time.perf_counter() - start
    nb.metadata["repo_lens"] = {"code_sha256": code_sha256(nb), "package_sha256": package_sha256(),
                                "seconds": round(seconds, 1),
                                "repo_lens_version": repo_lens.__version__,
                                "executed_by": "python notebooks/execute.py"}
    return nb, seconds


def write(nb: nbformat.NotebookNode, path: Path) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(jupytext.writes(nb, fmt="ipynb"), encoding="utf-8")
    os.replace(temp, path)


def output_text(output: nbformat.NotebookNode) -> str:
    """What an output shows as text (a stream, or the text/plain and text/html of a result)."""
    if output.output_type == "stream":
        return output.text
    data = output.get("data", {})
    return "\n".join(str(data[mime]) for mime in ("text/plain", "text/html") if mime in data)


def problems(source: Path) -> list[str]:
    """Why the committed notebook of ``source`` is not a clean run of the current source (empty: it is)."""
    path = notebook_of(source)
    if not path.exists():
        return [f"{path.name} is missing; run `python notebooks/execute.py {source.stem[:2]}`"]
    stored, current = nbformat.read(path, as_version=4), read_source(source)
    found = []
    rerun = f"run `python notebooks/execute.py {source.stem[:2]}` (or `make notebooks`)"
    if [(c.cell_type, c.source) for c in stored.cells] != [(c.cell_type, c.source) for c in current.cells]:
        found.append(f"{path.name} and {source.name} hold different cells; {rerun}")
    if stored.metadata.get("repo_lens", {}).get("code_sha256") != code_sha256(current):
        found.append(f"{path.name}'s outputs were not produced by the code of {source.name}; {rerun}")
    code = [cell for cell in stored.cells if cell.cell_type == "code"]
    if [cell.execution_count for cell in code] != list(range(1, len(code) + 1)):
        found.append(f"{path.name} was not run top to bottom in one kernel (execution counts "
                     f"{[cell.execution_count for cell in code]}); {rerun}")
    for index, cell in enumerate(stored.cells):
        if cell.cell_type == "markdown" and TEX.search(cell.source):
            found.append(f"{path.name} cell {index} writes math in TeX ({TEX.search(cell.source).group(0)!r}), which "
                         "HTML exports and GitHub show raw without MathJax: write it in Unicode (*z* = *f*(*h*), "
                         "z′ = (1 − p)·z + p·t)")
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                found.append(f"{path.name} cell {index} raised {output.ename}: {output.evalue}")
            found.extend(f"{path.name} cell {index} {problem}" for problem in figure_problems(output.get("data", {})))
            if "application/json" in output.get("data", {}):
                found.append(f"{path.name} cell {index} shows JSON, not a figure (a plotly renderer override?)")
    return found


def figure_problems(data: dict) -> list[str]:
    """What is wrong with a figure's output bundle ``data`` (empty when it is no figure or a good one):
    it needs an ``image/png`` beside the interactive figure, no fixed width (it fills the output area)
    and repo_lens' template rather than plotly's grey default (``repo_lens.plots.notebook_setup``).

    >>> print("\\n".join(figure_problems({PLOTLY_MIME: {"layout": {"width": 1100}}})))
    shows a figure without a static PNG (image/png; run with Chromium installed: `make browser`)
    shows a figure 1100 px wide, not the output area's width (call repo_lens.plots.notebook_setup() first)
    """
    if PLOTLY_MIME not in data:
        return []
    layout = data[PLOTLY_MIME].get("layout", {})
    found = []
    if "image/png" not in data:
        found.append("shows a figure without a static PNG (image/png; run with Chromium installed: `make browser`)")
    if layout.get("width") is not None:
        found.append(f"shows a figure {layout['width']} px wide, not the output area's width "
                     "(call repo_lens.plots.notebook_setup() first)")
    if layout.get("template", {}).get("layout", {}).get("plot_bgcolor") == PLOTLY_DEFAULT_BACKGROUND:
        found.append("shows a figure in plotly's grey default template, not repo_lens' (make it after "
                     "repo_lens.plots.notebook_setup())")
    return found


def select(names: list[str]) -> list[Path]:
    if not names:
        return SOURCES
    chosen = [source for source in SOURCES if any(source.stem == name or source.stem.startswith(name)
                                                  or source.name == name for name in names)]
    unknown = [name for name in names if not any(source.stem.startswith(Path(name).stem) for source in chosen)]
    if unknown:
        raise SystemExit(f"no notebook {', '.join(unknown)}; there are {', '.join(s.stem for s in SOURCES)}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebooks to run (e.g. 03 or 03_niah_attention_mass); default all")
    parser.add_argument("--check", action="store_true", help="check the stored notebooks only, run nothing")
    args = parser.parse_args(argv)
    sources = select(args.names)
    if args.check:
        found = [problem for source in sources for problem in problems(source)]
        print("\n".join(found) or f"{len(sources)} notebooks are current")
        return 1 if found else 0
    for source in sources:
        print(f"{source.stem}: running …", flush=True)
        nb, seconds = execute(source)
        write(nb, notebook_of(source))
        size = notebook_of(source).stat().st_size
        print(f"{source.stem}: {seconds:.1f} s, {size / 1e6:.2f} MB -> {notebook_of(source).name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
