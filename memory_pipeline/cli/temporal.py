"""Seed 000 on the command line: regenerate / backfill / rebuild / reconcile, system rolls, read,
status."""

from __future__ import annotations

import json
from datetime import date, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import typer
from rich.table import Table

from memory_pipeline.cli.cache import note_pending_cache
from memory_pipeline.cli.console import (
    console,
    err,
    escape,
    exit_if_checks_failed,
    known_world,
    open_cache,
    open_store,
    progress_bar,
    refuse,
    run_state,
)
from memory_pipeline.lib.store import world_ingested
from memory_pipeline.lib.text import shown

if TYPE_CHECKING:
    from memory_pipeline.lib.store import Store
    from memory_pipeline.operations.runner import OperationReport
    from memory_pipeline.temporal.read import TemporalView
    from memory_pipeline.temporal.reconcile import Staleness

app = typer.Typer()


def _materialize(
    window: str,
    start: str | None,
    end: str | None,
    mode: str,
    force_llm: bool = False,
    worlds: list[str] | None = None,
    as_of: str = "",
    command: str = "",
) -> OperationReport:
    """One operation (a run per contiguous range), with a progress bar labelled with the ``command``
    (backfill, rebuild, regenerate) and its report printed; the range's notes come before the bar."""
    from memory_pipeline import operations
    from memory_pipeline.lib.llm.client import configured_model
    from memory_pipeline.temporal import config as temporal_config

    temporal_config.load()  # a bad setting is one line now (ConfigError), not a run that fails on it
    configured_model()  # so is a model litellm cannot call: here, before the code location loads (4 s)
    try:
        as_of, worlds = _as_of(as_of), operations.check_worlds(worlds)  # before any run
        store = open_store()  # a store it cannot use (another calendar zone) is one line, not a failed run
        if worlds:  # a run limited to a world never ingested would do nothing and say ok
            for world in worlds:
                if not world_ingested(store, world):
                    refuse(f"--world {shown(world)}: no such world, nothing has been ingested for it")
        # a wrong window or range is refused before the bar, and a capped one said before it
        _, range_notes = operations.partition_keys(window, start, end)
        for note in range_notes:
            err.print(f"[yellow]{escape(note)}[/]")
        label = f"{command or mode} {window}{' (missing only)' if mode == 'missing' else ''}"
        instance = operations.get_instance()  # an instance that cannot be opened is one line, before the bar
        with progress_bar() as progress:
            task = progress.add_task(label, total=None)
            report = operations.materialize(
                window,
                start,
                end,
                mode=mode,
                rebuild=mode == "rebuild",
                force_llm=force_llm,
                worlds=worlds,
                as_of=as_of,
                progress=lambda d, t: progress.update(task, completed=d, total=t),
                instance=instance,
            )
    except operations.RangeError as exc:
        refuse(str(exc))
    _print_report(window, report, said=range_notes)
    return report


def _run_operation(
    command: str,
    window: str,
    start: str | None,
    end: str | None,
    mode: str,
    force_llm: bool,
    worlds: list[str],
    as_of: str,
) -> None:
    report = _materialize(window, start, end, mode, force_llm, worlds, as_of, command)
    if window == "peer_rolls":
        note_pending_cache(open_store())
    if not report.success:
        raise typer.Exit(1)
    exit_if_checks_failed(report.runs)


def _print_report(window: str, report: OperationReport, said: list[str] | None = None) -> None:
    """The report; ``said``: notes already printed (the range's, before the progress bar)."""
    for note in report.notes:
        if note in (said or []):
            continue
        err.print(f"[yellow]{escape(note)}[/]")
    console.print(
        f"{window}: {report.requested} partition(s) requested{_skipped(window, report)}, {len(report.runs)} run(s)"
    )
    for key, why in list(report.reasons.items())[:10]:
        console.print(f"  {key}: re-run, {escape(why)}")
    if len(report.reasons) > 10:
        console.print(f"  (+{len(report.reasons) - 10} more re-run)")
    for r in report.runs:
        status = run_state(r)
        console.print(  # one line however long (a script reads the failure from it)
            f"  run {r.run_id[:8]} {r.first}..{r.last} ({r.partitions} partition(s), {r.seconds:.1f}s) {status}",
            soft_wrap=True,
        )


def _skipped(window: str, report: OperationReport) -> str:
    """What the report's line says of the partitions not re-run: true of the mode and the target."""
    if report.mode == "rebuild":  # nothing is skipped
        return " (run whether materialized or not)"
    said = f", {report.skipped_existing} already materialized and skipped"
    if report.mode == "missing":
        return said
    if report.keeps_record:
        return f"{said} (unchanged per their record)"
    return (
        f"{said} ({window} keeps no record of what changed since: `memory-pipeline rebuild {window} "
        "--from .. --to ..` re-runs them)"
    )


WINDOW_HELP = "chunks | peer_rolls | day | month | year, or another domain's target (a wrong name lists them all)"


@app.command()
def regenerate(
    window: str = typer.Argument(..., help=WINDOW_HELP),
    partition: str = typer.Argument(..., help="Partition key: 2026-01-14, 2026-01 or 2026"),
    force_llm: bool = typer.Option(False, "--force-llm", help="Fresh model calls instead of cached answers"),
    world: list[str] = typer.Option([], "--world", help="Only this world (repeatable)"),
) -> None:
    """Regenerate one partition (placeholders are upserted as well)."""
    from memory_pipeline import operations

    try:  # the messages name the argument given, not the range options it stands for
        operations.partition_keys(window, partition, partition, labels=("partition", "partition"))
    except operations.RangeError as exc:
        refuse(str(exc))
    _run_operation("regenerate", window, partition, partition, "rebuild", force_llm, world, "")


@app.command()
def backfill(
    window: str = typer.Argument(..., help=WINDOW_HELP),
    start: str | None = typer.Option(
        None, "--from", help="First partition key (default: the first partition, MEMORY_PARTITION_START)"
    ),
    end: str | None = typer.Option(
        None, "--to", help="Last partition key (default, and cap: the last closed window; CST today for chunks)"
    ),
    missing_only: bool = typer.Option(
        False, "--missing-only", help="Only partitions never materialized (not those stale per their record)"
    ),
) -> None:
    """Backfill, incrementally: partitions never materialized, and (day, month, year) those whose
    record shows them stale (late messages, a new world, child rows written since, another model,
    prompt version or settings). Unchanged partitions, placeholders included, are not re-run."""
    _run_operation("backfill", window, start, end, "missing" if missing_only else "changed", False, [], "")


@app.command()
def rebuild(
    window: str = typer.Argument(..., help=WINDOW_HELP),
    start: str | None = typer.Option(
        None, "--from", help="First partition key (default: the first partition, MEMORY_PARTITION_START)"
    ),
    end: str | None = typer.Option(
        None, "--to", help="Last partition key (default, and cap: the last closed window; CST today for chunks)"
    ),
    force_llm: bool = typer.Option(False, "--force-llm"),
    as_of: str = typer.Option("", "--as-of", help="ISO datetime standing for now (chunks, peer rolls)"),
) -> None:
    """Rebuild a range (force): every partition in it, one run for the whole range."""
    _run_operation("rebuild", window, start, end, "rebuild", force_llm, [], as_of)


@app.command("reconcile")
def reconcile_command(
    dry_run: bool = typer.Option(False, "--dry-run", help="List what is stale and why; materialize nothing"),
) -> None:
    """Late data and new worlds: rebuild exactly the materialized days that got messages ingested after
    they were written (or lack a row for a world that existed by then), then the months and years
    above them, one run per contiguous range; then the system rolls if they read any of them.
    Partitions never materialized are left to `backfill`."""
    from memory_pipeline import operations
    from memory_pipeline.temporal import reconcile

    store = open_store()
    stale = reconcile.stale_periods(store, _zone())
    print_pending(stale)
    if not stale:
        return
    if dry_run:
        console.print("dry run: nothing materialized")
        return
    with progress_bar() as progress:
        task = progress.add_task("reconcile", total=None)
        report = operations.repair(progress=lambda d, t: progress.update(task, completed=d, total=t))
    for r in report.runs:
        status = run_state(r)
        console.print(
            f"  {r.window} run {r.run_id[:8]} {r.first}..{r.last} ({r.partitions} partition(s), {r.seconds:.1f}s) {status}",
            soft_wrap=True,
        )
    if report.stopped:  # a month must not be built from a day that failed
        err.print(f"[red]reconcile stopped: {escape(report.stopped)}; fix it and run reconcile again[/]")
        raise typer.Exit(1)
    if report.system_rolls is not None:
        r = report.system_rolls
        console.print(
            f"system rolls ({', '.join(stale.system_rolls)}) run {r.run_id[:8]}: {run_state(r)}", soft_wrap=True
        )
        if not r.success:
            raise typer.Exit(1)
        _note_rolls_not_kept()
    if report.left:  # e.g. messages ingested while the runs were going on
        console.print(f"[yellow]{report.left} period(s) stale again (new input meanwhile): run reconcile again[/]")
    else:
        console.print(f"reconciled: no stale period left ({report.partitions} partition(s) re-run)")
    exit_if_checks_failed([*report.runs, *([report.system_rolls] if report.system_rolls else [])])


def _zone() -> ZoneInfo:
    from memory_pipeline.lib import settings

    return ZoneInfo(settings.timezone_name())


def print_pending(stale: Staleness) -> None:
    """The "Pending repairs" table: what reconcile (or its sensor) would rebuild, and why."""
    if not stale:
        console.print("Pending repairs (reconcile) — none: every materialized day, month and year matches its input")
        return
    table = Table(title="Pending repairs (reconcile)")
    for col in ("window", "period", "reason"):
        table.add_column(col, overflow="fold", no_wrap=col != "reason")
    for window, key, reason in stale.reasons:
        table.add_row(window, key, reason)
    console.print(table)
    if stale.needs_system_rolls:
        console.print(f"system rolls to rebuild after the repair: {', '.join(stale.system_rolls)}")


def print_never_materialized(missing: dict[str, list[date]]) -> None:
    """Closed periods with messages, and those a closed month or year with messages reads, that no
    run ever materialized: reconcile cannot see them (it compares materialized periods with their
    input), so they are named here with their backfill, days before months before years."""
    if not missing:
        console.print("Never materialized — none: every closed period with messages, and every one it reads, has rows")
        return
    _backfill_table(
        "Never materialized (closed; with messages, or read by a month or year with them; no row, no run)", missing
    )


def print_incomplete(incomplete: dict[str, list[date]]) -> None:
    """Closed periods with rows that no run vouched for over every world (a world's failure, a run
    over some worlds, a cut or empty answer): neither reconcile nor "Never materialized" names them."""
    if not incomplete:
        console.print("Incomplete — none: every closed period with rows was completed over all worlds by one run")
        return
    _backfill_table(
        "Incomplete (closed; rows, but no run completed them over all worlds: a world's failure, a run over "
        "some worlds, an answer cut or empty)",
        incomplete,
    )


def _backfill_table(title: str, periods: dict[str, list[date]]) -> None:
    """Periods by window, each contiguous span on one row with the backfill that runs it."""
    from memory_pipeline.temporal.logic import period_key
    from memory_pipeline.temporal.reconcile import spans

    table = Table(title=title)
    for col in ("window", "periods", "count", "backfill"):
        table.add_column(col, overflow="fold")
    for window, starts in periods.items():
        for first, last in spans(window, starts):
            a, b = period_key(window, first), period_key(window, last)
            n = sum(first <= d <= last for d in starts)
            table.add_row(
                window, a if a == b else f"{a} .. {b}", str(n), f"memory-pipeline backfill {window} --from {a} --to {b}"
            )
    console.print(table)


@app.command("system-rolls")
def system_rolls(
    as_of: str = typer.Option("", "--as-of", help="ISO datetime standing for now"),
    force: bool = typer.Option(False, "--force"),
) -> None:
    """Regenerate the past_days / past_months / past_years rolls (reused while sources_fp matches)."""
    from memory_pipeline import operations

    try:
        r = operations.run_system_rolls(_as_of(as_of), force)
    except operations.RangeError as exc:
        refuse(str(exc))
    console.print(f"system rolls run {r.run_id[:8]}: {run_state(r)}", soft_wrap=True)
    note_pending_cache(open_store())
    if r.success:
        _note_rolls_not_kept()
    if not r.success:
        raise typer.Exit(1)
    exit_if_checks_failed([r])


@app.command()
def read(
    world: str = typer.Option(..., "--world"),
    conversation: str | None = typer.Option(None, "--conversation", help="The viewing conversation"),
    at: str | None = typer.Option(None, "--at", help="ISO datetime with offset (default: now)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Print the <temporal_summary> block and today's peer insertions (never calls an LLM).
    Exit 2 on a bad option, 1 for a world with no events."""
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.timeutil import utcnow
    from memory_pipeline.temporal import config as temporal_config
    from memory_pipeline.temporal.read import temporal_view, viewer_timeline

    tz = ZoneInfo(settings.timezone_name())
    when = _instant_option("--at", at) if at else utcnow().astimezone(tz)  # shown in CST, as the windows
    _id_option("--world", world)
    if conversation is not None:
        _id_option("--conversation", conversation)
    store = open_store()
    if not world_ingested(store, world):
        refuse(f"no such world {world!r}: nothing has been ingested for it", code=1)
    if conversation is not None:
        _viewer_note(store, world, conversation)
    cache = open_cache()
    cfg = temporal_config.load()
    view = temporal_view(store, cache, cfg, world, conversation, when, tz)
    timeline = viewer_timeline(store, view, tz)
    _no_shared_cache_hint(cache.backend, view, world)
    if as_json:
        console.print_json(
            json.dumps(
                {
                    "system_block": view.system_block,
                    "truncated": view.system_truncated,
                    "rolls": view.rolls,
                    "timeline": timeline,
                },
                ensure_ascii=False,
            )
        )
        return
    print_view(view, timeline, cache.backend)


def _as_of(value: str) -> str:
    """``--as-of`` checked (RangeError) and normalized; a future instant is said to be capped at now,
    as the runs cap it (a future partition is never generated), not taken silently."""
    from memory_pipeline import operations
    from memory_pipeline.lib.timeutil import parse_instant, utcnow

    as_of = operations.check_as_of(value)
    if as_of and parse_instant(as_of) > utcnow():
        err.print(f"[yellow]--as-of {escape(as_of)} is in the future: the runs take now instead[/]")
    return as_of


def _instant_option(name: str, value: str) -> datetime:
    from memory_pipeline.lib.timeutil import parse_instant

    try:
        return parse_instant(value)
    except ValueError as exc:
        refuse(f"{name} {shown(value)} {exc}")


def _id_option(name: str, value: str) -> None:
    from memory_pipeline.lib.ids import validate_id

    problem = validate_id(value)
    if problem:
        refuse(f"{name} {shown(value)}: {problem}")


def _viewer_note(store: Store, world: str, conversation: str) -> None:
    """A viewing conversation with no events in ``world`` is read as a new one, as an agent's first
    turn is; said on stderr, since a mistyped id or another world's conversation reads the same."""
    from memory_pipeline.temporal.read import conversation_owner

    owner = conversation_owner(store, conversation)
    if owner == world:
        return
    where = f"it belongs to world {owner!r}" if owner is not None else "none has been ingested"
    err.print(
        f"[yellow]--conversation {escape(conversation)}: no conversation of world {escape(world)} ({escape(where)}); "
        "read as a new conversation of this world, as an agent's first turn is[/]"
    )


def _no_shared_cache_hint(backend: str, view: TemporalView, world: str) -> None:
    """Rolls live in the cache (Redis); without REDIS_URL each process has its own, empty at start,
    so what the demo or a Dagster run built is not here. Said on stderr, where it happens."""
    missing = not view.system_block or any(v is None for v in view.rolls.values())
    if backend == "memory" and missing:
        err.print(
            f"[yellow]{_no_redis()}: {world}'s rolls are cached in Redis, and this process's in-process "
            "cache starts empty (what the demo or a Dagster run built lived in its own process); run both "
            "with REDIS_URL set to read them here[/]"
        )


def _note_rolls_not_kept() -> None:
    """A system-rolls run's ok without REDIS_URL: its rolls went to the in-process cache of the
    process that ran it, gone when this command exits, so no read path or server sees them."""
    from memory_pipeline.lib import settings

    if not settings.redis_url():
        err.print(
            "[yellow]no REDIS_URL: the system rolls went to this run's in-process cache and are gone when it "
            "exits (no reader sees them); set REDIS_URL to build them where the read path and the server read them[/]"
        )


def _no_redis() -> str:
    """Why this process reads its in-process cache: REDIS_URL unset, or set and not answering."""
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.text import redact

    url = settings.redis_url()
    return f"Redis at REDIS_URL={escape(redact(url))} did not answer" if url else "no REDIS_URL"


def clock_labels(ats: list[str]) -> list[str]:
    """Each time's wall clock (HH:MM), with its UTC offset when the times hold more than one: on a
    fall-back day of a zone with DST, 01:30 happens twice, and the two read the same without it."""
    times = [datetime.fromisoformat(at) for at in ats]
    offsets = {t.utcoffset() for t in times}
    if len(offsets) <= 1:
        return [f"{t:%H:%M}" for t in times]
    return [f"{t:%H:%M} ({t.isoformat(timespec='minutes')[16:]})" for t in times]


def print_view(view: TemporalView, timeline: list[dict[str, Any]], backend: str) -> None:
    at = view.at.astimezone(_zone()).isoformat(timespec="seconds")
    console.rule(f"system prompt segment for {view.world_id} at {at} (cache: {backend})")
    console.print(escape(view.system_block or "(no roll cached: the block is skipped)"))
    if view.system_truncated:
        console.print("[yellow]truncated to system_prompt_max_chars; Inbox warning written[/]")
    console.rule(f"timeline of {view.viewer_conversation_id or '(no viewer)'} with peer insertions")
    for m, clock in zip(timeline, clock_labels([str(m["at"]) for m in timeline]), strict=True):
        who = f"{m['role']}:{m['name']}" if m.get("name") else m["role"]
        extra = f" [dim](bucket {m['bucket']}, roll {m['cache']})[/]" if m.get("name") else ""
        content = m["content"] or (
            "(tool calls: " + ", ".join(_tool_name(c) for c in m["tool_calls"]) + ")" if m.get("tool_calls") else ""
        )
        console.print(f"{clock} [bold]{escape(who)}[/]: {escape(content)}{extra}", highlight=False)
    if view.warmups_requested:
        console.print(f"[dim]{view.warmups_requested} peer-roll warm-up(s) requested for the background[/]")


def _tool_name(call: object) -> str:
    """Ingest admits only objects with a string name; rows stored before that rule may differ."""
    name = call.get("name") if isinstance(call, dict) else None
    return name if isinstance(name, str) else "?"


@app.command()
def status() -> None:
    """Rows per world and window, placeholders by empty_reason, pending repairs, the LLM ledger, then
    the sleep and conversation sections."""
    from memory_pipeline import domains
    from memory_pipeline.cli.conversation import print_conversation_status
    from memory_pipeline.cli.sleep import print_sleep_status

    domains.check_config()  # before the first line: a bad setting is refused, not met half-way
    store = open_store()
    print_status(store)
    print_sleep_status(store)
    print_conversation_status(store)


def print_dead_holders(store: Store) -> None:
    """Leases still held by a command-line run whose process is gone (kill -9): nothing else in
    `status` showed that run, which the instance keeps as started until something marks it failed."""
    from memory_pipeline.lib.store.leases import dead_holders

    for (run, host, pid), n in sorted(dead_holders(store).items()):
        console.print(
            f"[yellow]run {escape(run)} holds {n} partition lease(s) but its process (pid {pid} on host "
            f"{escape(host)}) is gone (killed): the next backfill, rebuild or regenerate of those partitions "
            "takes them over at once and marks the run failed (the daemon's dead_runs_sensor marks it failed too)[/]"
        )


def print_status(store: Store) -> None:
    from memory_pipeline.cli.cache import print_pending_cache
    from memory_pipeline.events.reports import event_counts
    from memory_pipeline.lib.llm.reports import ledger_totals
    from memory_pipeline.temporal import reports

    counts = {**event_counts(store), **reports.store_counts(store)}
    console.print(
        f"store: {counts['worlds']} worlds, {counts['conversations']} conversations, {counts['messages']} messages, "
        f"{counts['chunks']} chunks, {counts['summaries']} summary rows"
    )
    table = Table(title="Temporal summary rows per world")
    for col in ("world", "window", "rows", "non-empty", "placeholders", "first", "last"):
        table.add_column(col, justify="right" if col in ("rows", "non-empty", "placeholders") else "left")
    for world in reports.rows_per_world(store):
        table.add_row(
            world["world_id"],
            world["window"],
            str(world["rows"]),
            str(world["non_empty"]),
            str(world["rows"] - world["non_empty"]),
            str(world["first"]),
            str(world["last"]),
        )
    console.print(table)
    reasons = Table(title="Empty placeholders by empty_reason")
    reasons.add_column("empty_reason", no_wrap=True)
    for w in ("day", "month", "year"):
        reasons.add_column(w, justify="right")
    for reason, by_window in sorted(reports.placeholders_by_reason(store).items()):
        reasons.add_row(reason, *(str(by_window.get(w, 0)) for w in ("day", "month", "year")))
    console.print(reasons)
    from memory_pipeline.temporal import reconcile

    print_pending(reconcile.stale_periods(store, _zone()))
    print_never_materialized(reconcile.never_materialized(store, _zone()))
    print_incomplete(reconcile.incomplete_periods(store, _zone()))
    print_pending_cache(store)
    print_dead_holders(store)
    totals = ledger_totals(store)
    ledger = Table(
        title="LLM ledger (one row per asset, model and outcome)",
        caption="ledger rows: calls recorded; requests: sent to the model, retries included "
        "(cache_hit: answered from the cache, breaker_open: refused by the open breaker, neither sends one)",
    )
    # The ledger's asset is what made the call: an asset (objects_archive is what the organize job
    # materializes) or an asset check that asks the model (tower_week_summaries_drift).
    for col in (
        "asset or check",
        "model",
        "outcome",
        "ledger rows",
        "requests",
        "tokens in",
        "tokens out",
        "cost (USD)",
    ):
        left = col in ("asset or check", "model", "outcome")
        ledger.add_column(col, overflow="fold", justify="left" if left else "right")
    for t in totals:
        ledger.add_row(
            str(t["asset"]),
            escape(str(t["model"])),
            t["outcome"],
            str(t["calls"]),
            str(t["requests"]),
            str(t["tokens_in"]),
            str(t["tokens_out"]),
            _cost(t["cost_usd"], t["priced"], t["calls"]),
        )
    console.print(ledger)
    from memory_pipeline.cli.tower import print_status as print_tower_status

    print_tower_status(store)  # seed 004's section of the one status command
    from memory_pipeline.cli.objects import print_objects_status

    print_objects_status(store)


def _cost(usd: float | None, priced: int, calls: int) -> str:
    """What litellm priced, never a made-up 0: "—" when no call had a price (the offline model, a
    model litellm has no price for, cache hits, failures), and how many were not priced beside a sum."""
    if usd is None:
        return "—"
    # Six places, or two significant digits below a millionth: a priced sum never reads "0.000000".
    shown = f"{usd:.6f}" if usd == 0 or abs(usd) >= 5e-7 else f"{usd:.1e}"
    return shown + (f" ({calls - priced} unpriced)" if priced < calls else "")


rolls_app = typer.Typer(no_args_is_help=True, help="System-roll slots in the cache (list, regenerate one).")
app.add_typer(rolls_app, name="rolls")


def _today(at: str | None) -> tuple[date, datetime]:
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.timeutil import local_date, utcnow

    when = _instant_option("--at", at) if at else utcnow()
    return local_date(when, ZoneInfo(settings.timezone_name())), when


@rolls_app.command("list")
def rolls_list(
    world: list[str] = typer.Option([], "--world", help="Only this world (repeatable)"),
    at: str | None = typer.Option(None, "--at", help="ISO datetime standing for now"),
) -> None:
    """Each world's past_days / past_months / past_years slot: state, sources_fp, age and TTL."""
    from memory_pipeline.temporal import config as temporal_config
    from memory_pipeline.temporal.slots import list_slots

    for w in world:
        _id_option("--world", w)
    today, _ = _today(at)
    cache = open_cache()
    # ages on the wall clock, as the slots' created_at and TTLs are (--at picks the day only)
    slots = list_slots(open_store(), cache, temporal_config.load(), today, world or None)
    table = Table(title=f"System-roll slots for {today} (cache: {cache.backend})")
    for col in ("world", "slot", "state", "rows", "sources_fp", "cached fp", "age", "ttl"):
        table.add_column(col, no_wrap=True)
    for s in slots:
        table.add_row(
            s.world_id,
            s.kind,
            s.state,
            str(s.sources),
            s.sources_fp or "-",
            s.cached_fp or "-",
            f"{s.age_seconds}s" if s.age_seconds is not None else "-",
            f"{s.ttl_seconds}s" if s.ttl_seconds is not None else "-",
        )
    console.print(table)
    if cache.backend == "memory":
        err.print(f"[yellow]{_no_redis()}: this process's in-process cache is empty; set REDIS_URL to see the slots[/]")


@rolls_app.command("regenerate")
def rolls_regenerate(
    world: str = typer.Option(..., "--world"),
    kind: str = typer.Option(..., "--kind", help="past_days | past_months | past_years"),
    at: str | None = typer.Option(None, "--at", help="ISO datetime standing for now"),
) -> None:
    """Regenerate one slot afresh (an LLM call, recorded in the ledger)."""
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.llm import LLMClient
    from memory_pipeline.lib.timeutil import utcnow
    from memory_pipeline.temporal import config as temporal_config
    from memory_pipeline.temporal import logic
    from memory_pipeline.temporal.context import TemporalContext
    from memory_pipeline.temporal.slots import regenerate_slot

    _id_option("--world", world)
    if kind not in logic.SYS_ROLL_KINDS:
        refuse(f"--kind {kind!r} is not a slot (one of {', '.join(logic.SYS_ROLL_KINDS)})")
    today, when = _today(at)
    if when > utcnow():  # a slot covers the days before its day: past now, some have not ended
        refuse(f"--at {at}: in the future; a slot covers the days before it, and they have not all ended")
    store = open_store()
    known_world(world, store)  # else an unknown world answered "nothing to cover", exit 0
    ctx = TemporalContext(
        store=store,
        llm=LLMClient.from_settings(store, asset="temporal_system_rolls"),
        cache=open_cache(store),
        cfg=temporal_config.load(),
        tz=ZoneInfo(settings.timezone_name()),
    )
    result = regenerate_slot(ctx, world, kind, today)
    if result.failures:
        err.print(f"[red]{world} {kind}: {next(iter(result.failures.values()))}[/]")
        raise typer.Exit(1)
    state = (
        "regenerated"
        if result.regenerated
        else "nothing to cover (no non-empty rows)"
        if not result.empty
        else "empty answer"
    )
    console.print(f"{world} {kind} for {today}: {state} (cache: {ctx.cache.backend})")
    if result.regenerated and ctx.cache.backend == "memory" and not ctx.cache.pending_writes:
        err.print(
            f"[yellow]{_no_redis()}: the slot went to this process's in-process cache and is gone when it exits "
            "(no reader sees it); set REDIS_URL to regenerate it where the read path and the server read it[/]"
        )
