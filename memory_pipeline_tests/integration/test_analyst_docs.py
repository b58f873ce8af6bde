"""Every example query of docs/analysts.md returns rows on the demo's data: the demo runs once (its
embedded default: SQLite, the in-process cache, the offline model) in a temporary data folder, then
each SQL statement of the page runs, read-only, as an analyst would run it."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
from rich.console import Console

from memory_pipeline.lib.settings import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "analysts.md"

# One worker for the module: its demo is module-scoped, and each worker would run its own.
pytestmark = pytest.mark.xdist_group("analyst_docs")


def statements(page: Path = PAGE) -> list[str]:
    """The SQL statements of the page's ```sql blocks, in order (one per `;`)."""
    blocks = re.findall(r"```sql\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    out = [s.strip() for block in blocks for s in block.split(";")]
    return [s for s in out if any(line and not line.startswith("--") for line in map(str.strip, s.splitlines()))]


def test_the_page_has_its_statements():
    found = statements()
    assert len(found) >= 10
    assert any("mart_llm_cost_by_data_day" in s for s in found)
    assert any("mart_temporal_gaps" in s for s in found)
    assert any("mart_sleep_snapshot_changes" in s for s in found)


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory, monkeypatch_module) -> Path:
    from memory_pipeline.cli.demo import run_demo

    data = tmp_path_factory.mktemp("demo") / "data"
    for name in ("MEMORY_DATABASE_URL", "REDIS_URL", "DAGSTER_HOME", "DAGSTER_PG_URL", "MEMORY_DUCKDB_PATH"):
        monkeypatch_module.delenv(name, raising=False)
    monkeypatch_module.setenv("MEMORY_DATA_DIR", str(data))
    monkeypatch_module.setenv("DAGSTER_HOME", str(data / "dagster_home"))  # restored after the module
    console = Console(record=True, width=200)
    assert run_demo(fresh=True, console=console, err=console) == 0, console.export_text()[-3000:]
    return data / "analytics.duckdb"


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.e2e
@pytest.mark.parametrize("n", range(len(statements())))
def test_every_example_query_returns_rows_after_the_demo(demo_file, n):
    sql = statements()[n]
    with duckdb.connect(str(demo_file), read_only=True) as con:
        con.execute("SET TimeZone = 'Asia/Shanghai'")
        result = con.execute(sql)
        types = [str(d[1]) for d in result.description]
        rows = result.fetchall()
    assert rows, f"no rows:\n{sql}"
    assert "HUGEINT" not in types, f"a HUGEINT column (pandas reads it as float64):\n{sql}"
