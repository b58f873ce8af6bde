"""The layering rules of the package (STYLE.md): the platform (lib/) names no domain and imports
no dagster; a domain's core (logic, prompts, I/O) imports no dagster and no other domain's core
(the analyst layer, which exports every domain's tables, reads their ``tables`` modules and
nothing else of them); only defs/, operations/, cli/ and the root modules touch Dagster."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from memory_pipeline import domains

PACKAGE = Path(domains.__file__).resolve().parent
DOMAIN_NAMES = (*domains.DOMAINS, "tower", "sleep", "conversation", "objects", "analyst")
# The layers that read every domain, through their table declarations only.
READERS = ("analyst", "recall")
# Domain cores on disk: the domains with tables, and the analyst layer (no tables of its own).
CORES = (*domains.DOMAINS, "analyst")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def _py(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


@pytest.mark.parametrize("path", _py("lib"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_lib_imports_no_dagster_and_no_domain(path):
    for module in _imports(path):
        assert not module.startswith("dagster"), f"{path}: imports {module}"
        parts = module.split(".")
        assert not (parts[0] == "memory_pipeline" and len(parts) > 1 and parts[1] != "lib"), f"{path}: imports {module}"


@pytest.mark.parametrize(
    "path",
    [p for d in CORES for p in _py(d)],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_domain_cores_import_no_dagster_and_no_other_domain(path):
    own = path.relative_to(PACKAGE).parts[0]
    for module in _imports(path):
        assert not module.startswith("dagster"), f"{path}: imports {module}"
        parts = module.split(".")
        if parts[0] == "memory_pipeline" and len(parts) > 1 and parts[1] in DOMAIN_NAMES:
            # Every domain may read the raw events' tables and rules; nothing else crosses over,
            # except that the analyst layer (to export them) and recall (to rank them) read every
            # domain's table declarations.
            tables = own in READERS and parts[2:] == ["tables"]
            assert parts[1] in (own, "events") or tables, f"{path}: imports {module}"


def _imported_modules(path: Path) -> list[str]:
    """Every module ``path`` imports, at any depth (a function's import too), with ``from a import b``
    also as ``a.b`` (b may be a module)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return out


@pytest.mark.parametrize("path", _py("defs"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_domains_defs_import_no_other_domains_defs_nor_the_layers_above(path):
    # defs/<domain> refers to another domain's assets by key (defs/_shared/keys.py); operations,
    # cli and the code location (definitions.py) build on defs, so an import back is a circle.
    own = path.relative_to(PACKAGE / "defs").parts[0]
    for module in _imported_modules(path):
        parts = module.split(".")
        if parts[0] != "memory_pipeline" or len(parts) < 2:
            continue
        assert parts[1] not in ("operations", "cli", "definitions", "server"), f"{path}: imports {module}"
        if parts[1] == "defs" and len(parts) > 2:
            assert parts[2] in (own, "_shared"), f"{path}: imports {module}"


def test_the_analyst_reads_other_domains_through_their_tables_only():
    imported = {m for p in _py("analyst") for m in _imports(p) if m.startswith("memory_pipeline.temporal")}
    assert imported == {"memory_pipeline.temporal.tables"}


def test_lib_source_names_no_domain():
    for path in _py("lib"):
        if "migrations" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        for name in ("temporal", "tower", "sleep", "objects"):
            assert f"memory_pipeline.{name}" not in text, f"{path} names the {name} domain"


def test_every_domain_has_its_parts():
    for d in domains.DOMAINS:
        for part in ("tables.py", "migrations"):
            assert (PACKAGE / d / part).exists(), f"{d}/{part} missing"
        assert (PACKAGE / "defs" / d / "definitions.py").exists(), f"defs/{d}/definitions.py missing"


def test_the_environment_is_read_in_one_place():
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "settings.py" and path.parent.name == "lib":
            continue
        text = path.read_text(encoding="utf-8")
        for needle in ("os.environ", "os.getenv"):
            assert needle not in text, f"{path.relative_to(PACKAGE)} reads the environment ({needle})"
