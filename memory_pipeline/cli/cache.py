"""The cache's write-behind on the command line: what waits for Redis, and writing it back."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.table import Table

from memory_pipeline.cli.console import console, err, escape, open_cache, open_store

if TYPE_CHECKING:
    from memory_pipeline.lib.store import Store

app = typer.Typer()


def print_pending_cache(store: Store) -> int:
    """The "Pending cache writes" table of `status`: writes runs kept in the store while Redis was
    unreachable. Returns how many there are."""
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.store import pending
    from memory_pipeline.lib.timeutil import zone

    s = pending.summary(store)
    if not s.count:
        console.print("Pending cache writes (Redis write-back) — none")
        return 0
    tz = zone(settings.timezone_name())  # as every other time the CLI shows
    table = Table(title="Pending cache writes (Redis write-back)")
    for col in ("pending", "expired", "oldest", "newest", "last reason"):
        table.add_column(col, overflow="fold", no_wrap=col != "last reason")
    table.add_row(
        str(s.count),
        str(s.expired),
        s.oldest.astimezone(tz).isoformat(timespec="seconds") if s.oldest else "-",
        s.newest.astimezone(tz).isoformat(timespec="seconds") if s.newest else "-",
        escape(s.last_reason or ""),
    )
    console.print(table)
    console.print(
        "cache_writeback_sensor (or `memory-pipeline cache-writeback`) writes them to Redis once it answers; "
        "expired ones are dropped"
    )
    return s.count


def note_pending_cache(store: Store) -> None:
    """After a run that wrote rolls: say so when some of them wait for Redis (the run is still ok)."""
    from memory_pipeline.lib.store import pending

    n = pending.summary(store).count
    if n:
        err.print(
            f"[yellow]{n} cache write(s) wait in the store for Redis (unreachable during the run): "
            "`memory-pipeline cache-writeback` or cache_writeback_sensor writes them back[/]"
        )


@app.command("cache-writeback")
def cache_writeback() -> None:
    """Write the cache writes kept while Redis was unreachable back to REDIS_URL (what
    cache_writeback_sensor does every minute once turned on); expired ones are dropped."""
    from memory_pipeline.lib import settings
    from memory_pipeline.lib.cache import flush_pending

    store = open_store()
    if not settings.redis_url():
        err.print("[red]REDIS_URL is not set: nothing to write back to[/]")
        raise typer.Exit(2)
    cache = open_cache(store)  # a URL that is none, or one Redis refuses, is one line before any batch
    written = expired = 0
    while True:  # batches of 2,000 until nothing is left or Redis stops answering
        r = flush_pending(store, cache)
        written, expired = written + r.written, expired + r.expired
        if r.error or not r.remaining or not (r.written or r.expired):
            break
    console.print(f"wrote back {written} cache write(s) to Redis, dropped {expired} expired, {r.remaining} pending")
    if r.error:
        err.print(f"[red]{escape(r.error)}[/]")
        raise typer.Exit(1)
