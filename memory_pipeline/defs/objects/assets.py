"""Seed 001 as Dagster assets (the thin shell): each asset calls the objects core and attaches
what it did as metadata. Objects and relations are one unpartitioned current state; the
per-event outcomes and receipts are partitioned by the CST day of the events they archive."""

from collections import Counter
from typing import Any

from dagster import (
    AssetExecutionContext,
    BackfillPolicy,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)
from pydantic import Field

from memory_pipeline.defs._shared.failures import provider_down
from memory_pipeline.defs._shared.keys import RAW_EVENTS
from memory_pipeline.defs._shared.metadata import llm_metadata, md_table, partition_dates
from memory_pipeline.defs._shared.partitions import cst_day_open
from memory_pipeline.defs.objects.resources import ObjectsResource
from memory_pipeline.lib.timeutil import local_date
from memory_pipeline.objects import logic, projection, recall, reports, timeline, worker
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.logic import JobMode, day_status
from memory_pipeline.objects.worker import WorkerReport

GROUP = "objects"
STORE_TAG = {"memory_pipeline/store": ""}
LLM_POOL = "llm"


class ObjectsRunConfig(Config):
    worlds: list[str] = Field(default_factory=list, description="Only these world ids (default: all).")
    max_batches: int = Field(
        default=0, description="Stop after this many batches (0: the configured maximum; never negative)."
    )
    automatic: bool = Field(
        default=True,
        description="Create the automatic jobs first (threshold compaction, hourly organize); "
        "false: only run jobs already queued (explicit requests).",
    )
    deep: bool = Field(
        default=False, description="objects_archive: create and run the nightly deep review for due worlds."
    )
    rebuild: bool = Field(
        default=False,
        description="objects_event_outcomes: re-queue the partition's archived events as an explicit request "
        "that moves objects forward (never deletes objects or undoes commits), then organize them.",
    )
    passes: int = Field(default=1, description="objects_markdown_projection: passes of at most 10 objects each.")


def _checked(config: ObjectsRunConfig) -> ObjectsRunConfig:
    """The run config's counts, refused by field name before any work (as the CLI refuses them)."""
    if config.max_batches < 0:
        raise Failure(
            description=f"run config: max_batches must be 0 (the configured maximum) or more, got {config.max_batches}",
            allow_retries=False,
        )
    if config.passes < 1:
        raise Failure(description=f"run config: passes must be at least 1, got {config.passes}", allow_retries=False)
    for name in ("max_batches", "passes"):
        value = getattr(config, name)
        if value > logic.INT_MAX:
            raise Failure(
                description=f"run config: {name} must be at most {logic.INT_MAX:,}, got {value}", allow_retries=False
            )
    return config


def _run_worker(octx: ObjectsContext, config: ObjectsRunConfig, modes: list[JobMode]) -> WorkerReport:
    """The worker over the run's worlds; stopped by the provider's breaker, the run fails with its
    one line (the refused batch handed back untouched, every job not done left queued)."""
    try:
        return worker.run_worker(octx, config.worlds or None, config.max_batches or None, modes=modes)
    except worker.ProviderStopped as exc:
        rep = exc.report
        raise provider_down(
            exc,
            worker.LEFT_FOR_NEXT_RUN,
            stopped_at_world=exc.world,
            batches=rep.batches,
            committed=rep.committed,
            failed_claims=rep.failures,
            first_errors=MetadataValue.md("\n".join(f"- {e}" for e in rep.errors[:10]) or "none"),
            **llm_metadata(octx.llm.stats),
        ) from None


def _disabled(octx: ObjectsContext) -> MaterializeResult[Any] | None:
    """memory.objects.enabled: false turns the domain's work off (the runs say so)."""
    if octx.cfg.enabled:
        return None
    return MaterializeResult(metadata={"disabled": True})


def _worker_metadata(context: AssetExecutionContext, rep: WorkerReport) -> dict[str, Any]:
    """The run's counts; a run whose batches failed says so (``degraded`` and a warning in the log),
    though its asset stands: the other worlds' commits are real and the failed ones are retried."""
    degraded = bool(rep.failures or rep.jobs_failed or rep.blocked_events)
    if degraded:
        context.log.warning(
            f"degraded: {rep.failures} failed claim(s), {rep.jobs_failed} job(s) failed, "
            f"{rep.blocked_events} event(s) blocked; first: {rep.errors[0] if rep.errors else '-'}"
        )
    return {
        "degraded": degraded,
        "batches": rep.batches,
        "committed": rep.committed,
        "failed_claims": rep.failures,
        "jobs_done": rep.jobs_done,
        "jobs_failed": rep.jobs_failed,
        "blocked_events": rep.blocked_events,
        "model_calls": rep.model_calls,
        "zero_progress_batches": rep.zero_progress_batches,
        "corrections": rep.corrections,
        "truncated_answers": rep.truncated_answers,
        "outcomes": MetadataValue.json(rep.outcomes),
        "lease_busy_worlds": MetadataValue.json(rep.lease_busy),
        "worlds_at_once": rep.worlds_at_once,
        "first_errors": MetadataValue.md("\n".join(f"- {e}" for e in rep.errors[:10]) or "none"),
    }


@asset(
    deps=[RAW_EVENTS],
    group_name=GROUP,
    tags=STORE_TAG,
    description="Seed 001 hot timeline: every raw event not yet seen enters as raw slices of at most 2,000 "
    "characters (events over 32,000 characters are marked oversized and left out). Late events enter here "
    "and reach the archive only through compaction.",
)
def objects_hot_timeline(
    context: AssetExecutionContext, config: ObjectsRunConfig, objects: ObjectsResource
) -> MaterializeResult[Any]:
    _checked(config)
    octx = objects.context("objects_hot_timeline")
    if (off := _disabled(octx)) is not None:
        return off
    rep = timeline.intake(octx, config.worlds or None)
    est = timeline.hot_estimates(octx, config.worlds or None)
    return MaterializeResult(
        metadata={
            "events_entered": rep.events,
            "slices": rep.slices,
            "oversized_events": rep.oversized,
            "estimated_tokens": MetadataValue.json(est),
            "threshold_tokens": octx.cfg.compact_threshold_tokens,
        }
    )


@asset(
    deps=[objects_hot_timeline],
    group_name=GROUP,
    kinds={"llm"},
    tags=STORE_TAG,
    pool=LLM_POOL,
    description="Seed 001 compact: worlds over the token threshold get a threshold job (until below 60% of "
    "it; suppressed for an hour after a threshold failure), explicit requests cover their whole range. "
    "Batches of at most 8 nodes become summary heads in one transaction that queues fully-compacted "
    "events for archiving and records a receipt.",
)
def objects_compaction(
    context: AssetExecutionContext, config: ObjectsRunConfig, objects: ObjectsResource
) -> MaterializeResult[Any]:
    _checked(config)
    octx = objects.context("objects_compaction")
    if (off := _disabled(octx)) is not None:
        return off
    created = worker.enqueue_threshold(octx) if config.automatic else []
    rep = _run_worker(octx, config, [JobMode.COMPACT])
    return MaterializeResult(
        metadata={
            "threshold_jobs_created": len(created),
            "estimated_tokens_after": MetadataValue.json(timeline.hot_estimates(octx)),
            **_worker_metadata(context, rep),
            **llm_metadata(octx.llm.stats),
        }
    )


@asset(
    deps=[objects_compaction],
    group_name=GROUP,
    kinds={"llm"},
    tags=STORE_TAG,
    pool=LLM_POOL,
    description="Seed 001 objects and relations, one current state: organize claims one page of one event "
    "(<= 8,000 characters, down to 256) plus related objects within the transfer budget and commits "
    "body, relations, attachments, cursor, progress and outcome (continue / linked / archive_only) in one "
    "transaction; with deep=true, the nightly deep review (inventory, <= 4 objects per batch).",
)
def objects_archive(
    context: AssetExecutionContext, config: ObjectsRunConfig, objects: ObjectsResource
) -> MaterializeResult[Any]:
    _checked(config)
    octx = objects.context("objects_archive")
    if (off := _disabled(octx)) is not None:
        return off
    created = []
    if config.automatic:
        created += worker.enqueue_hourly(octx)
    if config.deep:
        created += worker.enqueue_deep(octx)
    modes = [JobMode.ORGANIZE, JobMode.DEEP]
    rep = _run_worker(octx, config, modes)
    counts = recall.object_counts(octx.store)
    states = reports.state_counts(octx.store)
    return MaterializeResult(
        metadata={
            "jobs_created": MetadataValue.json(Counter(r["mode"] for r in created)),
            "objects_by_world_and_type": MetadataValue.json(counts),
            "event_states": MetadataValue.json(states),
            **_worker_metadata(context, rep),
            **llm_metadata(octx.llm.stats),
        }
    )


@asset(
    partitions_def=cst_day_open,
    backfill_policy=BackfillPolicy.single_run(),
    deps=[objects_archive],
    group_name=GROUP,
    kinds={"llm"},
    tags=STORE_TAG,
    pool=LLM_POOL,
    description="Seed 001 per-event outcomes and receipts by the CST day of the events they archive. A day is "
    "complete only when all its events are linked/archive_only, else partial (blocked events are never "
    "reported done). rebuild=true re-queues the day's archived events as an explicit request that moves "
    "objects forward.",
)
def objects_event_outcomes(
    context: AssetExecutionContext, config: ObjectsRunConfig, objects: ObjectsResource
) -> MaterializeResult[Any]:
    _checked(config)
    dates = partition_dates(context)
    octx = objects.context("objects_event_outcomes", f"{dates[0][0]}..{dates[-1][0]}" if dates else None)
    rep = None
    if config.rebuild:
        worker.requeue_days(octx, [d for _, d in dates], config.worlds or None)
        rep = _run_worker(octx, config, [JobMode.ORGANIZE])
    today = local_date(octx.now(), octx.tz)
    counts = (
        reports.day_counts(octx.store, dates[0][1], dates[-1][1], config.worlds[0] if config.worlds else None)
        if dates
        else {}
    )
    for key, day in dates:
        c = counts.get(day, {})
        status = str(day_status(c, open_day=day >= today))
        context.add_asset_metadata(
            {"status": status, "events": sum(c.values()), "by_state": MetadataValue.json(c)}, partition_key=key
        )
    rows = [(k, str(sum(counts.get(d, {}).values())), str(counts.get(d, {}))) for k, d in dates[:31]]
    return MaterializeResult(
        metadata={
            "days": len(dates),
            "preview": md_table(["day", "events", "by state"], rows),
            **(_worker_metadata(context, rep) if rep else {}),
        }
    )


@asset(
    deps=[objects_archive],
    group_name=GROUP,
    tags=STORE_TAG,
    description="Seed 001 Markdown projection: per world a README index, one folder per type (file names "
    "from stable id hashes) and the three core documents; at most 10 objects per pass (later passes "
    "continue), unchanged files not rewritten. The store is the authority: object files deleted or edited "
    "by hand are found and rewritten (never imported); a core document's human edit is imported as a new "
    "version.",
)
def objects_markdown_projection(
    context: AssetExecutionContext, config: ObjectsRunConfig, objects: ObjectsResource
) -> MaterializeResult[Any]:
    _checked(config)
    store = objects.memory_store.store()
    root = objects.projection_root()
    written = unchanged = 0
    errors: list[str] = []
    imported: list[str] = []
    behind = missing = differing = removed = 0
    for i in range(config.passes):
        rep = projection.project(store, root)
        written, unchanged, behind = written + rep.written, unchanged + rep.unchanged, rep.behind_after
        removed += rep.removed
        if i == 0:  # what the first check found on disk
            missing, differing = rep.missing, rep.differing
        errors += rep.errors
        imported += rep.core_imported
        if not behind:
            break
    return MaterializeResult(
        metadata={
            "root": str(root),
            "files_written": written,
            "unchanged": unchanged,
            "files_found_missing": missing,
            "files_found_edited": differing,
            "stale_files_removed": removed,
            "core_human_edits_imported": MetadataValue.json(imported),
            "objects_behind": behind,
            "errors": MetadataValue.md("\n".join(f"- {e}" for e in errors[:20]) or "none"),
        }
    )


objects_assets = [
    objects_hot_timeline,
    objects_compaction,
    objects_archive,
    objects_event_outcomes,
    objects_markdown_projection,
]
