"""What every seed-001 core function needs: the store, the one LLM client, the config, the zone
and the clock (injectable, so leases, backoff and the nightly rule are testable)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from zoneinfo import ZoneInfo

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.timeutil import local_date, utcnow
from memory_pipeline.objects.config import ObjectsConfig


@dataclass
class ObjectsContext:
    store: Store
    llm: LLMClient
    cfg: ObjectsConfig = field(default_factory=ObjectsConfig)
    tz: ZoneInfo = field(default_factory=lambda: ZoneInfo("Asia/Shanghai"))
    clock: Callable[[], datetime] = utcnow
    sleep: Callable[[float], None] | None = None  # backoff; None: time.sleep

    def now(self) -> datetime:
        return self.clock()

    def day_of(self, at: datetime) -> date:
        return local_date(at, self.tz)
