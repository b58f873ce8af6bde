"""Fixtures on the real services: a PostgreSQL schema per test (the worker's migrated one, emptied
after each test that uses the store; else a fresh one) and Redis (TEST_REDIS_URL, database 15
by default; under pytest-xdist each worker has a database of its own, see ``worker_redis_url``)."""

from __future__ import annotations

import json
import os
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit
from zoneinfo import ZoneInfo

import pytest
import redis
from sqlalchemy import Engine, create_engine, text

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
warnings.filterwarnings("ignore", module="dagster")

from dagster._core.storage.defs_state.base import set_defs_state_storage  # noqa: E402

from memory_pipeline import domains  # noqa: E402
from memory_pipeline.events.ingest import event_line, ingest_file  # noqa: E402
from memory_pipeline.lib.cache import _PROCESS_CACHE, KVCache  # noqa: E402
from memory_pipeline.lib.llm import LLMClient  # noqa: E402
from memory_pipeline.lib.llm.client import forget_breakers  # noqa: E402
from memory_pipeline.lib.store import Store, make_engine  # noqa: E402
from memory_pipeline.lib.store.migrate import VERSION_TABLE, ensure_schema, forget_checked  # noqa: E402
from memory_pipeline.temporal.config import TemporalSummaryConfig  # noqa: E402
from memory_pipeline.temporal.context import TemporalContext  # noqa: E402
from memory_pipeline_tests.dagster_stack import ADMIN_PG_URL, create_schema, drop_schema  # noqa: E402

PG_URL = ADMIN_PG_URL  # TEST_DATABASE_URL, read once (dagster_stack)
# The Celery broker of test_distributed: a Redis database of its own, never a roll cache's.
CELERY_BROKER_URL = os.environ.get("TEST_CELERY_BROKER_URL", "redis://127.0.0.1:6379/9")
REDIS_DATABASES = 16  # Redis's default `databases`
CST = ZoneInfo("Asia/Shanghai")


def redis_db(url: str) -> int:
    path = urlsplit(url).path.strip("/")
    return int(path) if path else 0


def worker_redis_url(base: str, worker: str | None, reserved: tuple[str, ...] = (CELERY_BROKER_URL,)) -> str:
    """The Redis URL of one pytest-xdist worker: tests flush their database, so workers never share
    one. gw0 (and a run without workers) has ``base``'s database; each next worker the next one
    down, wrapping from 1 to 15, never database 0 nor a ``reserved`` URL's (the Celery broker's):
    from 15, gw0..gw3 are 15, 14, 13, 12; from 10, they are 10, 8, 7, 6."""
    index = int(worker.removeprefix("gw")) if worker else 0
    taken = {0} | {redis_db(url) for url in reserved}
    free = [db for db in range(REDIS_DATABASES - 1, 0, -1) if db not in taken]  # 15 down to 1
    first = redis_db(base)
    if first not in free:
        raise ValueError(f"TEST_REDIS_URL {base}: database {first} is 0 or reserved ({sorted(taken - {0})})")
    if index >= len(free):
        raise ValueError(f"worker {worker}: only {len(free)} Redis databases are free for the workers")
    start = free.index(first)
    db = free[(start + index) % len(free)]
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=f"/{db}"))


REDIS_URL = worker_redis_url(
    os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15"), os.environ.get("PYTEST_XDIST_WORKER")
)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the end-to-end tests first: the longest (minutes, mostly waiting on a
    deployment) start at once and the short ones fill the workers around them, rather than one
    starting last and the run waiting on it alone. Every worker orders the same way."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("e2e") is None)


def cst(*args) -> datetime:
    return datetime(*args, tzinfo=CST)


@contextmanager
def fresh_schema(prefix: str = "t") -> Iterator[str]:
    """A fresh PostgreSQL schema: the URL whose connections use it; its engine disposed and the
    schema dropped after. The process-wide caches are the caller's to clear (``forget_schemas``):
    a test may hold two schemas, and clearing for the first dropped would orphan the other's engine."""
    schema, url = create_schema(prefix)
    try:
        yield url
    finally:
        make_engine(url).dispose()
        drop_schema(schema)


def forget_schemas() -> None:
    """Forget every cached engine and migration check (their schemas are gone)."""
    make_engine.cache_clear()
    forget_checked()


# What a migrated schema is made of: its relations (tables, indexes, sequences, views), columns,
# defaults, constraints, triggers, functions and types, by their catalog rows, and its migration
# revision. Any DDL in the schema (a constraint added, a column altered, a Dagster storage made in
# it) adds or changes a row here; oids and numbers only, so reading it costs milliseconds.
_SHAPE = text(
    f"""
    WITH ns AS (SELECT to_regnamespace(current_schema()) AS oid),
    rel AS (SELECT c.oid, c.relname, c.relkind, c.relnatts FROM pg_class c JOIN ns ON c.relnamespace = ns.oid)
    SELECT md5(string_agg(d, ' ' ORDER BY d)) FROM (
      SELECT concat_ws(',', 'rel', oid, relname, relkind, relnatts) FROM rel
      UNION ALL
      SELECT concat_ws(',', 'col', attrelid, attnum, attname, atttypid, atttypmod, attnotnull, atthasdef)
        FROM pg_attribute JOIN rel ON rel.oid = attrelid WHERE attnum > 0 AND NOT attisdropped
      UNION ALL
      SELECT concat_ws(',', 'def', d.oid) FROM pg_attrdef d JOIN rel ON rel.oid = d.adrelid
      UNION ALL
      SELECT concat_ws(',', 'con', c.oid) FROM pg_constraint c JOIN ns ON c.connamespace = ns.oid
      UNION ALL
      SELECT concat_ws(',', 'trg', t.oid) FROM pg_trigger t JOIN rel ON rel.oid = t.tgrelid
      UNION ALL
      SELECT concat_ws(',', 'fn', p.oid) FROM pg_proc p JOIN ns ON p.pronamespace = ns.oid
      UNION ALL
      SELECT concat_ws(',', 'type', t.oid) FROM pg_type t JOIN ns ON t.typnamespace = ns.oid
      UNION ALL
      SELECT concat_ws(',', 'revision', version_num) FROM {VERSION_TABLE}
    ) shape (d)
    """
)


class _MigratedSchema:
    """One migrated schema per worker, lent to each test that uses the store and emptied after it:
    making and migrating a schema (30 revisions) takes about 0.45 s, 0.3 s of it CPU; emptying one
    about 0.08 s. A test that changed its shape (``_SHAPE``) gets it dropped, and the next test a
    freshly migrated one. Each loan has a URL of its own (``fallback_application_name``), so
    whatever a process keeps per store URL (engines, migration checks, the recall search's event
    cache) is never shared between two tests, as with a schema per test."""

    def __init__(self) -> None:
        self.schema: str | None = None
        self.engine: Engine | None = None  # the lender's own connection, on the schema
        self.shape = ""
        self.probe = ""  # which tables hold rows, which sequences were used

    @contextmanager
    def lend(self) -> Iterator[str]:
        if self.schema is None:
            self._migrate()
        url = f"{PG_URL}?options=-csearch_path%3D{self.schema}&fallback_application_name=t_{uuid.uuid4().hex[:12]}"
        try:
            yield url
        finally:
            make_engine(url).dispose()
            self._empty()

    def _migrate(self) -> None:
        self.schema, base = create_schema("s")
        ensure_schema(Store(base), domains.version_locations())
        make_engine(base).dispose()
        self.engine = create_engine(base)
        with self.engine.begin() as conn:
            conn.execute(text("SET LOCAL jit = off"))
            self.shape = conn.execute(_SHAPE).scalar_one()
            relations = conn.execute(
                text(
                    "SELECT relname, relkind FROM pg_class WHERE relnamespace = to_regnamespace(current_schema())"
                    " AND relkind IN ('r', 'S') AND relname <> :v ORDER BY relname"
                ),
                {"v": VERSION_TABLE},
            ).all()
        self.probe = " UNION ALL ".join(
            f"SELECT 'r', '\"{name}\"' WHERE EXISTS (SELECT 1 FROM \"{name}\")"
            if kind == "r"
            else f"SELECT 'S', '\"{name}\"' WHERE (SELECT is_called FROM \"{name}\")"
            for name, kind in relations
        )

    def _empty(self) -> None:
        """Empty every table but the revision's and restart every sequence used; or drop the
        schema when its shape changed. An error here (a lock a test left held past the timeout)
        fails the test's teardown, and the next test gets a new schema."""
        assert self.engine is not None
        try:
            with self.engine.begin() as conn:
                conn.execute(text("SET LOCAL lock_timeout = '60s'"))
                # The catalogs' statistics, swollen by the suite's schemas made and dropped, price
                # this query high enough for PostgreSQL to compile it (0.35 s, for a 45 ms query).
                conn.execute(text("SET LOCAL jit = off"))
                same = conn.execute(_SHAPE).scalar_one() == self.shape
                if same:
                    used = conn.execute(text(self.probe)).all()
                    tables = [name for kind, name in used if kind == "r"]
                    if tables:
                        conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
                    for name in (name for kind, name in used if kind == "S"):
                        conn.execute(text(f"ALTER SEQUENCE {name} RESTART"))
        except BaseException:
            self.drop()
            raise
        if not same:
            self.drop()

    def drop(self) -> None:
        if self.schema is None:
            return
        schema, self.schema = self.schema, None
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None
        drop_schema(schema)


@pytest.fixture(scope="session")
def _migrated_schema() -> Iterator[_MigratedSchema]:
    lender = _MigratedSchema()
    yield lender
    lender.drop()


@pytest.fixture
def pg_url(request):
    """The test's PostgreSQL schema: the worker's migrated one, emptied, for a test that uses the
    store; a fresh empty one for a test that only takes the URL (it may migrate it itself, or test
    what an unmigrated schema does)."""
    if "store" in request.fixturenames:
        with request.getfixturevalue("_migrated_schema").lend() as url:
            yield url
    else:
        with fresh_schema() as url:
            yield url
    forget_schemas()


@pytest.fixture
def store(pg_url) -> Store:
    store = Store(pg_url)
    ensure_schema(store, domains.version_locations())
    return store


@pytest.fixture(scope="session", autouse=True)
def _session_data_dir(tmp_path_factory) -> Iterator[Path]:
    """Every default state path (sleep round logs, the objects projection, a default SQLite store or
    Dagster instance: lib/settings.data_dir) under a folder of this session (one per xdist worker:
    tmp_path_factory's base is per worker), never the checkout's data/. Set in os.environ, so the
    subprocesses a test starts inherit it; a test that sets MEMORY_DATA_DIR itself still wins."""
    path = tmp_path_factory.mktemp("memory_data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMORY_DATA_DIR", str(path))
        yield path


@pytest.fixture(autouse=True)
def _no_defs_state_storage_of_a_gone_instance():
    """Each test starts with no current defs state storage, as a new process does. Entering a
    DagsterInstance makes its storage current (a ContextVar) until the instance is exited; one left
    current by an instance that was never exited (or exited in another context) and then
    garbage-collected makes every later Definitions load in the worker fail with "Attempted to
    resolve undefined DagsterInstance weakref" (seen in CI: two tests on one worker). Which test
    leaves it so is not known: the instance context managers the suite uses all reset it."""
    with set_defs_state_storage(None):
        yield


@pytest.fixture(autouse=True)
def _closed_llm_breakers():
    """Each test starts with every provider breaker closed, as a new process does."""
    forget_breakers()
    yield
    forget_breakers()


@pytest.fixture
def redis_url():
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    _PROCESS_CACHE.clear()
    yield REDIS_URL
    client.flushdb()
    client.close()


@pytest.fixture
def redis_client(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def cfg() -> TemporalSummaryConfig:
    return TemporalSummaryConfig()


@pytest.fixture
def ctx(store, redis_url, cfg) -> TemporalContext:
    return TemporalContext(store, LLMClient(store), KVCache(redis_url), cfg, CST)


def event(
    world: str,
    conv: str,
    role: str,
    content: str,
    at: datetime,
    *,
    platform: str = "local",
    debug: bool = False,
    tool_calls=None,
    mid: str | None = None,
) -> dict:
    mid = mid or f"{conv}-{at:%Y%m%dT%H%M%S.%f%z}-{role}-{abs(hash(content)) % 10**8}"  # ids have no ':'
    return event_line(mid, world, conv, role, content, at, platform=platform, debug=debug, tool_calls=tool_calls)


@pytest.fixture
def ingest(store, tmp_path):
    """Write events as a JSONL file and ingest it through the real path."""
    counter = {"n": 0}

    def _ingest(events: list[dict], **kwargs):
        counter["n"] += 1
        path = Path(tmp_path) / f"batch-{counter['n']}.jsonl"
        path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
        return ingest_file(store, path, **kwargs)

    return _ingest


def conversation(
    world: str, conv: str, start: datetime, texts: list[str], step=timedelta(minutes=3), **kw
) -> list[dict]:
    """Alternating user/assistant turns from ``start``."""
    return [
        event(world, conv, "user" if i % 2 == 0 else "assistant", t, start + step * i, **kw)
        for i, t in enumerate(texts)
    ]


def wait_until_blocked_on_a_lock(admin, application_name: str, tries: int = 200) -> bool:
    """Poll (every 50 ms) until a session of ``application_name`` waits on a lock: the moment a
    concurrency test commits the transaction that session is blocked by."""
    for _ in range(tries):
        with admin.connect() as conn:
            waiting = conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :a AND wait_event_type = 'Lock'"),
                {"a": application_name},
            ).scalar_one()
        if waiting:
            return True
        time.sleep(0.05)
    return False


def locomo_doc(sessions: int = 2, turns: int = 3) -> dict:
    """A tiny LoCoMo-shaped conversation (the real files' keys; turns alternate speaker_a / speaker_b)."""
    doc: dict = {"speaker_a": "Caroline", "speaker_b": "Melanie", "qa": [{"question": "ignored"}]}
    for n in range(1, sessions + 1):
        doc[f"session_{n}_date_time"] = f"1:56 pm on {7 + n} May, 2023"
        doc[f"session_{n}"] = [
            {"speaker": "Caroline" if i % 2 == 0 else "Melanie", "dia_id": f"D{n}:{i + 1}", "text": f"turn {i + 1}"}
            for i in range(turns)
        ]
        doc[f"session_{n}_summary"] = "ignored"
    doc[f"session_{sessions + 1}_date_time"] = "10:00 am on 1 June, 2023"  # a date without a session: ignored
    return doc


def write_locomo(folder: Path, doc, name: str = "26.json") -> Path:
    """Write a LoCoMo file: a document as JSON, or text / bytes as they are."""
    path = Path(folder) / name
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path
