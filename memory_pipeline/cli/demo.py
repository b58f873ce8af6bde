"""The main job on the embedded default (SQLite store and instance under data/, in-process cache,
offline model): generate and ingest the sample, materialize the whole temporal graph for its
range as real Dagster runs, export it to DuckDB and build the dbt marts, and print what came out."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from datetime import date, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from memory_pipeline.cli.console import run_state
from memory_pipeline.events import sample_data
from memory_pipeline.lib import settings

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from dagster import DagsterInstance

    from memory_pipeline.lib.store import Store


# What the demo writes and ingests, under the data folder's sample/: any other file there is not its own.
SAMPLE_FILES = ("events.jsonl", "long_conversation.jsonl")


def sample_files(data: Path) -> list[Path]:
    return [data / "sample" / name for name in SAMPLE_FILES]


def ingested_elsewhere(db: Path, own: list[Path]) -> list[str]:
    """The files a demo store holds events of that the demo did not write (``ingest_batches`` from any
    file but ``own``, the demo's): someone's own data, which starting fresh would delete (a file of
    theirs beside the demo's sample too)."""
    if not db.exists():
        return []
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT DISTINCT source FROM ingest_batches WHERE inserted > 0").fetchall()
    except sqlite3.Error:
        return []  # no ingest recorded (or not a store): nothing of anyone's to lose
    mine = {path.resolve() for path in own}
    return sorted(src for (src,) in rows if Path(src).resolve() not in mine)


def remove_previous(data: Path, analytics: bool) -> None:
    """What ``demo --fresh`` removes under ``data``: the previous demo's store, Dagster instance and
    object projection, and with ``analytics`` the analyst's files of the default location (the
    DuckDB file, its copy in progress, parse state and dbt builds, the Parquet folder, the picture)."""
    for name in ("memory.sqlite", "memory.sqlite-wal", "memory.sqlite-shm"):
        (data / name).unlink(missing_ok=True)
    shutil.rmtree(data / "dagster_home", ignore_errors=True)
    shutil.rmtree(data / "objects", ignore_errors=True)  # the Markdown projection
    if analytics:
        from memory_pipeline.analyst.config import AnalystConfig
        from memory_pipeline.analyst.files import AnalyticsFiles

        files = AnalyticsFiles.at(data / "analytics.duckdb", AnalystConfig())
        for path in (files.duckdb, files.staging, files.dbt_parse_state, files.report):
            path.unlink(missing_ok=True)
        for folder in (files.parquet, files.dbt_builds):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)


def run_demo(*, fresh: bool, console: Console, err: Console) -> int:

    data = settings.data_dir()
    if fresh and not settings.env(settings.ENV_DATABASE_URL):
        if theirs := ingested_elsewhere(data / "memory.sqlite", sample_files(data)):
            err.print(
                f"[red]{data / 'memory.sqlite'} holds events ingested from {', '.join(theirs[:3])}"
                f"{' and more' if len(theirs) > 3 else ''}; the demo starts from an empty store and would "
                "delete them.[/] Keep them and run on them: memory-pipeline demo --keep; or give the demo "
                "its own place: MEMORY_DATA_DIR=/some/dir make demo"
            )
            return 2
        analytics = not settings.env(settings.ENV_DUCKDB_PATH)  # else the analyst's files are elsewhere
        err.print(
            f"starting fresh under {data}: the previous demo's store, Dagster instance, object projection"
            f"{' and analytics files' if analytics else ''} are removed "
            "(memory-pipeline demo --keep keeps them)"
        )
        remove_previous(data, analytics)

    from datetime import datetime
    from zoneinfo import ZoneInfo

    from memory_pipeline import operations
    from memory_pipeline.cli.console import open_store, print_ingest, progress_bar, with_ingest_progress
    from memory_pipeline.cli.temporal import print_status, print_view
    from memory_pipeline.events.ingest import ingest_file
    from memory_pipeline.lib.cache import KVCache
    from memory_pipeline.temporal import config as temporal_config
    from memory_pipeline.temporal.read import temporal_view, viewer_timeline

    store = open_store()
    path, long_path = sample_files(data)
    n = sample_data.generate(path)
    console.print(
        f"[bold]1.[/] sample: {n} events in {path} "
        f"({len(sample_data.WORLDS)} worlds, {sample_data.SAMPLE_START} .. {sample_data.SAMPLE_END})"
    )
    report = with_ingest_progress(store, "ingest sample", lambda tick: ingest_file(store, path, progress=tick))
    print_ingest(report)
    _long_conversation(long_path)
    print_ingest(ingest_file(store, long_path))

    instance = operations.get_instance()
    read_at = sample_data.SAMPLE_READ_AT
    today = sample_data.SAMPLE_END
    start, last_closed = sample_data.SAMPLE_START, today - timedelta(days=1)
    steps = [
        # (window, from, to, as_of): the demo stands on SAMPLE_READ_AT as "now".
        ("chunks", start.isoformat(), today.isoformat(), read_at),
        ("peer_rolls", today.isoformat(), today.isoformat(), read_at),
        ("day", start.isoformat(), last_closed.isoformat(), ""),
        ("month", start.strftime("%Y-%m"), (today.replace(day=1) - timedelta(days=1)).strftime("%Y-%m"), ""),
        ("year", str(start.year), str(today.year - 1), ""),
    ]
    console.print(f"[bold]2.[/] Dagster runs in {operations.dagster_home()} (one run per range)")
    ok = True
    with progress_bar() as progress:
        task = progress.add_task("materialize", total=len(steps) + 1)
        for window, lo, hi, as_of in steps:
            rep = operations.materialize(window, lo, hi, mode="rebuild", as_of=as_of, instance=instance)
            for r in rep.runs:
                ok &= r.success
                console.print(
                    f"   {window:<10} {r.first}..{r.last}: {r.partitions} partition(s) in one run "
                    f"{r.run_id[:8]} of {r.job} ({r.seconds:.1f}s) {run_state(r, instance) if r.success else 'FAILED ' + r.error}"
                )
            progress.advance(task)
        rolls = operations.run_system_rolls(read_at, instance=instance)
        ok &= rolls.success
        console.print(
            f"   system rolls as of {read_at}: run {rolls.run_id[:8]} {run_state(rolls, instance) if rolls.success else rolls.error}"
        )
        progress.advance(task)

    ok &= _tower_step(console, store, instance)
    ok &= _sleep_step(console, instance, store)
    ok &= _objects_step(console, instance)
    ok &= _analyst_step(console, instance)

    console.print("[bold]4.[/] results")
    print_status(store)
    _print_sleep_results(console, store)
    tz = ZoneInfo(settings.timezone_name())
    world = next(iter(sample_data.WORLDS))
    viewer = f"{world}-{today:%Y%m%d}-0"
    cache = KVCache(settings.redis_url())
    view = temporal_view(store, cache, temporal_config.load(), world, viewer, datetime.fromisoformat(read_at), tz)
    print_view(view, viewer_timeline(store, view, tz), cache.backend)
    from memory_pipeline.cli.analyst import analytics_files, print_analytics

    print_analytics(analytics_files())
    _print_objects(console, store, tz)
    _server_token(console, store)
    console.print(f"\nThe runs are in {operations.dagster_home()}: `make ui` opens them in the Dagster UI.")
    return 0 if ok else 1


LONG_CONVERSATION = "aria-demo-long"
SLEEP_FROM, SLEEP_TO = date(2026, 1, 1), date(2026, 1, 14)


def _long_conversation(path: Path) -> None:
    """One conversation of 40 entries over two days (the sample's are short), so the rolling summary
    has something to do: a preference on the 12th, its negation on the 13th (deep sleep's round 1)."""
    import json
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from memory_pipeline.events.ingest import event_line

    tz = ZoneInfo("Asia/Shanghai")
    lines = []
    for i in range(40):
        day = 12 if i < 20 else 13
        at = datetime(2026, 1, day, 19, 0, tzinfo=tz) + timedelta(minutes=2 * (i % 20))
        role = "user" if i % 2 == 0 else "assistant"
        if role == "user" and i == 4:
            text = "I like tomatoes straight from the greenhouse"
        elif role == "user" and i == 24:
            text = "I don't like tomatoes straight from the greenhouse"
        elif role == "user" and i == 38:
            text = "Should we build a second greenhouse next spring?"
        else:
            text = f"We talked about the greenhouse harvest and the seedlings, part {i}."
        lines.append(
            event_line(f"demo-long-{i:03d}", "aria", LONG_CONVERSATION, role, text, at, platform="remote:companion")
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")


def _sleep_step(console: Console, instance: DagsterInstance, store: Store) -> bool:
    """Seed 003 over the sample's last two weeks (one run over the range, day by day: each day's light
    sleep, deep sleep and autobiography before the next day's, so each day's snapshot is that day's),
    then seed 002's rolling summary of the long conversation (its gate opened first)."""
    from memory_pipeline import operations
    from memory_pipeline.conversation.summaries import set_init_status
    from memory_pipeline.operations.runner import execute_job
    from memory_pipeline.sleep import config as sleep_config
    from memory_pipeline.sleep.memory import pin_fact, set_self_block

    names = sleep_config.load().block_names()
    for world in sample_data.WORLDS:
        set_self_block(store, world, names[0], f"I am {world}, a long-lived assistant.", names, "demo")
        pin_fact(store, world, f"The user of {world} lives in Hangzhou.", priority=1)
    console.print(f"[bold]2c.[/] sleep (seed 003) {SLEEP_FROM} .. {SLEEP_TO} and rolling summaries (seed 002)")
    ok = True
    rep = operations.materialize("sleep", SLEEP_FROM.isoformat(), SLEEP_TO.isoformat(), instance=instance)
    for r in rep.runs:
        ok &= r.success
        console.print(
            f"   light, deep, autobiography {r.first}..{r.last}: {r.partitions} day(s) in one run {r.run_id[:8]}, "
            f"each day's three stages before the next day's ({r.seconds:.1f}s) {run_state(r, instance) if r.success else 'FAILED ' + r.error}"
        )
    set_init_status(store, LONG_CONVERSATION, "done")
    result = execute_job("conversation_rolling_summary_job", instance=instance)
    ok &= result.success
    console.print(f"   rolling summary run {result.run_id[:8]} {'ok' if result.success else 'FAILED'}")
    return ok


def _print_sleep_results(console: Console, store: Store) -> None:
    from memory_pipeline.cli.console import escape
    from memory_pipeline.cli.conversation import print_conversation_status
    from memory_pipeline.cli.sleep import print_sleep_status
    from memory_pipeline.conversation.config import ConversationConfig
    from memory_pipeline.conversation.summaries import injected_history
    from memory_pipeline.sleep.snapshots import diff

    print_sleep_status(store)
    d = diff(store, "aria", SLEEP_FROM, SLEEP_TO)
    console.print(
        f"aria's semantic memory {SLEEP_FROM} -> {SLEEP_TO}: {len(d.created)} created, "
        f"{len(d.deprecated)} deprecated, {len(d.merged)} merged, {len(d.modified)} modified"
    )
    print_conversation_status(store)
    view = injected_history(store, LONG_CONVERSATION, ConversationConfig(trim_history=True))
    if view["summary"]:
        console.print(escape(view["summary"]))


def _objects_step(console: Console, instance: DagsterInstance) -> bool:
    """Seed 001 as Dagster runs: the hot timeline and its compaction, organize (objects, relations,
    attachments) with the Markdown projection, then the per-day outcomes of the sample's days."""
    from datetime import datetime

    from memory_pipeline.definitions import build_defs
    from memory_pipeline.operations.runner import execute_job

    defs = build_defs()
    first, last = sample_data.SAMPLE_START.isoformat(), sample_data.SAMPLE_END.isoformat()
    runs = [
        ("objects_compaction_job", {}, {}),
        ("objects_organize_job", {"ops": {"objects_markdown_projection": {"config": {"passes": 100}}}}, {}),
        (
            "objects_outcomes_job",
            {},
            {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last},
        ),
    ]
    console.print("[bold]2d.[/] object memory (seed 001) as Dagster runs")
    ok = True
    for name, config, tags in runs:
        started = datetime.now()
        result = execute_job(name, run_config=config, tags=tags, instance=instance, defs=defs)
        ok &= result.success
        console.print(
            f"   {name:<24} run {result.run_id[:8]} ({(datetime.now() - started).total_seconds():.1f}s) "
            f"{'ok' if result.success else 'FAILED'}"
        )
    return ok


DEMO_TOKEN = "demo"


def _server_token(console: Console, store: Store) -> None:
    """A read-only token for the sample worlds, so an agent can reach their memory at once."""
    from memory_pipeline.access import tokens

    if any(t.name == DEMO_TOKEN for t in tokens.list_tokens(store)):  # a name is never reused
        console.print(f"memory server: token {DEMO_TOKEN!r} exists already (memory-pipeline tokens list)")
        return
    _name, token = tokens.create(store, list(sample_data.WORLDS), read_only=True, name=DEMO_TOKEN)
    console.print(
        f"memory server: `memory-pipeline serve`, then connect an MCP client to http://127.0.0.1:8900/mcp with "
        f"the header `Authorization: Bearer <token>`; read-only token {DEMO_TOKEN!r} for "
        f"{', '.join(sample_data.WORLDS)} (shown once):"
    )
    console.print(token, soft_wrap=True)


def _print_objects(console: Console, store: Store, tz: ZoneInfo) -> None:
    """What seed 001 produced: events by state per world, objects, a recall as the agent would do it."""
    from memory_pipeline.objects import recall, reports

    world = next(iter(sample_data.WORLDS))
    topic = sample_data.WORLDS[world][0]
    hits = recall.find(store, world, topic)
    if hits:
        doc = recall.read(store, world, hits[0]["id"])
        assert doc is not None
        ev = recall.evidence(store, world, doc["id"], limit=2, tz=tz)
        assert ev is not None  # the object just read
        console.print(
            f"recall in {world}: memory_find({topic!r}) -> {hits[0]['id']}; memory_read: {len(doc['sources'])} "
            f"source event(s), {len(doc['relations'])} relation(s); memory_evidence first: "
            + "; ".join(f"{i['occurred_at']} {i['text'][:60]!r}" for i in ev["items"])
        )
    days = reports.range_status(store, sample_data.SAMPLE_START, sample_data.SAMPLE_END, sample_data.SAMPLE_END)
    console.print(
        f"archive of {sample_data.SAMPLE_START}..{sample_data.SAMPLE_END}: {days['status']} "
        "(events still in the hot timeline keep their days partial until a later compaction)"
    )
    console.print(f"Markdown projection: {settings.data_dir() / 'objects'}/<world>/README.md")


def _analyst_step(console: Console, instance: DagsterInstance) -> bool:
    """Exports and marts as Dagster runs: the tables by the day of their data for the sample's days,
    the tables by the day their rows were written (the LLM ledger of the runs above: today) for
    the last two days, then the dbt models for the same two slices (and the picture)."""
    from memory_pipeline.cli.analyst import run_steps
    from memory_pipeline.defs._shared.partitions import cst_day_open

    today = cst_day_open.get_last_partition_key()
    assert today is not None
    yesterday = (date.fromisoformat(today) - timedelta(days=1)).isoformat()
    first, last = sample_data.SAMPLE_START, sample_data.SAMPLE_END
    last_month = (last.replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    console.print(f"[bold]3.[/] DuckDB exports and dbt marts ({settings.duckdb_path()})")
    return run_steps(
        [
            ("exports_by_data_day", first.isoformat(), last.isoformat()),
            ("month_exports", first.strftime("%Y-%m"), last_month),
            ("year_exports", str(first.year), str(last.year - 1)),
            ("exports_by_write_day", yesterday, today),
            ("marts", first.isoformat(), last.isoformat()),
            ("daily_marts", yesterday, today),
        ],
        instance,
    )


def _tower_step(console: Console, store: Store, instance: DagsterInstance) -> bool:
    """Seed 004 on the sample: a work log of the sample's last two weeks (one entry per world as a
    project per day), then the structural windows of every day (the activity type is fed from the
    conversation messages), the week windows, and the worklog's day and week summaries, as runs."""
    from memory_pipeline import operations
    from memory_pipeline.cli.console import escape
    from memory_pipeline.tower.api import Tower
    from memory_pipeline.tower.logic import Granularity, WindowQuery

    tower = Tower(store, run_jobs="inline")
    first_log = sample_data.SAMPLE_END - timedelta(days=14)
    entries = []
    for n in range(14):
        day = first_log + timedelta(days=n)
        for world, topics in sample_data.WORLDS.items():
            a, b = topics[n % len(topics)], topics[(n + 3) % len(topics)]
            entries.append(
                {
                    "id": f"worklog-{world}-{day.isoformat()}",
                    "at": f"{day.isoformat()}T18:00:00+08:00",
                    "content": {"project": world, "did": f"worked on the {a}, decided to keep the {b}", "todo": b},
                }
            )
    report = tower.append("worklog", entries, source="demo")
    console.print(f"[bold]2b.[/] time tower: worklog {report['inserted']} entries appended ({len(entries)} given)")
    start, last = sample_data.SAMPLE_START, sample_data.SAMPLE_END
    last_monday = (last - timedelta(days=last.weekday())).isoformat()  # week keys are Mondays
    week_lo = (first_log - timedelta(days=first_log.weekday())).isoformat()
    steps = [
        ("tower_windows", start.isoformat(), last.isoformat()),
        ("tower_week_windows", (start - timedelta(days=start.weekday())).isoformat(), last_monday),
        ("tower_day_summaries", first_log.isoformat(), (last - timedelta(days=1)).isoformat()),
        ("tower_week_summaries", week_lo, last_monday),
    ]
    ok = True
    for window, lo, hi in steps:
        rep = operations.materialize(window, lo, hi, mode="rebuild", instance=instance)
        for r in rep.runs:
            ok &= r.success
            console.print(
                f"   {window:<22} {r.first}..{r.last}: {r.partitions} partition(s) in one run "
                f"{r.run_id[:8]} of {r.job} ({r.seconds:.1f}s) {run_state(r, instance) if r.success else 'FAILED ' + r.error}"
            )
    week = tower.get_summary("worklog", WindowQuery(Granularity.WEEK, last - timedelta(days=7), group="bolt"))
    summaries = week["summaries"]
    assert isinstance(summaries, list)
    for s in summaries:
        assert isinstance(s, dict) and isinstance(s["window"], dict) and isinstance(s["window"]["start"], str)
        line = f"   worklog week {s['window']['start'][:10]} [bolt] ({s['source']}, {s['provenance']}): {s['text']}"
        console.print(escape(line))  # ids and text may hold '[': not markup
    return ok
