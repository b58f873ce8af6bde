"""Sleep asset checks: one evaluation per partition of the run (as the temporal checks do)."""

from collections.abc import Iterator
from zoneinfo import ZoneInfo

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetKey,
    AssetRecordsFilter,
    MetadataValue,
    Output,
    asset_check,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from memory_pipeline.defs._shared.partitions import cst_day
from memory_pipeline.defs.sleep import assets
from memory_pipeline.defs.sleep.resources import SleepResource
from memory_pipeline.lib.timeutil import local_date
from memory_pipeline.resources import MemoryStoreResource
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.reports import Audit, stage_audit


def _check(asset_key: AssetKey, stage: Stage, name: str, description: str) -> AssetChecksDefinition:
    # One evaluation per partition, then the Output that ends the step: the decorator's type says a
    # single AssetCheckResult, which a check over a range of partitions cannot return.
    @asset_check(asset=asset_key, partitions_def=cst_day, name=name, description=description)  # type: ignore[arg-type]
    def _c(
        context: AssetCheckExecutionContext, memory_store: MemoryStoreResource, sleep: SleepResource
    ) -> Iterator[AssetCheckEvaluation | Output[None]]:
        store, tz = memory_store.store(), ZoneInfo(cst_day.timezone)
        disabled = not sleep.cfg().enabled  # nothing ran on purpose: nothing to audit
        (spec,) = context.check_specs
        for key in context.partition_keys:
            day = local_date(cst_day.time_window_for_partition_key(key).start, tz)
            audit = Audit() if disabled else stage_audit(store, stage, day)
            records = context.instance.fetch_materializations(
                AssetRecordsFilter(asset_key=asset_key, asset_partitions=[key]), limit=1
            ).records
            record = records[0] if records else None
            yield AssetCheckEvaluation(
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
                    "disabled": disabled,
                    "worlds_audited": audit.audited,
                    "problems": len(audit.problems),
                    "first_problems": MetadataValue.md("\n".join(f"- {p}" for p in audit.problems[:20]) or "none"),
                },
            )
        yield Output(None)

    return _c


sleep_checks = [
    _check(
        assets.LIGHT_KEY,
        Stage.LIGHT,
        "light_sleep_state_recorded",
        "The day has light sleep's state record, done for every world it processed. One result per partition.",
    ),
    _check(
        assets.DEEP_KEY,
        Stage.DEEP,
        "deep_sleep_snapshot_current_and_nothing_deleted",
        "The day's deep sleep is done and not stale (an earlier day rebuilt after it makes it stale), no "
        "world was refused (over 300k characters: named with its size), and every memory of its snapshot "
        "still exists (sleep stages deprecate or merge, never delete). One result per partition.",
    ),
    _check(
        assets.AUTO_KEY,
        Stage.AUTOBIOGRAPHY,
        "autobiography_summary_refreshed",
        "Every world the day's autobiography run saw has self_blocks.autobiography_summary written by "
        "autobiography_cron (phase B runs always). One result per partition.",
    ),
]
