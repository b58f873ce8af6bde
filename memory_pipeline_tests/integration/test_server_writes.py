"""The memory server's writing tools (issue 19: remember, the user's memory check, its
confirmation and correction, memory_organize, memory_approve) and the reads beside them (the self
layer, a conversation's rolling summary and its check line, the resident view), driven by the SDK's
client over streamable HTTP: each write is idempotent on the caller's request_id (a repeat writes
nothing and answers the first result), ids are per world (another world's same id writes its own),
a read-only token reads and writes nothing, and no call reaches a model."""

import asyncio
import json
import re
import threading

from sqlalchemy import func, select

from memory_pipeline.conversation.tables import conversation_summaries, conversation_summary_requests
from memory_pipeline.lib.store.tables import llm_ledger, request_ids
from memory_pipeline.objects.tables import objects_jobs, objects_objects, objects_versions
from memory_pipeline.sleep import memory
from memory_pipeline.sleep.tables import semantic_memories
from memory_pipeline_tests.conftest import CST
from memory_pipeline_tests.integration import test_memory_server as server_test
from memory_pipeline_tests.integration.test_memory_server import (
    CHECK_A,
    CORRECT_A,
    REMEMBER_A,
    SECRET_A,
    SECRET_B,
    _calls,
)

served = server_test.served  # the server over worlds wa and wb, with their tokens


def _run(served, who: str, calls: list[tuple[str, dict]]) -> list[tuple[bool, dict | str]]:
    results = asyncio.run(_calls(served["url"], served["bearer"][who], calls))[1]
    return [(err, text if err else json.loads(text)) for err, text in results]


def _count(store, table, *where) -> int:
    with store.connect() as conn:
        return conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()


def test_remember_writes_once_per_request_id_and_world(served):
    store = served["store"]
    reused = {**REMEMBER_A, "content": "another memory under the same id"}
    (e1, first), (e2, repeat), (e3, other), (e5, refused) = _run(
        served,
        "a",
        [
            ("sleep/remember", REMEMBER_A),
            ("sleep/remember", REMEMBER_A),
            ("sleep/remember", {**REMEMBER_A, "request_id": "r2"}),
            ("sleep/remember", reused),  # its content would have been dropped, the first answer given
        ],
    )
    assert not (e1 or e2 or e3), (first, repeat, other)
    assert e5 and f"field 'request_id': {REMEMBER_A['request_id']!r} was used for another request" in refused
    assert first["replayed"] is False and repeat == {**first, "replayed": True}
    assert other["memory_id"] != first["memory_id"] and other["replayed"] is False
    with store.connect() as conn:
        rows = conn.execute(select(semantic_memories).where(semantic_memories.c.world_id == "wa")).mappings().all()
    assert sorted(r["memory_id"] for r in rows) == sorted([first["memory_id"], other["memory_id"]])
    row = next(r for r in rows if r["memory_id"] == first["memory_id"])
    assert (row["content"], row["source_sessions"], row["type"], row["status"]) == (
        "wa remembers",
        ["wa.s1"],
        "experience",
        "active",
    )
    # wb's call with the same id is its own request: a memory of wb, never wa's answer.
    ((e4, theirs),) = _run(served, "ops", [("sleep/remember", {**REMEMBER_A, "world": "wb", "session_id": "wb.s1"})])
    assert not e4 and theirs["replayed"] is False and theirs["memory_id"] != first["memory_id"]
    assert _count(store, semantic_memories, semantic_memories.c.world_id == "wb") == 1


def test_remember_at_once_with_one_request_id_writes_one_memory(served):
    store, barrier, out = served["store"], threading.Barrier(4), []

    def call() -> None:
        barrier.wait()
        out.append(memory.remember_request(store, "wa", "wa.s1", "at once", request_id="same"))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(out) == 4 and len({m for m, _ in out}) == 1 and sorted(r for _, r in out) == [False, True, True, True]
    assert _count(store, semantic_memories, semantic_memories.c.world_id == "wa") == 1


def test_the_summary_shows_the_check_line_and_a_correction_writes_one_verified_version(served):
    store = served["store"]
    results = _run(
        served,
        "a",
        [
            ("conversation/summary", {"world": "wa", "conversation_id": "wa.s1"}),
            ("conversation/correct", CORRECT_A),
            ("conversation/correct", CORRECT_A),
            ("conversation/summary", {"world": "wa", "conversation_id": "wa.s1"}),
        ],
    )
    assert not any(e for e, _ in results), results
    (_, before), (_, first), (_, repeat), (_, after) = results
    assert before["summary"]["version"] == 1 and not before["summary"]["verified"]
    assert SECRET_A in before["summary"]["content"] and SECRET_A in before["summary"]["check_line"]
    assert before["summary"]["check_line"].startswith("我对咱们最近聊的事的印象是")
    assert SECRET_B not in json.dumps(before, ensure_ascii=False)
    assert first == {"world": "wa", "conversation_id": "wa.s1", "version": 2, "replayed": False}
    assert repeat == {**first, "replayed": True}
    assert after["summary"]["version"] == 2 and after["summary"]["verified"] and after["summary"]["check_line"] is None
    assert after["summary"]["sections"]["arc"] == CORRECT_A["arc"] and CORRECT_A["arc"] in after["summary"]["content"]
    assert after["summary"]["trigger"] == "correction"
    for when in (after["summary"]["last_updated"], after["summary"]["verified_at"]):  # the configured zone
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00", when), when
    assert _count(store, conversation_summaries, conversation_summaries.c.conversation_id == "wa.s1") == 2
    # An arc of one unending "sentence" is refused by its length (500,000 characters were stored)
    ((refused, line),) = _run(served, "a", [("conversation/correct", {**CORRECT_A, "arc": "x" * 500_000})])
    assert refused and "field 'arc': 500000 characters (more than 2000)" in line, line
    assert _count(store, conversation_summaries, conversation_summaries.c.conversation_id == "wa.s1") == 2


def test_the_users_check_is_requested_once_and_a_yes_verifies_the_newest_version(served):
    store = served["store"]
    results = _run(
        served,
        "a",
        [
            ("conversation/check", CHECK_A),
            ("conversation/check", CHECK_A),
            ("conversation/check", {**CHECK_A, "request_id": "r2"}),
            ("conversation/confirm", {**CHECK_A, "version": 1}),
            ("conversation/confirm", {**CHECK_A, "version": 1}),
            ("conversation/confirm", {**CHECK_A, "request_id": "r2"}),
            ("conversation/summary", {"world": "wa", "conversation_id": "wa.s1"}),
        ],
    )
    assert not any(e for e, _ in results), results
    (_, asked), (_, asked_again), (_, asked_anew), (_, yes), (_, yes_again), (_, yes_anew), (_, shown) = results
    assert asked["trigger"] == "user_check" and not asked["replayed"] and asked_again == {**asked, "replayed": True}
    assert not asked_anew["replayed"]
    with store.connect() as conn:
        q = select(conversation_summary_requests.c.conversation_id, conversation_summary_requests.c.trigger)
        assert [tuple(r) for r in conn.execute(q)] == [("wa.s1", "user_check")] * 2
    assert yes == {"world": "wa", "conversation_id": "wa.s1", "version": 1, "changed": True, "replayed": False}
    assert yes_again == {**yes, "replayed": True}
    assert yes_anew == {**yes, "changed": False}  # a new yes: verified already, nothing changed
    assert shown["summary"]["verified"] and shown["summary"]["check_line"] is None
    assert _count(store, conversation_summaries, conversation_summaries.c.verified.is_(True)) == 1  # wb's untouched


def test_organize_queues_one_job_per_request_id_and_calls_no_model(served):
    store = served["store"]
    ledger = _count(store, llm_ledger)
    args = {"world": "wa", "request_id": "org-1", "mode": "deep", "scope": "the zoo"}
    (e1, first), (e2, repeat), (e5, refused) = _run(
        served,
        "a",
        [("objects/organize", args), ("objects/organize", args), ("objects/organize", {**args, "scope": "other"})],
    )
    assert not e1 and not e2, (first, repeat)
    # the caller's id, not the domain's per-world token for it
    assert e5 and "field 'request_id': 'org-1' was used for another request" in refused, refused
    assert (first["world_id"], first["mode"], first["scope"], first["status"]) == ("wa", "deep", "the zoo", "queued")
    assert first["objects_enabled"] is True
    assert first["replayed"] is False and repeat == {**first, "replayed": True}
    with store.connect() as conn:
        jobs = conn.execute(select(objects_jobs.c.job_id, objects_jobs.c.world_id, objects_jobs.c.created_at)).all()
    assert [tuple(j)[:2] for j in jobs] == [(first["job_id"], "wa")]
    # created_at in the configured zone to the second, the replay's as the first's (it read 07:14:48.121103+00:00)
    assert first["created_at"] == jobs[0].created_at.astimezone(CST).isoformat(timespec="seconds")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00", repeat["created_at"]), repeat
    ((e3, theirs),) = _run(served, "ops", [("objects/organize", {**args, "world": "wb"})])
    assert not e3 and theirs["world_id"] == "wb" and theirs["job_id"] != first["job_id"] and not theirs["replayed"]
    assert _count(store, llm_ledger) == ledger  # queued only: the job runs in Dagster


def test_approve_activates_a_candidate_once_per_request_id(served):
    store = served["store"]
    approve = {"world": "wa", "id": "project:zoo", "request_id": "ok-1"}
    (e1, first), (e2, repeat), (e3, other) = _run(
        served,
        "a",
        [
            ("objects/approve", approve),
            ("objects/approve", approve),
            ("objects/approve", {**approve, "request_id": "ok-2"}),
        ],
    )
    assert not e1 and not e2, (first, repeat)
    assert first["status"] == "active" and first["object_id"] == "project:zoo" and first["replayed"] is False
    assert repeat == {**first, "replayed": True}
    assert e3 and "field 'id': project:zoo is active, not a candidate" in other  # a new request: the domain's rule
    with store.connect() as conn:
        status = dict(
            conn.execute(
                select(objects_objects.c.world_id, objects_objects.c.status).where(
                    objects_objects.c.object_id == "project:zoo"
                )
            ).all()
        )
    assert status == {"wa": "active", "wb": "candidate"}
    assert _count(store, objects_versions, objects_versions.c.action == "approve") == 1


def test_the_self_layer_and_the_resident_view_of_the_world(served):
    (e1, layer), (e2, resident) = _run(
        served, "a", [("sleep/self", {"world": "wa"}), ("objects/resident", {"world": "wa"})]
    )
    assert not e1 and not e2, (layer, resident)
    assert layer["blocks"]["identity"] == f"I am {SECRET_A}" and layer["blocks"]["long_arc"] == ""
    assert len(layer["blocks"]) == 6 and layer["pinned_facts"] == [f"{SECRET_A} is pinned"]
    assert resident["core"] == {"USER.md": f"{SECRET_A} user"}
    assert {d["id"] for d in resident["directory"]} == {"person:zebra", "project:zoo"}
    assert SECRET_B not in json.dumps([layer, resident])


def test_a_read_only_token_reads_and_writes_nothing(served):
    store = served["store"]
    results = _run(
        served,
        "a_ro",
        [
            ("sleep/self", {"world": "wa"}),
            ("conversation/summary", {"world": "wa", "conversation_id": "wa.s1"}),
            ("objects/resident", {"world": "wa"}),
            ("sleep/remember", REMEMBER_A),
            ("conversation/correct", CORRECT_A),
            ("conversation/check", CHECK_A),
            ("conversation/confirm", CHECK_A),
            ("objects/organize", {"world": "wa", "request_id": "r1"}),
            ("objects/approve", {"world": "wa", "id": "project:zoo", "request_id": "r1"}),
        ],
    )
    assert [e for e, _ in results] == [False] * 3 + [True] * 6, results
    assert all("read-only" in text for _, text in results[3:]), results
    for table in (request_ids, semantic_memories, objects_jobs, conversation_summary_requests):
        assert _count(store, table) == 0, table.name
    assert _count(store, conversation_summaries) == 2  # the seeded versions only, unverified
    assert _count(store, conversation_summaries, conversation_summaries.c.verified.is_(True)) == 0
