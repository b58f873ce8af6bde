"""The code location: every domain's assets, checks, jobs, schedules and sensors."""

from __future__ import annotations

from dagster import Definitions

from memory_pipeline.resources import default_resources
from memory_pipeline.temporal.assets import raw_conversation_events, temporal_assets
from memory_pipeline.temporal.checks import temporal_checks, temporal_freshness_checks, temporal_freshness_sensor
from memory_pipeline.temporal.resources import TemporalResource
from memory_pipeline.temporal.schedules import temporal_jobs, temporal_schedules
from memory_pipeline.temporal.sensors import temporal_sensors


def build_defs(resources: dict | None = None) -> Definitions:
    """The code location; tests pass their own shared resources (a schema on PostgreSQL, Redis db 15).
    Each domain's resource is composed from the shared ones."""
    resources = dict(resources if resources is not None else default_resources())
    resources["temporal"] = TemporalResource(
        memory_store=resources["memory_store"],
        roll_cache=resources["roll_cache"],
        llm=resources["llm"],
        memory_config=resources["memory_config"],
    )
    return Definitions(
        assets=[raw_conversation_events, *temporal_assets],
        asset_checks=[*temporal_checks, *temporal_freshness_checks],
        jobs=temporal_jobs,
        schedules=temporal_schedules,
        sensors=[*temporal_sensors, temporal_freshness_sensor],
        resources=resources,
    )


defs = build_defs()
