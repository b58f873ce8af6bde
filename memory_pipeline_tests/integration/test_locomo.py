"""Real multi-month conversations (LoCoMo, external data read from ../shared/data/locomo)."""

import os
from datetime import UTC, date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from sqlalchemy import func, select

from memory_pipeline.events.ingest import ingest_events
from memory_pipeline.events.locomo import locomo_events, parse_session_time
from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline.lib.store.tables import conversations, messages
from memory_pipeline.temporal import summaries
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline_tests.conftest import CST

LOCOMO = Path(os.environ.get("LOCOMO_DIR", REPO_ROOT.parent / "shared" / "data" / "locomo"))


def test_session_time_takes_the_zone_given():
    assert parse_session_time("1:56 pm on 8 May, 2023", CST) == datetime(2023, 5, 8, 13, 56, tzinfo=CST)
    utc = parse_session_time("1:56 pm on 8 May, 2023", ZoneInfo("UTC"))
    assert utc.astimezone(UTC) == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_import_locomo_and_summarize_real_days(ctx, store):
    path = LOCOMO / "26.json"
    events, errors = locomo_events(path, CST)
    assert errors == []
    assert len(events) > 300
    report = ingest_events(store, events, source=str(path))
    assert report.inserted == len(events) and report.new_worlds == 1
    assert ingest_events(store, events, source=str(path)).inserted == 0  # idempotent
    with store.connect() as conn:
        n_conv = conn.execute(select(func.count()).select_from(conversations)).scalar_one()
        first, last = conn.execute(select(func.min(messages.c.at), func.max(messages.c.at))).one()
    assert n_conv >= 19
    assert (last - first).days > 150  # months of real conversation

    day = parse_session_time("1:56 pm on 8 May, 2023", CST).date()
    result = summaries.regenerate_day(ctx, day)
    assert result.non_empty == 1
    # The first session is the world's first day, so nothing exists before it.
    assert summaries.regenerate_day(ctx, date(2023, 5, 7)).worlds == 0
    with store.connect() as conn:
        row = conn.execute(select(temporal_summaries)).mappings().one()
    assert row["content"] and len(row["content"]) <= 150 and row["source_kind"] == "message"
    assert row["source_count"] == 1 and len(row["source_ids"]) == 18
    assert summaries.audit_period(store, "day", day, CST) == []
    month = summaries.regenerate_rollup(ctx, "month", date(2023, 5, 1))
    assert month.non_empty == 1


def test_real_conversations_run_through_the_whole_graph(store, pg_url, redis_url):
    from dagster import DagsterEventType, instance_for_test

    from memory_pipeline import operations
    from memory_pipeline_tests.integration.test_dagster import make_defs

    for name in ("26.json", "30.json"):
        events, errors = locomo_events(LOCOMO / name, CST)
        assert errors == []
        ingest_events(store, events, source=name)
    with store.connect() as conn:
        first, last = conn.execute(select(func.min(messages.c.at), func.max(messages.c.at))).one()
        session_days = {
            (w, d)
            for w, d in conn.execute(
                select(conversations.c.world_id, messages.c.at).join(
                    conversations, conversations.c.conversation_id == messages.c.conversation_id
                )
            ).all()
            for d in [d.astimezone(CST).date()]
        }
    lo, hi = first.astimezone(CST).date(), last.astimezone(CST).date()
    defs = make_defs(pg_url, redis_url)
    with instance_for_test() as instance:
        # Through the end of the year: a month waits for all of its days, a year for its months.
        steps = [
            ("day", lo.isoformat(), f"{hi.year}-12-31"),
            ("month", lo.strftime("%Y-%m"), f"{hi.year}-12"),
            ("year", str(lo.year), str(hi.year)),
        ]
        for window, a, b in steps:
            report = operations.materialize(window, a, b, instance=instance, defs=defs)
            assert report.success and len(report.runs) == 1, report.runs[0].error
            checks = instance.all_logs(report.runs[0].run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
            assert checks and all(c.dagster_event.event_specific_data.passed for c in checks)
    with store.connect() as conn:
        rows = conn.execute(
            select(
                temporal_summaries.c.world_id,
                temporal_summaries.c.window,
                temporal_summaries.c.period_start,
                temporal_summaries.c.empty_reason,
            )
        ).all()
    non_empty_days = {(w, p) for w, win, p, reason in rows if win == "day" and reason is None}
    assert non_empty_days == session_days  # one summary per world per day with a session, no more
    months = [r for r in rows if r[1] == "month"]
    assert months and all(r[3] in (None, "no_days") for r in months)
    years = {(r[0], r[2].year): r[3] for r in rows if r[1] == "year"}
    assert years and all(reason is None for reason in years.values())
