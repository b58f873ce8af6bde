"""The embedded instance's event log (operations.event_log.BatchSqliteEventLogStorage, named in the
CLI's dagster.yaml): a range run's events are all stored and read back as Dagster's own SQLite
event log stores them; a batch is one transaction per database; the UI's watcher follows a run; a
process killed mid-batch leaves what it committed readable; the CLI's dagster.yaml upgrades only
its own old defaults."""

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as db
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)
from dagster._core.events import DagsterEvent, DagsterEventBatchMetadata, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from memory_pipeline import operations
from memory_pipeline.lib import settings
from memory_pipeline.operations import runner
from memory_pipeline.operations.event_log import BatchSqliteEventLogStorage

DAYS = dg.DailyPartitionsDefinition(start_date="2026-01-01", timezone="Asia/Shanghai")
RANGE = ("2026-01-01", "2026-01-30")  # 30 day partitions
DEADLINE = 30.0


@dg.asset(partitions_def=DAYS, backfill_policy=dg.BackfillPolicy.single_run())
def day_rows(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"days": len(context.partition_keys)})


@dg.asset(partitions_def=DAYS, backfill_policy=dg.BackfillPolicy.single_run(), deps=[day_rows])
def day_export(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"first": context.partition_keys[0]})


@dg.asset_check(asset=day_rows, partitions_def=DAYS, name="rows_ok")
def rows_ok(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckEvaluation | dg.Output[None]]:
    """As the project's checks: one evaluation per partition, tied to that partition's materialization."""
    for key in context.partition_keys:
        record = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=day_rows.key, asset_partitions=[key]), limit=1
        ).records[0]
        yield dg.AssetCheckEvaluation(
            asset_key=day_rows.key,
            check_name="rows_ok",
            passed=key != "2026-01-13",
            partition=key,
            target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
                storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp
            ),
        )
    yield dg.Output(None)


JOB = dg.Definitions(assets=[day_rows, day_export], asset_checks=[rows_ok]).resolve_implicit_global_asset_job_def()
RANGE_TAGS = {"dagster/asset_partition_range_start": RANGE[0], "dagster/asset_partition_range_end": RANGE[1]}


def _home(path: Path, yaml: str) -> Path:
    path.mkdir()
    (path / "dagster.yaml").write_text(yaml)
    return path


@pytest.fixture
def batch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh home with the CLI's dagster.yaml, as operations.dagster_home() writes it."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "batch"))
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    (tmp_path / "batch").mkdir()
    operations.dagster_home()
    return tmp_path / "batch"


def _run(home: Path, monkeypatch: pytest.MonkeyPatch, batch_size: str) -> tuple[DagsterInstance, str]:
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", batch_size)
    instance = DagsterInstance.get()
    result = JOB.execute_in_process(instance=instance, tags=RANGE_TAGS)
    assert result.success
    return instance, result.run_id


def _stored(instance: DagsterInstance, run_id: str) -> dict[str, object]:
    """What a reader of the instance sees of one run, without storage ids and timestamps."""
    logs = instance.all_logs(run_id)
    events = [
        (e.dagster_event_type.value, e.dagster_event.asset_key, e.dagster_event.partition)
        for e in logs
        if e.dagster_event is not None and e.dagster_event_type is not None
    ]
    materializations = {
        key.to_user_string(): sorted(
            (r.partition_key, {k: v.value for k, v in r.asset_materialization.metadata.items()})
            for r in instance.fetch_materializations(key, limit=1000).records
            if r.asset_materialization is not None
        )
        for key in (day_rows.key, day_export.key)
    }
    check_key = dg.AssetCheckKey(day_rows.key, "rows_ok")
    history = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=1000)
    checks = sorted((h.partition, h.status.value) for h in history)
    targets = {
        h.partition: h.event.dagster_event.asset_check_evaluation_data.target_materialization_data.storage_id
        for h in history
        if h.event is not None and h.event.dagster_event is not None and h.status.value != "PLANNED"
    }
    partition_of = {
        r.storage_id: r.partition_key for r in instance.fetch_materializations(day_rows.key, limit=1000).records
    }
    status_changes = instance.fetch_run_status_changes(DagsterEventType.RUN_SUCCESS, limit=10).records
    return {
        "events": events,
        "materialized": {
            key.to_user_string(): sorted(instance.get_materialized_partitions(key))
            for key in (day_rows.key, day_export.key)
        },
        "materializations": materializations,
        "checks": checks,
        "checks_target_their_partition": len(targets) == 30
        and all(partition_of.get(sid) == partition for partition, sid in targets.items()),
        "latest": instance.get_latest_materialization_event(day_export.key).dagster_event.partition,  # type: ignore[union-attr]
        "status": instance.get_run_by_id(run_id).status,  # type: ignore[union-attr]
        "status_events": [r.event_log_entry.run_id == run_id for r in status_changes],
    }


def test_a_range_run_stores_and_reads_back_what_dagsters_sqlite_event_log_does(tmp_path, monkeypatch, batch_home):
    stock, stock_run = _run(_home(tmp_path / "stock", runner.OLD_INSTANCE_YAMLS[-1]), monkeypatch, "0")
    assert type(stock.event_log_storage) is SqliteEventLogStorage
    batch, batch_run = _run(batch_home, monkeypatch, settings.DAGSTER_EVENT_BATCH_SIZE)
    assert type(batch.event_log_storage) is BatchSqliteEventLogStorage

    expected, got = _stored(stock, stock_run), _stored(batch, batch_run)
    assert got == expected
    # the seed of this test's numbers: 30 days, two assets, one check failing on one day
    assert len(got["materialized"]["day_rows"]) == 30 and len(got["materialized"]["day_export"]) == 30  # type: ignore[index]
    assert [c for c in got["checks"] if c[1] != "SUCCEEDED"] == [("2026-01-13", "FAILED")]  # type: ignore[union-attr]
    assert got["checks_target_their_partition"] and got["latest"] == RANGE[1]
    assert got["status"] == DagsterRunStatus.SUCCESS and got["status_events"] == [True]
    # the same files as Dagster's own default: history/runs/<run id>.db and index.db
    assert (batch_home / "history" / "runs" / f"{batch_run}.db").exists()


def _materializations(run_id: str, partitions: list[str]) -> list[EventLogEntry]:
    return [
        EventLogEntry(
            error_info=None,
            level=10,
            user_message="",
            run_id=run_id,
            timestamp=time.time(),
            step_key="day_rows",
            job_name="__ASSET_JOB",
            dagster_event=DagsterEvent(
                DagsterEventType.ASSET_MATERIALIZATION.value,
                "__ASSET_JOB",
                event_specific_data=StepMaterializationData(dg.AssetMaterialization(day_rows.key, partition=p)),
                step_key="day_rows",
            ),
        )
        for p in partitions
    ]


def test_a_batch_is_one_commit_per_database(batch_home, monkeypatch):
    instance = DagsterInstance.get()
    run = instance.create_run_for_job(JOB, tags=RANGE_TAGS)
    storage = instance.event_log_storage
    commits: list[object] = []
    listener = lambda conn: commits.append(conn)  # noqa: E731
    db.event.listen(db.engine.Engine, "commit", listener)
    try:
        storage.store_event_batch(_materializations(run.run_id, DAYS.get_partition_keys()[:60]))
    finally:
        db.event.remove(db.engine.Engine, "commit", listener)
    assert len(commits) == 2  # the run's database, then the index database
    assert len(instance.get_materialized_partitions(day_rows.key)) == 60
    assert len(storage.get_records_for_run(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records) == 60


def test_the_uis_watcher_follows_a_run_written_by_another_process(batch_home, monkeypatch):
    """The webserver watches <run id>.db for file changes; a kept connection writes only the WAL,
    so each write touches the file. Here the writer is a second instance (its own connections),
    the run's events written as a real run writes them (a batch of materializations, then the end)."""
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", settings.DAGSTER_EVENT_BATCH_SIZE)
    writer, reader = DagsterInstance.get(), DagsterInstance.get()
    run = writer.create_run_for_job(JOB, tags=RANGE_TAGS)
    seen: list[str] = []
    done = threading.Event()

    def follow(entry: EventLogEntry, _cursor: str) -> None:
        if entry.dagster_event_type is not None:
            seen.append(entry.dagster_event_type.value)
        if entry.dagster_event_type == DagsterEventType.RUN_SUCCESS:
            done.set()

    reader.event_log_storage.watch(run.run_id, None, follow)
    try:
        writer.report_dagster_event(DagsterEvent(DagsterEventType.RUN_START.value, JOB.name), run.run_id)
        events = _materializations(run.run_id, list(DAYS.get_partition_keys()[:5]))
        for i, entry in enumerate(events):
            writer.handle_new_event(entry, batch_metadata=DagsterEventBatchMetadata("b1", i == len(events) - 1))
        writer.report_dagster_event(DagsterEvent(DagsterEventType.RUN_SUCCESS.value, JOB.name), run.run_id)
        assert done.wait(DEADLINE), f"the watcher saw only {seen}"
    finally:
        reader.event_log_storage.end_watch(run.run_id, follow)
    stored = [e.dagster_event_type.value for e in reader.all_logs(run.run_id) if e.dagster_event_type is not None]
    assert seen == stored  # every event, once, in order: the run's planned events first
    assert stored[-7:] == ["PIPELINE_START", *["ASSET_MATERIALIZATION"] * 5, "PIPELINE_SUCCESS"]


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from dagster import DagsterInstance
    from memory_pipeline_tests.integration.test_event_log import DAYS, _materializations

    run_id, where = sys.argv[1], sys.argv[2]
    instance = DagsterInstance.get()
    storage = instance.event_log_storage
    # stop inside the transaction, after its rows are written and before its commit
    name = "_store_asset_rows" if where == "index" else "_insert_rows"
    original = getattr(storage, name)
    def stop_inside(conn, *args):
        out = original(conn, *args)
        print("inside", flush=True)
        time.sleep(600)
        return out
    setattr(storage, name, stop_inside)
    storage.store_event_batch(_materializations(run_id, DAYS.get_partition_keys()[:200]))
    """
)


@pytest.mark.parametrize("where", ["run", "index"])
def test_a_process_killed_mid_batch_leaves_what_it_committed_readable(batch_home, monkeypatch, where):
    instance = DagsterInstance.get()
    run = instance.create_run_for_job(JOB, tags=RANGE_TAGS)
    instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_START.value, JOB.name), run.run_id)
    before = _materializations(run.run_id, DAYS.get_partition_keys()[200:203])
    instance.event_log_storage.store_event_batch(before)  # committed before the killed batch
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, run.run_id, where],
        stdout=subprocess.PIPE,
        text=True,
        env=settings.child_environment(str(settings.REPO_ROOT)),
    )
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], DEADLINE)
        assert ready and child.stdout.readline().strip() == "inside"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(DEADLINE)

    after = DagsterInstance.get()  # a fresh reader: opens the files as the UI or the next run would
    in_run = after.event_log_storage.get_records_for_run(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
    in_index = after.get_materialized_partitions(day_rows.key)
    if where == "run":  # rolled back: none of the batch, the earlier batch whole
        assert len(in_run.records) == 3 and in_index == set(DAYS.get_partition_keys()[200:203])
    else:  # the run's database has the batch, the index none of it (Dagster's own store_event
        # writes the two databases one after the other too)
        assert len(in_run.records) == 203 and in_index == set(DAYS.get_partition_keys()[200:203])
    # and the instance writes on: the next batch is whole in both databases
    after.event_log_storage.store_event_batch(_materializations(run.run_id, DAYS.get_partition_keys()[210:220]))
    assert len(after.get_materialized_partitions(day_rows.key)) == 13
    for name in ("index", run.run_id):
        path = batch_home / "history" / "runs" / f"{name}.db"
        with db.create_engine(f"sqlite:///{path}").connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"


def test_the_cli_writes_its_dagster_yaml_upgrades_its_old_defaults_and_keeps_an_edited_one(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    for i, old in enumerate(runner.OLD_INSTANCE_YAMLS):
        home = _home(tmp_path / f"old{i}", old)
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        operations.dagster_home()
        assert (home / "dagster.yaml").read_text() == runner.INSTANCE_YAML
    edited_text = runner.OLD_INSTANCE_YAMLS[-1].replace("default_limit: 1", "default_limit: 3")
    edited = _home(tmp_path / "edited", edited_text)
    monkeypatch.setenv("DAGSTER_HOME", str(edited))
    with operations.get_instance() as instance:
        assert (edited / "dagster.yaml").read_text() == edited_text
        assert type(instance.event_log_storage) is SqliteEventLogStorage
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("DAGSTER_HOME", str(fresh))
    with operations.get_instance() as instance:
        assert (fresh / "dagster.yaml").read_text() == runner.INSTANCE_YAML
        assert type(instance.event_log_storage) is BatchSqliteEventLogStorage
    assert os.environ["DAGSTER_EVENT_BATCH_SIZE"] == "1000"
    # an instance loaded from its folder (not DAGSTER_HOME's) keeps its event logs in that folder
    monkeypatch.setenv("DAGSTER_HOME", str(edited))
    with DagsterInstance.from_config(str(fresh)) as instance:
        assert instance.event_log_storage.path_for_shard("index") == str(fresh / "history" / "runs" / "index.db")  # type: ignore[attr-defined]
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "0")  # the environment's own value wins
    settings.dagster_home()
    assert os.environ["DAGSTER_EVENT_BATCH_SIZE"] == "0"


def test_a_batch_the_index_refuses_is_written_once_by_dagsters_fallback(batch_home, monkeypatch):
    """The index's transaction fails after the run's committed: the run's rows are deleted again,
    and the instance's fallback (one store_event per event) writes each event once."""
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", settings.DAGSTER_EVENT_BATCH_SIZE)
    instance = DagsterInstance.get()
    run = instance.create_run_for_job(JOB, tags=RANGE_TAGS)
    storage = instance.event_log_storage
    original = storage._store_asset_rows  # type: ignore[attr-defined]

    def refuse_once(*args: object) -> None:
        monkeypatch.setattr(storage, "_store_asset_rows", original)
        raise RuntimeError("the index refused the batch")

    monkeypatch.setattr(storage, "_store_asset_rows", refuse_once)
    events = _materializations(run.run_id, DAYS.get_partition_keys()[:10])
    for i, entry in enumerate(events):
        instance.handle_new_event(entry, batch_metadata=DagsterEventBatchMetadata("b1", i == len(events) - 1))
    stored = storage.get_records_for_run(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    assert sorted(r.event_log_entry.dagster_event.partition for r in stored) == DAYS.get_partition_keys()[:10]  # type: ignore[union-attr]
    assert len(instance.fetch_materializations(day_rows.key, limit=100).records) == 10
