"""The platform's one automation: cache writes kept in the store while Redis was unreachable are
written back to Redis once it answers again."""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from memory_pipeline.lib.cache import flush_pending
from memory_pipeline.resources import CacheResource, MemoryStoreResource


# The sensor does the write-back itself rather than requesting a run: it materializes no asset
# (Redis keys are a cache, not an asset), it is a bounded batch of SETs (at most 2,000 writes or
# 20 s per tick, well inside the sensor timeout) that is idempotent and resumable (a row is deleted
# only after its SET), and a run per tick would cost a run worker and fill the run history with
# bookkeeping. The tick's message in the UI says what it wrote, dropped and left.
@sensor(
    name="cache_writeback_sensor",
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.STOPPED,
    description="Writes back to Redis the cache writes (system and peer rolls) that runs kept in the store's "
    "pending_cache_writes while Redis was unreachable, each with the TTL left until its original expiry; "
    "expired ones are dropped, never written. Does the small write itself (no run); the tick says what it did.",
)
def cache_writeback_sensor(
    context: SensorEvaluationContext, memory_store: MemoryStoreResource, kv_cache: CacheResource
) -> SkipReason:
    store = memory_store.store()
    result = flush_pending(store, kv_cache.cache(store))
    if not (result.written or result.expired or result.remaining):
        return SkipReason("no pending cache writes")
    done = f"wrote back {result.written} cache write(s) to Redis, dropped {result.expired} expired"
    if result.error:
        context.log.warning(f"{done}; {result.remaining} still pending: {result.error}")
        return SkipReason(f"{done}; {result.remaining} still pending ({result.error})")
    context.log.info(f"{done}; {result.remaining} left")
    return SkipReason(f"{done}; {result.remaining} left for the next tick" if result.remaining else done)
