"""Seed 004 asynchronous summarize jobs (I/O): summarize, recompute and summarize_on_miss return a
job id at once; the job's row goes queued → running → succeeded | skipped_empty | failed |
given_up, with the summary record's id (seed: 总结任务的异步状态查询)."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from sqlalchemy import func, select, update

from memory_pipeline.lib.store import Store
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.tower.logic import JobKind, JobState
from memory_pipeline.tower.summaries import WindowKey
from memory_pipeline.tower.tables import tower_jobs


def submit(store: Store, kind: JobKind, key: WindowKey) -> str:
    job_id = uuid.uuid4().hex
    now = utcnow()
    with store.begin() as conn:
        conn.execute(
            tower_jobs.insert().values(
                job_id=job_id,
                kind=str(kind),
                type_name=key.type_name,
                granularity=key.granularity,
                start=key.start,
                end=key.end,
                group_value=key.group,
                state=str(JobState.QUEUED),
                llm_calls=0,
                created_at=now,
                updated_at=now,
            )
        )
    return job_id


def set_state(
    store: Store,
    job_id: str,
    state: JobState,
    *,
    record_id: int | None = None,
    calls: int = 0,
    error: str | None = None,
) -> None:
    with store.begin() as conn:
        conn.execute(
            update(tower_jobs)
            .where(tower_jobs.c.job_id == job_id)
            .values(state=str(state), record_id=record_id, llm_calls=calls, error=error, updated_at=utcnow())
        )


class JobWindow(TypedDict):
    granularity: str
    start: str
    end: str


class JobView(TypedDict):
    """A job as the API shows it (job_status, list_jobs, the jobs a call started)."""

    job_id: str
    kind: str
    type: str
    window: JobWindow
    group: str
    state: str
    record_id: int | None
    llm_calls: int
    error: str | None
    created_at: str
    updated_at: str


def key_of(row: Any) -> WindowKey:
    return WindowKey(row["type_name"], row["granularity"], row["start"], row["end"], row["group_value"])


def load(store: Store, job_id: str) -> Any | None:
    with store.connect() as conn:
        return conn.execute(select(tower_jobs).where(tower_jobs.c.job_id == job_id)).mappings().first()


def view(row: Any, tz: ZoneInfo) -> JobView:
    return {
        "job_id": row["job_id"],
        "kind": row["kind"],
        "type": row["type_name"],
        "window": {
            "granularity": row["granularity"],
            "start": row["start"].astimezone(tz).isoformat(),
            "end": row["end"].astimezone(tz).isoformat(),
        },
        "group": row["group_value"],
        "state": row["state"],
        "record_id": row["record_id"],
        "llm_calls": row["llm_calls"],
        "error": row["error"],
        "created_at": row["created_at"].astimezone(tz).isoformat(timespec="seconds"),
        "updated_at": row["updated_at"].astimezone(tz).isoformat(timespec="seconds"),
    }


def _jobs_where(q: Any, type_name: str | None, state: str | None, groups: Collection[str] | None) -> Any:
    j = tower_jobs.c
    if groups is not None:
        q = q.where(j.group_value.in_(sorted(groups)))
    if type_name is not None:
        q = q.where(j.type_name == type_name)
    if state is not None:
        q = q.where(j.state == state)
    return q


def list_jobs(
    store: Store,
    *,
    type_name: str | None,
    state: str | None,
    limit: int,
    groups: Collection[str] | None = None,
    offset: int = 0,
) -> list[Any]:
    """``groups``: only the jobs of these groups (None: every group)."""
    j = tower_jobs.c
    q = select(tower_jobs).order_by(j.created_at.desc(), j.job_id).offset(offset).limit(limit)
    with store.connect() as conn:
        return list(conn.execute(_jobs_where(q, type_name, state, groups)).mappings())


def count_jobs(store: Store, *, type_name: str | None, state: str | None, groups: Collection[str] | None = None) -> int:
    """How many jobs :func:`list_jobs` pages through."""
    q = _jobs_where(select(func.count()).select_from(tower_jobs), type_name, state, groups)
    with store.connect() as conn:
        return int(conn.execute(q).scalar_one())
