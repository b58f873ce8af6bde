"""Seed 004 in Dagster: the tower domain's one Definitions (resources injected by the root)."""

from functools import partial
from zoneinfo import ZoneInfo

from dagster import DagsterInstance, Definitions, TimeWindowPartitionsDefinition

from memory_pipeline.defs._shared.partitions import cst_day, cst_day_open, cst_month, cst_week
from memory_pipeline.defs._shared.registry import Target, register
from memory_pipeline.defs._shared.resources import initialized
from memory_pipeline.defs.tower import assets
from memory_pipeline.defs.tower.assets import tower_assets
from memory_pipeline.defs.tower.checks import tower_checks
from memory_pipeline.defs.tower.jobs import tower_jobs
from memory_pipeline.defs.tower.resources import TowerResource
from memory_pipeline.defs.tower.schedules import tower_schedules
from memory_pipeline.defs.tower.sensors import tower_sensors
from memory_pipeline.lib.timeutil import local_date
from memory_pipeline.tower import summaries
from memory_pipeline.tower.logic import Granularity

defs = Definitions(
    assets=tower_assets,
    asset_checks=tower_checks,
    jobs=tower_jobs,
    schedules=tower_schedules,
    sensors=tower_sensors,
)


def summaries_left_failed(
    g: Granularity,
    defn: TimeWindowPartitionsDefinition,
    defs: Definitions,
    keys: list[str],
    as_of: str,
    instance: DagsterInstance,
) -> dict[str, str]:
    """Mode "changed" of the summary partitions: one with a window left failed and backing off (the
    run succeeded, so it shows materialized) is re-run; a run of the partition is an explicit call,
    which retries it whatever its backoff. A given-up window alone re-runs nothing: a run does not
    retry it (only recompute does)."""
    resource = (defs.resources or {})["tower"]
    assert isinstance(resource, TowerResource)
    with initialized(resource, instance) as tower:  # environment variables resolved
        store, tz = tower.store(), tower.tz()
    key_tz = ZoneInfo(defn.timezone)
    periods = {local_date(defn.time_window_for_partition_key(k).start, key_tz): k for k in keys}
    out = {}
    for period, found in summaries.left_failed(store, g, list(periods), tz).items():
        failed = [f["window"]["window"] for f in found if not f["given_up"]]
        if failed:
            more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
            out[periods[period]] = f"{len(failed)} window{'s' if len(failed) > 1 else ''} failed ({failed[0]}{more})"
    return out


for _name, _target in {
    "tower_windows": Target("tower_structural_job", cst_day_open, assets.tower_day_windows.key, configurable=False),
    "tower_week_windows": Target("tower_week_windows_job", cst_week, assets.tower_week_windows.key, configurable=False),
    "tower_month_windows": Target(
        "tower_month_windows_job", cst_month, assets.tower_month_windows.key, configurable=False
    ),
}.items():
    register(_name, _target)

# The summaries (month: only types that raised their summary cap to `month` have them); a partition
# left with a failed window is re-run by backfill's mode "changed".
for _asset, _g, _defn in (
    (assets.tower_day_summaries, Granularity.DAY, cst_day),
    (assets.tower_week_summaries, Granularity.WEEK, cst_week),
    (assets.tower_month_summaries, Granularity.MONTH, cst_month),
):
    _key = _asset.key.to_user_string()
    register(
        _key,
        Target(f"{_key}_job", _defn, _asset.key, configurable=False, changed=partial(summaries_left_failed, _g, _defn)),
    )
