"""The operator targets of the code location (a window name -> its job, partitions and asset), for
the runner and the CLI; each domain's defs register theirs in defs/_shared/registry.py."""

from __future__ import annotations

from memory_pipeline.defs._shared.registry import Target, registered


def targets() -> dict[str, Target]:
    """Every registered target (importing the code location registers them all)."""
    import memory_pipeline.definitions  # noqa: F401 - each domain's defs register on import

    return registered()
