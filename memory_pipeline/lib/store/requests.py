"""Writes a client may repeat, done once per caller-given request id: the write and the record of
its id (with its result) commit in one transaction, so a repeated request (a retry after a lost
answer) gets the first result back and writes nothing; two at once: one writes, the other gets its
result. Ids are per world and kind of write, so one world's ids never answer another's calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.store.db import Store
from memory_pipeline.lib.store.tables import request_ids
from memory_pipeline.lib.timeutil import utcnow


def problem(request_id: object) -> str | None:
    """What is wrong with ``request_id`` as a request id (the id alphabet), or None."""
    return validate_id(request_id)


def _first(conn: Connection, world: str, kind: str, request_id: str) -> dict[str, Any] | None:
    r = request_ids.c
    q = select(r.result).where(r.world_id == world, r.kind == kind, r.request_id == request_id)
    return conn.execute(q).scalar()


def once(
    store: Store, world: str, kind: str, request_id: str | None, write: Callable[[Connection], dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """``write(conn)``'s result and False, or, for a request id seen before in this world and kind,
    the first result and True (``write`` is not called). No request id: ``write`` alone."""
    if request_id is None:
        with store.begin() as conn:
            return write(conn), False
    try:
        with store.begin() as conn:
            if (first := _first(conn, world, kind, request_id)) is not None:
                return first, True
            result = write(conn)
            conn.execute(
                request_ids.insert().values(
                    world_id=world, kind=kind, request_id=request_id, result=result, created_at=utcnow()
                )
            )
            return result, False
    except IntegrityError:
        with store.connect() as conn:  # the same id at once: the other call was first
            first = _first(conn, world, kind, request_id)
        if first is None:
            raise
        return first, True
