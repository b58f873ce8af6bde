"""Seed 000 as Dagster assets. Each asset works the partition keys of its run (a backfill is one
run per range: BackfillPolicy.single_run): the day / month / year rows in set-based batches of keys
(summaries.regenerate_many, leases taken per batch), chunks and peer rolls per key; then one
metadata entry per partition."""

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import date, datetime
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    BackfillPolicy,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    RetryRequested,
    TimeWindowPartitionsDefinition,
    asset,
)
from pydantic import Field

from memory_pipeline.defs._shared.failures import provider_down
from memory_pipeline.defs._shared.keys import RAW_EVENTS
from memory_pipeline.defs._shared.leases import under_leases, under_leases_batched
from memory_pipeline.defs._shared.metadata import (
    cache_metadata,
    llm_metadata,
    md_table,
    partition_dates,
    warn_truncated,
)
from memory_pipeline.defs._shared.partitions import cst_day, cst_day_open, cst_month, cst_year
from memory_pipeline.defs._shared.run_config import RangeError, check_as_of, check_worlds
from memory_pipeline.defs._shared.written import Written
from memory_pipeline.defs.temporal.resources import TemporalResource
from memory_pipeline.lib.llm import LLMProviderDown
from memory_pipeline.lib.store import StoreUnavailable
from memory_pipeline.lib.timeutil import local_date, parse_instant, utcnow
from memory_pipeline.temporal import chunks, logic, rolls, summaries
from memory_pipeline.temporal.context import TemporalContext

GROUP = "temporal"
# The code location adds the store's technology (postgres or sqlite) to assets with this tag.
STORE_TAG = {"memory_pipeline/store": ""}
# Every LLM-calling asset of every domain shares this pool, so no run can flood a provider.
LLM_POOL = "llm"
# Runs of the nightly cascade (month / year schedules) carry this tag: only they wait for child rows
# written by the same night's runs. Any other run (UI, CLI, backfill) fails at once and names them.
CASCADE_TAG = "memory_pipeline/cascade"
NIGHTLY = "nightly"


class TemporalRunConfig(Config):
    force_llm: bool = Field(default=False, description="Ignore cached answers and call the model afresh.")
    rebuild: bool = Field(
        default=False,
        description="Rewrite every selected day/month/year partition, also one whose record shows nothing "
        "changed (a row failing its check): its answers come from the LLM cache, no new call (force_llm "
        "to call the model afresh).",
    )
    worlds: list[str] = Field(default_factory=list, description="Only these world ids (default: all).")
    as_of: str = Field("", description="ISO datetime standing for 'now' (default: the real now).")
    child_wait_retries: int = Field(
        default=12,
        description="Month/year runs of the nightly cascade (tag memory_pipeline/cascade=nightly) only: "
        "retries while child rows are missing. Other runs fail at once, naming the missing rows.",
    )
    child_wait_seconds: int = Field(default=300, description="Nightly cascade only: seconds between those retries.")
    lease_wait_seconds: int = Field(
        default=1800,
        description="How long to wait for a partition another run is working on (its lease) before "
        "leaving it to that run; after the wait the partition reuses that run's rows.",
    )


def _now(config: TemporalRunConfig) -> datetime:
    """The run's 'now': the real one, or as_of (checked as the CLI checks it), never in the future."""
    try:
        as_of = check_as_of(config.as_of)
    except RangeError as exc:
        raise Failure(description=f"run config: {exc}", allow_retries=False) from None
    return min(parse_instant(as_of), utcnow()) if as_of else utcnow()


def _worlds(config: TemporalRunConfig) -> list[str] | None:
    """The run's world filter (None: all), refused by name when an id is outside the alphabet."""
    try:
        return check_worlds(config.worlds) or None
    except RangeError as exc:
        raise Failure(description=f"run config: {exc}", allow_retries=False) from None


def _tctx(
    context: AssetExecutionContext, config: TemporalRunConfig, temporal: TemporalResource, partition: str | None
) -> TemporalContext:
    return temporal.context(
        context.assets_def.key.to_user_string(), partition, config.force_llm, rebuild=config.rebuild
    )


def _leased(
    context: AssetExecutionContext,
    config: TemporalRunConfig,
    temporal: TemporalResource,
    items: Sequence[tuple[str, date]],
    work: Callable[[str, date], None],
) -> dict[str, str]:
    """``work(key, day)`` per partition under its lease; {key: reason} of those left to another run."""
    return under_leases(context, temporal.memory_store.store(), items, work, wait_seconds=config.lease_wait_seconds)


def _store_failure(
    exc: StoreUnavailable, what: str, finished: int, total: int, failures: dict[str, str], batch: Sequence[str] = ()
) -> Failure:
    """A database that stayed unreachable through the retries: the run stops (the next partitions
    would only meet the same outage) and says which partition and why in the first line; the
    partitions before it are written (the run materializes them: Written), and a re-run reuses
    their rows without model calls. A set-based batch is one transaction: none of its partitions
    was written."""
    others = f" Also failed: {' | '.join(list(failures.values())[:3])}" if failures else ""
    together = (
        f" Its batch {batch[0]}..{batch[-1]} ({len(batch)} partitions) is one transaction: none of them was written."
        if len(batch) > 1
        else ""
    )
    return Failure(
        description=f"{exc}.{together} {finished} of {total} {what} partition(s) finished before it (their rows are "
        f"written; a re-run reuses them without model calls), {total - finished} not done.{others}",
        metadata={"failed_partition": exc.what, "cause": exc.cause_text, "finished_partitions": finished},
        allow_retries=True,
    )


def _provider_down(exc: LLMProviderDown, finished: int, total: int) -> Failure:
    """The provider's breaker opened. The partitions finished before it are written; the others (the
    batch it stopped in rolled back whole) are left for the next run, which reuses the answers
    already paid for from the cache."""
    return provider_down(exc, finished_partitions=finished, not_done_partitions=total - finished)


def _materialize_periods(
    window: str, context: AssetExecutionContext, config: TemporalRunConfig, temporal: TemporalResource
) -> MaterializeResult[Any]:
    failures: dict[str, str] = {}
    finished = [0]
    batch: list[str] = []
    with Written(context) as written:
        try:
            return _periods(window, context, config, temporal, written, failures, finished, batch)
        except StoreUnavailable as exc:
            raise _store_failure(exc, window, finished[0], len(context.partition_keys), failures, batch) from None
        except LLMProviderDown as exc:
            raise _provider_down(exc, finished[0], len(context.partition_keys)) from None


def _periods(
    window: str,
    context: AssetExecutionContext,
    config: TemporalRunConfig,
    temporal: TemporalResource,
    written: Written,
    failures: dict[str, str],
    finished: list[int],
    batch: list[str],
) -> MaterializeResult[Any]:
    totals: Counter[str] = Counter()
    worlds = _worlds(config)
    periods = partition_dates(context)
    # One context (one LLM client) for the run: its ledger rows name each call's partition.
    tctx = _tctx(context, config, temporal, None)
    if window != "day" and tctx.cfg.enabled:
        # A month reads its day rows, a year its month rows. The nightly cascade (scheduled at 00:05
        # on the 1st, beside the day run of the same night) waits (retries) until they all exist.
        # Any other run does not wait: a launch that selected the child partitions too runs after
        # them (the backfill orders it), so a missing child is the operator's to run; say which.
        keys = {period: key for key, period in periods}
        missing = summaries.missing_children_many(tctx, window, [p for _, p in periods], worlds)
        messages = {keys[p]: logic.missing_children_message(window, keys[p], m) for p, m in missing.items()}
        nightly = context.run.tags.get(CASCADE_TAG) == NIGHTLY
        if missing and nightly and context.retry_number < config.child_wait_retries:
            context.log.warning(
                f"nightly cascade: waiting {config.child_wait_seconds} s for child rows (retry "
                f"{context.retry_number + 1} of {config.child_wait_retries}): " + " | ".join(messages.values())
            )
            raise RetryRequested(max_retries=config.child_wait_retries, seconds_to_wait=config.child_wait_seconds)
        failures.update(messages)

    def work(items: list[tuple[str, date]]) -> None:
        batch[:] = [key for key, _ in items]
        results = summaries.regenerate_many(
            tctx,
            window,
            [period for _, period in items],
            worlds,
            skip_unchanged=not (config.force_llm or config.rebuild),
        )
        for key, period in items:
            _report(context, written, window, key, results[period], failures, totals)
        finished[0] += len(items)

    todo = [(key, period) for key, period in periods if key not in failures]
    failures.update(
        under_leases_batched(
            context,
            temporal.memory_store.store(),
            todo,
            work,
            batch_size=summaries.BATCH[window],
            wait_seconds=config.lease_wait_seconds,
        )
    )
    context.log.info(f"{window}: {dict(totals)}")
    if failures:
        raise Failure(
            description=_failure_line(window, len(context.partition_keys), failures),
            metadata={"failed_partitions": MetadataValue.json(sorted(failures))},
            # No op retry policy may re-run this step at once: missing children or an LLM hard failure
            # fail the same way again (the first line says what to do).
            allow_retries=False,
        )
    return MaterializeResult()


def _report(
    context: AssetExecutionContext,
    written: Written,
    window: str,
    key: str,
    result: summaries.PeriodResult,
    failures: dict[str, str],
    totals: Counter[str],
) -> None:
    """One partition's metadata (and its failure, if some worlds hit an LLM hard failure)."""
    if result.failures:
        failure = summaries.PartitionFailure(window, key, result.failures)
        failures[key] = str(failure)
        context.add_asset_metadata({"failed": str(failure), **llm_metadata(result.llm)}, partition_key=key)
        return
    if result.db_retries:
        context.log.warning(f"{window} {key}: redone {result.db_retries} time(s) after a transient database error")
    worlds = ", ".join(result.truncated)
    rows = f"the {window} rows of {worlds} (not reused: the next run asks the model again)" if worlds else ""
    warn_truncated(context, result.llm, f"{window} {key}", rows)
    if result.empty_answers:  # a degraded partition says so: the placeholders read as summaries otherwise
        context.log.warning(
            f"{window} {key}: the model answered with nothing for {', '.join(result.empty_answers)}: written as "
            "empty_summary placeholders, not reused: the next run asks again"
        )
    if result.disabled:
        context.log.info(f"{window} {key}: memory.temporal_summary.enabled is false, nothing written")
    totals.update(
        rows_written=result.written,
        non_empty=result.non_empty,
        partial_summaries=result.partial_summaries,
        llm_calls=result.llm.calls,
        skipped_unchanged=1 if result.skipped else 0,
    )
    totals.update({f"placeholder_{r}": n for r, n in result.placeholders.items()})
    written.add(
        key,
        {
            "worlds": result.worlds,
            "rows_written": result.written,
            "rows_unchanged": result.unchanged,
            "summaries_reused": result.reused,
            # Day rows whose material exceeded day_material_max_chars, and the partial
            # summaries (per conversation, per part, per group) they were built from.
            "worlds_over_budget": result.over_budget,
            "partial_summaries": result.partial_summaries,
            "non_empty": result.non_empty,
            "placeholders": dict(result.placeholders),
            "disabled": result.disabled,
            # Not re-read: the period's record shows nothing changed since it was materialized
            # (force_llm re-reads it); its rows are kept as they are.
            "skipped_unchanged": bool(result.skipped),
            "skip_reason": result.skipped,
            "db_retries": result.db_retries,
            # Worlds whose row was written from an answer the provider cut (how many answers:
            # llm_truncated_answers): never reused, the next run asks again.
            "worlds_truncated": result.truncated,
            # Worlds the model answered with nothing (their empty_summary placeholder): asked again.
            "worlds_empty_answer": result.empty_answers,
            **llm_metadata(result.llm),
            "preview": md_table(("world", "period", "summary"), result.preview),
        },
    )


def _failure_line(window: str, n: int, failures: dict[str, str]) -> str:
    """One line: how many partitions failed, whether other rows were written, the first reasons. It
    does not say "failed": it is a failure's text, and the CLI's run line puts "failed:" before it."""
    shown = " | ".join(list(failures.values())[:5])
    more = f" | (+{len(failures) - 5} more)" if len(failures) > 5 else ""
    if n == 1:
        return shown
    # Every partition failing is still not "nothing written": a failed partition's other worlds
    # (their placeholders among them) are written; only the worlds that failed have no new row.
    others = (
        "rows of the others are written"
        if len(failures) < n
        else "no new row for the worlds that failed (a row they had is kept), the other worlds' rows are written"
    )
    return f"{len(failures)} of {n} {window} partition(s); {others}: {shown}{more}"


@asset(
    partitions_def=cst_day_open,
    backfill_policy=BackfillPolicy.single_run(),
    deps=[RAW_EVENTS],
    group_name=GROUP,
    kinds={"llm"},
    tags=STORE_TAG,
    pool=LLM_POOL,
    description="Seed 000 conversation day chunks: one per closed 30-minute CST bucket with material "
    "after the watermark, and a further chunk (seq+1) for late material of an already-chunked bucket; "
    "append-only within the day, every material message in exactly one chunk.",
)
def temporal_day_chunks(
    context: AssetExecutionContext,
    config: TemporalRunConfig,
    temporal: TemporalResource,
) -> MaterializeResult[Any]:
    now = _now(config)
    failures: dict[str, str] = {}
    totals: Counter[str] = Counter()
    dates = partition_dates(context)
    finished = [0]
    written = Written(context)

    def work(key: str, day: date) -> None:
        tctx = _tctx(context, config, temporal, key)
        result = chunks.run_tick(tctx, day, now)
        finished[0] += 1
        failures.update({f"{key} {conv}": f"day {key}: {why}" for conv, why in result.failures.items()})
        metadata = {
            "conversations": result.conversations,
            "chunks_written": result.chunks_written,
            "late_messages": result.late_messages,
            "failed_conversations": len(result.failures),
            "disabled": not tctx.cfg.enabled,
            "db_retries": result.db_retries,
            # The chunk check audits coverage as this tick saw it: buckets closed at tick_now,
            # messages ingested by read_at. Whole seconds in the configured zone, as every operator
            # time; cut down, so both stay true of the tick (bucket ends are whole minutes).
            "tick_now": result.now.astimezone(tctx.tz).isoformat(timespec="seconds") if result.now else "",
            "read_at": result.read_at.astimezone(tctx.tz).isoformat(timespec="seconds") if result.read_at else "",
            **llm_metadata(tctx.llm.stats),
        }
        if result.failures:  # a day with a conversation left to chunk is not done
            context.add_asset_metadata(metadata, partition_key=key)
        else:
            written.add(key, metadata)
        totals.update(chunks_written=result.chunks_written, late_messages=result.late_messages)

    with written:
        try:
            undone = _leased(context, config, temporal, dates, work)
        except StoreUnavailable as exc:
            raise _store_failure(exc, "chunk", finished[0], len(dates), failures) from None
        except LLMProviderDown as exc:
            raise _provider_down(exc, finished[0], len(dates)) from None
        context.log.info(f"chunks: {dict(totals)}")
        if failures or undone:
            parts = [f"chunk summaries failed for {len(failures)} conversation(s)"] if failures else []
            parts += [f"{len(undone)} day(s) left to the run working on them"] if undone else []
            raise Failure(
                description="; ".join(parts) + ": " + " | ".join([*failures.values(), *undone.values()][:3]),
                metadata={"left_to_other_runs": MetadataValue.json(sorted(undone))},
            )
    return MaterializeResult()


@asset(
    partitions_def=cst_day_open,
    backfill_policy=BackfillPolicy.single_run(),
    deps=[temporal_day_chunks],
    group_name=GROUP,
    kinds={"redis", "llm"},
    pool=LLM_POOL,
    description="Seed 000 peer rolls of closed buckets, cached under {prefix}:peer_roll:... for ~36 h; "
    "also serves the read path's warm-up requests.",
)
def temporal_peer_rolls(
    context: AssetExecutionContext,
    config: TemporalRunConfig,
    temporal: TemporalResource,
) -> MaterializeResult[Any]:
    now = _now(config)
    dates = partition_dates(context)
    finished = [0]
    written = Written(context)

    def work(key: str, day: date) -> None:
        tctx = _tctx(context, config, temporal, key)
        result = rolls.warm_peer_rolls(tctx, day, now)
        finished[0] += 1
        written.add(
            key,
            {
                "buckets": result.buckets,
                "warmed": result.warmed,
                "reused": result.reused,
                "requests_served": result.requests_done,
                "failures": len(result.failures),
                "cache_backend": tctx.cache.backend,
                **cache_metadata(context, tctx.cache, f"peer rolls {key}"),
                **llm_metadata(tctx.llm.stats),
            },
        )

    with written:
        try:
            undone = _leased(context, config, temporal, dates, work)
        except StoreUnavailable as exc:
            raise _store_failure(exc, "peer roll", finished[0], len(dates), {}) from None
        except LLMProviderDown as exc:
            raise _provider_down(exc, finished[0], len(dates)) from None
        if undone:
            raise Failure(
                description=f"{len(undone)} day(s) left to the run working on them: "
                + " | ".join(list(undone.values())[:3]),
                metadata={"left_to_other_runs": MetadataValue.json(sorted(undone))},
            )
    return MaterializeResult()


def _period_asset(
    window: str, partitions_def: TimeWindowPartitionsDefinition, dep: AssetsDefinition | AssetKey, description: str
) -> AssetsDefinition:
    """The day, month and year rows share one body: loop over the run's keys, regenerate each."""

    @asset(
        name=f"temporal_{window}_summaries",
        partitions_def=partitions_def,
        deps=[dep],
        backfill_policy=BackfillPolicy.single_run(),
        group_name=GROUP,
        kinds={"llm"},
        tags=STORE_TAG,
        pool=LLM_POOL,
        description=description,
    )
    def _asset(
        context: AssetExecutionContext,
        config: TemporalRunConfig,
        temporal: TemporalResource,
    ) -> MaterializeResult[Any]:
        return _materialize_periods(window, context, config, temporal)

    return _asset


temporal_day_summaries = _period_asset(
    "day",
    cst_day,
    RAW_EVENTS,
    "Seed 000 per-world day rows (one per world, placeholders with empty_reason), from all of the day's "
    "material: per-conversation partial summaries first when it exceeds day_material_max_chars.",
)
temporal_month_summaries = _period_asset(
    "month", cst_month, temporal_day_summaries, "Seed 000 per-world month rows, from the month's non-empty day rows."
)
temporal_year_summaries = _period_asset(
    "year", cst_year, temporal_month_summaries, "Seed 000 per-world year rows, from the year's non-empty month rows."
)


@asset(
    deps=[temporal_day_summaries, temporal_month_summaries, temporal_year_summaries],
    group_name=GROUP,
    kinds={"redis", "llm"},
    pool=LLM_POOL,
    description="Seed 000 system rolls past_days / past_months / past_years for 'today', reused while "
    "their sources_fp matches; regenerated after the day write and after each cascade.",
)
def temporal_system_rolls(
    context: AssetExecutionContext,
    config: TemporalRunConfig,
    temporal: TemporalResource,
) -> MaterializeResult[Any]:
    now = _now(config)
    tctx = _tctx(context, config, temporal, None)
    today = local_date(now, tctx.tz)
    try:
        result = rolls.regenerate_system_rolls(tctx, today, _worlds(config), force=config.force_llm)
    except StoreUnavailable as exc:
        raise Failure(description=str(exc), allow_retries=True) from None
    except LLMProviderDown as exc:
        raise _provider_down(exc, 0, 1) from None
    if result.failures:
        raise Failure(description=f"system rolls failed: {list(result.failures.items())[:3]}")
    return MaterializeResult(
        metadata={
            "today": today.isoformat(),
            "regenerated": result.regenerated,
            "reused": result.reused,
            "empty": result.empty,
            "cache_backend": tctx.cache.backend,
            **cache_metadata(context, tctx.cache, "system rolls"),
            **llm_metadata(tctx.llm.stats),
        }
    )


temporal_assets = [
    temporal_day_chunks,
    temporal_peer_rolls,
    temporal_day_summaries,
    temporal_month_summaries,
    temporal_year_summaries,
    temporal_system_rolls,
]
