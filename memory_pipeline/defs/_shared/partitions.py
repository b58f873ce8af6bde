"""CST calendar partitions. One partition per window for all worlds: 1,000 worlds never mean
1,000 runs, and the partition count stays in the thousands (days since MEMORY_PARTITION_START)."""

from __future__ import annotations

from dagster import (
    DailyPartitionsDefinition,
    MonthlyPartitionsDefinition,
    TimeWindowPartitionsDefinition,
    WeeklyPartitionsDefinition,
)

from memory_pipeline.lib import settings

TZ = settings.timezone_name()
START = settings.partition_start()

# Closed days only: a day partition exists once the day is over.
cst_day = DailyPartitionsDefinition(start_date=START, timezone=TZ, fmt="%Y-%m-%d")
# The */30 tick appends chunks of the open day too, so today's partition exists for chunks.
cst_day_open = DailyPartitionsDefinition(start_date=START, timezone=TZ, fmt="%Y-%m-%d", end_offset=1)
# Weeks start Monday 00:00 (the tower's decision); a week partition exists once it is over.
cst_week = WeeklyPartitionsDefinition(start_date=START, timezone=TZ, fmt="%Y-%m-%d", day_offset=1)
cst_month = MonthlyPartitionsDefinition(start_date=START[:7], timezone=TZ, fmt="%Y-%m")
# Dagster has no yearly class; the same zone keeps the year -> month -> day mapping valid.
cst_year = TimeWindowPartitionsDefinition(cron_schedule="0 0 1 1 *", fmt="%Y", start=START[:4], timezone=TZ)
