"""The analyst layer without services: every table is exported (with a DuckDB type for every
column), the registry and the Dagster side agree, the config is strict, the file is replaced
atomically under readers, writers queue, and an export on a SQLite store replaces exactly the
days of its window (the PostgreSQL path and dbt are in integration/test_analyst.py)."""

from __future__ import annotations

import os
import threading
import time
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb
import pytest
from dagster_dbt import DbtCliResource
from sqlalchemy import insert, select

from memory_pipeline import domains
from memory_pipeline.analyst import config as analyst_config
from memory_pipeline.analyst import logic, reports
from memory_pipeline.analyst.config import AnalystConfig
from memory_pipeline.analyst.exports import _frame, export_tables
from memory_pipeline.analyst.files import AnalyticsFiles, prune_dbt_builds, publishing, writer_lock
from memory_pipeline.analyst.logic import DayWindow
from memory_pipeline.analyst.registry import BY_NAME, EXPORTS, NOT_EXPORTED, export_table, split_tables
from memory_pipeline.events.ingest import event_line, ingest_file
from memory_pipeline.lib.settings import ConfigError
from memory_pipeline.lib.store import Store, metadata
from memory_pipeline.lib.store.migrate import ensure_schema

CST = ZoneInfo("Asia/Shanghai")


def test_every_table_of_every_domain_is_exported():
    domains.load_tables()
    exported = {e.table.name for e in EXPORTS}
    assert exported | set(NOT_EXPORTED) == set(metadata.tables), "add the table to analyst/registry.py"
    assert not exported & set(NOT_EXPORTED) and all(NOT_EXPORTED.values())
    assert len(BY_NAME) == len(EXPORTS)  # export names are unique


@pytest.mark.parametrize("export", EXPORTS, ids=lambda e: e.name)
def test_every_column_has_a_duckdb_type_and_the_day_column_exists(export):
    cols = logic.columns(export)
    assert [c for c, _ in cols][: len(export.table.columns)] == [c.name for c in export.table.columns]
    if export.by_day:
        assert export.day_column in export.table.c and cols[-1] == ("cst_day", "DATE")
    assert logic.create_sql(export).startswith(f'CREATE TABLE IF NOT EXISTS "{export.name}"')
    with duckdb.connect() as con:  # the DDL and the insert of a batch are valid DuckDB
        con.execute(logic.create_sql(export))
        con.register("incoming", _frame(export, []))
        params = ["Asia/Shanghai"] if export.by_day and not export.day_is_date else []
        con.execute(logic.insert_sql(export, "incoming"), params)


def test_the_registry_and_the_dagster_side_agree():
    from memory_pipeline.defs.analyst.assets import UPSTREAM

    assert set(UPSTREAM) == set(BY_NAME)
    assert {v: sorted(p.name for p in ps) for v, ps in split_tables().items()} == {
        "temporal_summaries": ["temporal_day_summaries", "temporal_month_summaries", "temporal_year_summaries"]
    }
    with pytest.raises(KeyError, match="no exported table 'nope'"):
        export_table("nope")


def test_day_windows_and_parquet_paths():
    w = DayWindow(date(2025, 12, 30), date(2026, 1, 2))
    assert len(w) == 4 and list(w.days())[-1] == date(2026, 1, 2) and str(w) == "2025-12-30..2026-01-02"
    assert str(DayWindow(date(2026, 1, 2), date(2026, 1, 2))) == "2026-01-02"
    with pytest.raises(ValueError, match="empty day window"):
        DayWindow(date(2026, 1, 2), date(2026, 1, 1))
    root = Path("/p")
    assert logic.parquet_file(root, "messages", date(2026, 1, 2)) == Path(
        "/p/messages/cst_day=2026-01-02/messages.parquet"
    )
    assert logic.parquet_file(root, "worlds", None) == Path("/p/worlds/worlds.parquet")
    assert logic.parquet_glob(root, BY_NAME["messages"]) == "/p/messages/*/*.parquet"


def test_the_config_is_strict(tmp_path):
    assert analyst_config.load(None) == AnalystConfig()
    good = tmp_path / "good.yaml"
    good.write_text(
        "memory:\n  analyst:\n    parquet: false\n    duckdb_threads: 1\n    duckdb_memory_limit: 2GB\n"
        "    dbt_builds_kept: 3\n"
    )
    cfg = analyst_config.load(good)
    assert (cfg.parquet, cfg.duckdb_threads, cfg.duckdb_memory_limit) == (False, 1, "2GB")
    files = AnalyticsFiles.at(tmp_path / "a.duckdb", cfg)
    assert files.parquet is None and files.duckdb_config()["memory_limit"] == "2GB" and files.dbt_builds_kept == 3
    for body, error in [
        ("parquet: 'no'", "memory.analyst.parquet: expected bool, got str 'no'"),
        ("duckdb_threads: 0", "memory.analyst.duckdb_threads: must be a positive integer"),
        ("dbt_builds_kept: 0", "memory.analyst.dbt_builds_kept: must be a positive integer"),
        ("duckdb_memory_limit: lots", "memory.analyst.duckdb_memory_limit: expected a size"),
        ("parquett: true", "unknown key(s) in memory.analyst: parquett"),
    ]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(f"memory:\n  analyst:\n    {body}\n")
        with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
            analyst_config.load(bad)


def test_files_sit_beside_the_duckdb_file_unless_configured(tmp_path):
    files = AnalyticsFiles.at(tmp_path / "x" / "analytics.duckdb", AnalystConfig())
    assert files.parquet == tmp_path / "x" / "analytics_parquet"
    assert files.report == tmp_path / "x" / "analytics_report.png"
    assert files.staging.name == "analytics.duckdb.next" and files.lock.name == "analytics.duckdb.lock"
    assert files.dbt_builds == tmp_path / "x" / "analytics.duckdb.dbt-builds"
    cfg = AnalystConfig(parquet_dir=str(tmp_path / "pq"), report_file=str(tmp_path / "r.png"))
    assert AnalyticsFiles.at(tmp_path / "a.duckdb", cfg).parquet == tmp_path / "pq"
    config = files.duckdb_config()
    assert config["autoinstall_known_extensions"] is False and config["autoload_known_extensions"] is False


@pytest.mark.parametrize("kept", [10, 1])  # the default of memory.analyst.dbt_builds_kept, and the least
def test_only_the_newest_dbt_builds_are_kept(tmp_path, kept):
    """A build's target folder stays for whoever looks into it; past dbt_builds_kept the oldest go
    (dagster-dbt alone would keep one per build for ever, 3-8 MB each)."""
    cfg = AnalystConfig() if kept == 10 else AnalystConfig(dbt_builds_kept=kept)
    files = AnalyticsFiles.at(tmp_path / "analytics.duckdb", cfg)
    assert files.dbt_builds_kept == kept
    assert prune_dbt_builds(files) == []  # no build yet
    now = time.time()
    # oldest first, named so that their names sort the other way: the age decides, not the name
    builds = [files.dbt_builds / f"analyst_dbt_daily-run{99 - i:02d}-abc" for i in range(kept + 3)]
    for age, folder in enumerate(reversed(builds)):  # the last one is the newest
        (folder / "compiled").mkdir(parents=True)
        (folder / "dbt.log").write_text("log")
        os.utime(folder, (now - 60 * age, now - 60 * age))
    stray = files.dbt_builds / "notes.txt"
    stray.write_text("not a build")
    removed = prune_dbt_builds(files)
    assert sorted(removed) == sorted(builds[:3])
    assert sorted(p for p in files.dbt_builds.iterdir() if p.is_dir()) == sorted(builds[3:])
    assert stray.exists() and prune_dbt_builds(files) == []


def _publish(files: AnalyticsFiles, value: int) -> None:
    with publishing(files) as staging, duckdb.connect(str(staging)) as con:
        con.execute("CREATE OR REPLACE TABLE t AS SELECT ? AS v", [value])


def test_a_reader_keeps_its_version_and_a_new_reader_sees_the_new_one(tmp_path):
    files = AnalyticsFiles.at(tmp_path / "a.duckdb", AnalystConfig())
    _publish(files, 1)
    reader = duckdb.connect(str(files.duckdb), read_only=True)
    _publish(files, 2)  # not blocked by the reader, and the reader is not disturbed
    assert reader.execute("SELECT v FROM t").fetchall() == [(1,)]
    reader.close()
    with duckdb.connect(str(files.duckdb), read_only=True) as again:
        assert again.execute("SELECT v FROM t").fetchall() == [(2,)]
    assert not files.staging.exists() and not Path(str(files.duckdb) + ".wal").exists()


def test_a_failed_write_publishes_nothing(tmp_path):
    files = AnalyticsFiles.at(tmp_path / "a.duckdb", AnalystConfig())
    _publish(files, 1)
    with pytest.raises(RuntimeError, match="boom"):
        with publishing(files) as staging, duckdb.connect(str(staging)) as con:
            con.execute("CREATE OR REPLACE TABLE t AS SELECT 99 AS v")
            raise RuntimeError("boom")
    with duckdb.connect(str(files.duckdb), read_only=True) as con:
        assert con.execute("SELECT v FROM t").fetchall() == [(1,)]
    assert not files.staging.exists()


def test_writers_queue_on_the_lock(tmp_path):
    files = AnalyticsFiles.at(tmp_path / "a.duckdb", AnalystConfig())
    spans: list[tuple[float, float]] = []

    def write() -> None:
        with writer_lock(files):
            start = time.monotonic()
            time.sleep(0.2)
            spans.append((start, time.monotonic()))

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (a0, a1), (b0, b1) = sorted(spans)
    assert a1 <= b0  # one after the other, never both at once


def _sqlite_store(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    ensure_schema(store, domains.version_locations())
    return store


def _ingest(store: Store, path: Path, lines: list[dict]) -> None:
    import json

    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    ingest_file(store, path)


def test_an_export_on_sqlite_replaces_exactly_the_days_of_its_window(tmp_path):
    store = _sqlite_store(tmp_path)
    days = [datetime(2026, 1, d, 23, 50, tzinfo=CST) for d in (1, 2, 3)]  # late in the CST day: UTC is the day before
    _ingest(
        store,
        tmp_path / "a.jsonl",
        [event_line(f"m{i}", "w1", f"c{i}", "user", f"hello {i}", at) for i, at in enumerate(days)],
    )
    files = AnalyticsFiles.at(tmp_path / "out" / "analytics.duckdb", AnalystConfig())
    report = export_tables(
        store, files, [BY_NAME["messages"], BY_NAME["worlds"]], DayWindow(date(2026, 1, 1), date(2026, 1, 3)), CST
    )
    assert report.table("messages").rows_by_day == {"2026-01-01": 1, "2026-01-02": 1, "2026-01-03": 1}
    assert report.table("worlds").rows == 1
    with duckdb.connect(str(files.duckdb), read_only=True) as con:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert {e.name for e in EXPORTS} | {"temporal_summaries"} <= tables  # every table exists, even empty
        assert con.execute("SELECT cst_day, \"at\" FROM messages WHERE message_id = 'm0'").fetchone()[0] == date(
            2026, 1, 1
        )
    stamp = (files.parquet / "messages" / "cst_day=2026-01-01" / "messages.parquet").stat().st_mtime_ns
    _ingest(store, tmp_path / "b.jsonl", [event_line("late", "w1", "c9", "user", "late", days[1])])
    again = export_tables(store, files, [BY_NAME["messages"]], DayWindow(date(2026, 1, 2), date(2026, 1, 2)), CST)
    assert again.table("messages").rows_by_day == {"2026-01-02": 2}
    with duckdb.connect(str(files.duckdb), read_only=True) as con:
        per_day = dict(con.execute("SELECT cst_day, count(*) FROM messages GROUP BY 1").fetchall())
        # Parquet with hive partitioning gives the same answer as the table.
        pq = dict(
            con.execute(
                f"SELECT cst_day, count(*) FROM read_parquet('{files.parquet}/messages/*/*.parquet', "
                "hive_partitioning = true) GROUP BY 1"
            ).fetchall()
        )
    assert per_day == {date(2026, 1, 1): 1, date(2026, 1, 2): 2, date(2026, 1, 3): 1}
    assert {str(k): v for k, v in pq.items()} == {str(k): v for k, v in per_day.items()}
    assert (files.parquet / "messages" / "cst_day=2026-01-01" / "messages.parquet").stat().st_mtime_ns == stamp
    assert not list((files.parquet / ".tmp").iterdir())  # no temporary file left behind


def test_a_range_writes_one_parquet_file_per_day_and_an_emptied_day_keeps_an_empty_file(tmp_path):
    from memory_pipeline.lib.store.tables import messages

    store = _sqlite_store(tmp_path)
    ats = [datetime(2026, 3, d, 10, tzinfo=CST) for d in (1, 1, 2, 4)]
    _ingest(
        store, tmp_path / "a.jsonl", [event_line(f"m{i}", "w1", "c1", "user", f"x {i}", at) for i, at in enumerate(ats)]
    )
    files = AnalyticsFiles.at(tmp_path / "out" / "analytics.duckdb", AnalystConfig())
    window = DayWindow(date(2026, 3, 1), date(2026, 3, 5))
    report = export_tables(store, files, [BY_NAME["messages"]], window, CST)
    assert report.table("messages").parquet_files == 3  # the days with rows; no file for the 3rd and 5th
    folder = files.parquet / "messages"
    assert sorted(p.name for p in folder.iterdir()) == [f"cst_day=2026-03-0{d}" for d in (1, 2, 4)]

    def day_file(d: int) -> list[tuple]:
        path = logic.parquet_file(files.parquet, "messages", date(2026, 3, d))
        with duckdb.connect() as con:  # the file itself holds cst_day, as a per-day COPY wrote it
            return con.execute(f"SELECT message_id, cst_day FROM read_parquet('{path}') ORDER BY 1").fetchall()

    assert day_file(1) == [("m0", date(2026, 3, 1)), ("m1", date(2026, 3, 1))]
    assert day_file(4) == [("m3", date(2026, 3, 4))]
    with store.begin() as conn:
        conn.execute(messages.delete().where(messages.c.message_id == "m2"))
    again = export_tables(store, files, [BY_NAME["messages"]], window, CST)
    assert again.table("messages").parquet_files == 3
    assert day_file(2) == []  # emptied: an empty file, not a deletion under a reader
    assert day_file(1) == [("m0", date(2026, 3, 1)), ("m1", date(2026, 3, 1))]
    assert not list((files.parquet / ".tmp").iterdir())


def test_a_table_without_a_row_yet_has_one_empty_day_file_a_glob_reads_without_error(tmp_path):
    store = _sqlite_store(tmp_path)  # no message at all
    files = AnalyticsFiles.at(tmp_path / "out" / "analytics.duckdb", AnalystConfig())
    window = DayWindow(date(2026, 3, 1), date(2026, 3, 3))
    report = export_tables(store, files, [BY_NAME["messages"]], window, CST)
    assert report.table("messages").parquet_files == 1
    assert [p.parent.name for p in (files.parquet / "messages").glob("*/*.parquet")] == ["cst_day=2026-03-01"]
    glob = logic.parquet_glob(files.parquet, BY_NAME["messages"])
    with duckdb.connect() as con:
        got = con.execute(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = true)").fetchone()
        columns = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{glob}')").fetchall()]
    assert got == (0,) and "message_id" in columns and "cst_day" in columns
    again = export_tables(store, files, [BY_NAME["messages"]], DayWindow(date(2026, 3, 2), date(2026, 3, 2)), CST)
    assert again.table("messages").parquet_files == 0  # the table has its file: no second empty one


def test_the_picture_renders_from_figures():
    figures = reports.CoverageCost(
        days=[date(2026, 1, 1), date(2026, 1, 2)],
        day_summaries=[2, 1],
        day_placeholders=[0, 1],
        day_missing=[0, 1],
        placeholders_by_reason={"no_sessions": {"day": 1}},
        cost_days=[date(2026, 1, 2)],
        calls=[3],
        tokens=[120],
    )
    png = reports.render_png(figures)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert reports.render_png(reports.CoverageCost())[:4] == b"\x89PNG"  # an empty file still renders


def test_the_dagster_dbt_start_up_costs_we_skip_still_exist():
    """AnalystDbtCliResource overrides two private methods of the pinned dagster-dbt; an upgrade that
    renames them must fail here rather than silently cost 10 s per build again."""
    from memory_pipeline.defs.analyst.resources import AnalystDbtCliResource

    assert hasattr(DbtCliResource, "_cli_version") and hasattr(DbtCliResource, "_initialize_dbt_core_adapter")
    assert hasattr(DbtCliResource, "_get_unique_target_path")  # the build's target folder (defs/analyst/dbt.py)
    assert AnalystDbtCliResource._initialize_dbt_core_adapter is not DbtCliResource._initialize_dbt_core_adapter


def _rows_of(files: AnalyticsFiles, table: str) -> list[tuple]:
    with duckdb.connect(str(files.duckdb), read_only=True) as con:
        return con.execute(f'SELECT granularity, "start", cst_day FROM {table} ORDER BY 2, 1').fetchall()


def test_a_range_exports_every_window_overlapping_it_once(tmp_path):
    """The week window of Monday 2025-09-29 begins before a range starting Wednesday 2025-10-01:
    the range exports it (on its own CST day), and the adjacent range sharing it replaces it."""
    from memory_pipeline.tower import windows
    from memory_pipeline.tower.api import Tower
    from memory_pipeline.tower.config import TowerConfig
    from memory_pipeline.tower.tables import tower_windows

    store = _sqlite_store(tmp_path)
    tower = Tower(store, TowerConfig(), CST, run_jobs="inline")
    tower.create_type("proj/log", chain=["day", "week"])
    days = [date(2025, 9, 30), date(2025, 10, 1), date(2025, 10, 2)]
    tower.append(
        "proj/log",
        [{"content": f"note {d}", "at": datetime(d.year, d.month, d.day, 9, tzinfo=CST).isoformat()} for d in days],
    )
    for d in days:
        windows.build_day(store, d, CST, only="proj/log")
    windows.build_coarse(store, windows.Granularity.WEEK, date(2025, 9, 29), CST, only="proj/log")
    files = AnalyticsFiles.at(tmp_path / "out" / "analytics.duckdb", AnalystConfig())
    export = BY_NAME["tower_windows"]
    monday = datetime(2025, 9, 29, tzinfo=CST)

    report = export_tables(store, files, [export], DayWindow(date(2025, 10, 1), date(2025, 10, 5)), CST)
    got = _rows_of(files, "tower_windows")
    assert ("week", monday, date(2025, 9, 29)) in got
    assert [r[2] for r in got if r[0] == "day"] == [date(2025, 10, 1), date(2025, 10, 2)]
    assert report.table("tower_windows").rows == len(got) == 3
    # the adjacent range (and the same range again) replace the shared week window: one row each
    export_tables(store, files, [export], DayWindow(date(2025, 9, 29), date(2025, 9, 30)), CST)
    export_tables(store, files, [export], DayWindow(date(2025, 10, 1), date(2025, 10, 5)), CST)
    with store.connect() as conn:
        stored = conn.execute(
            select(tower_windows.c.granularity, tower_windows.c.start).where(tower_windows.c.type_name == "proj/log")
        ).all()
    got = _rows_of(files, "tower_windows")
    assert sorted((g, s) for g, s, _ in got) == sorted((g, s.astimezone(CST)) for g, s in stored)
    assert len(got) == 4 and [r[0] for r in got].count("week") == 1
    with duckdb.connect(str(files.duckdb), read_only=True) as con:
        pq = con.execute(
            f"SELECT granularity, cst_day FROM read_parquet('{files.parquet}/tower_windows/*/*.parquet', "
            "hive_partitioning = true) ORDER BY 2, 1"
        ).fetchall()
    assert [(g, str(d)) for g, d in pq] == [(r[0], str(r[2])) for r in sorted(got, key=lambda r: (r[2], r[0]))]


def test_the_ledger_cost_is_exported_as_a_double_even_into_an_older_file(tmp_path):
    from memory_pipeline.lib.store.tables import llm_ledger

    store = _sqlite_store(tmp_path)
    at = datetime(2026, 1, 2, 12, tzinfo=CST)
    row = {"at": at, "model": "m", "prompt_version": "v", "tokens_in": 1, "tokens_out": 1, "outcome": "ok"}
    with store.begin() as conn:
        conn.execute(insert(llm_ledger), [row | {"cost_usd": 0.0025}, row | {"cost_usd": None}])
    files = AnalyticsFiles.at(tmp_path / "out" / "analytics.duckdb", AnalystConfig())
    with publishing(files) as staging, duckdb.connect(str(staging)) as con:  # a file of the JSON days
        con.execute("CREATE TABLE llm_ledger (call_id BIGINT, cost_usd JSON)")
        con.execute("INSERT INTO llm_ledger VALUES (99, '0.5')")
    export_tables(store, files, [BY_NAME["llm_ledger"]], DayWindow(date(2026, 1, 2), date(2026, 1, 2)), CST)
    with duckdb.connect(str(files.duckdb), read_only=True) as con:
        kind = con.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_name = 'llm_ledger' AND column_name = 'cost_usd'"
        ).fetchone()
        costs = con.execute("SELECT call_id, cost_usd FROM llm_ledger ORDER BY cost_usd NULLS LAST").fetchall()
    assert kind == ("DOUBLE",)
    assert [c for _, c in costs] == [0.0025, 0.5, None] and costs[1][0] == 99  # the older row converted


def test_a_hot_node_is_exported_with_every_range_its_events_touch(tmp_path):
    """A node's last_at is the instant of its last event (inclusive): a node ending exactly at the
    range's first instant belongs to the range, one ending just before does not."""
    from memory_pipeline.objects.tables import objects_hot_nodes

    store = _sqlite_store(tmp_path)
    start = datetime(2026, 1, 2, tzinfo=CST)
    node = {"world_id": "w1", "seq": 1, "level": 1, "text": "t", "est_tokens": 1, "active": True}
    with store.begin() as conn:
        conn.execute(
            insert(objects_hot_nodes),
            [
                node | {"node_id": "edge", "first_at": datetime(2026, 1, 1, 8, tzinfo=CST), "last_at": start},
                node
                | {
                    "node_id": "inside",
                    "first_at": datetime(2026, 1, 1, 9, tzinfo=CST),
                    "last_at": start.replace(hour=5),
                },
                node
                | {
                    "node_id": "before",
                    "first_at": datetime(2025, 12, 31, 8, tzinfo=CST),
                    "last_at": start.replace(day=1, hour=23),
                },
            ],
        )
    files = AnalyticsFiles.at(tmp_path / "out" / "analytics.duckdb", AnalystConfig())
    export = BY_NAME["objects_hot_nodes"]
    export_tables(store, files, [export], DayWindow(date(2026, 1, 2), date(2026, 1, 3)), CST)
    with duckdb.connect(str(files.duckdb), read_only=True) as con:
        got = con.execute("SELECT node_id, cst_day FROM objects_hot_nodes ORDER BY 1").fetchall()
    assert got == [("edge", date(2026, 1, 1)), ("inside", date(2026, 1, 1))]
    export_tables(store, files, [export], DayWindow(date(2025, 12, 31), date(2026, 1, 1)), CST)
    with duckdb.connect(str(files.duckdb), read_only=True) as con:
        got = con.execute("SELECT node_id FROM objects_hot_nodes ORDER BY 1").fetchall()
    assert got == [("before",), ("edge",), ("inside",)]  # once each


def test_the_cost_panel_is_by_data_day_ticks_whole_days_and_scales_tokens_in_its_label():
    """One data day of 2,756 calls and 1.35M tokens: the bar sits on its day's tick (no hour
    ticks, no bar straddling two dates), the token axis says "millions" instead of an offset, and
    the panel says its days are the days the calls served; the calls made for a week, a month, a
    year or outside any partition are named under it, since they are on no day of the axis."""
    from matplotlib import dates as mdates
    from matplotlib import pyplot as plt

    for cost_days in ([date(2026, 12, 1)], [date(2026, 11, 1) + timedelta(days=i) for i in range(40)]):
        figures = reports.CoverageCost(
            days=[date(2025, 12, 1), date(2025, 12, 2)],
            day_summaries=[2, 1],
            day_placeholders=[0, 1],
            day_missing=[0, 1],
            cost_days=cost_days,
            calls=[2756] * len(cost_days),
            tokens=[1_353_837 + i for i in range(len(cost_days))],
            calls_off_days={"none": 2005, "month": 9, "week": 18, "year": 3},
        )
        fig = reports.draw(figures)
        try:
            fig.canvas.draw()
            _top, _middle, bottom, tokens = fig.axes
            for ax in (_top, bottom):
                ticks = [mdates.num2date(t) for t in ax.get_xticks()]
                assert ticks and all((t.hour, t.minute) == (0, 0) for t in ticks), ticks  # whole days only
                labels = [t.get_text() for t in ax.get_xticklabels()]
                assert all(":" not in label for label in labels), labels
            shown = [t.get_text() for t in bottom.get_xticklabels()]
            assert cost_days[0].isoformat() in shown or len(cost_days) > 1, shown  # the bar's own date
            assert tokens.yaxis.get_offset_text().get_text() == ""  # no "1e6" above the axis
            assert "millions" in tokens.get_ylabel()
            assert bottom.yaxis.get_offset_text().get_text() == "" and "thousands" in bottom.get_ylabel()
            assert max(tokens.get_lines()[0].get_ydata()) < 10  # plotted in millions
            for ax in (bottom, tokens):  # plain decimals: no exponent anywhere on the value axes
                values = [t.get_text() for t in ax.get_yticklabels()]
                assert values and all(v.replace(",", "").replace(".", "").isdigit() for v in values), values
            assert "per data day, the CST day the calls served" in bottom.get_title()
            assert bottom.get_xlabel().startswith("data day (CST)")
            notes = [t.get_text() for t in fig.texts if t.get_text() != fig.get_suptitle()]
            assert notes == [
                "Calls that served no single day (not drawn): 18 for weeks; 9 for months; 3 for years; 2,005 "
                "with no partition (the system rolls, for one)."
            ]
        finally:
            plt.close(fig)


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0"), (-0.0, "0"), (1.5, "1.5"), (12_000, "12,000"), (1_500_000.0, "1,500,000"), (0.0005, "0.0005")],
)
def test_an_axis_value_is_a_plain_decimal(value, shown):
    assert reports.plain_number(value) == shown


def test_a_panel_without_data_says_so_instead_of_showing_1970():
    """No day rows and no calls (a fresh file): each date panel is empty with "no data", without
    the epoch matplotlib puts on an empty date axis; a panel with data keeps its own dates."""
    from matplotlib import pyplot as plt

    def drawn(figures: reports.CoverageCost) -> dict[str, tuple[list[str], list[str]]]:
        fig = reports.draw(figures)
        try:
            fig.canvas.draw()
            return {
                ax.get_title(): (
                    [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()],
                    [t.get_text() for t in ax.texts],
                )
                for ax in fig.axes
            }
        finally:
            plt.close(fig)

    empty = drawn(reports.CoverageCost())
    assert len(empty) == 3  # no token axis without calls
    for title, (ticks, texts) in empty.items():
        assert ticks == [], title  # no 1970-01-01, no 0..1 scale
        assert texts == (["no placeholders"] if title.startswith("Placeholders") else ["no data"]), title
    assert "cost of all calls: none (no call in the exported ledger)" in next(t for t in empty if t.startswith("LLM"))
    one_side = drawn(reports.CoverageCost(cost_days=[date(2026, 1, 2)], calls=[3], tokens=[120], total_calls=3))
    coverage = next(v for t, v in one_side.items() if t.startswith("Worlds"))
    cost = next(v for t, v in one_side.items() if t.startswith("LLM"))
    assert coverage == ([], ["no data"])
    assert "2026-01-02" in cost[0] and not any("1970" in t for t in cost[0]) and cost[1] == []


def test_the_docs_pandas_snippet_runs_without_a_warning(tmp_path):
    """docs/analysts.md's pandas snippet, verbatim, with every warning an error, on a file whose
    mart has a TIMESTAMPTZ column (what makes DuckDB 1.5's .df() warn under pandas 3.1)."""
    import re
    import subprocess
    import sys

    from memory_pipeline.lib.settings import REPO_ROOT

    text = (REPO_ROOT / "docs" / "analysts.md").read_text(encoding="utf-8")
    snippets = [s for s in re.findall(r"```python\n(.*?)```", text, re.S) if ".df()" in s]
    assert len(snippets) == 1
    (tmp_path / "data").mkdir()
    with duckdb.connect(str(tmp_path / "data" / "analytics.duckdb")) as con:
        con.execute("CREATE SCHEMA marts")
        con.execute(
            "CREATE TABLE marts.mart_temporal_coverage AS SELECT 'w1' AS world_id, 'placeholder' AS status, "
            "TIMESTAMPTZ '2026-01-01 10:00:00+08' AS last_written_at"
        )
    check = snippets[0] + "\nassert len(df) == 1 and str(df.last_written_at.dt.tz) == 'Asia/Shanghai', df.dtypes\n"
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and not done.stderr, done.stderr


def test_a_disk_full_half_way_through_the_private_copy_leaves_no_copy_behind(tmp_path, monkeypatch):
    """ENOSPC while copying the published file to ``.next`` (the copy is the first write of every
    export and dbt build): the published file is untouched and nothing private stays on the disk."""
    import errno
    import shutil

    from memory_pipeline.analyst import files as files_module

    files = AnalyticsFiles.at(tmp_path / "a.duckdb", AnalystConfig())
    _publish(files, 1)
    before = files.duckdb.read_bytes()

    def full_disk(src, dst):
        with open(src, "rb") as a, open(dst, "wb") as b:
            b.write(a.read(4096))  # what fitted
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files_module.shutil, "copyfile", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        _publish(files, 2)
    monkeypatch.setattr(files_module.shutil, "copyfile", shutil.copyfile)
    assert files.duckdb.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.duckdb", "a.duckdb.lock"]


def test_a_writer_that_waits_says_for_whom(tmp_path):
    import os
    import socket

    files = AnalyticsFiles.at(tmp_path / "a.duckdb", AnalystConfig())
    heard: list[str] = []
    with writer_lock(files):
        waiter = threading.Thread(target=lambda: _publish_waiting(files, heard))
        waiter.start()
        deadline = time.monotonic() + 30
        while not heard and time.monotonic() < deadline:
            time.sleep(0.01)
        assert heard and "waiting for the writer lock" in heard[0]
        assert f"pid {os.getpid()} on {socket.gethostname()}" in heard[0]
    waiter.join(timeout=30)
    assert len(heard) == 2 and "got the writer lock after" in heard[1]
    assert files.lock.read_text() == ""  # each writer cleared its record when it let go

    # A process that holds the lock without recording itself is not named after the last writer.
    import fcntl

    heard.clear()
    with open(files.lock, "a+") as foreign:
        fcntl.flock(foreign, fcntl.LOCK_EX)
        waiter = threading.Thread(target=lambda: _publish_waiting(files, heard))
        waiter.start()
        deadline = time.monotonic() + 30
        while not heard and time.monotonic() < deadline:
            time.sleep(0.01)
        fcntl.flock(foreign, fcntl.LOCK_UN)
    waiter.join(timeout=30)
    assert heard and "held by another process (it recorded no pid)" in heard[0], heard


def _publish_waiting(files: AnalyticsFiles, heard: list[str]) -> None:
    with publishing(files, heard.append) as staging, duckdb.connect(str(staging)) as con:
        con.execute("CREATE OR REPLACE TABLE t AS SELECT 1 AS v")
