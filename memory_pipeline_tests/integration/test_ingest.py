"""Ingestion: idempotent, all-or-nothing, every bad input named by file, line and field."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from memory_pipeline.events.ingest import IngestError, ingest_file
from memory_pipeline.events.tables import ingest_batches
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline.temporal import chunks, summaries
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline_tests.conftest import cst, event


def _count(store, table) -> int:
    with store.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def _write(tmp_path, lines: list, name="events.jsonl"):
    path = tmp_path / name
    with open(path, "wb") as fh:
        for line in lines:
            fh.write(line if isinstance(line, bytes) else (json.dumps(line) + "\n").encode())
    return path


GOOD = [
    event("w1", "c1", "user", "hello there", cst(2026, 7, 18, 6, 1), mid="m1"),
    event("w1", "c1", "assistant", "hi, how can I help", cst(2026, 7, 18, 6, 2), mid="m2"),
]


def test_ingest_is_idempotent_on_message_id(store, tmp_path):
    path = _write(tmp_path, GOOD)
    seen = []
    first = ingest_file(store, path, progress=lambda phase, done, total: seen.append((phase, done, total)))
    size = path.stat().st_size
    assert seen == [("validate", size, size), ("write", 2, 2)]
    assert (first.inserted, first.duplicates, first.new_conversations, first.new_worlds) == (2, 0, 1, 1)
    again = ingest_file(store, path)
    assert (again.inserted, again.duplicates) == (0, 2)
    assert _count(store, messages) == 2
    assert _count(store, ingest_batches) == 2
    with store.connect() as conn:
        row = conn.execute(select(messages).where(messages.c.message_id == "m1")).mappings().one()
        first_at = conn.execute(select(worlds.c.first_event_at)).scalar_one()
    assert row["at"] == cst(2026, 7, 18, 6, 1).astimezone(UTC)
    assert row["source"].endswith("events.jsonl:1")
    assert first_at == cst(2026, 7, 18, 6, 1)


BAD_CASES = [
    ("malformed", b'{"message_id": "x",\n', "<line>", "malformed JSON"),
    ("role", {**GOOD[0], "message_id": "b1", "role": "narrator"}, "role", "unknown role 'narrator'"),
    (
        "no timestamp",
        {k: v for k, v in GOOD[0].items() if k != "timestamp"} | {"message_id": "b2"},
        "timestamp",
        "missing",
    ),
    (
        "bad timestamp",
        {**GOOD[0], "message_id": "b3", "timestamp": "yesterday at noon"},
        "timestamp",
        "unparsable timestamp",
    ),
    (
        "naive timestamp",
        {**GOOD[0], "message_id": "b4", "timestamp": "2026-07-18T06:00:00"},
        "timestamp",
        "no time zone",
    ),
    (
        "future",
        {**GOOD[0], "message_id": "b5", "timestamp": (datetime.now(UTC) + timedelta(days=1)).isoformat()},
        "timestamp",
        "in the future",
    ),
    ("encoding", b'{"message_id": "b6", "content": "caf\xe9"}\n', "<line>", "bad encoding"),
    ("oversized", {**GOOD[0], "message_id": "b7", "content": "x" * 100_001}, "content", "oversized body"),
    (
        "missing world",
        {k: v for k, v in GOOD[0].items() if k != "world_id"} | {"message_id": "b8"},
        "world_id",
        "missing",
    ),
    ("debug type", {**GOOD[0], "message_id": "b9", "debug": "no"}, "debug", "true or false"),
]


@pytest.mark.parametrize("name,bad,field,problem", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_line_refuses_the_whole_batch(store, tmp_path, name, bad, field, problem):
    path = _write(tmp_path, [GOOD[0], bad, GOOD[1]])
    with pytest.raises(IngestError) as info:
        ingest_file(store, path)
    assert len(info.value.errors) == 1
    err = info.value.errors[0]
    assert (err.source, err.line, err.field) == (str(path), 2, field)
    assert problem in err.problem
    assert f"{path}:2: field '{field}'" in str(info.value) and "nothing was written" in str(info.value)
    assert _count(store, messages) == 0 and _count(store, conversations) == 0 and _count(store, worlds) == 0


def test_skip_bad_writes_good_lines_and_reports_bad_ones(store, tmp_path):
    path = _write(tmp_path, [GOOD[0], BAD_CASES[1][1], GOOD[1], BAD_CASES[0][1]])
    report = ingest_file(store, path, skip_bad=True)
    assert report.inserted == 2
    assert [(e.line, e.field) for e in report.rejected] == [(2, "role"), (4, "<line>")]
    assert _count(store, messages) == 2


def test_same_id_with_other_content_is_a_conflict_not_an_overwrite(store, tmp_path):
    ingest_file(store, _write(tmp_path, GOOD))
    changed = {**GOOD[0], "content": "rewritten history"}
    with pytest.raises(IngestError, match="already stored with different content"):
        ingest_file(store, _write(tmp_path, [changed], "again.jsonl"))
    with store.connect() as conn:
        assert (
            conn.execute(select(messages.c.content).where(messages.c.message_id == "m1")).scalar_one() == "hello there"
        )
    dup_in_file = [GOOD[0], {**GOOD[0], "content": "other"}]
    with pytest.raises(IngestError, match="repeats .*:1 with different content"):
        ingest_file(store, _write(tmp_path, dup_in_file, "dup.jsonl"))


def test_conversation_metadata_must_agree(store, tmp_path):
    ingest_file(store, _write(tmp_path, GOOD))
    moved = event("w2", "c1", "user", "same conversation, other world", cst(2026, 7, 18, 7), mid="m9")
    with pytest.raises(IngestError) as info:
        ingest_file(store, _write(tmp_path, [moved], "moved.jsonl"))
    assert info.value.errors[0].field == "conversation_id" and info.value.errors[0].line == 1


def test_ingesting_never_bumps_derived_rows_and_chunks_never_bump_conversations(ctx, store, ingest):
    ingest(
        [
            event("w1", "c1", "user", "garden planning with tomatoes", cst(2026, 7, 18, 6, 1)),
            event("w1", "c1", "assistant", "tomatoes need sun", cst(2026, 7, 18, 6, 3)),
        ]
    )
    summaries.regenerate_day(ctx, cst(2026, 7, 18).date())
    with store.connect() as conn:
        before = conn.execute(select(temporal_summaries.c.updated_at)).scalar_one()
        conv_before = conn.execute(select(conversations.c.updated_at)).scalar_one()
    ingest([event("w1", "c1", "user", "next day talk", cst(2026, 7, 19, 9, 0))])
    chunks.run_tick(ctx, cst(2026, 7, 19).date(), cst(2026, 7, 19, 10, 0))
    with store.connect() as conn:
        assert conn.execute(select(temporal_summaries.c.updated_at)).scalar_one() == before
        conv_after = conn.execute(select(conversations.c.updated_at)).scalar_one()
    assert conv_after > conv_before  # the new message is the conversation's own activity
    chunks.run_tick(ctx, cst(2026, 7, 18).date())  # chunks for the 18th: a write to temporal_day only
    with store.connect() as conn:
        assert conn.execute(select(conversations.c.updated_at)).scalar_one() == conv_after
