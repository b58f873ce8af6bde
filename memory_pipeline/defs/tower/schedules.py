"""Tower schedules (Asia/Shanghai): after a week or month closes, its windows, then (after the settle
period) its summaries; every night the closed day's summaries. The open day's windows and the
semantic tick are sensors (their intervals come from memory.tower)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster import (
    JobDefinition,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    TimeWindowPartitionsDefinition,
    schedule,
)

from memory_pipeline.defs._shared.partitions import TZ, cst_day, cst_month, cst_week
from memory_pipeline.defs.tower.jobs import (
    day_summaries_job,
    month_summaries_job,
    month_windows_job,
    week_summaries_job,
    week_windows_job,
)

if TYPE_CHECKING:  # not exported by dagster at run time
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


def _last_closed(
    name: str,
    job: JobDefinition | UnresolvedAssetJobDefinition,
    cron: str,
    defn: TimeWindowPartitionsDefinition,
    description: str,
) -> ScheduleDefinition:
    @schedule(name=name, job=job, cron_schedule=cron, execution_timezone=TZ, description=description)
    def _schedule(context: ScheduleEvaluationContext) -> list[RunRequest]:
        keys = defn.get_partition_keys(current_time=context.scheduled_execution_time)
        if not keys:
            return []
        return [RunRequest(run_key=f"{name}:{keys[-1]}", partition_key=keys[-1])]

    return _schedule


tower_day_summaries_schedule = _last_closed(
    "tower_day_summaries_schedule",
    day_summaries_job,
    "15 0 * * *",
    cst_day,
    "00:15 CST: yesterday's day summaries (worklog: one per project), after the settle period.",
)
tower_week_windows_schedule = _last_closed(
    "tower_week_windows_schedule", week_windows_job, "5 0 * * 1", cst_week, "Monday 00:05 CST: last week's windows."
)
tower_week_summaries_schedule = _last_closed(
    "tower_week_summaries_schedule",
    week_summaries_job,
    "30 0 * * 1",
    cst_week,
    "Monday 00:30 CST: last week's summaries, bottom-up from its day summaries.",
)
tower_month_windows_schedule = _last_closed(
    "tower_month_windows_schedule",
    month_windows_job,
    "5 0 1 * *",
    cst_month,
    "The 1st, 00:05 CST: last month's windows.",
)
tower_month_summaries_schedule = _last_closed(
    "tower_month_summaries_schedule",
    month_summaries_job,
    "30 0 1 * *",
    cst_month,
    "The 1st, 00:30 CST: last month's summaries (types whose cap is month).",
)

tower_schedules = [
    tower_day_summaries_schedule,
    tower_week_windows_schedule,
    tower_week_summaries_schedule,
    tower_month_windows_schedule,
    tower_month_summaries_schedule,
]
