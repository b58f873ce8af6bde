"""Late data and new worlds reach their summaries: the period-run record, the set-based staleness
query, the reconcile sensor and the `reconcile` / `status` commands, on the real PostgreSQL and
Redis with an ephemeral Dagster instance."""

import json
import re
from datetime import date, datetime, timedelta

import pytest
from dagster import build_sensor_context, instance_for_test
from sqlalchemy import event, func, select
from typer.testing import CliRunner

from memory_pipeline import domains, operations
from memory_pipeline.cli import app
from memory_pipeline.definitions import build_defs
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import llm_ledger, messages
from memory_pipeline.lib.timeutil import period_bounds
from memory_pipeline.resources import CacheResource, LLMResource, MemoryConfigResource, MemoryStoreResource
from memory_pipeline.temporal import reconcile
from memory_pipeline.temporal.reconcile import spans, stale_periods
from memory_pipeline.temporal.tables import temporal_period_runs, temporal_summaries
from memory_pipeline_tests.conftest import CST, conversation, cst
from memory_pipeline_tests.conftest import event as line

DAYS = ("2025-12-29", "2025-12-31")


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def defs(pg_url, redis_url):
    return build_defs(
        {
            "memory_store": MemoryStoreResource(database_url=pg_url),
            "kv_cache": CacheResource(redis_url=redis_url),
            "llm": LLMResource(),
            "memory_config": MemoryConfigResource(),
        }
    )


@pytest.fixture
def materialized(defs, instance, ingest):
    """w1 from 2025-12-30, w2 from 2025-12-31; days, December and 2025 materialized."""
    ingest(
        conversation("w1", "a", cst(2025, 12, 30, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "b", cst(2025, 12, 31, 22), ["compost turned", "compost warm"])
        + conversation("w2", "e", cst(2025, 12, 31, 8), ["marathon pacing", "marathon intervals"])
    )
    for window, lo, hi in (("day", *DAYS), ("month", "2025-12", "2025-12"), ("year", "2025", "2025")):
        assert operations.materialize(window, lo, hi, instance=instance, defs=defs).success


def _evaluate(defs, instance, pg_url):
    ctx = build_sensor_context(
        instance=instance,
        resources={"memory_store": MemoryStoreResource(database_url=pg_url), "memory_config": MemoryConfigResource()},
        repository_def=defs.get_repository_def(),
    )
    return defs.get_sensor_def("temporal_reconcile_sensor").evaluate_tick(ctx)


def _requested(defs, instance, pg_url) -> list[tuple[str, str, str]]:
    return [(r.job_name, r.partition_key, r.run_key) for r in _evaluate(defs, instance, pg_url).run_requests]


def _run(defs, instance, job_name: str, partition_key: str) -> None:
    """What the daemon does with a request: the job's run of that one partition."""
    result = defs.resolve_job_def(job_name).execute_in_process(
        instance=instance, partition_key=partition_key, tags={"memory_pipeline/operation": "reconcile"}
    )
    assert result.success


def _row(store, world: str, window: str, period: date) -> dict | None:
    t = temporal_summaries.c
    with store.connect() as conn:
        row = conn.execute(
            select(temporal_summaries).where(t.world_id == world, t.window == window, t.period_start == period)
        )
        row = row.mappings().first()
    return dict(row) if row else None


def test_runs_over_all_worlds_record_their_period_and_subset_runs_do_not(defs, instance, store, materialized):
    with store.connect() as conn:
        runs = {(r["window"], r["period_start"]): r for r in conn.execute(select(temporal_period_runs)).mappings()}
    assert sorted(runs) == [
        ("day", date(2025, 12, 29)),
        ("day", date(2025, 12, 30)),
        ("day", date(2025, 12, 31)),
        ("month", date(2025, 12, 1)),
        ("year", date(2025, 1, 1)),
    ]
    assert [runs[("day", date(2025, 12, d))]["worlds"] for d in (29, 30, 31)] == [0, 1, 2]
    assert runs[("day", date(2025, 12, 29))]["material_ingested_at"] is None  # nothing read
    assert runs[("day", date(2025, 12, 31))]["material_ingested_at"] is not None
    assert runs[("month", date(2025, 12, 1))]["worlds"] == 2
    before = runs[("day", date(2025, 12, 31))]["materialized_at"]
    report = operations.materialize("day", "2025-12-31", "2025-12-31", worlds=["w1"], instance=instance, defs=defs)
    assert report.success
    with store.connect() as conn:
        after = conn.execute(
            select(temporal_period_runs.c.materialized_at).where(
                temporal_period_runs.c.window == "day", temporal_period_runs.c.period_start == date(2025, 12, 31)
            )
        ).scalar_one()
    assert after == before  # a one-world run does not vouch for the other worlds' input
    assert not stale_periods(store, CST)


def test_late_message_is_requested_day_first_then_month_then_year(defs, instance, store, pg_url, ingest, materialized):
    assert not stale_periods(store, CST)
    skipped = _evaluate(defs, instance, pg_url)
    assert skipped.run_requests == [] and "no stale period" in skipped.skip_message

    late = line("w1", "late", "user", "zucchini zucchini zucchini harvest", cst(2025, 12, 30, 10), mid="late-1")
    ingest([late])
    stale = stale_periods(store, CST)
    assert (stale.days, stale.months, stale.years) == ([date(2025, 12, 30)], [date(2025, 12, 1)], [date(2025, 1, 1)])
    reasons = {(w, k): r for w, k, r in stale.reasons}
    assert "1 message(s) ingested after the day was materialized" in reasons[("day", "2025-12-30")]
    assert "1 stale day(s) below: 2025-12-30" in reasons[("month", "2025-12")]
    assert [p.key for p in stale.ready] == ["2025-12-30"]  # the month and year wait for the day
    assert stale.system_rolls == ("past_years",)  # 2025 is in today's past_years roll

    (day_req,) = _requested(defs, instance, pg_url)
    assert day_req[:2] == ("temporal_day_job", "2025-12-30")
    assert day_req[2].startswith("reconcile:day:2025-12-30:")
    assert _requested(defs, instance, pg_url) == [day_req]  # same staleness, same run key: requested once

    _run(defs, instance, "temporal_day_job", "2025-12-30")
    assert "late-1" in _row(store, "w1", "day", date(2025, 12, 30))["source_ids"]
    (month_req,) = _requested(defs, instance, pg_url)
    assert month_req[:2] == ("temporal_month_job", "2025-12")
    assert "day row(s) written after the month was materialized" in stale_periods(store, CST).reasons[0][2]
    _run(defs, instance, "temporal_month_job", "2025-12")
    (year_req,) = _requested(defs, instance, pg_url)
    assert year_req[:2] == ("temporal_year_job", "2025")
    _run(defs, instance, "temporal_year_job", "2025")
    assert not stale_periods(store, CST)
    assert "no stale period" in _evaluate(defs, instance, pg_url).skip_message

    # Late data arriving again for the same day is a new staleness: a new run key.
    ingest([line("w1", "late", "assistant", "zucchini bread baked", cst(2025, 12, 30, 10, 5), mid="late-2")])
    (again,) = _requested(defs, instance, pg_url)
    assert again[:2] == day_req[:2] and again[2] != day_req[2]


def test_a_debug_or_cron_late_message_is_not_late_data(store, ingest, materialized):
    ingest(
        [line("w1", "dbg", "user", "debug talk", cst(2025, 12, 30, 11), debug=True)]
        + [line("w1", "cr", "user", "cron job output", cst(2025, 12, 31, 11), platform="cron")]
    )
    assert not stale_periods(store, CST)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_late_messages_counts_each_days_late_eligible_messages_and_their_newest(backend, store, tmp_path, monkeypatch):
    if backend == "sqlite":
        store = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
        ensure_schema(store, domains.version_locations())
    batches = iter(range(1, 10))

    def ingest(events):
        path = tmp_path / f"batch-{next(batches)}.jsonl"
        path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
        ingest_file(store, path)

    ingest(
        conversation("w1", "a", cst(2025, 3, 1, 9), ["seeds ordered"])
        + conversation("w1", "b", cst(2025, 3, 2, 9), ["beds dug"])
    )
    with store.connect() as conn:
        materialized_at = conn.execute(select(func.max(messages.c.ingested_at))).scalar_one()
    ingest(  # late, but neither is eligible: a debug conversation and a cron platform
        [line("w1", "dbg", "user", "debug talk", cst(2025, 3, 3, 11), debug=True)]
        + [line("w1", "cr", "user", "cron output", cst(2025, 3, 3, 12), platform="cron")]
    )
    ingest(  # late and eligible: two on the 2nd (CST), one at the first instant of the 4th
        conversation("w1", "c", cst(2025, 3, 2, 20), ["late one", "late two"])
        + conversation("w2", "d", cst(2025, 3, 4, 0, 0), ["late on the 4th"])
    )
    with store.connect() as conn:
        newest = conn.execute(select(func.max(messages.c.ingested_at))).scalar_one()
        monkeypatch.setattr(reconcile, "BATCH", 2)  # three VALUES lists for five days
        days = [(d, *period_bounds("day", d, CST), materialized_at) for d in (date(2025, 3, n) for n in range(1, 6))]
        late = reconcile.late_messages(conn, days)
    assert set(late) == {date(2025, 3, 2), date(2025, 3, 4)}  # not the 3rd: debug and cron are not late data
    assert (late[date(2025, 3, 2)][0], late[date(2025, 3, 4)][0]) == (2, 1)
    assert all(at > materialized_at for _, at in late.values())
    assert max(at for _, at in late.values()) == newest


def test_a_new_world_gets_its_rows_on_materialized_days(defs, instance, store, pg_url, ingest, materialized):
    # w3 appears with a message on the 29th (a day materialized with no world at all) and nothing
    # on the 30th and 31st, which still owe it a no_sessions placeholder.
    ingest(conversation("w3", "n", cst(2025, 12, 29, 20), ["violin practice", "violin scales"]))
    stale = stale_periods(store, CST)
    assert stale.days == [date(2025, 12, 29), date(2025, 12, 30), date(2025, 12, 31)]
    reasons = {(w, k): r for w, k, r in stale.reasons}
    assert reasons[("day", "2025-12-30")] == "1 world(s) without a row (w3)"
    assert [run_key for _, _, run_key in _requested(defs, instance, pg_url)] == [
        f"reconcile:day:{d}:{p.marker}"
        for d, p in zip(("2025-12-29", "2025-12-30", "2025-12-31"), stale.ready, strict=True)
    ]
    for job, key, _ in _requested(defs, instance, pg_url):
        _run(defs, instance, job, key)
    assert _row(store, "w3", "day", date(2025, 12, 29))["empty_reason"] is None
    assert _row(store, "w3", "day", date(2025, 12, 31))["empty_reason"] == "no_sessions"
    for expected in ("temporal_month_job", "temporal_year_job"):
        ((job, key, _),) = _requested(defs, instance, pg_url)
        assert job == expected
        _run(defs, instance, job, key)
    assert _row(store, "w3", "month", date(2025, 12, 1))["empty_reason"] is None
    assert _row(store, "w3", "year", date(2025, 1, 1))["empty_reason"] is None
    assert not stale_periods(store, CST)


def test_staleness_is_a_few_queries_whatever_the_number_of_days(defs, instance, store, ingest):
    ingest(conversation("w1", "a", cst(2025, 10, 1, 9), ["orchard pruning", "orchard ladders"]))
    assert operations.materialize("day", "2025-10-01", "2025-12-31", instance=instance, defs=defs).success
    ingest(conversation("w2", "b", cst(2025, 10, 1, 9), ["chess openings", "chess endgames"]))
    statements = []

    def count(*_args):
        statements.append(1)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        stale = stale_periods(store, CST)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert len(stale.days) == 92  # w2 is owed a row on every day since 2025-10-01
    assert len(statements) <= 4
    assert spans("day", stale.days) == [(date(2025, 10, 1), date(2025, 12, 31))]


def test_the_open_day_is_never_stale_nor_requested(defs, instance, store, pg_url, ingest):
    now = datetime.now(CST)
    today, yesterday = now.date(), now.date() - timedelta(days=1)
    ingest(
        conversation(
            "w1",
            "a",
            datetime(yesterday.year, yesterday.month, yesterday.day, 9, tzinfo=CST),
            ["hi there", "hello back"],
        )
    )
    key = yesterday.isoformat()
    assert operations.materialize("day", key, key, instance=instance, defs=defs).success
    # A message of today, and a record of today as a clock-skewed run would leave it.
    ingest([line("w1", "t", "user", "today's talk", now - timedelta(seconds=1))])
    with store.begin() as conn:
        conn.execute(
            temporal_period_runs.insert().values(
                window="day", period_start=today, materialized_at=now - timedelta(hours=1), worlds=0
            )
        )
    assert not stale_periods(store, CST)
    assert "no stale period" in _evaluate(defs, instance, pg_url).skip_message


runner = CliRunner()


@pytest.fixture
def env(monkeypatch, pg_url, redis_url, tmp_path):
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return tmp_path


def _ingest_cli(path, events) -> None:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert runner.invoke(app, ["ingest", str(path)]).exit_code == 0


def test_status_names_a_day_a_world_failed_while_the_others_were_written(env, store, monkeypatch):
    """Findings: w1's day summary failed (the provider down for it) while w2's was written; the day
    has rows but no run record, so the reconcile (recorded periods only) and "Never materialized"
    (periods without rows) both said all was well. Status lists it as incomplete with its backfill,
    which completes it."""
    from memory_pipeline_tests.fake_openai import FakeOpenAI

    _ingest_cli(
        env / "a.jsonl",
        conversation("w1", "a", cst(2025, 12, 30, 9), ["w1 tomatoes planted", "tomatoes watered"])
        + conversation("w2", "e", cst(2025, 12, 30, 10), ["w2 marathon pacing", "marathon intervals"]),
    )
    with FakeOpenAI() as server:
        server.step = lambda body: ("status", 500) if "w1 tomatoes" in json.dumps(body) else ("ok", "a day")
        for name, value in (("MODEL", "openai/fake"), ("API_BASE", server.api_base), ("API_KEY", "k")):
            monkeypatch.setenv(f"MEMORY_LLM_{name}", value)
        monkeypatch.setenv("MEMORY_LLM_MAX_RETRIES", "0")
        failed = runner.invoke(app, ["backfill", "day", "--from", "2025-12-30", "--to", "2025-12-30"])
        assert failed.exit_code == 1, failed.output
        assert set(_rows_of(store, "2025-12-30")) == {"w2"}
        status = " ".join(runner.invoke(app, ["status"]).output.split())
        assert "Pending repairs (reconcile) — none" in status  # (the month and year are never materialized)
        assert "Incomplete (closed; rows, but no run completed them over all worlds" in status, status
        assert "memory-pipeline backfill day --from 2025-12-30 --to 2025-12-30" in status
        server.step = None
        done = runner.invoke(app, ["backfill", "day", "--from", "2025-12-30", "--to", "2025-12-30"])
        assert done.exit_code == 0, done.output
    assert set(_rows_of(store, "2025-12-30")) == {"w1", "w2"}
    assert "Incomplete — none" in runner.invoke(app, ["status"]).output


def _rows_of(store, day: str) -> list[str]:
    with store.connect() as conn:
        t = temporal_summaries.c
        q = select(t.world_id).where(t.window == "day", t.period_start == date.fromisoformat(day))
        return list(conn.execute(q).scalars())


def test_reconcile_and_status_from_the_command_line(env, store):
    _ingest_cli(
        env / "a.jsonl",
        conversation("w1", "a", cst(2025, 12, 30, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w2", "e", cst(2025, 12, 31, 8), ["marathon pacing", "marathon intervals"]),
    )
    for args in (["rebuild", "day", "--from", DAYS[0], "--to", DAYS[1]], ["regenerate", "month", "2025-12"]):
        assert runner.invoke(app, args).exit_code == 0
    assert runner.invoke(app, ["regenerate", "year", "2025"]).exit_code == 0
    status = runner.invoke(app, ["status"])
    assert "Pending repairs" in status.output and "none: every materialized" in status.output

    _ingest_cli(
        env / "late.jsonl",
        [line("w1", "late", "user", "zucchini zucchini zucchini", cst(2025, 12, 31, 7), mid="late-1")]
        + conversation("w3", "n", cst(2025, 12, 31, 20), ["violin practice", "violin scales"]),
    )
    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert "Pending repairs" in status.output
    assert "2025-12-31" in status.output and "message(s) ingested after the day was materialized" in status.output
    assert re.search(r"\(newest \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00\)", status.output)  # CST, as every operator time

    dry = runner.invoke(app, ["reconcile", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "dry run: nothing materialized" in dry.output
    for text in (
        "world(s) without a row (w3)",
        "1 stale day(s) below: 2025-12-31",
        "1 stale month(s) below: 2025-12",
        "system rolls to rebuild after the repair: past_years",
    ):
        assert text in dry.output
    assert stale_periods(store, CST).days == [date(2025, 12, 31)]  # nothing was run

    done = runner.invoke(app, ["reconcile"])
    assert done.exit_code == 0, done.output
    assert "reconciled: no stale period left" in done.output
    assert "2025-12-31..2025-12-31" in done.output and "2025-12..2025-12" in done.output and "2025..2025" in done.output
    assert not stale_periods(store, CST)
    assert "late-1" in _row(store, "w1", "day", date(2025, 12, 31))["source_ids"]
    assert _row(store, "w3", "year", date(2025, 1, 1))["empty_reason"] is None
    assert "none: every materialized" in runner.invoke(app, ["status"]).output
    nothing = runner.invoke(app, ["reconcile"])
    assert nothing.exit_code == 0 and "none: every materialized" in nothing.output and "run " not in nothing.output
    assert "Never materialized — none" in runner.invoke(app, ["status"]).output

    # Closed days and a month with messages that no run materialized: reconcile compares materialized
    # periods with their input and cannot see them; status named nothing, as if all were done.
    _ingest_cli(
        env / "unrun.jsonl",
        conversation("w1", "u", cst(2026, 1, 3, 9), ["kayak rental", "kayak returned"])
        + conversation("w1", "v", cst(2026, 1, 4, 9), ["kiln fired", "kiln cooled"])
        + conversation("w1", "x", cst(2026, 1, 9, 9), ["ferry late", "ferry on time"], debug=True),  # not counted
    )
    flat = " ".join(runner.invoke(app, ["status"]).output.replace("│", " ").split())
    assert "Never materialized (closed; with messages, or read by a month or year with them; no row, no run)" in flat
    assert "month 2026-01 1 memory-pipeline backfill month --from 2026-01 --to 2026-01" in flat
    assert "year 2026" not in flat  # the open year
    # The month's run reads every day of it (a debug day and the days without messages get
    # placeholders), so every one of them is named: the commands, run in order, build the month.
    assert "day 2026-01-01 .. 2026-01-31 31 memory-pipeline backfill day --from 2026-01-01 --to 2026-01-31" in flat
    assert runner.invoke(app, ["backfill", "day", "--from", "2026-01-03", "--to", "2026-01-04"]).exit_code == 0
    flat = " ".join(runner.invoke(app, ["status"]).output.replace("│", " ").split())
    assert "day 2026-01-05 .. 2026-01-31 27 memory-pipeline backfill day --from 2026-01-05 --to 2026-01-31" in flat
    for command in re.findall(r"memory-pipeline (backfill \w+ --from \S+ --to \S+)", flat):
        assert runner.invoke(app, command.split()).exit_code == 0, command
    assert "Never materialized — none" in runner.invoke(app, ["status"]).output


def _ok_calls_after(store, call_id: int) -> list[tuple[str, str, str]]:
    """(asset, world, task) of the model calls made after ``call_id``, in order."""
    t = llm_ledger.c
    with store.connect() as conn:
        rows = conn.execute(
            select(t.asset, t.world_id, t.task).where(t.call_id > call_id, t.outcome == "ok").order_by(t.call_id)
        ).all()
    return [tuple(r) for r in rows]


def _last_call_id(store) -> int:
    with store.connect() as conn:
        return conn.execute(select(func.coalesce(func.max(llm_ledger.c.call_id), 0))).scalar_one()


def test_repair_after_one_late_message_rebuilds_only_that_worlds_system_roll(
    defs, instance, store, redis_client, ingest, materialized
):
    """The repair's system-rolls run goes over every world, but a world whose roll sources are
    unchanged keeps its cached roll (same sources_fp): only the touched world pays model calls."""
    mark = _last_call_id(store)
    assert operations.run_system_rolls(instance=instance, defs=defs).success  # as the daily schedule would
    assert _ok_calls_after(store, mark) == [
        ("temporal_system_rolls", "w1", "past_years"),  # 2025 is in today's past_years roll
        ("temporal_system_rolls", "w2", "past_years"),
    ]
    keys = {w: f"anima:temporal:{w}:sys_roll:past_years:{datetime.now(CST).year}" for w in ("w1", "w2")}
    before = {w: redis_client.get(k) for w, k in keys.items()}

    mark = _last_call_id(store)
    ingest([line("w1", "late", "user", "zucchini zucchini zucchini harvest", cst(2025, 12, 30, 10), mid="late-1")])
    report = operations.repair(instance=instance, defs=defs)
    assert report.success and report.partitions == 3 and report.system_rolls is not None
    assert _ok_calls_after(store, mark) == [
        ("temporal_day_summaries", "w1", "day"),
        ("temporal_month_summaries", "w1", "month"),
        ("temporal_year_summaries", "w1", "year"),
        ("temporal_system_rolls", "w1", "past_years"),
    ]
    after = {w: redis_client.get(k) for w, k in keys.items()}
    assert after["w2"] == before["w2"] and after["w1"] != before["w1"]
    assert "zucchini" in json.loads(after["w1"])["summary"].lower()
