"""The schema is managed by migrations: an empty database and one at the previous revision both
reach head, on PostgreSQL and on SQLite; the head schema is exactly what the tables declare; two
processes migrating a fresh database at once do not race, and a migration waits only for one of the
same schema."""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from datetime import UTC, date, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, insert, inspect, select, text

from memory_pipeline import domains
from memory_pipeline.lib.store import Store, metadata
from memory_pipeline.lib.store.migrate import VERSION_TABLE, current, ensure_schema, forget_checked, head, upgrade
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline.recall.tables import FTS_TABLE
from memory_pipeline.temporal.tables import temporal_day_chunks
from memory_pipeline_tests.conftest import PG_URL, forget_schemas, fresh_schema, wait_until_blocked_on_a_lock

LOCATIONS = domains.version_locations()
PREVIOUS = "0003_temporal"


def test_an_empty_database_reaches_head_and_matches_the_declared_tables(empty_url):
    store = Store(empty_url)
    assert current(store) is None
    before, after = upgrade(store, LOCATIONS)
    assert (before, after) == (None, head(LOCATIONS))
    domains.load_tables()
    with store.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}), metadata)
    # Only what SQLite cannot reflect exactly (server defaults) may differ; no table or column. The
    # full-text engine's own tables (FTS5 and its shadow tables on SQLite) are not declared tables.
    assert [
        d
        for d in diff
        if d[0] in ("add_table", "remove_table", "add_column", "remove_column")
        and not (d[0] == "remove_table" and d[1].name.startswith(FTS_TABLE))
    ] == []
    assert VERSION_TABLE in inspect(store.engine).get_table_names()
    assert "alembic_version" not in inspect(store.engine).get_table_names()  # Dagster's name stays free
    assert upgrade(store, LOCATIONS) == (after, after)  # idempotent


def test_a_database_at_the_previous_revision_keeps_its_rows(empty_url):
    store = Store(empty_url)
    upgrade(store, LOCATIONS, PREVIOUS)
    at = datetime(2026, 1, 5, 2, 0, tzinfo=UTC)
    with store.begin() as conn:
        conn.execute(insert(worlds).values(world_id="w1", name="w1", created_at=at, first_event_at=at))
        conn.execute(
            insert(conversations).values(
                conversation_id="c1", world_id="w1", platform="local", debug=False, created_at=at, updated_at=at
            )
        )
        conn.execute(insert(messages).values(message_id="m1", conversation_id="c1", role="user", content="hi", at=at))
        conn.execute(
            text(
                "INSERT INTO temporal_day_chunks (conversation_id, world_id, cst_date, bucket, at, summary,"
                " watermark_message_id, watermark_at, source_ids, model)"
                " VALUES ('c1', 'w1', :d, :b, :b, 'hi', 'm1', :b, '[\"m1\"]', 'offline')"
            ),
            {"d": date(2026, 1, 5), "b": at},
        )
    assert upgrade(store, LOCATIONS) == (PREVIOUS, head(LOCATIONS))
    with store.connect() as conn:
        assert conn.execute(select(messages.c.content)).scalar_one() == "hi"
        chunk = conn.execute(select(temporal_day_chunks)).mappings().one()
    assert chunk["seq"] == 0 and chunk["source_ids"] == ["m1"]
    assert {"partition_leases", "pending_cache_writes"} <= set(inspect(store.engine).get_table_names())


def test_ledger_rows_before_the_tokens_source_revision_are_backfilled(empty_url):
    from memory_pipeline.lib.store.tables import llm_ledger

    store = Store(empty_url)
    upgrade(store, LOCATIONS, "0012_objects")
    at = datetime(2026, 1, 5, 2, 0, tzinfo=UTC)
    rows = [
        ("offline/deterministic-headline-v1", "ok", 10),
        ("openai/gpt-4o", "ok", 120),
        ("openai/gpt-4o", "cache_hit", 0),
        ("openai/gpt-4o", "error", 0),
    ]
    with store.begin() as conn:
        for model, outcome, tokens in rows:
            conn.execute(
                insert(llm_ledger).values(at=at, model=model, outcome=outcome, tokens_in=tokens, tokens_out=tokens)
            )
    upgrade(store, LOCATIONS)
    with store.connect() as conn:
        got = conn.execute(
            select(llm_ledger.c.model, llm_ledger.c.outcome, llm_ledger.c.tokens_source).order_by(llm_ledger.c.call_id)
        ).all()
    assert [tuple(r) for r in got] == [
        ("offline/deterministic-headline-v1", "ok", "estimated"),
        ("openai/gpt-4o", "ok", "provider"),
        ("openai/gpt-4o", "cache_hit", None),
        ("openai/gpt-4o", "error", None),
    ]


def test_core_documents_get_their_history_and_compacted_slices_lose_their_copy(empty_url):
    from memory_pipeline.objects.tables import objects_core, objects_core_versions, objects_hot_nodes

    store = Store(empty_url)
    upgrade(store, LOCATIONS, "0017_ledger_tokens_source")
    at = datetime(2026, 1, 5, 2, 0, tzinfo=UTC)
    node = {"world_id": "w1", "level": 0, "est_tokens": 1, "first_at": at, "last_at": at, "created_at": at}
    with store.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO objects_core (world_id, name, content, revision, updated_at)"
                " VALUES ('w1', 'USER.md', 'Ana wrote this', 4, :at)"
            ),
            {"at": at},
        )
        for node_id, seq, active in (("e1#0", 0, False), ("e2#0", 1, True)):
            conn.execute(
                text(
                    "INSERT INTO objects_hot_nodes (node_id, world_id, seq, level, event_id, slice_index, text,"
                    " est_tokens, first_at, last_at, active, created_at) VALUES (:node_id, :world_id, :seq, :level,"
                    " :event_id, 0, :text, :est_tokens, :first_at, :last_at, :active, :created_at)"
                ),
                {**node, "node_id": node_id, "seq": seq, "event_id": node_id[:2], "text": "raw", "active": active},
            )
    upgrade(store, LOCATIONS)
    with store.connect() as conn:
        core = conn.execute(select(objects_core)).mappings().one()
        history = conn.execute(select(objects_core_versions)).mappings().all()
        texts = dict(conn.execute(select(objects_hot_nodes.c.node_id, objects_hot_nodes.c.text)).all())
    assert (core["version"], core["written_by"]) == (1, "unknown")
    assert [(h["version"], h["written_by"], h["content"], h["revision"]) for h in history] == [
        (1, "unknown", "Ana wrote this", 4)
    ]
    assert texts == {"e1#0": "", "e2#0": "raw"}  # compacted: the raw table holds it; hot: kept


def test_remember_rows_before_the_as_of_day_revision_get_the_cst_day_they_were_written_on(empty_url):
    """A `remember` row had no day: it joined every past day's deep-sleep set and snapshot."""
    store = Store(empty_url)
    upgrade(store, LOCATIONS, "0017_ledger_tokens_source")
    with store.begin() as conn:
        for mid, at, day in (
            ("f-remember", datetime(2026, 3, 4, 17, 30, tzinfo=UTC), None),  # 2026-03-05 01:30 CST
            ("f-light", datetime(2026, 3, 2, 1, 0, tzinfo=UTC), date(2026, 3, 1)),
        ):
            conn.execute(
                text(
                    "INSERT INTO semantic_memories (memory_id, world_id, type, content, source_sessions, observed_at,"
                    " status, version, created_by, created_day, created_at, updated_at)"
                    " VALUES (:m, 'w1', 'world', 'x', '[]', :at, 'active', 1, 'remember', :d, :at, :at)"
                ),
                {"m": mid, "at": at if empty_url.startswith("postgresql") else at.replace(tzinfo=None), "d": day},
            )
    upgrade(store, LOCATIONS)
    with store.connect() as conn:
        days = dict(conn.execute(text("SELECT memory_id, created_day FROM semantic_memories")).all())
    assert {k: str(v) for k, v in days.items()} == {"f-remember": "2026-03-05", "f-light": "2026-03-01"}


def test_tower_entries_keep_their_rows_and_ids_become_unique_per_group(empty_url):
    """0031: ids were unique per type; now per (type, group), indexes kept (SQLite copies the table)."""
    store = Store(empty_url)
    upgrade(store, LOCATIONS, "0030_sleep_runs_day_stage")
    at = datetime(2026, 1, 5, 2, 0, tzinfo=UTC)
    row = (
        "INSERT INTO tower_entries (type_name, entry_id, at, at_given, group_value, content, chars, ingested_at)"
        " VALUES ('tool/errors', :id, :at, true, :g, '\"boom\"', 4, :at)"
    )
    with store.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO tower_types (name, description, chain, summary_cap, summaries_enabled, group_field,"
                " builtin, created_at, updated_at)"
                " VALUES ('tool/errors', '', '[\"day\"]', 'day', false, 'world', false, :at, :at)"
            ),
            {"at": at},
        )
        conn.execute(text(row), {"id": "t1", "g": "aria", "at": at})
        with pytest.raises(Exception, match="(?i)unique"):  # noqa: PT011 - the driver's IntegrityError
            with conn.begin_nested():
                conn.execute(text(row), {"id": "t1", "g": "bolt", "at": at})
    upgrade(store, LOCATIONS)
    with store.begin() as conn:
        conn.execute(text(row), {"id": "t1", "g": "bolt", "at": at})
        with pytest.raises(Exception, match="(?i)unique"):  # noqa: PT011
            with conn.begin_nested():
                conn.execute(text(row), {"id": "t1", "g": "bolt", "at": at})
    with store.connect() as conn:
        got = sorted(conn.execute(text("SELECT group_value, entry_id FROM tower_entries")).all())
    assert [tuple(r) for r in got] == [("aria", "t1"), ("bolt", "t1")]
    indexes = {i["name"] for i in inspect(store.engine).get_indexes("tower_entries")}
    assert {"ix_tower_entries_type_at", "ix_tower_entries_group_at", "ix_tower_entries_ingested_at"} <= indexes


def test_the_organize_claim_reads_the_queue_index_instead_of_sorting_the_backlog(empty_url):
    """0033: the claim's query (``worker._NEXT_PAGE``) can use the partial queue index: its WHERE
    implies the index's predicate, and the index's order is the claim's (no sort). On PostgreSQL
    scans and sorts are priced out so that only a usable index can answer."""
    from memory_pipeline.objects.worker import _NEXT_PAGE

    store = Store(empty_url)
    upgrade(store, LOCATIONS, "0032_recall_fts_per_world")
    upgrade(store, LOCATIONS)
    indexes = {i["name"] for i in inspect(store.engine).get_indexes("objects_event_state")}
    assert "ix_objects_event_state_queue" in indexes
    with store.begin() as conn:
        query = _NEXT_PAGE.compile(conn)
        params = {**query.params, "world": "aria"}
        if conn.dialect.name == "sqlite":
            args = tuple(params[k] for k in query.positiontup or ())
            plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {query}", args))
            assert "ix_objects_event_state_queue" in plan and "TEMP B-TREE" not in plan, plan
        else:
            for knob in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
                conn.exec_driver_sql(f"SET LOCAL {knob} = off")
            plan = " ".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN {query}", params))
            assert "ix_objects_event_state_queue" in plan and "Sort" not in plan, plan


def test_the_organize_claim_finds_its_events_attachments_by_event_and_world(empty_url):
    """0037: the claim reads the objects its event is attached to (``worker._NEXT_PAGE``'s
    subquery) from an index led by the event and the world. Before it, SQLite (and PostgreSQL
    without statistics) answered the lookup from the primary key (world, object, event), reading
    every attachment of the world: each claim of a backlog cost more than the one before. Here, on tables without statistics
    and with the primary key the only other index that could answer, the plan must name the
    index whose first columns are the lookup's two conditions."""
    from memory_pipeline.objects.worker import _NEXT_PAGE

    store = Store(empty_url)
    upgrade(store, LOCATIONS, "0036_store_calendar_zone")
    upgrade(store, LOCATIONS)
    led = {
        i["name"]
        for i in inspect(store.engine).get_indexes("objects_attachments")
        if i["column_names"][:2] == ["event_id", "world_id"]
    }
    assert led == {"ix_objects_attachments_event_world"}
    with store.begin() as conn:
        query = _NEXT_PAGE.compile(conn)
        params = {**query.params, "world": "aria"}
        if conn.dialect.name == "sqlite":
            args = tuple(params[k] for k in query.positiontup or ())
            plan = [str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {query}", args)]
        else:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            conn.exec_driver_sql("SET LOCAL enable_bitmapscan = off")
            plan = [r[0] for r in conn.exec_driver_sql(f"EXPLAIN {query}", params)]
    lookup = [line for line in plan if "objects_attachments" in line]
    assert len(lookup) == 1 and "ix_objects_attachments_event_world" in lookup[0], plan


def test_request_ids_recorded_before_their_fingerprint_replay_as_before(empty_url):
    """0034: an id recorded before has no fingerprint and replays its first result whatever the
    arguments; an id recorded after refuses other arguments."""
    from memory_pipeline.lib.store import requests

    store = Store(empty_url)
    upgrade(store, LOCATIONS, "0033_objects_queue_index")
    with store.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO request_ids (world_id, kind, request_id, result, created_at)"
                " VALUES ('w1', 'k', 'old-1', '{\"n\": 1}', :at)"
            ),
            {"at": datetime(2026, 1, 5, tzinfo=UTC)},
        )
    upgrade(store, LOCATIONS)

    def write(conn) -> dict:
        return {"n": 2}

    assert requests.once(store, "w1", "k", "old-1", write, {"any": "arguments"}) == ({"n": 1}, True)
    assert requests.once(store, "w1", "k", "new-1", write, {"a": 1}) == ({"n": 2}, False)
    assert requests.once(store, "w1", "k", "new-1", write, {"a": 1}) == ({"n": 2}, True)
    with pytest.raises(requests.RequestConflict, match="'new-1' was used for another request"):
        requests.once(store, "w1", "k", "new-1", write, {"a": 2})


def test_the_history_is_one_line_across_the_platform_and_the_domains():
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from memory_pipeline.lib.store.migrate import SCRIPT_LOCATION

    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", ":".join(LOCATIONS))
    chain = [s.revision for s in ScriptDirectory.from_config(cfg).walk_revisions()][::-1]
    assert chain == [
        "0001_platform",
        "0002_events",
        "0003_temporal",
        "0004_chunk_seq_period_runs",
        "0005_partition_leases",
        "0006_pending_cache_writes",
        "0007_period_run_settings",
        "0009_tower",
        "0010_sleep",
        "0010_conversation",
        "0012_objects",
        "0016_sleep_rebuild",
        "0017_ledger_tokens_source",
        "0018_message_at_from_ingest",
        "0019_conversation_failures",
        "0020_tower_guardrail",
        "0021_objects_core_history",
        "0022_sleep_as_of_day",
        "0023_recall_eval",
        "0024_recall_search",
        "0025_access_tokens",
        "0026_request_ids",
        "0027_lease_process",
        "0028_recall_doc_base",
        "0029_tower_window_group_start",
        "0030_sleep_runs_day_stage",
        "0031_tower_entry_id_per_group",
        "0032_recall_fts_per_world",
        "0033_objects_queue_index",
        "0034_request_fingerprint",
        "0035_tower_type_owner",
        "0036_store_calendar_zone",
        "0037_objects_attachment_lookup",
    ]
    assert head(LOCATIONS) == chain[-1]


def _migrate_in_a_process(url: str, queue) -> None:
    try:
        store = Store(url)
        forget_checked()
        ensure_schema(store, LOCATIONS)
        queue.put(current(store))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put(f"error: {type(exc).__name__}: {exc}")


def test_two_processes_migrating_a_fresh_database_at_once_do_not_race(empty_url):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_migrate_in_a_process, args=(empty_url, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    results = [queue.get(timeout=5) for _ in procs]
    assert results == [head(LOCATIONS)] * 3


def test_the_migration_lock_is_per_schema_so_only_a_migration_of_the_same_schema_waits():
    """On PostgreSQL the lock is keyed by the schema: while one process migrates schema A, a migration
    of A waits for it and a migration of schema B in the same database does not (the tests migrate
    a fresh schema per test, six workers at once)."""
    from memory_pipeline.lib.store.migrate import _migration_lock

    with fresh_schema("m") as url_a, fresh_schema("m") as url_b:
        held, admin = Store(url_a), create_engine(PG_URL)
        try:
            with held.engine.connect() as conn, _migration_lock(held, conn):
                other = threading.Thread(target=upgrade, args=(Store(url_b), LOCATIONS))
                other.start()
                other.join(120)
                assert not other.is_alive() and current(Store(url_b)) == head(LOCATIONS)

                app = f"migrate_a_{uuid.uuid4().hex[:8]}"
                same = threading.Thread(target=upgrade, args=(Store(f"{url_a}&application_name={app}"), LOCATIONS))
                same.start()
                assert wait_until_blocked_on_a_lock(admin, app)  # waits on the lock this test holds
                assert current(held) is None
            same.join(120)
            assert not same.is_alive() and current(held) == head(LOCATIONS)
        finally:
            admin.dispose()
    forget_schemas()
