"""Seed 001 jobs: compaction, organize (archive + projection), the nightly deep review, the
per-day outcomes and the projection."""

from dagster import AssetSelection, define_asset_job

from memory_pipeline.defs.objects import assets

compaction_job = define_asset_job(
    "objects_compaction_job",
    selection=AssetSelection.assets(assets.objects_hot_timeline, assets.objects_compaction),
    description="Bring new raw events into the hot timeline and compact it (threshold or explicit jobs).",
)
organize_job = define_asset_job(
    "objects_organize_job",
    selection=AssetSelection.assets(assets.objects_archive, assets.objects_markdown_projection),
    description="Organize pending events into objects and relations, then project a pass of Markdown.",
)
deep_review_job = define_asset_job(
    "objects_deep_review_job",
    selection=AssetSelection.assets(assets.objects_archive),
    description="The nightly deep review (run config deep=true) of every due world.",
)
outcomes_job = define_asset_job(
    "objects_outcomes_job",
    selection=AssetSelection.assets(assets.objects_event_outcomes),
    description="Per-event outcomes of CST days (rebuild=true re-queues the days' events explicitly).",
)
projection_job = define_asset_job(
    "objects_projection_job",
    selection=AssetSelection.assets(assets.objects_markdown_projection),
    description="One Markdown projection pass (at most 10 objects).",
)

objects_jobs = [compaction_job, organize_job, deep_review_job, outcomes_job, projection_job]
