"""The analyst's dbt project (``dbt_project/`` at the repository root), and nothing that needs its
manifest: this is the module ``dagster-dbt project prepare-and-package --file`` imports."""

import sys
from pathlib import Path

from dagster_dbt import DbtProject

from memory_pipeline.lib.settings import REPO_ROOT

DBT_PROJECT_DIR = REPO_ROOT / "dbt_project"

analytics_dbt = DbtProject(project_dir=DBT_PROJECT_DIR, profiles_dir=DBT_PROJECT_DIR)


def dbt_executable() -> str:
    """The dbt of the running interpreter's environment: `.venv/bin/memory-pipeline` runs without
    `.venv/bin` on PATH."""
    beside = Path(sys.executable).parent / "dbt"
    return str(beside) if beside.exists() else "dbt"
