"""A snapshot of the code location: asset keys, groups, kinds, partitions, dependencies, checks,
jobs, schedules with their crons, sensors and the resource configuration the UI shows. A domain
that lands, or a renamed cron, shows up here first (`pytest --snapshot-update` after review)."""

from __future__ import annotations

import json
import os

import pytest

from memory_pipeline.definitions import build_defs
from memory_pipeline.lib.settings import ConfigError
from memory_pipeline.resources import default_resources

SECRET = "sk-this-must-never-be-shown"
PASSWORD_URL = "postgresql://memory:hunter2@db.internal:5432/memory"


@pytest.fixture
def production_env(monkeypatch):
    monkeypatch.setenv("MEMORY_DATABASE_URL", PASSWORD_URL)
    monkeypatch.setenv("REDIS_URL", "redis://:hunter2@cache.internal:6379/0")
    monkeypatch.setenv("MEMORY_LLM_MODEL", "openai/gpt-4o-mini")
    monkeypatch.setenv("MEMORY_LLM_API_BASE", "https://llm.internal/v1")
    monkeypatch.setenv("MEMORY_LLM_API_KEY", SECRET)
    monkeypatch.setenv("MEMORY_CONFIG_FILE", "/etc/memory/memory.yaml")


def _partitions(defn) -> str | None:
    if defn is None:
        return None
    fmt = getattr(defn, "fmt", None)
    return f"{type(defn).__name__}({fmt}, {getattr(defn, 'timezone', None)}, end_offset={defn.end_offset})"


def describe(defs) -> dict:
    graph = defs.resolve_asset_graph()
    assets = {}
    for node in sorted(graph.asset_nodes, key=lambda n: n.key.to_user_string()):
        assets[node.key.to_user_string()] = {
            "group": node.group_name,
            "kinds": sorted(node.kinds),
            "partitions": _partitions(node.partitions_def),
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "pool": node.pools and sorted(node.pools),
            "backfill_policy": str(node.backfill_policy) if node.backfill_policy else None,
        }
    checks = sorted(f"{k.asset_key.to_user_string()}:{k.name}" for k in graph.asset_check_keys)
    repo = defs.get_repository_def()
    jobs = {j.name: j.description for j in sorted(repo.get_all_jobs(), key=lambda j: j.name) if j.name != "__ASSET_JOB"}
    schedules = {
        s.name: {
            "cron": s.cron_schedule,
            "tz": s.execution_timezone,
            "job": s.job_name,
            "status": str(s.default_status),
        }
        for s in sorted(repo.schedule_defs, key=lambda s: s.name)
    }
    sensors = {
        s.name: {"status": str(s.default_status), "has_description": bool(s.description)}
        for s in sorted(repo.sensor_defs, key=lambda s: s.name)
    }
    executors = sorted({j.executor_def.name for j in repo.get_all_jobs()})
    return {
        "assets": assets,
        "checks": checks,
        "jobs": jobs,
        "schedules": schedules,
        "sensors": sensors,
        "executors": executors,
    }


def resource_config_shown(defs) -> dict:
    """What the UI's Resources page and GraphQL show: each resource's configured values."""
    repo = defs.get_repository_def()
    out = {}
    for name, resource in sorted(repo.get_top_level_resources().items()):
        schema = resource.config_schema
        out[name] = json.loads(schema.default_value_as_json_str) if schema.default_provided else {}
    return out


def test_definitions_snapshot(snapshot):
    assert describe(build_defs()) == snapshot


@pytest.fixture
def distributed_env(monkeypatch):
    """Past one machine: steps on Celery workers (Redis broker), backfills split into runs of 7."""
    monkeypatch.setenv("MEMORY_EXECUTOR", "celery")
    monkeypatch.setenv("MEMORY_CELERY_BROKER_URL", "redis://:hunter2@cache.internal:6379/9")
    monkeypatch.setenv("MEMORY_BACKFILL_MAX_PARTITIONS_PER_RUN", "7")


def test_definitions_snapshot_past_one_machine(distributed_env, snapshot):
    """The same code location on Celery with bounded backfill runs: only the executor and the
    LLM assets' backfill policy differ from the default (the assets do not change)."""
    distributed = describe(build_defs())
    assert distributed == snapshot
    for name in ("MEMORY_EXECUTOR", "MEMORY_CELERY_BROKER_URL", "MEMORY_BACKFILL_MAX_PARTITIONS_PER_RUN"):
        os.environ.pop(name)  # distributed_env's monkeypatch restores them
    default = describe(build_defs())
    assert default["executors"] == ["multi_or_in_process_executor"] and distributed["executors"] == ["celery"]
    changed = {k for k, a in default["assets"].items() if a != distributed["assets"][k]}
    assert changed == {
        "temporal_day_chunks",
        "temporal_peer_rolls",
        "temporal_day_summaries",
        "temporal_month_summaries",
        "temporal_year_summaries",
        "tower_day_summaries",
        "tower_week_summaries",
        "tower_month_summaries",
        "sleep_light_sleep",
        "sleep_deep_sleep",
        "sleep_autobiography",
        "objects_event_outcomes",
    }
    for key in changed:
        assert default["assets"][key]["backfill_policy"] == "BackfillPolicy.single_run()"
        assert distributed["assets"][key] == {
            **default["assets"][key],
            "backfill_policy": "BackfillPolicy.multi_run(max_partitions_per_run=7)",
        }
    # The analyst exports keep one run per range: one DuckDB file, one writer at a time.
    assert distributed["assets"]["analyst_messages"]["backfill_policy"] == "BackfillPolicy.single_run()"
    assert {k: v for k, v in distributed.items() if k not in ("assets", "executors")} == {
        k: v for k, v in default.items() if k not in ("assets", "executors")
    }


def test_steps_fork_from_a_forkserver_that_has_loaded_the_code_location(monkeypatch):
    """On one machine (the default executor) a run's steps are forked by a forkserver that imported
    the code location once, not spawned to import it again each; a run may still choose spawn or
    in_process, as with Dagster's default executor, whose name and run config it keeps."""
    import yaml
    from dagster import DagsterInstance
    from dagster._core.definitions.reconstruct import ReconstructableJob, ReconstructableRepository
    from dagster._core.executor.init import InitExecutorContext
    from dagster._core.executor.multiprocess import MultiprocessExecutor
    from dagster._core.system_config.objects import ResolvedRunConfig

    from memory_pipeline.defs._shared.deployment import CODE_LOCATION_MODULE
    from memory_pipeline.lib.settings import REPO_ROOT

    monkeypatch.delenv("MEMORY_EXECUTOR", raising=False)
    (location,) = yaml.safe_load((REPO_ROOT / "workspace.yaml").read_text())["load_from"]
    assert location["python_module"]["module_name"] == CODE_LOCATION_MODULE  # the module preloaded
    job = build_defs().get_job_def("temporal_day_job")
    assert job.executor_def.name == "multi_or_in_process_executor"
    recon = ReconstructableJob(
        ReconstructableRepository.for_module(CODE_LOCATION_MODULE, "defs", str(REPO_ROOT)), "temporal_day_job"
    )

    def executor(run_config):
        config = ResolvedRunConfig.build(job, run_config).execution.execution_engine_config
        with DagsterInstance.ephemeral() as instance:
            context = InitExecutorContext(
                job=recon, executor_def=job.executor_def, executor_config=config, instance=instance
            )
            return config, job.executor_def.executor_creation_fn(context)

    config, default = executor({})
    assert config["multiprocess"]["start_method"] == {"forkserver": {"preload_modules": [CODE_LOCATION_MODULE]}}
    assert isinstance(default, MultiprocessExecutor)
    assert (default._start_method, default._explicit_forkserver_preload) == ("forkserver", [CODE_LOCATION_MODULE])
    chosen = {"execution": {"config": {"multiprocess": {"start_method": {"spawn": {}}, "max_concurrent": 3}}}}
    config, spawned = executor(chosen)
    assert config["multiprocess"]["start_method"] == {"spawn": {}} and spawned._start_method == "spawn"
    assert spawned._max_concurrent == 3
    config, _ = executor({"execution": {"config": {"in_process": {}}}})
    assert set(config) == {"in_process"}


def test_deployment_settings_are_refused_by_name(monkeypatch):
    monkeypatch.setenv("MEMORY_EXECUTOR", "spark")
    with pytest.raises(ConfigError, match=r"MEMORY_EXECUTOR: 'spark' is not one of multiprocess, celery, k8s"):
        build_defs()
    monkeypatch.setenv("MEMORY_EXECUTOR", "celery")
    monkeypatch.delenv("MEMORY_CELERY_BROKER_URL", raising=False)
    with pytest.raises(ConfigError, match="MEMORY_EXECUTOR=celery needs MEMORY_CELERY_BROKER_URL"):
        build_defs()
    monkeypatch.setenv("MEMORY_EXECUTOR", "k8s")
    monkeypatch.setenv("MEMORY_BACKFILL_MAX_PARTITIONS_PER_RUN", "-2")
    with pytest.raises(ConfigError, match="MEMORY_BACKFILL_MAX_PARTITIONS_PER_RUN: must not be negative"):
        build_defs()
    monkeypatch.setenv("MEMORY_BACKFILL_MAX_PARTITIONS_PER_RUN", "2")
    # the LLM client's settings, read only when a run starts, are refused before any run too
    monkeypatch.setenv("MEMORY_LLM_BREAKER_FAILURES", "-3")
    with pytest.raises(ConfigError, match="MEMORY_LLM_BREAKER_FAILURES: must not be negative"):
        build_defs()
    monkeypatch.setenv("MEMORY_LLM_BREAKER_FAILURES", "5")
    monkeypatch.setenv("MEMORY_LLM_TIMEOUT_SECONDS", "0")
    with pytest.raises(ConfigError, match="MEMORY_LLM_TIMEOUT_SECONDS: must be greater than 0"):
        build_defs()
    monkeypatch.setenv("MEMORY_LLM_TIMEOUT_SECONDS", "60")
    # a model litellm cannot call: each call of each step failed on litellm's several-line text
    monkeypatch.setenv("MEMORY_LLM_MODEL", "nosuchprovider/foo")
    with pytest.raises(ConfigError, match="MEMORY_LLM_MODEL 'nosuchprovider/foo': names no provider litellm knows"):
        build_defs()


def test_the_celery_broker_is_shown_by_variable_name(distributed_env):
    """The repository snapshot (what the webserver serves the UI) never holds the broker URL."""
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster._serdes import serialize_value

    repo = build_defs().get_repository_def()
    assert repo.get_job("temporal_day_job").executor_def.name == "celery"
    shown = serialize_value(RepositorySnap.from_def(repo))
    assert "hunter2" not in shown and "cache.internal" not in shown


def test_every_automation_says_what_it_does():
    repo = build_defs().get_repository_def()
    for automation in [*repo.schedule_defs, *repo.sensor_defs]:
        assert automation.description, f"{automation.name} has no description"


def test_urls_and_keys_are_shown_by_variable_name_never_by_value(production_env):
    shown = resource_config_shown(build_defs(default_resources()))
    text = json.dumps(shown)
    assert SECRET not in text and "hunter2" not in text and "llm.internal" not in text
    assert shown["memory_store"]["database_url"] == {"env": "MEMORY_DATABASE_URL"}
    assert shown["kv_cache"]["redis_url"] == {"env": "REDIS_URL"}
    assert shown["llm"]["api_key"] == {"env": "MEMORY_LLM_API_KEY"}
    assert shown["llm"]["api_base"] == {"env": "MEMORY_LLM_API_BASE"}
    assert shown["memory_config"]["config_file"] == {"env": "MEMORY_CONFIG_FILE"}


def test_kinds_name_the_store_behind_the_assets(production_env):
    graph = build_defs(default_resources()).resolve_asset_graph()
    kinds = {n.key.to_user_string(): n.kinds for n in graph.asset_nodes}
    assert "postgres" in kinds["temporal_day_summaries"] and "sqlite" not in kinds["temporal_day_summaries"]
    assert "postgres" in kinds["raw_conversation_events"]
    assert {"redis", "llm"} <= kinds["temporal_system_rolls"]


def test_the_code_location_loads_as_workspace_yaml_and_dagster_dev_load_it():
    """Dagster's loader refuses a module with more than one Definitions object at module scope."""
    from dagster._core.workspace.autodiscovery import loadable_targets_from_python_module

    from memory_pipeline.lib.settings import REPO_ROOT

    (target,) = loadable_targets_from_python_module("memory_pipeline.definitions", str(REPO_ROOT))
    assert target.attribute == "defs"


def test_every_dependency_is_an_asset_the_code_location_declares():
    # Domains name each other's assets by key (defs/_shared/keys.py, the analyst's upstreams): a
    # misspelt key would silently become an external asset with no producer.
    from dagster import AssetsDefinition, AssetSpec

    defs = build_defs()
    declared = set()
    for item in defs.assets or []:
        declared |= set(item.keys) if isinstance(item, AssetsDefinition) else {item.key}
        assert isinstance(item, AssetsDefinition | AssetSpec), type(item)
    dangling = {
        f"{node.key.to_user_string()} <- {parent.to_user_string()}"
        for node in defs.resolve_asset_graph().asset_nodes
        for parent in node.parent_keys
        if parent not in declared
    }
    assert dangling == set()
