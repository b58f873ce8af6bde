"""Seed 001 speed: the set-based floor of organize (bench only, never the pipeline).

What `worker.run_worker` writes when it organizes every pending event with the offline model, done
with the fewest statements: one read of every pending event with its text, one of the worlds'
objects, attachments, core documents and revisions; then, in Python, each event's pages in the
worker's order (explicit first, then by occurrence; a `continue` page before the next), each page
sent to the offline model through the same `LLMClient` call the worker makes (the same prompt,
ledger row and answer) and checked by the same `logic.check_graph_write`, the graph kept in memory;
then one transaction with one statement per table (objects, versions, relations, attachments, event
states, receipts, the worlds' revisions, the jobs, the ledger rows). No claims, leases, receipts'
replay lookups or per-page transactions: what is left is the work every organize does.

`compare` checks the floor's rows against the real run's (same events, states, cursors, progress,
objects, versions, relations, attachments, receipts' outcomes, revisions and details, ledger rows)."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from dataclasses import replace
from typing import Any

from sqlalchemy import select, text

from memory_pipeline.lib.llm import LLMRequest
from memory_pipeline.lib.store.tables import llm_ledger, messages
from memory_pipeline.objects import graph, logic, offline_rules, prompts
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.logic import EventState, ObjectStatus, ObjectType, Outcome
from memory_pipeline.objects.tables import (
    objects_attachments,
    objects_core,
    objects_event_state,
    objects_jobs,
    objects_objects,
    objects_receipts,
    objects_relations,
    objects_versions,
    objects_worlds,
)
from memory_pipeline.objects.worker import object_doc

# The tables organize writes (the floor's copy of the store holds them alone).
TABLES = (
    objects_event_state,
    objects_objects,
    objects_versions,
    objects_relations,
    objects_attachments,
    objects_receipts,
    objects_worlds,
    objects_jobs,
    objects_core,
    messages,
    llm_ledger,
)


def clone(admin: Any, source: str, target: str) -> None:
    """A copy of ``source``'s organize tables (rows, columns, indexes) in schema ``target``."""
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {target}"))
        for t in TABLES:
            conn.execute(text(f"CREATE TABLE {target}.{t.name} (LIKE {source}.{t.name} INCLUDING ALL)"))
            conn.execute(text(f"INSERT INTO {target}.{t.name} SELECT * FROM {source}.{t.name}"))


def _core_docs(rows: dict[str, Any], budget: int) -> list[dict[str, Any]]:
    """`graph.core_for_batch` on the core rows read once."""
    return graph.core_documents(rows, budget)[0]


def organize(octx: ObjectsContext) -> dict[str, Any]:
    """Every pending event organized set-based (see the module); seconds and what was written."""
    started = time.perf_counter()
    s, o, a, c, w, j = (
        objects_event_state.c,
        objects_objects.c,
        objects_attachments.c,
        objects_core.c,
        objects_worlds.c,
        objects_jobs.c,
    )
    with octx.store.connect() as conn:
        events = (
            conn.execute(
                select(objects_event_state, messages.c.content)
                .join(messages, messages.c.message_id == s.event_id)
                .where(s.state.in_(list(logic.QUEUED_STATES)))
                .order_by(s.world_id, s.explicit.desc(), s.occurred_at, s.event_id)
            )
            .mappings()
            .all()
        )
        objects: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        for r in conn.execute(select(objects_objects)).mappings():
            objects[r["world_id"]][r["object_id"]] = dict(r)
        attached: dict[tuple[str, str], set[str]] = defaultdict(set)
        for world, oid, eid in conn.execute(select(a.world_id, a.object_id, a.event_id)).tuples():
            attached[(world, eid)].add(oid)
        core: dict[str, dict[str, Any]] = defaultdict(dict)
        for r in conn.execute(select(c.world_id, c.name, c.content, c.revision, c.version)).all():
            core[r.world_id][r.name] = r
        revision = dict(conn.execute(select(w.world_id, w.graph_revision)).tuples().all())
        rc = objects_relations.c
        relation_keys = {tuple(r) for r in conn.execute(select(rc.world_id, rc.src, rc.label, rc.dst)).all()}
        jobs = dict(
            conn.execute(
                select(j.world_id, j.job_id).where(j.mode == "organize", j.status.in_(["queued", "running"]))
            ).all()
        )
    read_seconds = time.perf_counter() - started

    budget = octx.cfg.transfer_budget_bytes
    now = octx.now()
    new_objects: list[dict[str, Any]] = []
    changed_objects: list[dict[str, Any]] = []
    versions: list[dict[str, Any]] = []
    relations: list[dict[str, Any]] = []
    attachments: dict[tuple[str, str, str], dict[str, Any]] = {}
    states: list[dict[str, Any]] = []
    receipts: list[dict[str, Any]] = []
    batches: dict[str, int] = defaultdict(int)
    octx.llm.buffering = True
    for ev in events:
        world, event_id = ev["world_id"], ev["event_id"]
        content = ev["content"] or ""
        cursor, progress = ev["page_cursor"], ev["progress"]
        while True:  # the event's pages, as the worker claims them one after another
            stop = min(len(content), cursor + logic.page_chars(budget, 0))
            page_text = content[cursor:stop]
            left = budget - len(page_text.encode())
            docs = _core_docs(core[world], left)
            left -= logic.json_bytes(docs)
            low = page_text.lower()
            world_objects = objects[world]
            mine = attached[(world, event_id)]
            wanted = sorted(mine)
            for oid, obj in world_objects.items():
                if oid not in mine and any(n and n.lower() in low for n in [obj["name"], *(obj["aliases"] or [])]):
                    wanted.append(oid)
            if logic.BUILTIN_DAILY not in wanted:
                wanted.append(logic.BUILTIN_DAILY)
            by_id = {i: object_doc(world_objects[i]) for i in wanted if i in world_objects}
            related = [dict(x) for x in logic.fit_objects([by_id[i] for i in wanted if i in by_id], left)]
            token = f"organize-{uuid.uuid4().hex}"
            rev = revision[world]
            sent = len(page_text.encode()) + logic.json_bytes(docs) + sum(logic.json_bytes(x) for x in related)

            page = {
                "token": token,
                "graph_revision": rev,
                "event_id": event_id,
                "page_text": page_text,
                "page_end": stop,
                "event_chars": len(content),
                "read_objects": related,
            }

            def answer(_r: LLMRequest, page: dict[str, Any] = page) -> Any:  # called within this page
                return offline_rules.organize(**page)

            request = LLMRequest(
                task="objects_organize",
                system=prompts.ORGANIZE_SYSTEM,
                user=prompts.organize_user(
                    token=token,
                    revision=rev,
                    event_id=event_id,
                    occurred_at=ev["occurred_at"].isoformat(),
                    chars=len(content),
                    start=cursor,
                    stop=stop,
                    text=page_text,
                    progress=progress,
                    objects=related,
                    bytes_left=budget - sent,
                    scope="",
                    core=docs,
                ),
                prompt_version=prompts.ORGANIZE_VERSION,
                world_id=world,
                tools=[*prompts.READ_TOOLS, prompts.SUBMIT_GRAPH_TOOL],
                offline_answer=answer,
            )
            request = replace(request, conversation=({"role": "user", "content": request.user},))
            result = octx.llm.complete(replace(request, max_tokens=logic.OUTPUT_TOKENS_DEFAULT))
            call = prompts.parse_tool_calls(result.text, result.tool_calls)[0]
            write = logic.check_graph_write(call.arguments, deep=False, size_bytes=call.size)
            rev += 1
            revision[world] = rev
            stored = world_objects
            created, updated = [], []
            for ow in write.objects:
                old = stored.get(ow.object_id)
                if old is None:
                    status = (
                        ObjectStatus.CANDIDATE if ow.type is ObjectType.PROJECT else (ow.status or ObjectStatus.ACTIVE)
                    )
                    row = {
                        "world_id": world,
                        "object_id": ow.object_id,
                        "type": str(ow.type),
                        **ow.content(),
                        "status": str(status),
                        "version": 1,
                        "revision": rev,
                        "created_at": now,
                        "updated_at": now,
                    }
                    new_objects.append(row)
                    stored[ow.object_id] = row
                    created.append(ow.object_id)
                    versions.append(_version(world, ow, 1, rev, "create", str(status), write.token, now))
                elif {k: old[k] for k in ow.content()} != ow.content() or (
                    ow.status is not None and ow.status != old["status"]
                ):
                    status = str(ow.status) if ow.status is not None else str(old["status"])
                    old.update(ow.content(), status=status, version=old["version"] + 1, revision=rev, updated_at=now)
                    changed_objects.append(old)
                    updated.append(ow.object_id)
                    versions.append(_version(world, ow, old["version"], rev, "update", status, write.token, now))
            added = 0
            for r in write.relations:
                key = (world, r.src, str(r.label), r.dst)
                if key not in relation_keys:
                    relation_keys.add(key)
                    added += 1
                    relations.append(
                        {
                            "world_id": world,
                            "src": r.src,
                            "label": str(r.label),
                            "dst": r.dst,
                            "legacy": False,
                            "status": "active",
                            "revision": rev,
                            "created_at": now,
                        }
                    )
            attach_ids = sorted(set(write.attach) | {x.object_id for x in write.objects})
            for oid in attach_ids:
                if oid not in mine:
                    mine.add(oid)
                    attachments[(world, oid, event_id)] = {
                        "world_id": world,
                        "object_id": oid,
                        "event_id": event_id,
                        "revision": rev,
                        "created_at": now,
                    }
            detail = {
                "objects_created": sorted(created),
                "objects_updated": sorted(updated),
                "relations_added": added,
                "legacy_relations_archived": 0,
                "attached": attach_ids,
                "core": [],
                "page_start": cursor,
                "page_end": write.page_end,
                "reviewed": [],
                "batch": None,
            }
            receipts.append(
                {
                    "token": write.token,
                    "world_id": world,
                    "job_id": jobs.get(world),
                    "mode": "organize",
                    "revision": rev,
                    "event_id": event_id,
                    "event_day": ev["event_day"],
                    "outcome": str(write.outcome) if write.outcome else None,
                    "detail": detail,
                    "created_at": now,
                }
            )
            batches[world] += 1
            cursor, progress = write.page_end, write.progress
            if write.outcome is not Outcome.CONTINUE:
                state = EventState.LINKED if write.outcome is Outcome.LINKED else EventState.ARCHIVE_ONLY
                states.append(
                    {
                        "event_id": event_id,
                        "page_cursor": cursor,
                        "progress": progress,
                        "reason": write.reason,
                        "state": str(state),
                    }
                )
                break
    think_seconds = time.perf_counter() - started - read_seconds

    statements = 0
    with octx.store.begin() as conn:

        def run(stmt: Any, rows: Any = None) -> None:
            nonlocal statements
            statements += 1
            if rows is None:
                conn.execute(stmt)
            else:
                conn.execute(stmt, rows)

        if new_objects:
            run(objects_objects.insert(), new_objects)
        if changed_objects:  # bench data never rewrites an object; kept for the same writes
            for row in changed_objects:
                run(
                    objects_objects.update()
                    .where(o.world_id == row["world_id"], o.object_id == row["object_id"])
                    .values(**{k: v for k, v in row.items() if k not in ("world_id", "object_id", "created_at")})
                )
        if versions:
            run(objects_versions.insert(), versions)
        if relations:
            run(objects_relations.insert(), relations)
        if attachments:
            run(objects_attachments.insert(), list(attachments.values()))
        run(
            text(
                "UPDATE objects_event_state s SET page_cursor = v.cursor, progress = v.progress, reason = v.reason, "
                "state = v.state, finished_at = :now, updated_at = :now FROM (SELECT unnest(CAST(:ids AS text[])) "
                "AS event_id, unnest(CAST(:cursors AS int[])) AS cursor, unnest(CAST(:progress AS text[])) AS "
                "progress, unnest(CAST(:reasons AS text[])) AS reason, unnest(CAST(:states AS text[])) AS state) v "
                "WHERE s.event_id = v.event_id"
            ).bindparams(
                now=now,
                ids=[x["event_id"] for x in states],
                cursors=[x["page_cursor"] for x in states],
                progress=[x["progress"] for x in states],
                reasons=[x["reason"] for x in states],
                states=[x["state"] for x in states],
            )
        )
        run(objects_receipts.insert(), receipts)
        run(
            text(
                "UPDATE objects_worlds w SET graph_revision = v.rev, worker_error = NULL, worker_error_at = NULL "
                "FROM (SELECT unnest(CAST(:worlds AS text[])) AS world_id, unnest(CAST(:revs AS int[])) AS rev) v "
                "WHERE w.world_id = v.world_id"
            ).bindparams(worlds=list(revision), revs=list(revision.values()))
        )
        run(
            text(
                "UPDATE objects_jobs j SET status = 'done', finished_at = :now, batches_done = j.batches_done + v.n, "
                "claims = j.claims + v.n + 1, consecutive_failures = 0 FROM (SELECT unnest(CAST(:jobs AS bigint[])) "
                "AS job_id, unnest(CAST(:ns AS int[])) AS n) v WHERE j.job_id = v.job_id"
            ).bindparams(
                now=now, jobs=[jobs[x] for x in batches if x in jobs], ns=[batches[x] for x in batches if x in jobs]
            )
        )
        statements += 1
        octx.llm.write_pending(conn)
    octx.llm.clear_pending()
    return {
        "seconds": time.perf_counter() - started,
        "read_seconds": read_seconds,
        "python_seconds": think_seconds,
        "write_seconds": time.perf_counter() - started - read_seconds - think_seconds,
        "pages": len(receipts),
        "events": len(states),
        "statements": statements + 7,  # the seven reads
    }


def _version(
    world: str, o: logic.ObjectWrite, version: int, rev: int, action: str, status: str, token: str, now: Any
) -> dict[str, Any]:
    return {
        "world_id": world,
        "object_id": o.object_id,
        "version": version,
        "revision": rev,
        "action": action,
        "snapshot": {**o.content(), "status": status},
        "receipt_token": token,
        "at": now,
    }


# What must be the same in both stores (ids, tokens, times and the worker's batch numbers aside).
COMPARED = {
    "objects_event_state": "event_id, world_id, state, page_cursor, progress, reason",
    "objects_objects": "world_id, object_id, type, name, aliases::text, summary, body, cues::text, status, version, "
    "revision",
    "objects_versions": "world_id, object_id, version, revision, action, snapshot::text",
    "objects_relations": "world_id, src, label, dst, legacy, status, revision",
    "objects_attachments": "world_id, object_id, event_id, revision",
    "objects_receipts": "world_id, mode, revision, event_id, event_day, outcome, (detail::jsonb - 'batch')::text",
    "objects_worlds": "world_id, graph_revision",
    "objects_jobs": "world_id, mode, status, batches_done",
    # (the cache key hashes the prompt, which holds the batch's token)
    "llm_ledger": "task, world_id, model, prompt_version, tokens_in, tokens_out, outcome, finish_reason, max_tokens",
}


def compare(admin: Any, real: str, floor: str) -> dict[str, str]:
    """Tables whose compared columns differ between the two schemas (empty: the same rows)."""
    differ = {}
    with admin.connect() as conn:
        for table, cols in COMPARED.items():
            q = (
                f"SELECT count(*) FROM ((SELECT {cols} FROM {real}.{table} EXCEPT ALL SELECT {cols} FROM "
                f"{floor}.{table}) UNION ALL (SELECT {cols} FROM {floor}.{table} EXCEPT ALL SELECT {cols} FROM "
                f"{real}.{table})) d"
            )
            n = conn.execute(text(q)).scalar_one()
            if n:
                differ[table] = f"{n} rows differ"
    return differ
