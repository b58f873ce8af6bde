"""Seed 001 §6 Markdown projection against what is on disk (PostgreSQL): a deleted or hand-edited
object file is found and rewritten from the store (its edit never imported), at most 10 objects a
pass with unchanged files not rewritten, and status shows the files missing, differing and being
rewritten until the passes catch up."""

from __future__ import annotations

import os

from sqlalchemy import delete, select, update

from memory_pipeline.lib.store import leases
from memory_pipeline.objects import graph, logic, projection, recall, reports, worker
from memory_pipeline.objects.tables import objects_attachments, objects_objects, objects_projection
from memory_pipeline_tests.integration.test_objects import W, claim_for, ready, sub


def _people(store, ingest, n):
    octx, (e1,) = ready(store, ingest, ["x"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)  # creates project:daily
    c = claim_for(octx, e1)
    graph.commit(octx, c, sub(c, objects=[{"id": f"person:p{i:02}", "name": f"P{i:02}"} for i in range(n)]))
    leases.release(store, graph.LEASE_ASSET, W, "h-test")
    return octx


def test_deleted_and_hand_edited_object_files_are_rewritten_and_status_shows_the_lag(store, ingest, tmp_path):
    _people(store, ingest, 14)
    while projection.project(store, tmp_path).behind_after:
        pass
    files = {i: tmp_path / W / logic.projection_path(f"person:p{i:02}") for i in range(14)}
    kept = files[13]
    kept_mtime = os.stat(kept).st_mtime_ns
    assert projection.needs_pass(store, tmp_path) is None
    for i in range(11):
        files[i].unlink()
    files[11].write_text("# P11\n\nRole: hand-written, never imported\n")
    assert projection.needs_pass(store, tmp_path) == "object files missing or edited on disk"  # the sensor sees it

    rep = projection.project(store, tmp_path)
    assert (rep.missing, rep.differing, rep.considered, rep.written) == (11, 1, 10, 10)  # at most 10 a pass
    lag = reports.status(store, W)["projection"]
    assert lag == {"behind": 2, "missing": 1, "differing": 1, "errors": []}  # still being rewritten
    assert os.stat(kept).st_mtime_ns == kept_mtime  # an unchanged file is not rewritten

    rep = projection.project(store, tmp_path)
    assert (rep.missing, rep.differing, rep.written, rep.behind_after) == (1, 1, 2, 0)
    assert reports.status(store, W)["projection"] == {"behind": 0, "missing": 0, "differing": 0, "errors": []}
    assert all(f.exists() for f in files.values())
    assert files[11].read_text().startswith("# P11\n") and "hand-written" not in files[11].read_text()
    assert recall.read(store, W, "person:p11")["body"] == ""  # the edit was never imported
    assert os.stat(kept).st_mtime_ns == kept_mtime


def test_a_deleted_continuation_page_and_index_are_written_again(store, ingest, tmp_path):
    _people(store, ingest, 1)
    with store.begin() as conn:  # 60 sources: a second page
        conn.execute(
            objects_attachments.insert(),
            [{"world_id": W, "object_id": "person:p00", "event_id": f"e{i}", "revision": 1} for i in range(60)],
        )
    while projection.project(store, tmp_path).behind_after:
        pass
    page2 = tmp_path / W / logic.projection_page_name("person:p00", 1)
    index = tmp_path / W / "README.md"
    assert page2.exists() and index.exists()
    page2.unlink()
    index.unlink()
    rep = projection.project(store, tmp_path)
    assert rep.missing == 1 and page2.exists() and index.exists()


def _caught_up(store, root):
    removed = 0
    while True:
        rep = projection.project(store, root)
        removed += rep.removed
        if not rep.behind_after:
            return removed


def test_a_page_file_that_should_no_longer_exist_is_removed_in_the_same_pass(store, ingest, tmp_path):
    _people(store, ingest, 1)
    with store.begin() as conn:  # 120 sources: three files of at most 50
        conn.execute(
            objects_attachments.insert(),
            [{"world_id": W, "object_id": "person:p00", "event_id": f"e{i:03}", "revision": 1} for i in range(120)],
        )
    _caught_up(store, tmp_path)
    pages = [tmp_path / W / logic.projection_page_name("person:p00", n) for n in range(3)]
    assert [p.exists() for p in pages] == [True, True, True] and pages[2].name.endswith(".p3.md")
    notes = tmp_path / W / "person" / "notes.md"  # not a file the projection writes: left alone
    notes.write_text("a human's notes")
    with store.begin() as conn:  # an operator's repair leaves 60 sources: two files now
        conn.execute(delete(objects_attachments).where(objects_attachments.c.event_id >= "e060"))
        conn.execute(update(objects_objects).values(revision=objects_objects.c.revision + 1))
    rep = projection.project(store, tmp_path)
    assert (rep.written, rep.removed, rep.behind_after) == (1, 1, 0)  # the same pass, counted
    assert [p.exists() for p in pages] == [True, True, False] and notes.exists()
    assert "e059" in pages[1].read_text() and "More relations" not in pages[1].read_text()
    # a page left behind by anything else is found by the sensor's question and removed
    stray = tmp_path / W / logic.projection_page_name("person:p00", 3)
    stray.write_text("left over")
    assert projection.needs_pass(store, tmp_path) == "page files on disk that should no longer exist"
    assert projection.project(store, tmp_path).removed == 1 and not stray.exists()
    assert projection.needs_pass(store, tmp_path) is None


def test_a_renamed_or_re_keyed_object_leaves_no_stale_file(store, ingest, tmp_path):
    octx, (e1, e2) = ready(store, ingest, ["buy seeds for the garden", "buy tomato seeds instead"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)  # creates project:daily
    c = claim_for(octx, e1)
    graph.commit(octx, c, sub(c, objects=[{"id": "todo:seeds", "name": "Buy seeds"}]))
    _caught_up(store, tmp_path)
    todo = tmp_path / W / "todo"
    assert [f.name for f in todo.iterdir()] == [f"{logic.projection_hash('todo:seeds')}.md"]

    c = claim_for(octx, e2, read=["todo:seeds"])
    graph.commit(octx, c, sub(c, objects=[{"id": "todo:seeds", "name": "Buy tomato seeds"}]))
    assert _caught_up(store, tmp_path) == 0  # renamed: the same file (named by the id), rewritten
    (only,) = todo.iterdir()
    assert only.read_text().startswith("# Buy tomato seeds\n")
    assert f"[Buy tomato seeds]({logic.projection_path('todo:seeds')})" in (tmp_path / W / "README.md").read_text()

    with store.begin() as conn:  # an operator re-keys it as a task (the graph never changes an id's type)
        for table in (objects_objects, objects_attachments):
            values = {"object_id": "task:seeds", **({"type": "task"} if table is objects_objects else {})}
            conn.execute(update(table).where(table.c.object_id == "todo:seeds").values(**values))
    assert _caught_up(store, tmp_path) == 1
    assert list(todo.iterdir()) == [] and (tmp_path / W / logic.projection_path("task:seeds")).exists()
    assert "todo/" not in (tmp_path / W / "README.md").read_text()
    with store.connect() as conn:  # no bookkeeping left for an id the store no longer has
        ids = set(conn.execute(select(objects_projection.c.object_id)).scalars())
    assert "todo:seeds" not in ids and "task:seeds" in ids


def test_a_new_source_or_relation_puts_the_objects_file_behind_until_it_shows_it(store, ingest, tmp_path):
    octx, (e1, e2) = ready(store, ingest, ["Ana plants seeds", "Ana waters the garden"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)  # creates project:daily
    c = claim_for(octx, e1)
    graph.commit(octx, c, sub(c, objects=[{"id": "person:ana", "name": "Ana"}]))
    _caught_up(store, tmp_path)
    ana = tmp_path / W / logic.projection_path("person:ana")
    assert e1 in ana.read_text() and e2 not in ana.read_text()

    c = claim_for(octx, e2)  # linked by attaching only: the dossier's fields stay as they are
    rel = {"src": "person:ana", "label": "member_of", "dst": "project:daily"}
    graph.commit(octx, c, sub(c, attach=["person:ana"], relations=[rel]))
    with store.connect() as conn:  # neither object was rewritten
        assert set(conn.execute(select(objects_objects.c.version)).scalars()) == {1}
    assert reports.status(store, W)["projection"]["behind"] == 2  # Ana (a source, a relation) and the project
    assert projection.needs_pass(store, tmp_path) == "objects newer than their files"
    _caught_up(store, tmp_path)
    text = ana.read_text()
    assert e2 in text and "person:ana **member_of** project:daily" in text
    daily = (tmp_path / W / logic.projection_path("project:daily")).read_text()
    assert "person:ana **member_of** project:daily" in daily
    assert projection.needs_pass(store, tmp_path) is None and reports.status(store, W)["projection"]["behind"] == 0


def test_a_file_that_is_not_utf8_is_rewritten_but_a_core_documents_edit_is_kept_and_reported(store, ingest, tmp_path):
    """A stray byte that is no UTF-8 in one object file stopped every pass with a traceback (no
    world's files repaired again); in a core document it read as no file, so the store's text would
    have overwritten the human's edit. The object file is rewritten; the core document is kept and
    the pass says why."""
    octx = _people(store, ingest, 1)
    graph.import_core(octx, W, "USER.md", "# User\n\nGrows tomatoes.\n")
    while projection.project(store, tmp_path).behind_after:
        pass
    obj = tmp_path / W / logic.projection_path("person:p00")
    good = obj.read_text(encoding="utf-8")
    obj.write_bytes(good.encode() + b"\xff\xfe garbage\n")
    core = tmp_path / W / "USER.md"
    edit = b"User likes \xff\xfe tomatoes.\n"
    core.write_bytes(edit)
    rep = projection.project(store, tmp_path)
    assert obj.read_text(encoding="utf-8") == good  # the store's text again
    assert core.read_bytes() == edit  # the human's edit, as written
    said = "w1 USER.md: human edit not imported: USER.md: the file is not UTF-8 text (byte 11: b'\\xff')"
    assert said in rep.errors, rep.errors
    # reported once and kept in status: the sensor does not ask for a pass every tick for the same bytes
    assert projection.needs_pass(store, tmp_path) is None
    assert reports.status(store, W)["projection"]["errors"], reports.status(store, W)["projection"]
    assert projection.project(store, tmp_path).errors == [] and core.read_bytes() == edit


def test_an_os_error_names_the_path_it_met(store, ingest, tmp_path):
    """The world's folder is a file (a projection_dir pointed at the wrong place): each object's error
    names that path, not only `Not a directory`, so status says where to look."""
    _people(store, ingest, 1)
    blocker = tmp_path / W
    blocker.write_text("not a folder\n")
    rep = projection.project(store, tmp_path)
    assert rep.errors, rep
    assert all(str(blocker) in e for e in rep.errors), rep.errors
    assert any(e.startswith(f"{W} person:p00: NotADirectoryError: Not a directory (") for e in rep.errors), rep.errors
    assert blocker.read_text() == "not a folder\n"  # nothing written over it
