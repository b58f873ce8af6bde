"""Seed 000 in Dagster: the temporal domain's one Definitions (resources injected by the root)."""

from datetime import date
from functools import partial
from zoneinfo import ZoneInfo

from dagster import DagsterInstance, Definitions

from memory_pipeline.defs._shared.partitions import cst_day, cst_day_open, cst_month, cst_year
from memory_pipeline.defs._shared.registry import Target, register
from memory_pipeline.defs._shared.resources import initialized
from memory_pipeline.defs.temporal import assets
from memory_pipeline.defs.temporal.assets import temporal_assets
from memory_pipeline.defs.temporal.checks import temporal_checks, temporal_freshness_checks, temporal_freshness_sensor
from memory_pipeline.defs.temporal.jobs import temporal_jobs
from memory_pipeline.defs.temporal.resources import TemporalResource
from memory_pipeline.defs.temporal.schedules import temporal_schedules
from memory_pipeline.defs.temporal.sensors import temporal_sensors
from memory_pipeline.lib.timeutil import local_date, parse_instant, utcnow
from memory_pipeline.temporal import prompts, reconcile, summaries

defs = Definitions(
    assets=temporal_assets,
    asset_checks=[*temporal_checks, *temporal_freshness_checks],
    jobs=temporal_jobs,
    schedules=temporal_schedules,
    sensors=[*temporal_sensors, temporal_freshness_sensor],
)


def changed_partitions(
    window: str, defs: Definitions, keys: list[str], as_of: str, instance: DagsterInstance
) -> dict[str, str]:
    """Mode "changed" of day / month / year: the keys whose period has no up-to-date record (see
    reconcile.changed_periods), judged with the model and settings of ``defs``' resources."""
    resource = (defs.resources or {})["temporal"]
    assert isinstance(resource, TemporalResource)
    with initialized(resource, instance) as temporal:  # environment variables resolved
        store, cfg = temporal.memory_store.store(), temporal.cfg()
        model, tz = temporal.llm.model, temporal.memory_config.zone()
    defn = {"day": cst_day, "month": cst_month, "year": cst_year}[window]
    key_tz = ZoneInfo(defn.timezone)
    periods: dict[date, str] = {local_date(defn.time_window_for_partition_key(k).start, key_tz): k for k in keys}
    built_with = (model, prompts.PROMPT_VERSION, summaries.config_fp(window, cfg))
    now = min(parse_instant(as_of), utcnow()) if as_of else None
    changed = reconcile.changed_periods(store, tz, window, sorted(periods), built_with, now)
    return {periods[p]: why for p, why in changed.items()}


for _name, _target in {
    "chunks": Target("temporal_tick_job", cst_day_open, assets.temporal_day_chunks.key, subset=True),
    "peer_rolls": Target("temporal_tick_job", cst_day_open, assets.temporal_peer_rolls.key, subset=True),
    "day": Target(
        "temporal_day_job",
        cst_day,
        assets.temporal_day_summaries.key,
        changed=partial(changed_partitions, "day"),
        rebuilds=True,
    ),
    "month": Target(
        "temporal_month_job",
        cst_month,
        assets.temporal_month_summaries.key,
        changed=partial(changed_partitions, "month"),
        rebuilds=True,
    ),
    "year": Target(
        "temporal_year_job",
        cst_year,
        assets.temporal_year_summaries.key,
        changed=partial(changed_partitions, "year"),
        rebuilds=True,
    ),
}.items():
    register(_name, _target)
