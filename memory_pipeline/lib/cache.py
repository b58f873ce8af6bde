"""A disposable key-value cache: Redis when reachable, an in-process dict otherwise.

Seed 000 treats its rolls as such a discardable cache ("Redis 缓存层 + 进程内回退"): losing
Redis must never fail the pipeline, it only costs warm-ups.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

_RETRY_AFTER_SECONDS = 30.0


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


class KVCache:
    """JSON values under string keys with TTLs. ``backend`` tells which store answered last."""

    def __init__(self, redis_url: str | None = None, fallback: InProcessCache | None = None):
        self.redis_url = redis_url
        self.fallback = fallback or _PROCESS_CACHE
        self._client = None
        self._down_until = 0.0
        self.backend = "memory"
        if redis_url:
            import redis  # only where Redis is configured

            self._client = redis.Redis.from_url(
                redis_url, socket_connect_timeout=0.5, socket_timeout=1.0, decode_responses=True
            )
            self.backend = "redis"

    def _redis(self) -> Any:
        if self._client is None or time.monotonic() < self._down_until:
            return None
        return self._client

    def _failed(self, op: str, exc: Exception) -> None:
        import redis

        if not isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            raise exc
        log.warning("redis %s failed (%s); using the in-process cache for %ss", op, exc, _RETRY_AFTER_SECONDS)
        self._down_until = time.monotonic() + _RETRY_AFTER_SECONDS
        self.backend = "memory"

    def get_json(self, key: str) -> dict[str, Any] | None:
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
        return json.loads(raw) if raw else None

    def set_json(self, key: str, value: dict[str, Any], ttl_seconds: int) -> None:
        raw = json.dumps(value, ensure_ascii=False, sort_keys=True)
        client = self._redis()
        if client is not None:
            try:
                client.set(key, raw, ex=ttl_seconds)
                self.backend = "redis"
                return
            except Exception as exc:  # noqa: BLE001
                self._failed("SET", exc)
        self.fallback.set(key, raw, ttl_seconds)

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
