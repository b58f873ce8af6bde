"""Seed 004 memory types (I/O): create, list, show, update, and delete that archives. Each type
owns two series, its raw entries and `<type>.summary`; neither is ever deleted (seed: 原始条目永不
删除, 实际是全量保留). Built in: `worklog` (day → week, summaries on, one per day per project) and
the activity stream fed from raw conversation messages (minute-level chain, summaries off)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, bindparam, func, select, update

from memory_pipeline.lib.store import Store, insert_missing
from memory_pipeline.lib.text import json_type, text_problem
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.tower.logic import (
    DEFAULT_CAP,
    DEFAULT_CHAIN,
    RANK,
    Granularity,
    TowerInputError,
    check_cap,
    check_chain,
    check_name,
)
from memory_pipeline.tower.tables import tower_types

WORKLOG = "worklog"
GROUP_FIELD_MAX = 64
RETENTION_MAX = 64


class TypeView(TypedDict):
    """A memory type as the API shows it."""

    name: str
    description: str
    chain: list[str]
    summary_cap: str
    summaries: bool
    group_field: str | None
    retention: str | None
    retention_enforced: bool
    builtin: bool
    archived: bool
    series: list[str]
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class MemoryType:
    name: str
    description: str
    chain: tuple[Granularity, ...]
    summary_cap: Granularity
    summaries_enabled: bool
    summaries_enabled_at: datetime | None
    group_field: str | None
    retention: str | None
    builtin: bool
    archived_at: datetime | None
    created_at: datetime
    updated_at: datetime
    owner_worlds: tuple[str, ...] | None = None  # never shown: it would name other worlds

    @property
    def archived(self) -> bool:
        return self.archived_at is not None

    def as_dict(self, tz: ZoneInfo) -> TypeView:
        """The type as answers show it; its times in ``tz`` to the second, as every time a reader meets."""
        return {
            "name": self.name,
            "description": self.description,
            "chain": [str(g) for g in self.chain],
            "summary_cap": str(self.summary_cap),
            "summaries": self.summaries_enabled,
            "group_field": self.group_field,
            "retention": self.retention,
            "retention_enforced": False,  # seed: 保留期只是声明式的
            "builtin": self.builtin,
            "archived": self.archived,
            "series": [self.name, f"{self.name}.summary"],
            "created_at": self.created_at.astimezone(tz).isoformat(timespec="seconds"),
            "updated_at": self.updated_at.astimezone(tz).isoformat(timespec="seconds"),
        }


def _row(r: Any) -> MemoryType:
    return MemoryType(
        name=r["name"],
        description=r["description"],
        chain=tuple(Granularity(g) for g in r["chain"]),
        summary_cap=Granularity(r["summary_cap"]),
        summaries_enabled=bool(r["summaries_enabled"]),
        summaries_enabled_at=r["summaries_enabled_at"],
        group_field=r["group_field"],
        retention=r["retention"],
        builtin=bool(r["builtin"]),
        archived_at=r["archived_at"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        owner_worlds=tuple(r["owner_worlds"]) if r["owner_worlds"] is not None else None,
    )


def builtin_rows(activity_type: str, now: datetime) -> list[dict[str, Any]]:
    return [
        {
            "name": WORKLOG,
            "description": "Work log: one summary per closed natural day per project (seed: 内置的 worklog).",
            "chain": [Granularity.DAY, Granularity.WEEK],
            "summary_cap": Granularity.WEEK,
            "summaries_enabled": True,
            "summaries_enabled_at": now,
            "group_field": "project",
            "retention": "forever",
            "builtin": True,
            "created_at": now,
            "updated_at": now,
        },
        {
            "name": activity_type,
            "description": "Agent activity stream, fed from the raw conversation messages (grouped by world).",
            "chain": list(DEFAULT_CHAIN),
            "summary_cap": DEFAULT_CAP,
            "summaries_enabled": False,
            "summaries_enabled_at": None,
            "group_field": "world",
            "retention": "forever",
            "builtin": True,
            "created_at": now,
            "updated_at": now,
        },
    ]


def ensure_builtins(store: Store, activity_type: str) -> None:
    """The built-in types exist (idempotent; an operator's later changes to them are kept)."""
    with store.begin() as conn:
        insert_missing(conn, tower_types, builtin_rows(activity_type, utcnow()), "name")


def _text_field(value: object, field: str, limit: int) -> str | None:
    if value is None:
        return None
    if problem := text_problem(value, limit):
        raise TowerInputError(field, problem)
    assert isinstance(value, str)
    return value


def _group_field(value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not value.replace("_", "").isalnum() or len(value) > GROUP_FIELD_MAX:
        raise TowerInputError(
            "group_field", f"must be a field name of letters, digits and '_' (got {json_type(value)})"
        )
    return value


def _bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise TowerInputError(field, f"expected true or false, got {json_type(value)}")
    return value


_LOAD = select(tower_types).where(tower_types.c.name == bindparam("name"))  # built once: every read loads its type


def load(conn: Connection, name: str) -> MemoryType | None:
    r = conn.execute(_LOAD, {"name": name}).mappings().first()
    return _row(r) if r else None


def accepts_entries(conn: Connection, name: str) -> bool:
    """Whether ``name`` exists and is not archived, read under a share lock on its row (PostgreSQL), so
    an archive committed meanwhile waits for this transaction and no entry lands after it."""
    q = select(tower_types.c.archived_at).where(tower_types.c.name == name).with_for_update(read=True)
    row = conn.execute(q).first()
    return row is not None and row.archived_at is None


def feeds_activity(store: Store, activity_type: str | None) -> str | None:
    """The activity type's name while it is fed from the conversation messages (it exists and is not
    archived), else None: an archived activity type takes no more messages."""
    if not activity_type:
        return None
    with store.connect() as conn:
        t = load(conn, activity_type)
    return activity_type if t is not None and not t.archived else None


def get(store: Store, name: object, field: str = "type") -> MemoryType:
    """``field``: the argument that named the type (``type`` for an append or a read of its memory,
    ``name`` for the type's own get, update and delete)."""
    name = check_name(name, field)
    with store.connect() as conn:
        t = load(conn, name)
    if t is None:
        raise TowerInputError(field, f"no memory type {name!r}")
    return t


def list_types(store: Store, include_archived: bool = False) -> list[MemoryType]:
    q = select(tower_types).order_by(tower_types.c.name)
    if not include_archived:
        q = q.where(tower_types.c.archived_at.is_(None))
    with store.connect() as conn:
        return [_row(r) for r in conn.execute(q).mappings()]


def _check_cap_against_chain(chain: tuple[Granularity, ...], cap: Granularity) -> None:
    if RANK[cap] < RANK[chain[0]]:
        raise TowerInputError("summary_cap", f"{cap} is finer than the chain's finest level {chain[0]}")


def create(
    store: Store,
    name: object,
    *,
    description: object = "",
    chain: object = None,
    summaries: object = False,
    group_field: object = None,
    retention: object = None,
    summary_cap: object = None,
    owner_worlds: list[str] | None = None,
) -> MemoryType:
    """A new type; summaries are off unless asked (seed: 任意新建类型默认关闭). ``owner_worlds``: the
    creating token's worlds (the server's), None for the operator's."""
    name = check_name(name)
    desc = _text_field(description if description is not None else "", "description", 2000) or ""
    ch = check_chain(list(DEFAULT_CHAIN) if chain is None else chain)
    cap = check_cap(DEFAULT_CAP if summary_cap is None else summary_cap)
    _check_cap_against_chain(ch, cap)
    enabled = _bool(summaries, "summaries")
    now = utcnow()
    row = {
        "name": name,
        "description": desc,
        "chain": [str(g) for g in ch],
        "summary_cap": str(cap),
        "summaries_enabled": enabled,
        "summaries_enabled_at": now if enabled else None,
        "group_field": _group_field(group_field),
        "retention": _text_field(retention, "retention", RETENTION_MAX),
        "builtin": False,
        "owner_worlds": sorted(owner_worlds) if owner_worlds is not None else None,
        "created_at": now,
        "updated_at": now,
    }
    with store.begin() as conn:
        # Names differing only in case read as one type to a person ("Worklog" beside "worklog").
        twin = conn.execute(
            select(tower_types.c.name).where(func.lower(tower_types.c.name) == name.lower(), tower_types.c.name != name)
        ).scalar()
        if twin is not None:
            raise TowerInputError("name", f"{name!r} differs from the memory type {twin!r} only in case")
        if not insert_missing(conn, tower_types, [row], "name"):
            existing = load(conn, name)
            state = "archived, its name stays reserved" if existing and existing.archived else "exists"
            raise TowerInputError("name", f"memory type {name!r} already {state}")
    return get(store, name)


UPDATABLE = ("description", "chain", "summaries", "group_field", "retention", "summary_cap")


def update_type(store: Store, name: object, changes: object) -> MemoryType:
    """Change anything but the name. A chain change takes effect at the next materialization of
    the windows (they are a regenerable view); switching summaries on summarizes from then on."""
    current = get(store, name, "name")
    if not isinstance(changes, dict):
        raise TowerInputError("changes", "must be an object")
    unknown = sorted(set(changes) - set(UPDATABLE))
    if "name" in unknown:
        raise TowerInputError("name", "a type's name cannot be changed")
    if unknown:
        raise TowerInputError(str(unknown[0])[:40], f"unknown field (updatable: {', '.join(UPDATABLE)})")
    if current.archived:
        raise TowerInputError("name", f"memory type {current.name!r} is archived")
    values: dict[str, Any] = {}
    chain, cap = current.chain, current.summary_cap
    if "description" in changes:
        values["description"] = _text_field(changes["description"] or "", "description", 2000) or ""
    if "chain" in changes:
        chain = check_chain(changes["chain"])
        values["chain"] = [str(g) for g in chain]
    if "summary_cap" in changes:
        cap = check_cap(changes["summary_cap"])
        values["summary_cap"] = str(cap)
    _check_cap_against_chain(chain, cap)
    if "summaries" in changes:
        enabled = _bool(changes["summaries"], "summaries")
        values["summaries_enabled"] = enabled
        if enabled and not current.summaries_enabled:
            values["summaries_enabled_at"] = utcnow()
    if "group_field" in changes:
        values["group_field"] = _group_field(changes["group_field"])
    if "retention" in changes:
        values["retention"] = _text_field(changes["retention"], "retention", RETENTION_MAX)
    if values:
        values["updated_at"] = utcnow()
        with store.begin() as conn:
            conn.execute(update(tower_types).where(tower_types.c.name == current.name).values(values))
    return get(store, current.name)


def archive(store: Store, name: object) -> MemoryType:
    """Delete = archive: appends are refused, recall still works, the name stays reserved, and no
    entry or summary is ever deleted. `worklog` cannot be deleted."""
    current = get(store, name, "name")
    if current.name == WORKLOG:
        raise TowerInputError("name", "the built-in type 'worklog' cannot be deleted")
    if not current.archived:
        now = utcnow()
        with store.begin() as conn:
            conn.execute(
                update(tower_types).where(tower_types.c.name == current.name).values(archived_at=now, updated_at=now)
            )
    return get(store, current.name)
