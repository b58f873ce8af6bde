"""Seed 003 status queries and the audits the asset checks run (reads only, no Dagster)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from sqlalchemy import func, select

from memory_pipeline.lib import settings
from memory_pipeline.lib.store import Store
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.order import DAY_ROW, Position, RunStatus
from memory_pipeline.sleep.runs import ALL_REFUSED, ANSWERS_CUT, all_calls_refused, answers_cut, day_statuses
from memory_pipeline.sleep.tables import (
    autobiographical_memories,
    self_blocks,
    semantic_memories,
    semantic_memory_snapshots,
    semantic_memory_versions,
    sleep_runs,
)


@dataclass
class Audit:
    audited: int = 0
    problems: list[str] = field(default_factory=list)


def stage_audit(store: Store, stage: Stage, day: date) -> Audit:
    """A stage's partition: its day record is done (not stale), every world's record is done; deep
    sleep's snapshot ids all exist (sleep never deletes); autobiography wrote each world's summary."""
    audit = Audit()
    with store.connect() as conn:
        rows = (
            conn.execute(select(sleep_runs).where(sleep_runs.c.stage == str(stage), sleep_runs.c.day == day))
            .mappings()
            .all()
        )
        day_row = [r for r in rows if r["world_id"] == DAY_ROW]
        worlds = [r for r in rows if r["world_id"] != DAY_ROW]
        audit.audited = len(worlds)
        if not day_row:
            audit.problems.append(f"{stage} {day}: no state record")
        elif day_row[0]["status"] != "done":
            state = day_row[0]["status"]
            why = {
                RunStatus.STALE: "an earlier day was rebuilt: re-run this day",
                RunStatus.PARTIAL: "run for some worlds only: run it for every world",
            }.get(state, "re-run this day")
            audit.problems.append(f"{stage} {day}: {state} ({why})")
        audit.problems += [
            f"{stage} {day} {r['world_id']}: {r['status']}"
            + (f" ({(r['detail'] or {}).get('refused')})" if (r["detail"] or {}).get("refused") else "")
            for r in worlds
            if r["status"] != "done"
        ]
        if stage == Stage.DEEP:
            snap = select(semantic_memory_snapshots.c.memory_id).where(semantic_memory_snapshots.c.day == day)
            live = select(semantic_memories.c.memory_id)
            deleted = select(semantic_memory_versions.c.memory_id).where(semantic_memory_versions.c.op == "delete")
            missing = (
                conn.execute(
                    snap.where(
                        semantic_memory_snapshots.c.memory_id.not_in(live),
                        semantic_memory_snapshots.c.memory_id.not_in(deleted),
                    )
                )
                .scalars()
                .all()
            )
            audit.problems += [f"snapshot {day}: memory {m} is gone without an explicit delete" for m in missing[:20]]
        if stage == Stage.AUTOBIOGRAPHY and worlds:
            written = set(
                conn.execute(
                    select(self_blocks.c.world_id).where(
                        self_blocks.c.name == "autobiography_summary",
                        self_blocks.c.updated_by == str(Stage.AUTOBIOGRAPHY),
                    )
                ).scalars()
            )
            audit.problems += [
                f"{r['world_id']}: no autobiography_summary" for r in worlds if r["world_id"] not in written
            ]
    return audit


def stale_positions(store: Store, since: date) -> list[Position]:
    """The places from ``since`` on whose day record is stale (to be run again, in order)."""
    with store.connect() as conn:
        statuses = day_statuses(conn, since)
    return sorted(p for p, s in statuses.items() if s == RunStatus.STALE)


class StageDays(TypedDict):
    """A stage's days in one status, with the newest."""

    stage: str
    status: str
    days: int
    newest: date


class RefusedWorld(TypedDict):
    """A world a stage refused on a day, and why."""

    stage: str
    day: date
    world_id: str
    reason: str


class CutRecord(TypedDict):
    """A world's done stage record built from answers the provider cut at the output limit: the
    next run of its place asks the model again."""

    stage: str
    day: date
    world_id: str
    answers_cut: int


def _flagged(store: Store, key: str, days: Sequence[date] | None, limit: int | None) -> list[dict[str, Any]]:
    """The done world records (of ``days``, default every day) whose detail holds ``key``, newest
    day first."""
    r = sleep_runs.c
    q = select(r.stage, r.day, r.world_id, r.detail).where(
        r.world_id != DAY_ROW, r.status == RunStatus.DONE, r.detail[key].as_string().is_not(None)
    )
    if days is not None:
        q = q.where(r.day.in_(list(days)))
    q = q.order_by(r.day.desc(), r.stage, r.world_id)
    if limit is not None:
        q = q.limit(limit)
    with store.connect() as conn:
        return [dict(x) for x in conn.execute(q).mappings().all()]


def cut_records(store: Store, days: Sequence[date] | None = None, limit: int | None = None) -> list[CutRecord]:
    """The done world records (of ``days``, default every day) built from cut answers, newest day
    first. Reads only."""
    out: list[CutRecord] = []
    for x in _flagged(store, ANSWERS_CUT, days, limit):
        n = answers_cut(x)
        if n:
            out.append({"stage": x["stage"], "day": x["day"], "world_id": x["world_id"], "answers_cut": n})
    return out


def refused_records(store: Store, days: Sequence[date] | None = None) -> list[tuple[str, date, str]]:
    """(stage, day, world) of the done world records for which every tool call the model made was
    refused (the next run of the place asks again), newest day first. Reads only."""
    return [
        (x["stage"], x["day"], x["world_id"]) for x in _flagged(store, ALL_REFUSED, days, None) if all_calls_refused(x)
    ]


class LateDay(TypedDict):
    """A day whose light sleep ran before some of its messages were ingested, and the newest one."""

    day: date
    newest_ingest: datetime


class SleepStatus(TypedDict):
    """``status``'s counts and lists."""

    memories: dict[str, int]
    active_by_type: dict[str, int]
    versions: int
    narratives: dict[str, int]  # by status (active, deprecated), as memories
    snapshot_days: int
    stages: list[StageDays]
    refused: list[RefusedWorld]
    failed_attempts: dict[str, list[date]]
    late_days: list[LateDay]
    cut: list[CutRecord]  # records from answers cut at the output limit (newest 50)


def status(store: Store, tz: ZoneInfo | None = None) -> SleepStatus:
    """Counts for `memory-pipeline status` and `sleep status`; ``late_days``: the days whose light
    sleep ran before some of their messages were ingested (what ``sleep_late_data_sensor`` redoes),
    with the newest such ingest, as `status`'s pending repairs list the temporal days."""
    from memory_pipeline.sleep.light import late_days

    late = late_days(store, tz or ZoneInfo(settings.timezone_name()))
    with store.connect() as conn:
        by_status: dict[str, int] = dict(
            conn.execute(select(semantic_memories.c.status, func.count()).group_by(semantic_memories.c.status))
            .tuples()
            .all()
        )
        by_type: dict[str, int] = dict(
            conn.execute(
                select(semantic_memories.c.type, func.count())
                .where(semantic_memories.c.status == "active")
                .group_by(semantic_memories.c.type)
            )
            .tuples()
            .all()
        )
        versions = conn.execute(select(func.count()).select_from(semantic_memory_versions)).scalar_one()
        a = autobiographical_memories.c
        narratives: dict[str, int] = dict(
            conn.execute(select(a.status, func.count()).group_by(a.status)).tuples().all()
        )
        snapshots = conn.execute(select(func.count(func.distinct(semantic_memory_snapshots.c.day)))).scalar_one()
        stages = conn.execute(
            select(sleep_runs.c.stage, sleep_runs.c.status, func.count(), func.max(sleep_runs.c.day))
            .where(sleep_runs.c.world_id == DAY_ROW)
            .group_by(sleep_runs.c.stage, sleep_runs.c.status)
        ).all()
        # Worlds a stage refused (deep sleep over its size limit), newest day first.
        refused = conn.execute(
            select(sleep_runs.c.stage, sleep_runs.c.day, sleep_runs.c.world_id, sleep_runs.c.detail)
            .where(sleep_runs.c.status == RunStatus.REFUSED)
            .order_by(sleep_runs.c.day.desc(), sleep_runs.c.world_id)
            .limit(50)
        ).all()
        # Done days whose last attempt failed (nothing of it written: the outputs are the done run's).
        attempts = conn.execute(
            select(sleep_runs.c.stage, sleep_runs.c.day, sleep_runs.c.detail).where(
                sleep_runs.c.world_id == DAY_ROW, sleep_runs.c.status == RunStatus.DONE
            )
        ).all()
        failed_attempts: dict[str, list[date]] = {}
        for stage, day, detail in attempts:
            if isinstance(detail, dict) and "failed_attempt" in detail:
                failed_attempts.setdefault(stage, []).append(day)
    return {
        "memories": by_status,
        "active_by_type": by_type,
        "versions": versions,
        "narratives": narratives,
        "snapshot_days": snapshots,
        "stages": [{"stage": s, "status": st, "days": n, "newest": d} for s, st, n, d in stages],
        "refused": [
            {"stage": s, "day": d, "world_id": w, "reason": (detail or {}).get("refused", "")}
            for s, d, w, detail in refused
        ],
        "failed_attempts": {s: sorted(days) for s, days in failed_attempts.items()},
        "late_days": [{"day": d, "newest_ingest": late[d]} for d in sorted(late)],
        "cut": cut_records(store, limit=50),
    }
