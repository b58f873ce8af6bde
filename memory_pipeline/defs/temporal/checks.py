"""Asset checks: every figure audits down to its ledger lines, and nothing is in the future."""

import warnings
from collections.abc import Iterator
from datetime import datetime
from zoneinfo import ZoneInfo

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckSeverity,
    AssetKey,
    AssetRecordsFilter,
    EventLogRecord,
    MetadataValue,
    Output,
    asset_check,
    build_sensor_for_freshness_checks,
    build_time_partition_freshness_checks,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)
from dagster._utils.warnings import SupersessionWarning

from memory_pipeline.defs._shared.partitions import TZ, cst_day, cst_day_open, cst_month, cst_year
from memory_pipeline.defs.temporal import assets
from memory_pipeline.lib.timeutil import local_date
from memory_pipeline.resources import MemoryConfigResource, MemoryStoreResource
from memory_pipeline.temporal import chunks, summaries
from memory_pipeline.temporal.logic import Audit

# A check over a range run (BackfillPolicy.single_run) is one step for many partitions. An
# AssetCheckResult carries no partition: Dagster would record it once, without a partition, and
# every planned partition would stay "skipped". So each check yields one AssetCheckEvaluation per
# partition of its run, tied to that partition's newest materialization (what the UI compares to
# decide whether a result is current), then the step's one output.
CheckEvents = Iterator[AssetCheckEvaluation | Output]


def _latest(context: AssetCheckExecutionContext, asset_key: AssetKey, key: str) -> EventLogRecord | None:
    """The newest materialization of partition ``key``: the one this evaluation audits."""
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=[key]), limit=1
    ).records
    return records[0] if records else None


def _evaluation(
    context: AssetCheckExecutionContext,
    asset_key: AssetKey,
    key: str,
    record: EventLogRecord | None,
    audit: Audit,
    unit: str,
) -> AssetCheckEvaluation:
    (spec,) = context.check_specs
    return AssetCheckEvaluation(
        asset_key=asset_key,
        check_name=spec.name,
        passed=not audit.problems,
        partition=key,
        severity=AssetCheckSeverity.ERROR,
        blocking=spec.blocking,
        target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
            storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp
        )
        if record
        else None,
        metadata={
            f"{unit}_audited": audit.audited,
            "problems": len(audit.problems),
            "first_problems": MetadataValue.md("\n".join(f"- {p}" for p in audit.problems[:20]) or "none"),
        },
    )


def _period_check(asset_def, window, defn):
    covers = ", including every eligible conversation with material (or says why not)" if window == "day" else ""
    tz_of_keys = ZoneInfo(defn.timezone)

    @asset_check(
        asset=asset_def,
        partitions_def=defn,
        name=f"{window}_rows_have_sources_and_no_future",
        description=f"Every non-empty {window} row lists sources inside its window and world{covers}; "
        "no row is written for an open or future period. One result per partition.",
    )
    def _check(
        context: AssetCheckExecutionContext, memory_store: MemoryStoreResource, memory_config: MemoryConfigResource
    ) -> CheckEvents:
        store, tz = memory_store.store(), ZoneInfo(memory_config.timezone)
        for key in context.partition_keys:
            period = local_date(defn.time_window_for_partition_key(key).start, tz_of_keys)
            audit = summaries.period_audit(store, window, period, tz)
            yield _evaluation(context, asset_def.key, key, _latest(context, asset_def.key, key), audit, "rows")
        yield Output(None)

    return _check


def _tick_seen(record: EventLogRecord | None) -> tuple[datetime | None, datetime | None, bool]:
    """(tick_now, read_at, disabled) of a chunk materialization (its metadata)."""
    if record is None or record.asset_materialization is None:
        return None, None, False
    meta = {k: v.value for k, v in record.asset_materialization.metadata.items()}

    def at(name):
        return datetime.fromisoformat(meta[name]) if meta.get(name) else None

    return at("tick_now"), at("read_at"), bool(meta.get("disabled"))


@asset_check(
    asset=assets.temporal_day_chunks,
    partitions_def=cst_day_open,
    name="chunks_have_sources_in_closed_buckets",
    description="Every chunk lists its messages and sits in a closed bucket of its own day; no message is "
    "in two chunks, and every material message of a bucket closed at the tick (ingested before it read) "
    "is in a chunk. One result per partition.",
)
def chunks_check(
    context: AssetCheckExecutionContext, memory_store: MemoryStoreResource, memory_config: MemoryConfigResource
) -> CheckEvents:
    store, tz = memory_store.store(), ZoneInfo(memory_config.timezone)
    asset_key, tz_of_keys = assets.temporal_day_chunks.key, ZoneInfo(cst_day_open.timezone)
    for key in context.partition_keys:
        day = local_date(cst_day_open.time_window_for_partition_key(key).start, tz_of_keys)
        record = _latest(context, asset_key, key)
        tick_now, read_at, disabled = _tick_seen(record)
        audit = chunks.chunk_audit(store, day, tz, coverage=not disabled, tick_now=tick_now, ingested_before=read_at)
        yield _evaluation(context, asset_key, key, record, audit, "chunks")
    yield Output(None)


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
