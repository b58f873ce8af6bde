"""A store's calendar zone (MEMORY_TIMEZONE) is recorded at its first open, and every later open under
another zone is refused in one line naming both zones, before anything is read or written: on
PostgreSQL and SQLite, and by the store resource of every Dagster step (the console script's
refusal: test_cli_settings_errors.py)."""

from __future__ import annotations

import multiprocessing

import pytest

from memory_pipeline import domains
from memory_pipeline.lib.settings import ConfigError
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.calendar import check_calendar_zone, recorded_zone
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.resources import MemoryConfigResource, MemoryStoreResource

SHANGHAI, BERLIN = "Asia/Shanghai", "Europe/Berlin"


def _migrated(url: str) -> Store:
    store = Store(url)
    ensure_schema(store, domains.version_locations())
    return store


def test_the_first_open_records_its_zone_and_an_open_under_another_is_refused(empty_url):
    store = _migrated(empty_url)
    assert recorded_zone(store) is None
    check_calendar_zone(store, SHANGHAI)
    first = recorded_zone(store)
    assert first is not None and first.zone == SHANGHAI
    check_calendar_zone(store, SHANGHAI)  # the same zone again: nothing to say
    with pytest.raises(ConfigError) as refused:
        check_calendar_zone(store, BERLIN)
    said = str(refused.value)
    assert "\n" not in said
    assert said.startswith(f"MEMORY_TIMEZONE='{BERLIN}', but this store's calendar is '{SHANGHAI}' (recorded ")
    assert f"Set MEMORY_TIMEZONE={SHANGHAI}, or use a new store for {BERLIN}" in said
    assert recorded_zone(store) == first  # the refusal wrote nothing over it
    with pytest.raises(ConfigError):  # refused again: a refusal is not remembered as checked
        check_calendar_zone(store, BERLIN)


def test_the_store_resource_of_a_step_refuses_another_zone(empty_url, monkeypatch):
    resource = MemoryStoreResource(database_url=empty_url)
    monkeypatch.setenv("MEMORY_TIMEZONE", SHANGHAI)
    store = resource.store()
    assert recorded_zone(store) is not None
    monkeypatch.setenv("MEMORY_TIMEZONE", BERLIN)
    with pytest.raises(ConfigError, match=f"but this store's calendar is '{SHANGHAI}'"):
        resource.store()


def test_a_run_configured_with_another_zone_than_its_partitions_is_refused(monkeypatch):
    """The partitions are cut in MEMORY_TIMEZONE when the code location loads; memory_config's
    timezone (which the launchpad can set) was each domain's zone for its rows: a run set to another
    zone cut its rows in a calendar its partition keys are not of."""
    monkeypatch.delenv("MEMORY_TIMEZONE", raising=False)
    assert MemoryConfigResource().zone().key == SHANGHAI
    with pytest.raises(ConfigError) as refused:
        MemoryConfigResource(timezone=BERLIN).zone()
    assert str(refused.value) == (
        f"memory_config.timezone '{BERLIN}' is not MEMORY_TIMEZONE='{SHANGHAI}', the zone the partitions are cut in: "
        "set MEMORY_TIMEZONE where the code location runs instead"
    )
    monkeypatch.setenv("MEMORY_TIMEZONE", BERLIN)
    assert MemoryConfigResource(timezone=BERLIN).zone().key == BERLIN


def _open_under(url: str, zone: str, start, queue) -> None:
    try:
        store = Store(url)
        start.wait(60)
        check_calendar_zone(store, zone)
        queue.put((zone, "ok"))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put((zone, f"{type(exc).__name__}: {exc}"))


def test_two_processes_opening_a_new_store_under_two_zones_at_once_agree_on_one(empty_url):
    """Both find no zone recorded and both insert theirs: the first insert wins, the other process
    reads the winner's row and is refused, so the store never holds two calendars."""
    store = _migrated(empty_url)
    ctx = multiprocessing.get_context("spawn")
    start, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_open_under, args=(empty_url, zone, start, queue)) for zone in (SHANGHAI, BERLIN)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    results = dict(queue.get(timeout=5) for _ in procs)
    recorded = recorded_zone(store)
    assert recorded is not None
    other = BERLIN if recorded.zone == SHANGHAI else SHANGHAI
    assert results[recorded.zone] == "ok"
    assert results[other].startswith(f"ConfigError: MEMORY_TIMEZONE='{other}', but this store's calendar is")
