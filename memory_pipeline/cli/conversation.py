"""Seed 002 on the command line (`memory-pipeline conversation ...`): the gate's initialization
status, the user's memory check, their confirmation or correction of the check line, the
user-profile store, the due summaries as a Dagster run, an operator's retry of a failing
conversation, what a conversation's summary is now."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.table import Table

from memory_pipeline.cli.console import console, err, escape, open_store, refuse

if TYPE_CHECKING:
    from memory_pipeline.lib.store import Store

T = TypeVar("T")
app = typer.Typer(no_args_is_help=True, help=__doc__)


def _guard(fn: Callable[..., T], *args: Any) -> T:
    from memory_pipeline.conversation.logic import FormatError
    from memory_pipeline.conversation.summaries import InputError

    try:
        return fn(*args)
    except (InputError, FormatError) as exc:
        refuse(str(exc))


@app.command("init-status")
def init_status(
    conversation: str = typer.Argument(...),
    status: str = typer.Argument(..., help="pending | phase1_done | phase2_done | done"),
) -> None:
    """Set a conversation's initialization status (the Step-0 gate needs done)."""
    from memory_pipeline.conversation.summaries import set_init_status

    _guard(set_init_status, open_store(), conversation, status)
    console.print(f"{escape(conversation)}: init status {escape(status)}")


@app.command()
def check(conversation: str = typer.Argument(...)) -> None:
    """The user's memory check (你还记得我跟你聊过什么吗): served at the sensor's next tick, through the gate."""
    from memory_pipeline.conversation.summaries import request

    _guard(request, open_store(), conversation, "user_check")
    console.print(
        f"{escape(conversation)}: a check requested; the next rolling summary run serves it "
        "(`memory-pipeline conversation summarize` runs it now)"
    )


@app.command()
def profile(
    world: str = typer.Argument(...),
    key: str = typer.Argument(...),
    value: str = typer.Argument(...),
    conversation: str | None = typer.Option(None, "--conversation", help="Also request a preference-override summary"),
) -> None:
    """Set a user-profile fact (newest wins); with --conversation, a preference override trigger."""
    from memory_pipeline.conversation.summaries import set_profile

    _guard(set_profile, open_store(), world, key, value, conversation)
    asked = f"; a preference-override summary of {escape(conversation)} requested" if conversation else ""
    console.print(f"profile {escape(key)} of {escape(world)} set{asked}")


@app.command()
def summarize() -> None:
    """Summarize every due conversation now, as one Dagster run (what the sensor requests)."""
    from memory_pipeline.conversation import config as conversation_config
    from memory_pipeline.operations.runner import error_line, execute_job

    conversation_config.load()  # a bad setting is one line now (ConfigError), not a failed run
    result = execute_job("conversation_rolling_summary_job")  # a failure is the one line printed below
    mat = next((e for e in result.all_events if e.is_step_materialization), None)
    meta: dict[str, Any] = (
        {k: v.value for k, v in mat.step_materialization_data.materialization.metadata.items()} if mat else {}
    )
    failure = next((e for e in result.all_events if e.is_step_failure), None)
    if failure is not None:  # what the run did before it failed (the breaker's Failure says it)
        data = failure.step_failure_data
        failed_meta = data.user_failure_data.metadata if data.user_failure_data else {}
        meta = {k: v.value for k, v in failed_meta.items()}
    # A run whose summaries failed succeeded as a run, but it is no "ok": the command exits 1.
    state = "FAILED" if not result.success else "DEGRADED" if meta.get("failed", 0) else "ok"
    console.print(
        f"run {result.run_id[:8]} {state}: {meta.get('due', 0)} due, "
        f"{meta.get('written', 0)} written, {meta.get('failed', 0)} failed"
        + (f", {len(meta['not_done'])} not done" if meta.get("not_done") else "")
    )
    if not result.success:
        why = error_line(failure.step_failure_data.error) if failure is not None else "run failed"
        err.print(f"[red]{escape(why)}[/]", soft_wrap=True)
        raise typer.Exit(1)
    if meta.get("failed", 0):  # nothing written for them: an operator's command says so by its exit code
        err.print("failed summaries are retried after their backoff: `memory-pipeline conversation status` says why")
        raise typer.Exit(1)


@app.command()
def show(conversation: str = typer.Argument(...)) -> None:
    """The newest summary version and, while unverified, its check line."""
    from memory_pipeline.conversation import config
    from memory_pipeline.conversation.summaries import latest
    from memory_pipeline.sleep.memory import self_block_of

    store, cfg = open_store(), config.load()
    row = _guard(latest, store, conversation)  # an id never ingested is refused by name
    if row is None:
        refuse(f"conversation {conversation!r} has no summary yet", code=1)
    arc = self_block_of(store, cfg.long_arc_block, [row["world_id"]]).get(row["world_id"])
    if arc:
        console.print(escape(f"long_arc (wins on emotional tone): {arc}\n"))
    console.print(escape(row["content"]))
    if row["verified"]:
        console.print(f"version {row['version']}, verified")
        return
    console.print(f"version {row['version']}, unverified; its check line:")
    console.print(escape(row["check_line"] or ""))
    console.print(
        escape(
            f"the user's yes: memory-pipeline conversation confirm {conversation} --version {row['version']}; "
            f"a no: memory-pipeline conversation correct {conversation} TEXT"
        )
    )


@app.command()
def confirm(
    conversation: str = typer.Argument(...),
    version: int | None = typer.Option(None, "--version", help="The version whose check line the user saw"),
) -> None:
    """The user said yes to the check line: the newest version is marked verified (nothing rewritten)."""
    from memory_pipeline.conversation.summaries import confirm as do_confirm

    changed = _guard(do_confirm, open_store(), conversation, version)
    console.print("verified" if changed else "already verified: nothing changed")


@app.command()
def correct(
    conversation: str = typer.Argument(...),
    arc: str = typer.Argument(..., help="The user's own account"),
    request_id: str | None = typer.Option(
        None, "--request-id", help="Retry-safe: the same id again writes nothing and answers the first version"
    ),
) -> None:
    """The user denied the check line: a new verified version with their emotional arc."""
    from memory_pipeline.conversation.summaries import correct_request
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.store.requests import RequestConflict
    from memory_pipeline.lib.timeutil import zone

    tz = zone(settings.timezone_name())
    try:
        answer, replayed = _guard(correct_request, open_store(), conversation, arc, tz, None, request_id)
    except RequestConflict as exc:
        refuse(exc.naming("--request-id"))
    how = "already written by this request id" if replayed else "written"
    console.print(f"version {answer['version']} {how} (verified)")


@app.command()
def retry(conversation: str = typer.Argument(...)) -> None:
    """An operator's retry of a failing conversation (held after too many failures in a row, or
    backing off): its failures in a row are forgotten and the next trigger asks the model again."""
    from memory_pipeline.conversation.summaries import retry as do_retry

    state = _guard(do_retry, open_store(), conversation)
    console.print(
        f"{escape(conversation)}: {state.consecutive} failure(s) in a row cleared; the next trigger asks again"
    )


@app.command()
def status() -> None:
    """Summaries, versions, unverified, failures (backing off, held with the reason), open requests."""
    print_conversation_status(open_store())


def print_conversation_status(store: Store) -> None:
    from memory_pipeline.conversation import config
    from memory_pipeline.conversation.summaries import failing
    from memory_pipeline.conversation.summaries import status as conv_status

    cfg = config.load()
    title = "Rolling conversation summaries (seed 002)"
    table = Table(title=title, min_width=len(title))  # a narrow table wrapped its title over two lines
    table.add_column("what")
    table.add_column("count", justify="right")
    for k, v in conv_status(store, cfg).items():
        table.add_row(k.replace("_", " "), str(v))
    console.print(table)
    rows = failing(store, cfg)
    if rows:
        from memory_pipeline.lib import settings
        from memory_pipeline.lib.timeutil import zone

        tz = zone(settings.timezone_name())
        fails = Table(title="Failing conversations (`conversation retry CONV` clears a held one)")
        for c in ("conversation", "in a row", "state", "next attempt", "last error"):
            fails.add_column(c)
        for f in rows:
            nxt = f["next_attempt"].astimezone(tz).isoformat(timespec="seconds") if f["next_attempt"] else "-"
            fails.add_row(
                escape(f["conversation_id"]), str(f["consecutive_failures"]), f["state"], nxt, escape(f["last_error"])
            )
        console.print(fails)
