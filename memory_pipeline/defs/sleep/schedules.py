"""The three nightly sleep schedules (seed 003: 0 2 / 0 3 / 0 4 * * *, CST). No manual "sleep now"
(仅 cron，不支持手动触发): backfill and rebuild are operator recovery actions.

Catch-up: a tick requests yesterday and every day after the newest one materialized (within 31
days) as ONE run over that range, so the run's days go oldest first (deep sleep of day N needs day
N-1's). run_key = stage + range: a range requested once is not requested again."""

from __future__ import annotations

from dagster import RunRequest, ScheduleEvaluationContext, schedule

from memory_pipeline.defs._shared.catchup import catchup_keys
from memory_pipeline.defs._shared.partitions import TZ, cst_day
from memory_pipeline.defs.sleep import assets
from memory_pipeline.defs.sleep.jobs import autobiography_job, deep_job, light_job

LOOKBACK = 31
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def _nightly(name: str, job, cron: str, asset_def, builtin: str, doc: str):
    @schedule(
        name=name,
        job=job,
        cron_schedule=cron,
        execution_timezone=TZ,
        description=f"{doc} Job id {builtin}.",
        tags={"memory_pipeline/builtin": builtin},
    )
    def _schedule(context: ScheduleEvaluationContext):
        closed = cst_day.get_partition_keys(current_time=context.scheduled_execution_time)
        done = context.instance.get_materialized_partitions(asset_def.key)
        keys = catchup_keys(closed, done, LOOKBACK)
        if not keys:
            return []
        tags = {"memory_pipeline/builtin": builtin}
        if len(keys) == 1:
            return [RunRequest(run_key=f"{name}:{keys[0]}", partition_key=keys[0], tags=tags)]
        tags |= {RANGE_START: keys[0], RANGE_END: keys[-1]}
        return [RunRequest(run_key=f"{name}:{keys[0]}..{keys[-1]}", tags=tags)]

    return _schedule


sleep_light_schedule = _nightly(
    "sleep_light_schedule",
    light_job,
    "0 2 * * *",
    assets.sleep_light_sleep,
    "builtin-light-sleep",
    "02:00 CST: light sleep of yesterday (and missed days, oldest first, in one run).",
)
sleep_deep_schedule = _nightly(
    "sleep_deep_schedule",
    deep_job,
    "0 3 * * *",
    assets.sleep_deep_sleep,
    "builtin-deep-sleep",
    "03:00 CST: deep sleep of yesterday (and missed days, oldest first, in one run).",
)
sleep_autobiography_schedule = _nightly(
    "sleep_autobiography_schedule",
    autobiography_job,
    "0 4 * * *",
    assets.sleep_autobiography,
    "builtin-self-autobiography",
    "04:00 CST: self autobiography of yesterday (and missed days, oldest first, in one run).",
)

sleep_schedules = [sleep_light_schedule, sleep_deep_schedule, sleep_autobiography_schedule]
