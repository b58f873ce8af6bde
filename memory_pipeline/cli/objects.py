"""Seed 001 (object memory) on the command line: `memory-pipeline objects ...`.

memory_organize (enqueue a compact / organize / deep request), run the worker in this process,
approve a candidate project, mark a world busy/stopped, recall (find / read / evidence), the
Markdown projection, and the read-only inspect commands (never call a model)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from memory_pipeline.cli.console import console, err, escape, known_world, open_store, refuse

if TYPE_CHECKING:
    from collections.abc import Mapping
    from zoneinfo import ZoneInfo

    from memory_pipeline.lib.store import Store
    from memory_pipeline.objects.context import ObjectsContext

app = typer.Typer(no_args_is_help=True, help="Seed 001 object memory: compact, organize, deep review, recall.")
inspect_app = typer.Typer(
    no_args_is_help=True, help="Read-only views (never call a model); page with the last argument."
)
app.add_typer(inspect_app, name="inspect")


def _zone() -> ZoneInfo:
    """The configured zone: every time the commands show is in it, to the second."""
    from zoneinfo import ZoneInfo

    from memory_pipeline.lib import settings

    return ZoneInfo(settings.timezone_name())


def _octx(asset: str = "objects_cli") -> ObjectsContext:
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.llm import LLMClient
    from memory_pipeline.objects import config as objects_config
    from memory_pipeline.objects.context import ObjectsContext

    store = open_store()
    try:
        cfg = objects_config.load()
    except settings.ConfigError as exc:
        refuse(str(exc))
    return ObjectsContext(store, LLMClient.from_settings(store, asset=asset), cfg, _zone())


def _print(doc: Any) -> None:
    console.print_json(json.dumps(doc, ensure_ascii=False, default=str))


@app.command("organize")
def organize(
    world: str = typer.Argument(..., help="World id (the agent)"),
    mode: str = typer.Option("organize", "--mode", help="compact | organize | deep"),
    scope: str = typer.Option("", "--scope", help="A goal and search hint for the model (not a filter)"),
    retry_blocked: bool = typer.Option(False, "--retry-blocked", help="Release blocked events (once per new request)"),
    token: str | None = typer.Option(None, "--token", help="Request token: a replay returns the original receipt"),
    now: bool = typer.Option(
        False, "--now", help="Now: compact first, then organize (or deep); the request is recorded as an event"
    ),
) -> None:
    """memory_organize(mode, scope, retry_blocked): prints the enqueue receipt at once."""
    from memory_pipeline.lib.store.requests import RequestConflict
    from memory_pipeline.objects import logic, worker

    octx = _octx()
    known_world(world, octx.store, "WORLD")
    if not octx.cfg.enabled:
        err.print(
            "[yellow]memory.objects.enabled is false: the request is queued, and no run takes it until it is true[/]"
        )
    try:
        if now:
            _print(worker.organize_now(octx, world, scope, token, retry_blocked, mode))
        else:
            _print(worker.enqueue(octx, world, mode, scope, retry_blocked, token))
    except RequestConflict as exc:
        refuse(exc.naming("--token"))
    except (worker.RequestError, logic.SubmissionError) as exc:
        refuse(str(exc))


@app.command("run")
def run(
    world: list[str] = typer.Option([], "--world", help="Only this world (repeatable)"),
    max_batches: int = typer.Option(0, "--max-batches", help="Stop after this many batches (0: no limit)"),
    automatic: bool = typer.Option(True, "--automatic/--queued-only", help="Create threshold/hourly jobs first"),
) -> None:
    """Bring new events into the hot timeline and run queued jobs batch by batch in this process
    (the Dagster assets do the same under their sensors)."""
    from memory_pipeline.objects import timeline, worker
    from memory_pipeline.objects.logic import INT_MAX, JobMode

    if max_batches < 0:
        refuse(f"--max-batches: must be 0 (no limit) or more, got {max_batches}")
    if max_batches > INT_MAX:
        refuse(f"--max-batches: must be at most {INT_MAX:,}, got {max_batches}")
    octx = _octx()
    worlds = [known_world(w, octx.store) for w in world] or None
    if not octx.cfg.enabled:
        refuse("memory.objects.enabled is false: nothing done", code=1)
    intake = timeline.intake(octx, worlds)
    if automatic:
        worker.enqueue_threshold(octx, worlds)  # --world: that world's jobs only, never another's
    done: list[worker.WorkerReport] = []  # the reports of the worker runs so far
    try:
        done.append(worker.run_worker(octx, worlds, max_batches or None, modes=[JobMode.COMPACT]))
        left = max_batches - done[0].batches if max_batches else None  # one budget for the two passes
        if automatic and left != 0:
            worker.enqueue_hourly(octx, worlds)
        if left != 0:
            done.append(worker.run_worker(octx, worlds, left))
    except worker.ProviderStopped as exc:  # the provider's breaker: what was done, then its one line
        done.append(exc.report)
        console.print(
            f"hot timeline: {intake.events} new events; stopped at world {escape(exc.world)}: committed batches "
            f"{sum(r.committed for r in done)}, failed claims {sum(r.failures for r in done)}, "
            f"model calls {sum(r.model_calls for r in done)}"
        )
        _say_what_failed(done)
        err.print(f"[red]{escape(exc.stopping(worker.LEFT_FOR_NEXT_RUN))}[/]", soft_wrap=True)
        raise typer.Exit(1) from None
    rep, rep2 = done if len(done) == 2 else (done[0], worker.WorkerReport())  # the budget spent on compaction
    held_back = worker.worlds_at_once(octx) < octx.cfg.worlds_at_once  # SQLite takes one world at a time
    at_once = max(rep.worlds_at_once, rep2.worlds_at_once)
    console.print(
        f"hot timeline: {intake.events} new events ({intake.slices} slices, {intake.oversized} oversized); "
        f"compact batches {rep.committed}; organize/deep batches {rep2.committed}, outcomes {rep2.outcomes}, "
        f"failed claims {rep.failures + rep2.failures}, blocked events {rep2.blocked_events}, "
        f"model calls {rep.model_calls + rep2.model_calls}; worlds at once {at_once}"
        + (f" (of worlds_at_once {octx.cfg.worlds_at_once}: one on SQLite)" if held_back else "")
    )
    if not _say_what_failed([rep, rep2]):
        raise typer.Exit(1)


ERRORS_SHOWN = 10


def _say_what_failed(reports: list[Any]) -> bool:
    """Print the worlds a run skipped (no failure: their jobs stay queued) and what failed: each
    failed claim, the jobs that ended failed, the events blocked. True when nothing failed."""
    busy = sorted({w for r in reports for w in r.lease_busy})
    flagged = sorted({w for r in reports for w in r.not_claimed})
    if busy:
        err.print(f"[yellow]lease busy (another run holds it; jobs stay queued): {escape(', '.join(busy))}[/]")
    if flagged:
        err.print(f"[yellow]not claimed (the agent is marked busy or stopped): {escape(', '.join(flagged))}[/]")
    errors = [e for r in reports for e in r.errors]
    if not errors:
        return True
    failed = [j for r in reports for j in r.failed_jobs]
    blocked = [e for r in reports for e in r.blocked]
    err.print(
        f"[red]failed: {len(errors)} failed claim(s)"
        + (f"; jobs ended failed: {escape(', '.join(failed))}" if failed else "")
        + (
            f"; events blocked: {escape(', '.join(blocked))} (released by a new request with --retry-blocked)"
            if blocked
            else ""
        )
        + "[/]"
    )
    for e in errors[:ERRORS_SHOWN]:
        err.print(f"  {escape(e)}")
    if len(errors) > ERRORS_SHOWN:
        err.print(f"  ... {len(errors) - ERRORS_SHOWN} more (`objects status` shows the failure history)")
    return False


@app.command("enable")
def enable() -> None:
    """Turn the domain on for an existing store: records for every raw event (idempotent, deletes
    nothing), counts before and after, and an integrity check."""
    from memory_pipeline.objects import timeline

    report = timeline.enable(_octx())
    _print(report)
    if report["integrity"] != "ok":
        err.print(f"[red]integrity check failed: {escape('; '.join(report['integrity']))}[/]")
        raise typer.Exit(1)


@app.command("approve")
def approve(world: str = typer.Argument(...), project_id: str = typer.Argument(..., help="project:<key>")) -> None:
    """The user's approval: a candidate project becomes active."""
    from memory_pipeline.objects import graph, logic

    octx = _octx()
    try:
        _print(graph.approve_project(octx, known_world(world, octx.store, "WORLD"), project_id))
    except logic.SubmissionError as exc:
        refuse(str(exc))


@app.command("flags")
def flags(
    world: str = typer.Argument(...),
    busy: bool | None = typer.Option(None, "--busy/--idle", help="The agent is busy: claim no batch"),
    stopped: bool | None = typer.Option(None, "--stopped/--running", help="The agent is stopped: call no model"),
) -> None:
    """Set the runtime flags of a world (no batch is claimed while busy or stopped)."""
    from memory_pipeline.objects import worker

    octx = _octx()
    busy, stopped = worker.set_flags(octx, known_world(world, octx.store, "WORLD"), busy=busy, stopped=stopped)
    console.print(f"{escape(world)}: busy={busy} stopped={stopped}")  # as stored: a flag not given is kept


def _tool(name: str, args: dict[str, Any]) -> None:
    from memory_pipeline.objects import tools

    octx = _octx()
    known_world(args["world"], octx.store, "WORLD")
    try:
        _print(tools.call(octx, name, args, tz=octx.tz))  # times in the configured zone, to the second
    except tools.ToolError as exc:
        refuse(str(exc))


@app.command("find")
def find(world: str = typer.Argument(...), query: str = typer.Argument(...)) -> None:
    """memory_find: names, aliases, terms, cues and direct project relations (no embeddings)."""
    _tool("memory_find", {"world": world, "query": query})


@app.command("read")
def read(world: str = typer.Argument(...), object_id: str = typer.Argument(...)) -> None:
    """memory_read: the whole dossier."""
    _tool("memory_read", {"world": world, "id": object_id})


# OFFSET as the last argument: "-1" is read as that argument (and refused by name), not as an
# unknown option "No such option: -1" would name.
_OFFSET_LAST = {"ignore_unknown_options": True}


@app.command("evidence", context_settings=_OFFSET_LAST)
def evidence(
    world: str = typer.Argument(...), object_id: str = typer.Argument(...), offset: int = typer.Argument(0)
) -> None:
    """memory_evidence: the object's attachments expanded to the raw event text."""
    _tool("memory_evidence", {"world": world, "id": object_id, "offset": offset})


@app.command("core-import")
def core_import(
    world: str = typer.Argument(...), path: str = typer.Argument(..., help="AGENTS.md, SOUL.md or USER.md")
) -> None:
    """Import a human edit of a core document (the file's name says which); unchanged: not rewritten."""
    from pathlib import Path

    from memory_pipeline.objects import graph, logic

    file = Path(path)
    try:
        content = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        refuse(f"{path}: cannot read ({exc})")
    octx = _octx()
    try:
        _print(graph.import_core(octx, known_world(world, octx.store, "WORLD"), file.name, content))
    except logic.SubmissionError as exc:
        refuse(f"{path}: {exc}")


@app.command("resident")
def resident(world: str = typer.Argument(...)) -> None:
    """What the agent holds every turn: core documents, a bounded directory, the hot timeline."""
    from memory_pipeline.objects import recall

    octx = _octx()
    _print(recall.resident(octx.store, known_world(world, octx.store, "WORLD"), octx.cfg.hot_view_max_bytes))


@app.command("project")
def project(passes: int = typer.Option(1, "--passes", help="Passes of at most 10 objects (at least 1)")) -> None:
    """Write the Markdown projection (README index, one folder per type, the core documents) under
    the data folder: files deleted or edited by hand are rewritten, a core document's human edit
    is imported."""
    from memory_pipeline.objects import logic, projection

    if passes < 1:
        refuse(f"--passes: must be at least 1, got {passes}")
    if passes > logic.INT_MAX:
        refuse(f"--passes: must be at most {logic.INT_MAX:,}, got {passes}")
    octx = _octx()
    root = projection.root_of(octx.cfg)
    errors: list[str] = []
    for _ in range(passes):
        rep = projection.project(octx.store, root)
        console.print(
            f"{root}: {rep.written} written, {rep.unchanged} unchanged; found {rep.missing} file(s) missing, "
            f"{rep.differing} edited by hand; removed {rep.removed} page file(s) that should no longer exist; "
            f"core documents {rep.core_written} written, "
            f"{len(rep.core_imported)} human edit(s) imported"
            + (f" ({', '.join(rep.core_imported)})" if rep.core_imported else "")
            + f"; {rep.behind_after} behind, "
            f"{len(rep.errors)} error(s)"
        )
        errors += rep.errors
        if not rep.behind_after:
            break
    if errors:
        err.print(f"[red]failed: {len(errors)} error(s) (`objects status` shows the ones still standing)[/]")
        for e in errors[:ERRORS_SHOWN]:
            err.print(f"  {escape(e)}")
        raise typer.Exit(1)


@app.command("status")
def status(world: str | None = typer.Option(None, "--world")) -> None:
    """memory_status: counts per state, earliest 20 unfinished records, worker error, failures."""
    from memory_pipeline import domains

    domains.check_config()  # before the first line: a bad setting is refused, not met half-way
    store = open_store()
    print_objects_status(store, known_world(world, store) if world is not None else None)


FAILURES_SHOWN = 5  # of the failure history's newest 20 (inspect status lists all 20)


def print_objects_status(store: Store, world: str | None = None) -> None:
    from memory_pipeline.objects import config, logic, projection, recall, reports

    st = reports.status(store, world, tz=_zone())
    states = st["states"]
    console.print(
        "objects: events by state "
        + (", ".join(f"{k} {v}" for k, v in sorted(states.items())) or "none yet")
        + ("" if st["complete"] else " [yellow](partial: unfinished or never-organized events remain)[/]")
    )
    if st["not_organized"]:
        console.print(
            f"not organized (over {logic.EVENT_MAX_CHARS:,} characters; raw kept, `objects inspect event ID` reads it): "
            + ", ".join(f"{escape(r['event_id'])} ({r['chars']:,} characters)" for r in st["not_organized"])
        )
    counts = recall.object_counts(store, world)
    table = Table(title="Objects per world and type")
    for col in ("world", "objects by type", "graph revision", "worker error"):
        table.add_column(col, overflow="fold")
    errors = {w["world_id"]: w for w in st["worlds"]}
    for w in sorted(set(counts) | set(errors)):
        info: Mapping[str, object] = errors.get(w, {})
        table.add_row(
            w,
            ", ".join(f"{t} {n}" for t, n in sorted(counts.get(w, {}).items())),
            str(info.get("graph_revision", "")),
            escape(str(info.get("worker_error") or "")),
        )
    console.print(table)
    if st["jobs"]:
        console.print("jobs: " + ", ".join(f"{j['mode']} {j['status']} {j['count']}" for j in st["jobs"]))
    if st["earliest_unfinished"]:
        console.print(
            "earliest unfinished: "
            + ", ".join(
                f"{escape(r['event_id'])} ({r['state']}, read {r['page_cursor']:,} of {r['chars']:,} characters)"
                for r in st["earliest_unfinished"][:20]
            )
        )
    if st["failures"]:
        shown = st["failures"][:FAILURES_SHOWN]
        more = len(st["failures"]) - len(shown)
        console.print(
            "failure history, newest first" + (f" ({more} more in `objects inspect status`)" if more else "") + ":"
        )
        for f in shown:
            console.print(
                f"  {f['at']} {escape(f['world_id'])} {f['mode']} job {f['job_id']}"
                + (f" batch {escape(str(f['batch']))}" if f["batch"] else "")
                + f": {escape(f['error'][:200])}",
                soft_wrap=True,
            )
    lag = st["projection"]
    # The files as they are now (read-only), not only as the last pass found them.
    found = projection.check_files(store, projection.root_of(config.load())).items()
    disk = [kind for (w, _), kind in found if world is None or w == world]
    console.print(
        f"markdown projection: {lag['behind']} object(s) behind (the projection sensor's runs or "
        f"`objects project` rewrite them, {logic.PROJECTION_PER_PASS} a pass); on disk now "
        f"{disk.count('missing')} file(s) missing, {disk.count('differs')} edited by hand (the next pass rewrites "
        f"them: object files are never imported); {len(lag['errors'])} error(s)"
        + "".join(f"\n  {escape(e['world_id'])} {escape(e['object_id'])}: {escape(e['error'])}" for e in lag["errors"])
    )


def _offset(value: str | None, name: str = "OFFSET") -> int:
    if value is None:
        return 0
    try:
        n = int(value)
    except ValueError:
        refuse(f"{name}: {value!r} is not an integer (use the next_offset a previous call printed)")
    if n < 0:
        refuse(f"{name}: must be >= 0")
    from memory_pipeline.objects.logic import INT_MAX

    if n > INT_MAX:
        refuse(f"{name}: must be at most {INT_MAX:,}, got {n}")
    return n


@inspect_app.command("status")
def inspect_status(world: str | None = typer.Option(None, "--world")) -> None:
    """Counts per state, the earliest 20 unfinished records, errors (JSON)."""
    from memory_pipeline.objects import reports

    store = open_store()
    _print(reports.status(store, known_world(world, store) if world is not None else None, tz=_zone()))


@inspect_app.command("list", context_settings=_OFFSET_LAST)
def inspect_list(
    otype: str = typer.Argument(..., metavar="TYPE"),
    offset: str | None = typer.Argument(None),
    world: str = typer.Option(..., "--world"),
) -> None:
    """Objects of one type, by name; next_offset continues."""
    from memory_pipeline.objects import recall

    store = open_store()
    try:
        _print(recall.list_objects(store, known_world(world, store), otype, _offset(offset)))
    except recall.RecallError as exc:
        refuse(str(exc))


@inspect_app.command("object", context_settings=_OFFSET_LAST)
def inspect_object(
    object_id: str = typer.Argument(..., metavar="ID"),
    offset: str | None = typer.Argument(None),
    world: str = typer.Option(..., "--world"),
) -> None:
    """One object's dossier with relations and sources paged (next_offset continues)."""
    from memory_pipeline.objects import logic, recall

    try:
        logic.parse_object_id(object_id, "ID")
    except logic.SubmissionError as exc:
        refuse(str(exc))
    store = open_store()
    doc = recall.object_view(store, known_world(world, store), object_id, _offset(offset), tz=_zone())
    if doc is None:
        refuse(f"ID: no object {object_id} in world {world}")
    _print(doc)


@inspect_app.command("events")
def inspect_events(
    start: str = typer.Argument(..., metavar="FROM"),
    end: str = typer.Argument(..., metavar="TO"),
    cursor: str | None = typer.Argument(None),
    world: str | None = typer.Option(None, "--world"),
) -> None:
    """Events with occurrence time in [FROM, TO) (ISO 8601 with an offset); cursor continues."""
    from memory_pipeline.lib.timeutil import parse_instant
    from memory_pipeline.objects import recall

    bounds = []
    for label, value in (("FROM", start), ("TO", end)):
        try:
            bounds.append(parse_instant(value))
        except ValueError as exc:
            refuse(f"{label} {value!r}: {exc}")
    lo, hi = bounds
    store = open_store()
    try:
        shown = known_world(world, store) if world is not None else None
        _print(recall.events_between(store, lo, hi, cursor, world=shown, tz=_zone()))
    except recall.RecallError as exc:
        refuse(str(exc))


@inspect_app.command("event", context_settings=_OFFSET_LAST)
def inspect_event(event_id: str = typer.Argument(..., metavar="ID"), offset: str | None = typer.Argument(None)) -> None:
    """One event: state, outcome, attached objects and its text from OFFSET (next_offset continues)."""
    from memory_pipeline.objects import recall

    doc = recall.event_view(open_store(), event_id, _offset(offset), tz=_zone())
    if doc is None:
        refuse(f"ID: no event {event_id}")
    _print(doc)
