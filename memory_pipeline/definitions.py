"""The code location: merges every domain's Definitions and injects the resources."""

from __future__ import annotations

import warnings

from dagster import AssetSpec, Definitions
from dagster._utils.warnings import PreviewWarning

# Modules, not their `defs`: Dagster's loader (workspace.yaml, `dagster dev`) refuses a module that
# holds more than one Definitions object at module scope. Importing memory_pipeline.defs first sets
# the filter of Dagster's beta/preview/superseded notices (defs/__init__.py).
from memory_pipeline.defs._shared import definitions as shared_domain
from memory_pipeline.defs._shared import deployment
from memory_pipeline.defs.access import definitions as access_domain
from memory_pipeline.defs.analyst import definitions as analyst_domain
from memory_pipeline.defs.analyst.resources import AnalystShared, analyst_resources
from memory_pipeline.defs.conversation import definitions as conversation_domain
from memory_pipeline.defs.conversation.resources import conversation_resources
from memory_pipeline.defs.events import definitions as events_domain
from memory_pipeline.defs.objects import definitions as objects_domain
from memory_pipeline.defs.objects.resources import objects_resources
from memory_pipeline.defs.recall import definitions as recall_domain
from memory_pipeline.defs.sleep import definitions as sleep_domain
from memory_pipeline.defs.sleep.resources import sleep_resources
from memory_pipeline.defs.temporal import definitions as temporal_domain
from memory_pipeline.defs.temporal.resources import temporal_resources
from memory_pipeline.defs.tower import definitions as tower_domain
from memory_pipeline.defs.tower.resources import tower_resources
from memory_pipeline.resources import SharedResources, default_resources

STORE_TAG = "memory_pipeline/store"


def build_defs(resources: AnalystShared | None = None) -> Definitions:
    """Tests pass their own shared resources (a schema on PostgreSQL, Redis db 15), and may pass
    their own ``analyst``; each domain's resource is composed from the shared ones. The executor
    and the backfill split are deployment settings (defs/_shared/deployment.py), read here at each
    build."""
    shared: SharedResources = resources if resources is not None else default_resources()
    store_kind = shared["memory_store"].kind

    def with_store_kind(spec: AssetSpec) -> AssetSpec:
        # kinds name the real technology of the store behind an asset: postgres or sqlite.
        if STORE_TAG not in spec.tags:
            return spec
        tags = {k: v for k, v in spec.tags.items() if k != STORE_TAG}
        return spec.replace_attributes(tags=tags, kinds={*spec.kinds, store_kind})

    merged = Definitions.merge(
        shared_domain.defs,
        events_domain.defs,
        temporal_domain.defs,
        tower_domain.defs,
        sleep_domain.defs,
        conversation_domain.defs,
        objects_domain.defs,
        recall_domain.defs,
        access_domain.defs,
        analyst_domain.defs,
    )
    located = Definitions(
        assets=deployment.with_deployment_backfill_policy(merged.assets or []),
        asset_checks=merged.asset_checks,
        jobs=merged.jobs,
        schedules=merged.schedules,
        sensors=merged.sensors,
        resources={
            **shared,
            **temporal_resources(shared),
            **tower_resources(shared),
            **sleep_resources(shared),
            **conversation_resources(shared),
            **objects_resources(shared),
            **analyst_resources(shared, resources.get("analyst") if resources is not None else None),
        },
        executor=deployment.executor(),
    )
    # Preview: filtered in memory_pipeline/defs/__init__.py, and here as well for callers that reset
    # the filters (pytest does, per test). Its behaviour here is tested.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=PreviewWarning)
        return located.map_asset_specs(func=with_store_kind)


defs = build_defs()
