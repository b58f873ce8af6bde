"""Seed 001 on PostgreSQL, the timeline and organize protocol line by line: raw retention and no
back-flow, the threshold job's fixed range, compaction and graph writes as one transaction, hot
events never archived by organize or deep, the page and the related objects within the transfer
budget, resuming from the current dossier and progress, the read tools before a write, the scope as
a hint, archive_only still readable by time, a later failure keeping an earlier success."""

from __future__ import annotations

import json
import math

import pytest
from sqlalchemy import select, update

from memory_pipeline.lib.llm.client import LLMHardFailure
from memory_pipeline.lib.store import leases
from memory_pipeline.lib.store.tables import llm_ledger, messages
from memory_pipeline.objects import graph, logic, offline_rules, projection, recall, timeline, tools, worker
from memory_pipeline.objects.logic import SubmissionError
from memory_pipeline.objects.tables import (
    objects_attachments,
    objects_core,
    objects_event_state,
    objects_hot_nodes,
    objects_jobs,
    objects_receipts,
    objects_relations,
    objects_worlds,
)
from memory_pipeline_tests.conftest import cst
from memory_pipeline_tests.integration.test_objects import (
    W,
    add,
    claim_for,
    compact_all,
    count,
    octx_for,
    ready,
    snapshot,
    states,
    sub,
)


def _spy(octx, monkeypatch) -> list:
    """Every request the batch sends to the model."""
    sent = []
    real = octx.llm.complete
    monkeypatch.setattr(octx.llm, "complete", lambda req, **kw: sent.append(req) or real(req, **kw))
    return sent


def _call(name, args):
    return offline_rules._call(name, args)


# --- timeline and compact ------------------------------------------------------------------------------
def test_raw_events_are_kept_unchanged_and_only_raw_events_become_sources(store, ingest, tmp_path):
    octx = octx_for(store)
    ids = add(ingest, ["garden " * 1_500, "compost pile turned", "ok"])  # 10,500 characters: two pages
    with store.connect() as conn:
        raw_before = sorted(conn.execute(select(messages.c.message_id, messages.c.content, messages.c.at)).all())
    timeline.intake(octx)
    compact_all(octx)
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    assert projection.project(store, tmp_path, per_pass=100).written > 0
    with store.connect() as conn:
        raw_after = sorted(conn.execute(select(messages.c.message_id, messages.c.content, messages.c.at)).all())
        sources = set(conn.execute(select(objects_attachments.c.event_id)).scalars())
        heads = set(conn.execute(select(objects_hot_nodes.c.node_id).where(objects_hot_nodes.c.level > 0)).scalars())
    assert raw_after == raw_before  # archived events stay in the raw table, unchanged, none deleted
    assert {states(store)[i] for i in ids} == {"linked", "archive_only"}
    assert sources and sources <= set(ids) and not sources & heads  # memory's own outputs never sources
    assert timeline.intake(octx).events == 0  # projected files and summary heads never come back in


def test_a_threshold_job_ends_when_its_fixed_range_is_done_and_the_estimator_is_configurable(store, ingest):
    octx = octx_for(store, compact_threshold_tokens=400, chars_per_token=2.0)
    texts = [f"marathon pacing session {i} " * 4 for i in range(12)]
    add(ingest, texts)
    timeline.intake(octx)
    assert timeline.hot_estimates(octx)[W] == sum(math.ceil(len(t) / 2) for t in texts)  # characters / 2
    (job,) = worker.enqueue_threshold(octx)
    worker.run_worker(octx, max_batches=1)  # the job fixed its range at its first batch
    late = add(ingest, ["suffix stretching " * 110] * 3, start=cst(2026, 1, 10, 12, 0), conv="c2")
    timeline.intake(octx)
    worker.run_worker(octx)
    with store.connect() as conn:
        status, end = conn.execute(
            select(objects_jobs.c.status, objects_jobs.c.range_end_seq).where(objects_jobs.c.job_id == job["job_id"])
        ).one()
        in_range = conn.execute(
            select(objects_hot_nodes.c.node_id).where(
                objects_hot_nodes.c.active.is_(True), objects_hot_nodes.c.seq <= end
            )
        ).all()
    assert status == "done" and len(in_range) == 1  # its range is done: nothing left there to merge
    assert timeline.hot_estimates(octx)[W] >= 0.6 * 400  # still over 60%: the suffix is not its work
    assert {states(store)[e] for e in late} == {"hot"}


def test_a_compact_commit_is_one_transaction(store, ingest):
    octx = octx_for(store)
    add(ingest, [f"garden note {i}" for i in range(4)])
    timeline.intake(octx)
    batch = timeline.next_batch(octx, W, 10**9, 4)
    n = objects_hot_nodes.c
    with store.begin() as conn:  # the batch's last node left the hot timeline meanwhile
        conn.execute(update(objects_hot_nodes).where(n.node_id == batch.ids[-1]).values(active=False))

    def view():
        with store.connect() as conn:
            return (
                sorted(conn.execute(select(n.node_id, n.active, n.parent_id)).all()),
                count(store, objects_receipts),
                conn.execute(select(objects_worlds.c.graph_revision)).scalar(),
                sorted(states(store).items()),
            )

    before = view()
    with pytest.raises(SubmissionError, match="stale"):
        timeline.commit_compact(octx, batch, "garden", token="tok-compact-01", job_id=None, lease_check=lambda c: None)
    assert view() == before  # the three nodes it had deactivated are active again; no head, no receipt


def test_hot_events_never_reach_the_queue_through_organize_or_deep(store, ingest):
    octx, _ = ready(store, ingest, ["garden one"])
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    (hot,) = add(ingest, ["a fresh event about compost"], start=cst(2026, 1, 10, 12, 0), conv="c2")
    timeline.intake(octx)
    graph.import_core(octx, W, "USER.md", "The user gardens.")
    n = objects_hot_nodes.c

    def hot_view():
        with store.connect() as conn:
            return sorted(conn.execute(select(n.node_id, n.active, n.text)).all())

    nodes_before = hot_view()
    worker.enqueue(octx, W, "organize")
    worker.enqueue(octx, W, "deep")
    rep = worker.run_worker(octx)
    assert rep.jobs_done == 2 and rep.outcomes == {}  # deep ran; organize found nothing queued
    assert states(store)[hot] == "hot" and hot_view() == nodes_before  # deep never changes the timeline
    with store.connect() as conn:
        assert dict(conn.execute(select(objects_core.c.name, objects_core.c.content)).all()) == {
            "USER.md": "The user gardens."
        }  # no forced core change


def test_the_hot_view_cap_is_configured_and_truncation_is_reported(store, ingest):
    octx = octx_for(store, hot_view_max_bytes=3_500)
    add(ingest, ["x" * 1_000] * 10)
    timeline.intake(octx)
    view = timeline.hot_view(octx, W)
    assert view.truncated and (len(view.nodes), view.total) == (3, 10)
    res = recall.resident(store, W, octx.cfg.hot_view_max_bytes)
    assert (res["hot_nodes_shown"], res["hot_nodes_total"]) == (3, 10)


# --- organize ------------------------------------------------------------------------------------------------
def test_a_failed_claim_shrinks_the_next_page(store, ingest, monkeypatch):
    octx, (big,) = ready(store, ingest, ["tomatoes " * 2_222])
    pages = []
    real = offline_rules.organize

    def model(**kw):
        pages.append(kw["page_end"])
        if len(pages) == 1:
            raise LLMHardFailure("context window exceeded")
        return real(**kw)

    monkeypatch.setattr(offline_rules, "organize", model)
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx, max_batches=2)
    assert pages == [8_000, 4_000]  # halved after the failure
    with store.connect() as conn:
        cursor = conn.execute(
            select(objects_event_state.c.page_cursor).where(objects_event_state.c.event_id == big)
        ).scalar()
    assert cursor == 4_000


def test_related_objects_are_delivered_within_the_transfer_budget(store, ingest, monkeypatch):
    names = [f"Plot{i:02d}" for i in range(30)]
    octx, (e1, e2) = ready(store, ingest, ["x", " ".join(names)], transfer_budget_bytes=24_000)
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    c = claim_for(octx, e1)
    objs = [{"id": f"knowledge:p{i}", "name": n, "body": "unknown " * 375} for i, n in enumerate(names)]
    graph.commit(octx, c, sub(c, objects=objs))
    leases.release(store, graph.LEASE_ASSET, W, "h-test")
    with store.begin() as conn:
        conn.execute(update(objects_jobs).values(status="done"))
    sent = _spy(octx, monkeypatch)
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    claim = json.loads(sent[0].user)
    delivered = claim["objects"]
    page_bytes = len(claim["event"]["text"].encode())
    assert 0 < len(delivered) < 30  # every one is named, only what fits goes along
    assert sum(len(json.dumps(o, ensure_ascii=False, default=str).encode()) for o in delivered) <= 24_000 - page_bytes
    assert states(store)[e2] == "linked"


def test_the_next_batch_resumes_from_the_current_dossier_and_the_saved_progress(store, ingest, monkeypatch):
    octx, (big,) = ready(store, ingest, ["QHY waters the tomatoes. " * 700])  # 17,500 characters: 3 pages
    real = offline_rules.organize

    def model(**kw):
        if kw["page_end"] == 8_000:  # page 1: a new person and a progress note
            return _call(
                "submit_graph",
                {
                    "token": kw["token"],
                    "graph_revision": kw["graph_revision"],
                    "event_id": kw["event_id"],
                    "page_end": 8_000,
                    "outcome": "continue",
                    "progress": "met QHY; the rest is about watering",
                    "objects": [{"id": "person:qhy", "name": "QHY", "body": "Role: unknown"}],
                },
            )
        return real(**kw)

    monkeypatch.setattr(offline_rules, "organize", model)
    sent = _spy(octx, monkeypatch)
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    second = json.loads(sent[1].user)
    assert second["event"]["page"] == [8_000, 16_000]
    assert second["progress"] == "met QHY; the rest is about watering"
    assert {"id": "person:qhy", "body": "Role: unknown"}.items() <= next(
        o for o in second["objects"] if o["id"] == "person:qhy"
    ).items()
    assert states(store)[big] == "linked"


def test_the_model_lists_and_reads_sources_before_writing_and_only_a_read_allows_a_rewrite(store, ingest, monkeypatch):
    octx, (e1, e2) = ready(store, ingest, ["garden one", "a note about the plot"])
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx, max_batches=1)  # e1 -> knowledge:garden
    rounds = []

    def model(**kw):  # e2 does not name the garden: its object is not delivered
        base = {"token": kw["token"], "graph_revision": kw["graph_revision"], "event_id": kw["event_id"]}
        steps = [
            ("memory_list", {"type": "knowledge"}),
            ("memory_evidence", {"id": "knowledge:garden"}),
            ("memory_evidence", {"id": "knowledge:garden", "offset": "x"}),
            ("submit_graph", {**base, "page_end": kw["page_end"], "outcome": "linked", "objects": [rewrite]}),
            ("memory_read", {"id": "knowledge:garden"}),
            ("submit_graph", {**base, "page_end": kw["page_end"], "outcome": "linked", "objects": [rewrite]}),
        ]
        rounds.append(steps[len(rounds)][0])
        return _call(*steps[len(rounds) - 1])

    rewrite = {"id": "knowledge:garden", "name": "garden", "body": "Conclusion: the plot is the garden"}
    monkeypatch.setattr(offline_rules, "organize", model)
    sent = _spy(octx, monkeypatch)
    worker.run_worker(octx)
    assert rounds == [
        "memory_list",
        "memory_evidence",
        "memory_evidence",
        "submit_graph",
        "memory_read",
        "submit_graph",
    ]
    assert [t["function"]["name"] for t in sent[0].tools] == [
        "memory_list",
        "memory_find",
        "memory_read",
        "memory_evidence",
        "submit_graph",
    ]
    talk = sent[-1].conversation  # every answer, then its tool call's result with its id
    assert [m["role"] for m in talk] == ["user"] + ["assistant", "tool"] * 5
    for answer, result in zip(talk[1::2], talk[2::2], strict=True):
        assert result["tool_call_id"] == answer["tool_calls"][0]["id"]
    results = [json.loads(m["content"]) for m in talk[2::2]]
    assert [i["id"] for i in results[0]["items"]] == ["knowledge:garden"]
    assert [i["text"] for i in results[1]["items"]] == ["garden one"]
    assert results[2] == {"refused": "memory_evidence.offset: expected an integer", "corrections_left": 2}
    assert "not read in this batch" in results[3]["refused"]  # the evidence alone does not allow a rewrite
    assert results[4]["id"] == "knowledge:garden" and results[4]["body"] == ""  # the offline model guesses none
    assert recall.read(store, W, "knowledge:garden")["body"] == "Conclusion: the plot is the garden"
    assert states(store)[e2] == "linked"


def test_the_scope_reaches_the_model_as_a_hint_never_as_a_filter(store, ingest, monkeypatch):
    octx, (e1, e2) = ready(store, ingest, ["garden one", "harbor invoice"])
    sent = _spy(octx, monkeypatch)
    receipt = tools.call(octx, "memory_organize", {"world": W, "mode": "organize", "scope": "only the garden"})
    assert receipt["status"] == "queued" and sent == []  # an enqueue receipt at once, no model call
    worker.run_worker(octx)
    assert {json.loads(r.user)["scope"] for r in sent} == {"only the garden"}
    assert states(store)[e1] == states(store)[e2] == "linked"  # the harbor event is archived too


def test_an_archive_only_event_stays_readable_by_time(store, ingest):
    octx, (e1,) = ready(store, ingest, ["ok, yes"])  # no content word: offline rule O4
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    assert states(store)[e1] == "archive_only"
    assert recall.event_view(store, e1)["reason"] == "no object target (offline rule O4)"
    listed = recall.events_between(store, cst(2026, 1, 10), cst(2026, 1, 11))
    assert [(x["event_id"], x["state"], x["preview"]) for x in listed["items"]] == [(e1, "archive_only", "ok, yes")]
    assert worker.pending_counts(octx) == {}  # final: it left the hourly scan


def test_a_graph_write_is_one_transaction(store, ingest):
    octx, (e1,) = ready(store, ingest, ["QHY plants tomatoes"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    c = claim_for(octx, e1)

    def lost(conn):  # the last statement of the commit fails (the database went away)
        raise RuntimeError("connection lost at the end of the commit")

    c.finish = lost
    before = snapshot(store), count(store, objects_relations)
    raw = sub(
        c,
        objects=[{"id": "person:qhy", "name": "QHY"}, {"id": "project:garden", "name": "Garden"}],
        relations=[{"src": "person:qhy", "label": "member_of", "dst": "project:garden"}],
        core=[{"name": "USER.md", "content": "The user gardens."}],
    )
    with pytest.raises(RuntimeError, match="connection lost"):
        graph.commit(octx, c, raw)
    assert (snapshot(store), count(store, objects_relations)) == before  # nothing of it, no revision
    c.finish = None
    assert graph.commit(octx, c, raw)["objects_created"] == ["person:qhy", "project:garden"]


def test_a_later_failure_never_undoes_an_earlier_success(store, ingest, monkeypatch):
    octx, (big,) = ready(store, ingest, ["tomatoes " * 2_222])  # three pages

    def model(**kw):
        if kw["page_end"] > 8_000:
            raise LLMHardFailure("provider down")
        return _call(
            "submit_graph",
            {
                "token": kw["token"],
                "graph_revision": kw["graph_revision"],
                "event_id": kw["event_id"],
                "page_end": 8_000,
                "outcome": "continue",
                "progress": "first third: tomatoes",
                "objects": [{"id": "knowledge:tomatoes", "name": "tomatoes"}],
            },
        )

    monkeypatch.setattr(offline_rules, "organize", model)
    worker.enqueue(octx, W, "organize")
    rep = worker.run_worker(octx)
    assert rep.committed == 1 and rep.failures == 5 and rep.blocked_events == 1
    with store.connect() as conn:
        st = conn.execute(
            select(
                objects_event_state.c.state, objects_event_state.c.page_cursor, objects_event_state.c.progress
            ).where(objects_event_state.c.event_id == big)
        ).one()
    assert tuple(st) == ("blocked", 8_000, "first third: tomatoes")  # the checkpoint is kept
    assert recall.read(store, W, "knowledge:tomatoes")["sources"][0]["event_id"] == big
    assert count(store, objects_receipts, objects_receipts.c.mode == "organize") == 1
    # every model call is in the ledger: the committed batch's and the five failed ones
    assert count(store, llm_ledger, llm_ledger.c.task == "objects_organize") == rep.model_calls == 6


def test_the_resident_context_holds_a_bounded_directory_never_dossiers(store, ingest):
    octx, (e1, e2) = ready(store, ingest, ["x", "y"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    for event_id, first in ((e1, 0), (e2, 32)):
        c = claim_for(octx, event_id)
        people = [{"id": f"person:p{first + i}", "name": f"P{first + i}", "body": "Role: unknown"} for i in range(32)]
        graph.commit(octx, c, sub(c, objects=people))
    res = recall.resident(store, W)
    assert len(res["directory"]) == recall.DIRECTORY_MAX == 50 and res["directory_truncated"]
    assert all(set(d) == {"id", "name"} for d in res["directory"])  # names only: recall is on demand


def test_projection_lag_and_errors_show_in_status(store, ingest, tmp_path):
    from memory_pipeline.objects import reports

    octx, (e1,) = ready(store, ingest, ["x"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    c = claim_for(octx, e1)
    people = [f"person:p{i}" for i in range(3)]
    graph.commit(octx, c, sub(c, objects=[{"id": p, "name": p[-2:]} for p in people]))
    caught_up = {"behind": 0, "missing": 0, "differing": 0, "errors": []}
    assert reports.status(store)["projection"] == {**caught_up, "behind": 4}  # with project:daily
    (tmp_path / W).mkdir()
    (tmp_path / W / "person").write_text("a file where the person folder goes")
    rep = projection.project(store, tmp_path)
    assert len(rep.errors) == 3
    lag = reports.status(store)["projection"]
    assert lag["behind"] == 3 and sorted(e["object_id"] for e in lag["errors"]) == people
    (tmp_path / W / "person").unlink()
    projection.project(store, tmp_path)
    assert reports.status(store)["projection"] == caught_up
