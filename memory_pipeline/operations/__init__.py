"""Operator actions as real Dagster runs (regenerate / backfill missing / rebuild), for any
domain's registered targets."""

from memory_pipeline.defs._shared.run_config import RangeError, check_as_of, check_worlds
from memory_pipeline.operations.repair import RepairReport, repair
from memory_pipeline.operations.runner import (
    INSTANCE_YAML,
    MODES,
    OperationReport,
    RunSummary,
    dagster_home,
    get_instance,
    materialize,
    materialized,
    partition_keys,
    run_config,
    run_range,
    run_system_rolls,
)

__all__ = [
    "INSTANCE_YAML",
    "MODES",
    "OperationReport",
    "RangeError",
    "RepairReport",
    "RunSummary",
    "check_as_of",
    "check_worlds",
    "dagster_home",
    "get_instance",
    "materialize",
    "materialized",
    "partition_keys",
    "repair",
    "run_config",
    "run_range",
    "run_system_rolls",
]
