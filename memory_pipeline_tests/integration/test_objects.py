"""Seed 001 (object memory) on PostgreSQL: hot timeline and compaction, organize pages and
outcomes, graph-write refusals, reliability (leases, rotation, blocking, cooldown), deep review,
recall, inspection and the Markdown projection. The model is the offline rule set; a scripted
model (a replaced offline rule) plays a misbehaving one."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.llm.client import LLMHardFailure
from memory_pipeline.lib.store import leases
from memory_pipeline.lib.store.requests import RequestConflict
from memory_pipeline.lib.store.tables import conversations, llm_ledger, messages, partition_leases
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.objects import graph, logic, offline_rules, projection, recall, reports, timeline, worker
from memory_pipeline.objects.config import ObjectsConfig
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.logic import JobMode, SubmissionError
from memory_pipeline.objects.tables import (
    objects_attachments,
    objects_event_state,
    objects_hot_nodes,
    objects_jobs,
    objects_objects,
    objects_receipts,
    objects_versions,
    objects_worlds,
)
from memory_pipeline_tests.conftest import cst, event

W = "w1"


def octx_for(store, **cfg) -> ObjectsContext:
    return ObjectsContext(store, LLMClient(store, asset="objects_test"), ObjectsConfig(retry_backoff_seconds=0, **cfg))


def add(ingest, texts, start=None, world=W, conv="c1"):
    start = start or cst(2026, 1, 10, 9, 0)
    evs = [
        event(world, conv, "user", t, start + timedelta(minutes=i), mid=f"{conv}-{i}-{uuid.uuid4().hex[:6]}")
        for i, t in enumerate(texts)
    ]
    ingest(evs)
    return [e["message_id"] for e in evs]


def states(store) -> dict[str, str]:
    with store.connect() as conn:
        return dict(conn.execute(select(objects_event_state.c.event_id, objects_event_state.c.state)).all())


def count(store, table, *where) -> int:
    with store.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar())


def compact_all(octx, world=W):
    worker.enqueue(octx, world, "compact")
    return worker.run_worker(octx)


# --- timeline and compact ----------------------------------------------------------------------------
def test_an_explicit_compact_moves_a_lone_one_character_reply_out_of_the_timeline_too(store, ingest):
    """Nine events: a full group of 8, then the lone "好" left, which no summary can shorten."""
    octx = octx_for(store)
    ids = add(ingest, [f"note {i} about the garden" for i in range(8)] + ["好"])
    timeline.intake(octx)
    rep = compact_all(octx)
    assert rep.failures == 0 and rep.jobs_done == 1
    assert set(states(store).values()) == {"pending"} and set(states(store)) == set(ids)
    with store.connect() as conn:
        heads = conn.execute(
            select(objects_hot_nodes.c.level, objects_hot_nodes.c.text).where(objects_hot_nodes.c.active.is_(True))
        ).all()
    assert sorted(level for level, _ in heads) == [1, 1] and ("好" in {t for _, t in heads})


def test_events_enter_as_slices_of_2000_oversized_refused_and_raw_never_copied(store, ingest):
    octx = octx_for(store)
    ids = add(ingest, ["a" * 4_500, "b" * 32_000, "c" * 32_001, ""])
    rep = timeline.intake(octx)
    assert (rep.events, rep.slices, rep.oversized) == (3, 3 + 16, 1)  # the empty turn is not memory
    with store.connect() as conn:
        lens = (
            conn.execute(select(func.length(objects_hot_nodes.c.text)).where(objects_hot_nodes.c.event_id == ids[0]))
            .scalars()
            .all()
        )
        occurred = conn.execute(
            select(objects_event_state.c.occurred_at).where(objects_event_state.c.event_id == ids[0])
        ).scalar()
    assert sorted(lens) == [500, 2000, 2000]
    assert occurred == cst(2026, 1, 10, 9, 0)  # occurrence time, not ingest time
    assert states(store)[ids[2]] == "oversized"
    assert timeline.intake(octx).events == 0  # idempotent
    assert count(store, messages) == 4  # archived or not, the raw table is untouched


def test_compact_queues_an_event_only_when_all_its_slices_left_and_heads_never_requeue(store, ingest):
    octx = octx_for(store)
    big = add(ingest, ["word " * 4_000])[0]  # 20,000 characters: 10 slices
    timeline.intake(octx)
    worker.enqueue(octx, W, "compact")
    worker.run_worker(octx, max_batches=1)  # 8 of 10 slices compacted
    assert states(store)[big] == "hot"
    with store.connect() as conn:
        r = conn.execute(select(objects_receipts)).mappings().one()
    assert len(r["detail"]["covers"]) == 8 and r["detail"]["queued_events"] == []
    worker.run_worker(octx)
    assert states(store)[big] == "pending"
    with store.connect() as conn:
        queued = [x for d in conn.execute(select(objects_receipts.c.detail)).scalars() for x in d["queued_events"]]
    assert queued == [big]
    # re-compacting heads (a second explicit compact over the whole range) never re-queues
    with store.begin() as conn:
        conn.execute(update(objects_event_state).values(state="linked"))
    add(ingest, ["more words here"], start=cst(2026, 1, 10, 10, 0))
    timeline.intake(octx)
    compact_all(octx)
    assert states(store)[big] == "linked"


def test_compact_one_transaction_heads_expand_level_by_level_to_raw_slices(store, ingest):
    octx = octx_for(store)
    add(ingest, [f"garden tomatoes compost note {i}" for i in range(20)])
    timeline.intake(octx)
    compact_all(octx)
    with store.connect() as conn:
        raw_active = count(
            store, objects_hot_nodes, objects_hot_nodes.c.level == 0, objects_hot_nodes.c.active.is_(True)
        )
        heads = conn.execute(select(objects_hot_nodes).where(objects_hot_nodes.c.level > 0)).mappings().all()
    assert raw_active == 0
    assert all(len(h["children"]) <= 8 for h in heads)
    for h in heads:  # each head is shorter than its children, and was its own receipt
        kids = timeline.expand(octx, h["node_id"])
        assert len(h["text"]) < sum(len(k["text"]) for k in kids)
        assert all(k["level"] < h["level"] for k in kids)
        assert count(store, objects_receipts, objects_receipts.c.token == h["receipt_token"]) == 1
    # the pending queue equals exactly the compacted events
    assert set(states(store).values()) == {"pending"}


def test_threshold_job_ends_below_60_percent_and_suffix_nodes_are_not_covered(store, ingest):
    octx = octx_for(store, compact_threshold_tokens=400)
    add(ingest, [f"marathon interval training pacing recovery session {i} " * 3 for i in range(40)])
    timeline.intake(octx)
    before = timeline.hot_estimates(octx)[W]
    assert before > 400
    assert [r["origin"] for r in worker.enqueue_threshold(octx)] == ["threshold"]
    assert worker.enqueue_threshold(octx) == []  # one in flight
    worker.run_worker(octx, max_batches=1)
    late = add(ingest, ["late suffix event about stretching"], start=cst(2026, 1, 10, 12, 0), conv="c2")
    timeline.intake(octx)
    worker.run_worker(octx)
    after = timeline.hot_estimates(octx)[W]
    assert after < 0.6 * 400
    with store.connect() as conn:
        suffix = conn.execute(
            select(objects_hot_nodes.c.active).where(objects_hot_nodes.c.event_id == late[0])
        ).scalar()
    assert suffix is True and states(store)[late[0]] == "hot"


def test_explicit_compact_covers_its_whole_range(store, ingest):
    octx = octx_for(store, compact_threshold_tokens=100_000)
    ids = add(ingest, [f"deploy pipeline benchmark {i}" for i in range(30)])
    timeline.intake(octx)
    compact_all(octx)
    assert all(states(store)[i] == "pending" for i in ids)


def test_compact_shrinks_the_batch_on_capacity_failure(store, ingest, monkeypatch):
    octx = octx_for(store)
    add(ingest, [f"refactor database migration {i}" for i in range(8)])
    timeline.intake(octx)
    sizes = []
    real = offline_rules.compact

    def model(nodes):
        sizes.append(len(nodes))
        if len(nodes) > 2:
            raise LLMHardFailure("context window exceeded")
        return real(nodes)

    monkeypatch.setattr(offline_rules, "compact", model)
    compact_all(octx)
    assert sizes[:3] == [8, 4, 2]
    assert count(store, objects_hot_nodes, objects_hot_nodes.c.level == 0, objects_hot_nodes.c.active.is_(True)) == 0


def test_an_object_write_during_compact_is_refused_and_a_threshold_failure_suppresses_for_an_hour(
    store, ingest, monkeypatch
):
    octx = octx_for(store, compact_threshold_tokens=10)
    add(ingest, ["garden watering seedlings"] * 4)
    timeline.intake(octx)

    def model(nodes):
        return offline_rules._call(
            "submit_compact",
            {"summary": "s", "covers": [n for n, _ in nodes], "objects": [{"id": "person:x", "name": "x"}]},
        )

    monkeypatch.setattr(offline_rules, "compact", model)
    worker.enqueue_threshold(octx)
    rep = worker.run_worker(octx)
    assert rep.failures == 5 and rep.jobs_failed == 1 and "object writes are refused" in rep.errors[0]
    assert count(store, objects_objects) == 1  # only the built-in project:daily
    assert count(store, objects_hot_nodes, objects_hot_nodes.c.active.is_(True)) == 4  # nothing half-written
    assert worker.threshold_worlds(octx) == []  # suppressed for an hour
    with store.connect() as conn:
        until = conn.execute(select(objects_worlds.c.auto_suppressed_until)).scalar()
    assert timedelta(minutes=59) < until - utcnow() <= timedelta(hours=1)
    assert worker.enqueue(octx, W, "compact")["status"] == "queued"  # explicit requests are not suppressed
    octx.clock = lambda: utcnow() + timedelta(hours=1, minutes=1)
    assert worker.threshold_worlds(octx) == []  # the explicit job is in flight now
    with store.begin() as conn:
        conn.execute(update(objects_jobs).values(status="done"))
    assert worker.threshold_worlds(octx) == [W]


def test_hot_view_is_capped_and_says_so(store, ingest):
    octx = octx_for(store)
    add(ingest, ["x" * 1_000] * 10)
    timeline.intake(octx)
    view = timeline.hot_view(octx, W, max_bytes=3_500)
    assert view.truncated and len(view.nodes) == 3 and view.total == 10


# --- organize ---------------------------------------------------------------------------------------------
def ready(store, ingest, texts, **cfg):
    octx = octx_for(store, **cfg)
    ids = add(ingest, texts)
    timeline.intake(octx)
    compact_all(octx)
    return octx, ids


def test_organize_reads_every_page_with_checkpoints_then_links(store, ingest):
    octx, (big,) = ready(store, ingest, ["tomatoes " * 2_222])  # 19,998 characters
    worker.enqueue(octx, W, "organize")
    cursors = []
    for _ in range(3):
        worker.run_worker(octx, max_batches=1)
        with store.connect() as conn:
            cursors.append(
                conn.execute(
                    select(
                        objects_event_state.c.page_cursor, objects_event_state.c.state, objects_event_state.c.progress
                    )
                ).one()
            )
    assert [c[0] for c in cursors] == [8_000, 16_000, 19_998]
    assert [c[1] for c in cursors] == ["in_progress", "in_progress", "linked"]
    assert cursors[0][2] == "read 8000 of 19998 characters"
    with store.connect() as conn:
        outcomes = (
            conn.execute(
                select(objects_receipts.c.outcome)
                .where(objects_receipts.c.mode == "organize")
                .order_by(objects_receipts.c.revision)
            )
            .scalars()
            .all()
        )
        att = conn.execute(select(objects_attachments.c.object_id, objects_attachments.c.event_id)).all()
    assert outcomes == ["continue", "continue", "linked"]
    assert att == [("knowledge:tomatoes", big)]
    assert worker.pending_counts(octx) == {}  # linked leaves the hourly scan
    assert worker.enqueue_hourly(octx) == []


def test_page_shrinks_to_the_transfer_budget(store, ingest):
    octx, _ = ready(store, ingest, ["compost " * 2_000], transfer_budget_bytes=24_000)
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx, max_batches=1)
    with store.connect() as conn:
        assert conn.execute(select(objects_event_state.c.page_cursor)).scalar() == 6_000  # 24,000 bytes / 4


def claim_for(octx, event_id, holder="h-test", start=0, stop=None, read=()):
    with octx.store.connect() as conn:
        ev = (
            conn.execute(select(objects_event_state).where(objects_event_state.c.event_id == event_id)).mappings().one()
        )
        text = conn.execute(select(messages.c.content).where(messages.c.message_id == event_id)).scalar()
        rev = conn.execute(select(objects_worlds.c.graph_revision)).scalar()
    leases.try_acquire(octx.store, graph.LEASE_ASSET, W, holder, timedelta(seconds=360))
    stop = len(text) if stop is None else stop
    page = graph.EventPage(event_id, len(text), start, stop, text[start:stop], ev["occurred_at"], ev["event_day"])
    return graph.Claim(W, None, JobMode.ORGANIZE, holder, rev, set(read), page=page)


def sub(claim, **kw):
    return {
        "token": f"tok-{uuid.uuid4().hex}",
        "graph_revision": claim.graph_revision,
        "event_id": claim.page.event_id,
        "page_end": claim.page.stop,
        "outcome": "linked",
        **kw,
    }


def snapshot(store):
    with store.connect() as conn:
        return (
            conn.execute(select(objects_worlds.c.graph_revision)).scalar(),
            count(store, objects_objects),
            count(store, objects_receipts),
            count(store, objects_attachments),
            count(store, objects_versions),
            sorted(conn.execute(select(objects_event_state.c.state, objects_event_state.c.page_cursor)).all()),
        )


def test_graph_write_refusals_write_nothing(store, ingest):
    octx, (e1, e2) = ready(store, ingest, ["about the garden", "and the harvest"])
    worker.enqueue(octx, W, "organize")  # creates project:daily
    with store.connect() as conn:
        conn.execute(select(1))
    person = {"id": "person:qhy", "name": "QHY", "summary": "gardener"}
    claim = claim_for(octx, e1)
    receipt = graph.commit(octx, claim, sub(claim, objects=[person]))
    assert receipt["objects_created"] == ["person:qhy"] and receipt["attached"] == ["person:qhy"]
    claim2 = claim_for(octx, e2)
    before = snapshot(store)
    cases = {
        "stale": sub(claim2, graph_revision=claim2.graph_revision - 1, attach=["person:qhy"]),
        "unread overwrite": sub(claim2, objects=[{**person, "summary": "changed"}]),
        "out-of-range evidence": sub(claim2, attach=["person:qhy"], evidence=[e1]),
        "skipped event": {**sub(claim2, attach=["person:qhy"]), "event_id": e1},
        "skipped page": sub(claim2, attach=["person:qhy"], page_end=claim2.page.stop + 5),
        "no target": sub(claim2),
        "secret": sub(
            claim2,
            objects=[{"id": "credential:k", "name": "k", "purpose": "p", "reference": "sk-abcdefghijklmnopqrstuvwxyz"}],
        ),
        "project active": sub(claim2, objects=[{"id": "project:new", "name": "New", "status": "active"}]),
        "missing target": sub(claim2, attach=["person:nobody"]),
    }
    messages_ = {}
    for name, raw in cases.items():
        with pytest.raises(SubmissionError) as e:
            graph.commit(octx, claim2, raw)
        messages_[name] = str(e.value)
        assert snapshot(store) == before, name
    assert "stale" in messages_["stale"] and "not read" in messages_["unread overwrite"]
    assert (
        "out-of-range evidence" in messages_["out-of-range evidence"] and "skipped event" in messages_["skipped event"]
    )
    assert "skipped unread page" in messages_["skipped page"] and "secret" in messages_["secret"]
    # archive_only is refused for an event that already has an object target
    with pytest.raises(SubmissionError, match="cannot be without long-term value"):
        graph.commit(
            octx,
            claim_for(octx, e1, start=len("about the garden")),
            {**sub(claim, outcome="archive_only", reason="r"), "graph_revision": receipt["revision"]},
        )
    # an expired lease is refused
    with store.begin() as conn:
        conn.execute(update(partition_leases).values(expires_at=utcnow() - timedelta(seconds=1)))
    with pytest.raises(SubmissionError, match="lease"):
        graph.commit(octx, claim2, sub(claim2, attach=["person:qhy"]))
    assert snapshot(store) == before


def test_replayed_token_returns_the_original_receipt(store, ingest):
    octx, (e1,) = ready(store, ingest, ["the garden"])
    worker.enqueue(octx, W, "organize")
    claim = claim_for(octx, e1)
    raw = sub(claim, objects=[{"id": "person:a", "name": "A"}])
    first = graph.commit(octx, claim, raw)
    again = graph.commit(octx, claim, raw)
    assert again["replayed"] and again["revision"] == first["revision"] and again["objects_created"] == ["person:a"]
    assert count(store, objects_receipts, objects_receipts.c.mode == "organize") == 1


def test_linked_may_only_attach_and_versions_keep_history(store, ingest):
    octx, (e1, e2) = ready(store, ingest, ["QHY waters the garden", "QHY again"])
    worker.enqueue(octx, W, "organize")
    c1 = claim_for(octx, e1)
    graph.commit(octx, c1, sub(c1, objects=[{"id": "person:qhy", "name": "QHY", "body": "Role: gardener"}]))
    c2 = claim_for(octx, e2, read=["person:qhy"])
    r = graph.commit(octx, c2, sub(c2, attach=["person:qhy"]))
    assert r["objects_updated"] == [] and r["attached"] == ["person:qhy"]
    c3 = claim_for(octx, e2, read=["person:qhy"])
    graph.commit(octx, c3, sub(c3, objects=[{"id": "person:qhy", "name": "QHY", "body": "Role: head gardener"}]))
    with store.connect() as conn:
        versions = conn.execute(
            select(objects_versions.c.version, objects_versions.c.snapshot)
            .where(objects_versions.c.object_id == "person:qhy")
            .order_by(objects_versions.c.version)
        ).all()
    assert [(v, s["body"]) for v, s in versions] == [(1, "Role: gardener"), (2, "Role: head gardener")]


def test_new_projects_are_candidates_until_approved(store, ingest):
    octx, (e1,) = ready(store, ingest, ["start a greenhouse project"])
    worker.enqueue(octx, W, "organize")
    c = claim_for(octx, e1)
    graph.commit(
        octx,
        c,
        sub(
            c,
            objects=[{"id": "project:greenhouse", "name": "Greenhouse"}, {"id": "task:build", "name": "Build"}],
            relations=[
                {"src": "task:build", "label": "member_of", "dst": "project:greenhouse"},
                {"src": "task:build", "label": "member_of", "dst": "project:daily"},
            ],
        ),
    )
    doc = recall.read(store, W, "project:greenhouse")
    assert doc["status"] == "candidate"
    assert {r["dst"] for r in recall.read(store, W, "task:build")["relations"]} == {
        "project:greenhouse",
        "project:daily",
    }
    assert graph.approve_project(octx, W, "project:greenhouse")["status"] == "active"
    with pytest.raises(SubmissionError, match="not a candidate"):
        graph.approve_project(octx, W, "project:greenhouse")
    assert recall.read(store, W, logic.BUILTIN_DAILY)["status"] == "active"


# --- reliability -------------------------------------------------------------------------------------
def test_five_failures_block_only_that_batch_and_retry_blocked_releases_once(store, ingest, monkeypatch):
    octx, (bad, good) = ready(store, ingest, ["poison event", "garden event"])
    real = offline_rules.organize

    def model(**kw):
        if kw["event_id"] == bad:
            raise LLMHardFailure("provider exploded")
        return real(**kw)

    monkeypatch.setattr(offline_rules, "organize", model)
    first = worker.enqueue(octx, W, "organize", token="req-000001")
    rep = worker.run_worker(octx)
    assert rep.failures == 5 and rep.blocked_events == 1
    assert states(store) == {bad: "blocked", good: "pending"}
    st = reports.status(store)
    assert st["worlds"][0]["worker_error"] and len(st["failures"]) == 5 and not st["complete"]
    assert (
        reports.range_status(store, cst(2026, 1, 10).date(), cst(2026, 1, 10).date(), cst(2026, 2, 1).date())["status"]
        == "partial"
    )
    # other events go on in the next hourly run; a success clears the worker error
    assert [r["origin"] for r in worker.enqueue_hourly(octx)] == ["hourly"]
    worker.run_worker(octx)
    assert states(store) == {bad: "blocked", good: "linked"}
    after = reports.status(store)
    assert after["worlds"][0]["worker_error"] is None
    assert len(after["failures"]) == 5 and {"mode": "organize", "status": "failed", "count": 1} in after["jobs"]
    # a replayed earlier request does not release; a new one with retry_blocked does, once
    monkeypatch.setattr(offline_rules, "organize", real)
    assert worker.enqueue(octx, W, "organize", token="req-000001")["replayed"]
    assert states(store)[bad] == "blocked"
    again = worker.enqueue(octx, W, "organize", retry_blocked=True, token="req-000002")
    assert again["released_blocked"] == 1 and first["job_id"] != again["job_id"]
    assert worker.enqueue(octx, W, "organize", retry_blocked=True, token="req-000002")["released_blocked"] == 0
    worker.run_worker(octx)
    assert states(store)[bad] == "linked"


def test_one_lease_per_world_of_360_seconds_and_busy_worlds_are_not_claimed(store, ingest, monkeypatch):
    octx, _ = ready(store, ingest, ["garden"])
    seen = []
    real = offline_rules.organize

    def model(**kw):
        with store.connect() as conn:
            seen.append(conn.execute(select(partition_leases.c.acquired_at, partition_leases.c.expires_at)).all())
        return real(**kw)

    monkeypatch.setattr(offline_rules, "organize", model)
    worker.enqueue(octx, W, "organize")
    leases.try_acquire(store, graph.LEASE_ASSET, W, "someone-else", timedelta(seconds=360))
    rep = worker.run_worker(octx, max_wait=0)  # a run that may not wait leaves the busy world
    assert rep.lease_busy == [W] and rep.model_calls == 0
    leases.release(store, graph.LEASE_ASSET, W, "someone-else")
    worker.set_flags(octx, W, busy=True)
    assert worker.run_worker(octx).batches == 0
    worker.set_flags(octx, W, busy=False)
    worker.run_worker(octx)
    (rows,) = seen
    assert len(rows) == 1 and (rows[0].expires_at - rows[0].acquired_at) == timedelta(seconds=360)
    assert count(store, partition_leases) == 0  # released after the batch


def test_rotation_explicit_first_and_least_recent_claim(store, ingest):
    octx, _ = ready(store, ingest, ["garden"] * 3)
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    explicit = worker.enqueue(octx, W, "deep")
    rep = worker.WorkerReport()
    order, _ = worker._runnable(octx, W)
    assert order[0].job_id == explicit["job_id"]
    worker.run_batch(octx, order[0].job_id, rep)
    order, _ = worker._runnable(octx, W)
    assert order[0].job_id != explicit["job_id"]  # the other, never claimed, goes next


def test_a_running_job_found_at_start_up_is_released(store, ingest):
    octx, _ = ready(store, ingest, ["garden"])
    job = worker.enqueue(octx, W, "organize")
    with store.begin() as conn:
        conn.execute(update(objects_jobs).where(objects_jobs.c.job_id == job["job_id"]).values(status="running"))
    worker.run_worker(octx)
    assert set(states(store).values()) == {"linked"}


def test_hourly_idle_calls_no_model(store, ingest):
    octx = octx_for(store)
    add(ingest, ["garden"])
    timeline.intake(octx)  # still hot: never queued by organize
    assert worker.enqueue_hourly(octx) == []
    assert worker.run_worker(octx).model_calls == 0
    assert count(store, llm_ledger) == 0


def test_deep_inventory_batches_of_four_confirmed_and_failure_does_not_advance(store, ingest, monkeypatch):
    octx, (e1,) = ready(store, ingest, ["x"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    c = claim_for(octx, e1)
    objs = [{"id": f"knowledge:k{i}", "name": f"K{i}"} for i in range(9)]
    graph.commit(octx, c, sub(c, objects=objs))
    leases.release(store, graph.LEASE_ASSET, W, "h-test")
    with store.begin() as conn:
        conn.execute(
            update(objects_objects).where(objects_objects.c.object_id == "knowledge:k0").values(status="archived")
        )
        conn.execute(update(objects_jobs).values(status="done"))
    calls = []
    real = offline_rules.deep

    def model(**kw):
        calls.append(list(kw["object_ids"]))
        if len(calls) == 2:
            return offline_rules._call(
                "submit_graph",
                {"token": kw["token"], "graph_revision": kw["graph_revision"], "reviewed": kw["object_ids"][:1]},
            )
        return real(**kw)

    monkeypatch.setattr(offline_rules, "deep", model)
    job = worker.enqueue(octx, W, "deep")
    rep = worker.run_worker(octx)
    with store.connect() as conn:
        inv, pos = conn.execute(
            select(objects_jobs.c.inventory, objects_jobs.c.inventory_pos).where(objects_jobs.c.job_id == job["job_id"])
        ).one()
    assert len(inv) == 10 and "knowledge:k0" in inv  # archived objects included
    assert all(len(c) <= 4 for c in calls) and pos == 10
    assert calls[1] == calls[2]  # refused confirmation: the same batch again (corrections), not advanced
    assert rep.jobs_done == 1
    assert count(store, objects_versions, objects_versions.c.action == "update") == 0  # unchanged not rewritten


def test_nightly_deep_once_per_local_date(store, ingest):
    octx, _ = ready(store, ingest, ["garden"])
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    octx.clock = lambda: cst(2026, 1, 20, 2, 55)
    assert [r["mode"] for r in worker.enqueue_deep(octx)] == ["deep"]
    worker.run_worker(octx)
    assert worker.enqueue_deep(octx) == []
    octx.clock = lambda: cst(2026, 1, 21, 3, 30)
    assert len(worker.enqueue_deep(octx)) == 1


# --- recall, inspection, projection ----------------------------------------------------------------------
def test_find_read_evidence_and_inspect_paging(store, ingest):
    octx, ids = ready(store, ingest, [f"garden visit {i}" for i in range(25)])
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    hits = recall.find(store, W, "garden")
    assert hits[0]["id"] == "knowledge:garden"
    assert any(h["id"] == "knowledge:garden" for h in recall.find(store, W, "daily"))  # via member_of project:daily
    doc = recall.read(store, W, "knowledge:garden")
    assert len(doc["sources"]) == 25 and doc["relations"][0]["label"] == "member_of"
    ev = recall.evidence(store, W, "knowledge:garden")
    assert ev["items"][0]["text"] == "garden visit 0" and ev["next_offset"] == 20
    assert len(recall.evidence(store, W, "knowledge:garden", offset=20)["items"]) == 5
    page = recall.object_view(store, W, "knowledge:garden", limit=10)
    assert len(page["sources"]) == 10 and page["next_offset"] == 10
    listed = recall.list_objects(store, W, "knowledge")
    assert [x["id"] for x in listed["items"]] == ["knowledge:garden"] and listed["next_offset"] is None
    first = recall.events_between(store, cst(2026, 1, 10), cst(2026, 1, 11), limit=10)
    second = recall.events_between(store, cst(2026, 1, 10), cst(2026, 1, 11), cursor=first["cursor"], limit=10)
    third = recall.events_between(store, cst(2026, 1, 10), cst(2026, 1, 11), cursor=second["cursor"], limit=10)
    got = [x["event_id"] for x in first["items"] + second["items"] + third["items"]]
    assert got == ids and third["cursor"] is None
    # a cursor pages only the list it was returned for: another range or world is refused by name
    for other in (
        {"start": cst(2026, 1, 9), "end": cst(2026, 1, 11)},
        {"start": cst(2026, 1, 10), "end": cst(2026, 1, 11), "world": W},
    ):
        with pytest.raises(recall.RecallError, match="cursor: returned for another FROM, TO or --world"):
            recall.events_between(store, cursor=first["cursor"], limit=10, **other)
    same = recall.events_between(store, cst(2026, 1, 10).astimezone(UTC), cst(2026, 1, 11), first["cursor"], 10)
    assert [x["event_id"] for x in same["items"]] == ids[10:20]  # the same instants in another offset
    view = recall.event_view(store, ids[0], limit=5)
    assert view["text"] == "garde" and view["next_offset"] == 5 and view["objects"] == ["knowledge:garden"]
    assert count(store, llm_ledger, llm_ledger.c.task.like("memory_%")) == 0


def test_markdown_projection_ten_per_pass_unchanged_not_rewritten(store, ingest, tmp_path):
    octx, (e1,) = ready(store, ingest, ["x"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    c = claim_for(octx, e1)
    graph.commit(octx, c, sub(c, objects=[{"id": f"person:p{i}", "name": f"P{i}"} for i in range(14)]))
    root = Path(tmp_path)
    r1 = projection.project(store, root)
    assert (r1.considered, r1.written) == (10, 10) and r1.behind_after == 5
    r2 = projection.project(store, root)
    assert r2.considered == 5 and r2.behind_after == 0
    index = (root / W / "README.md").read_text()
    assert "[P3](person/" in index and "project:daily" in index
    f = root / W / logic.projection_path("person:p1")
    mtime = os.stat(f).st_mtime_ns
    with store.begin() as conn:  # a new revision with the same content
        conn.execute(update(objects_objects).values(revision=objects_objects.c.revision + 1))
    r3 = projection.project(store, root, per_pass=100)
    assert r3.unchanged == 15 and r3.written == 0 and os.stat(f).st_mtime_ns == mtime
    f.write_text("# Hacked\n")  # an edit of a projected file is never imported
    with store.begin() as conn:
        conn.execute(update(objects_objects).values(revision=objects_objects.c.revision + 1))
    projection.project(store, root, per_pass=100)
    assert recall.read(store, W, "person:p1")["name"] == "P1" and f.read_text().startswith("# P1\n")


def test_status_counts_and_earliest_twenty(store, ingest):
    octx = octx_for(store)
    add(ingest, [f"event {i}" for i in range(25)])
    timeline.intake(octx)
    st = reports.status(store)
    assert st["states"] == {"hot": 25} and len(st["earliest_unfinished"]) == 20 and not st["complete"]
    assert st["earliest_unfinished"][0]["occurred_at"] == cst(2026, 1, 10, 9, 0)


def test_rebuilding_a_day_requeues_explicitly_and_moves_forward(store, ingest):
    octx, ids = ready(store, ingest, ["garden one", "garden two"])
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    objects_before = count(store, objects_objects)
    out = worker.requeue_days(octx, [cst(2026, 1, 10).date()])
    assert out["worlds"] == [W] and set(states(store).values()) == {"pending"}
    worker.run_worker(octx)
    assert set(states(store).values()) == {"linked"} and count(store, objects_objects) == objects_before


def test_the_model_may_read_before_writing_and_every_commit_is_one_revision(store, ingest, monkeypatch):
    octx, (e1, e2) = ready(store, ingest, ["QHY plants tomatoes", "a note"])
    worker.enqueue(octx, W, "organize")
    c = claim_for(octx, e1)
    graph.commit(octx, c, sub(c, objects=[{"id": "person:qhy", "name": "QHY"}]))
    leases.release(store, graph.LEASE_ASSET, W, "h-test")
    with store.begin() as conn:  # e1 done by hand above
        conn.execute(update(objects_event_state).where(objects_event_state.c.event_id == e1).values(state="linked"))
    rounds = []

    def model(**kw):  # e2 does not name QHY: the object is not delivered, so it must be read first
        if not rounds:
            rounds.append("read")
            return offline_rules._call("memory_read", {"id": "person:qhy"})
        rounds.append("submit")
        return offline_rules._call(
            "submit_graph",
            {
                "token": kw["token"],
                "graph_revision": kw["graph_revision"],
                "event_id": kw["event_id"],
                "page_end": kw["page_end"],
                "outcome": "linked",
                "objects": [{"id": "person:qhy", "name": "QHY", "body": "Role: gardener"}],
                "core": [{"name": "USER.md", "content": "The user gardens."}],
            },
        )

    monkeypatch.setattr(offline_rules, "organize", model)
    spy = []
    real_complete = octx.llm.complete
    monkeypatch.setattr(octx.llm, "complete", lambda req, **kw: spy.append(req) or real_complete(req, **kw))
    rep = worker.run_worker(octx)
    assert rounds == ["read", "submit"] and rep.outcomes == {"linked": 1}
    assert [t["function"]["name"] for t in spy[0].tools] == [
        "memory_list",
        "memory_find",
        "memory_read",
        "memory_evidence",
        "submit_graph",
    ]
    assert recall.read(store, W, "person:qhy")["body"] == "Role: gardener"
    with store.connect() as conn:
        revs = conn.execute(select(objects_receipts.c.revision).order_by(objects_receipts.c.revision)).scalars().all()
    assert revs == list(range(revs[0], revs[0] + len(revs)))  # one graph revision per commit


def test_compact_gets_only_its_nodes_and_one_submit_tool(store, ingest, monkeypatch):
    octx = octx_for(store)
    add(ingest, ["garden one", "garden two"])
    timeline.intake(octx)
    spy = []
    real_complete = octx.llm.complete
    monkeypatch.setattr(octx.llm, "complete", lambda req, **kw: spy.append(req) or real_complete(req, **kw))
    compact_all(octx)
    (req,) = spy
    assert [t["function"]["name"] for t in req.tools] == ["submit_compact"]
    assert "garden one" in req.user and "project" not in req.user.lower()


def test_organize_now_records_the_request_compacts_first_then_organizes(store, ingest):
    octx = octx_for(store, compact_threshold_tokens=100_000)
    ids = add(ingest, [f"greenhouse tomatoes note {i}" for i in range(20)])  # not yet in the hot timeline
    raw_before = count(store, messages)
    receipts = worker.organize_now(octx, W, "the garden", token="now-00001")
    assert [r["mode"] for r in receipts] == ["compact", "organize"]
    request = receipts[0]["request_event_id"]
    assert receipts[1]["request_event_id"] == request
    # the request is itself one raw event, appended to the raw table, an assistant turn calling
    # memory_organize, in the world's requests conversation (flagged so no domain reads it as content)
    assert count(store, messages) == raw_before + 1
    with store.connect() as conn:
        row = conn.execute(select(messages).where(messages.c.message_id == request)).mappings().one()
        conv = (
            conn.execute(select(conversations).where(conversations.c.conversation_id == row["conversation_id"]))
            .mappings()
            .one()
        )
    assert (
        row["role"] == "assistant"
        and row["content"] == "memory_organize: compact, then organize now (scope: the garden)"
    )
    (call,) = row["tool_calls"]
    assert call["name"] == "memory_organize" and call["arguments"]["modes"] == ["compact", "organize"]
    assert call["arguments"]["token"] == "now-00001" and call["arguments"]["scope"] == "the garden"
    assert (conv["world_id"], conv["platform"], conv["debug"]) == (W, "memory", True)
    assert f"{receipts[0]['job_id']}, {receipts[1]['job_id']}" in row["source"]
    # the request brought the world's latest events into the hot timeline (20 nodes: 3 compact batches)
    assert {states(store)[i] for i in ids} == {"hot"} and request not in states(store)
    worker.run_worker(octx)
    with store.connect() as conn:
        modes = conn.execute(select(objects_receipts.c.mode).order_by(objects_receipts.c.revision)).scalars().all()
    assert modes == ["compact"] * 3 + ["organize"] * 20  # compact first (all of it), then organize
    assert {states(store)[i] for i in ids} == {"linked"}
    # no back-flow: the request never enters the timeline, the queue, an object's sources
    assert timeline.intake(octx).events == 0 and request not in states(store)
    assert count(store, objects_attachments, objects_attachments.c.event_id == request) == 0
    assert recall.event_view(store, request)["state"] == "not_seen"  # still readable by id
    # a replay returns the original receipts and records nothing
    again = worker.organize_now(octx, W, "the garden", token="now-00001")
    assert [r["replayed"] for r in again] == [True, True]
    assert [r["job_id"] for r in again] == [r["job_id"] for r in receipts]
    assert [r.get("request_event_id") for r in again] == [request, request]  # as the first answer named it
    assert count(store, messages) == raw_before + 1


def test_a_request_conversation_another_world_holds_is_refused_and_nothing_is_recorded(store, ingest):
    """Ingest refuses the reserved ids; a conversation stored before it did, held by another world (or
    not debug), would make the request that world's memory material: refused, no job, no message."""
    octx = octx_for(store)
    add(ingest, ["greenhouse tomatoes"])
    add(ingest, ["harbor invoice"], world="w2", conv="c2")
    with store.begin() as conn:  # as an ingest before the reservation stored it
        conn.execute(
            conversations.insert().values(
                conversation_id=worker.request_conversation_id(W), world_id="w2", platform="discord", debug=False
            )
        )
    raw_before = count(store, messages)
    with pytest.raises(worker.RequestError) as refused:
        worker.organize_now(octx, W, "the garden", token="now-00002")
    assert f"'memory-requests#{W}' is stored with (world, platform, debug) ('w2', 'discord', False)" in str(
        refused.value
    )
    assert count(store, messages) == raw_before and count(store, objects_jobs) == 0


def test_a_worker_runs_copy_of_the_worlds_objects_follows_every_writer(store, ingest):
    """A worker run keeps the world's objects and reads only the rows stamped after the revision it
    last read (and the core documents when their mark moved): after other runs organized more and a
    human imported a core document, its copy equals a fresh read, row for row."""

    def fresh() -> worker.WorldObjects:
        known = worker.WorldObjects()
        with store.connect() as conn:
            known.refresh(conn, W)
        return known

    def same(a: worker.WorldObjects, b: worker.WorldObjects) -> None:
        assert {i: worker.object_doc(r) for i, r in a.rows.items()} == {
            i: worker.object_doc(r) for i, r in b.rows.items()
        }
        assert {n: tuple(r) for n, r in a.core.items()} == {n: tuple(r) for n, r in b.core.items()}
        assert a.revision == b.revision

    octx = octx_for(store, compact_threshold_tokens=100_000)
    add(ingest, [f"Alice and the greenhouse tomatoes, note {i}" for i in range(6)])
    worker.organize_now(octx, W, "", token="copy-0001")
    worker.run_worker(octx)
    kept = fresh()
    assert len(kept.rows) > 1  # project:daily and what the organize wrote
    add(ingest, [f"Bob at the harbor about invoice {i}" for i in range(6)], conv="c2")
    worker.organize_now(octx, W, "", token="copy-0002")
    worker.run_worker(octx)  # another run: new and changed objects, the revision moved on
    graph.import_core(octx, W, "USER.md", "# User\n\nGrows tomatoes.\n")  # a human edit: the core's mark moves
    with store.connect() as conn:
        kept.refresh(conn, W)
    same(kept, fresh())
    assert "USER.md" in kept.core


def test_an_explicit_organize_waits_for_the_explicit_compact_before_it(store, ingest):
    octx = octx_for(store, compact_threshold_tokens=100_000)
    ids = add(ingest, [f"harbor invoice {i}" for i in range(12)])
    timeline.intake(octx)
    compact = worker.enqueue(octx, W, "compact")
    organize = worker.enqueue(octx, W, "organize")
    hourly = worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    order, _ = worker._runnable(octx, W)
    assert [v.job_id for v in order] == [compact["job_id"], hourly["job_id"]]  # the request waits
    order, _ = worker._runnable(octx, W, [JobMode.ORGANIZE])
    assert [v.job_id for v in order] == [hourly["job_id"]]  # also in a run of organize jobs only
    worker.run_worker(octx, modes=[JobMode.COMPACT])
    order, _ = worker._runnable(octx, W, [JobMode.ORGANIZE])
    assert organize["job_id"] in [v.job_id for v in order]
    worker.run_worker(octx)
    assert {states(store)[i] for i in ids} == {"linked"}


def _worker_process(url: str) -> None:
    from memory_pipeline.lib.store import Store as _Store

    store = _Store(url)
    worker.run_worker(octx_for(store))


def test_the_worker_runs_in_another_process_while_recall_answers(store, ingest):
    import multiprocessing

    octx, ids = ready(store, ingest, [f"garden visit {i}" for i in range(40)])
    worker.enqueue(octx, W, "organize")
    proc = multiprocessing.get_context("spawn").Process(target=_worker_process, args=(store.url,))
    proc.start()
    answers = 0
    while proc.is_alive():
        hits = recall.find(store, W, "garden")
        answers += 1
        assert all(h["id"].startswith(("knowledge:", "project:")) for h in hits)
    proc.join(60)
    assert proc.exitcode == 0 and answers > 0
    assert set(states(store).values()) == {"linked"}
    assert len(recall.read(store, W, "knowledge:garden")["sources"]) == 40


@pytest.mark.parametrize(
    ("answer", "calls_per_claim"),
    [
        (lambda kw: offline_rules._call("memory_find", {"query": "garden"}), 16),  # never submits: 16 rounds
        (
            lambda kw: offline_rules._call(
                "submit_graph",
                {
                    "token": kw["token"],
                    "graph_revision": kw["graph_revision"],
                    "event_id": kw["event_id"],
                    "page_end": kw["page_end"],
                    "outcome": "linked",
                },
            ),
            4,
        ),  # refused: 3 corrections
    ],
)
def test_a_batch_gets_16_rounds_and_3_field_corrections(store, ingest, monkeypatch, answer, calls_per_claim):
    octx, (e1,) = ready(store, ingest, ["no target here"])
    monkeypatch.setattr(offline_rules, "organize", lambda **kw: answer(kw))
    worker.enqueue(octx, W, "organize")
    rep = worker.run_worker(octx)
    assert rep.failures == 5 and rep.model_calls == 5 * calls_per_claim and states(store)[e1] == "blocked"


def test_core_edits_are_imported_and_the_resident_context_never_holds_dossiers(store, ingest):
    octx, (e1,) = ready(store, ingest, ["garden"])
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    assert graph.import_core(octx, W, "USER.md", "The user gardens.")["changed"]
    assert not graph.import_core(octx, W, "USER.md", "The user gardens.")["changed"]  # unchanged: not rewritten
    with pytest.raises(SubmissionError, match="name"):
        graph.import_core(octx, W, "NOTES.md", "x")
    add(ingest, ["a fresh hot event"], start=cst(2026, 1, 10, 12, 0), conv="c9")
    timeline.intake(octx)
    res = recall.resident(store, W)
    assert res["core"] == {"USER.md": "The user gardens."}  # SOUL.md / AGENTS.md absent
    assert {d["id"] for d in res["directory"]} == {"knowledge:garden", "project:daily"}
    assert "body" not in str(res["directory"]) and res["hot_nodes_total"] == res["hot_nodes_shown"] == 2


def test_legacy_relations_stay_readable_and_only_deep_review_archives_one(store, ingest, monkeypatch):
    from memory_pipeline.objects.tables import objects_relations

    octx, (e1,) = ready(store, ingest, ["x"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    c = claim_for(octx, e1)
    graph.commit(octx, c, sub(c, objects=[{"id": "person:a", "name": "A"}, {"id": "person:b", "name": "B"}]))
    leases.release(store, graph.LEASE_ASSET, W, "h-test")
    with store.begin() as conn:
        conn.execute(
            objects_relations.insert().values(
                world_id=W,
                src="person:a",
                label="works closely with B on weekends",
                dst="person:b",
                legacy=True,
                status="active",
                revision=0,
            )
        )
        conn.execute(update(objects_jobs).values(status="done"))
    assert recall.read(store, W, "person:a")["relations"][0]["label"] == "works closely with B on weekends"
    legacy = {"src": "person:a", "label": "works closely with B on weekends", "dst": "person:b"}
    with pytest.raises(SubmissionError, match="only a deep review"):
        logic.check_graph_write(sub(c, archive_relations=[legacy]))

    def model(**kw):
        args = {"token": kw["token"], "graph_revision": kw["graph_revision"], "reviewed": list(kw["object_ids"])}
        if "person:a" in kw["object_ids"]:
            args |= {
                "archive_relations": [legacy],
                "relations": [{"src": "person:a", "label": "knows", "dst": "person:b"}],
            }
        return offline_rules._call("submit_graph", args)

    monkeypatch.setattr(offline_rules, "deep", model)
    worker.enqueue(octx, W, "deep")
    worker.run_worker(octx)
    rels = {(r["label"], r["status"]) for r in recall.read(store, W, "person:a")["relations"]}
    assert rels == {("works closely with B on weekends", "archived"), ("knows", "active")}


def test_enabling_on_an_existing_store_is_idempotent_and_reports_counts_and_integrity(store, ingest):
    octx = octx_for(store)
    add(ingest, ["garden one", "garden two", ""])
    first = timeline.enable(octx)
    assert first["before"]["event_states"] == 0 and first["after"]["event_states"] == 2 and first["entered"] == 2
    assert first["integrity"] == "ok" and first["after"]["raw_events"] == first["before"]["raw_events"] == 3
    again = timeline.enable(octx)
    assert again["entered"] == 0 and again["before"] == again["after"] == first["after"]


def test_a_request_token_never_replays_another_worlds_receipt(store, ingest):
    octx, _ = ready(store, ingest, ["the garden"])
    first = worker.enqueue(octx, W, "organize", scope="w1's secret plans", token="req-shared-1")
    again = worker.enqueue(octx, W, "organize", scope="w1's secret plans", token="req-shared-1")
    assert again["job_id"] == first["job_id"] and again["replayed"]
    with pytest.raises(RequestConflict, match="'req-shared-1' was used for another request"):
        worker.enqueue(octx, W, "organize", token="req-shared-1")  # another scope: not a retry
    with pytest.raises(SubmissionError, match="token: already used by another world's request") as refused:
        worker.enqueue(octx, "w2", "organize", token="req-shared-1")
    assert "secret" not in str(refused.value) and W not in str(refused.value)
