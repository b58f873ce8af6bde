"""Seed 003 day order (pure rules). Every stage run of a CST day has one place in a single sequence:
light sleep, deep sleep and autobiography of day D, then those of D+1. A stage reads what the
places before it left (light sleep of D: the memories after day D-1 and D-1's autobiography summary
in its system prompt; deep sleep of D: that plus D's light-sleep writes), so day D's outputs are a
function of D, whatever order or number of times runs are launched:

- a stage runs only once the place before it is done (the first place ever recorded has nothing
  to wait for; deep sleep always needs its day's light sleep, its input);
- a stage that runs where this place or a later one is already done (a late message, a forced
  re-run, a re-materialize, another model) first puts the store back to before its place (the
  rebuild's restore) and makes the later places stale: they run again, in order.

Also here: which version rows a restore to before a place undoes, and what a nightly tick or the
late-data sensor requests (one run, days in order, each day's stages before the next day)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from enum import StrEnum

from memory_pipeline.sleep.logic import Stage

STAGES: tuple[Stage, ...] = (Stage.LIGHT, Stage.DEEP, Stage.AUTOBIOGRAPHY)
LABELS = {Stage.LIGHT: "light sleep", Stage.DEEP: "deep sleep", Stage.AUTOBIOGRAPHY: "autobiography"}
DAY_ROW = "*"  # sleep_runs.world_id of the stage's day-level record (not an id: '*' is outside the alphabet)


class RunStatus(StrEnum):
    """A stage record's status (sleep_runs.status)."""

    DONE = "done"
    FAILED = "failed"  # the last attempt failed before it had ever been done: nothing of it written
    STALE = "stale"  # an earlier place ran again after it: its effects are undone, it runs again
    REFUSED = "refused"  # a world deep sleep refused before any call (over the size limit): nothing written
    # A day record only: a run over some worlds (a world filter) ran here and others have not: the
    # place is due for them (never done for a world that did not run).
    PARTIAL = "partial"


# A world's record that lets its next place run: refused worlds do not hold the others up.
SETTLED = frozenset({RunStatus.DONE, RunStatus.REFUSED})


@dataclass(frozen=True, order=True)
class Position:
    """A stage run's place in the day order: (day, index of the stage in STAGES)."""

    day: date
    rank: int

    @classmethod
    def of(cls, day: date, stage: Stage) -> Position:
        return cls(day, STAGES.index(stage))

    @property
    def stage(self) -> Stage:
        return STAGES[self.rank]

    def previous(self) -> Position:
        if self.rank:
            return Position(self.day, self.rank - 1)
        return Position(self.day - timedelta(days=1), len(STAGES) - 1)

    def __str__(self) -> str:
        return f"{LABELS[self.stage]} of {self.day.isoformat()}"


def version_position(stage: str, day: date | None, round_: str | None) -> Position | None:
    """The place of the run that wrote a semantic-memory version row. A rebuild row sits at the place
    it restored to (``round`` deep_sleep: before that day's deep sleep; else before its light sleep).
    None for writes outside the sleep order (`remember`, the memory tool): no restore undoes them."""
    if day is None:
        return None
    if stage == Stage.LIGHT:
        return Position(day, 0)
    if stage == Stage.DEEP:
        return Position(day, 1)
    if stage == Stage.REBUILD:
        return Position(day, 1 if round_ == Stage.DEEP else 0)
    return None


def restore_provenance(position: Position) -> tuple[date, str | None]:
    """(day, round) of the version rows of a restore to before ``position`` (read back by
    version_position). The autobiography writes no semantic memory, so before it means before the
    next day's light sleep."""
    if position.stage == Stage.AUTOBIOGRAPHY:
        return position.day + timedelta(days=1), None
    return position.day, (str(Stage.DEEP) if position.stage == Stage.DEEP else None)


def order_problem(position: Position, statuses: Mapping[Position, str]) -> str | None:
    """Why ``position`` cannot run now (None: it can), from the day records' statuses."""
    before = position.previous()
    first_ever = not any(p < position for p in statuses)
    if first_ever and position.stage != Stage.DEEP:
        return None
    state = statuses.get(before)
    if state == RunStatus.DONE:
        return None
    what = "has not run" if state is None else f"is {state}"
    if state == RunStatus.PARTIAL:
        what += " (run for some worlds only: run it for every world)"
    return (
        f"{LABELS[position.stage]} {position.day.isoformat()}: {before} {what} (days go in order: light sleep, deep "
        f"sleep and autobiography of a day, then the next day; run {before} first, or backfill the range)"
    )


def gap_problem(statuses: Mapping[Position, str], first: date, last: date) -> str | None:
    """Why a run of the days ``first``..``last`` would strand the history (None: it would not). A
    day before every recorded one may start the history (``order_problem``), and its run restores
    every later day and marks it stale; those can run again only after the days between, so the
    run must reach the first recorded day: with a gap left, the later days could never run again
    and their memory would stay undone."""
    if not statuses:
        return None
    earliest = min(statuses).day
    done_after = [p.day for p, s in statuses.items() if s == RunStatus.DONE and p.day > last]
    if first >= earliest or not done_after or last >= earliest - timedelta(days=1):
        return None
    gap_from, gap_to = last + timedelta(days=1), earliest - timedelta(days=1)
    return (
        f"the sleep of {first.isoformat()} would start the history before its first day "
        f"({earliest.isoformat()}), with {gap_from.isoformat()}..{gap_to.isoformat()} never slept between: it "
        f"would undo every later day, and none of them could run again; run {first.isoformat()}.."
        f"{max(done_after).isoformat()} in one backfill instead"
    )


@dataclass(frozen=True)
class Request:
    """One run: the days first..last in order, each with these stages (a done one is reused)."""

    first: date
    last: date
    stages: tuple[Stage, ...]


def _request(todo: Sequence[Position], through: Position) -> Request | None:
    if not todo:
        return None
    days = sorted({p.day for p in todo})
    if len(days) == 1:
        return Request(days[0], days[0], tuple(p.stage for p in todo))
    # Several days: whole days (light, deep, autobiography each) in one run, up to the last day
    # whose three stages are all wanted; the rest of the last one goes at a later tick.
    whole = [d for d in days if Position(d, len(STAGES) - 1) <= through]
    return Request(days[0], whole[-1], STAGES)


def catch_up(statuses: Mapping[Position, str], closed: Sequence[date], due: Position) -> Request | None:
    """What a nightly tick requests: the places after the newest done one among ``closed`` (the
    look-back's closed days, oldest first) up to ``due`` (the tick's stage of the newest closed
    day). With none done in the look-back, only the newest day's (older holes are a backfill's)."""
    places = [Position(d, r) for d in closed for r in range(len(STAGES)) if Position(d, r) <= due]
    done = [p for p in places if statuses.get(p) == RunStatus.DONE]
    if done:
        todo = [p for p in places if p > done[-1]]
    else:
        todo = [p for p in places if p.day == due.day]
    return _request(todo, due)


def rerun_from(statuses: Mapping[Position, str], day: date) -> Request | None:
    """A re-run of ``day`` (late data): its light sleep, then every place up to the newest done one."""
    done = [p for p, s in statuses.items() if s == RunStatus.DONE]
    if not done:
        return None
    newest = max(done)
    start = Position(day, 0)
    todo = [Position(d, r) for d in _days(day, newest.day) for r in range(len(STAGES))]
    return _request([p for p in todo if start <= p <= newest], newest)


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]
