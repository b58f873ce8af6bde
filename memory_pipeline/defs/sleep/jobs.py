"""Sleep jobs: one per stage, each a cst_day job (a range is one run, its days in order)."""

from dagster import AssetSelection, define_asset_job

from memory_pipeline.defs.sleep import assets

light_job = define_asset_job(
    "sleep_light_job",
    selection=AssetSelection.assets(assets.sleep_light_sleep),
    description="Light sleep of one CST day (or a range, in day order).",
)
deep_job = define_asset_job(
    "sleep_deep_job",
    selection=AssetSelection.assets(assets.sleep_deep_sleep),
    description="Deep sleep of one CST day (or a range, in day order); each day needs the one before.",
)
autobiography_job = define_asset_job(
    "sleep_autobiography_job",
    selection=AssetSelection.assets(assets.sleep_autobiography),
    description="Self autobiography of one CST day (or a range, in day order).",
)

sleep_jobs = [light_job, deep_job, autobiography_job]
