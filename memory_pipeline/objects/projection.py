"""Seed 001 §6: the Markdown projection (core I/O). The store is the authority; files are never
read back. Per world: ``README.md`` (objects by type and name, linking to their files) and one
folder per type; file names from stable id hashes. At most 10 objects per pass (later passes
continue until caught up); a file whose content is unchanged is not rewritten."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from memory_pipeline.lib.store import Store, upsert
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.objects import logic, recall
from memory_pipeline.objects.tables import objects_objects, objects_projection


@dataclass
class ProjectionReport:
    considered: int = 0
    written: int = 0
    unchanged: int = 0
    errors: list[str] = field(default_factory=list)
    behind_after: int = 0


def _write_if_changed(path: Path, text: str) -> bool:
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def _behind(store: Store, limit: int | None) -> list[tuple[str, str, int]]:
    o, p = objects_objects.c, objects_projection.c
    q = (
        select(o.world_id, o.object_id, o.revision)
        .select_from(
            objects_objects.outerjoin(objects_projection, (p.world_id == o.world_id) & (p.object_id == o.object_id))
        )
        .where((p.object_id.is_(None)) | (p.revision < o.revision) | (p.error.is_not(None)))
        .order_by(o.world_id, o.object_id)
    )
    if limit is not None:
        q = q.limit(limit)
    with store.connect() as conn:
        return [(r.world_id, r.object_id, r.revision) for r in conn.execute(q).all()]


def _dossier(doc: dict[str, Any]) -> logic.Dossier:
    return logic.Dossier(
        object_id=doc["id"],
        type=doc["type"],
        name=doc["name"],
        status=doc["status"],
        summary=doc["summary"],
        body=doc["body"],
        aliases=doc["aliases"],
        cues=doc["cues"],
        purpose=doc.get("purpose"),
        reference=doc.get("reference"),
        relations=[(r["src"], r["label"], r["dst"]) for r in doc["relations"]],
        sources=[(s["event_id"], s["occurred_at"] or "") for s in doc["sources"]],
    )


def project(store: Store, root: Path, per_pass: int = logic.PROJECTION_PER_PASS) -> ProjectionReport:
    report = ProjectionReport()
    todo = _behind(store, per_pass)
    rows, touched_worlds = [], set()
    for world, oid, revision in todo:
        report.considered += 1
        touched_worlds.add(world)
        path = logic.projection_path(oid)
        error = None
        digest = ""
        try:
            doc = recall.read(store, world, oid)
            if doc is None:
                continue
            d = _dossier(doc)
            texts = [logic.render_markdown(d, page) for page in range(logic.projection_pages(d))]
            digest = logic.content_hash("\n".join(texts))
            wrote = False
            for page, text in enumerate(texts):
                wrote |= _write_if_changed(root / world / logic.projection_page_name(oid, page), text)
            report.written += int(wrote)
            report.unchanged += int(not wrote)
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc.strerror or exc}"
            report.errors.append(f"{world} {oid}: {error}")
        rows.append(
            {
                "world_id": world,
                "object_id": oid,
                "path": path,
                "content_hash": digest,
                "revision": revision,
                "projected_at": utcnow(),
                "error": error,
            }
        )
    for world in sorted(touched_worlds):
        o = objects_objects.c
        with store.connect() as conn:
            entries = [
                (r.type, r.name, r.object_id)
                for r in conn.execute(select(o.type, o.name, o.object_id).where(o.world_id == world)).all()
            ]
        try:
            _write_if_changed(root / world / "README.md", logic.render_index(entries))
        except OSError as exc:
            report.errors.append(f"{world} README.md: {exc}")
    if rows:
        with store.begin() as conn:
            upsert(conn, objects_projection, rows, keys=["world_id", "object_id"])
    report.behind_after = len(_behind(store, None))
    return report
