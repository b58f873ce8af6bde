"""Seed 004 on the command line: `memory-pipeline tower ...` (types, append, windows, recall,
summary, summarize, recompute, jobs, status); the MCP endpoint is `memory-pipeline serve` (cli/serve.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.table import Table

from memory_pipeline.cli.console import console, err, escape, open_store, refuse

if TYPE_CHECKING:
    from memory_pipeline.lib.store import Store
    from memory_pipeline.tower.api import Tower
    from memory_pipeline.tower.logic import WindowQuery

T = TypeVar("T")

# The window arguments, declared once for every command that takes them (the MCP tools name them
# alike); _window makes them the API's WindowQuery.
TypeName = Annotated[str, typer.Argument(metavar="TYPE")]
Granularity = Annotated[str | None, typer.Option("--granularity", "-g")]
Anchor = Annotated[str | None, typer.Option("--anchor", "-a")]
From = Annotated[str | None, typer.Option("--from")]
To = Annotated[str | None, typer.Option("--to")]
Group = Annotated[str | None, typer.Option("--group")]
Limit = Annotated[int | None, typer.Option("--limit")]
Cursor = Annotated[str | None, typer.Option("--cursor")]

app = typer.Typer(no_args_is_help=True, help="Seed 004 time tower: memory types, entries, windows, recall, summaries.")
types_app = typer.Typer(no_args_is_help=True, help="Memory types: create, list, show, update, delete (archive).")
app.add_typer(types_app, name="types")


def _tower() -> Tower:
    from memory_pipeline.tower import config as tower_config
    from memory_pipeline.tower.api import Tower

    try:
        cfg = tower_config.load()
    except ValueError as exc:
        refuse(str(exc))
    return Tower(open_store(), cfg, run_jobs="inline")


def _do(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    from memory_pipeline.tower.logic import TowerInputError

    try:
        return fn(*args, **kwargs)
    except TowerInputError as exc:
        refuse(str(exc))


def _window(
    granularity: str | None,
    anchor: str | None,
    from_: str | None = None,
    to: str | None = None,
    group: str | None = None,
) -> WindowQuery:
    from memory_pipeline.tower.logic import WindowQuery

    return _do(WindowQuery.parse, granularity, anchor, from_, to, group)


def _json(value: Any) -> None:
    console.print_json(json.dumps(value, ensure_ascii=False, default=str))


def _jobs_json(answer: Mapping[str, Any]) -> None:
    """Print the answer; exit 1 when a job it ran failed or was given up (the CLI runs them inline)."""
    _json(answer)
    failed = [j for j in answer.get("jobs", []) if j["state"] in ("failed", "given_up")]
    if failed:
        refuse(f"{len(failed)} of {len(answer['jobs'])} job(s) {' / '.join(sorted({j['state'] for j in failed}))}", 1)


def _parse_json(text: str | None, field: str) -> Any:
    if text is None:
        return None
    from memory_pipeline.lib.text import json_error

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        refuse(f"--{field}: not JSON ({json_error(exc)})")


@types_app.command("create")
def types_create(
    name: str,
    description: str = typer.Option("", help="What the type records."),
    chain: str | None = typer.Option(
        None, help="Comma-separated granularities, e.g. day,week (default 10min,30min,1h,day,week)."
    ),
    summaries: bool = typer.Option(False, "--summaries/--no-summaries", help="Semantic summaries on (default off)."),
    group_field: str | None = typer.Option(None, help="The field that groups entries, e.g. project."),
    retention: str = typer.Option("", help="Declared retention (stored and shown, never enforced)."),
    summary_cap: str = typer.Option("", help="Coarsest summarized level (default week)."),
) -> None:
    """Create a memory type."""
    if group_field is not None and not group_field.strip():  # given but empty: not "no group field"
        refuse("--group-field: empty (leave the option out for a type whose entries have no group)")
    t = _tower()
    _json(
        _do(
            t.create_type,
            name,
            description=description,
            chain=chain.split(",") if chain is not None else None,  # "" or "day,,week": refused by element
            summaries=summaries,
            group_field=group_field,
            retention=retention or None,
            summary_cap=summary_cap or None,
        )
    )


@types_app.command("list")
def types_list(archived: bool = typer.Option(False, "--archived", help="Include archived types.")) -> None:
    """Memory types with their chains and switches."""
    table = Table(title="Memory types")
    for col in ("name", "chain", "summaries", "cap", "group", "retention", "state"):
        table.add_column(col)
    for t in _do(_tower().list_types, archived):
        table.add_row(
            escape(t["name"]),
            " → ".join(t["chain"]),
            "on" if t["summaries"] else "off",
            t["summary_cap"],
            t["group_field"] or "",
            f"{t['retention'] or ''} (declared)",
            "archived" if t["archived"] else ("built-in" if t["builtin"] else "active"),
        )
    console.print(table)


@types_app.command("show")
def types_show(name: str) -> None:
    """One type as JSON."""
    _json(_do(_tower().get_type, name))


@types_app.command("update")
def types_update(
    name: str, changes: str = typer.Argument(..., help="JSON object, e.g. '{\"summaries\": true}'")
) -> None:
    """Change a type (never its name)."""
    _json(_do(_tower().update_type, name, _parse_json(changes, "changes")))


@types_app.command("delete")
def types_delete(name: str) -> None:
    """Archive a type: appends refused, recall still works, nothing deleted."""
    _json(_do(_tower().delete_type, name))


@app.command()
def append(
    type_name: TypeName,
    text: str | None = typer.Option(None, "--text", help="Plain-text content."),
    json_content: str | None = typer.Option(None, "--json", help="JSON content (any value)."),
    at: str | None = typer.Option(None, "--at", help="ISO datetime with offset (default now)."),
    entry_id: str | None = typer.Option(None, "--id", help="Idempotency key."),
    group: str | None = typer.Option(None, "--group", help="Group value (types with a group field)."),
    file: Path | None = typer.Option(None, "--file", help="JSONL file, one entry object per line."),
) -> None:
    """Append one entry (--text or --json) or a JSONL file (--file): all or nothing."""
    t = _tower()
    if file is not None:
        if text is not None or json_content is not None:
            refuse("--file goes alone (the entries are in the file)")
        report = _do(t.append_file, type_name, file)
    else:
        if (text is None) == (json_content is None):
            refuse("give exactly one of --text, --json or --file")
        content = text if text is not None else _parse_json(json_content, "json")
        entry = {"content": content, "at": at, "id": entry_id, "group": group}
        report = _do(t.append, type_name, {k: v for k, v in entry.items() if v is not None or k == "content"}, "cli")
    late = report["late_days_refreshed"]
    console.print(
        f"{escape(report['type'])}: {report['received']} received, [green]{report['inserted']} inserted[/], "
        f"{report['duplicates']} already present"
        + (
            f"; closed day(s) already materialized, their windows refreshed: {', '.join(late)} "
            f"({report['late_windows_refreshed']} window(s))"
            if late
            else ""
        )
    )


@app.command()
def windows(
    type_name: TypeName,
    granularity: Granularity = None,
    anchor: Annotated[
        str | None, typer.Option("--anchor", "-a", help="A date or datetime inside the window: list its children.")
    ] = None,
    group: Group = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> None:
    """Browse one level at a time (entry counts, staleness)."""
    _json(_do(_tower().windows, type_name, _window(granularity, anchor, group=group), limit=limit, cursor=cursor))


@app.command()
def recall(
    type_name: TypeName,
    granularity: Granularity = None,
    anchor: Anchor = None,
    from_: From = None,
    to: To = None,
    group: Group = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> None:
    """Exact recall: the window's raw entries, a page at a time."""
    t = _tower()
    _json(_do(t.recall, type_name, _window(granularity, anchor, from_, to, group), limit=limit, cursor=cursor))


@app.command()
def summary(
    type_name: TypeName,
    granularity: Granularity = None,
    anchor: Anchor = None,
    from_: From = None,
    to: To = None,
    group: Group = None,
    summarize_on_miss: Annotated[bool, typer.Option("--summarize-on-miss")] = False,
    limit: Limit = None,
    cursor: Cursor = None,
) -> None:
    """Semantic recall: the stored summary (missing / empty otherwise), a page at a time."""
    t = _tower()
    window = _window(granularity, anchor, from_, to, group)
    _jobs_json(_do(t.get_summary, type_name, window, summarize_on_miss=summarize_on_miss, limit=limit, cursor=cursor))


@app.command()
def summarize(
    type_name: TypeName,
    granularity: Granularity = None,
    anchor: Anchor = None,
    from_: From = None,
    to: To = None,
    group: Group = None,
) -> None:
    """Summarize a closed window bottom-up (runs the job here and prints its final state; exit 1 if it failed)."""
    _jobs_json(_do(_tower().summarize, type_name, _window(granularity, anchor, from_, to, group)))


@app.command()
def recompute(
    type_name: TypeName,
    granularity: Granularity = None,
    anchor: Anchor = None,
    from_: From = None,
    to: To = None,
    group: Group = None,
) -> None:
    """Rebuild a window's summary from the raw entries, bypassing the chain (exit 1 if the job failed)."""
    _jobs_json(_do(_tower().recompute, type_name, _window(granularity, anchor, from_, to, group)))


@app.command()
def jobs(
    type_name: str | None = typer.Option(None, "--type"),
    state: str | None = typer.Option(None, "--state"),
    limit: Limit = None,
) -> None:
    """Recent summarize jobs."""
    _json(_do(_tower().list_jobs, type_name, state, limit))


@app.command()
def status() -> None:
    """Types, entries, windows and summaries per type, the guardrail settings, given-up windows, jobs."""
    print_status(open_store())


def print_status(store: Store) -> None:
    from zoneinfo import ZoneInfo

    from memory_pipeline.lib import settings
    from memory_pipeline.tower import config as tower_config
    from memory_pipeline.tower import reports

    cfg = tower_config.load()
    tz = ZoneInfo(settings.timezone_name())
    table = Table(title="Time tower per memory type")
    for col in ("type", "chain", "summaries", "entries", "windows", "summary records", "jobs", "state"):
        table.add_column(col, justify="right" if col in ("entries", "windows", "summary records", "jobs") else "left")
    for r in reports.per_type(store):
        table.add_row(
            escape(r["name"]),
            " → ".join(r["chain"]),
            f"{'on' if r['summaries'] else 'off'} (cap {r['cap']})",
            str(r["entries"]),
            str(r["windows"]),
            str(r["summaries_count"]),
            str(r["jobs"]),
            "archived" if r["archived"] else "active",
        )
    console.print(table)
    console.print(
        f"guardrails (memory.tower): semantic tick every {cfg.semantic_tick_minutes} min, settle {cfg.settle_minutes} "
        f"min, backoff doubling from {cfg.backoff_minutes} min, given up after {cfg.give_up_after} failures, "
        f"at most {cfg.max_commits_per_round} commits per round; structural refresh every "
        f"{cfg.structural_refresh_seconds} s; input budget {cfg.input_budget_tokens} tokens"
    )
    for g in reports.given_up(store, tz):
        err.print(f"[yellow]given up[/] {escape(g['window'])} after {g['failures']} failures: {escape(g['reason'])}")
    for w in reports.retrying(store, tz):
        err.print(
            f"[yellow]retrying[/] {escape(w['window'])}: failure {w['failures']} of {cfg.give_up_after}, next attempt "
            f"from {w['next_attempt_at']} by {w['retried_by']}: {escape(w['reason'])}"
        )
    stale = reports.stale_days(store, tz, cfg.activity_type)
    if stale:
        err.print(f"[yellow]stale windows[/]: {', '.join(f'{d} (+{n})' for d, n in sorted(stale.items()))}")
