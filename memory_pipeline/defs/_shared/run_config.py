"""Run-config validation shared by the assets' config and the operator commands: a bad ``as_of`` or
world is refused naming the option before any run is launched (the CLI) or any row written (a run
launched from the UI)."""

from __future__ import annotations

from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.text import shown
from memory_pipeline.lib.timeutil import parse_instant


class RangeError(ValueError):
    pass


def check_as_of(as_of: str) -> str:
    """'' (the real now) or an ISO datetime with an offset in the supported range, normalized;
    RangeError before any run is launched otherwise."""
    if not as_of:
        return ""
    try:
        return parse_instant(as_of).isoformat()
    except ValueError as exc:
        raise RangeError(f"--as-of {shown(as_of)} {exc}") from None


def check_worlds(worlds: list[str] | None) -> list[str]:
    for world in worlds or []:
        problem = validate_id(world)
        if problem:
            raise RangeError(f"--world {shown(world)}: {problem}")
    return list(worlds or [])
