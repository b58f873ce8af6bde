"""Operator targets (a window name → its job, partitions and asset). Each domain's defs register
theirs; the runner and the CLI look them up through operations/registry.targets()."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dagster import AssetKey, DagsterInstance, Definitions, PartitionsDefinition

# (definitions, partition keys, as_of, instance) -> {key: why it needs a run} of the keys whose rows
# a run would change (mode "changed"); the domain knows from its own records.
ChangedFn = Callable[[Definitions, list[str], str, DagsterInstance], dict[str, str]]


@dataclass(frozen=True)
class Target:
    job: str
    partitions: PartitionsDefinition
    asset_key: AssetKey
    subset: bool = False  # the job holds another asset too: select this one
    configurable: bool = True  # its asset takes the run config (force_llm, worlds, as_of, ...)
    selection: tuple[AssetKey, ...] = ()  # run only these assets of the job (and their checks)
    changed: ChangedFn | None = None  # mode "changed"; without it, "changed" means "missing"
    op: str = ""  # the op taking the run config, when the asset is one of a multi-asset's
    rebuilds: bool = False  # its run config takes ``rebuild`` (mode "rebuild" rewrites unchanged partitions)

    @property
    def op_name(self) -> str:
        return self.op or self.asset_key.path[-1]


_TARGETS: dict[str, Target] = {}


def register(name: str, target: Target) -> None:
    if name in _TARGETS and _TARGETS[name] != target:
        raise ValueError(f"operation target {name!r} is registered twice")
    _TARGETS[name] = target


def registered() -> dict[str, Target]:
    """The targets registered so far: operations/registry.targets() loads the code location first,
    which registers them all."""
    return dict(_TARGETS)
