"""Where state goes: one rule for every default path (``lib/settings.data_dir``): MEMORY_DATA_DIR,
else ``data/`` of the working directory. Checked on a regular (non-editable) install, where a path
derived from the installed code would land in site-packages: a wheel of the project built with the
venv's own setuptools, installed with --no-deps into a throwaway venv whose dependencies are the
locked ones already installed (a .pth naming the project venv's site-packages)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from memory_pipeline.lib import settings
from memory_pipeline.lib.settings import REPO_ROOT

# Run inside the installed venv: every default path the code resolves, and a Dagster instance
# (the definitions need the dbt project, which a wheel does not ship: see docs/configuration.md).
PATHS = """
import json
from memory_pipeline.analyst import config as analyst_config
from memory_pipeline.analyst.files import AnalyticsFiles
from memory_pipeline.lib import settings
from memory_pipeline.objects import config as objects_config
from memory_pipeline.objects.projection import root_of
from memory_pipeline.operations.runner import get_instance
from memory_pipeline.sleep import config as sleep_config

get_instance().dispose()
files = AnalyticsFiles.at(settings.duckdb_path(), analyst_config.load())
print(json.dumps({
    "store": settings.database_url(),
    "dagster_home": str(settings.dagster_home()),
    "sleep_logs": str(sleep_config.load().logs()),
    "objects": str(root_of(objects_config.load())),
    "duckdb": str(files.duckdb),
    "parquet": str(files.parquet),
    "report": str(files.report),
    "code": settings.__file__,
}))
"""


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}


def _installed(tmp: Path) -> Path:
    """A throwaway venv holding a wheel of the project (not an editable install)."""
    src = tmp / "src"
    shutil.copytree(
        REPO_ROOT / "memory_pipeline", src / "memory_pipeline", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO_ROOT / "pyproject.toml", src / "pyproject.toml")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "wheel"), str(src)], check=True)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "locked_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (wheel,) = (tmp / "wheel").glob("memory_pipeline-*.whl")
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], check=True)
    return venv


def test_a_regular_install_writes_its_state_under_the_working_directory(tmp_path):
    venv = _installed(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MEMORY_DATA_DIR", "MEMORY_DATABASE_URL", "MEMORY_DUCKDB_PATH", "MEMORY_CONFIG_FILE")
        and k not in ("DAGSTER_HOME", "PYTHONPATH", "REDIS_URL", "VIRTUAL_ENV")
    }
    environment.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONDONTWRITEBYTECODE="1")
    before = _tree(venv)

    def run(*args: str) -> str:
        done = subprocess.run(args, cwd=work, env=environment, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    cli = str(venv / "bin" / "memory-pipeline")
    run(cli, "sample")  # data/sample/events.jsonl
    lines = (work / "data" / "sample" / "events.jsonl").read_text(encoding="utf-8").splitlines()
    (work / "few.jsonl").write_text("\n".join(lines[:40]) + "\n", encoding="utf-8")
    run(cli, "ingest", "few.jsonl")  # the store
    paths = json.loads(run(str(venv / "bin" / "python"), "-c", PATHS).strip().splitlines()[-1])

    data = work / "data"
    site = Path(paths.pop("code")).resolve().parents[2]
    assert site.is_relative_to(venv) and site.name == "site-packages"  # the installed copy ran
    assert paths == {
        "store": f"sqlite:///{data / 'memory.sqlite'}",
        "dagster_home": str(data / "dagster_home"),
        "sleep_logs": str(data / "logs" / "sleep"),
        "objects": str(data / "objects"),
        "duckdb": str(data / "analytics.duckdb"),
        "parquet": str(data / "analytics_parquet"),
        "report": str(data / "analytics_report.png"),
    }
    written = _tree(data)
    assert {"memory.sqlite", "sample/events.jsonl", "dagster_home/dagster.yaml"} <= written
    assert any(p.startswith("dagster_home/history/") for p in written)  # the instance's own storage
    assert _tree(venv) == before  # nothing next to the installed code
    assert _tree(work) - {"few.jsonl"} == {"data"} | {f"data/{p}" for p in written}


def test_a_relative_data_dir_is_taken_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMORY_DATA_DIR", "state")
    assert settings.data_dir() == tmp_path.resolve() / "state"
    monkeypatch.delenv("MEMORY_DATA_DIR")
    monkeypatch.delenv("MEMORY_DUCKDB_PATH", raising=False)
    assert settings.data_dir() == tmp_path.resolve() / "data"
    assert settings.duckdb_path() == tmp_path.resolve() / "data" / "analytics.duckdb"
