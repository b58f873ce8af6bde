"""Seed 003 day order, pure: which place waits for which, which version rows a restore undoes, and
what a nightly tick or the late-data sensor requests (one run, days in order)."""

from datetime import date, timedelta

import pytest

from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.order import (
    STAGES,
    Position,
    Request,
    RunStatus,
    catch_up,
    gap_problem,
    order_problem,
    rerun_from,
    restore_provenance,
    version_position,
)

D = date(2026, 3, 2)
L, DP, A = STAGES
DONE = RunStatus.DONE


def day(n: int) -> date:
    return D + timedelta(days=n)


def done_through(last: Position, first: date = D) -> dict[Position, str]:
    out = {}
    p = Position(first, 0)
    while p <= last:
        out[p] = str(DONE)
        p = Position(p.day, p.rank + 1) if p.rank < 2 else Position(p.day + timedelta(days=1), 0)
    return out


def test_places_are_ordered_light_deep_autobiography_then_the_next_day():
    assert Position.of(D, L) < Position.of(D, DP) < Position.of(D, A) < Position.of(day(1), L)
    assert Position.of(day(1), L).previous() == Position.of(D, A)
    assert str(Position.of(D, DP)) == "deep sleep of 2026-03-02"


@pytest.mark.parametrize(
    ("position", "statuses", "problem"),
    [
        (Position.of(D, L), {}, None),  # the first place ever waits for nothing
        (Position.of(D, A), {}, None),
        (Position.of(D, DP), {}, "deep sleep 2026-03-02: light sleep of 2026-03-02 has not run"),
        (Position.of(day(1), L), done_through(Position.of(D, DP)), "autobiography of 2026-03-02 has not run"),
        (Position.of(day(1), L), done_through(Position.of(D, A)), None),
        (Position.of(day(1), L), {**done_through(Position.of(D, A)), Position.of(D, A): "stale"}, "is stale"),
        # Run where later places are done (a re-run): allowed, it is a rebuild from there.
        (Position.of(D, L), done_through(Position.of(day(2), A)), None),
    ],
)
def test_a_place_waits_for_the_one_before_it(position, statuses, problem):
    got = order_problem(position, statuses)
    assert (got is None) if problem is None else (problem in (got or ""))


@pytest.mark.parametrize(
    ("first", "last", "refused"),
    [
        (day(-1), day(-1), False),  # right before the first day: the later days can run again after it
        (day(-5), day(-2), True),  # a gap left (day -1): the later days could never run again
        (day(-5), day(-1), False),
        (day(-5), day(3), False),  # the whole history in one run
        (D, D, False),  # inside the history: order_problem's to judge
        (day(5), day(5), False),  # after it: no later day to strand
    ],
)
def test_a_run_starting_the_history_earlier_must_reach_its_first_day(first, last, refused):
    """A day before every recorded one may run (it starts the history), restoring every later day;
    those run again only after the days between, so a run leaving a gap is refused up front."""
    statuses = done_through(Position.of(day(3), A))
    got = gap_problem(statuses, first, last)
    assert (got is not None) == refused, got
    if refused:
        assert f"with {day(-1)}..{day(-1)} never slept between" in (got or "")
        assert f"run {first}..{day(3)} in one backfill instead" in (got or "")
    assert gap_problem({}, first, last) is None


@pytest.mark.parametrize(
    ("stage", "round_", "restore_to", "undone"),
    [
        (Stage.LIGHT, None, Position.of(D, DP), False),  # D's light-sleep writes are D's deep sleep's input
        (Stage.LIGHT, None, Position.of(D, L), True),
        (Stage.DEEP, "merge", Position.of(D, DP), True),
        (Stage.DEEP, "merge", Position.of(D, A), False),
        (Stage.REBUILD, "deep_sleep", Position.of(D, DP), True),
        (Stage.REBUILD, None, Position.of(D, DP), False),
        (Stage.REMEMBER, None, Position.of(day(-5), L), False),  # never undone by a restore
    ],
)
def test_a_restore_undoes_the_rows_written_at_its_place_or_later(stage, round_, restore_to, undone):
    at = version_position(stage, D, round_)
    assert (at is not None and at >= restore_to) == undone


def test_a_restore_rows_own_place_reads_back():
    for p in (Position.of(D, L), Position.of(D, DP), Position.of(D, A)):
        back = version_position(Stage.REBUILD, *restore_provenance(p))
        assert back == (p if p.stage != Stage.AUTOBIOGRAPHY else Position.of(day(1), L))


def test_a_normal_night_ticks_its_own_stage_of_yesterday():
    closed = [day(-1), D]
    statuses = done_through(Position.of(day(-1), A), day(-1))
    assert catch_up(statuses, closed, Position.of(D, L)) == Request(D, D, (L,))
    statuses[Position.of(D, L)] = str(DONE)
    assert catch_up(statuses, closed, Position.of(D, DP)) == Request(D, D, (DP,))
    statuses[Position.of(D, DP)] = str(DONE)
    assert catch_up(statuses, closed, Position.of(D, DP)) is None


def test_after_downtime_one_run_day_by_day_up_to_the_last_whole_due_day():
    closed = [day(i) for i in range(5)]
    statuses = done_through(Position.of(D, A))
    # At 02:00 the newest day's deep sleep and autobiography are not due: the run ends the day before.
    assert catch_up(statuses, closed, Position.of(day(4), L)) == Request(day(1), day(3), STAGES)
    assert catch_up(statuses, closed, Position.of(day(4), A)) == Request(day(1), day(4), STAGES)
    # A stale place is due like a missing one; done places in the range are reused by the run.
    statuses[Position.of(D, A)] = "stale"
    assert catch_up(statuses, closed, Position.of(day(4), A)) == Request(D, day(4), STAGES)
    # A fresh store: only the newest day (older holes are a backfill's).
    assert catch_up({}, closed, Position.of(day(4), DP)) == Request(day(4), day(4), (L, DP))


def test_late_data_reruns_its_day_through_the_newest_done_place():
    statuses = done_through(Position.of(day(2), A))
    assert rerun_from(statuses, D) == Request(D, day(2), STAGES)
    assert rerun_from(done_through(Position.of(D, L)), D) == Request(D, D, (L,))
    assert rerun_from(done_through(Position.of(day(1), L)), D) == Request(D, D, STAGES)
    assert rerun_from({}, D) is None
