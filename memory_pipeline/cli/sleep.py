"""Seed 003 on the command line (`memory-pipeline sleep ...`). There is no "sleep now" (seed: 仅
cron，不支持手动触发): the schedules run the nights; `backfill` and `rebuild` are operator
recovery for closed past days, run as one Dagster range run of the nights job in day order (light,
deep, autobiography of each day before the next day)."""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from memory_pipeline.cli.console import (
    console,
    err,
    escape,
    exit_if_checks_failed,
    known_world,
    open_store,
    refuse,
    run_state,
)

if TYPE_CHECKING:
    from memory_pipeline.lib.store import Store
    from memory_pipeline.sleep.logic import Stage
    from memory_pipeline.sleep.snapshots import StaleSnapshot

app = typer.Typer(no_args_is_help=True, help=__doc__)

STAGES = {"light": "light_sleep", "deep": "deep_sleep", "autobiography": "autobiography"}


def _day(name: str, value: str) -> date:
    # YYYY-MM-DD only: fromisoformat also reads 20260101 and 2026-W49-1, which the partition keys
    # (and a comparison of the texts) do not
    try:
        if not re.fullmatch(r"\d{4}-\d\d-\d\d", value):
            raise ValueError(value)
        return date.fromisoformat(value)
    except ValueError:
        refuse(f"{name} {value!r}: not a date (YYYY-MM-DD)")


def _keys(start: str, end: str, names: tuple[str, str] = ("--from", "--to")) -> list[str]:
    from memory_pipeline import operations

    if _day(names[1], end) < _day(names[0], start):
        refuse(f"empty range: {names[1]} {end} is before {names[0]} {start}")
    try:
        keys, notes = operations.partition_keys("light_sleep", start, end, labels=names)
    except operations.RangeError as exc:
        refuse(str(exc))
    for note in notes:
        err.print(f"[yellow]{escape(note)}[/]")
    return keys


def _recover(keys: list[str], window: str, force: bool) -> None:
    """One range run of ``window`` over ``keys`` (inside it, day by day, each day's stages in order:
    day N's deep sleep needs day N-1's), then what each day's stages recorded."""
    from memory_pipeline import operations
    from memory_pipeline.sleep.order import Position
    from memory_pipeline.sleep.runs import day_statuses

    if not keys:
        return
    open_store()  # a store it cannot use (another calendar zone) is one line here, not a failed run
    report = operations.materialize(window, keys[0], keys[-1], force_llm=force, instance=operations.get_instance())
    for note in report.notes:
        err.print(f"[yellow]{escape(note)}[/]")
    for r in report.runs:
        state = run_state(r)
        span = r.first if r.first == r.last else f"{r.first}..{r.last}"
        console.print(  # one line however long (a script reads the failure from it)
            f"  {window} {span}: {r.partitions} day(s) in one run {r.run_id[:8]} of {r.job} ({r.seconds:.1f}s) {state}",
            soft_wrap=True,
        )
    with open_store().connect() as conn:
        statuses = day_statuses(conn, date.fromisoformat(keys[0]))
    for key in keys:
        day = date.fromisoformat(key)
        line = [f"{name} {statuses.get(Position.of(day, stage), 'not run')}" for name, stage in _stages(window)]
        console.print(f"    {key}  " + ", ".join(line))
    if not report.success:
        raise typer.Exit(1)
    exit_if_checks_failed(report.runs)


def _stages(window: str) -> list[tuple[str, Stage]]:
    """The stages a window runs, in a day's order (``sleep``: all three)."""
    from memory_pipeline.sleep.order import STAGES as NIGHT

    named = list(zip(STAGES, NIGHT, strict=True))  # (light, LIGHT), (deep, DEEP), (autobiography, ...)
    return named if window == "sleep" else [(n, s) for n, s in named if STAGES[n] == window]


@app.command()
def backfill(
    start: str = typer.Option(..., "--from", help="First closed CST day (YYYY-MM-DD)"),
    end: str = typer.Option(..., "--to", help="Last day (capped at yesterday)"),
    stage: str = typer.Option("all", "--stage", help="all | light | deep | autobiography"),
) -> None:
    """Operator recovery: run the sleep stages over closed past days, oldest first (each day's light,
    deep and autobiography before the next day). A day done before with the same model and prompt
    version costs no model call; a stale day (after a rebuild of an earlier one), a day done with
    another model, or a light sleep whose day got late messages runs again, and that is a rebuild
    of the day: the days after it turn stale (the command says which are left)."""
    from memory_pipeline.sleep import config as sleep_config

    if stage != "all" and stage not in STAGES:
        refuse(f"--stage {stage!r}: one of all, light, deep, autobiography")
    sleep_config.load()  # a bad setting is one line now (ConfigError), not a failed run
    keys = _keys(start, end)
    _refuse_gap(keys)
    _recover(keys, "sleep" if stage == "all" else STAGES[stage], False)
    _still_stale(keys[0] if keys else start)


def _refuse_gap(keys: list[str]) -> None:
    """A range that would start the history before a gap is refused before anything runs."""
    from memory_pipeline.sleep.order import gap_problem
    from memory_pipeline.sleep.runs import day_statuses

    if keys:
        with open_store().connect() as conn:
            problem = gap_problem(day_statuses(conn), date.fromisoformat(keys[0]), date.fromisoformat(keys[-1]))
        if problem:
            refuse(f"refused, nothing run: {problem}", code=1)


def _still_stale(since: str) -> None:
    """Days an earlier place ran again for (a re-run of a day is a rebuild of it) and nothing redid."""
    from memory_pipeline.sleep.reports import stale_positions

    left = sorted({p.day.isoformat() for p in stale_positions(open_store(), date.fromisoformat(since))})
    if left:
        err.print(
            f"[yellow]still stale: {left[0]} .. {left[-1]} ({len(left)} day(s)): run `memory-pipeline sleep "
            f"backfill --from {left[0]} --to {left[-1]}` (or rebuild with --through {left[-1]}); the nightly "
            f"ticks also run them, in order[/]"
        )


@app.command()
def rebuild(
    day: str = typer.Argument(..., help="The closed CST day to rebuild (YYYY-MM-DD)"),
    through: str | None = typer.Option(
        None, "--through", help="Also re-run every later day up to this one (YYYY-MM-DD), in order"
    ),
) -> None:
    """Operator recovery: rebuild one day from scratch. Semantic memory is first restored to what it
    was before that day's sleep (the previous day's snapshot; nothing deleted, every change a
    version row saying why), the day's and every later day's stage records turn stale, then the
    day's light sleep, deep sleep and autobiography run again, asking the model afresh. With
    --through the later days up to that one run again too, each day before the next; days after
    stay stale (their checks fail) until `sleep backfill` runs them."""
    from memory_pipeline.sleep import config as sleep_config
    from memory_pipeline.sleep.context import StageFailure
    from memory_pipeline.sleep.rebuild import restore

    # Before the restore: a setting the run would refuse (ConfigError, one line), or sleep turned
    # off, left memory restored and every day stale with nothing run.
    if not sleep_config.load().enabled:
        refuse("memory.sleep.enabled is false: a rebuild would restore memory and run nothing (turn it on)", code=1)
    keys = _keys(day, through or day, ("day", "--through" if through else "day"))
    if not keys or keys[0] != day:
        refuse(f"{day}: not a closed CST day with a sleep partition")
    try:
        result = restore(open_store(), date.fromisoformat(day), date.fromisoformat(keys[-1]))
    except StageFailure as exc:  # the day cannot run next: nothing restored
        refuse(str(exc), code=1)
    console.print(
        f"restored semantic memory to before the sleep of {day}: {result.reactivated} reactivated, "
        f"{result.reverted} reverted, {result.deprecated} deprecated, {result.unchanged} unchanged (their undone "
        f"history recorded); narratives {result.narratives_deprecated} "
        f"deprecated, {result.narratives_reactivated} reactivated; "
        f"{len(result.stale_days)} day(s) stale"
    )
    _recover(keys, "sleep", True)
    _still_stale(keys[0])


@app.command()
def status() -> None:
    """Semantic memory by status and type, versions, narratives, snapshots and stage runs."""
    print_sleep_status(open_store())


def print_sleep_status(store: Store) -> None:
    from memory_pipeline.sleep.reports import status as sleep_status

    s = sleep_status(store)
    table = Table(title="Sleep (seed 003)")
    table.add_column("what")
    table.add_column("count", justify="right")
    for k, v in sorted(s["memories"].items()):
        table.add_row(f"semantic memories {k}", str(v))
    for k, v in sorted(s["active_by_type"].items()):
        table.add_row(f"  active {k}", str(v))
    table.add_row("memory versions", str(s["versions"]))
    for k, v in sorted(s["narratives"].items()):
        table.add_row(f"autobiographical narratives {k}", str(v))
    table.add_row("snapshot days", str(s["snapshot_days"]))
    for st in s["stages"]:
        table.add_row(f"{st['stage']} days {st['status']} (newest {st['newest']})", str(st["days"]))
    for stage, days in sorted(s["failed_attempts"].items()):
        table.add_row(f"{stage} done days whose last attempt failed (newest {days[-1]}; outputs kept)", str(len(days)))
    console.print(table)
    if s["late_days"]:
        late = s["late_days"]
        from memory_pipeline.sleep.logic import Stage
        from memory_pipeline.sleep.order import RunStatus

        done = [st["newest"] for st in s["stages"] if (st["stage"], st["status"]) == (Stage.LIGHT, RunStatus.DONE)]
        through = max([late[-1]["day"], *done])
        console.print(
            f"[yellow]late data: {len(late)} day(s) whose light sleep ran before some of their messages were "
            f"ingested ({', '.join(str(x['day']) for x in late[:10])}{' ...' if len(late) > 10 else ''}): "
            f"`memory-pipeline sleep backfill --from {late[0]['day']} --to {through}` runs them again (the worlds "
            "whose material changed; sleep_late_data_sensor does the same)[/]"
        )
    if s["cut"]:
        cut = s["cut"]
        days = sorted({record["day"] for record in cut})
        cuts = Table(
            title="Records from answers cut at the output limit (asked again at the next run of their place: "
            f"`memory-pipeline sleep backfill --from {days[0]} --to {days[-1]}`)"
        )
        for name in ("stage", "day", "world", "answers cut"):
            cuts.add_column(name)
        for record in cut:
            cuts.add_row(record["stage"], str(record["day"]), escape(record["world_id"]), str(record["answers_cut"]))
        console.print(cuts)
    if s["refused"]:
        refused = Table(title="Worlds refused (nothing written for them that day)")
        for c in ("stage", "day", "world", "why"):
            refused.add_column(c)
        for r in s["refused"]:
            refused.add_row(r["stage"], str(r["day"]), escape(r["world_id"]), escape(r["reason"]))
        console.print(refused)


@app.command()
def diff(
    world: str = typer.Argument(...),
    before: str = typer.Argument(..., help="Snapshot day (YYYY-MM-DD)"),
    after: str = typer.Argument(..., help="Snapshot day (YYYY-MM-DD)"),
) -> None:
    """What changed in a world's semantic memory between two days' snapshots (exit 1 when a day has
    no snapshot or the world is unknown; exit 1 too, the diff shown and marked stale, when a side's
    snapshot is one a rebuild has undone: its deep sleep stale or failed since)."""
    from memory_pipeline.sleep.snapshots import SnapshotMissing
    from memory_pipeline.sleep.snapshots import diff as snapshot_diff

    if _day("after", after) < _day("before", before):  # read backwards, creations would show as deprecations
        refuse(f"AFTER {after} is before BEFORE {before}: give the earlier day first")
    try:
        d = snapshot_diff(open_store(), world, _day("before", before), _day("after", after))
    except SnapshotMissing as exc:
        refuse(str(exc), code=1)
    if d.stale:
        from memory_pipeline.sleep.reports import stale_positions

        # the backfill a note names starts at the first stale place (an earlier day's, too): a night
        # runs only after the nights before it, so from the snapshot's own day it would fail
        earliest = min(d.stale, key=lambda side: side.day).day
        waiting = [p.day for p in stale_positions(open_store(), date(1970, 1, 1)) if p.day <= earliest]
        for side in d.stale:
            err.print(f"[red]{escape(_stale_note(side, min(waiting, default=side.day)))}[/]", soft_wrap=True)
    stale = ", ".join(f"{s.day} {s.status}" for s in d.stale)
    console.print(
        f"{escape(world)} {before} -> {after}"
        + (f" [red](STALE snapshot: {stale}; the last successful run's, not semantic memory now)[/]" if stale else "")
    )
    console.print(f"  created:    {', '.join(d.created) or '-'}")
    console.print(f"  deprecated: {', '.join(d.deprecated) or '-'}")
    console.print(f"  merged:     {', '.join(f'{a}->{b}' for a, b in d.merged.items()) or '-'}")
    console.print(f"  modified:   {', '.join(d.modified) or '-'}")
    if d.stale:  # a script reading the diff must not take it for the current one
        raise typer.Exit(1)


def _stale_note(side: StaleSnapshot, stale_from: date) -> str:
    """Why ``side``'s snapshot is stale and the backfill that runs it again (from ``stale_from``, the
    first stale place before it, or from where the failed re-run stopped)."""
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.timeutil import zone
    from memory_pipeline.sleep.order import DAY_ROW, LABELS

    tz = zone(settings.timezone_name())  # as every other time the CLI shows

    def at(t: datetime | None) -> str:
        return t.astimezone(tz).isoformat(timespec="seconds") if t is not None else "(time not recorded)"

    day = side.day.isoformat()
    restored = f" at {at(side.restored_at)}" if side.restored_at is not None else ""
    f = side.failure
    if f is not None:
        label = next((LABELS[s] for s in LABELS if s == f.stage), f.stage)
        whose = "another world" if f.world_id == DAY_ROW else f.world_id or side.world_id
        why = (
            f"the last rebuild failed: it restored semantic memory{restored}, then {label} of {f.day} for "
            f"{whose} failed at {at(f.at)} ({f.error})"
        )
    else:
        why = f"the last rebuild restored semantic memory{restored} and deep sleep of {day} has not run since"
    written = f" (written {at(side.written_at)})" if side.written_at is not None else ""
    first = min([stale_from, side.day] + ([f.day] if f is not None else [])).isoformat()
    return (
        f"world {side.world_id}: the snapshot of {day} is stale (deep sleep {side.status}): {why}. The diff "
        f"shows the snapshot of the last successful run{written}, not semantic memory as it is now; "
        f"`memory-pipeline sleep backfill --from {first} --to {day}` runs it again (`sleep status` says what waits)"
    )


@app.command()
def memories(world: str = typer.Argument(...)) -> None:
    """A world's active semantic memories (reading memory never calls a model)."""
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.timeutil import zone
    from memory_pipeline.sleep.memory import load_active

    tz = zone(settings.timezone_name())
    store = open_store()
    known_world(world, store, "WORLD")
    with store.connect() as conn:
        rows = load_active(conn, [world]).get(world, [])
    table = Table(title=f"active semantic memory of {escape(world)}")
    for c in ("id", "type", "content", "sessions", "observed"):
        table.add_column(c)
    for m in rows:
        observed = m.observed_at.astimezone(tz).isoformat(timespec="seconds")  # the zone, as every operator time
        table.add_row(m.id, m.type, escape(m.content), ",".join(m.source_sessions), observed)
    console.print(table)


@app.command()
def narratives(
    world: str = typer.Argument(...),
    include_deprecated: bool = typer.Option(False, "--all", help="Deprecated narratives too"),
) -> None:
    """A world's autobiographical memory (seed 003's narratives, oldest first) and its current
    autobiography_summary block (reading memory never calls a model)."""
    from memory_pipeline.sleep.autobiography import narratives as read_narratives
    from memory_pipeline.sleep.memory import InputError, check_world, load_self_layer
    from memory_pipeline.sleep.rebuild import SUMMARY_BLOCK

    try:
        world = check_world(world)
    except InputError as exc:
        refuse(str(exc))
    store = open_store()
    known_world(world, store, "WORLD")
    rows = read_narratives(store, world, include_deprecated=include_deprecated)
    with store.connect() as conn:
        summary = load_self_layer(conn, [world], 0)[0].get(world, {}).get(SUMMARY_BLOCK, "")
    table = Table(title=f"autobiographical memory of {escape(world)}")
    for c in ("id", "day", "kind", "significance", "period", "narrative", *(["status"] if include_deprecated else [])):
        table.add_column(c)
    for n in rows:
        status = [n.status + (f" ({escape(n.reason)})" if n.reason else "")] if include_deprecated else []
        table.add_row(
            n.id,
            n.created_day.isoformat(),
            n.kind,
            str(n.significance),
            escape(n.period or ""),
            escape(n.narrative),
            *status,
        )
    console.print(table)
    console.print(f"{SUMMARY_BLOCK}: {escape(summary) if summary else '(none yet)'}")


@app.command()
def remember(
    world: str = typer.Argument(...),
    session: str = typer.Argument(..., help="The current session (conversation) id"),
    content: str = typer.Argument(...),
    memory_type: str = typer.Option("experience", "--type", help="world | experience | imprint | preference"),
) -> None:
    """The in-conversation `remember`: create_semantic_memory with this session and now."""
    from memory_pipeline.sleep.memory import InputError
    from memory_pipeline.sleep.memory import remember as do_remember

    try:
        console.print(do_remember(open_store(), world, session, content, type=memory_type))
    except InputError as exc:
        refuse(str(exc))


@app.command()
def delete(world: str = typer.Argument(...), memory_id: str = typer.Argument(...)) -> None:
    """The memory tool's explicit action=delete: the only physical delete (never a sleep stage's)."""
    from memory_pipeline.sleep.memory import InputError, delete_memory

    try:
        found = delete_memory(open_store(), world, memory_id)
    except InputError as exc:
        refuse(str(exc))
    if not found:
        refuse(f"no memory {memory_id!r} in world {world!r}", code=1)
    console.print(f"deleted {escape(memory_id)}")


@app.command("self-block")
def self_block(
    world: str = typer.Argument(...), name: str = typer.Argument(...), content: str = typer.Argument(...)
) -> None:
    """Set one of a world's six self blocks (names from memory.sleep.self_blocks)."""
    from memory_pipeline.sleep import config
    from memory_pipeline.sleep.memory import InputError, set_self_block

    store = open_store()
    known_world(world, store, "WORLD")  # a mistyped world would get a self layer of its own
    try:
        set_self_block(store, world, name, content, config.load().block_names(), "operator")
    except InputError as exc:
        refuse(str(exc))
    console.print(f"self block {escape(name)} of {escape(world)} set ({len(content):,} characters)")


@app.command()
def pin(
    world: str = typer.Argument(...),
    content: str = typer.Argument(...),
    priority: int = typer.Option(0, "--priority", help="Higher first; the top 20 enter every sleep prompt"),
) -> None:
    """Add a pinned fact to a world."""
    from memory_pipeline.sleep.memory import InputError, pin_fact

    store = open_store()
    known_world(world, store, "WORLD")
    try:
        pin_fact(store, world, content, priority)
    except InputError as exc:
        refuse(str(exc))
    console.print(
        f"pinned for {escape(world)} at priority {priority} (the same text pinned again takes the new priority)"
    )
