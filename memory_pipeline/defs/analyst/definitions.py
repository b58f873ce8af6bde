"""The analyst layer in Dagster: the domain's one Definitions (resources injected by the root)."""

from dagster import AssetKey, AssetSelection, AutomationConditionSensorDefinition, Definitions

from memory_pipeline.analyst.registry import EXPORTS
from memory_pipeline.defs._shared.partitions import cst_day_open, cst_month, cst_year
from memory_pipeline.defs._shared.registry import Target, register
from memory_pipeline.defs.analyst.assets import (
    GROUP,
    UPSTREAM,
    analyst_coverage_report,
    analyst_export_assets,
    export_key,
)
from memory_pipeline.defs.analyst.automation import Trigger
from memory_pipeline.defs.analyst.dbt import DAILY_MARTS, analyst_dbt_assets
from memory_pipeline.defs.analyst.jobs import analyst_jobs
from memory_pipeline.lib.kinds import Window

analyst_automation_sensor = AutomationConditionSensorDefinition(
    "analyst_automation_sensor",
    target=AssetSelection.groups(GROUP),
    minimum_interval_seconds=60,
    description="Declarative automation of the analyst layer: a table's export after its upstream writes (the "
    "very days written), then the dbt models reading it, then the picture; tables written outside runs "
    "every 30 minutes. Ships stopped, like every schedule and sensor here; its first tick requests nothing.",
)

defs = Definitions(
    assets=[*analyst_export_assets, *analyst_dbt_assets, analyst_coverage_report],
    jobs=analyst_jobs,
    sensors=[analyst_automation_sensor],
)


# Operator targets (ranges of CST days as runs). A table's day is either the day of its data
# (messages, chunks, summaries: exported along their upstream partitions) or the day its rows were
# written (the LLM ledger and cache, inbox, ingest batches: the days the runs or ingests happened).
# Month and year rows are exported per month and per year.
def _keys(grain: Window, *triggers: Trigger) -> tuple[AssetKey, ...]:
    return tuple(
        export_key(e.name) for e in EXPORTS if e.by_day and e.grain is grain and UPSTREAM[e.name].trigger in triggers
    )


_WHOLE = tuple(export_key(e.name) for e in EXPORTS if not e.by_day)
_DATA_DAY = _keys(Window.DAY, Trigger.ALIGNED)
_WRITE_DAY = _keys(Window.DAY, Trigger.RECENT, Trigger.REFRESH)
_COST_BY_DATA_DAY = AssetKey("analyst_mart_llm_cost_by_data_day")


def _export(selection: tuple[AssetKey, ...]) -> Target:
    return Target("analyst_export_job", cst_day_open, export_key("messages"), configurable=False, selection=selection)


def _marts(selection: tuple[AssetKey, ...] = ()) -> Target:
    return Target("analyst_marts_job", cst_day_open, DAILY_MARTS[0], configurable=False, selection=selection)


for _name, _target in {
    "exports": _export((*_DATA_DAY, *_WRITE_DAY, *_WHOLE)),
    "exports_by_data_day": _export((*_DATA_DAY, *_WHOLE)),
    "exports_by_write_day": _export(_WRITE_DAY),
    "month_exports": Target(
        "analyst_month_export_job", cst_month, export_key("temporal_month_summaries"), configurable=False
    ),
    "year_exports": Target(
        "analyst_year_export_job", cst_year, export_key("temporal_year_summaries"), configurable=False
    ),
    "marts": _marts(),
    # the picture reads the calls by data day, a whole-table mart: rebuilt with the daily ones
    "daily_marts": _marts((*DAILY_MARTS, _COST_BY_DATA_DAY, analyst_coverage_report.key)),
}.items():
    register(_name, _target)
