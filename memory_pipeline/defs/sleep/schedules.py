"""The three nightly sleep schedules (seed 003: 0 2 / 0 3 / 0 4 * * *, CST). No manual "sleep now"
(仅 cron，不支持手动触发): backfill and rebuild are operator recovery actions.

Catch-up (seed: 宕机后下次对应时刻补跑即可). A tick requests yesterday and every day after the
newest one materialized (within 31 days) as ONE run over that range, so the run's days go oldest
first (deep sleep of day N needs day N-1's). When the daemon comes back after missed nights it
evaluates only the newest missed tick of each schedule (these schedules have no partition set, so
Dagster does not replay the older ones): that tick requests all the missed days. Deep sleep requests only the days whose light sleep is
materialized, the autobiography only those whose deep sleep is (oldest first, up to the first day
still waiting): a stage never starts a day before the stage it needs has finished it, whichever
schedule the daemon evaluates first; the days still waiting are requested at the stage's next
tick. A tick skips while a run of its job is still queued or in progress (it would overlap).
run_key = stage + range: a range requested once is not requested again."""

from __future__ import annotations

from dagster import (
    AssetKey,
    DagsterRunStatus,
    RunRequest,
    RunsFilter,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from memory_pipeline.defs._shared.catchup import catchup_keys
from memory_pipeline.defs._shared.partitions import TZ, cst_day
from memory_pipeline.defs.sleep import assets
from memory_pipeline.defs.sleep.jobs import autobiography_job, deep_job, light_job

LOOKBACK = 31
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
UNFINISHED = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]


def _nightly(name: str, job, cron: str, asset_def, needs: AssetKey | None, builtin: str, doc: str):
    @schedule(
        name=name,
        job=job,
        cron_schedule=cron,
        execution_timezone=TZ,
        description=f"{doc} Job id {builtin}.",
        tags={"memory_pipeline/builtin": builtin},
    )
    def _schedule(context: ScheduleEvaluationContext):
        at = context.scheduled_execution_time
        busy = context.instance.get_runs(RunsFilter(job_name=job.name, statuses=UNFINISHED), limit=1)
        if busy:
            return SkipReason(
                f"run {busy[0].run_id} of {job.name} is not finished: the next tick requests what is left"
            )
        closed = cst_day.get_partition_keys(current_time=at)
        done = context.instance.get_materialized_partitions(asset_def.key)
        keys = catchup_keys(closed, done, LOOKBACK)
        if needs is not None and keys:
            ready = context.instance.get_materialized_partitions(needs)
            waiting = next((i for i, k in enumerate(keys) if k not in ready), None)
            if waiting is not None:
                if waiting == 0:
                    return SkipReason(
                        f"{keys[0]} waits for {needs.to_user_string()} of that day; the next tick requests it"
                    )
                keys = keys[:waiting]
        if not keys:
            return SkipReason("nothing to do: every closed day is materialized")
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
    None,
    "builtin-light-sleep",
    "02:00 CST: light sleep of yesterday (and missed days, oldest first, in one run).",
)
sleep_deep_schedule = _nightly(
    "sleep_deep_schedule",
    deep_job,
    "0 3 * * *",
    assets.sleep_deep_sleep,
    assets.sleep_light_sleep.key,
    "builtin-deep-sleep",
    "03:00 CST: deep sleep of yesterday (and missed days, oldest first, in one run), of the days whose "
    "light sleep is done.",
)
sleep_autobiography_schedule = _nightly(
    "sleep_autobiography_schedule",
    autobiography_job,
    "0 4 * * *",
    assets.sleep_autobiography,
    assets.sleep_deep_sleep.key,
    "builtin-self-autobiography",
    "04:00 CST: self autobiography of yesterday (and missed days, oldest first, in one run), of the days "
    "whose deep sleep is done.",
)

sleep_schedules = [sleep_light_schedule, sleep_deep_schedule, sleep_autobiography_schedule]
