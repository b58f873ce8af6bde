"""The temporal repair as Dagster runs: what the late-data record (``temporal_period_runs``) shows
stale (late messages, new worlds, child rows written since) is re-run and nothing else: stale days,
then the months above them, then the years, one run per contiguous span, then the system rolls
when one of today's roll scopes read a stale period. ``memory-pipeline reconcile`` and the
benchmark call it; ``temporal_reconcile_sensor`` requests the same partitions from the daemon."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dagster import DagsterInstance, Definitions

from memory_pipeline.defs._shared.resources import initialized
from memory_pipeline.defs._shared.run_config import check_as_of
from memory_pipeline.lib.timeutil import parse_instant, utcnow
from memory_pipeline.operations.runner import (
    RunSummary,
    _defs,
    get_instance,
    materialize,
    run_system_rolls,
)
from memory_pipeline.temporal import reconcile

WINDOWS = ("day", "month", "year")


@dataclass
class RepairReport:
    runs: list[RunSummary] = field(default_factory=list)
    partitions: int = 0  # partitions re-run, all windows
    system_rolls: RunSummary | None = None
    stale: reconcile.Staleness = field(default_factory=reconcile.Staleness)  # what was found before
    left: int = 0  # periods stale again after the repair (input ingested meanwhile)
    stopped: str = ""  # why the repair stopped early (a run failed)

    @property
    def success(self) -> bool:
        return (
            not self.stopped
            and all(r.success for r in self.runs)
            and (self.system_rolls is None or self.system_rolls.success)
        )


def repair(
    *,
    as_of: str = "",
    instance: DagsterInstance | None = None,
    defs: Definitions | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RepairReport:
    """Re-run exactly the stale periods (as of ``as_of``, default now): days, then months, then
    years, one run per contiguous span (a month is never built from a day that failed: the repair
    stops at the first failed run), then the system rolls if they read a stale period."""
    as_of = check_as_of(as_of)
    defs = _defs(defs)
    instance = instance or get_instance()
    with initialized((defs.resources or {})["temporal"], instance) as temporal:  # environment resolved
        store, tz = temporal.memory_store.store(), temporal.memory_config.zone()
    now = min(parse_instant(as_of), utcnow()) if as_of else None
    report = RepairReport(stale=reconcile.stale_periods(store, tz, now))
    spans = [
        (window, first, last)
        for window in WINDOWS
        for first, last in reconcile.spans(window, [p.period_start for p in report.stale.of(window)])
    ]
    for i, (window, first, last) in enumerate(spans):
        op = materialize(
            window,
            reconcile.period_key(window, first),
            reconcile.period_key(window, last),
            mode="rebuild",
            as_of=as_of,
            instance=instance,
            defs=defs,
        )
        report.runs += op.runs
        report.partitions += op.partitions
        if progress:
            progress(i + 1, len(spans))
        if not op.success:
            report.stopped = f"a {window} run failed ({op.runs[-1].error.splitlines()[0] if op.runs else 'no run'})"
            return report
    if report.stale.needs_system_rolls:
        report.system_rolls = run_system_rolls(as_of, instance=instance, defs=defs)
    report.left = len(reconcile.stale_periods(store, tz, now).periods)
    return report
