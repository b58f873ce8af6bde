"""Redis going down mid-run: the rolls written meanwhile are kept in the store
(pending_cache_writes), the runs say so (cache_degraded, cache_writes_pending), `status` lists
them, and the write-back (cache_writeback_sensor, `memory-pipeline cache-writeback`) puts them in
Redis once it is back, with the TTL left until their original expiry, so `read` finds them.

Redis here is a throwaway redis-server of the test's own on a free port, stopped and restarted;
the shared Redis is only used as the test's database (TEST_REDIS_URL, the worker's own under xdist)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis as redis_lib
from dagster import build_sensor_context, instance_for_test
from sqlalchemy import select, text, update
from typer.testing import CliRunner

from memory_pipeline import operations
from memory_pipeline.cli import app
from memory_pipeline.defs.temporal import assets
from memory_pipeline.lib.cache import KVCache, flush_pending
from memory_pipeline.lib.store import pending
from memory_pipeline.lib.store.tables import now_utc, pending_cache_writes
from memory_pipeline.resources import CacheResource, MemoryStoreResource
from memory_pipeline.temporal import logic, read
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline_tests.conftest import CST, conversation, cst
from memory_pipeline_tests.integration.test_dagster import make_defs

runner = CliRunner()


class ThrowawayRedis:
    """redis-server on a free loopback port, no persistence: a restart comes back empty."""

    def __init__(self, folder):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.folder = folder
        self.proc: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis_lib.Redis:
        return redis_lib.Redis(port=self.port, decode_responses=True)

    def start(self) -> ThrowawayRedis:
        argv = [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.folder)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        client = self.client()
        for _ in range(200):
            try:
                client.ping()
                return self
            except redis_lib.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("the throwaway redis-server did not start")

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            self.client().shutdown(nosave=True)
        except redis_lib.ConnectionError:
            pass  # SHUTDOWN closes the connection it came on
        try:
            self.proc.wait(timeout=10)
        finally:
            self.proc.kill()
            self.proc = None


@pytest.fixture
def throwaway_redis(tmp_path):
    server = ThrowawayRedis(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def instance():
    with instance_for_test() as inst:
        yield inst


@pytest.fixture
def two_days(ingest):
    """w1 on 2026-01-01 (a day row for past_days) and three conversations in the 09:00 bucket of
    2026-01-02 (peer rolls for the viewer 'a')."""
    ingest(
        conversation("w1", "y", cst(2026, 1, 1, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "a", cst(2026, 1, 2, 9, 1), ["viewer asks about compost", "compost answer"])
        + conversation("w1", "b", cst(2026, 1, 2, 9, 5), ["deploy pipeline broke", "rolled back deploy"])
        + conversation("w1", "c", cst(2026, 1, 2, 9, 9), ["marathon interval plan", "pacing set"])
    )


AS_OF = "2026-01-02T10:00:00+08:00"
AT = cst(2026, 1, 2, 10)


def _pending_rows(store) -> dict[str, dict]:
    with store.connect() as conn:
        return {r["key"]: dict(r) for r in conn.execute(select(pending_cache_writes)).mappings()}


def _metadata(instance, asset, partition=None) -> dict:
    records = instance.fetch_materializations(asset.key, limit=10).records
    m = [r.asset_materialization for r in records if r.asset_materialization.partition == partition][0]
    return {k: v.value for k, v in m.metadata.items()}


def test_rolls_written_while_redis_was_down_are_written_back_and_read(
    pg_url, store, instance, throwaway_redis, two_days, monkeypatch, tmp_path
):
    server = throwaway_redis.start()
    defs = make_defs(pg_url, server.url)
    assert operations.materialize("day", "2026-01-01", "2026-01-01", instance=instance, defs=defs).success
    assert operations.materialize(
        "chunks", "2026-01-02", "2026-01-02", as_of=AS_OF, instance=instance, defs=defs
    ).success

    server.stop()  # Redis goes down mid-pipeline: the rolls come next
    peer = operations.materialize("peer_rolls", "2026-01-02", "2026-01-02", as_of=AS_OF, instance=instance, defs=defs)
    assert peer.success  # the run is still ok: nothing is lost ...
    sys_rolls = operations.run_system_rolls(AS_OF, instance=instance, defs=defs)
    assert sys_rolls.success
    # ... and it says what happened
    peer_meta = _metadata(instance, assets.temporal_peer_rolls, "2026-01-02")
    assert peer_meta["cache_degraded"] is True and peer_meta["cache_writes_pending"] == peer_meta["warmed"] > 0
    sys_meta = _metadata(instance, assets.temporal_system_rolls)
    assert sys_meta["cache_degraded"] is True and sys_meta["cache_writes_pending"] == sys_meta["regenerated"] == 1
    rows = _pending_rows(store)
    assert len(rows) == peer_meta["warmed"] + 1
    past_days = logic.sys_roll_key("anima:temporal", "w1", "past_days", AT.date())
    assert past_days in rows and rows[past_days]["ttl_seconds"] == logic.SYS_ROLL_TTL_SECONDS["past_days"]
    assert all("redis" in r["reason"] and "refused" in r["reason"].lower() for r in rows.values())

    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert "Pending cache writes (Redis write-back)" in status.output and "cache_writeback_sensor" in status.output

    # Redis is back, empty (no persistence). The outage lasted an hour as far as the rows go, and
    # one roll outlived its expiry meanwhile.
    server.start()
    assert server.client().dbsize() == 0
    cfg = TemporalSummaryConfig()
    before = read.temporal_view(store, KVCache(server.url), cfg, "w1", "a", AT, CST)
    assert before.rolls["past_days"] is None and all(m["cache"] == "miss" for m in before.peer_messages)
    expired_key = next(k for k in rows if k != past_days)
    with store.begin() as conn:
        conn.execute(
            text(
                "UPDATE pending_cache_writes SET expires_at = expires_at - interval '1 hour', "
                "created_at = created_at - interval '1 hour'"
            )
        )
        conn.execute(
            update(pending_cache_writes)
            .where(pending_cache_writes.c.key == expired_key)
            .values(expires_at=now_utc() - timedelta(seconds=1))
        )
    due = {k: r for k, r in _pending_rows(store).items() if k != expired_key}

    sensor = defs.get_sensor_def("cache_writeback_sensor")
    ctx = build_sensor_context(
        instance=instance,
        resources={
            "memory_store": MemoryStoreResource(database_url=pg_url),
            "kv_cache": CacheResource(redis_url=server.url),
        },
        repository_def=defs.get_repository_def(),
    )
    tick = sensor.evaluate_tick(ctx)
    assert tick.run_requests == []
    assert f"wrote back {len(due)} cache write(s) to Redis, dropped 1 expired" in tick.skip_message
    client = server.client()
    assert sorted(client.keys("*")) == sorted(due)
    assert _pending_rows(store) == {}
    for key, row in due.items():
        left_ms = (row["expires_at"] - now_utc()).total_seconds() * 1000
        assert abs(client.pttl(key) - left_ms) < 5000, key  # the original expiry, not a fresh TTL
        assert client.pttl(key) < (row["ttl_seconds"] - 3500) * 1000
    assert sensor.evaluate_tick(ctx).skip_message == "no pending cache writes"

    # `read` finds the rolls: the system block, and the peer roll of every viewer but the one
    # whose roll expired during the outage (a miss, concatenated and requested for a warm-up).
    views = {v: read.temporal_view(store, KVCache(server.url), cfg, "w1", v, AT, CST) for v in ("a", "b", "c", None)}
    assert all(v.rolls["past_days"] and v.system_block for v in views.values())
    caches = sorted(m["cache"] for v in views.values() for m in v.peer_messages)
    assert caches == ["hit", "hit", "hit", "miss"]


def test_write_behind_core(store, redis_url, redis_client, monkeypatch, tmp_path):
    """Recorded only when a configured Redis does not answer; a newer direct write supersedes the
    pending one; the write-back waits while Redis is down; a newer pending write is never lost."""
    down = KVCache("redis://:s3cret-pass@127.0.0.1:1/0", store=store)
    down.set_json("k:one", {"summary": "one"}, 600)
    down.set_json("k:two", {"summary": "two"}, 600)
    assert (down.degraded, down.pending_writes, down.backend) == (True, 2, "memory")
    reasons = {r["reason"] for r in _pending_rows(store).values()}
    assert reasons and all("s3cret" not in r for r in reasons)
    # No Redis configured: the in-process cache is the cache, nothing is pending.
    local = KVCache(None, store=store)
    local.set_json("k:local", {"summary": "x"}, 600)
    assert (local.degraded, local.pending_writes) == (False, 0) and set(_pending_rows(store)) == {"k:one", "k:two"}
    # Without a store the write is counted as held in this process only.
    bare = KVCache("redis://127.0.0.1:1/0")
    bare.set_json("k:bare", {"summary": "x"}, 600)
    assert (bare.degraded, bare.pending_writes, bare.unsaved_writes) == (True, 0, 1)

    still_down = flush_pending(store, KVCache("redis://127.0.0.1:1/0", store=store))
    assert (still_down.written, still_down.remaining) == (0, 2) and "refused" in still_down.error.lower()

    up = KVCache(redis_url, store=store)
    up.set_json("k:two", {"summary": "two, newer"}, 600)  # Redis took a newer value directly
    assert set(_pending_rows(store)) == {"k:one"}
    assert up.degraded is False and up.pending_writes == 0

    # A newer pending write of a key replaces the older one; a write-back that read the older
    # one does not delete the newer.
    (old,) = pending.oldest(store, 10)
    pending.record(store, "k:one", {"summary": "one, newer"}, 600, "test", now=old.created_at + timedelta(seconds=1))
    assert pending.done(store, old) == 0
    result = flush_pending(store, KVCache(redis_url, store=store))
    assert (result.written, result.expired, result.remaining, result.error) == (1, 0, 0, None)
    assert up.get_json("k:one") == {"summary": "one, newer"} and up.get_json("k:two") == {"summary": "two, newer"}
    assert 590 <= redis_client.ttl("k:one") <= 601  # recorded 1 s after the first write, for 600 s

    # The command line does the same write-back.
    down.set_json("k:three", {"summary": "three"}, 600)
    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    monkeypatch.setenv("REDIS_URL", redis_url)
    result = runner.invoke(app, ["cache-writeback"])
    assert (
        result.exit_code == 0 and "wrote back 1 cache write(s) to Redis, dropped 0 expired, 0 pending" in result.output
    )
    assert up.get_json("k:three") == {"summary": "three"}
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    down.set_json("k:four", {"summary": "four"}, 600)
    result = runner.invoke(app, ["cache-writeback"])
    assert result.exit_code == 1 and "1 pending" in result.output


def test_the_status_table_shows_the_pending_writes_times_in_the_configured_zone(store, capsys):
    """An operator's times: whole seconds in the configured zone (the table printed UTC)."""
    from memory_pipeline.cli.cache import print_pending_cache

    at = datetime(2026, 1, 5, 2, 0, 7, 250_000, tzinfo=UTC)
    pending.record(store, "k:old", {"summary": "old"}, 600, "test", now=at)
    pending.record(store, "k:new", {"summary": "new"}, 600, "test", now=at + timedelta(minutes=1))
    assert print_pending_cache(store) == 2
    out = capsys.readouterr().out
    assert "2026-01-05T10:00:07+08:00" in out and "2026-01-05T10:01:07+08:00" in out, out
