"""Access tokens on the command line: `memory-pipeline tokens create | list | revoke`. The memory
server (`memory-pipeline serve`) accepts a request only with a token in force."""

from __future__ import annotations

import typer
from rich.table import Table

from memory_pipeline.cli.console import console, err, escape, open_store, refuse
from memory_pipeline.lib.ids import validate_id

app = typer.Typer(no_args_is_help=True, help="Bearer tokens of the memory server: create, list, revoke.")


@app.command("create")
def create(
    world: list[str] = typer.Option([], "--world", help="A world the token may read (repeat for more)"),
    all_worlds: bool = typer.Option(
        False, "--all-worlds", help="Every world, and the types that group by no world (an operator's token)"
    ),
    read_only: bool = typer.Option(False, "--read-only", help="The token cannot call a tool that writes"),
    name: str | None = typer.Option(None, "--name", help="A name for list and revoke (default token-<8 hex>)"),
) -> None:
    """Create a token; it is printed once, as the last line, and only its hash is stored."""
    from memory_pipeline.access import tokens
    from memory_pipeline.access.logic import ALL_WORLDS, AccessError

    if all_worlds and world:
        refuse("--all-worlds or --world, not both")
    for w in world:  # '*' is how the store writes --all-worlds, never a world a --world may name
        if problem := validate_id(w):
            refuse(f"--world {w!r}: {problem}; --all-worlds grants every world")
    worlds = [ALL_WORLDS] if all_worlds else world
    try:
        made, token = tokens.create(open_store(), worlds, read_only=read_only, name=name)
    except AccessError as exc:
        refuse(str(exc))
    mode = "read-only" if read_only else "read and write"
    held = "every world" if all_worlds else "worlds: " + ", ".join(dict.fromkeys(world))
    err.print(f"token {escape(made)} ({mode}; {escape(held)})")
    err.print("it is shown once; clients send it as 'Authorization: Bearer <token>'")
    print(token, flush=True)


@app.command("list")
def list_(json_out: bool = typer.Option(False, "--json", help="One JSON object per token")) -> None:
    """Every token: name, worlds, read-only, created, revoked (never the token)."""
    import json

    from memory_pipeline.access import tokens
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.timeutil import zone

    infos = tokens.list_tokens(open_store())
    tz = zone(settings.timezone_name())
    if json_out:
        for info in infos:
            print(json.dumps(info.as_dict(tz)))  # the zone, to the second, as the table
        return
    table = Table(title=f"{len(infos)} token(s)")
    for col in ("name", "worlds", "read-only", "created", "revoked"):
        table.add_column(col)
    for i in infos:
        table.add_row(
            escape(i.name),
            escape(", ".join(i.worlds)),
            "yes" if i.read_only else "no",
            i.created_at.astimezone(tz).isoformat(timespec="seconds"),  # the zone, as every operator time
            i.revoked_at.astimezone(tz).isoformat(timespec="seconds") if i.revoked_at else "",
        )
    console.print(table)


@app.command("revoke")
def revoke(name: str = typer.Argument(..., help="The token's name (see tokens list)")) -> None:
    """Revoke a token: the server refuses it from its next request on (HTTP 401)."""
    from memory_pipeline.access import tokens
    from memory_pipeline.access.logic import AccessError
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.timeutil import zone

    try:
        info = tokens.revoke(open_store(), name, zone(settings.timezone_name()))
    except AccessError as exc:
        refuse(str(exc))
    console.print(f"revoked {escape(info.name)}")
