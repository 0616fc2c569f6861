"""No public function of the package takes more than 8 parameters: past the essential ones, settings are
grouped in a typed options object (``SpacedTokensStyle``, ``NiahSpec``, ``RunOptions`` …). Public: a
module-level function or a method of a module-level class, neither named with a leading underscore;
``self``/``cls`` are not counted, ``*args`` and ``**kwargs`` are. The exemptions below say why."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "repo_lens"
LIMIT = 8
# "path:qualified name" -> why it may take more
EXEMPT = {
    "model/compat/generate.py:GenerateInterface.generate":
        "mirrors TransformerLens' HookedTransformer.generate, keyword for keyword, so that its callers run unchanged",
    "model/compat/forward.py:ForwardInterface.forward":
        "mirrors TransformerLens' HookedTransformer.forward, keyword for keyword, so that its callers run unchanged",
}


def parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> int:
    args = function.args
    names = [arg.arg for arg in args.posonlyargs + args.args + args.kwonlyargs]
    if method and names and names[0] in ("self", "cls") and not _is_static(function):
        names = names[1:]
    return len(names) + (args.vararg is not None) + (args.kwarg is not None)


def _is_static(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(decorator, ast.Name) and decorator.id == "staticmethod" for decorator in function.decorator_list)


def public_functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """(qualified name, node, is a method) of the module's public functions and its public classes' public methods."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, bool]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            found.append((node.name, node, False))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            found += [(f"{node.name}.{item.name}", item, True) for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_")]
    return found


def over_limit(package: Path = PACKAGE) -> dict[str, int]:
    """"path:qualified name" -> parameters, for the public functions over the limit."""
    over = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name, node, method in public_functions(tree):
            count = parameter_count(node, method)
            if count > LIMIT:
                over[f"{path.relative_to(package).as_posix()}:{name}"] = count
    return over


def test_no_public_function_takes_more_than_8_parameters():
    over = {name: count for name, count in over_limit().items() if name not in EXEMPT}
    assert not over, ("public functions over 8 parameters; group the settings past the essential ones in a frozen, "
                      "keyword-built options dataclass (the old keywords deprecated for a release):\n"
                      + "\n".join(f"{name} ({count})" for name, count in sorted(over.items())))


def test_the_exemptions_still_need_it_and_say_why():
    over = over_limit()
    for name, reason in EXEMPT.items():
        assert name in over, f"{name} is within the limit now; drop its exemption"
        assert len(reason) > 20


def test_the_count_leaves_out_self_and_private_names(tmp_path):
    (tmp_path / "sample.py").write_text(
        "def wide(a, b, c, d, e, f, g, h, *, i=0): ...\n"
        "def _private(a, b, c, d, e, f, g, h, i): ...\n"
        "def fits(a, b, c, d, e, f, *args, **kwargs): ...\n"
        "class Public:\n"
        "    def method(self, a, b, c, d, e, f, g, h): ...\n"
        "    def wider(self, a, b, c, d, e, f, g, h, i): ...\n"
        "    @staticmethod\n"
        "    def static(self, a, b, c, d, e, f, g, h): ...\n"
        "class _Hidden:\n"
        "    def wider(self, a, b, c, d, e, f, g, h, i): ...\n"
        "def outer():\n"
        "    def inner(a, b, c, d, e, f, g, h, i): ...\n")
    assert over_limit(tmp_path) == {"sample.py:wide": 9, "sample.py:Public.wider": 9, "sample.py:Public.static": 9}
