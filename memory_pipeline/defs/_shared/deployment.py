"""Past one machine, as deployment settings of the one code location (the assets never change):
where a run's steps execute (MEMORY_EXECUTOR) and how a backfill is split into runs
(MEMORY_BACKFILL_MAX_PARTITIONS_PER_RUN).

- multiprocess (default): Dagster's executor, a process per step on the run worker's host, forked
  from a forkserver that has loaded the code location once per run (Dagster's default spawns each
  step, and each spawned step imports the code location again, 2–3 s of CPU).
- celery: dagster-celery's executor; every step is a task on the broker (Redis, which also keeps
  the results), taken by any `dagster-celery worker` (deploy/celery/celery.yaml). The broker is
  given by variable name (`{"env": ...}`), so the UI never shows its URL.
- k8s: dagster-k8s' k8s_job_executor; every step is a Kubernetes Job, configured like the
  K8sRunLauncher's run pods (deploy/k8s/dagster.yaml).

Locks and budgets hold across workers because none lives in a process: partition leases are rows
of the store (`partition_leases`), the `llm` pool and the run queue are the instance's (PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dagster import (
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    ExecutorDefinition,
    OpDefinition,
    SourceAsset,
    multi_or_in_process_executor,
)

# Not exported by dagster, though Definitions(assets=...) names it.
from dagster._core.definitions.assets.definition.cacheable_assets_definition import CacheableAssetsDefinition

from memory_pipeline.lib import settings
from memory_pipeline.lib.kinds import ExecutorKind

# Assets of this pool are the costly ones, whose backfills are worth sharing among workers.
LLM_POOL = "llm"


# The module a step's forkserver imports before it forks any step: the code location.
CODE_LOCATION_MODULE = "memory_pipeline.definitions"

# One of what Definitions(assets=...) takes (dagster's TAssets, less its None).
DefinitionsAsset = AssetsDefinition | AssetSpec | SourceAsset | CacheableAssetsDefinition


def forkserver_unless_chosen(config: dict[str, Any]) -> dict[str, Any]:
    """Run config of Dagster's default executor with the steps started by a forkserver where the run
    chooses no start method. The forkserver has loaded the code location, so each step forks from a
    loaded process instead of importing it again; a run may still choose ``spawn``, or
    ``in_process``. The module is named: Dagster reads ``forkserver: {}`` as an empty preload list
    (``check.opt_list_elem``), not as its documented default of the job's module."""
    if "multiprocess" not in config:
        return config
    forkserver = {"forkserver": {"preload_modules": [CODE_LOCATION_MODULE]}}
    return {"multiprocess": {"start_method": forkserver, **config["multiprocess"]}}


def executor() -> ExecutorDefinition:
    """The executor of every job of the code location."""
    kind = settings.executor_kind()
    if kind is ExecutorKind.CELERY:
        from memory_pipeline.defs._shared.celery_executor import celery_executor  # only where it is used

        return celery_executor.configured(
            {
                "broker": {"env": settings.ENV_CELERY_BROKER_URL},
                "backend": {"env": settings.ENV_CELERY_BROKER_URL},  # Redis is broker and result store
            },
            name="celery",
        )
    if kind is ExecutorKind.K8S:
        from dagster_k8s import k8s_job_executor

        # Unconfigured: the step Jobs take the image, namespace, service account and environment
        # of the K8sRunLauncher's run pods (instance config), so the two cannot drift apart.
        return k8s_job_executor
    # Same name and run config as Dagster's default, so launchpads and saved run configs hold.
    return multi_or_in_process_executor.configured(
        forkserver_unless_chosen,
        name=multi_or_in_process_executor.name,
        config_schema=multi_or_in_process_executor.config_schema.as_field(),
    )


def range_backfill_policy() -> BackfillPolicy:
    """One run per range by default; N > 0 splits a backfill into runs of at most N partitions."""
    n = settings.backfill_max_partitions_per_run()
    return BackfillPolicy.multi_run(max_partitions_per_run=n) if n else BackfillPolicy.single_run()


def with_deployment_backfill_policy(assets: Iterable[DefinitionsAsset]) -> list[DefinitionsAsset]:
    """Assets of the `llm` pool declared one run per range (BackfillPolicy.single_run) get the
    deployment's policy. Others keep theirs: an export writes one DuckDB file under one lock, so
    splitting it gains nothing."""
    policy = range_backfill_policy()
    single = BackfillPolicy.single_run()
    out: list[DefinitionsAsset] = []
    for asset in assets:
        if (
            policy != single
            and isinstance(asset, AssetsDefinition)
            and asset.backfill_policy == single
            and isinstance(asset.node_def, OpDefinition)
            and asset.node_def.pool == LLM_POOL
        ):
            asset = asset.with_attributes(backfill_policy=policy)
        out.append(asset)
    return out
