"""The layers of repo_lens, checked from the source: no import from a lower layer to a higher one,
no import cycle, and (once the registry migration lands) no mechanism kind named outside
repo_lens/model/. Every import counts: module level, inside functions, under TYPE_CHECKING, and
``importlib.import_module("repo_lens...")`` with a literal name. The layer table of
docs/architecture.md states the same layers and is checked against LAYERS below."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "repo_lens"

# (path under repo_lens/, layer, group); a path ending in "/" covers the folder
LAYERS: list[tuple[str, int, str]] = [
    ("errors.py", 0, "base"), ("atomic.py", 0, "base"), ("run_lock.py", 0, "base"), ("validation.py", 0, "base"),
    ("options.py", 0, "base"),
    ("model/", 1, "model"),
    ("data/", 1, "data"),
    ("lens.py", 2, "lens"), ("capture.py", 2, "lens"), ("trace.py", 2, "lens"), ("inputs.py", 2, "lens"),
    ("trace_file.py", 2, "lens"), ("protocol.py", 2, "lens"), ("lens_inputs.py", 2, "lens"),
    ("train/", 3, "train/zoo"), ("zoo/", 3, "train/zoo"),
    ("analysis/", 3, "analysis"), ("hf/", 3, "analysis"), ("interventions/", 3, "analysis"),
    ("plots/", 4, "plots"),
    ("loading.py", 5, "loading"),
    ("studies/", 6, "studies"),
    ("cli/", 7, "cli"), ("cli_args.py", 7, "cli"), ("__main__.py", 7, "cli"), ("__init__.py", 7, "cli"),
    ("app/", 8, "app"),
]
# groups that share a layer but may not import each other
SEPARATE_PEERS = {frozenset({"model", "data"})}
# the one import up the layers, allowed inside a function only (never at module level): Trace.plot
# draws a trace with repo_lens.plots, and plotly loads only when a figure is asked for
UPWARD_IN_FUNCTION = {("repo_lens.trace", "repo_lens.plots.notebook")}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def module_files() -> dict[str, Path]:
    """{dotted module name: file} for every module of the package."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def layer_of(path: Path) -> tuple[int, str] | None:
    relative = path.relative_to(PACKAGE).as_posix()
    for entry, layer, group in LAYERS:
        if relative == entry or (entry.endswith("/") and relative.startswith(entry)):
            return layer, group
    return None


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of dotted ``name`` that is a repo_lens module (None outside repo_lens)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every repo_lens module that ``module`` imports, wherever the import statement sits."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def add(name: str, line: int) -> None:
        target = _known(name, modules)
        if target is not None and target != module:
            found.append(Import(module, target, path, line))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in modules else base, node.lineno)
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                add(first.value, node.lineno)
    return found


def _is_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module")


def import_graph() -> list[Import]:
    modules = module_files()
    return [edge for module, path in modules.items() for edge in imports_of(module, path, modules)]


def allowed(importer: tuple[int, str], imported: tuple[int, str]) -> bool:
    (layer_a, group_a), (layer_b, group_b) = importer, imported
    if frozenset({group_a, group_b}) in SEPARATE_PEERS:
        return False
    return layer_b <= layer_a


def function_import_lines(path: Path) -> set[int]:
    """Lines of the import statements inside a function of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {inner.lineno for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for inner in ast.walk(node) if isinstance(inner, (ast.Import, ast.ImportFrom))}


def test_every_module_has_a_layer():
    unmapped = [str(path.relative_to(ROOT)) for path in module_files().values() if layer_of(path) is None]
    assert not unmapped, f"modules missing from LAYERS (and docs/architecture.md's layer table): {unmapped}"


def test_imports_only_go_down_the_layers():
    modules = module_files()
    violations = []
    for edge in import_graph():
        importer, imported = layer_of(modules[edge.importer]), layer_of(modules[edge.imported])
        if importer is None or imported is None:
            continue  # reported by test_every_module_has_a_layer
        if (edge.importer, edge.imported) in UPWARD_IN_FUNCTION and edge.line in function_import_lines(edge.path):
            continue
        if not allowed(importer, imported):
            violations.append(f"{edge.importer} -> {edge.imported} (layer {importer[0]} {importer[1]} -> "
                              f"layer {imported[0]} {imported[1]}) at {edge.where()}")
    assert not violations, "imports against the layer order:\n" + "\n".join(sorted(set(violations)))


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; components of one node are returned too."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = lowlink[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                lowlink[node] = min(lowlink[node], lowlink[successor])
            elif successor in on_stack:
                lowlink[node] = min(lowlink[node], index[successor])
        if lowlink[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_strongly_connected_components_find_cycles_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": set(), "f": {"f", "d"}}
    components = sorted(strongly_connected_components(graph))
    assert components == [["a", "b", "c"], ["d"], ["e"], ["f"]]


def test_no_import_cycles():
    edges = import_graph()
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
    cycles = []
    for component in strongly_connected_components(graph):
        if len(component) > 1:
            members = set(component)
            inside = sorted({f"  {e.importer} -> {e.imported} at {e.where()}" for e in edges
                             if e.importer in members and e.imported in members})
            cycles.append(f"cycle among {component}:\n" + "\n".join(inside))
    assert not cycles, "import cycles (function-level imports count):\n" + "\n".join(cycles)


def test_the_import_scanner_sees_every_kind_of_import(tmp_path, monkeypatch):
    package = tmp_path / "repo_lens"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py", "c.py", "d.py", "e.py", "sub/__init__.py", "sub/f.py"):
        (package / name).write_text("")
    (package / "sub" / "g.py").write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import repo_lens.a\n"
        "from repo_lens import b, InputError\n"
        "from . import f\n"
        "from ..c import thing\n"
        "if TYPE_CHECKING:\n    from repo_lens.d import Type\n"
        "def later():\n    import importlib\n    import json\n    from repo_lens.e import thing\n"
        "    return importlib.import_module('repo_lens.sub.f')\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    modules = module_files()
    found = {(edge.imported, edge.line) for edge in imports_of("repo_lens.sub.g", package / "sub" / "g.py", modules)}
    assert found == {("repo_lens.a", 3), ("repo_lens.b", 4), ("repo_lens", 4), ("repo_lens.sub.f", 5),
                     ("repo_lens.c", 6), ("repo_lens.d", 8), ("repo_lens.e", 12), ("repo_lens.sub.f", 13)}


def test_layer_rules():
    assert allowed((3, "analysis"), (1, "model")) and allowed((3, "analysis"), (3, "train/zoo"))
    assert not allowed((1, "model"), (2, "lens")) and not allowed((1, "data"), (1, "model"))
    assert not allowed((1, "model"), (1, "data")) and allowed((1, "data"), (0, "base"))
    assert layer_of(PACKAGE / "__init__.py") == (7, "cli")
    assert layer_of(PACKAGE / "model" / "loaders" / "device_map.py") == (1, "model")
    assert layer_of(PACKAGE / "zoo" / "__init__.py") == (3, "train/zoo")
    assert layer_of(PACKAGE / "app" / "streamlit_app.py") == (8, "app") and not allowed((7, "cli"), (8, "app"))


def documented_layers() -> set[tuple[str, int, str]]:
    """(path, layer, group) from the rows of docs/architecture.md's layer table ("| 0 base | `errors.py`, … |")."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = set()
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        number_and_group = re.fullmatch(r"(\d+) (\S+)", cells[0]) if len(cells) >= 3 else None
        if number_and_group:
            for path in re.findall(r"`([^`]+)`", cells[1]):
                rows.add((path, int(number_and_group[1]), number_and_group[2]))
    return rows


def test_documented_layer_table_states_these_layers():
    assert documented_layers() == set(LAYERS)


def _not_literals(tree: ast.AST) -> set[int]:
    """Constants that are no string literal of their own: docstrings and the text parts of f-strings."""
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, owners) and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)}
    f_string_parts = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    return docstrings | f_string_parts


def kind_literals(path: Path, kinds: set[str]) -> list[str]:
    """``file:line: 'kind'`` for every string literal in code (not docstrings) equal to a kind."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _not_literals(tree)
    return [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in kinds
            and id(node) not in skipped]


def test_kind_literal_scanner(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    source = tmp_path / "m.py"
    source.write_text('"""Docs may say \'rope\'."""\n'
                      'def f(kind):\n    """rope"""\n    return kind == "rope" or kind in ("nope", "ropey")\n'
                      'LABEL = f"{1}rope"\n')
    assert kind_literals(source, {"rope", "nope"}) == ["m.py:4: 'rope'", "m.py:4: 'nope'"]


def test_no_mechanism_kind_is_named_outside_the_model():
    from repo_lens.model.registry import mechanism_kinds

    kinds = set(mechanism_kinds())
    assert {"rope", "nope", "repo"} <= kinds
    files = [path for path in sorted(PACKAGE.rglob("*.py")) if not path.is_relative_to(PACKAGE / "model")]
    named = [offence for path in files for offence in kind_literals(path, kinds)]
    assert not named, ("mechanism kinds named outside repo_lens/model/ (ask repo_lens.model.registry "
                       "instead):\n" + "\n".join(named))
