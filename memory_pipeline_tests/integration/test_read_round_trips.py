"""The read path costs one SQL statement and one Redis round trip per view (today's chunks in one
SELECT; the system rolls and every peer roll in one MGET), counted on the wire of a real
PostgreSQL and a real Redis, and serves what the cache holds key by key."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from memory_pipeline import domains
from memory_pipeline.events.ingest import ingest_file
from memory_pipeline.lib.cache import _PROCESS_CACHE, KVCache
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store, make_engine
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.temporal import chunks, logic, read, rolls, summaries
from memory_pipeline.temporal.chunks import view_chunks
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.context import TemporalContext
from memory_pipeline_tests.conftest import CST, conversation, cst
from memory_pipeline_tests.wire import CountingRedisConnection as CountingConnection
from memory_pipeline_tests.wire import PgWire, count_redis_sends

TODAY = date(2026, 7, 18)


def _counted(cache: KVCache) -> KVCache:
    """The cache's own client, its connection counting what it sends from now on."""
    count_redis_sends(cache._client, "read-round-trips")
    return cache


@pytest.fixture
def wire(store):
    """This test's schema through a relay that counts every query sent to PostgreSQL."""
    relay = PgWire()
    wired = Store(relay.url(store.url))
    yield relay, wired
    make_engine(wired.url).dispose()
    relay.close()


def _world(ctx, ingest) -> None:
    """w1: past days, months and a year (system rolls), and a busy morning today (peer rolls)."""
    ingest(
        conversation("w1", "a", cst(2026, 7, 2, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "b", cst(2026, 3, 3, 9), ["compost started", "compost warm"])
        + conversation("w1", "c", cst(2025, 5, 3, 9), ["greenhouse built", "greenhouse glass"])
        + conversation("w1", "v", cst(2026, 7, 18, 6, 2), ["viewer asks about tomatoes", "tomatoes answer"])
        + conversation("w1", "d", cst(2026, 7, 18, 6, 10), ["deploy pipeline broke", "rolled back deploy"])
        + conversation("w1", "e", cst(2026, 7, 18, 6, 40), ["marathon training plan", "interval pacing set"])
        + conversation("w1", "d", cst(2026, 7, 18, 7, 35), ["deploy fixed now", "great news on deploy"])
    )
    for d in (date(2026, 7, 2), date(2026, 3, 3), date(2025, 5, 3)):
        summaries.regenerate_day(ctx, d)
    summaries.regenerate_rollup(ctx, "month", date(2026, 3, 1))
    summaries.regenerate_rollup(ctx, "month", date(2025, 5, 1))
    summaries.regenerate_rollup(ctx, "year", date(2025, 1, 1))
    assert rolls.regenerate_system_rolls(ctx, TODAY).regenerated == 3
    chunks.run_tick(ctx, TODAY, cst(2026, 7, 18, 8, 0))
    assert rolls.warm_peer_rolls(ctx, TODAY, cst(2026, 7, 18, 8, 0)).warmed > 0


def test_one_view_is_one_redis_round_trip_and_serves_the_cached_rolls(ctx, store, ingest, redis_url, redis_client):
    _world(ctx, ingest)
    at = cst(2026, 7, 18, 8, 5)
    cache = _counted(KVCache(redis_url))
    view = read.temporal_view(store, cache, ctx.cfg, "w1", "v", at, CST)

    # One send on the wire, an MGET of the three system rolls and the three peer rolls, and the
    # server saw that MGET as this client's last command.
    assert len(CountingConnection.sent) == 1
    assert CountingConnection.sent[0].upper().startswith(b"*7\r\n$4\r\nMGET\r\n")
    client = next(c for c in redis_client.client_list() if c["name"] == "read-round-trips")
    assert client["cmd"] == "mget"

    # What it served is what the cache holds under each key (read one by one here).
    def cached(key):
        raw = redis_client.get(key)
        return json.loads(raw)["summary"] if raw else None

    sys_keys = {k: logic.sys_roll_key(ctx.cfg.redis_key_prefix, "w1", k, TODAY) for k in logic.SYS_ROLL_KINDS}
    assert view.rolls == {kind: cached(key) for kind, key in sys_keys.items()}
    assert all(view.rolls.values())
    assert view.system_block == logic.assemble_system_block(view.rolls, ctx.cfg.system_prompt_max_chars).text
    assert [m["cache"] for m in view.peer_messages] == ["hit", "hit", "hit"] and view.warmups_requested == 0
    peer_keys = [b.key for b in read._peer_buckets(store, ctx.cfg, "w1", "v", at, CST)]  # the viewer's fps
    assert [m["content"] for m in view.peer_messages] == [cached(k) for k in peer_keys]
    assert all(k.split(":")[:4] == ["anima", "temporal", "w1", "peer_roll"] for k in peer_keys)
    assert [m["at"] for m in view.peer_messages] == [
        "2026-07-18T06:30:00+08:00",
        "2026-07-18T07:00:00+08:00",
        "2026-07-18T08:00:00+08:00",
    ]

    # The separate entry points give the same answers (each one round trip of its own).
    block, texts = read.system_block(store, cache, ctx.cfg, "w1", at, CST)
    peers, warmups = read.peer_messages(store, cache, ctx.cfg, "w1", "v", at, CST)
    assert (block.text, texts, peers, warmups) == (view.system_block, view.rolls, view.peer_messages, 0)
    assert len(CountingConnection.sent) == 3


def test_a_view_with_redis_down_reads_the_in_process_cache(ctx, store, ingest, redis_url):
    """MGET failing is get_json's failure: the in-process fallback answers, the cache is degraded."""
    _world(ctx, ingest)
    down = KVCache("redis://127.0.0.1:1/0")
    for kind in logic.SYS_ROLL_KINDS:
        key = logic.sys_roll_key(ctx.cfg.redis_key_prefix, "w1", kind, TODAY)
        down.fallback.set(key, json.dumps({"summary": f"kept {kind}", "sources_fp": "x"}), 60)
    view = read.temporal_view(store, down, ctx.cfg, "w1", "v", cst(2026, 7, 18, 8, 5), CST)
    assert down.degraded and down.backend == "memory" and "MGET" in (down.last_error or "")
    assert view.rolls == {kind: f"kept {kind}" for kind in logic.SYS_ROLL_KINDS}


def test_one_view_is_one_sql_statement_on_the_wire_and_nothing_around_it(ctx, store, ingest, redis_url, wire):
    """No pre-ping, no BEGIN, no ROLLBACK: the chunk SELECT alone, on a pooled read-only
    connection; the view is the one the main engine's store shows."""
    relay, wired = wire
    _world(ctx, ingest)
    at = cst(2026, 7, 18, 8, 5)
    cache = _counted(KVCache(redis_url))
    first = read.temporal_view(wired, cache, ctx.cfg, "w1", "v", at, CST)  # opens the read connection
    mark, CountingConnection.sent[:] = relay.count(), []
    views = [read.temporal_view(wired, cache, ctx.cfg, "w1", "v", at, CST) for _ in range(5)]

    queries = relay.since(mark)
    assert len(queries) == 5 and len(CountingConnection.sent) == 5
    assert all(q.startswith("SELECT temporal_day_chunks.conversation_id") for q in queries), queries
    assert all(s.upper().startswith(b"*7\r\n$4\r\nMGET\r\n") for s in CountingConnection.sent)
    assert views == [first] * 5
    assert first == read.temporal_view(store, cache, ctx.cfg, "w1", "v", at, CST)
    assert [m["cache"] for m in first.peer_messages] == ["hit", "hit", "hit"] and first.system_block

    # The same SELECT on the main engine (pre-pinged, transactional) costs four round trips.
    with wired.connect() as conn:
        view_chunks(conn, "w1", TODAY, at)  # its connection opened first
    mark = relay.count()
    with wired.connect() as conn:
        on_main = view_chunks(conn, "w1", TODAY, at)
    sent = relay.since(mark)
    assert sent[:2] == ["SELECT 1", "BEGIN"] and sent[2].startswith("SELECT temporal_day_chunks") and len(sent) == 4
    assert sent[3] == "ROLLBACK"
    assert on_main == wired.read(lambda conn: view_chunks(conn, "w1", TODAY, at))


@pytest.fixture(params=["postgres_redis", "sqlite_in_process"])
def setup(request, tmp_path):
    """(context, ingest) on PostgreSQL with Redis, and on the embedded default: a SQLite file and
    the in-process cache."""
    if request.param == "postgres_redis":
        yield request.getfixturevalue("ctx"), request.getfixturevalue("ingest")
        return
    _PROCESS_CACHE.clear()
    lite = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    ensure_schema(lite, domains.version_locations())
    files = iter(range(1000))

    def ingest(events):
        path = Path(tmp_path, f"batch-{next(files)}.jsonl")
        path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
        return ingest_file(lite, path)

    yield TemporalContext(lite, LLMClient(lite), KVCache(None), TemporalSummaryConfig(), CST), ingest
    make_engine(lite.url).dispose()
    _PROCESS_CACHE.clear()


def test_a_view_shows_new_chunks_and_rolls_as_soon_as_they_are_written(setup):
    """Nothing the read path keeps between views can go stale: a new bucket's chunk, a late chunk
    of a bucket already shown, a warmed peer roll and a rebuilt system roll all show in the very
    next view."""
    ctx, ingest = setup
    _world(ctx, ingest)
    at = cst(2026, 7, 18, 8, 40)

    def view():
        return read.temporal_view(ctx.store, ctx.cache, ctx.cfg, "w1", "v", at, CST)

    def bucket(v, label):
        return next(m for m in v.peer_messages if m["bucket"] == label)

    before = view()
    assert [m["bucket"][11:16] for m in before.peer_messages] == ["06:00", "06:30", "07:30"]

    # A new bucket's chunk: the next view shows it at once (the chunk's text, a warm-up asked for).
    ingest(conversation("w1", "f", cst(2026, 7, 18, 8, 2), ["garden fence painted", "fence paint dry"]))
    assert chunks.run_tick(ctx, TODAY, cst(2026, 7, 18, 8, 30)).chunks_written == 1
    fresh = view()
    new = bucket(fresh, "2026-07-18T08:00+08:00")
    assert new["cache"] == "miss" and fresh.warmups_requested == 1
    chunk_text = ctx.store.read(lambda conn: view_chunks(conn, "w1", TODAY, at))[-1].summary
    assert new["content"] == logic.concat_peer_chunks([chunk_text], ctx.cfg.peer_roll_max_chars)
    assert fresh.peer_messages[:3] == before.peer_messages

    # Its roll warmed: the next view serves the roll the cache now holds.
    rolls.warm_peer_rolls(ctx, TODAY, cst(2026, 7, 18, 8, 30))
    warmed = view()
    assert bucket(warmed, "2026-07-18T08:00+08:00")["cache"] == "hit" and warmed.warmups_requested == 0
    key = read._peer_buckets(ctx.store, ctx.cfg, "w1", "v", at, CST)[-1].key
    assert bucket(warmed, "2026-07-18T08:00+08:00")["content"] == ctx.cache.get_json(key)["summary"]

    # A late message in the 06:30 bucket already shown: its chunk seq 1 changes that bucket at once.
    ingest(conversation("w1", "e", cst(2026, 7, 18, 6, 50), ["late pacing note added"]))
    assert chunks.run_tick(ctx, TODAY, cst(2026, 7, 18, 8, 30)).late_messages == 1
    late = view()
    assert bucket(late, "2026-07-18T06:30+08:00")["cache"] == "miss"
    assert bucket(late, "2026-07-18T06:30+08:00")["content"] != bucket(warmed, "2026-07-18T06:30+08:00")["content"]
    rolls.warm_peer_rolls(ctx, TODAY, cst(2026, 7, 18, 8, 30))
    assert [m["cache"] for m in view().peer_messages] == ["hit"] * 4

    # A new past day this month: the rebuilt past_days roll is in the next view's system block.
    ingest(conversation("w1", "g", cst(2026, 7, 10, 9), ["beekeeping course booked", "bees arrive soon"]))
    summaries.regenerate_day(ctx, date(2026, 7, 10))
    assert rolls.regenerate_system_rolls(ctx, TODAY).regenerated == 1
    rebuilt = view()
    assert rebuilt.rolls["past_days"] != before.rolls["past_days"]
    assert (
        rebuilt.rolls["past_days"]
        == ctx.cache.get_json(logic.sys_roll_key(ctx.cfg.redis_key_prefix, "w1", "past_days", TODAY))["summary"]
    )
    assert rebuilt.rolls["past_months"] == before.rolls["past_months"]
    assert rebuilt.system_block == logic.assemble_system_block(rebuilt.rolls, ctx.cfg.system_prompt_max_chars).text
