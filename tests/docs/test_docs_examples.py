"""Every code example of README.md and docs/ runs.

Each ```python and ```bash block is executed, offline (``HF_HUB_OFFLINE=1``), in a scratch
directory that links the repository's top-level folders (so ``bench/…`` or ``tests/…`` resolve) and
its own ``.venv`` to this interpreter's environment. A page's python blocks run in order in one
namespace (a later block may use an earlier one's names); its bash blocks run one by one in the
same scratch directory. All python blocks of all pages share one interpreter process (torch is
imported once), each page with a fresh namespace and directory.

A block whose first line is a comment starting with ``needs`` says what it needs, and that
comment is the reason shown for not running it:

- ``# needs a GPU …`` / ``# needs a CUDA GPU …``: run only where CUDA is available;
- ``# needs Chromium …``: run only where a Chromium is installed;
- ``# needs …`` anything else (the network, several GPUs, a cluster, a terminal session), or one
  of the above together with something else (``needs the network and a GPU``): never run.

Any other fenced block must be one of the non-code languages in ``NOT_RUN`` (output, BibTeX, …),
so that no example escapes by its language tag.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RUN = ("python", "bash")
NOT_RUN = ("", "text", "console", "bibtex", "yaml", "json", "toml")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
                   re.MULTILINE | re.DOTALL)
NEEDS = re.compile(r"^#\s*(needs\b.*)$", re.IGNORECASE)
# top-level entries not linked into the scratch directory (outputs, caches, version control)
UNLINKED = {".git", ".venv", "build", "runs", "site", ".pytest_cache"}
PYTHON_TIMEOUT_S = 1800
BASH_TIMEOUT_S = 900


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    lang: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def needs(self) -> str | None:
        first = self.code.lstrip("\n").split("\n", 1)[0].strip()
        match = NEEDS.match(first)
        return match.group(1) if match else None


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_in(text: str, page: str) -> list[Block]:
    """The fenced blocks of a Markdown ``text``, their code dedented to the fence's indentation."""
    return [Block(page, text.count("\n", 0, match.start()) + 1, match["lang"].lower(), textwrap.dedent(match["code"]))
            for match in FENCE.finditer(text)]


ALL_BLOCKS = [block for path in pages()
              for block in blocks_in(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())]
RUNNABLE = [block for block in ALL_BLOCKS if block.lang in RUN]


@cache
def have_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@cache
def have_chromium() -> bool:
    from repo_lens.plots.export import find_browser

    return find_browser() is not None


def skip_reason(block: Block) -> str | None:
    """Why ``block`` is not run here (its own ``# needs …`` comment), or None to run it."""
    needs = block.needs
    if needs is None:
        return None
    what = re.split(r"[:;(]", needs, maxsplit=1)[0]
    if " and " in what:
        return needs
    if re.match(r"needs an? (?:CUDA )?GPU\b(?!s)", what, re.IGNORECASE):
        return None if have_cuda() else needs
    if re.match(r"needs Chromium\b", what, re.IGNORECASE):
        return None if have_chromium() else needs
    return needs


def scratch_dir(base: Path, name: str) -> Path:
    """A fresh directory that links the repository's top-level entries and ``.venv`` -> this environment."""
    directory = base / re.sub(r"[^\w.-]+", "_", name)
    directory.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in UNLINKED:
            (directory / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    (directory / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return directory


def example_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", NO_MKDOCS_2_WARNING="1", PYTHONUNBUFFERED="1")
    env.setdefault("OMP_NUM_THREADS", "1")  # the examples use small models: one thread is fastest on a busy CPU
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("PYTHONPATH", None)
    return env


# One process runs every page's python blocks: a fresh namespace and working directory per page; the
# blocks of a page run in order, and after a failure its later blocks are reported as not run.
DRIVER = r"""
import contextlib, json, linecache, os, sys, traceback
pages = json.load(open(sys.argv[1]))
results = {}
for page in pages:
    os.chdir(page["dir"])
    namespace, failed = {"__name__": "__main__"}, None
    for block in page["blocks"]:
        if failed:
            results[block["id"]] = f"not run: the block at {failed} failed"
            continue
        # the block's source, readable back as a file's would be (nnsight compiles a trace's with-block from it)
        linecache.cache[block["id"]] = (len(block["code"]), None, block["code"].splitlines(True), block["id"])
        try:
            with contextlib.redirect_stdout(sys.stderr):
                exec(compile(block["code"], block["id"], "exec"), namespace)
            results[block["id"]] = "ok"
        except BaseException:
            failed = block["id"]
            results[block["id"]] = traceback.format_exc()
json.dump(results, open(sys.argv[2], "w"))
"""


@pytest.fixture(scope="module")
def python_results(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("python-examples")
    by_page: dict[str, list[Block]] = {}
    for block in RUNNABLE:
        if block.lang == "python" and skip_reason(block) is None:
            by_page.setdefault(block.page, []).append(block)
    plan = [{"dir": str(scratch_dir(base, page)),
             "blocks": [{"id": block.id, "code": block.code} for block in blocks]}
            for page, blocks in by_page.items()]
    (base / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", DRIVER, str(base / "plan.json"), str(base / "results.json")],
                          env=example_env(), capture_output=True, text=True, timeout=PYTHON_TIMEOUT_S)
    if not (base / "results.json").exists():
        pytest.fail(f"the example runner died (exit {done.returncode}):\n{done.stderr[-6000:]}")
    return json.loads((base / "results.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def bash_dirs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("bash-examples")
    return {page: scratch_dir(base, page) for page in sorted({block.page for block in RUNNABLE})}


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in RUNNABLE if b.lang == "python"], ids=lambda b: b.id)
def test_python_example_runs(block: Block, python_results):
    reason = skip_reason(block)
    if reason:
        pytest.skip(reason)
    outcome = python_results.get(block.id, "not run")
    assert outcome == "ok", f"{block.id}:\n{outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in RUNNABLE if b.lang == "bash"], ids=lambda b: b.id)
def test_bash_example_runs(block: Block, bash_dirs):
    reason = skip_reason(block)
    if reason:
        pytest.skip(reason)
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=bash_dirs[block.page],
                          env=example_env(), capture_output=True, text=True, timeout=BASH_TIMEOUT_S)
    assert done.returncode == 0, f"{block.id} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


def test_every_fenced_block_is_run_or_not_code():
    """A block is ```python or ```bash (and runs), or a language that is no code to run."""
    odd = [f"{block.id} ```{block.lang}" for block in ALL_BLOCKS if block.lang not in RUN + NOT_RUN]
    assert not odd, f"fenced blocks in a language the example tests neither run nor allow: {odd}"


def test_the_pages_hold_examples():
    """The extraction finds the README's quickstart and the skip comments of the Hub examples."""
    readme = [block for block in RUNNABLE if block.page == "README.md"]
    assert any("zoo:bytes1k-repo" in block.code and skip_reason(block) is None for block in readme)
    hub = [block for block in readme if "SakanaAI/RePo-OLMo2-1B-stage2-L5" in block.code]
    assert hub and all(block.needs and "network" in block.needs for block in hub)


def test_needs_comments_decide_what_runs():
    block = Block("x.md", 1, "python", "# needs the network: downloads a model\nprint(1)\n")
    assert skip_reason(block) == "needs the network: downloads a model"
    assert skip_reason(Block("x.md", 1, "bash", "\n# needs a SLURM cluster\nsrun true\n")) == "needs a SLURM cluster"
    assert skip_reason(Block("x.md", 1, "python", "import repo_lens  # needs nothing\n")) is None
    gpu_and_more = "# needs the network and a GPU: downloads a model\n"
    assert skip_reason(Block("x.md", 1, "python", gpu_and_more)) == gpu_and_more[2:].strip()
    several = Block("x.md", 1, "python", "# needs several GPUs and a 7B checkpoint\n")
    assert skip_reason(several) == "needs several GPUs and a 7B checkpoint"
    gpu = Block("x.md", 1, "bash", "# needs a CUDA GPU with 10 GB\nnvidia-smi\n")
    assert skip_reason(gpu) == (None if have_cuda() else "needs a CUDA GPU with 10 GB")
    found = blocks_in("Text\n\n```python\nprint(1)\n```\n\n  ```bash\n  ls\n  ```\n", "x.md")
    assert [(block.line, block.lang, block.code) for block in found] == [(3, "python", "print(1)\n"), (7, "bash", "ls\n")]

