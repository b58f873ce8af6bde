"""Jobs and schedules (Asia/Shanghai).

Catch-up: Dagster's daemon evaluates only the latest missed tick of a schedule built on asset
jobs, so the nightly schedules below request, besides their newest closed partition, every
partition newer than the last materialized one (lib.catchup): a daemon that was down for four
nights creates four runs on its first tick back."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from dagster import (
    AssetsDefinition,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    TimeWindowPartitionsDefinition,
    schedule,
)

from memory_pipeline.defs._shared.catchup import catchup_keys
from memory_pipeline.defs._shared.partitions import TZ, cst_day, cst_month, cst_year
from memory_pipeline.defs.temporal import assets
from memory_pipeline.defs.temporal.jobs import day_job, month_job, tick_job, year_job

if TYPE_CHECKING:  # not exported by dagster at run time
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


@schedule(
    job=tick_job,
    cron_schedule="*/30 * * * *",
    execution_timezone=TZ,
    name="temporal_tick_schedule",
    description="Every 30 minutes (CST): chunk the conversations' closed half-hour buckets, then warm "
    "the peer rolls of those buckets.",
)
def temporal_tick_schedule(context: ScheduleEvaluationContext) -> RunRequest:
    """At hh:00/hh:30 the bucket that just closed belongs to the day of (tick - 1 minute): the
    00:00 tick finishes yesterday's last bucket."""
    at = context.scheduled_execution_time
    day = (at - timedelta(minutes=1)).astimezone(ZoneInfo(TZ)).strftime("%Y-%m-%d")
    return RunRequest(run_key=f"tick-{at.isoformat()}", partition_key=day)


def _nightly(
    name: str,
    job: UnresolvedAssetJobDefinition,
    cron: str,
    partitions_def: TimeWindowPartitionsDefinition,
    asset_def: AssetsDefinition,
    lookback: int,
    doc: str,
    tags: dict[str, str] | None = None,
) -> ScheduleDefinition:
    @schedule(name=name, job=job, cron_schedule=cron, execution_timezone=TZ, description=doc)
    def _schedule(context: ScheduleEvaluationContext) -> list[RunRequest]:
        closed = partitions_def.get_partition_keys(current_time=context.scheduled_execution_time)
        done = context.instance.get_materialized_partitions(asset_def.key)
        # run_key = partition: a partition requested once by this schedule is not requested again.
        return [
            RunRequest(run_key=f"{name}:{key}", partition_key=key, tags=tags or {})
            for key in catchup_keys(closed, done, lookback)
        ]

    return _schedule


# 00:05 CST: yesterday's day rows; on the 1st last month's; on 1 January last year's. Month and
# year runs of these schedules are tagged as the nightly cascade: they wait (retry) until their
# child rows exist, so the cascade follows the day write of the same night. No other run waits.
CASCADE = {assets.CASCADE_TAG: assets.NIGHTLY}
temporal_day_schedule = _nightly(
    "temporal_day_schedule",
    day_job,
    "5 0 * * *",
    cst_day,
    assets.temporal_day_summaries,
    31,
    "Yesterday's per-world day rows (and days missed while the daemon was down, up to 31).",
)
temporal_month_schedule = _nightly(
    "temporal_month_schedule",
    month_job,
    "5 0 1 * *",
    cst_month,
    assets.temporal_month_summaries,
    12,
    "Cascade on the 1st: last month's rows (and missed months, up to 12); waits for the day rows.",
    CASCADE,
)
temporal_year_schedule = _nightly(
    "temporal_year_schedule",
    year_job,
    "5 0 1 1 *",
    cst_year,
    assets.temporal_year_summaries,
    3,
    "Cascade on 1 January: last year's rows (and missed years, up to 3); waits for the month rows.",
    CASCADE,
)

temporal_schedules = [
    temporal_tick_schedule,
    temporal_day_schedule,
    temporal_month_schedule,
    temporal_year_schedule,
]
