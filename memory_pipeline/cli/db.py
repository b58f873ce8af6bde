"""`memory-pipeline db`: the schema of the operational store, managed by migrations."""

from __future__ import annotations

import typer

from memory_pipeline.cli.console import answering_store, console, migrate

app = typer.Typer(no_args_is_help=True)


@app.command()
def upgrade() -> None:
    """Bring the schema of MEMORY_DATABASE_URL to the newest revision (safe to run concurrently).
    A search_path naming no schema is one line, as for every command that opens the store."""
    from memory_pipeline import domains
    from memory_pipeline.lib.store.migrate import upgrade as run_upgrade

    store = answering_store()
    before, after = migrate(store, lambda: run_upgrade(store, domains.version_locations()))
    if before == after:
        console.print(f"schema already at {after} ({store.dialect})")
    else:
        console.print(f"schema upgraded from {before or 'empty'} to {after} ({store.dialect})")


@app.command()
def current() -> None:
    """Print the schema revision of the store and the newest one, and the calendar zone it records."""
    from sqlalchemy import inspect

    from memory_pipeline import domains
    from memory_pipeline.lib.store.calendar import recorded_zone
    from memory_pipeline.lib.store.migrate import current as current_rev
    from memory_pipeline.lib.store.migrate import head
    from memory_pipeline.lib.store.tables import store_settings

    store = answering_store()
    now, newest = current_rev(store), head(domains.version_locations())
    console.print(
        f"{store.dialect}: at {now or 'empty'}, head {newest}" + ("" if now == newest else " (run: db upgrade)")
    )
    zone = recorded_zone(store) if inspect(store.engine).has_table(store_settings.name) else None
    console.print(
        f"calendar zone: {zone.zone} (recorded {zone.recorded_at:%Y-%m-%d %H:%M} UTC)"
        if zone
        else "calendar zone: none recorded yet (the first command, server or run to open the store records MEMORY_TIMEZONE)"
    )
