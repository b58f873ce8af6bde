"""Seed 003 semantic memory I/O: load a state (one query for all worlds of a run), write a batch
of changes (one transaction: the memory rows and their version rows), the self layer (self blocks,
pinned facts), `remember` and the memory tool's explicit delete. No Dagster."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.engine import Connection, Row

from memory_pipeline.lib import settings
from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.store import Store, requests, upsert
from memory_pipeline.lib.store.tables import conversations
from memory_pipeline.lib.timeutil import local_date, utcnow
from memory_pipeline.sleep.logic import (
    CREATE,
    Change,
    Memory,
    MemoryState,
    MemoryStatus,
    Op,
    Rules,
    Stage,
    ToolError,
)
from memory_pipeline.sleep.tables import (
    pinned_facts,
    self_blocks,
    semantic_memories,
    semantic_memory_snapshots,
    semantic_memory_versions,
)

# Memory's columns, in its fields' order: a stage reads every active memory of its worlds at each
# place (a year's range run: millions of rows), so only these, as plain rows.
_MEMORY_COLUMNS = [
    semantic_memories.c[name]
    for name in (
        "memory_id",
        "world_id",
        "type",
        "content",
        "source_sessions",
        "observed_at",
        "status",
        "merged_into",
        "reason",
        "version",
    )
]


def _memory(row: Row[Any]) -> Memory:
    """A Memory from a row of ``_MEMORY_COLUMNS``."""
    mid, world, kind, content, sessions, observed, status, merged, reason, version = row
    return Memory(mid, world, kind, content, list(sessions or []), observed, status, merged, reason, version)


def load_active(
    conn: Connection, world_ids: Sequence[str] | None = None, upto_day: date | None = None
) -> dict[str, list[Memory]]:
    """Active memories by world, in one query; with ``upto_day``, only those of that day or before
    (created by its sleep or an earlier one, or written by `remember` that day or before): a later
    day's are not that day's set."""
    q = select(*_MEMORY_COLUMNS).where(semantic_memories.c.status == MemoryStatus.ACTIVE)
    if upto_day is not None:
        q = q.where(semantic_memories.c.created_day <= upto_day)
    if world_ids is not None:
        q = q.where(semantic_memories.c.world_id.in_(list(world_ids)))
    out: dict[str, list[Memory]] = defaultdict(list)
    # .all(): one fetch of every row, not a fetch per row (a year's range run reads millions)
    for row in conn.execute(q.order_by(semantic_memories.c.memory_id)).all():
        m = _memory(row)
        out[m.world_id].append(m)
    return dict(out)


def taken_ids(conn: Connection, world_ids: Sequence[str]) -> dict[str, set[str]]:
    """Every memory id of the worlds (deprecated rows included), in one query: new ids skip them."""
    out: dict[str, set[str]] = defaultdict(set)
    q = select(semantic_memories.c.world_id, semantic_memories.c.memory_id).where(
        semantic_memories.c.world_id.in_(list(world_ids))
    )
    for w, mid in conn.execute(q).all():
        out[w].add(mid)
    return dict(out)


@dataclass(frozen=True)
class Provenance:
    stage: Stage
    day: date | None
    round: str | None = None


def memory_row(m: Memory) -> dict[str, Any]:
    """A memory's ``semantic_memories`` columns (its state; not who created it, nor when)."""
    return {
        "memory_id": m.id,
        "world_id": m.world_id,
        "type": m.type,
        "content": m.content,
        "source_sessions": list(m.source_sessions),
        "observed_at": m.observed_at,
        "status": str(m.status),
        "merged_into": m.merged_into,
        "reason": m.reason,
        "version": m.version,
    }


def version_row(c: Change, prov: Provenance) -> dict[str, Any]:
    """A change's ``semantic_memory_versions`` columns but ``at`` (when it is written): the memory's
    state after it, the operation, its note as the reason when it has one, and where it was made."""
    row = memory_row(c.memory) | {"op": str(c.op), "stage": str(prov.stage), "day": prov.day, "round": prov.round}
    if c.note is not None:
        row["reason"] = c.note
    return row


def write_changes(conn: Connection, changes: Sequence[Change], prov: Provenance) -> None:
    """The memory rows (upsert by id, newest state) and one version row per change, as two
    statements; the caller's transaction makes the batch all or nothing."""
    if not changes:
        return
    now = utcnow()
    latest: dict[str, Change] = {}
    for c in changes:
        latest[c.memory.id] = c
    created = {c.memory.id for c in changes if c.op in (Op.CREATE, Op.MERGE)}
    rows = []
    for mid, c in latest.items():
        row = memory_row(c.memory) | {"updated_at": now}
        if mid in created:
            row |= {"created_by": str(prov.stage), "created_day": prov.day, "created_at": now}
        rows.append(row)
    new_rows = [r for r in rows if r["memory_id"] in created]
    old_rows = [r for r in rows if r["memory_id"] not in created]
    if new_rows:
        conn.execute(semantic_memories.insert(), new_rows)
    if old_rows:  # one executemany UPDATE (existing rows keep created_by / created_at)
        cols = [k for k in old_rows[0] if k != "memory_id"]
        stmt = (
            update(semantic_memories)
            .where(semantic_memories.c.memory_id == bindparam("b_memory_id"))
            .values({c: bindparam(f"b_{c}") for c in cols})
        )
        conn.execute(stmt, [{f"b_{k}": v for k, v in r.items()} for r in old_rows])
    conn.execute(semantic_memory_versions.insert(), [version_row(c, prov) | {"at": now} for c in changes])


# --- the self layer --------------------------------------------------------------------------------


def load_self_layer(
    conn: Connection, world_ids: Sequence[str], top: int
) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """Self blocks and the top pinned facts of every world, in two queries."""
    blocks: dict[str, dict[str, str]] = defaultdict(dict)
    q = select(self_blocks.c.world_id, self_blocks.c.name, self_blocks.c.content).where(
        self_blocks.c.world_id.in_(list(world_ids))
    )
    for w, name, content in conn.execute(q):
        blocks[w][name] = content
    ranked = (
        select(
            pinned_facts.c.world_id,
            pinned_facts.c.content,
            func.row_number()
            .over(
                partition_by=pinned_facts.c.world_id,
                order_by=(pinned_facts.c.priority.desc(), pinned_facts.c.created_at, pinned_facts.c.fact_id),
            )
            .label("rank"),
        )
        .where(pinned_facts.c.world_id.in_(list(world_ids)))
        .subquery()
    )
    pinned: dict[str, list[str]] = defaultdict(list)
    for w, content, _rank in conn.execute(
        select(ranked).where(ranked.c.rank <= top).order_by(ranked.c.world_id, ranked.c.rank)
    ):
        pinned[w].append(content)
    return dict(blocks), dict(pinned)


def self_block_of(store: Store, name: str, world_ids: Sequence[str] | None = None) -> dict[str, str]:
    """One self block of each world that has it (non-empty), e.g. long_arc for the rolling summary."""
    q = select(self_blocks.c.world_id, self_blocks.c.content).where(self_blocks.c.name == name)
    if world_ids is not None:
        q = q.where(self_blocks.c.world_id.in_(list(world_ids)))
    with store.connect() as conn:
        return {w: c for w, c in conn.execute(q) if (c or "").strip()}


class InputError(ValueError):
    """Bad input at an entry point (CLI, Python API): names the field; nothing is written."""


def check_world(world_id: object) -> str:
    problem = validate_id(world_id) if isinstance(world_id, str) else "expected a string"
    if problem:
        raise InputError(f"field 'world_id': {problem}")
    return str(world_id)


def set_self_block(store: Store, world_id: str, name: str, content: str, names: Sequence[str], by: str) -> None:
    world_id = check_world(world_id)
    if name not in names:
        raise InputError(f"field 'name': {name!r} is not a self block (one of {', '.join(names)})")
    if not isinstance(content, str) or len(content) > 20_000 or "\x00" in content:
        raise InputError("field 'content': a string of at most 20000 characters without NUL")
    with store.begin() as conn:
        upsert(
            conn,
            self_blocks,
            [{"world_id": world_id, "name": name, "content": content, "updated_by": by, "updated_at": utcnow()}],
            keys=["world_id", "name"],
        )


def pin_fact(store: Store, world_id: str, content: str, priority: int = 0) -> None:
    world_id = check_world(world_id)
    if not isinstance(content, str) or not content.strip() or len(content) > 2000 or "\x00" in content:
        raise InputError("field 'content': a non-empty string of at most 2000 characters without NUL")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InputError(f"field 'priority': expected an integer, got {priority!r}")
    if not -(2**31) <= priority < 2**31:  # the column's INTEGER (a bigger one was a driver traceback)
        raise InputError(f"field 'priority': expected an integer from {-(2**31):,} to {2**31 - 1:,}, got {priority:,}")
    with store.begin() as conn:
        upsert(
            conn,
            pinned_facts,
            [{"world_id": world_id, "content": content.strip(), "priority": priority, "created_at": utcnow()}],
            keys=["world_id", "content"],
        )


# --- during a conversation: remember, and the memory tool's delete ---------------------------------


def _check_session(conn: Connection, world_id: str, session_id: str) -> None:
    """The session is a conversation of that world; one message for "missing" and "another world's"
    (a world learns nothing about another)."""
    owner = conn.execute(select(conversations.c.world_id).where(conversations.c.conversation_id == session_id)).scalar()
    if owner != world_id:
        raise InputError(f"field 'session_id': no session {session_id!r} in world {world_id!r}")


def remember(
    store: Store,
    world_id: str,
    session_id: str,
    content: str,
    *,
    type: str = "experience",
    at: datetime | None = None,
    tz: ZoneInfo | None = None,
) -> str:
    """The in-conversation convenience: create_semantic_memory's logic and validation, with the
    current session (a conversation of that world) as source_sessions and now (or ``at``) as
    observed_at. The memory belongs to the CST day (``tz``, default the configured zone) it is
    written on: that day's sleep and later ones see it, an earlier day's (a rebuild, a re-run) never
    does. Returns the new id."""
    return remember_request(store, world_id, session_id, content, type=type, at=at, tz=tz)[0]


REMEMBER = "remember"  # the kind of its request ids (lib.store.requests)


def remember_request(
    store: Store,
    world_id: str,
    session_id: str,
    content: str,
    *,
    type: str = "experience",
    at: datetime | None = None,
    tz: ZoneInfo | None = None,
    request_id: str | None = None,
) -> tuple[str, bool]:
    """``remember`` once per caller-given ``request_id`` (per world): the memory id and False, or
    for a repeated id the first call's memory id and True, nothing written."""
    world_id = check_world(world_id)
    problem = validate_id(session_id) if isinstance(session_id, str) else "expected a string"
    if problem:
        raise InputError(f"field 'session_id': {problem}")
    observed = at or utcnow()
    state = MemoryState(world_id, [], salt=f"remember:{session_id}:{observed.isoformat()}")
    rules = Rules(Stage.REMEMBER, (CREATE,), observed)
    call = {
        "id": "remember",
        "name": CREATE,
        "arguments": {"type": type, "content": content, "source_sessions": [session_id]},
    }
    try:
        changes = state.apply(call, rules)
    except ToolError as exc:
        raise InputError(str(exc).replace("tool call remember (create_semantic_memory): ", "")) from None
    if request_id is not None and (problem := requests.problem(request_id)):
        raise InputError(f"field 'request_id': {problem}")
    written_on = local_date(utcnow(), tz or ZoneInfo(settings.timezone_name()))

    def write(conn: Connection) -> dict[str, Any]:
        _check_session(conn, world_id, session_id)
        write_changes(conn, changes, Provenance(Stage.REMEMBER, written_on))
        return {"memory_id": changes[0].memory.id}

    arguments = {"session_id": session_id, "content": content, "type": type}
    result, replayed = requests.once(store, world_id, REMEMBER, request_id, write, arguments)
    return str(result["memory_id"]), replayed


def delete_memory(store: Store, world_id: str, memory_id: str) -> bool:
    """The memory tool's explicit ``action=delete``: the only physical delete (content, its versions
    and its rows in the day snapshots are removed; a tombstone version row says when). Never offered
    to a sleep stage."""
    world_id = check_world(world_id)
    with store.begin() as conn:
        row = (
            conn.execute(
                select(semantic_memories).where(
                    semantic_memories.c.memory_id == memory_id, semantic_memories.c.world_id == world_id
                )
            )
            .mappings()
            .first()
        )
        if row is None:
            return False
        conn.execute(delete(semantic_memory_versions).where(semantic_memory_versions.c.memory_id == memory_id))
        conn.execute(
            delete(semantic_memory_snapshots).where(
                semantic_memory_snapshots.c.memory_id == memory_id, semantic_memory_snapshots.c.world_id == world_id
            )
        )
        conn.execute(delete(semantic_memories).where(semantic_memories.c.memory_id == memory_id))
        conn.execute(
            semantic_memory_versions.insert().values(
                memory_id=memory_id,
                world_id=world_id,
                version=row["version"] + 1,
                op=str(Op.DELETE),
                type=row["type"],
                content="",
                source_sessions=[],
                observed_at=row["observed_at"],
                status="deleted",
                stage=str(Stage.MEMORY_TOOL),
                at=utcnow(),
            )
        )
    return True


def memories_by_id(conn: Connection, ids: Iterable[str]) -> dict[str, Memory]:
    ids = list(ids)
    if not ids:
        return {}
    q = select(*_MEMORY_COLUMNS).where(semantic_memories.c.memory_id.in_(ids))
    return {m.id: m for m in map(_memory, conn.execute(q))}
