"""The read path costs one Redis round trip per view (the system rolls and every peer roll in one
MGET), counted on the wire of a real Redis, and serves what the cache holds key by key."""

from __future__ import annotations

import json
from datetime import date

import redis

from memory_pipeline.lib.cache import KVCache
from memory_pipeline.temporal import chunks, logic, read, rolls, summaries
from memory_pipeline_tests.conftest import CST, conversation, cst

TODAY = date(2026, 7, 18)


class CountingConnection(redis.Connection):
    """A Redis connection that counts what it sends: one send is one round trip (a pipeline or an
    MGET sends once, however many keys)."""

    sent: list[bytes] = []

    def send_packed_command(self, command, check_health=True):
        parts = command if isinstance(command, list) else [command]
        CountingConnection.sent.append(b"".join(p if isinstance(p, bytes) else bytes(p) for p in parts))
        return super().send_packed_command(command, check_health)


def _counted(cache: KVCache) -> KVCache:
    """The cache's own client, its connection counting what it sends from now on (connected and
    named first, so the handshake is not counted)."""
    cache._client.connection_pool.connection_class = CountingConnection
    cache._client.connection_pool.connection_kwargs["client_name"] = "read-round-trips"
    assert cache._client.ping()
    CountingConnection.sent.clear()
    return cache


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
