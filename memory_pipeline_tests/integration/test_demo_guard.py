"""`make demo` starts from an empty store: it never deletes events someone ingested themselves."""

import json

from rich.console import Console

from memory_pipeline.cli.demo import ingested_elsewhere, remove_previous, run_demo, sample_files
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.store import Store
from memory_pipeline_tests.conftest import conversation, cst


def _ingest(store: Store, path, world: str) -> None:
    events = conversation(world, f"{world}-c", cst(2026, 1, 5, 9), ["my own notes", "kept here"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert ingest_file(store, path).inserted == 2


def test_the_demo_refuses_to_wipe_a_store_holding_someone_elses_events(tmp_path, monkeypatch):
    data = tmp_path / "data"
    monkeypatch.setenv("MEMORY_DATA_DIR", str(data))
    monkeypatch.delenv("MEMORY_DATABASE_URL", raising=False)
    data.mkdir()
    db = data / "memory.sqlite"
    store = Store(f"sqlite:///{db}")
    from memory_pipeline import domains
    from memory_pipeline.lib.store.migrate import ensure_schema

    ensure_schema(store, domains.version_locations())
    own = sample_files(data)
    _ingest(store, own[0], "demo1")  # the demo's own sample: fine to wipe
    assert ingested_elsewhere(db, own) == []
    mine, beside = tmp_path / "mine.jsonl", data / "sample" / "my_private_events.jsonl"
    _ingest(store, mine, "me")
    _ingest(store, beside, "me2")  # beside the demo's sample: still not the demo's (it was wiped)
    store.engine.dispose()
    assert ingested_elsewhere(db, own) == sorted([str(mine), str(beside)])
    err = Console(record=True, width=2000)  # two paths under a worker's tmp folder: one line
    assert run_demo(fresh=True, console=Console(record=True), err=err) == 2
    said = " ".join(err.export_text().split())
    assert f"holds events ingested from {beside}, {mine};" in said and "memory-pipeline demo --keep" in said
    assert db.exists()  # nothing deleted
    assert ingested_elsewhere(tmp_path / "absent.sqlite", own) == []


def test_a_fresh_demo_removes_the_previous_demos_state_and_nothing_else(tmp_path):
    data = tmp_path / "data"
    previous = ["memory.sqlite", "memory.sqlite-wal", "dagster_home/dagster.yaml", "objects/aria/README.md"]
    analytics = [
        "analytics.duckdb",
        "analytics.duckdb.next",
        "analytics.duckdb.dbt-parse.msgpack",
        "analytics.duckdb.dbt-builds/analyst_dbt_daily-abc1234-def5678/dbt.log",
        "analytics_parquet/messages/2026-01-05.parquet",
        "analytics_report.png",
    ]
    kept = ["mine.jsonl", "sample/events.jsonl", "logs/sleep/aria/round.json"]
    for name in previous + analytics + kept:
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("x")

    def left() -> set[str]:
        return {str(p.relative_to(data)) for p in data.rglob("*") if p.is_file()}

    remove_previous(data, analytics=False)  # MEMORY_DUCKDB_PATH set: the analyst's files are elsewhere
    assert left() == set(analytics + kept)
    remove_previous(data, analytics=True)
    assert left() == set(kept)
    assert not (data / "analytics.duckdb.dbt-builds").exists() and not (data / "analytics_parquet").exists()
