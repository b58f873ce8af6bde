"""Asset checks: every figure audits down to its ledger lines, and nothing is in the future."""

import warnings
from collections.abc import Iterator, Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetKey,
    AssetRecordsFilter,
    AssetsDefinition,
    EventLogRecord,
    MetadataValue,
    Output,
    TimeWindowPartitionsDefinition,
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
# decide whether a result is current), then the step's one output. The
# decorator's type says a single AssetCheckResult, hence the arg-type ignores below.
CheckEvents = Iterator[AssetCheckEvaluation | Output[None]]


# Partitions audited together (one set-based audit each): memory stays flat over a long range.
AUDIT_BATCH = 31


def _latest(context: AssetCheckExecutionContext, asset_key: AssetKey, key: str) -> EventLogRecord | None:
    """The newest materialization of partition ``key``: the one this evaluation audits."""
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=[key]), limit=1
    ).records
    return records[0] if records else None


def _latest_many(
    context: AssetCheckExecutionContext, asset_key: AssetKey, keys: list[str]
) -> dict[str, EventLogRecord | None]:
    """:func:`_latest` of many partitions: one query for the newest ``len(keys)`` records (normally
    this run's, one per key); a key not among them is looked up on its own."""
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=keys), limit=len(keys)
    ).records
    out: dict[str, EventLogRecord | None] = {}
    for r in records:  # newest first
        out.setdefault(r.partition_key or "", r)
    for key in keys:
        if key not in out:
            out[key] = _latest(context, asset_key, key)
    return out


def _batches(keys: Sequence[str]) -> list[list[str]]:
    return [list(keys[i : i + AUDIT_BATCH]) for i in range(0, len(keys), AUDIT_BATCH)]


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


def _period_check(
    asset_def: AssetsDefinition, window: str, defn: TimeWindowPartitionsDefinition
) -> AssetChecksDefinition:
    covers = ", including every eligible conversation with material (or says why not)" if window == "day" else ""
    tz_of_keys = ZoneInfo(defn.timezone)

    @asset_check(  # type: ignore[arg-type]
        asset=asset_def,
        partitions_def=defn,
        name=f"{window}_rows_have_sources_and_no_future",
        description=f"Every non-empty {window} row lists sources inside its window and world{covers}; "
        "no row is written for an open or future period. One result per partition.",
    )
    def _check(
        context: AssetCheckExecutionContext, memory_store: MemoryStoreResource, memory_config: MemoryConfigResource
    ) -> CheckEvents:
        store, tz = memory_store.store(), memory_config.zone()
        for keys in _batches(context.partition_keys):
            periods = {key: local_date(defn.time_window_for_partition_key(key).start, tz_of_keys) for key in keys}
            audits = summaries.period_audits(store, window, list(periods.values()), tz)
            latest = _latest_many(context, asset_def.key, keys)
            for key in keys:
                yield _evaluation(context, asset_def.key, key, latest[key], audits[periods[key]], "rows")
        yield Output(None)

    return _check


def _tick_seen(record: EventLogRecord | None) -> tuple[datetime | None, datetime | None, bool]:
    """(tick_now, read_at, disabled) of a chunk materialization (its metadata)."""
    if record is None or record.asset_materialization is None:
        return None, None, False
    meta = {k: v.value for k, v in record.asset_materialization.metadata.items()}

    def at(name: str) -> datetime | None:
        value = meta.get(name)
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None

    return at("tick_now"), at("read_at"), bool(meta.get("disabled"))


@asset_check(  # type: ignore[arg-type]
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
    store, tz = memory_store.store(), memory_config.zone()
    asset_key, tz_of_keys = assets.temporal_day_chunks.key, ZoneInfo(cst_day_open.timezone)
    for keys in _batches(context.partition_keys):
        latest = _latest_many(context, asset_key, keys)
        days = {key: local_date(cst_day_open.time_window_for_partition_key(key).start, tz_of_keys) for key in keys}
        seen = {days[key]: _tick_seen(latest[key]) for key in keys}
        audits = chunks.chunk_audits(
            store,
            {
                day: chunks.TickSeen(tick_now, read_at, coverage=not disabled)
                for day, (tick_now, read_at, disabled) in seen.items()
            },
            tz,
        )
        for key in keys:
            yield _evaluation(context, asset_key, key, latest[key], audits[days[key]], "chunks")
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
