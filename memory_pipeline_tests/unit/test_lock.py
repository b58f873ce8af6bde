"""The supply chain: requirements.lock pins every package to one version with the sha256 of its
files (pip installs it with --require-hashes), and it covers requirements.in and pyproject.toml."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from memory_pipeline.lib.settings import REPO_ROOT

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)(?:\s*;\s*(.+?))?\s*\\$")
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}(\s*\\)?$")


def _entries(path) -> dict[str, tuple[str, list[str]]]:
    """{name: (version, hashes)}; a line that is neither a pin, a hash, a comment nor blank fails."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if m := PIN.match(line):
            current = canonicalize_name(m.group(1))
            assert current not in entries, f"{path.name}:{number}: {current} pinned twice"
            entries[current] = (m.group(2), [])
        elif HASH.match(line):
            assert current is not None, f"{path.name}:{number}: a hash before any pin"
            entries[current][1].append(line.split(":", 1)[1].split()[0])
        else:
            raise AssertionError(f"{path.name}:{number}: not a pinned requirement with hashes: {line!r}")
    return entries


def _names(requirements) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def test_every_locked_package_is_pinned_with_its_hashes():
    for name in ("requirements.lock", "requirements-tools.lock"):
        entries = _entries(REPO_ROOT / name)
        assert entries, name
        unhashed = sorted(n for n, (_, hashes) in entries.items() if not hashes)
        assert not unhashed, f"{name}: pinned without a hash: {unhashed}"


def test_the_lock_covers_requirements_in_and_the_project_dependencies():
    lock = _entries(REPO_ROOT / "requirements.lock")
    direct = [
        line.split("#")[0].strip()
        for line in (REPO_ROOT / "requirements.in").read_text(encoding="utf-8").splitlines()
        if line.split("#")[0].strip()
    ]
    assert not _names(direct) - set(lock), "requirements.in names a package the lock lacks: run `make lock`"
    for req in map(Requirement, direct):  # the locked version satisfies requirements.in
        assert req.specifier.contains(lock[canonicalize_name(req.name)][0], prereleases=True), req
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    assert not _names(declared) - _names(direct), "a pyproject dependency is missing from requirements.in"
    # What the distributed set-ups and the MCP endpoint need, at the versions they were built on.
    assert {n: lock[n][0] for n in ("dagster-celery", "dagster-k8s", "celery", "mcp")} == {
        "dagster-celery": "0.29.27",
        "dagster-k8s": "0.29.27",
        "celery": "5.7.0",
        "mcp": "1.30.0",
    }
