"""A key-value cache: Redis when reachable, an in-process dict otherwise, and a write-behind in
the store for what Redis could not take.

Seed 000 treats its rolls as such a cache ("Redis 缓存层 + 进程内回退"): losing Redis must never
fail the pipeline. But the in-process fallback ends with the process, so a write that could not
reach a configured Redis is also recorded in the store (``pending_cache_writes``, when the cache
is given the store) and written through, with what is left of its TTL, by ``flush_pending`` once
Redis answers again. ``degraded`` and ``pending_writes`` say whether and how often that happened.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from memory_pipeline.lib.jsontypes import JSONMapping, JSONObject
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store import pending as pending_store
from memory_pipeline.lib.store.tables import now_utc
from memory_pipeline.lib.text import redact

log = logging.getLogger(__name__)

_RETRY_AFTER_SECONDS = 30.0


def dumps(value: JSONMapping) -> str:
    """The one serialization of a cached value (so a written-back value is byte-identical)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


class InProcessCache:
    """A dict with per-key expiry, shared by everything in this process."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            expires, value = item
            if expires <= time.monotonic():
                del self._data[key]
                return None
            return value

    def set(self, key: str, value: str, ttl_seconds: int) -> None:
        with self._lock:
            self._data[key] = (time.monotonic() + ttl_seconds, value)

    def ttl(self, key: str) -> int | None:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            left = item[0] - time.monotonic()
            return int(left) if left > 0 else None

    def keys(self, prefix: str) -> list[str]:
        now = time.monotonic()
        with self._lock:
            return sorted(k for k, (exp, _) in self._data.items() if k.startswith(prefix) and exp > now)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_PROCESS_CACHE = InProcessCache()


def _loads(raw: str | None) -> JSONObject | None:
    """A cached value back (None for a missing key)."""
    # json.loads is untyped; what it reads here is what dumps wrote: a JSON object.
    return cast(JSONObject, json.loads(raw)) if raw else None


class KVCache:
    """JSON values under string keys with TTLs. ``backend`` tells which store answered last.

    With ``store``, a write that a configured Redis did not take is also kept in the store's
    write-behind for ``flush_pending``; a later direct write of the same key replaces it."""

    def __init__(
        self, redis_url: str | None = None, fallback: InProcessCache | None = None, store: Store | None = None
    ):
        self.redis_url = redis_url
        self.fallback = fallback or _PROCESS_CACHE
        self.store = store
        self._client = None
        self._down_until = 0.0
        self.backend = "memory"
        self.degraded = False  # a configured Redis did not answer while this cache was used
        self.pending_writes = 0  # writes this cache kept in the store for Redis
        self.unsaved_writes = 0  # writes Redis did not take and no store was given to keep them
        self.last_error: str | None = None
        self._pending_may_exist: bool | None = None
        if redis_url:
            import redis  # only where Redis is configured

            self._client = redis.Redis.from_url(
                redis_url, socket_connect_timeout=0.5, socket_timeout=1.0, decode_responses=True
            )
            self.backend = "redis"

    def refusal(self) -> str | None:
        """Ask a configured Redis once (PING): what it answered with an error (a database number
        past its ``databases``: the connection's SELECT is refused), else None. A Redis that does
        not answer refuses nothing: the cache uses its fallback, as on any call."""
        import redis

        client = self._redis()
        if client is None:
            return None
        try:
            client.ping()
        except redis.ResponseError as exc:
            password = urlsplit(self.redis_url).password if self.redis_url else None
            return redact(" ".join(str(exc).split()), [password])
        except Exception as exc:  # noqa: BLE001 - filtered in _failed
            self._failed("PING", exc)
        return None

    @property
    def redis_configured(self) -> bool:
        return self._client is not None

    def _redis(self) -> Any:
        if self._client is None:
            return None
        if time.monotonic() < self._down_until:
            self.degraded = True
            return None
        return self._client

    def _failed(self, op: str, exc: Exception) -> None:
        import redis

        if not isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            raise exc
        password = urlsplit(self.redis_url).password if self.redis_url else None
        self.last_error = redact(f"redis {op} failed: {type(exc).__name__}: {exc}", [password])
        log.warning("%s; using the in-process cache for %ss", self.last_error, _RETRY_AFTER_SECONDS)
        self._down_until = time.monotonic() + _RETRY_AFTER_SECONDS
        self.backend = "memory"
        self.degraded = True

    def get_json(self, key: str) -> JSONObject | None:
        raw = None
        client = self._redis()
        if client is not None:
            try:
                raw = client.get(key)
                self.backend = "redis"
            except Exception as exc:  # noqa: BLE001 - filtered in _failed
                self._failed("GET", exc)
                raw = self.fallback.get(key)
        else:
            raw = self.fallback.get(key)
        return _loads(raw)

    def get_many_json(self, keys: list[str]) -> dict[str, JSONObject | None]:
        """``get_json`` of every key in one Redis round trip (MGET); the in-process fallback and
        the failure handling are ``get_json``'s."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        raws: list[str | None]
        client = self._redis()
        if client is not None:
            try:
                raws = client.mget(keys)
                self.backend = "redis"
            except Exception as exc:  # noqa: BLE001 - filtered in _failed
                self._failed("MGET", exc)
                raws = [self.fallback.get(k) for k in keys]
        else:
            raws = [self.fallback.get(k) for k in keys]
        return {k: _loads(raw) for k, raw in zip(keys, raws, strict=True)}

    def set_json(self, key: str, value: JSONMapping, ttl_seconds: int) -> None:
        raw = dumps(value)
        client = self._redis()
        if client is not None:
            try:
                client.set(key, raw, ex=ttl_seconds)
                self.backend = "redis"
                self._supersede_pending(key)
                return
            except Exception as exc:  # noqa: BLE001
                self._failed("SET", exc)
        self.fallback.set(key, raw, ttl_seconds)
        if self._client is not None:
            self._keep_for_redis(key, value, ttl_seconds)

    def _keep_for_redis(self, key: str, value: JSONMapping, ttl_seconds: int) -> None:
        """Redis is configured but did not take this write: keep it for the write-back."""
        if self.store is None:
            self.unsaved_writes += 1
            log.warning("redis unreachable and no store for the write-behind: %s lives in this process only", key)
            return
        reason = self.last_error or "redis unreachable"
        pending_store.record(self.store, key, value, ttl_seconds, reason)
        self.pending_writes += 1
        self._pending_may_exist = True

    def _supersede_pending(self, key: str) -> None:
        """A direct write is newer than any pending one of the same key: drop that (checked for
        once per cache; a cache that never saw pending writes pays one query)."""
        if self.store is None:
            return
        if self._pending_may_exist is None:
            self._pending_may_exist = pending_store.exists(self.store)
        if self._pending_may_exist:
            pending_store.discard(self.store, key)

    def write_through(self, key: str, value: JSONMapping, ttl_ms: int) -> bool:
        """SET in Redis only (no fallback, no write-behind), expiring in ``ttl_ms``; False when
        Redis is not configured or did not answer (``last_error`` says why)."""
        client = self._redis()
        if client is None:
            return False
        try:
            client.set(key, dumps(value), px=ttl_ms)
        except Exception as exc:  # noqa: BLE001
            self._failed("SET", exc)
            return False
        self.backend = "redis"
        return True

    def ttl(self, key: str) -> int | None:
        client = self._redis()
        if client is not None:
            try:
                left = client.ttl(key)
                return left if left is not None and left >= 0 else None
            except Exception as exc:  # noqa: BLE001
                self._failed("TTL", exc)
        return self.fallback.ttl(key)

    def keys(self, prefix: str) -> list[str]:
        client = self._redis()
        if client is not None:
            try:
                return sorted(client.scan_iter(match=prefix + "*", count=500))
            except Exception as exc:  # noqa: BLE001
                self._failed("SCAN", exc)
        return self.fallback.keys(prefix)


@dataclass
class FlushResult:
    written: int = 0  # written through to Redis with what was left of their TTL
    expired: int = 0  # past their expiry: dropped, not written
    remaining: int = 0  # still pending (Redis did not answer, or the batch or time budget ran out)
    error: str | None = None  # why the write-back stopped early


def flush_pending(store: Store, cache: KVCache, *, limit: int = 2000, time_budget_seconds: float = 20.0) -> FlushResult:
    """Write the store's pending cache writes through to Redis, oldest first: each with the TTL
    left until its original expiry (so it expires when it would have), an expired one dropped.
    Stops at the first write Redis does not take (the rest waits for the next call), after
    ``limit`` writes or ``time_budget_seconds``. Idempotent: a row is deleted only after its
    SET, and only if no newer write of its key replaced it meanwhile."""
    result = FlushResult()
    if not cache.redis_configured:
        result.error = "no Redis configured"
    else:
        result.expired += pending_store.drop_expired(store)
        started = time.monotonic()
        for write in pending_store.oldest(store, limit):
            if time.monotonic() - started > time_budget_seconds:
                break
            left_ms = int((write.expires_at - now_utc()).total_seconds() * 1000)
            if left_ms <= 0:
                result.expired += pending_store.done(store, write)
                continue
            if not cache.write_through(write.key, write.value, left_ms):
                result.error = cache.last_error or "redis unreachable"
                break
            pending_store.done(store, write)
            result.written += 1
    result.remaining = pending_store.summary(store).count
    return result
