"""The three nightly sleep schedules (seed 003: 0 2 / 0 3 / 0 4 * * *, CST). No manual "sleep now"
(仅 cron，不支持手动触发): backfill and rebuild are operator recovery actions.

Every tick asks the store's day records (sleep/order.py) what is due and not done: the places
after the newest done one (within 31 days) up to its own stage of yesterday. On a normal night that
is its own stage of yesterday (02:00 light sleep, 03:00 deep sleep, 04:00 the autobiography), one
run. Catch-up (seed: 宕机后下次对应时刻补跑即可): when the daemon comes back after missed nights it
evaluates only the newest missed tick of each schedule (these schedules have no partition set, so
Dagster does not replay the older ones); the first one evaluated requests ONE run of the nights job
over the missed days, day by day, each day's light, deep and autobiography before the next day's,
up to the last day whose three stages are due at that tick; what is left of the newest day goes at
the next tick. A stale place (an earlier one ran again: late data, a forced re-run, another model)
is due like a missing one, so the nightly ticks also finish a rebuild, in order. A tick skips while
any sleep run is unfinished (it would overlap). run_key = schedule + range + stages + the newest
done place: the same request is not made twice."""

from __future__ import annotations

from datetime import date

from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from memory_pipeline.defs._shared.partitions import TZ, cst_day
from memory_pipeline.defs.sleep.assets import KEYS
from memory_pipeline.defs.sleep.jobs import SLEEP_JOB_NAMES, nights_job
from memory_pipeline.defs.sleep.resources import SleepResource
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.order import LABELS, Position, Request, catch_up
from memory_pipeline.sleep.runs import day_statuses

LOOKBACK = 31
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
UNFINISHED = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]


def busy(instance: DagsterInstance) -> str | None:
    """Why a new sleep run would overlap one not finished (None: no such run)."""
    for job in SLEEP_JOB_NAMES:
        runs = instance.get_runs(RunsFilter(job_name=job, statuses=UNFINISHED), limit=1)
        if runs:
            return f"run {runs[0].run_id} of {job} is not finished: the next tick requests what is left"
    return None


def run_request(key: str, req: Request, tags: dict[str, str]) -> RunRequest:
    """The nights job over the request's days, selecting its stages."""
    selection = [KEYS[s] for s in req.stages]
    if req.first == req.last:
        return RunRequest(run_key=key, partition_key=req.first.isoformat(), tags=tags, asset_selection=selection)
    tags = tags | {RANGE_START: req.first.isoformat(), RANGE_END: req.last.isoformat()}
    return RunRequest(run_key=key, tags=tags, asset_selection=selection)


def describe(req: Request) -> str:
    stages = ", ".join(LABELS[s] for s in req.stages)
    return f"{req.first.isoformat()}..{req.last.isoformat()} ({stages})"


def _nightly(name: str, stage: Stage, cron: str, builtin: str, doc: str) -> ScheduleDefinition:
    @schedule(
        name=name,
        job=nights_job,
        cron_schedule=cron,
        execution_timezone=TZ,
        description=f"{doc} Job id {builtin}.",
        tags={"memory_pipeline/builtin": builtin},
    )
    def _schedule(context: ScheduleEvaluationContext, sleep: SleepResource) -> SkipReason | list[RunRequest]:
        if not sleep.cfg().enabled:
            return SkipReason("memory.sleep.enabled is false")
        why = busy(context.instance)
        if why:
            return SkipReason(why)
        closed = [
            date.fromisoformat(k) for k in cst_day.get_partition_keys(current_time=context.scheduled_execution_time)
        ]
        closed = closed[-LOOKBACK:]
        if not closed:
            return SkipReason("no closed day yet")
        with sleep.memory_store.store().connect() as conn:
            statuses = day_statuses(conn, closed[0])
        req = catch_up(statuses, closed, Position.of(closed[-1], stage))
        if req is None:
            return SkipReason(f"nothing to do: every place up to {Position.of(closed[-1], stage)} is done")
        done = [p for p, s in statuses.items() if s == "done"]
        newest = str(max(done)) if done else "none"
        key = f"{name}:{describe(req)}:after {newest}"
        return [run_request(key, req, {"memory_pipeline/builtin": builtin})]

    return _schedule


sleep_light_schedule = _nightly(
    "sleep_light_schedule",
    Stage.LIGHT,
    "0 2 * * *",
    "builtin-light-sleep",
    "02:00 CST: light sleep of yesterday (after downtime the missed days first, in one run, day by day).",
)
sleep_deep_schedule = _nightly(
    "sleep_deep_schedule",
    Stage.DEEP,
    "0 3 * * *",
    "builtin-deep-sleep",
    "03:00 CST: deep sleep of yesterday, after its light sleep (after downtime the missed days first, in one "
    "run, day by day).",
)
sleep_autobiography_schedule = _nightly(
    "sleep_autobiography_schedule",
    Stage.AUTOBIOGRAPHY,
    "0 4 * * *",
    "builtin-self-autobiography",
    "04:00 CST: self autobiography of yesterday, after its deep sleep (after downtime the missed days first, "
    "in one run, day by day).",
)

sleep_schedules = [sleep_light_schedule, sleep_deep_schedule, sleep_autobiography_schedule]
