"""Seed 003 stage runs in the day order (core I/O, no Dagster): a stage's place is checked against
the day records (sleep/order.py), a world's previous record is reused only when it is done with the
same model, prompt version and input, a world with a done record at this place or a later one is
restored to before this place first (the rebuild's restore), and each world's changes commit in one
transaction together with that restore, the later records it makes stale and the world's state
record. A model failure mid-run therefore leaves nothing half-written."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection

from memory_pipeline.lib.llm import LLMProviderDown
from memory_pipeline.lib.store import upsert
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.sleep.context import SleepContext, StageFailure
from memory_pipeline.sleep.logic import Memory, Stage
from memory_pipeline.sleep.memory import taken_ids
from memory_pipeline.sleep.order import DAY_ROW, SETTLED, Position, RunStatus, order_problem
from memory_pipeline.sleep.prompts import PROMPT_VERSION
from memory_pipeline.sleep.rebuild import (
    WorldRestore,
    ahead,
    any_done_after,
    as_of,
    mark_stale,
    plan_restore,
    write_restore,
)
from memory_pipeline.sleep.snapshots import LAST_DONE_AT
from memory_pipeline.sleep.tables import sleep_runs

KEYS = ["stage", "day", "world_id"]
# A world's record (its ``detail``) built from answers the provider cut at the output limit
# (finish_reason length): how many. Its fingerprint is left empty and it is never reused as whole,
# so the next run of the place asks again (as temporal does with such a row).
ANSWERS_CUT = "answers_cut"
CUT_REASON = "answer cut at the output limit"


# A world's record for which every tool call the model made was refused (nothing applied): a model
# sending only broken calls is no extraction, so it is never reused and the next run asks again.
ALL_REFUSED = "all_calls_refused"
REFUSED_REASON = "every tool call the model made was refused"


def all_calls_refused(record: Mapping[str, Any] | None) -> bool:
    detail = (record or {}).get("detail") or {}
    return isinstance(detail, dict) and bool(detail.get(ALL_REFUSED))


def answers_cut(record: Mapping[str, Any] | None) -> int:
    """How many of the answers a world's stage record was built from the provider cut (0: none)."""
    detail = (record or {}).get("detail") or {}
    return int(detail.get(ANSWERS_CUT) or 0) if isinstance(detail, dict) else 0


def day_statuses(
    conn: Connection, since: date | None = None, worlds: Sequence[str] | None = None
) -> dict[Position, str]:
    """Every stage's day record (its status) from ``since`` on: the day order's state. With
    ``worlds`` (a run over those only), a place not done for every world counts as done where each
    of them has a done (or refused) record: those worlds may go on through their own days."""
    r = sleep_runs.c
    q = select(r.stage, r.day, r.status).where(r.world_id == DAY_ROW)
    if since is not None:
        q = q.where(r.day >= since)
    out = {Position.of(day, Stage(stage)): status for stage, day, status in conn.execute(q)}
    if worlds:
        settled: dict[Position, set[str]] = {}
        q = select(r.stage, r.day, r.world_id).where(r.world_id.in_(list(worlds)), r.status.in_(list(SETTLED)))
        if since is not None:
            q = q.where(r.day >= since)
        for stage, day, world in conn.execute(q):
            settled.setdefault(Position.of(day, Stage(stage)), set()).add(world)
        for p, ws in settled.items():
            if out.get(p) != RunStatus.DONE and ws >= set(worlds):
                out[p] = str(RunStatus.DONE)
    return out


def place_statuses(conn: Connection, position: Position, worlds: Sequence[str] | None = None) -> dict[Position, str]:
    """What ``order_problem(position, ...)`` reads of the day order, without reading the whole
    history: the records from the place before ``position`` on, and one earlier record when there is
    one (whether a place was ever recorded before it). Same answer as with ``day_statuses``; a run
    over many days asks this once per place, so its cost must not grow with the history."""
    since = position.previous().day
    out = day_statuses(conn, since, worlds)
    if any(p < position for p in out):
        return out
    r = sleep_runs.c
    q = select(r.stage, r.day, r.status).where(r.world_id == DAY_ROW, r.day < since).limit(1)
    for stage, day, status in conn.execute(q):
        out[Position.of(day, Stage(stage))] = status
    if worlds and not any(p < position for p in out):  # rare: earlier places only in world records
        out |= {p: s for p, s in day_statuses(conn, worlds=worlds).items() if p.day < since}
    return out


@dataclass
class StageRun:
    """One stage's run of one day over its worlds."""

    ctx: SleepContext
    position: Position
    previous: dict[str, dict[str, Any]]  # this place's records, by world
    ahead: set[str] = field(default_factory=set)  # worlds restored first (a done record here or later)
    plans: dict[str, WorldRestore] = field(default_factory=dict)
    stale_days: set[date] = field(default_factory=set)  # days with records the restores made stale
    # Some world of the run (or a day record) has a done record after this place. When none has, a
    # world's commit has nothing to mark stale: the places after this one cannot turn done while it
    # runs (each needs this one done first), so the check is made once here, not once per world.
    later_done: bool = True
    snapshot_rows: int = 0
    buffering_before: bool = False  # the client's buffering when the run opened, put back when it ends

    @classmethod
    def open(
        cls, conn: Connection, ctx: SleepContext, stage: Stage, day: date, worlds: Sequence[str] | None = None
    ) -> StageRun:
        """Refuses (StageFailure, nothing written) when the place before this one is not done (for
        ``worlds``, a run over those only: done for each of them)."""
        position = Position.of(day, stage)
        problem = order_problem(position, place_statuses(conn, position, worlds))
        if problem:
            raise StageFailure(problem)
        q = select(sleep_runs).where(sleep_runs.c.stage == str(stage), sleep_runs.c.day == day)
        run = cls(ctx, position, {r["world_id"]: dict(r) for r in conn.execute(q).mappings()})
        # The offline model's ledger rows wait for the world's transaction (one commit per world, not
        # one per call); a provider's paid call is still recorded at once (LLMClient._write_now).
        run.buffering_before, ctx.llm.buffering = ctx.llm.buffering, True
        return run

    @property
    def day(self) -> date:
        return self.position.day

    def reusable(self, world: str, fp: str | None = None) -> bool:
        """Done before with the same model and prompt version (and input fingerprint, when the input
        can change without an earlier place running again: light sleep's late messages), from whole
        answers (a record built from a cut one is asked again)."""
        prev = self.previous.get(world)
        return (
            not self.ctx.force
            and prev is not None
            and prev["status"] == RunStatus.DONE
            and (prev["model"], prev["prompt_version"]) == (self.ctx.llm.model, PROMPT_VERSION)
            and (fp is None or prev["input_fp"] == fp)
            and not answers_cut(prev)
            and not all_calls_refused(prev)
        )

    def prepare(self, conn: Connection, worlds: Sequence[str]) -> dict[str, list[Memory]]:
        """The active memories of ``worlds`` (those to run) as of this place: a world with a done
        record here or later is restored in memory now, in the store at its commit."""
        self.ahead = ahead(conn, self.position, worlds)
        self.later_done = any_done_after(conn, self.position, worlds)
        self.plans = plan_restore(conn, self.position, sorted(self.ahead)) if self.ahead else {}
        return as_of(conn, self.position, worlds, self.plans, self.ctx.carry)

    def taken_ids(self, conn: Connection, worlds: Sequence[str]) -> dict[str, set[str]]:
        """Every memory id of ``worlds`` (call after ``prepare``: a range run's carry checked them there)."""
        if self.ctx.carry is not None:
            return self.ctx.carry.taken_ids(conn, worlds)
        return taken_ids(conn, worlds)

    def record(self, world: str, **values: Any) -> dict[str, Any]:
        row: dict[str, Any] = dict.fromkeys(
            ("sessions", "sessions_truncated", "input_chars", "llm_calls", "tool_calls", "applied", "rejected"), 0
        )
        row |= {"created": 0, "input_fp": None, "detail": {}}
        return (
            row
            | values
            | {
                "stage": str(self.position.stage),
                "day": self.day,
                "world_id": world,
                "status": str(RunStatus.DONE),
                "model": self.ctx.llm.model,
                "prompt_version": PROMPT_VERSION,
                "finished_at": utcnow(),
            }
        )

    def _ledger(self, conn: Connection) -> None:
        """The model calls' ledger rows buffered so far, in the caller's transaction."""
        self.ctx.llm.write_pending(conn)

    def _written(self) -> None:
        self.ctx.llm.clear_pending()

    def commit(
        self,
        world: str,
        record: dict[str, Any],
        write: Callable[[Connection], None] | None = None,
        active: Sequence[Memory] | None = None,
        taken: set[str] | None = None,
    ) -> None:
        """One transaction: the world's restore (when it had later places done), the later records
        of the world and later day records made stale (they did not see this run), the stage's
        writes, the state record, the ledger rows of the world's model calls. ``active`` (and
        ``taken``): the world's active set (and ids) as the commit leaves them, for a range run's
        carry to hand to the next place."""
        with self.ctx.store.begin() as conn:
            if world in self.plans:
                write_restore(conn, self.position, {world: self.plans[world]})
            if self.later_done:
                self.stale_days |= set(mark_stale(conn, self.position, [world], include_own=False))
            if write is not None:
                write(conn)
            upsert(conn, sleep_runs, [record], keys=KEYS)
            self._ledger(conn)
        self._written()
        if self.ctx.carry is not None and active is not None:
            self.ctx.carry.keep(world, active, taken)

    def refused(self, world: str, reason: str, chars: int, write: Callable[[Connection], None] | None = None) -> None:
        """The world was refused before any call (deep sleep's size limit): nothing of this run is
        written; its record says why, so it runs again when asked. A world done here (or later)
        before is put back to before this place as by a rebuild, and its later places turn stale:
        the done run no longer stands, nothing may read as done from it. ``write``: what else the
        refusal removes in the same transaction (the world's snapshot of the day)."""
        row = self.record(world, input_chars=chars, detail={"refused": reason, "message_one_chars": chars})
        with self.ctx.store.begin() as conn:
            if world in self.ahead:
                if world in self.plans:
                    write_restore(conn, self.position, {world: self.plans[world]})
                self.stale_days |= set(mark_stale(conn, self.position, [world], include_own=False))
            if write is not None:
                write(conn)
            upsert(conn, sleep_runs, [row | {"status": str(RunStatus.REFUSED)}], keys=KEYS)
            self._ledger(conn)
        self._written()

    def failed(self, world: str, exc: BaseException, detail: dict[str, Any] | None = None) -> None:
        """The attempt for ``world`` failed: nothing of it was written. A world (and day) done here
        before keeps that record, its outputs still the done run's, with the failed attempt noted;
        otherwise the record says failed. A call the provider's open breaker refused (no request
        made) is no failure of the world: nothing is recorded and the world stays as it was, left
        for the next run (the call that failed and opened the breaker was recorded where it failed)."""
        self.ctx.llm.buffering = self.buffering_before  # the run stops here
        if isinstance(exc, LLMProviderDown):
            if self.ctx.llm.pending:  # the calls made before the breaker opened
                with self.ctx.store.begin() as conn:
                    self._ledger(conn)
                self._written()
            return
        # The exception goes on to the run's failure line, which names neither world nor day: a
        # note (PEP 678) does, in the CLI's line and the UI alike.
        exc.add_note(f"{self.position.stage} of world {world}, day {self.day}: nothing of this attempt was written")
        error = f"{type(exc).__name__}: {exc}"[:2000]
        attempt = {"at": utcnow().isoformat(), "error": error, "model": self.ctx.llm.model, **(detail or {})}
        prev = self.previous.get(world)
        with self.ctx.store.begin() as conn:
            if prev is not None and prev["status"] == RunStatus.DONE:
                row = prev | {"detail": {**(prev["detail"] or {}), "failed_attempt": attempt}}
            else:
                failed: dict[str, Any] = {"failed_attempt": attempt}
                # A stale record's done run still has outputs in the store (deep sleep: the day's
                # snapshot); when it finished is kept, so a reader can say what it is reading.
                if prev is not None and prev["status"] == RunStatus.STALE:
                    failed[LAST_DONE_AT] = prev["finished_at"].isoformat()
                elif prev is not None and LAST_DONE_AT in (prev["detail"] or {}):
                    failed[LAST_DONE_AT] = prev["detail"][LAST_DONE_AT]
                row = self.record(world, detail=failed) | {"status": str(RunStatus.FAILED)}
            upsert(conn, sleep_runs, [row], keys=KEYS)
            day_row = (
                conn.execute(
                    select(sleep_runs).where(
                        sleep_runs.c.stage == str(self.position.stage),
                        sleep_runs.c.day == self.day,
                        sleep_runs.c.world_id == DAY_ROW,
                    )
                )
                .mappings()
                .first()
            )
            noted = {"failed_attempt": attempt | {"world": world}}
            if day_row is not None and day_row["status"] == RunStatus.DONE:  # `sleep status` counts these
                row = dict(day_row) | {"detail": {**(day_row["detail"] or {}), **noted}}
            else:
                row = self.record(DAY_ROW, detail=noted) | {"status": str(RunStatus.FAILED)}
            upsert(conn, sleep_runs, [row], keys=KEYS)
            self._ledger(conn)  # the failed attempt's calls, the failing one included
        self._written()

    def finish(
        self,
        worlds: int,
        detail: dict[str, Any],
        every_world: Sequence[str] | None,
        due: Sequence[str] = (),
    ) -> None:
        """The day record; with ``every_world`` (a run over all worlds), records of other worlds at
        this place go (a world with nothing here any more leaves no stale record behind). A run over
        some worlds only (``every_world`` None) marks the place done only when the place before it
        is done for every world and each world this place has (``due``: those an unfiltered run
        would take) has a done or refused record here; otherwise the place stays due for the others
        (a new day record says ``partial``)."""
        self.ctx.llm.buffering = self.buffering_before
        with self.ctx.store.begin() as conn:
            self._ledger(conn)  # none left in a normal run: every world's calls commit with it
            self._day_record(conn, worlds, detail, every_world, due)
        self._written()

    def _day_record(
        self,
        conn: Connection,
        worlds: int,
        detail: dict[str, Any],
        every_world: Sequence[str] | None,
        due: Sequence[str],
    ) -> None:
        if every_world is None:
            r = sleep_runs.c
            here = (r.stage == str(self.position.stage), r.day == self.day)
            settled = set(
                conn.execute(
                    select(r.world_id).where(*here, r.world_id.in_(list(due)), r.status.in_(list(SETTLED)))
                ).scalars()
            )
            if not settled >= set(due) or order_problem(self.position, place_statuses(conn, self.position)):
                if conn.execute(select(r.status).where(*here, r.world_id == DAY_ROW)).first() is None:
                    row = self.record(DAY_ROW, detail={"worlds": worlds, "per_world": detail})
                    upsert(conn, sleep_runs, [row | {"status": str(RunStatus.PARTIAL)}], keys=KEYS)
                return
        else:
            conn.execute(
                delete(sleep_runs).where(
                    sleep_runs.c.stage == str(self.position.stage),
                    sleep_runs.c.day == self.day,
                    sleep_runs.c.world_id.not_in([*every_world, DAY_ROW]),
                )
            )
        row = self.record(DAY_ROW, detail={"worlds": worlds, "per_world": detail})
        upsert(conn, sleep_runs, [row], keys=KEYS)
