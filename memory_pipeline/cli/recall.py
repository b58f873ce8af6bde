"""Recall on the command line: `eval locomo` measures every index's recall on LoCoMo files."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import typer
from rich.table import Table

from memory_pipeline.cli.console import console, err, escape, refuse

if TYPE_CHECKING:
    from memory_pipeline.operations.recall_eval import EvalReport

app = typer.Typer(no_args_is_help=True, help="Measure how well the consolidated memory recalls (R@1, R@5).")


@app.command("locomo")
def locomo(
    files: list[Path] = typer.Argument(..., help="LoCoMo JSON files (one world each; their qa are the questions)"),
    store: str | None = typer.Option(
        None, "--store", help="SQLAlchemy URL of an empty store to build in (default: a new temporary SQLite file)"
    ),
    model: str | None = typer.Option(
        None, "--model", help="litellm model to consolidate with (default: MEMORY_LLM_MODEL, else the offline model)"
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the results here as JSON"),
) -> None:
    """Import the files into a fresh store, run every domain over them as Dagster runs (day summaries,
    the nights of sleep, object memory, rolling summaries), then rank each world's days by BM25 of
    every question (category 5 left out) against each index's text of the day: R@k is the share of
    questions with a day holding an evidence turn among the top k."""
    from memory_pipeline.operations.recall_eval import EvalError, EvalInterrupted, run_locomo

    if json_out is not None:  # refused before minutes of runs, not after them
        where = json_out.parent if str(json_out.parent) else Path(".")
        if json_out.is_dir():
            refuse(f"--json {json_out}: is a folder, not a file")
        if not where.is_dir():
            refuse(f"--json {json_out}: no folder {where} to write it in")
        if any(json_out.resolve() == f.resolve() for f in files):
            refuse(f"--json {json_out}: is one of the LoCoMo files given (the results would overwrite it)")
    try:
        report = run_locomo(files, store_url=store, model=model, say=lambda line: err.print(escape(line)))
    except EvalInterrupted as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(130) from None
    except EvalError as exc:
        refuse(str(exc))
    print_report(report)
    if json_out is not None:
        json_out.write_text(json.dumps(report.as_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        console.print(f"results written to {escape(str(json_out))}")
    if report.not_recorded:
        err.print(
            f"[yellow]not recorded in the project's store ({escape(report.not_recorded)}); they are in the run's[/]"
        )
    if report.failed_runs:
        for r in report.failed_runs:
            how = "degraded" if r.success else "failed"
            err.print(f"[red]run {how}: {escape(r.name)} {r.run_id[:8]}: {escape(r.error)}[/]")
        err.print("[red]the table measures memory that some runs did not build[/]")
        raise typer.Exit(1)


def print_report(report: EvalReport) -> None:
    from memory_pipeline.operations.recall_eval import DAY_TEXT_INDEXES, masked

    table = Table(title=f"recall on {len(report.files)} LoCoMo file(s), model {escape(report.model)}")
    for name in ("index", "R@1", "R@5", "characters per day"):
        table.add_column(name, justify="left" if name == "index" else "right")
    for s in report.scores:
        chars = f"{s.chars_per_day:,.0f}" if s.index in DAY_TEXT_INDEXES else ""
        table.add_row(s.index.value, f"{s.recall(1):.2f}", f"{s.recall(5):.2f}", chars)
    console.print(table)
    left = ", ".join(f"{n:,} {why}" for why, n in report.left_out.items()) or "none"
    if report.cost_usd is not None:
        cost = f"${report.cost_usd:.4f}"
    elif report.tokens_in or report.tokens_out:
        cost = "unknown (no price for this model)"
    else:
        cost = "none (no tokens used)"
    console.print(
        f"{report.questions:,} questions over {report.worlds} world(s), {report.days:,} candidate days; left out: {left}\n"
        f"LLM: {_calls(report)}, {report.tokens_in:,} tokens in, {report.tokens_out:,} out, cost {cost}\n"
        f"{len(report.runs)} Dagster runs ({sum(not r.success for r in report.runs)} failed, "
        f"{sum(r.success and r.degraded for r in report.runs)} degraded) in {report.directory / 'dagster_home'}; "
        f"store {escape(masked(report.store_url))}\n"
        f"wall time {report.wall_seconds:.0f} s; run id {report.run_id}"
    )


def _calls(report: EvalReport) -> str:
    """The calls, the failed ones said as such (a failed call has no tokens: "3 calls, 0 tokens"
    alone would read as answers that cost nothing), and the breaker's refusals apart (no request)."""
    failed = f" ({report.llm_failed:,} failed)" if report.llm_failed else ""
    refused = f" + {report.llm_refused:,} refused by the open breaker (no request)" if report.llm_refused else ""
    return f"{report.llm_calls:,} calls{failed}{refused}"


def search(
    world: str = typer.Argument(..., help="The world whose memory to search (never another's)"),
    query: str = typer.Argument(..., help="What to recall, in words"),
    k: int = typer.Option(10, "-k", help="How many hits (1-100)"),
    as_json: bool = typer.Option(False, "--json", help="Print the hits as JSON"),
) -> None:
    """memory_search: one ranked recall over every domain's memory of one world (summaries, facts,
    autobiography, objects, tower and conversation summaries), each hit with its kind, time and the
    raw event ids it came from. Full-text ranking by the store's engine; never calls an LLM."""
    from zoneinfo import ZoneInfo

    from memory_pipeline.cli.console import known_world, open_store
    from memory_pipeline.lib import settings
    from memory_pipeline.recall.search import SearchError, memory_search
    from memory_pipeline.tower import config as tower_config

    tz = ZoneInfo(settings.timezone_name())

    store = open_store()
    world = known_world(world, store, "WORLD")  # as every command naming a world refuses a mistyped one
    try:
        hits = memory_search(store, world, query, k, tz=tz, activity_type=tower_config.load().activity_type)
    except SearchError as exc:
        refuse(str(exc))
    if as_json:
        console.print_json(json.dumps([h.as_json() for h in hits], ensure_ascii=False))
        return
    if not hits:
        console.print(f"no memory of {escape(world)} matches {escape(query)!r}")
        return
    table = Table(title=f"memory_search {escape(world)}: {escape(query)}")
    for name in ("#", "kind", "time", "text", "raw events"):
        table.add_column(name)
    for i, h in enumerate(hits, 1):
        when = _when(h.start, h.end, tz)
        events = ", ".join(h.event_ids[:3]) + (f" (+{len(h.event_ids) - 3})" if len(h.event_ids) > 3 else "")
        table.add_row(str(i), h.kind.value, when, escape(h.text[:300]), escape(events))
    console.print(table)


def _when(start: datetime | None, end: datetime | None, tz: ZoneInfo) -> str:
    """A period (midnight to midnight, end exclusive) as its days; a span of events as its times."""
    if start is None:
        return ""
    a, b = start.astimezone(tz), (end or start).astimezone(tz)
    if a.time() == b.time() == datetime.min.time() and b > a:
        last = (b - timedelta(days=1)).date()
        return a.date().isoformat() if last == a.date() else f"{a.date()} .. {last}"
    text = a.strftime("%Y-%m-%d %H:%M")
    if b != a:
        text += " .. " + (b.strftime("%H:%M") if b.date() == a.date() else b.strftime("%Y-%m-%d %H:%M"))
    return text
