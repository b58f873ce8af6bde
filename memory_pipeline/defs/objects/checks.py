"""Asset checks of seed 001: every outcome traces to raw events (one result per partition), and
the current object state keeps the seed's vocabulary and limits."""

from collections.abc import Iterator
from datetime import date

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    AssetRecordsFilter,
    EventLogRecord,
    MetadataValue,
    Output,
    asset_check,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from memory_pipeline.defs._shared.partitions import cst_day_open
from memory_pipeline.defs.objects import assets
from memory_pipeline.defs.objects.resources import ObjectsResource
from memory_pipeline.objects import audit


def _latest(context: AssetCheckExecutionContext, asset_key: AssetKey, key: str) -> EventLogRecord | None:
    """The newest materialization of partition ``key``: the one this evaluation audits."""
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=[key]), limit=1
    ).records
    return records[0] if records else None


OUTCOMES_CHECK = "outcomes_trace_to_raw_events"
STATE_CHECK = "objects_keep_vocabulary_and_limits"


# One evaluation per partition, then the Output that ends the step: the decorator's type says a
# single AssetCheckResult, which a check over a range of partitions cannot return.
@asset_check(  # type: ignore[arg-type]
    asset=assets.objects_event_outcomes,
    partitions_def=cst_day_open,
    name=OUTCOMES_CHECK,
    description="Every linked event of the day has an object target whose evidence is a raw event, every "
    "archive_only event states its reason, every final event has its receipt, and no event of the day is "
    "in the archive queue while still in the hot timeline (an error otherwise). An oversized event (over "
    "32,000 characters) is never organized: the day's result is then a warning listing it. One result per "
    "partition.",
)
def outcomes_trace_to_raw_events(
    context: AssetCheckExecutionContext, objects: ObjectsResource
) -> Iterator[AssetCheckEvaluation | Output[None]]:
    store = objects.memory_store.store()
    key_asset = assets.objects_event_outcomes.key
    (spec,) = context.check_specs
    for key in context.partition_keys:
        day = date.fromisoformat(key)
        found = audit.day_audit(store, day)
        record = _latest(context, key_asset, key)
        yield AssetCheckEvaluation(
            asset_key=key_asset,
            check_name=spec.name,
            passed=not found.problems and not found.not_organized,
            partition=key,
            severity=AssetCheckSeverity.ERROR if found.problems else AssetCheckSeverity.WARN,
            target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
                storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp
            )
            if record
            else None,
            metadata={
                "events_audited": found.audited,
                "problems": len(found.problems),
                "first_problems": MetadataValue.md("\n".join(f"- {p}" for p in found.problems[:20]) or "none"),
                "not_organized": len(found.not_organized),
                "first_not_organized": MetadataValue.md(
                    "\n".join(f"- {p}" for p in found.not_organized[:20]) or "none"
                ),
            },
        )
    yield Output(None)


@asset_check(
    asset=assets.objects_archive,
    name=STATE_CHECK,
    description="Objects have a known type and status, summary <= 400 and body <= 16,000 characters; new "
    "relations use only the standard labels and member_of points to a project; no object holds a value "
    "that looks like a secret; every attachment points to a raw event.",
)
def objects_keep_vocabulary_and_limits(objects: ObjectsResource) -> AssetCheckResult:
    found = audit.state_audit(objects.memory_store.store())
    return AssetCheckResult(
        passed=not found.problems,
        metadata={
            "objects_audited": found.audited,
            "problems": len(found.problems),
            "first_problems": MetadataValue.md("\n".join(f"- {p}" for p in found.problems[:20]) or "none"),
        },
    )


objects_checks = [outcomes_trace_to_raw_events, objects_keep_vocabulary_and_limits]
