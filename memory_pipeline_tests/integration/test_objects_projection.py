"""Seed 001 §6 Markdown projection against what is on disk (PostgreSQL): a deleted or hand-edited
object file is found and rewritten from the store (its edit never imported), at most 10 objects a
pass with unchanged files not rewritten, and status shows the files missing, differing and being
rewritten until the passes catch up."""

from __future__ import annotations

import os

from memory_pipeline.lib.store import leases
from memory_pipeline.objects import graph, logic, projection, recall, reports, worker
from memory_pipeline.objects.tables import objects_attachments
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
