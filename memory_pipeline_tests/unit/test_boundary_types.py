"""No ``Any`` crosses a package's boundary (issue 21's types): a public function or method that
another package of ``memory_pipeline`` imports or calls names a type for every argument and for its
result. Inside a package ``Any`` may remain where a value is still being checked; at the boundary a
value of unknown shape is ``object`` (the callee narrows it) and JSON is ``lib.jsontypes``' types.

A package is a top-level folder of ``memory_pipeline`` (a domain, ``lib``, ``cli``, ``server``,
``operations``) or one domain's Dagster shell (``defs/<domain>``, ``defs/_shared``); a module at the
top (``definitions``, ``resources``) is its own. Found by reading the source: every
``from memory_pipeline.x import name`` and every ``module.name`` of an imported module."""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

from memory_pipeline import domains

PACKAGE = Path(domains.__file__).resolve().parent
Function = ast.FunctionDef | ast.AsyncFunctionDef


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _owner(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "defs":
        return ".".join(parts[:3])
    return ".".join(parts[:2])


@cache
def _trees() -> dict[str, ast.Module]:
    return {
        _module(p): ast.parse(p.read_text(encoding="utf-8"))
        for p in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in p.parts
    }


def _public(tree: ast.Module) -> dict[str, list[Function]]:
    """A module's functions by name, and each class's public methods (and ``__init__``) under the
    class's name: a caller that holds the class reaches all of them."""
    out: dict[str, list[Function]] = {}
    for node in tree.body:
        if isinstance(node, Function):
            out[node.name] = [node]
        elif isinstance(node, ast.ClassDef):
            out[node.name] = [
                m for m in node.body if isinstance(m, Function) and (not m.name.startswith("_") or m.name == "__init__")
            ]
    return out


def _uses() -> dict[tuple[str, str], set[str]]:
    """(module, name) -> the packages that import it or read it off its module."""
    trees = _trees()
    used: dict[tuple[str, str], set[str]] = defaultdict(set)
    for module, tree in trees.items():
        here = _owner(module)
        alias: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("memory_pipeline"):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in trees:
                        alias[a.asname or a.name] = full
                    else:
                        used[(node.module, a.name)].add(here)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in trees and a.asname:
                        alias[a.asname] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in alias:
                used[(alias[node.value.id], node.attr)].add(here)
    return used


def _any_in(annotation: ast.expr | None) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a quoted annotation
        annotation = ast.parse(annotation.value, mode="eval").body
    return annotation is not None and any(
        (isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any")
        for n in ast.walk(annotation)
    )


def _untyped(fn: Function) -> list[str]:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
    found = [p.arg for p in params if _any_in(p.annotation)]
    return [*found, "return"] if _any_in(fn.returns) else found


@cache
def _crossings() -> dict[str, dict[str, str]]:
    """Owner package -> its public callables another package uses whose annotations hold Any."""
    trees = _trees()
    publics = {module: _public(tree) for module, tree in trees.items()}
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for (module, name), users in sorted(_uses().items()):
        owner = _owner(module)
        others = sorted(u for u in users if u != owner)
        for fn in publics.get(module, {}).get(name, []) if others else []:
            untyped = _untyped(fn)
            if untyped:
                where = name if fn.name == name else f"{name}.{fn.name}"
                out[owner][f"{module}.{where}"] = f"{', '.join(untyped)}: Any; used by {', '.join(others)}"
    return out


OWNERS = sorted({_owner(m) for m in _trees()})


@pytest.mark.parametrize("owner", OWNERS)
def test_no_any_crosses_a_packages_boundary(owner):
    assert _crossings().get(owner, {}) == {}, "Any crosses the boundary here"


def test_the_check_sees_a_crossing():
    """The reader itself: a name imported from another package is found, and Any in it is named."""
    used = _uses()
    assert "memory_pipeline.cli" in used[("memory_pipeline.tower.api", "Tower")]
    fn = ast.parse("def f(a: int, b: 'dict[str, Any]', *c: typing.Any) -> Any: ...").body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert _untyped(fn) == ["b", "c", "return"]
