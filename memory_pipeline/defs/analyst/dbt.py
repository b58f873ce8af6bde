"""The dbt project in Dagster (dagster-dbt): every model an asset ``analyst_<model>`` in group
analyst, downstream of the export asset each source is; dbt tests as asset checks.

Two definitions over one manifest. The daily marts (dbt tag ``cst_day``) are partitioned by CST
day and get their run's partition range (``_build`` writes it into the file they build); each
also depends, partition to partition, on the exports its staging views read, so a day exported
again re-runs exactly that day. Everything else (the staging views, coverage, lineage) is not
partitioned and runs first. Each build runs on a private copy of the DuckDB file that replaces the
published one when dbt ends (``analyst.files.publishing``): readers are never blocked and never
see half a build."""

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import duckdb
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetRecordsFilter,
    AssetSelection,
    AssetSpec,
    Failure,
    Output,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)
from dagster._utils import run_with_concurrent_update_guard
from dagster_dbt import DagsterDbtTranslator, DbtCliResource, dbt_assets
from dagster_dbt.core.dbt_cli_invocation import PARTIAL_PARSE_FILE_NAME as PARTIAL_PARSE

from memory_pipeline.analyst.files import AnalyticsFiles, prune_dbt_builds, publishing
from memory_pipeline.analyst.registry import BY_NAME
from memory_pipeline.defs._shared.partitions import cst_day_open
from memory_pipeline.defs.analyst.assets import DUCKDB_POOL, GROUP, WHOLE_EXPORTS, export_key
from memory_pipeline.defs.analyst.automation import Condition, after_upstream
from memory_pipeline.defs.analyst.project import analytics_dbt, dbt_executable
from memory_pipeline.defs.analyst.resources import AnalystResource

DAILY_TAG = "cst_day"


def prepared_manifest() -> Path:
    """``dagster dev`` re-parses on every load, as dagster-dbt's own preparer does there, but with
    this environment's dbt (its preparer runs the ``dbt`` on PATH, and `memory-pipeline ui` runs
    without `.venv/bin` on it: the code location failed to load); elsewhere the manifest comes from
    ``make`` (dagster-dbt project prepare-and-package), and one that is missing or older than a
    file of the project (a fresh clone under a bare ``pytest``, an edited model) is parsed here.
    The project has no packages (no ``dbt deps``)."""
    manifest = analytics_dbt.manifest_path
    root = analytics_dbt.project_dir
    sources = [root / "dbt_project.yml", root / "profiles.yml"]
    sources += [p for folder in ("models", "macros", "tests") for p in (root / folder).rglob("*") if p.is_file()]
    dev = analytics_dbt.preparer.using_dagster_dev()
    if dev or not manifest.exists() or any(p.stat().st_mtime > manifest.stat().st_mtime for p in sources):
        dbt = DbtCliResource(project_dir=analytics_dbt, dbt_executable=dbt_executable())
        # As dagster-dbt's own preparer: processes loading at once parse once, the others wait.

        def parse() -> None:
            dbt.cli(["parse", "--quiet"], target_path=analytics_dbt.target_path).wait()

        run_with_concurrent_update_guard(manifest, parse)
    return manifest


MANIFEST = prepared_manifest()


def _whole_table_models(manifest: Mapping[str, Any]) -> set[str]:
    return {
        n["name"]
        for n in manifest["nodes"].values()
        if n["resource_type"] == "model" and DAILY_TAG not in n.get("tags", [])
    }


def _sources_behind(manifest: Mapping[str, Any], unique_id: str) -> set[str]:
    """The source tables a node reads, through any models in between."""
    out: set[str] = set()
    stack = list(manifest["nodes"][unique_id]["depends_on"]["nodes"])
    while stack:
        uid = stack.pop()
        if uid in manifest["sources"]:
            out.add(manifest["sources"][uid]["name"])
        elif uid in manifest["nodes"]:
            stack.extend(manifest["nodes"][uid]["depends_on"]["nodes"])
    return out


_MANIFEST = json.loads(MANIFEST.read_text(encoding="utf-8"))
DAILY_MARTS = tuple(
    sorted(
        AssetKey(f"analyst_{n['name']}")
        for n in _MANIFEST["nodes"].values()
        if n["resource_type"] == "model" and DAILY_TAG in n.get("tags", [])
    )
)
# Upstreams of a daily mart that are not partitioned: their update must not request every day.
_WHOLE_UPSTREAMS = AssetSelection.assets(
    *(export_key(e.name) for e in WHOLE_EXPORTS),
    *(AssetKey(f"analyst_{m}") for m in _whole_table_models(_MANIFEST)),
)


class AnalystDbtTranslator(DagsterDbtTranslator):
    """Models are ``analyst_<model>`` in group analyst; a source is the export asset
    ``analyst_<table>`` that writes it; a daily mart also depends on the exports by day behind it."""

    def get_asset_spec(self, manifest: Mapping[str, Any], unique_id: str, project: Any) -> AssetSpec:
        spec = super().get_asset_spec(manifest, unique_id, project)
        props = self.get_resource_props(manifest, unique_id)
        if props["resource_type"] != "model" or DAILY_TAG not in props.get("tags", []):
            return spec
        days = sorted(t for t in _sources_behind(manifest, unique_id) if t in BY_NAME and BY_NAME[t].by_day)
        return spec.replace_attributes(deps=[*spec.deps, *(AssetDep(export_key(t)) for t in days)])

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> AssetKey:
        return AssetKey(f"analyst_{dbt_resource_props['name']}")

    def get_asset_check_spec(
        self, asset_spec: AssetSpec, manifest: Mapping[str, Any], unique_id: str, project: Any
    ) -> AssetCheckSpec | None:
        """A test of a daily mart is a check partitioned like the mart: its result is reported per
        partition (:func:`per_partition`), so every day of the mart shows its own."""
        spec = super().get_asset_check_spec(asset_spec, manifest, unique_id, project)
        if spec is None or spec.asset_key not in DAILY_MARTS:
            return spec
        return AssetCheckSpec(
            spec.name,
            asset=spec.asset_key,
            description=spec.description,
            additional_deps=spec.additional_deps,
            blocking=spec.blocking,
            metadata=spec.metadata,
            automation_condition=spec.automation_condition,
            partitions_def=cst_day_open,
        )

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        return GROUP

    def get_automation_condition(self, dbt_resource_props: Mapping[str, Any]) -> Condition | None:
        if dbt_resource_props["resource_type"] == "source":
            return None
        daily = DAILY_TAG in dbt_resource_props.get("tags", [])
        return after_upstream(ignore=_WHOLE_UPSTREAMS if daily else None)


TRANSLATOR = AnalystDbtTranslator()


def _latest_materializations(
    context: AssetExecutionContext, asset_key: AssetKey, keys: list[str]
) -> dict[str, AssetCheckEvaluationTargetMaterializationData]:
    """The newest materialization of each partition ``key`` (this run's, once its output is
    reported): what a check result of that partition is about."""
    out: dict[str, AssetCheckEvaluationTargetMaterializationData] = {}
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=keys), limit=len(keys)
    ).records
    for r in records:  # newest first
        if r.partition_key and r.partition_key not in out:
            out[r.partition_key] = AssetCheckEvaluationTargetMaterializationData(
                storage_id=r.storage_id, run_id=r.run_id, timestamp=r.timestamp
            )
    return out


def per_partition(context: AssetExecutionContext, events: list[Any]) -> Iterator[Any]:
    """A daily build is one step for a range of days, and a dbt test runs once over it; an
    AssetCheckResult carries no partition, so Dagster would record it once without one and every
    partition of the mart would show no check result. So each test's result is reported once per
    partition of the run (the same outcome for each: the test read all of them), tied to that
    partition's materialization, after the models' outputs; then the check's one output."""
    results = [e for e in events if isinstance(e, AssetCheckResult)]
    yield from (e for e in events if not isinstance(e, AssetCheckResult))
    keys = list(context.partition_keys)
    window = f"{keys[0]}..{keys[-1]}" if len(keys) > 1 else keys[0]
    targets: dict[AssetKey, dict[str, AssetCheckEvaluationTargetMaterializationData]] = {}
    for result in results:
        assert result.asset_key is not None and result.check_name is not None  # dagster-dbt names both
        check_key = AssetCheckKey(result.asset_key, result.check_name)
        spec = context.assets_def.get_spec_for_check_key(check_key)
        if result.asset_key not in targets:
            targets[result.asset_key] = _latest_materializations(context, result.asset_key, keys)
        for key in keys:
            yield AssetCheckEvaluation(
                asset_key=result.asset_key,
                check_name=result.check_name,
                passed=result.passed,
                partition=key,
                severity=result.severity,
                description=result.description,
                blocking=spec.blocking,
                target_materialization_data=targets[result.asset_key].get(key),
                metadata={**result.metadata, "evaluated_over_days": window},
            )
        yield Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(check_key))


def _build(
    context: AssetExecutionContext,
    dbt: DbtCliResource,
    analyst: AnalystResource,
    window: tuple[str, str] | None = None,
    per_day: bool = False,
) -> Iterator[Any]:
    """``dbt build`` of the run's selection on a private copy of the file, published when dbt ends
    (whatever it built is whole: dbt replaces a model's table in one statement); the events are
    reported after the new version is published. ``window``: the daily models' CST days, written
    into the copy (``main.dbt_day_window``) rather than passed as vars: dbt parses the whole project
    again whenever its vars change, and with the same vars each build reuses the previous build's
    parse (``reuse_parse``)."""
    files = analyst.files()
    with publishing(files, context.log.warning) as staging:
        if window is not None:
            _day_window(files, staging, window)
        target = dbt_target_path(dbt, context, files)
        reuse_parse(files.dbt_parse_state, target)
        args = ["build", "--vars", json.dumps(analyst.dbt_vars(staging))]
        invocation = dbt.cli(args, context=context, raise_on_error=False, target_path=target)
        events = list(invocation.stream())
        keep_parse(target, files.dbt_parse_state)
        prune_dbt_builds(files)
        if window is not None:
            _day_window(files, staging, None)
    yield from per_partition(context, events) if per_day else events
    if not invocation.is_successful():
        error = invocation.get_error()
        raise Failure(
            description="dbt build failed; the models and tests that ran are reported and the file holds what "
            f"they built. {str(error)[:500] if error else ''}"
        )


def _day_window(files: AnalyticsFiles, staging: Path, window: tuple[str, str] | None) -> None:
    """The table the daily models' ``day_window_filter`` reads, written (``window``) or dropped
    (None) before the file is published."""
    with duckdb.connect(str(staging), config=files.duckdb_config()) as con:
        if window is None:
            con.execute("DROP TABLE IF EXISTS main.dbt_day_window")
        else:
            con.execute(
                "CREATE OR REPLACE TABLE main.dbt_day_window AS SELECT CAST(? AS DATE) AS min_day, CAST(? AS DATE) AS max_day",
                list(window),
            )


def dbt_target_path(dbt: DbtCliResource, context: AssetExecutionContext, files: AnalyticsFiles) -> Path:
    """The build's own target folder (its artifacts and log), named as dagster-dbt names it, among
    the file's last builds (``files.dbt_builds``) rather than in the project's ``target/``, where
    dagster-dbt leaves one per build for ever."""
    return files.dbt_builds / dbt._get_unique_target_path(context=context).name


def reuse_parse(state: Path, target: Path) -> None:
    """The previous build's parse, where dbt looks for it in ``target``: dbt checks it (its version,
    vars, profile and every file's checksum) and parses again whatever differs. (dagster-dbt copies
    the project's own ``target/partial_parse.msgpack`` only, which ``dbt parse`` wrote with the
    default vars: every build parsed the whole project, 7-8 s here against 2 s reused.)"""
    if state.exists():
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(state, target / PARTIAL_PARSE)


def keep_parse(target: Path, state: Path) -> None:
    """The build's parse, kept for the next build of the same file (replaced in one rename)."""
    made = target / PARTIAL_PARSE
    if made.exists():
        tmp = state.with_name(state.name + ".tmp")
        shutil.copyfile(made, tmp)
        os.replace(tmp, state)


@dbt_assets(
    manifest=MANIFEST,
    project=analytics_dbt,
    select=f"tag:{DAILY_TAG}",
    name="analyst_dbt_daily",
    partitions_def=cst_day_open,
    dagster_dbt_translator=TRANSLATOR,
    pool=DUCKDB_POOL,
)
def analyst_dbt_daily(context: AssetExecutionContext, dbt: DbtCliResource, analyst: AnalystResource) -> Iterator[Any]:
    keys = context.partition_key_range
    yield from _build(context, dbt, analyst, (keys.start, keys.end), per_day=True)


@dbt_assets(
    manifest=MANIFEST,
    project=analytics_dbt,
    exclude=f"tag:{DAILY_TAG}",
    name="analyst_dbt_models",
    dagster_dbt_translator=TRANSLATOR,
    pool=DUCKDB_POOL,
)
def analyst_dbt_models(context: AssetExecutionContext, dbt: DbtCliResource, analyst: AnalystResource) -> Iterator[Any]:
    yield from _build(context, dbt, analyst)


analyst_dbt_assets = [analyst_dbt_daily, analyst_dbt_models]
