"""Seed 004 in Dagster: the tower domain's one Definitions (resources injected by the root)."""

from datetime import date
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
from memory_pipeline.lib.timeutil import local_date, utcnow
from memory_pipeline.tower import summaries, windows
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


def windows_late(defs: Definitions, keys: list[str], as_of: str, instance: DagsterInstance) -> dict[str, str]:
    """Mode "changed" of the day windows: a closed day whose entries, or messages fed into the
    activity type, arrived after its windows were materialized (``tower_window_runs``, the late-data
    sensor's record) is re-run. The sensor looks back 31 days; this looks back to the first day asked."""
    if not keys:
        return {}
    resource = (defs.resources or {})["tower"]
    assert isinstance(resource, TowerResource)
    with initialized(resource, instance) as tower:  # environment variables resolved
        store, tz, activity = tower.store(), tower.tz(), tower.cfg().activity_type
    days = {date.fromisoformat(k): k for k in keys}
    now = utcnow()
    lookback = max(31, (local_date(now, tz) - min(days)).days + 1)
    late = windows.stale_days(store, tz, now, activity_type=activity, lookback_days=lookback)
    return {
        days[d]: f"late data: {n} entr{'y' if n == 1 else 'ies'} arrived after its windows were materialized"
        for d, n in sorted(late.items())
        if d in days
    }


for _name, _target in {
    "tower_windows": Target(
        "tower_structural_job", cst_day_open, assets.tower_day_windows.key, configurable=False, changed=windows_late
    ),
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
