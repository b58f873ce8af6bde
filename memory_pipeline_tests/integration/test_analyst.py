"""The analyst layer end to end on the real PostgreSQL and Redis: a sample graph materialized as
Dagster runs, exported to DuckDB and Parquet, `dbt parse` and `dbt build` (tests as asset checks),
every mart's numbers against counts computed from the operational store, a reader that keeps the
file open while an export runs, a late message that re-exports exactly its day, and the
automation that requests it."""

from __future__ import annotations

import json
import math
import subprocess
import threading
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb
import pytest
import redis
from dagster import (
    AssetKey,
    AssetRecordsFilter,
    AssetSelection,
    DagsterEventType,
    DagsterInstance,
    Definitions,
    evaluate_automation_conditions,
    instance_for_test,
)
from sqlalchemy import func, insert, select

from memory_pipeline import domains, operations
from memory_pipeline.analyst.files import AnalyticsFiles
from memory_pipeline.definitions import build_defs
from memory_pipeline.defs._shared.partitions import cst_day_open
from memory_pipeline.defs.analyst.project import analytics_dbt, dbt_executable
from memory_pipeline.defs.analyst.resources import AnalystResource
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.cache import _PROCESS_CACHE
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import conversations, inbox, llm_ledger, messages, worlds
from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource
from memory_pipeline.temporal.tables import temporal_day_chunks, temporal_summaries
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.entries import append as append_entries
from memory_pipeline.tower.tables import tower_windows
from memory_pipeline.tower.types import WORKLOG, ensure_builtins
from memory_pipeline_tests.conftest import REDIS_URL, conversation, cst, event, forget_schemas, fresh_schema

CST = ZoneInfo("Asia/Shanghai")
# The module-scoped `sample` (every run of the graph, then dbt) is built once per worker that runs
# one of its tests: under pytest-xdist the module runs in one worker (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("analyst_sample")
D1, D2, D3, D4 = date(2025, 12, 30), date(2025, 12, 31), date(2026, 1, 1), date(2026, 1, 2)
DAYS = (D1.isoformat(), D4.isoformat())
PRICED = "openai/priced-model"
ACTIVITY = TowerConfig().activity_type


@dataclass
class Sample:
    store: Store
    defs: Definitions
    instance: DagsterInstance
    files: AnalyticsFiles
    tmp: Path
    runs: dict[str, str] = field(default_factory=dict)  # target -> run id

    def duck(self) -> duckdb.DuckDBPyConnection:
        return duckdb.connect(str(self.files.duckdb), read_only=True)

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        with self.duck() as con:
            return con.execute(sql, params or []).fetchall()


def _events() -> list[dict]:
    tool = [{"name": "search", "arguments": {"q": "compost"}}]
    return (
        conversation("w1", "w1-a", cst(2025, 12, 30, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "w1-b", cst(2025, 12, 31, 22), ["compost turned", "compost warm"], platform="discord")
        + [
            event("w1", "w1-b", "assistant", "", cst(2025, 12, 31, 22, 10), platform="discord", tool_calls=tool),
            event("w1", "w1-b", "tool", '{"results": 2}', cst(2025, 12, 31, 22, 11), platform="discord"),
        ]
        + conversation("w1", "w1-cron", cst(2025, 12, 31, 3), ["nightly job", "job done"], platform="cron")
        + conversation("w1", "w1-dbg", cst(2026, 1, 1, 11), ["debug ping", "debug pong"], debug=True)
        + conversation("w2", "w2-a", cst(2025, 12, 31, 8), ["marathon pacing", "marathon intervals"], platform="weixin")
        # the cron platform in capitals: never summarized, and counted as cron by the marts too
        + conversation("w2", "w2-cron", cst(2025, 12, 31, 4), ["backup ran", "backup verified"], platform="CRON")
        + conversation("w2", "w2-b", cst(2026, 1, 2, 9), ["deploy fixed", "deploy shipped"], platform="remote:coding")
        + conversation("w3", "w3-a", cst(2026, 1, 2, 20), ["garden plan", "garden basket"])
        # a preference that turns: sleep writes it on D1 and changes it on D2 (the snapshot marts)
        + conversation("w1", "w1-spice", cst(2025, 12, 30, 19), ["我喜欢吃辣", "好", "garden tomatoes tomatoes", "ok"])
        + conversation(
            "w1", "w1-spice2", cst(2025, 12, 31, 19), ["我不喜欢吃辣", "嗯", "garden tomatoes tomatoes", "ok"]
        )
    )


def _ingest(store: Store, folder: Path, events: list[dict]) -> None:
    path = folder / f"batch-{uuid.uuid4().hex[:8]}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    ingest_file(store, path)


def _priced_ledger_rows(store: Store) -> None:
    """Calls of a model with a price (and one without, a failure, a cache hit) on D2 and D3: the
    store is the truth the cost mart must add up to."""
    rows = []
    for i, (latency, cost, outcome) in enumerate(
        [(120, 0.0010, "ok"), (340, 0.0025, "ok"), (80, 0.0005, "ok"), (900, None, "error"), (0, None, "cache_hit")]
    ):
        rows.append(
            {
                "at": datetime(2025, 12, 31, 12, i, tzinfo=CST),
                "asset": "temporal_day_summaries",
                "partition": "2025-12-31",
                "task": "day",
                "world_id": "w1",
                "model": PRICED,
                "prompt_version": "temporal-v2",
                "tokens_in": 0 if outcome == "cache_hit" else 100 + i,
                "tokens_out": 0 if outcome == "cache_hit" else 10 + i,
                "cost_usd": cost,
                "latency_ms": latency,
                "attempts": 1,
                "outcome": outcome,
                "tokens_source": "provider" if outcome == "ok" else None,
                "finish_reason": ("length" if i == 1 else "stop") if outcome == "ok" else None,
            }
        )
    rows.append(
        rows[0] | {"at": datetime(2026, 1, 1, 23, 59, tzinfo=CST), "model": "openai/unpriced", "cost_usd": None}
    )
    # the same provider without a usage report: its tokens are estimates, kept apart
    rows.append(
        rows[0] | {"at": datetime(2025, 12, 31, 12, 30, tzinfo=CST), "tokens_source": "estimated", "cost_usd": None}
    )
    # made on D3 for the data of the month before, and a call outside any partition
    month = {"asset": "temporal_month_summaries", "partition": "2025-12", "task": "month", "cost_usd": None}
    rows.append(rows[0] | {"at": datetime(2026, 1, 1, 9, tzinfo=CST)} | month)
    rows.append(rows[0] | {"at": datetime(2026, 1, 1, 9, 5, tzinfo=CST), "asset": "objects_archive", "partition": None})
    rows[-1]["cost_usd"] = None
    # a rolling summary's partition is its conversation id, here one shaped like a month: no period of data
    rolling = {"asset": "conversation_rolling_summaries", "partition": "2025-11", "task": "rolling", "cost_usd": None}
    rows.append(rows[0] | {"at": datetime(2026, 1, 1, 9, 10, tzinfo=CST)} | rolling)
    with store.begin() as conn:
        conn.execute(insert(llm_ledger), rows)
        conn.execute(
            insert(inbox),
            [
                {
                    "subject": "user:w1",
                    "source_ref": "temporal_summary:truncated:2026-01-01",
                    "title": "Temporal summary truncated",
                    "body": "test",
                    "created_at": datetime(2026, 1, 1, 8, tzinfo=CST),
                }
            ],
        )


def _recall_runs(store: Store) -> None:
    """Two `eval` runs as the command records them: the offline model, and a paid model whose
    Dagster runs partly failed (its table measures memory some runs did not build)."""
    from memory_pipeline.operations.recall_eval import DagsterRun, EvalReport, record
    from memory_pipeline.recall.metric import Index, Score

    def report(run_id: str, model: str, raw: tuple[int, int], days: tuple[int, int], failed: bool) -> EvalReport:
        files, url = (["26.json", "30.json"], "postgresql+psycopg2://u:pw@db/eval") if failed else (["26.json"], "")
        r = EvalReport(run_id, files, model, url or "sqlite:///eval.sqlite", Path("eval-run"))
        r.questions, r.llm_calls, r.cost_usd = 10, 7, None if model.startswith("offline") else 0.25
        r.runs = [DagsterRun("day", "r1", not failed, 1.0, "boom" if failed else "")]
        r.scores = [
            Score(Index.RAW, 10, {1: raw[0], 5: raw[1]}, chars=3000, days=10),
            Score(Index.DAY_SUMMARIES, 10, {1: days[0], 5: days[1]}, chars=1000, days=10),
            Score(Index.RANDOM, 10, expected={1: 1.0, 5: 5.0}),
        ]
        return r

    record(store, report("evaloffline", "offline/deterministic-extractive-v4", (6, 8), (3, 4), False))
    record(store, report("evalpaid", "openai/gpt-x", (6, 8), (5, 8), True))


def _worklog(store: Store) -> None:
    """Seed 004 worklog entries of two projects (its group field): the tower mart counts them per
    project, beside agent/activity per world."""
    items = [
        ("garden", cst(2025, 12, 31, 10)),
        ("garden", cst(2026, 1, 1, 10)),
        ("deploy", cst(2026, 1, 2, 9)),
    ]
    entries = [
        (f"item {i}", {"content": f"worked on {project}", "at": at.isoformat(), "id": f"wl-{i}", "group": project})
        for i, (project, at) in enumerate(items)
    ]
    ensure_builtins(store, ACTIVITY)  # what the tower resource does on its first use
    append_entries(store, WORKLOG, entries, CST)


TOWER_TYPE = "proj/log"
MONDAY = date(2025, 12, 29)  # the week of D1 (a Tuesday) begins the day before the exported range


def _tower_log(store: Store) -> None:
    """A seed 004 type with hour, day and week windows over D1..D4: their one week window starts on
    MONDAY, before the range the sample exports."""
    from memory_pipeline.tower import windows
    from memory_pipeline.tower.api import Tower
    from memory_pipeline.tower.config import TowerConfig
    from memory_pipeline.tower.logic import Granularity

    tower = Tower(store, TowerConfig(), CST, run_jobs="inline")
    tower.create_type(TOWER_TYPE, chain=["1h", "day", "week"])
    days = [D1 + timedelta(days=i) for i in range(4)]
    tower.append(
        TOWER_TYPE, [{"content": f"shipped step {d}", "at": cst(d.year, d.month, d.day, 10).isoformat()} for d in days]
    )
    for d in days:
        windows.build_day(store, d, CST, only=TOWER_TYPE)
    windows.build_coarse(store, Granularity.WEEK, MONDAY, CST, only=TOWER_TYPE)


def _run(sample: Sample, target: str, lo: str, hi: str, **kw) -> None:
    report = operations.materialize(target, lo, hi, instance=sample.instance, defs=sample.defs, **kw)
    assert report.success, f"{target}: {report.runs[0].error if report.runs else report.notes}"
    sample.runs[target] = report.runs[-1].run_id


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Sample:
    cache = redis.Redis.from_url(REDIS_URL)
    cache.flushdb()
    _PROCESS_CACHE.clear()
    tmp = tmp_path_factory.mktemp("analyst")
    with fresh_schema() as url, instance_for_test() as instance:
        store = Store(url)
        ensure_schema(store, domains.version_locations())
        memory_store, memory_config = MemoryStoreResource(database_url=url), MemoryConfigResource()
        analyst = AnalystResource(
            memory_store=memory_store, memory_config=memory_config, duckdb_path=str(tmp / "analytics.duckdb")
        )
        defs = build_defs(
            {
                "memory_store": memory_store,
                "kv_cache": CacheResource(redis_url=REDIS_URL),
                "llm": LLMResource(),
                "memory_config": memory_config,
                "analyst": analyst,
            }
        )
        s = Sample(store, defs, instance, analyst.files(), tmp)
        _ingest(store, tmp, _events())
        _run(s, "chunks", *DAYS, as_of="2026-01-02T23:00:00+08:00")
        _worklog(store)
        _run(s, "tower_windows", *DAYS)
        _run(s, "day", D1.isoformat(), D3.isoformat())
        _run(s, "day", D4.isoformat(), D4.isoformat(), worlds=["w1", "w2"])  # w3's D4 row is missing
        _run(s, "month", "2025-12", "2025-12")
        _run(s, "year", "2025", "2025")
        _run(s, "sleep", D1.isoformat(), D4.isoformat())
        _priced_ledger_rows(store)
        _recall_runs(store)
        _tower_log(store)
        _run(s, "exports", *DAYS)
        _run(s, "month_exports", "2025-12", "2025-12")
        _run(s, "year_exports", "2025", "2025")
        _run(s, "marts", *DAYS)
        yield s
    forget_schemas()
    cache.flushdb()
    cache.close()


def _rows(store: Store, query) -> list[dict]:
    with store.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def _cst_day(at: datetime) -> date:
    return at.astimezone(CST).date()


# --- dbt ------------------------------------------------------------------------------------------


def test_dbt_parse_needs_no_network_and_no_package(tmp_path):
    """No packages.yml (dbt deps would download), usage stats off in the project; `dbt parse` writes a
    manifest with every model (this machine has no internet: the run itself is the proof)."""
    project = analytics_dbt.project_dir
    assert not (project / "packages.yml").exists() and not (project / "dependencies.yml").exists()
    done = subprocess.run(
        [dbt_executable(), "parse", "--quiet", "--target-path", str(tmp_path / "target")],
        cwd=project,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},  # the project itself turns usage stats off
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((tmp_path / "target" / "manifest.json").read_text())
    models = {n["name"] for n in manifest["nodes"].values() if n["resource_type"] == "model"}
    assert {"mart_temporal_coverage", "mart_llm_cost_daily", "mart_summary_lineage", "mart_ingest_daily"} <= models
    assert {f"stg_{t}" for t in ("messages", "temporal_summaries", "llm_ledger", "worlds")} <= models


def test_dbt_build_ran_every_model_and_its_tests_pass_as_asset_checks(sample):
    logs = sample.instance.all_logs(sample.runs["marts"], of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    results = {e.dagster_event.event_specific_data.check_name: e.dagster_event.event_specific_data.passed for e in logs}
    assert len(results) >= 50 and all(results.values()), [k for k, ok in results.items() if not ok]
    for name in (
        "non_empty_rows_have_sources_stg_temporal_summaries_",
        "unique_mart_summary_lineage_lineage_key",
        "relationships_mart_temporal_coverage_world_id__world_id__ref_stg_worlds_",
    ):
        assert name in results
    assert any(n.startswith("accepted_values_stg_temporal_summaries") for n in results)
    materialized = {
        k.to_user_string()
        for k in sample.instance.get_asset_keys()
        if k.to_user_string().startswith("analyst_mart_") or k.to_user_string().startswith("analyst_stg_")
    }
    assert {"analyst_mart_temporal_coverage", "analyst_mart_llm_cost_daily", "analyst_stg_messages"} <= materialized
    daily = sample.instance.get_materialized_partitions(AssetKey("analyst_mart_llm_cost_daily"))
    assert daily == {(D1 + timedelta(days=i)).isoformat() for i in range(4)}


def test_every_mart_has_a_tested_key_and_every_column_a_description(sample):
    """Every table dbt built in schema marts has a key column with both a unique and a not_null test,
    and every column it holds is declared with a description (read against the built table, so a
    column added to the SQL and not to _marts.yml fails here)."""
    nodes = json.loads(analytics_dbt.manifest_path.read_text())["nodes"].values()
    marts = {n["unique_id"]: n for n in nodes if n["resource_type"] == "model" and n["fqn"][1] == "marts"}
    tested: defaultdict[str, defaultdict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for n in nodes:
        if n["resource_type"] == "test" and n.get("attached_node") in marts and n.get("column_name"):
            tested[marts[n["attached_node"]]["name"]][n["column_name"]].add(n["test_metadata"]["name"])
    built: defaultdict[str, list[str]] = defaultdict(list)
    for table, column in sample.query(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'marts'"
    ):
        built[table].append(column)
    assert {n["name"] for n in marts.values()} == set(built)
    for mart in marts.values():
        name = mart["name"]
        keys = [c for c, t in tested[name].items() if {"unique", "not_null"} <= t]
        assert len(keys) == 1, f"{name}: key columns with unique and not_null tests: {keys}"
        described = {c: d["description"].strip() for c, d in mart["columns"].items()}
        assert sorted(described) == sorted(built[name]), name
        assert [c for c, d in described.items() if not d] == [], name


def test_mart_tower_summary_coverage_counts_each_group_apart(sample):
    """agent/activity by world, worklog by project: one row per type, level and group, with the
    store's windows and entries."""
    with sample.store.connect() as conn:
        want = {
            (r.type_name, r.granularity, r.group_value): (r.windows, r.entries)
            for r in conn.execute(
                select(
                    tower_windows.c.type_name,
                    tower_windows.c.granularity,
                    tower_windows.c.group_value,
                    func.count().label("windows"),
                    func.sum(tower_windows.c.entry_count).label("entries"),
                ).group_by(tower_windows.c.type_name, tower_windows.c.granularity, tower_windows.c.group_value)
            )
        }
    got = {
        (r[0], r[1], r[2]): (r[3], r[4])
        for r in sample.query(
            "SELECT type_name, granularity, group_value, windows, entries, tower_coverage_key"
            " FROM marts.mart_tower_summary_coverage"
        )
    }
    assert got == want
    assert {(g, e) for (t, level, g), (_, e) in got.items() if t == WORKLOG and level == "day"} == {
        ("garden", 2),
        ("deploy", 1),
    }
    activity = {g for (t, level, g) in got if t == ACTIVITY and level == "day"}
    assert activity == {"w1", "w2", "w3"}


def test_the_picture_is_attached_and_written(sample):
    record = sample.instance.fetch_materializations(AssetKey("analyst_coverage_report"), limit=1).records[0]
    meta = {k: v.value for k, v in record.asset_materialization.metadata.items()}
    assert meta["picture"].startswith("![coverage and cost](data:image/png;base64,iVBORw0KGgo")
    assert sample.files.report.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert meta["day_missing"] == 1 and meta["llm_cost_usd"] == pytest.approx(0.004)
    # The cost panel counts calls by the data day they served: the ledger's day partitions; the
    # month's call made on D3 and the call outside any partition are named apart, not on a day.
    ledger = _rows(sample.store, select(llm_ledger).where(llm_ledger.c.at < datetime(2026, 1, 3, tzinfo=CST)))

    def grain(r: dict) -> str:
        if not r["partition"]:
            return "none"
        if not r["asset"].startswith(("temporal_", "tower_", "sleep_")):  # a conversation's id, a job
            return "other"
        return {4: "year", 7: "month"}.get(len(r["partition"]), "week" if "week" in r["asset"] else "day")

    grains = Counter(grain(r) for r in ledger if r["outcome"] in ("ok", "error", "cache_hit"))
    assert meta["llm_calls_on_data_days"] == grains.pop("day") > 0
    assert meta["llm_calls_off_data_days"] == dict(grains) and grains["month"] >= 1 and grains["none"] >= 1
    assert grains["other"] >= 1  # the rolling summary whose conversation id reads like a month


# --- exports against the store ----------------------------------------------------------------------


def test_every_table_is_exported_with_exactly_the_stores_rows(sample):
    lo, hi = datetime(2025, 12, 30, tzinfo=CST), datetime(2026, 1, 3, tzinfo=CST)
    with sample.store.connect() as conn:
        want = {
            "worlds": conn.execute(select(worlds.c.world_id)).scalars().all(),
            "conversations": conn.execute(select(conversations.c.conversation_id)).scalars().all(),
            "messages": conn.execute(select(messages.c.message_id).where(messages.c.at >= lo, messages.c.at < hi))
            .scalars()
            .all(),
            "temporal_day_chunks": conn.execute(select(temporal_day_chunks.c.chunk_id)).scalars().all(),
            "temporal_summaries": conn.execute(select(temporal_summaries.c.summary_id)).scalars().all(),
            "llm_ledger": conn.execute(select(llm_ledger.c.call_id).where(llm_ledger.c.at < hi)).scalars().all(),
            "inbox": conn.execute(select(inbox.c.inbox_id)).scalars().all(),
        }
    keys = {
        "worlds": "world_id",
        "conversations": "conversation_id",
        "messages": "message_id",
        "temporal_day_chunks": "chunk_id",
        "temporal_summaries": "summary_id",
        "llm_ledger": "call_id",
        "inbox": "inbox_id",
    }
    for table, ids in want.items():
        got = [r[0] for r in sample.query(f"SELECT {keys[table]} FROM {table}")]
        assert sorted(got) == sorted(ids), table
    by_window = dict(sample.query('SELECT "window", count(*) FROM temporal_summaries GROUP BY 1'))
    with sample.store.connect() as conn:
        stored = dict(
            conn.execute(select(temporal_summaries.c.window, func.count()).group_by(temporal_summaries.c.window)).all()
        )
    assert by_window == stored and set(stored) == {"day", "month", "year"}
    # Parquet: one file per table and CST day, readable with hive partitioning.
    root = sample.files.parquet
    n = sample.query(
        f"SELECT count(*) FROM read_parquet('{root}/messages/*/*.parquet', hive_partitioning = true)"
        " WHERE cst_day BETWEEN DATE '2025-12-30' AND DATE '2026-01-02'"
    )[0][0]
    assert n == len(want["messages"])
    assert sorted(p.parent.name for p in (root / "messages").glob("*/*.parquet")) == [
        f"cst_day={d}" for d in ("2025-12-30", "2025-12-31", "2026-01-01", "2026-01-02")
    ]
    assert (root / "temporal_year_summaries" / "cst_day=2025-01-01" / "temporal_year_summaries.parquet").exists()
    assert (root / "worlds" / "worlds.parquet").exists()


def test_each_day_partition_of_a_range_export_shows_its_own_rows(sample):
    """One result for a range run put the range's row count on every day partition (107 x the
    messages in the UI's sum): each partition has its day's count, the run's total is run_rows."""
    records = sample.instance.fetch_materializations(AssetKey("analyst_messages"), limit=1000).records
    first_run = min(records, key=lambda r: r.timestamp).run_id  # the range run of the sample
    meta = {
        r.asset_materialization.partition: {k: v.value for k, v in r.asset_materialization.metadata.items()}
        for r in records
        if r.run_id == first_run
    }
    assert sorted(meta) == [d.isoformat() for d in (D1, D2, D3, D4)]
    ran_at = datetime.fromtimestamp(min(r.timestamp for r in records if r.run_id == first_run), UTC)
    with sample.store.connect() as conn:
        ats = conn.execute(select(messages.c.at).where(messages.c.ingested_at <= ran_at)).scalars().all()
    per_day = Counter(a.astimezone(CST).date().isoformat() for a in ats)
    assert {day: m["rows"] for day, m in meta.items()} == {day: per_day[day] for day in meta}
    assert all(m["run_rows"] == sum(per_day[d] for d in meta) and m["run_days"] == 4 for m in meta.values())
    assert all((m["days"], m["days_with_rows"]) == (1, int(per_day[day] > 0)) for day, m in meta.items())
    assert len({m["rows"] for m in meta.values()}) > 1  # the days differ: not the range's count four times


def test_a_week_window_that_began_before_the_range_is_exported_with_it(sample):
    from memory_pipeline.tower.tables import tower_windows

    with sample.store.connect() as conn:
        stored = conn.execute(
            select(tower_windows.c.granularity, tower_windows.c.start, tower_windows.c.entry_count).where(
                tower_windows.c.type_name == TOWER_TYPE
            )
        ).all()
    got = sample.query(
        'SELECT granularity, "start", entry_count, cst_day FROM tower_windows WHERE type_name = ?', [TOWER_TYPE]
    )
    assert sorted((g, s, n) for g, s, n, _ in got) == sorted(stored)  # every window once, the store's rows
    weeks = {r[3]: r[2] for r in got if r[0] == "week"}
    assert weeks == {MONDAY: 4}  # on its own CST day, before the range
    entries = dict(
        sample.query(
            "SELECT granularity, entries FROM marts.mart_tower_summary_coverage WHERE type_name = ?", [TOWER_TYPE]
        )
    )
    assert entries == {"1h": 4, "day": 4, "week": 4}  # every level counts every entry


def test_exported_and_mart_columns_have_plain_types(sample):
    """No JSON cost, and no HUGEINT / UBIGINT (pandas reads them as float64 / uint64) anywhere."""
    types = {
        (r[0], r[1], r[2]): r[3]
        for r in sample.query("SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns")
    }
    assert types[("main", "llm_ledger", "cost_usd")] == "DOUBLE"
    assert types[("staging", "stg_llm_ledger", "cost_usd")] == "DOUBLE"
    for column in ("tokens_in", "provider_tokens_out", "estimated_tokens_in"):
        assert types[("marts", "mart_llm_cost_daily", column)] == "BIGINT"
    for column in ("entries", "input_tokens", "entries_missing_from_summaries"):
        assert types[("marts", "mart_tower_summary_coverage", column)] == "BIGINT"
    assert types[("marts", "mart_temporal_coverage", "source_id_count")] == "BIGINT"
    assert not {k: t for k, t in types.items() if t in ("HUGEINT", "UBIGINT")}
    in_range = select(llm_ledger).where(llm_ledger.c.at < datetime(2026, 1, 3, tzinfo=CST))  # the exported days
    stored = {r["call_id"]: r["cost_usd"] for r in _rows(sample.store, in_range)}
    costs = dict(sample.query("SELECT call_id, cost_usd FROM llm_ledger"))
    assert costs == stored
    assert sorted(c for c in costs.values() if c is not None) == [0.0005, 0.0010, 0.0025]


# --- marts against the store ----------------------------------------------------------------------


def test_mart_temporal_coverage_matches_the_store(sample):
    rows = _rows(sample.store, select(temporal_summaries))
    got = {
        (r[0], r[1], r[2]): r[3:]
        for r in sample.query(
            "SELECT world_id, grain, period_start, status, empty_reason, source_count, content_chars, "
            "cap_chars, hard_cap_chars, last_written_at FROM marts.mart_temporal_coverage"
        )
    }
    for r in rows:
        status = "placeholder" if r["empty_reason"] else "summary"
        want = (status, r["empty_reason"], r["source_count"], len(r["content"]), 100, 150)
        assert got[(r["world_id"], r["window"], r["period_start"])][:6] == want
        written = got[(r["world_id"], r["window"], r["period_start"])][6]
        assert written.astimezone(UTC) == r["updated_at"]
    missing = {k for k, v in got.items() if v[0] == "missing"}
    assert missing == {("w3", "day", D4)}  # the run of D4 covered w1 and w2 only
    assert len(got) == len(rows) + 1
    placeholders = Counter(v[1] for v in got.values() if v[0] == "placeholder")
    assert placeholders == Counter(r["empty_reason"] for r in rows if r["empty_reason"])
    assert placeholders["no_sessions"] >= 1  # w1 on 2026-01-01 had only a debug conversation


def test_mart_llm_cost_daily_matches_the_ledger(sample):
    ledger = _rows(sample.store, select(llm_ledger).where(llm_ledger.c.at < datetime(2026, 1, 3, tzinfo=CST)))
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in ledger:
        groups[(_cst_day(r["at"]), r["asset"] or "(none)", r["model"])].append(r)
    got = {
        (r[0], r[1], r[2]): r[3:]
        for r in sample.query(
            "SELECT cst_day, asset, model, calls, cache_hits, failures, tokens_in, tokens_out, latency_p50_ms, "
            "latency_p95_ms, priced_calls, cost_usd, provider_tokens_in, provider_tokens_out, estimated_tokens_in, "
            "estimated_tokens_out, truncated_calls FROM marts.mart_llm_cost_daily"
        )
    }
    assert set(got) == set(groups)
    for key, calls in groups.items():
        model_calls = [c for c in calls if c["outcome"] in ("ok", "error")]
        latencies = sorted(c["latency_ms"] for c in model_calls)
        priced = [c["cost_usd"] for c in calls if c["cost_usd"] is not None]
        want = (
            len(model_calls),
            sum(c["outcome"] == "cache_hit" for c in calls),
            sum(c["outcome"] == "error" for c in calls),
            sum(c["tokens_in"] for c in calls),
            sum(c["tokens_out"] for c in calls),
        )
        assert got[key][:5] == want, key
        assert got[key][5] == pytest.approx(_quantile(latencies, 0.5)) and got[key][6] == pytest.approx(
            _quantile(latencies, 0.95)
        )
        assert got[key][7] == len(priced)
        assert (got[key][8] is None) if not priced else got[key][8] == pytest.approx(sum(priced))
        split = tuple(
            sum(c[f"tokens_{d}"] for c in calls if c["tokens_source"] == source)
            for source in ("provider", "estimated")
            for d in ("in", "out")
        )
        assert got[key][9:13] == split, key
        assert got[key][13] == sum(c["finish_reason"] == "length" for c in calls)
    day2 = got[(D2, "temporal_day_summaries", PRICED)]
    assert day2[:3] == (5, 1, 1) and day2[8] == pytest.approx(0.004)
    assert day2[9:13] == (100 + 101 + 102, 10 + 11 + 12, 100, 10) and day2[13] == 1
    assert got[(D3, "temporal_day_summaries", "openai/unpriced")][8] is None


def _quantile(values: list[int], q: float) -> float | None:
    """Linear interpolation between closest ranks (DuckDB's quantile_cont)."""
    if not values:
        return None
    pos = (len(values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def test_mart_summary_lineage_walks_every_summary_to_its_raw_messages(sample):
    rows = {r["summary_id"]: r for r in _rows(sample.store, select(temporal_summaries))}

    def messages_of(summary_id: int) -> set[str]:
        r = rows[summary_id]
        if r["empty_reason"] or not r["content"]:
            return set()
        if r["source_kind"] == "message":
            return set(r["source_ids"])
        return set().union(*(messages_of(child) for child in r["source_ids"]))

    got: dict[int, set[str]] = defaultdict(set)
    for summary_id, message_id in sample.query("SELECT summary_id, message_id FROM marts.mart_summary_lineage"):
        got[summary_id].add(message_id)
    want = {sid: messages_of(sid) for sid in rows}
    assert got == {sid: ids for sid, ids in want.items() if ids}
    year = next(sid for sid, r in rows.items() if r["window"] == "year" and r["world_id"] == "w1")
    # From a year summary to its raw messages with one join.
    raw = sample.query(
        "SELECT m.message_id, m.content FROM marts.mart_summary_lineage l JOIN main.messages m USING (message_id) "
        "WHERE l.summary_id = ?",
        [year],
    )
    assert {r[0] for r in raw} == want[year] and len(raw) == len(want[year])
    assert {"tomatoes planted", "compost turned"} <= {r[1] for r in raw}


def test_mart_recall_quality_follows_recall_across_models(sample):
    rows = sample.query(
        "SELECT run_id, model, index_name, r_at_1, r_at_5, chars_per_day, r_at_5_vs_raw, chars_share_of_raw, "
        "llm_calls, cost_usd, complete FROM marts.mart_recall_quality ORDER BY run_id, index_name"
    )
    got = {(r[0], r[2]): r for r in rows}
    assert len(rows) == 6  # one row per run and index
    off = got[("evaloffline", "temporal day summaries")]
    assert off[1] == "offline/deterministic-extractive-v4" and off[3:6] == (0.3, 0.4, 100.0)
    assert off[6] == pytest.approx(0.4 / 0.8) and off[7] == pytest.approx(1000 / 3000)
    assert off[8] == 7 and off[9] is None and off[10] is True
    paid = got[("evalpaid", "temporal day summaries")]
    assert paid[1] == "openai/gpt-x" and paid[6] == pytest.approx(1.0) and paid[9] == 0.25
    assert paid[10] is False  # a run with a failed Dagster run is not complete
    rnd = got[("evalpaid", "random ranking")]
    assert rnd[3:6] == (0.1, 0.5, None) and rnd[7] is None
    # which files and which store's engine: memory_search's figures differ between engines
    runs = sample.query(
        "SELECT DISTINCT run_id, files, file_count, store_engine FROM marts.mart_recall_quality ORDER BY run_id"
    )
    assert [(r[0], json.loads(r[1]), r[2], r[3]) for r in runs] == [
        ("evaloffline", ["26.json"], 1, "sqlite"),
        ("evalpaid", ["26.json", "30.json"], 2, "postgresql"),
    ]


def test_mart_ingest_daily_matches_the_messages(sample):
    lo, hi = datetime(2025, 12, 30, tzinfo=CST), datetime(2026, 1, 3, tzinfo=CST)
    rows = _rows(
        sample.store,
        select(messages, conversations.c.world_id, conversations.c.platform, conversations.c.debug)
        .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
        .where(messages.c.at >= lo, messages.c.at < hi),
    )
    want: dict[tuple, Counter] = defaultdict(Counter)
    for r in rows:
        c = want[(_cst_day(r["at"]), r["world_id"], r["platform"])]
        c["messages"] += 1
        c["debug"] += r["debug"]
        c["cron"] += r["platform"].lower() == "cron"
        c["tool_only"] += r["role"] == "tool" or (
            r["role"] == "assistant" and not r["content"] and bool(r["tool_calls"])
        )
    got = {
        (r[0], r[1], r[2]): r[3:]
        for r in sample.query(
            "SELECT cst_day, world_id, platform, messages, debug_messages, cron_messages, tool_only_messages, "
            "debug_share, cron_share, tool_only_share FROM marts.mart_ingest_daily"
        )
    }
    assert set(got) == set(want)
    for key, c in want.items():
        n = c["messages"]
        assert got[key][:4] == (n, c["debug"], c["cron"], c["tool_only"]), key
        assert got[key][4:] == pytest.approx((c["debug"] / n, c["cron"] / n, c["tool_only"] / n), abs=1e-4)
    assert got[(D2, "w1", "discord")][3] == 2 and got[(D2, "w1", "cron")][5] == 1.0
    assert got[(D2, "w2", "CRON")][2] == 2 and got[(D2, "w2", "CRON")][5] == 1.0
    assert got[(D3, "w1", "local")][4] == 1.0


def test_staging_and_marts_use_plain_names_and_real_types(sample):
    """No column of a staging view or a mart is named with a word DuckDB reserves or that the store's
    tables had to quote (window, at, start, end, partition); an instant (`*_at`) is a TIMESTAMPTZ, a
    day (`*_day`, `period_start`) a DATE; no text column holds only numbers, days or timestamps;
    and no day column repeats cst_day."""
    # One connection for every check: a connection per query cost ~13 s on the sample's file.
    with sample.duck() as con:

        def query(sql: str) -> list[tuple]:
            return con.execute(sql).fetchall()

        reserved = {
            r[0] for r in query("SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category = 'reserved'")
        }
        reserved |= {"window", "at", "start", "end", "partition", "day"}
        columns = query(
            "SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema IN ('staging', 'marts') ORDER BY ALL"
        )
        assert len({(s, t) for s, t, _, _ in columns}) >= 35
        assert [(t, c) for _, t, c, _ in columns if c.lower() in reserved] == []
        assert [(t, c, ty) for _, t, c, ty in columns if c.endswith("_at") and ty != "TIMESTAMP WITH TIME ZONE"] == []
        days = [
            (s, t, c)
            for s, t, c, _ in columns
            if (c.endswith("_day") and not c.endswith("_per_day")) or c == "period_start"
        ]
        assert [(t, c) for s, t, c, ty in columns if (s, t, c) in days and ty != "DATE"] == []
        dates = defaultdict(list)
        for s, t, c, ty in columns:
            if ty == "DATE":
                dates[(s, t)].append(c)
        for (schema, table), cols in dates.items():
            if "cst_day" not in cols or (n := query(f"SELECT count(*) FROM {schema}.{table}")[0][0]) == 0:
                continue
            for c in cols:
                if c != "cst_day":
                    same = query(f'SELECT count(*) FROM {schema}.{table} WHERE "{c}" IS NOT DISTINCT FROM cst_day')
                    assert same[0][0] < n, f"{table}.{c} repeats cst_day"
        for s, t, c, ty in columns:
            if ty != "VARCHAR" or c.endswith(("_id", "_key")):
                continue
            kinds = query(
                f'SELECT count("{c}"), count(try_cast("{c}" AS BIGINT)), count(try_cast("{c}" AS DATE)),'
                f' count(try_cast("{c}" AS TIMESTAMPTZ)) FROM {s}.{t}'
            )[0]
            assert not (kinds[0] and kinds[0] in kinds[1:]), f"{t}.{c} is text holding only numbers, days or instants"
        assert (
            dict((c, ty) for _, t, c, ty in columns if t == "stg_tower_entries")["entry_at"]
            == "TIMESTAMP WITH TIME ZONE"
        )


def test_mart_temporal_gaps_matches_the_store(sample):
    """Per world, from its first event day to the newest day row of any world: the days without a
    summary, and the longest run of them, computed here from the store's day rows."""
    rows = _rows(sample.store, select(temporal_summaries).where(temporal_summaries.c.window == "day"))
    first = {r["world_id"]: _cst_day(r["first_event_at"]) for r in _rows(sample.store, select(worlds))}
    last = max(r["period_start"] for r in rows)
    by_day = {(r["world_id"], r["period_start"]): r for r in rows}
    want = {}
    for world, start in first.items():
        days = [start + timedelta(days=i) for i in range((last - start).days + 1)]
        gaps = [d for d in days if not ((r := by_day.get((world, d))) and not r["empty_reason"] and r["content"])]
        runs: list[list[date]] = []
        for d in gaps:
            if runs and runs[-1][1] == d - timedelta(days=1):
                runs[-1][1] = d
            else:
                runs.append([d, d])
        longest = max(runs, key=lambda r: ((r[1] - r[0]).days, -r[0].toordinal()), default=None)
        want[world] = (
            len(days),
            len(days) - len(gaps),
            len(gaps),
            sum(bool(by_day.get((world, d), {}).get("empty_reason")) for d in gaps),
            sum((world, d) not in by_day for d in gaps),
            len(runs),
            (longest[1] - longest[0]).days + 1 if longest else 0,
            longest[0] if longest else None,
            longest[1] if longest else None,
        )
    got = {
        r[0]: r[1:]
        for r in sample.query(
            "SELECT world_id, days, days_with_summary, days_without_summary, placeholder_days, missing_days, gap_runs,"
            " longest_gap_days, longest_gap_start, longest_gap_end FROM marts.mart_temporal_gaps"
        )
    }
    assert got == want
    assert got["w3"][4] == 1 and got["w3"][7] == D4  # its D4 row is missing: the last day, a gap of its own
    assert any(v[2] for v in got.values())


def test_the_snapshot_marts_match_sleep_diff(sample):
    """Between each pair of a world's consecutive deep-sleep snapshots, the memories added, removed
    and changed are what `sleep diff` reads from the store; a world's first snapshot is paired with
    the day deep sleep last ran before it (its snapshot then empty), so its first memories count."""
    from memory_pipeline.sleep import snapshots
    from memory_pipeline.sleep.tables import sleep_runs

    with sample.store.connect() as conn:
        done = conn.execute(
            select(sleep_runs.c.world_id, sleep_runs.c.day).where(
                sleep_runs.c.stage == "deep_sleep", sleep_runs.c.status == "done"
            )
        ).all()
    by_world: defaultdict[str, list[date]] = defaultdict(list)
    for world, day in done:
        by_world[world].append(day)
    ran = sorted(by_world.pop("*", []))
    want_diffs, want_rows, want_merged = {}, set(), {}
    lead_ins = 0
    for world, days in by_world.items():
        days.sort()
        if earlier := [d for d in ran if d < days[0]]:
            days.insert(0, earlier[-1])
            lead_ins += 1
        for before, after in zip(days, days[1:], strict=False):
            d = snapshots.diff(sample.store, world, before, after)
            removed = [*d.deprecated, *d.merged]
            sizes = (
                len(snapshots.snapshot(sample.store, world, before)),
                len(snapshots.snapshot(sample.store, world, after)),
            )
            want_diffs[(world, after)] = (before, *sizes, len(d.created), len(removed), len(d.merged), len(d.modified))
            want_rows |= {(world, after, m, "added") for m in d.created}
            want_rows |= {(world, after, m, "removed") for m in removed} | {
                (world, after, m, "changed") for m in d.modified
            }
            want_merged |= {(world, after, m): into for m, into in d.merged.items()}
    got_diffs = {
        (r[0], r[1]): r[2:]
        for r in sample.query(
            "SELECT world_id, after_day, before_day, memories_before, memories_after, added, removed, merged, changed"
            " FROM marts.mart_sleep_snapshot_diffs"
        )
    }
    assert got_diffs == want_diffs
    got = sample.query(
        "SELECT world_id, after_day, memory_id, change, merged_into FROM marts.mart_sleep_snapshot_changes"
    )
    assert {r[:4] for r in got} == want_rows
    assert {r[:3]: r[4] for r in got if r[4]} == want_merged
    assert len(want_diffs) >= 3 and any(r[3] == "added" for r in want_rows)  # sleep wrote memory over D1..D4
    assert lead_ins  # some world's first memories came after the first night: its first pair counts them


def test_mart_llm_cost_by_data_day_matches_the_ledger(sample):
    """The exported calls grouped by the partition they were made for (not the day of the call)."""
    ledger = _rows(sample.store, select(llm_ledger).where(llm_ledger.c.at < datetime(2026, 1, 3, tzinfo=CST)))
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in ledger:
        groups[(r["partition"] or "(none)", r["asset"] or "(none)", r["model"])].append(r)
    got = {
        (r[0] or "(none)", r[1], r[2]): r[3:]
        for r in sample.query(
            "SELECT partition_key, asset, model, calls, cache_hits, failures, tokens_in, tokens_out, priced_calls, cost_usd,"
            " first_call_day, last_call_day, data_day, data_grain, provider_tokens_in, provider_tokens_out,"
            " estimated_tokens_in, estimated_tokens_out, truncated_calls, latency_p50_ms, latency_p95_ms"
            " FROM marts.mart_llm_cost_by_data_day"
        )
    }
    assert set(got) == set(groups)
    for key, calls in groups.items():
        priced = [c["cost_usd"] for c in calls if c["cost_usd"] is not None]
        want = (
            sum(c["outcome"] in ("ok", "error") for c in calls),
            sum(c["outcome"] == "cache_hit" for c in calls),
            sum(c["outcome"] == "error" for c in calls),
            sum(c["tokens_in"] for c in calls),
            sum(c["tokens_out"] for c in calls),
            len(priced),
        )
        assert got[key][:6] == want, key
        assert (got[key][6] is None) if not priced else got[key][6] == pytest.approx(sum(priced))
        assert got[key][7:9] == (min(_cst_day(c["at"]) for c in calls), max(_cst_day(c["at"]) for c in calls))
        split = tuple(
            sum(c[f"tokens_{d}"] for c in calls if c["tokens_source"] == source)
            for source in ("provider", "estimated")
            for d in ("in", "out")
        )
        assert got[key][11:16] == (*split, sum(c["finish_reason"] == "length" for c in calls)), key
        latencies = sorted(c["latency_ms"] for c in calls if c["outcome"] in ("ok", "error"))
        assert got[key][16:] == pytest.approx((_quantile(latencies, 0.5), _quantile(latencies, 0.95))), key
    day = got[("2025-12-31", "temporal_day_summaries", PRICED)]
    assert day[9:11] == (D2, "day") and day[6] == pytest.approx(0.004)
    assert day[11:16] == (100 + 101 + 102, 10 + 11 + 12, 100, 10, 1)  # as mart_llm_cost_daily's D2
    assert got[("2025-12", "temporal_month_summaries", PRICED)][7:11] == (D3, D3, date(2025, 12, 1), "month")
    assert got[("(none)", "objects_archive", PRICED)][9:11] == (None, None)
    assert got[("2025-11", "conversation_rolling_summaries", PRICED)][9:11] == (None, "other")
    # One macro (llm_call_measures) measures both marts: the same columns, the same totals.
    measures = "calls, cache_hits, failures, tokens_in, tokens_out, provider_tokens_in, provider_tokens_out, "
    measures += "estimated_tokens_in, estimated_tokens_out, truncated_calls, priced_calls, cost_usd"
    totals = f"SELECT {', '.join(f'sum({m})' for m in measures.split(', '))} FROM marts."
    by_data_total, daily_total = (
        sample.query(totals + m)[0] for m in ("mart_llm_cost_by_data_day", "mart_llm_cost_daily")
    )
    assert by_data_total[:-1] == daily_total[:-1] and by_data_total[-1] == pytest.approx(daily_total[-1])
    columns = (
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position"
    )
    daily = sample.query(columns, ["mart_llm_cost_daily"])
    by_data = sample.query(columns, ["mart_llm_cost_by_data_day"])
    assert daily[4:] == by_data[6:-2]  # after the keys, before first_call_day and last_call_day


def test_daily_mart_tests_report_one_result_per_partition(sample):
    """The dbt tests of a daily mart run once for the range, and their result is recorded for each
    partition of the run, tied to that partition's materialization; whole-table models keep one."""
    from memory_pipeline.defs.analyst.dbt import DAILY_MARTS

    run_id = sample.runs["marts"]
    records = sample.instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records
    evaluations = [r.event_log_entry.dagster_event.event_specific_data for r in records]
    daily: defaultdict[tuple, list] = defaultdict(list)
    for e in evaluations:
        if e.asset_key in DAILY_MARTS:
            daily[(e.asset_key, e.check_name)].append(e)
    days = [(D1 + timedelta(days=i)).isoformat() for i in range(4)]
    assert (AssetKey("analyst_mart_ingest_daily"), "unique_mart_ingest_daily_ingest_key") in daily
    for (asset_key, name), found in daily.items():
        assert sorted(e.partition for e in found) == days, name
        assert all(e.passed for e in found), name
        mats = {
            r.partition_key: r.storage_id
            for r in sample.instance.fetch_materializations(
                AssetRecordsFilter(asset_key=asset_key, asset_partitions=days), limit=100
            ).records
            if r.run_id == run_id
        }
        assert {e.partition: e.target_materialization_data.storage_id for e in found} == mats, name
    whole = [e for e in evaluations if e.asset_key not in DAILY_MARTS]
    assert whole and all(e.partition is None for e in whole)


# --- readers, partition replacement, automation (these change the sample: keep them last) ----------


def test_a_reader_keeps_working_while_an_export_runs_and_a_late_message_re_exports_exactly_its_day(sample):
    before = dict(sample.query("SELECT cst_day, count(*) FROM messages GROUP BY 1"))
    parquet = sample.files.parquet / "messages"
    stamps = {p.parent.name: p.stat().st_mtime_ns for p in parquet.glob("*/*.parquet")}
    late = conversation("w2", "w2-late", cst(2025, 12, 31, 23, 30), ["late marathon note"])
    _ingest(sample.store, sample.tmp, late)
    _run(sample, "day", D2.isoformat(), D2.isoformat())  # what the reconcile sensor would request

    reader = duckdb.connect(str(sample.files.duckdb), read_only=True)
    seen: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                seen.append(reader.execute("SELECT count(*) FROM messages").fetchone()[0])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        _run(sample, "exports", D2.isoformat(), D2.isoformat())  # the export of exactly that day
    finally:
        stop.set()
        thread.join()
    assert not errors and seen and set(seen) == {sum(before.values())}  # the version it opened, whole
    reader.close()

    after = dict(sample.query("SELECT cst_day, count(*) FROM messages GROUP BY 1"))
    assert after == before | {D2: before[D2] + 1}
    restamped = {p.parent.name: p.stat().st_mtime_ns for p in parquet.glob("*/*.parquet")}
    assert {k for k in stamps if restamped[k] != stamps[k]} == {"cst_day=2025-12-31"}
    assert not sample.files.staging.exists()


def test_a_rebuilt_day_requests_the_export_of_that_day_and_its_daily_marts(sample):
    selection = AssetSelection.groups("analyst")
    first = evaluate_automation_conditions(defs=sample.defs, instance=sample.instance, asset_selection=selection)
    _run(sample, "day", D3.isoformat(), D3.isoformat(), force_llm=True)
    result = evaluate_automation_conditions(
        defs=sample.defs, instance=sample.instance, asset_selection=selection, cursor=first.cursor
    )

    def requested(key: str) -> list[str | None]:
        return sorted(result.get_requested_partitions(AssetKey(key)), key=str)

    assert requested("analyst_temporal_day_summaries") == [D3.isoformat()]
    assert requested("analyst_messages") == [D3.isoformat()]
    assert requested("analyst_temporal_period_runs") == [None]  # exported whole
    assert requested("analyst_mart_ingest_daily") == [D3.isoformat()]  # same tick, after its export
    today = cst_day_open.get_last_partition_key()
    yesterday = (date.fromisoformat(today) - timedelta(days=1)).isoformat()
    assert requested("analyst_llm_ledger") == [yesterday, today]  # the calls of that run landed today
    for untouched in ("analyst_temporal_month_summaries", "analyst_temporal_day_chunks", "analyst_worlds"):
        assert requested(untouched) == [], untouched


def test_a_daily_marts_run_replaces_exactly_its_days_and_reuses_the_last_builds_parse(sample):
    """The daily window travels in the file dbt builds (main.dbt_day_window), not in dbt's vars:
    with the same vars from build to build, dbt reuses the previous build's parse instead of parsing
    the whole project again. A run of one day replaces that day's mart rows and no other, and the
    published file keeps no window table."""
    late = conversation("w3", "w3-late", cst(2025, 12, 31, 21), ["late garden note", "noted"])
    _ingest(sample.store, sample.tmp, late)
    _run(sample, "exports", D2.isoformat(), D2.isoformat())

    def w3_messages() -> dict[date, int]:
        q = "SELECT cst_day, sum(messages) FROM marts.mart_ingest_daily WHERE world_id = 'w3' GROUP BY 1"
        return dict(sample.query(q))

    before = w3_messages()
    assert D2 not in before  # w3 wrote nothing on D2 until now
    _run(sample, "daily_marts", D1.isoformat(), D1.isoformat())
    assert w3_messages() == before  # D2's rows are not D1's run's to replace
    _run(sample, "daily_marts", D2.isoformat(), D2.isoformat())
    assert w3_messages() == before | {D2: 2}
    assert sample.query("SELECT count(*) FROM information_schema.tables WHERE table_name = 'dbt_day_window'") == [(0,)]

    # the build's target folder is among the file's last builds, not in the project's target/
    build = f"analyst_dbt_daily-{sample.runs['daily_marts'][:7]}-*"
    (log,) = sample.files.dbt_builds.glob(f"{build}/dbt.log")
    assert not list((Path(analytics_dbt.project_dir) / "target").glob(build))
    assert len(list(sample.files.dbt_builds.iterdir())) <= sample.files.dbt_builds_kept
    parse = [json.loads(line)["info"]["name"] for line in log.read_text().splitlines() if "Pars" in line]
    assert "UnableToPartialParse" not in parse and "PartialParsingSkipParsing" in parse, parse
