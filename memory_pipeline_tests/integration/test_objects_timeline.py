"""Seed 001 hot timeline (PostgreSQL, offline model): compaction builds a tree whose depth grows
with log8 of the slices; a compacted raw slice keeps a reference to its raw event, not a second
copy of its text; enabling the domain on an existing store queues the already-compacted events
(pending, no hot slices), keeps the newest hot and gives existing objects their recorded
sources, idempotently."""

from __future__ import annotations

import math
from collections import Counter
from datetime import timedelta

from sqlalchemy import delete, func, select

from memory_pipeline.lib.store.tables import messages
from memory_pipeline.objects import timeline, worker
from memory_pipeline.objects.tables import objects_attachments, objects_event_state, objects_hot_nodes
from memory_pipeline_tests.conftest import cst
from memory_pipeline_tests.integration.test_objects import W, add, compact_all, count, octx_for, states


def _active_levels(store) -> list[int]:
    n = objects_hot_nodes.c
    with store.connect() as conn:
        return list(conn.execute(select(n.level).where(n.active.is_(True)).order_by(n.seq)).scalars())


def test_compaction_depth_grows_with_log8_of_the_slices(store, ingest):
    octx = octx_for(store, compact_threshold_tokens=10**6)
    add(ingest, [f"note {i} on tomatoes" for i in range(512)])
    timeline.intake(octx)
    compact_all(octx)
    # 512 = 8^3 slices: 64 heads of level 1, 8 of level 2, one of level 3 (a chain would reach 73)
    assert _active_levels(store) == [3] == [round(math.log(512, 8))]
    n = objects_hot_nodes.c
    with store.connect() as conn:
        heads = conn.execute(select(n.node_id, n.level, n.children).where(n.level > 0)).all()
    for node_id, level, children in heads:  # every head merges at most 8 nodes of one level, one below
        kids = timeline.expand(octx, node_id)
        assert len(children) <= 8 and {k["level"] for k in kids} == {level - 1}
    assert Counter(level for _, level, _ in heads) == {1: 64, 2: 8, 3: 1}
    assert Counter(states(store).values()) == {"pending": 512}


def test_a_compacted_raw_slice_keeps_a_reference_not_a_copy(store, ingest):
    octx = octx_for(store)
    (big, small) = add(ingest, ["".join(f"{i:05d} " for i in range(3_400)), "a short note"])  # 20,400 characters
    timeline.intake(octx)
    with store.connect() as conn:
        hot_chars = conn.execute(select(func.sum(func.length(objects_hot_nodes.c.text)))).scalar()
    assert hot_chars == 20_400 + 12  # while hot, the resident view holds the slices
    compact_all(octx)
    n = objects_hot_nodes.c
    with store.connect() as conn:
        raw_copied = conn.execute(select(func.sum(func.length(n.text))).where(n.level == 0)).scalar()
        head_of_big = conn.execute(select(n.parent_id).where(n.node_id == f"{big}#0")).scalar()
        raw = conn.execute(select(messages.c.content).where(messages.c.message_id == big)).scalar()
    assert raw_copied == 0  # compacted: only the raw table holds the text
    kids = timeline.expand(octx, head_of_big)
    assert [k["node_id"] for k in kids] == [f"{big}#{i}" for i in range(8)]
    assert "".join(k["text"] for k in kids) == raw[:16_000]  # read back from the raw event range
    assert states(store) == {big: "pending", small: "pending"}


def test_enabling_on_an_existing_store_queues_the_already_compacted_events(store, ingest):
    # 60% of 100 tokens at 4 characters a token: the newest events under 240 characters stay hot
    octx = octx_for(store, compact_threshold_tokens=100)
    ids = add(ingest, [f"garden note {i:03d}" for i in range(50)])  # 15 characters = 4 tokens each
    raw_before = count(store, messages)
    first = timeline.enable(octx)
    assert (first["entered"], first["queued_as_compacted"], first["entered_hot"]) == (50, 36, 14)
    assert first["states_before"] == {} and first["states_after"] == {"pending": 36, "hot": 14}
    assert first["integrity"] == "ok" and count(store, messages) == raw_before
    got = states(store)
    assert all(got[e] == "pending" for e in ids[:36]) and all(got[e] == "hot" for e in ids[36:])
    with store.connect() as conn:
        hot_events = set(conn.execute(select(objects_hot_nodes.c.event_id)).scalars())
        queued_at = conn.execute(
            select(func.count()).where(
                objects_event_state.c.state == "pending", objects_event_state.c.queued_at.is_(None)
            )
        ).scalar()
    assert hot_events == set(ids[36:]) and queued_at == 0  # already compacted: no hot slices
    assert worker.hourly_worlds(octx) == [W]  # the hourly organize takes them from here

    again = timeline.enable(octx)  # idempotent
    assert (again["entered"], again["sources_added"]) == (0, 0) and again["after"] == first["after"]
    late = add(ingest, ["a note after enabling"], start=cst(2026, 1, 11, 9))
    assert timeline.enable(octx)["entered_hot"] == 1 and states(store)[late[0]] == "hot"  # a seen world: as late events

    # existing objects get the sources their write history records (an attachment lost here)
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx, max_batches=3)
    with store.begin() as conn:
        lost = conn.execute(delete(objects_attachments).where(objects_attachments.c.event_id == ids[0])).rowcount
    assert lost and timeline.enable(octx)["sources_added"] == lost
    assert count(store, objects_attachments, objects_attachments.c.event_id == ids[0]) == lost
    assert timeline.enable(octx)["sources_added"] == 0


def test_enabling_never_puts_an_oversized_event_in_the_timeline(store, ingest):
    octx = octx_for(store, compact_threshold_tokens=100)
    (big, small) = add(ingest, ["x" * 32_001, "tomatoes"], start=cst(2026, 1, 10, 9) - timedelta(days=1))
    rep = timeline.enable(octx)
    assert (rep["oversized"], rep["entered_hot"]) == (1, 1) and states(store) == {big: "oversized", small: "hot"}
