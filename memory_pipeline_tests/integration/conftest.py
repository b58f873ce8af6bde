"""The deployed stack for the end-to-end tests (test_webserver_e2e, test_ui_browser): one webserver +
daemon for the package, started when the first of them asks, stopped after the package's last test
(the package scope), so the rest of the suite does not run beside them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from dagster import DagsterInstance

from memory_pipeline import domains
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline.lib.store import Store, make_engine
from memory_pipeline.lib.store.migrate import ensure_schema, forget_checked
from memory_pipeline_tests.conftest import REDIS_URL, conversation, cst, event, forget_schemas, fresh_schema
from memory_pipeline_tests.dagster_stack import (
    DagsterStack,
    create_schema,
    drop_schema,
    production_home,
    stack_env,
)

STACK_KEY = pytest.StashKey["DagsterStack"]()


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_url(request, tmp_path):
    """A store URL with nothing in it yet, of each kind: a fresh PostgreSQL schema, a new SQLite file."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'memory.sqlite'}"
        return
    with fresh_schema("m") as url:
        yield url
    forget_schemas()


DAY_ASSET = "temporal_day_summaries"
DAY_CHECK = "day_rows_have_sources_and_no_future"
# Today a range run records one day-check evaluation without a partition, and the partitions of
# the range show as skipped. Once it records one AssetCheckEvaluation per partition, set this to
# True: test_webserver_e2e and test_ui_browser then ask for one passed evaluation per partition.
STRICT_PER_PARTITION_CHECKS = True
# The backfilled range; the seed's rows for it are spelled out in test_webserver_e2e.
E2E_DAYS = ["2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05"]


def e2e_events() -> list[dict]:
    """w1 talks on the 2nd and 4th; w2 appears on the 3rd and on the 5th has tool output only."""
    return (
        conversation("w1", "a", cst(2026, 3, 2, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "b", cst(2026, 3, 4, 21), ["compost turned", "compost warm"])
        + conversation("w2", "c", cst(2026, 3, 3, 8), ["marathon pacing", "marathon intervals"])
        + [event("w2", "d", "tool", '{"ok": true}', cst(2026, 3, 5, 10))]
    )


@dataclass
class Deployed:
    stack: DagsterStack
    instance: DagsterInstance  # the same instance (PostgreSQL) as the webserver's and the daemon's
    store: Store  # the memory store the runs write
    backfill_id: str
    backfill: dict[str, Any]  # partitionBackfillOrError, final state
    seconds: dict[str, float]  # how long each stage took


@pytest.fixture(scope="package")
def dagster_stack(request, tmp_path_factory) -> Iterator[tuple[DagsterStack, DagsterInstance, Store]]:
    """Webserver + daemon on the production dagster.yaml (DAGSTER_PG_URL at a fresh schema), the
    memory store at another fresh schema with a small data set ingested, Redis at TEST_REDIS_URL."""
    home = production_home(tmp_path_factory.mktemp("dagster_home"))
    dagster_schema, dagster_url = create_schema("e2e_dagster")
    memory_schema, memory_url = create_schema("e2e_memory")
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    env = stack_env(home, dagster_url, memory_url, REDIS_URL)
    stack = DagsterStack(home, env)
    request.config.stash[STACK_KEY] = stack
    instance = store = None
    mp = pytest.MonkeyPatch()
    try:
        # The instance is created here first, so its tables exist before two processes race to.
        mp.setenv("DAGSTER_PG_URL", env["DAGSTER_PG_URL"])  # dagster.yaml reads it
        instance = DagsterInstance.from_config(str(home))
        store = Store(memory_url)
        ensure_schema(store, domains.version_locations())
        batch = home / "e2e-events.jsonl"
        batch.write_text("".join(json.dumps(e) + "\n" for e in e2e_events()), encoding="utf-8")
        report = ingest_file(store, batch)  # the real ingest path, as the conftest `ingest` fixture
        assert report.inserted == len(e2e_events()), report
        stack.start("webserver")  # the daemon starts once the backfill is requested: see `deployed`
        yield stack, instance, store
    finally:
        left = stack.stop()
        if instance is not None:
            instance.dispose()
        mp.undo()
        make_engine(memory_url).dispose()
        make_engine.cache_clear()
        forget_checked()
        client.flushdb()
        client.close()
        drop_schema(dagster_schema)
        drop_schema(memory_schema)
    assert not left, f"processes of the stack still alive after SIGKILL: {left}"


@pytest.fixture(scope="package")
def deployed(dagster_stack) -> Deployed:
    """The day range backfilled through GraphQL, as the UI's Materialize button does, to its end.

    The backfill daemon looks at requested backfills every 30 s (a constant in Dagster), on its
    first pass right at start: requested before the daemon starts, the backfill is submitted at
    once and seen completed on the next pass, rather than up to three passes (90 s) later."""
    stack, instance, store = dagster_stack
    t0 = time.monotonic()
    stack.wait_webserver(timeout=300)
    t1 = time.monotonic()
    backfill_id = stack.launch_backfill(DAY_ASSET, E2E_DAYS)
    stack.start("daemon")
    backfill = stack.wait_backfill(backfill_id, timeout=600)
    t2 = time.monotonic()
    return Deployed(stack, instance, store, backfill_id, backfill, {"webserver": t1 - t0, "backfill": t2 - t1})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test that used the stack gets the tails of the webserver and daemon logs."""
    report = yield
    stack = item.config.stash.get(STACK_KEY, None)
    if report.failed and stack is not None and {"dagster_stack", "deployed"} & set(item.fixturenames):
        report.sections.append(("dagster webserver / daemon logs", stack.log_tails()))
    return report


def artifacts_dir(name: str) -> Path:
    """memory_pipeline_tests/artifacts/<name> (git-ignored): what a person looks at after a run."""
    path = REPO_ROOT / "memory_pipeline_tests" / "artifacts" / name
    path.mkdir(parents=True, exist_ok=True)
    return path
