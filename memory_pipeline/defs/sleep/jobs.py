"""Sleep jobs: one per stage, each a cst_day job over its asset of the sleep multi-asset (a range is
one run, its days in order), and the nights job over all three (a range goes day by day, each day's
light, deep and autobiography before the next day's): the schedules, the late-data sensor and the
operator's backfills launch it, selecting the stages they need."""

from dagster import AssetSelection, define_asset_job

from memory_pipeline.defs.sleep.assets import AUTO_KEY, DEEP_KEY, LIGHT_KEY

light_job = define_asset_job(
    "sleep_light_job",
    selection=AssetSelection.assets(LIGHT_KEY),
    description="Light sleep of one CST day (or a range, in day order); each day needs the one before.",
)
deep_job = define_asset_job(
    "sleep_deep_job",
    selection=AssetSelection.assets(DEEP_KEY),
    description="Deep sleep of one CST day (or a range, in day order); each day needs its light sleep.",
)
autobiography_job = define_asset_job(
    "sleep_autobiography_job",
    selection=AssetSelection.assets(AUTO_KEY),
    description="Self autobiography of one CST day (or a range, in day order); each day needs its deep sleep.",
)
nights_job = define_asset_job(
    "sleep_nights_job",
    selection=AssetSelection.assets(LIGHT_KEY, DEEP_KEY, AUTO_KEY),
    description="Sleep of one CST day or a range: day by day, the selected stages of a day (light, deep, "
    "autobiography) before the next day's. The nightly schedules and the late-data sensor launch it.",
)

sleep_jobs = [light_job, deep_job, autobiography_job, nights_job]
SLEEP_JOB_NAMES = [j.name for j in sleep_jobs]
