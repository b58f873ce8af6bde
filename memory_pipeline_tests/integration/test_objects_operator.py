"""Seed 001 as an operator meets it on the command line (PostgreSQL, offline model): the audit's
data of one 32,001-character event and 60 short ones ingested, organized now and run. An
oversized event is never organized and never counted complete, yet readable by time; the
explicit compact builds a tree of heads, not a chain; the Markdown projection repairs a deleted
file and says what it found. And the CLI refuses negative counts and a backwards time range;
memory_find ranks an archived duplicate below its survivor."""

from __future__ import annotations

import json
import math
from datetime import date

import pytest
from sqlalchemy import update
from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline.objects import audit, graph, recall, reports, timeline
from memory_pipeline.objects.tables import objects_objects
from memory_pipeline_tests.integration.test_objects import W, claim_for, octx_for, ready, sub

DAY = date(2026, 10, 5)


@pytest.fixture
def cli(store, monkeypatch, tmp_path):
    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "data"))
    runner = CliRunner()

    def run(*argv, code=0):
        result = runner.invoke(app, list(argv))
        assert result.exit_code == code, (argv, result.output)
        return result.output

    return run


@pytest.fixture
def audit_world(cli, tmp_path):
    """The audit's CLI data, ingested, organized now and run."""
    lines = [
        {
            "message_id": "big1",
            "world_id": W,
            "conversation_id": "c",
            "role": "user",
            "content": "h" * 32_001,
            "timestamp": "2026-10-05T10:00:00+08:00",
        }
    ]
    lines += [
        {
            "message_id": f"m{i}",
            "world_id": W,
            "conversation_id": "c",
            "role": "user",
            "content": f"note {i} about the garden and tomatoes",
            "timestamp": f"2026-10-05T11:{i:02d}:00+08:00",
        }
        for i in range(60)
    ]
    path = tmp_path / "ev.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    cli("ingest", str(path))
    cli("objects", "organize", W, "--now")
    cli("objects", "run")
    return cli


def test_an_oversized_event_is_never_organized_never_complete_and_readable_by_time(audit_world, store):
    st = json.loads(audit_world("objects", "inspect", "status", "--world", W))
    assert st["states"] == {"linked": 60, "oversized": 1} and st["complete"] is False
    assert [(r["event_id"], r["chars"]) for r in st["not_organized"]] == [("big1", 32_001)]
    assert "not organized (over 32,000 characters" in audit_world("objects", "status", "--world", W)
    assert reports.range_status(store, DAY, DAY, date(2026, 10, 6), W) == {
        "status": "partial",
        "days": {"2026-10-05": "partial"},
    }
    day = audit.day_audit(store, DAY)
    assert day.problems == [] and len(day.not_organized) == 1 and day.not_organized[0].startswith("big1: oversized")
    # never organized, never lost: the raw event stays readable by time and by id
    listed = json.loads(
        audit_world("objects", "inspect", "events", "2026-10-05T09:00:00+08:00", "2026-10-05T11:00:00+08:00")
    )
    assert [(x["event_id"], x["state"]) for x in listed["items"]] == [("big1", "oversized")]
    ev = json.loads(audit_world("objects", "inspect", "event", "big1"))
    assert ev["chars"] == 32_001 and len(ev["text"]) == 8_000 and ev["next_offset"] == 8_000
    assert ev["reason"] == "longer than 32,000 characters"


def test_status_of_one_world_shows_that_worlds_objects_alone(audit_world, tmp_path):
    """`objects status --world W` filtered its first lines to W, then listed every world's objects."""
    other = {"message_id": "o1", "world_id": "w-other", "conversation_id": "co", "role": "user"}
    (tmp_path / "other.jsonl").write_text(
        json.dumps({**other, "content": "harbor invoice", "timestamp": "2026-10-05T09:00:00+08:00"}) + "\n"
    )
    audit_world("ingest", str(tmp_path / "other.jsonl"))
    audit_world("objects", "organize", "w-other", "--now")
    audit_world("objects", "run")
    assert "w-other" in audit_world("objects", "status")
    assert "w-other" not in audit_world("objects", "status", "--world", W)


def test_an_explicit_compact_builds_a_tree_that_expands_to_every_raw_slice(audit_world, store):
    resident = json.loads(audit_world("objects", "resident", W))
    levels = [n["level"] for n in resident["hot_timeline"]]
    assert max(levels) == math.ceil(math.log(60, 8)) == 2  # not a chain of 9 levels
    octx = octx_for(store)
    reached, frontier = [], [n["id"] for n in resident["hot_timeline"]]
    while frontier:
        node = frontier.pop()
        kids = timeline.expand(octx, node)
        if not kids:
            continue
        assert len(kids) <= 8 and len({k["level"] for k in kids}) == 1  # a head merges one level
        frontier += [k["node_id"] for k in kids if k["level"] > 0]
        reached += [(k["event_id"], k["text"]) for k in kids if k["level"] == 0]
    assert sorted(reached) == sorted((f"m{i}", f"note {i} about the garden and tomatoes") for i in range(60))


def test_the_projection_repairs_a_deleted_file_and_says_what_it_found(audit_world, tmp_path):
    audit_world("objects", "project", "--passes", "5")
    files = sorted(f for f in (tmp_path / "data" / "objects" / W).glob("*/*.md") if "." not in f.stem)
    assert len(files) >= 2  # the first page of two objects (of any type)
    files[0].unlink()
    files[1].write_text("edited by hand", encoding="utf-8")
    before = audit_world("objects", "status", "--world", W)  # no pass yet: status looks at the disk itself
    assert "on disk now 1 file(s) missing, 1 edited by hand" in before
    # what rewrites the objects behind (it read "being rewritten", with no daemon running)
    assert "behind (the projection sensor's runs or `objects project` rewrite them, 10 a pass)" in " ".join(
        before.split()
    )
    out = audit_world("objects", "project")
    assert "found 1 file(s) missing" in out and files[0].exists()
    after = audit_world("objects", "status", "--world", W)
    assert "0 object(s) behind" in after and "on disk now 0 file(s) missing, 0 edited by hand" in after


def test_the_cli_refuses_negative_counts_and_a_backwards_range(cli):
    assert "--max-batches: must be 0 (no limit) or more, got -5" in cli("objects", "run", "--max-batches", "-5", code=2)
    assert "--passes: must be at least 1, got -3" in cli("objects", "project", "--passes", "-3", code=2)
    out = cli("objects", "inspect", "events", "2026-10-06T00:00:00+08:00", "2026-10-05T00:00:00+08:00", code=2)
    assert "FROM 2026-10-06T00:00:00+08:00 is after TO 2026-10-05T00:00:00+08:00" in out


def test_memory_find_ranks_a_live_object_above_an_archived_duplicate(store, ingest):
    octx, (e1,) = ready(store, ingest, ["x"])
    claim = claim_for(octx, e1)
    dup = {"id": "person:ana-old", "name": "Ana", "aliases": ["Ana Silva"], "body": "Ana Silva, gardener"}
    survivor = {"id": "person:ana", "name": "Ana Silva", "body": "Gardener"}
    graph.commit(octx, claim, sub(claim, objects=[dup, survivor]))
    with store.begin() as conn:  # deep review archived the duplicate
        conn.execute(
            update(objects_objects).where(objects_objects.c.object_id == "person:ana-old").values(status="archived")
        )
    hits = recall.find(store, W, "Ana Silva")
    assert [h["id"] for h in hits] == ["person:ana", "person:ana-old"]
    assert hits[1]["score"] > hits[0]["score"]  # the duplicate matches better, yet ranks below
