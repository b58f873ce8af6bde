"""Jobs and schedules (Asia/Shanghai). Partitioned schedules catch up missed ticks after downtime
(up to the scheduler's max_catchup_runs in dagster.yaml)."""


from datetime import timedelta
from zoneinfo import ZoneInfo

from dagster import (
    AssetSelection,
    RunRequest,
    ScheduleEvaluationContext,
    build_schedule_from_partitioned_job,
    define_asset_job,
    schedule,
)

from memory_pipeline.temporal import assets
from memory_pipeline.temporal.partitions import TZ

tick_job = define_asset_job(
    "temporal_tick_job",
    selection=AssetSelection.assets(assets.temporal_day_chunks, assets.temporal_peer_rolls),
    description="The */30 tick: append chunks of closed buckets, then warm peer rolls.",
)
day_job = define_asset_job(
    "temporal_day_job",
    selection=AssetSelection.assets(assets.temporal_day_summaries),
    description="Per-world day rows of one CST day (or a range).",
)
month_job = define_asset_job(
    "temporal_month_job",
    selection=AssetSelection.assets(assets.temporal_month_summaries),
    description="Cascade: per-world month rows from the month's day rows.",
)
year_job = define_asset_job(
    "temporal_year_job",
    selection=AssetSelection.assets(assets.temporal_year_summaries),
    description="Cascade: per-world year rows from the year's month rows.",
)
system_rolls_job = define_asset_job(
    "temporal_system_rolls_job",
    selection=AssetSelection.assets(assets.temporal_system_rolls),
    description="Regenerate past_days / past_months / past_years rolls for today.",
)


@schedule(job=tick_job, cron_schedule="*/30 * * * *", execution_timezone=TZ, name="temporal_tick_schedule")
def temporal_tick_schedule(context: ScheduleEvaluationContext):
    """At hh:00/hh:30 the bucket that just closed belongs to the day of (tick - 1 minute): the
    00:00 tick finishes yesterday's last bucket."""
    at = context.scheduled_execution_time
    day = (at - timedelta(minutes=1)).astimezone(ZoneInfo(TZ)).strftime("%Y-%m-%d")
    return RunRequest(run_key=f"tick-{at.isoformat()}", partition_key=day)


# 00:05 CST: yesterday's day rows; on the 1st last month's; on 1 January last year's. A month or
# year run waits (retries) until its child rows exist, so the cascade follows the day write.
temporal_day_schedule = build_schedule_from_partitioned_job(
    day_job, name="temporal_day_schedule", hour_of_day=0, minute_of_hour=5)
temporal_month_schedule = build_schedule_from_partitioned_job(
    month_job, name="temporal_month_schedule", day_of_month=1, hour_of_day=0, minute_of_hour=5)
temporal_year_schedule = build_schedule_from_partitioned_job(
    year_job, name="temporal_year_schedule")  # 00:00 on 1 January (a yearly cron takes no offset)


temporal_jobs = [tick_job, day_job, month_job, year_job, system_rolls_job]
temporal_schedules = [
    temporal_tick_schedule, temporal_day_schedule, temporal_month_schedule, temporal_year_schedule,
]
