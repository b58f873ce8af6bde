"""Seed 001 §6: the Markdown projection (core I/O). Per world: ``README.md`` (the core documents,
then objects by type and name, linking to their files), one folder per type with file names from
stable id hashes, and the three core documents (``AGENTS.md``, ``SOUL.md``, ``USER.md``).

The store is the authority for object files: each pass compares what is on disk with what was
written (a file deleted or hand-edited is found and rewritten; an edit is never imported), and
rewrites at most 10 objects (later passes continue until caught up); a file whose content is
unchanged is not rewritten. A core document's human edit is imported instead (a new version, the
prior one kept): the seed's import of the three core files is unchanged. What lags, what the
check found on disk and every error show in ``memory_status``. A page file that should no longer
exist (its object re-keyed, or now on fewer pages) is removed in the pass that finds it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, delete, exists, func, or_, select, update

from memory_pipeline.lib import settings
from memory_pipeline.lib.ids import path_segment
from memory_pipeline.lib.store import Store, upsert
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.objects import graph, logic, recall
from memory_pipeline.objects.config import ObjectsConfig
from memory_pipeline.objects.logic import CoreFileAction
from memory_pipeline.objects.tables import (
    objects_attachments,
    objects_core,
    objects_objects,
    objects_projection,
    objects_relations,
    objects_worlds,
)


@dataclass
class ProjectionReport:
    considered: int = 0
    written: int = 0
    unchanged: int = 0
    errors: list[str] = field(default_factory=list)
    behind_after: int = 0
    missing: int = 0  # object files found missing by this pass's check (rewritten now or by later passes)
    differing: int = 0  # object files found hand-edited (rewritten: their edits are never imported)
    removed: int = 0  # page files that should no longer exist (an object re-keyed, or now on fewer pages)
    core_written: int = 0
    core_imported: list[str] = field(default_factory=list)  # world/NAME


def os_error(exc: OSError) -> str:
    """An OS error as status shows it, with the path it met (a projection_dir that is a file fails
    on a folder above the object's file: its name alone would not say which)."""
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{type(exc).__name__}: {exc.strerror or exc}{where}"


def _write_if_changed(path: Path, text: str) -> bool:
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):  # an object file edited to bytes that are no text
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def _not_utf8(path: Path) -> tuple[str, str] | None:
    """Where a file's bytes stop being UTF-8 and its text with those bytes replaced, from one read
    (None: they are UTF-8, or there is no file)."""
    try:
        data = path.read_bytes()
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"byte {exc.start}: {data[exc.start : exc.start + 1]!r}", data.decode("utf-8", "replace")
    except OSError:
        pass
    return None


def _as_replaced(path: Path) -> str | None:
    """A file's text with the bytes that are no UTF-8 replaced (None: no file there)."""
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return None


def _read(path: Path) -> str | None:
    """A projected file's text; None when it is not there (or its folder is not a folder)."""
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, UnicodeDecodeError):
        return None


def _on_disk(root: Path, world: str, object_id: str, pages: int) -> str | None:
    """The hash of an object's files as they are on disk (as ``project`` hashes what it writes),
    None when one is missing."""
    texts = []
    for page in range(pages):
        text = _read(world_folder(root, world) / logic.projection_page_name(object_id, page))
        if text is None:
            return None
        texts.append(text)
    return logic.content_hash("\n".join(texts))


def world_folder(root: Path, world: str) -> Path:
    """A world's folder of the projection: one per world, whatever its id holds (``lib.ids.path_segment``)."""
    return root / path_segment(world)


def root_of(cfg: ObjectsConfig) -> Path:
    """The projection's folder: ``projection_dir``, else ``<data dir>/objects``."""
    return Path(cfg.projection_dir) if cfg.projection_dir else settings.data_dir() / "objects"


def check_files(store: Store, root: Path) -> dict[tuple[str, str], str]:
    """Every projected object's files against what was written there: (world, id) -> ``missing``
    or ``differs``. Read-only: one read per file."""
    o, p = objects_objects.c, objects_projection.c
    q = (
        select(p.world_id, p.object_id, p.content_hash, p.pages)
        .join(objects_objects, (o.world_id == p.world_id) & (o.object_id == p.object_id))
        .where(p.error.is_(None))
    )
    with store.connect() as conn:
        rows = conn.execute(q).all()
    drift = {}
    for world, oid, digest, pages in rows:
        found = _on_disk(root, world, oid, pages or 1)
        if found is None:
            drift[(world, oid)] = "missing"
        elif found != digest:
            drift[(world, oid)] = "differs"
    return drift


def _record_drift(store: Store, drift: dict[tuple[str, str], str]) -> None:
    """What the check found, so status shows it until the file is rewritten."""
    p = objects_projection.c
    with store.begin() as conn:
        conn.execute(update(objects_projection).where(p.drift.is_not(None)).values(drift=None))
        if drift:
            conn.execute(
                update(objects_projection)
                .where(p.world_id == bindparam("w"), p.object_id == bindparam("oid"))
                .values(drift=bindparam("kind")),
                [{"w": w, "oid": oid, "kind": kind} for (w, oid), kind in drift.items()],
            )


def _shown_revisions() -> tuple[Any, Any]:
    """The newest revision of an object's sources and of its relations (either way), correlated
    to ``objects_objects``: a file shows them too, and an attach or a relation leaves the object's
    own revision as it was."""
    o, a, rc = objects_objects.c, objects_attachments.c, objects_relations.c
    sources = select(func.max(a.revision)).where(a.world_id == o.world_id, a.object_id == o.object_id)
    relations = select(func.max(rc.revision)).where(
        rc.world_id == o.world_id, or_(rc.src == o.object_id, rc.dst == o.object_id)
    )
    return sources.scalar_subquery(), relations.scalar_subquery()


def lagging_objects() -> tuple[Any, Any]:
    """Objects whose files must be (re)written: never projected, older than the store (the object,
    a source or a relation newer than the file), missing or edited on disk (as the last check
    found), or failed. (The join, the condition.)"""
    o, p = objects_objects.c, objects_projection.c
    joined = objects_objects.outerjoin(objects_projection, (p.world_id == o.world_id) & (p.object_id == o.object_id))
    sources, relations = _shown_revisions()
    older = (p.revision < o.revision) | (p.revision < sources) | (p.revision < relations)
    return joined, (p.object_id.is_(None)) | older | (p.error.is_not(None)) | (p.drift.is_not(None))


def _behind(store: Store, limit: int | None) -> list[tuple[str, str, int]]:
    """The lagging objects, each with the revision its file will show (the newest of the object,
    its sources and its relations)."""
    o = objects_objects.c
    joined, lagging = lagging_objects()
    sources, relations = _shown_revisions()
    q = (
        select(o.world_id, o.object_id, o.revision, sources, relations)
        .select_from(joined)
        .where(lagging)
        .order_by(o.world_id, o.object_id)
    )
    if limit is not None:
        q = q.limit(limit)
    with store.connect() as conn:
        return [(w, oid, max(r, s or 0, rel or 0)) for w, oid, r, s, rel in conn.execute(q).all()]


def _dossier(doc: recall.Dossier) -> logic.Dossier:
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


def _project_object(
    store: Store, root: Path, world: str, oid: str, revision: int, report: ProjectionReport
) -> dict[str, Any]:
    """Render one object and write the pages whose content differs; its projection row."""
    error, digest, pages = None, "", 1
    try:
        doc = recall.read(store, world, oid)
        if doc is not None:
            d = _dossier(doc)
            texts = [logic.render_markdown(d, page) for page in range(logic.projection_pages(d))]
            digest, pages = logic.content_hash("\n".join(texts)), len(texts)
            wrote = False
            for page, text in enumerate(texts):
                wrote |= _write_if_changed(world_folder(root, world) / logic.projection_page_name(oid, page), text)
            report.written += int(wrote)
            report.unchanged += int(not wrote)
    except OSError as exc:
        error = os_error(exc)
        report.errors.append(f"{world} {oid}: {error}")
    return {
        "world_id": world,
        "object_id": oid,
        "path": logic.projection_path(oid),
        "content_hash": digest,
        "revision": revision,
        "projected_at": utcnow(),
        "error": error,
        "pages": pages,
        "drift": None,
    }


def project(store: Store, root: Path, per_pass: int = logic.PROJECTION_PER_PASS) -> ProjectionReport:
    """One pass: check the files on disk, rewrite at most ``per_pass`` objects that lag or drifted,
    the README of every world, and the core documents (a human edit imported)."""
    report = ProjectionReport()
    drift = check_files(store, root)
    report.missing = sum(1 for k in drift.values() if k == "missing")
    report.differing = len(drift) - report.missing
    _record_drift(store, drift)
    rows = []
    for world, oid, revision in _behind(store, per_pass):
        report.considered += 1
        rows.append(_project_object(store, root, world, oid, revision, report))
    if rows:
        with store.begin() as conn:
            upsert(conn, objects_projection, rows, keys=["world_id", "object_id"])
    _sweep(store, root, report)
    _project_core(store, root, report)
    _project_indexes(store, root, report)
    report.behind_after = len(_behind(store, None))
    return report


def stale_files(store: Store, root: Path) -> list[Path]:
    """Every page file the projection wrote that should no longer exist (read-only): in each type
    folder of each world, the files of an id the store has no object of that type for, and the
    continuation pages past an object's pages as last written (``logic.stale_projection_files``)."""
    o, p = objects_objects.c, objects_projection.c
    joined = objects_objects.outerjoin(objects_projection, (p.world_id == o.world_id) & (p.object_id == o.object_id))
    with store.connect() as conn:
        rows = conn.execute(select(o.world_id, o.type, o.object_id, p.pages).select_from(joined)).all()
        worlds = set(conn.execute(select(objects_worlds.c.world_id)).scalars())
    wanted: dict[tuple[str, str], dict[str, int | None]] = {}
    for world, otype, oid, pages in rows:
        wanted.setdefault((world, otype), {})[logic.projection_hash(oid)] = pages
    out = []
    for world in sorted(worlds | {w for w, _ in wanted}):
        for otype in logic.ObjectType:
            folder = world_folder(root, world) / str(otype)
            try:
                names = [e.name for e in os.scandir(folder) if e.is_file()]
            except OSError:  # no folder yet (or not one: the object's write reports that)
                continue
            out += [folder / n for n in logic.stale_projection_files(names, wanted.get((world, str(otype)), {}))]
    return out


def _sweep(store: Store, root: Path, report: ProjectionReport) -> None:
    """Remove the page files that should no longer exist (the files are a view of the store, not
    memory) and the bookkeeping rows of objects the store no longer has."""
    for path in stale_files(store, root):
        try:
            path.unlink()
            report.removed += 1
        except FileNotFoundError:
            pass
        except OSError as exc:
            report.errors.append(f"{path.relative_to(root)}: not removed ({type(exc).__name__}: {exc.strerror or exc})")
    o, p = objects_objects.c, objects_projection.c
    with store.begin() as conn:
        conn.execute(
            delete(objects_projection).where(
                p.object_id.not_in(list(logic.CORE_NAMES)),
                ~exists().where(o.world_id == p.world_id, o.object_id == p.object_id),
            )
        )


def _project_indexes(store: Store, root: Path, report: ProjectionReport) -> None:
    """Each world's README.md (written again only when its content changed, or when it is gone)."""
    o, c = objects_objects.c, objects_core.c
    with store.connect() as conn:
        entries: dict[str, list[tuple[str, str, str]]] = {}
        for w, t, name, oid in conn.execute(select(o.world_id, o.type, o.name, o.object_id)).all():
            entries.setdefault(w, []).append((t, name, oid))
        core: dict[str, list[str]] = {}
        for w, name in conn.execute(select(c.world_id, c.name)).all():
            core.setdefault(w, []).append(name)
    for world in sorted(set(entries) | set(core)):
        try:
            _write_if_changed(
                world_folder(root, world) / "README.md", logic.render_index(entries.get(world, []), core.get(world, []))
            )
        except OSError as exc:
            report.errors.append(f"{world} README.md: {exc}")


@dataclass
class CoreFile:
    """One core document file that is not in step with the store, and what to do with it."""

    world: str
    name: str
    action: CoreFileAction
    on_disk: str | None
    stored: str | None
    revision: int


def core_actions(store: Store, root: Path) -> list[CoreFile]:
    """Every core document file not in step with the store (read-only). A human edit the store
    refused stays as the human left it (reported) until the file changes again."""
    w, c, p = objects_worlds.c, objects_core.c, objects_projection.c
    with store.connect() as conn:
        worlds = sorted(conn.execute(select(w.world_id)).scalars())
        stored = {(r.world_id, r.name): r for r in conn.execute(select(c.world_id, c.name, c.content, c.revision))}
        written = {
            (r.world_id, r.object_id): r
            for r in conn.execute(
                select(p.world_id, p.object_id, p.content_hash, p.error).where(p.object_id.in_(list(logic.CORE_NAMES)))
            )
        }
    out = []
    for world in worlds:
        for name in logic.CORE_NAMES:
            path = world_folder(root, world) / name
            disk = _read(path)
            have, last = stored.get((world, name)), written.get((world, name))
            seen = disk if disk is not None else _as_replaced(path)  # bytes that are no UTF-8: as last reported
            if last is not None and last.error and seen is not None and logic.content_hash(seen) == last.content_hash:
                continue
            content = have.content if have else None
            action = logic.core_file_action(content, last.content_hash if last else None, disk)
            if action is not CoreFileAction.NONE:
                out.append(CoreFile(world, name, action, disk, content, have.revision if have else 0))
    return out


def _project_core(store: Store, root: Path, report: ProjectionReport) -> None:
    rows = []
    for f in core_actions(store, root):
        error, text, revision = None, f.on_disk, f.revision
        try:
            if f.action is CoreFileAction.IMPORT and f.on_disk is not None:
                revision = graph.import_core_text(store, f.world, f.name, f.on_disk, utcnow()).get("revision", revision)
                report.core_imported.append(f"{f.world}/{f.name}")
            elif f.action is CoreFileAction.WRITE and f.stored is not None:
                path = world_folder(root, f.world) / f.name
                unreadable = _not_utf8(path)
                if unreadable:  # a human's edit the store cannot read is theirs: reported, never overwritten
                    where, text = unreadable  # the text recorded, so the same bytes are not taken up again
                    raise logic.SubmissionError(f.name, f"the file is not UTF-8 text ({where})")
                text = f.stored
                _write_if_changed(path, text)
                report.core_written += 1
        except logic.SubmissionError as exc:  # the file stays as the human wrote it, reported
            error = f"human edit not imported: {exc}"
        except OSError as exc:
            error = os_error(exc)
        if error:
            report.errors.append(f"{f.world} {f.name}: {error}")
        rows.append(
            {
                "world_id": f.world,
                "object_id": f.name,
                "path": f.name,
                "content_hash": logic.content_hash(text) if text is not None else "",
                "revision": revision,
                "projected_at": utcnow(),
                "error": error,
                "pages": 1,
                "drift": None,
            }
        )
    if rows:
        with store.begin() as conn:
            upsert(conn, objects_projection, rows, keys=["world_id", "object_id"])


def needs_pass(store: Store, root: Path) -> str | None:
    """Why a projection pass has work now (read-only; the sensor's question), or None."""
    if _behind(store, 1):
        return "objects newer than their files"
    if check_files(store, root):
        return "object files missing or edited on disk"
    if stale_files(store, root):
        return "page files on disk that should no longer exist"
    if core_actions(store, root):
        return "core documents to write or a human edit to import"
    return None
