"""Writes a client may repeat, done once per caller-given request id: the write and the record of
its id (with its result and a fingerprint of its arguments) commit in one transaction, so a
repeated request (a retry after a lost answer) gets the first result back and writes nothing; two
at once: one writes, the other gets its result. The same id with other arguments is another
request under a reused id: refused (``RequestConflict``), never answered with the first result
while its own content is dropped. Ids are per world and kind of write, so one world's ids never
answer another's calls."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.jsontypes import JSONObject
from memory_pipeline.lib.store.db import Store
from memory_pipeline.lib.store.tables import request_ids
from memory_pipeline.lib.timeutil import utcnow


class RequestConflict(ValueError):
    """A request id already used with other arguments (one line naming the field)."""

    def __init__(self, request_id: str, name: str = "field 'request_id':"):
        self.request_id = request_id
        super().__init__(
            f"{name} {request_id!r} was used for another request (other arguments): a retry "
            "repeats its request as it was; a new request needs a new id"
        )

    def naming(self, option: str) -> str:
        """The same refusal naming a command line's option (``--token``) instead of the field."""
        return str(RequestConflict(self.request_id, option))


def problem(request_id: object) -> str | None:
    """What is wrong with ``request_id`` as a request id (the id alphabet), or None."""
    return validate_id(request_id)


def fingerprint(arguments: Mapping[str, object]) -> str:
    """The arguments of a request, as a retry repeats them (key order aside)."""
    text = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _first(conn: Connection, world: str, kind: str, request_id: str, mark: str | None) -> JSONObject | None:
    r = request_ids.c
    q = select(r.result, r.fingerprint).where(r.world_id == world, r.kind == kind, r.request_id == request_id)
    row = conn.execute(q).first()
    if row is None:
        return None
    if mark is not None and row.fingerprint is not None and row.fingerprint != mark:
        raise RequestConflict(request_id)
    return dict(row.result)


R = TypeVar("R", bound=Mapping[str, object])  # what a write answers: stored as JSON, answered again


def once(
    store: Store,
    world: str,
    kind: str,
    request_id: str | None,
    write: Callable[[Connection], R],
    arguments: Mapping[str, object] | None = None,
) -> tuple[R, bool]:
    """``write(conn)``'s result and False, or, for a request id seen before in this world and kind
    with the same ``arguments``, the first result and True (``write`` is not called); with other
    arguments, RequestConflict. No request id: ``write`` alone."""
    if request_id is None:
        with store.begin() as conn:
            return write(conn), False
    mark = fingerprint(arguments) if arguments is not None else None
    try:
        with store.begin() as conn:
            if (first := _first(conn, world, kind, request_id, mark)) is not None:
                return cast(R, first), True  # the JSON column holds what this kind's write returned
            result = write(conn)
            conn.execute(
                request_ids.insert().values(
                    world_id=world,
                    kind=kind,
                    request_id=request_id,
                    result=result,
                    created_at=utcnow(),
                    fingerprint=mark,
                )
            )
            return result, False
    except IntegrityError:
        with store.connect() as conn:  # the same id at once: the other call was first
            first = _first(conn, world, kind, request_id, mark)
        if first is None:
            raise
        return cast(R, first), True  # the JSON column holds what this kind's write returned
