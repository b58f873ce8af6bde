"""Asset checks: every figure audits down to its ledger lines, and nothing is in the future."""

import warnings
from datetime import datetime
from zoneinfo import ZoneInfo

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetRecordsFilter,
    MetadataValue,
    asset_check,
    build_sensor_for_freshness_checks,
    build_time_partition_freshness_checks,
)
from dagster._utils.warnings import SupersessionWarning

from memory_pipeline.defs._shared.partitions import TZ, cst_day, cst_day_open, cst_month, cst_year
from memory_pipeline.defs.temporal import assets
from memory_pipeline.lib.timeutil import local_date
from memory_pipeline.resources import MemoryConfigResource, MemoryStoreResource
from memory_pipeline.temporal import chunks, summaries


def _dates(context: AssetCheckExecutionContext, defn):
    tz = ZoneInfo(defn.timezone)
    return [local_date(defn.time_window_for_partition_key(k).start, tz) for k in context.partition_keys]


def _result(problems: list[str], checked: int) -> AssetCheckResult:
    return AssetCheckResult(
        passed=not problems,
        severity=AssetCheckSeverity.ERROR,
        metadata={
            "partitions_checked": checked,
            "problems": len(problems),
            "first_problems": MetadataValue.md("\n".join(f"- {p}" for p in problems[:20]) or "none"),
        },
    )


def _period_check(asset_def, window, defn):
    covers = ", including every eligible conversation with material (or says why not)" if window == "day" else ""

    @asset_check(
        asset=asset_def,
        partitions_def=defn,
        name=f"{window}_rows_have_sources_and_no_future",
        description=f"Every non-empty {window} row lists sources inside its window and world{covers}; "
        "no row is written for an open or future period.",
    )
    def _check(
        context: AssetCheckExecutionContext, memory_store: MemoryStoreResource, memory_config: MemoryConfigResource
    ) -> AssetCheckResult:
        store, tz = memory_store.store(), ZoneInfo(memory_config.timezone)
        days = _dates(context, defn)
        problems = [p for d in days for p in summaries.audit_period(store, window, d, tz)]
        return _result(problems, len(days))

    return _check


def _tick_seen(context: AssetCheckExecutionContext, key: str) -> tuple[datetime | None, datetime | None, bool]:
    """(tick_now, read_at, disabled) of the newest chunk materialization of partition ``key``."""
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=assets.temporal_day_chunks.key, asset_partitions=[key]), limit=1
    ).records
    if not records:
        return None, None, False
    meta = {k: v.value for k, v in records[0].asset_materialization.metadata.items()}

    def at(name):
        return datetime.fromisoformat(meta[name]) if meta.get(name) else None

    return at("tick_now"), at("read_at"), bool(meta.get("disabled"))


@asset_check(
    asset=assets.temporal_day_chunks,
    partitions_def=cst_day_open,
    name="chunks_have_sources_in_closed_buckets",
    description="Every chunk lists its messages and sits in a closed bucket of its own day; no message is "
    "in two chunks, and every material message of a bucket closed at the tick (ingested before it read) "
    "is in a chunk.",
)
def chunks_check(
    context: AssetCheckExecutionContext, memory_store: MemoryStoreResource, memory_config: MemoryConfigResource
) -> AssetCheckResult:
    store, tz = memory_store.store(), ZoneInfo(memory_config.timezone)
    days = _dates(context, cst_day_open)
    problems = []
    for key, d in zip(context.partition_keys, days, strict=True):
        tick_now, read_at, disabled = _tick_seen(context, key)
        problems += chunks.audit_chunks(store, d, tz, coverage=not disabled, tick_now=tick_now, ingested_before=read_at)
    return _result(problems, len(days))


temporal_checks = [
    chunks_check,
    _period_check(assets.temporal_day_summaries, "day", cst_day),
    _period_check(assets.temporal_month_summaries, "month", cst_month),
    _period_check(assets.temporal_year_summaries, "year", cst_year),
]

# Staleness is an explicit property: the newest closed window must be materialized by a deadline
# (the nightly runs start at 00:05 CST and a cascade may wait up to an hour for its children).
# Dagster now prefers FreshnessPolicy, which looks at the last materialization of any partition: a
# backfill of old days would hide a missed night. These checks look at the newest partition itself.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", category=SupersessionWarning)
    temporal_freshness_checks = [
        *build_time_partition_freshness_checks(
            assets=[assets.temporal_day_summaries], deadline_cron="0 2 * * *", timezone=TZ
        ),
        *build_time_partition_freshness_checks(
            assets=[assets.temporal_month_summaries], deadline_cron="0 3 1 * *", timezone=TZ
        ),
        *build_time_partition_freshness_checks(
            assets=[assets.temporal_year_summaries], deadline_cron="0 4 1 1 *", timezone=TZ
        ),
    ]
    temporal_freshness_sensor = build_sensor_for_freshness_checks(
        freshness_checks=temporal_freshness_checks, name="temporal_freshness_checks_sensor"
    )
