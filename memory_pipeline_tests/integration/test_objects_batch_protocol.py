"""Seed 001 §2, §5 an organize / deep batch's conversation with a provider model (the local
OpenAI-compatible fake server) on PostgreSQL: every tool call of an answer gets its result, in order,
with its tool_call_id; a malformed read call, an unknown tool or a refused submission is a correction
(at most 3) and a batch that still fails is a failed claim with backoff (the 5th blocks its event);
only submit_graph submits; a token belongs to its event and batch; the batch's 300 s bound every model
call; read-tool results count against the 96,000-byte transfer budget; the 900,000-byte proposal limit
applies to the arguments as they were sent."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.objects import graph, logic, recall, reports, timeline, worker
from memory_pipeline.objects.config import ObjectsConfig
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.logic import SubmissionError
from memory_pipeline.objects.tables import (
    objects_failures,
    objects_hot_nodes,
    objects_jobs,
    objects_objects,
    objects_receipts,
)
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_objects import W, add, claim_for, count, ready, snapshot, states, sub


def _model(store, server, timeout=60.0, **cfg) -> ObjectsContext:
    llm = LLMClient(
        store, model="openai/fake-model", api_base=server.api_base, api_key="k", max_retries=0, timeout_seconds=timeout
    )
    return ObjectsContext(store, llm, ObjectsConfig(**{"retry_backoff_seconds": 0, **cfg}))


def _claim(body) -> dict:
    """The claimed page as the batch's first message gave it to the model."""
    return json.loads(next(m for m in body["messages"] if m["role"] == "user")["content"])


def _linked(body, **extra) -> tuple[str, dict]:
    """A valid submission for the claimed page: linked to project:daily."""
    claim = _claim(body)
    args = {
        "token": claim["token"],
        "graph_revision": claim["graph_revision"],
        "event_id": claim["event"]["id"],
        "page_end": claim["event"]["page"][1],
        "outcome": "linked",
        "attach": ["project:daily"],
        **extra,
    }
    return ("submit_graph", args)


def _bytes(value) -> int:
    """Bytes of a value as the batch sends it (UTF-8 JSON, not ASCII-escaped)."""
    return len(json.dumps(value, ensure_ascii=False).encode())


def _results(body) -> list[tuple[str, dict]]:
    """The tool messages of a request: (tool_call_id, content)."""
    return [(m["tool_call_id"], json.loads(m["content"])) for m in body["messages"] if m["role"] == "tool"]


def _jobs_all(store):
    j = objects_jobs.c
    with store.connect() as conn:
        return conn.execute(select(j.mode, j.status).order_by(j.job_id)).all()


def _jobs(store):
    """The organize and deep jobs: (mode, status)."""
    j = objects_jobs.c
    with store.connect() as conn:
        return conn.execute(select(j.mode, j.status).where(j.mode != "compact").order_by(j.job_id)).all()


# --- a malformed read call (it used to raise out of the worker and wedge the world) -----------------------
def test_a_malformed_read_call_is_answered_as_its_tool_result_and_the_batch_goes_on(store, ingest):
    _, (e0, e1) = ready(store, ingest, ["hello Alice", "second event"])
    with FakeOpenAI() as server:
        server.push("tools", [("memory_find", {})])
        server.tool_answer = lambda body: [_linked(body)]
        octx = _model(store, server)
        worker.enqueue(octx, W, "organize")
        rep = worker.run_worker(octx)
    assert [_results(r) for r in server.requests[:2]] == [
        [],
        [("call_0", {"refused": "memory_find.query: required", "corrections_left": 2})],
    ]
    assert rep.corrections == 1 and rep.failures == 0 and rep.outcomes == {"linked": 2}
    assert states(store) == {e0: "linked", e1: "linked"}


def test_a_batch_whose_read_calls_stay_malformed_fails_with_backoff_and_blocks_only_its_event(store, ingest):
    _, (e0, e1) = ready(store, ingest, ["hello Alice", "second event"])
    now = [utcnow()]
    waits: list[float] = []

    def sleep(seconds):
        waits.append(seconds)
        now[0] += timedelta(seconds=seconds)

    with FakeOpenAI() as server:
        server.tool_answer = lambda body: [("memory_find", {})]
        octx = _model(store, server, retry_backoff_seconds=2)
        octx.clock, octx.sleep = (lambda: now[0]), sleep
        worker.enqueue(octx, W, "organize")
        rep = worker.run_worker(octx)  # returns: nothing raises out of the worker
    # each claim: 1 call + 3 corrections; the 4th refusal fails it; 5 failed claims with backoff
    assert len(server.requests) == rep.model_calls == 5 * 4 and waits == [2, 4, 8, 16]
    assert rep.failures == rep.zero_progress_batches == 5 and rep.blocked_events == 1 and rep.committed == 0
    assert states(store) == {e0: "blocked", e1: "pending"}  # the other event waits for the next hourly job
    assert _jobs(store) == [("organize", "failed")]  # never left running
    st = reports.status(store, W)
    assert len(st["failures"]) == 5 and all("memory_find.query: required" in f["error"] for f in st["failures"])


def test_any_other_error_inside_a_batch_is_a_failed_claim_never_a_running_job(store, ingest, monkeypatch):
    octx, (e0,) = ready(store, ingest, ["hello Alice"])

    def broken(*args, **kw):
        raise RuntimeError("disk full while writing the event's outcome")

    monkeypatch.setattr(graph, "_dispose_event", broken)
    worker.enqueue(octx, W, "organize")
    rep = worker.run_worker(octx)
    assert rep.failures == 5 and rep.blocked_events == 1 and rep.committed == 0
    assert states(store) == {e0: "blocked"} and _jobs(store) == [("organize", "failed")]
    with store.connect() as conn:
        errors = conn.execute(select(objects_failures.c.error)).scalars().all()
    assert errors == ["RuntimeError: disk full while writing the event's outcome"] * 5
    assert count(store, objects_objects) == 1  # project:daily only: every failed commit rolled back whole


# --- a token belongs to its event and batch (another batch's token used to pass for a replay) -----------
def test_a_token_of_another_event_is_a_correction_and_nothing_is_counted_as_written(store, ingest):
    octx, (e0, e1) = ready(store, ingest, ["first compost", "second compost"])
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx, max_batches=1)  # e0 linked by the offline model
    with store.connect() as conn:
        (token,) = conn.execute(select(objects_receipts.c.token).where(objects_receipts.c.mode == "organize")).scalars()
    with FakeOpenAI() as server:  # the model re-sends e0's submission token while disposing of e1
        server.tool_answer = lambda body: [_linked(body, token=token)]
        rep = worker.run_worker(_model(store, server), max_batches=10)
    assert rep.committed == 0 and rep.outcomes == {} and rep.failures == rep.zero_progress_batches == 5
    assert rep.corrections == 5 * 3 and len(server.requests) == 5 * 4  # bounded: then the batch is blocked
    (_, refusal), *_ = _results(server.requests[1])
    assert refusal["refused"].startswith(f"token: already committed by another batch (event {e0}, page from 0)")
    assert states(store) == {e0: "linked", e1: "blocked"}
    assert count(store, objects_receipts, objects_receipts.c.mode == "organize") == 1


def test_the_same_submission_replayed_for_its_batch_returns_the_original_receipt_and_only_then(store, ingest):
    octx, (e1, e2) = ready(store, ingest, ["the garden", "the harvest"])
    worker.enqueue(octx, W, "organize")
    claim = claim_for(octx, e1)
    claim.batch = "7.1"
    raw = sub(claim, objects=[{"id": "person:a", "name": "A"}])
    first = graph.commit(octx, claim, raw)
    again = graph.commit(octx, claim, raw)  # the same submission, the same batch
    assert again["replayed"] and again["revision"] == first["revision"] and again["objects_created"] == ["person:a"]
    before = snapshot(store)
    later = claim_for(octx, e1)  # a later claim of the same event page (another batch)
    later.batch = "7.2"
    other = claim_for(octx, e2)  # another event
    for c in (later, other):
        with pytest.raises(SubmissionError, match="^token: already committed by another batch") as refused:
            graph.commit(octx, c, {**raw, "event_id": c.page.event_id})
        assert refused.value.field == "token"
    assert snapshot(store) == before  # nothing written
    assert states(store) == {e1: "linked", e2: "pending"}


# --- only the submit tool submits; every tool call gets its result --------------------------------------
def test_only_the_submit_tool_submits_and_an_unknown_tool_is_a_correction(store, ingest):
    _, (e0,) = ready(store, ingest, ["Alice met Bob"])
    with FakeOpenAI() as server:
        server.tool_answer = lambda body: [_linked(body)]
        claim = {"token": "tok-any-0001", "graph_revision": 1, "event_id": e0, "page_end": 13}
        server.push("tools", [("memory_delete_everything", {**claim, "outcome": "archive_only", "reason": "x"})])
        octx = _model(store, server)
        worker.enqueue(octx, W, "organize")
        rep = worker.run_worker(octx)
    ((call_id, refusal),) = _results(server.requests[1])
    assert call_id == "call_0" and refusal["refused"].startswith(
        "tool: 'memory_delete_everything' is not a tool of this batch (memory_list, memory_find, memory_read, "
        "memory_evidence, submit_graph)"
    )
    assert rep.outcomes == {"linked": 1} and states(store) == {e0: "linked"}
    assert recall.event_view(store, e0)["reason"] in (None, "")


def test_every_tool_call_of_an_answer_gets_its_result_in_order(store, ingest):
    octx, (e1, e2) = ready(store, ingest, ["garden one", "a note about the plot"])
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx, max_batches=1)  # e1 -> knowledge:garden (offline); e2 does not name it
    rewrite = {"id": "knowledge:garden", "name": "garden", "body": "Conclusion: the plot is the garden"}
    with FakeOpenAI() as server:
        reads = [
            ("memory_find", {"query": "garden"}),
            ("memory_list", {"type": "knowledge"}),
            ("memory_read", {"id": "knowledge:garden"}),
        ]
        server.push("tools", reads)
        # the second answer reads, then rewrites what it read: both run, in this order
        server.tool_answer = lambda body: [
            ("memory_read", {"id": "knowledge:garden"}),
            _linked(body, objects=[rewrite]),
        ]
        rep = worker.run_worker(_model(store, server))
    assert len(server.requests) == 2 and rep.outcomes == {"linked": 1} and rep.corrections == 0
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool", "tool"]
    assert [c["id"] for c in second[2]["tool_calls"]] == ["call_0", "call_1", "call_2"]
    (i0, found), (i1, listed), (i2, read) = _results(server.requests[1])
    assert (i0, i1, i2) == ("call_0", "call_1", "call_2")
    assert [f["id"] for f in found["items"]] == ["knowledge:garden"]
    assert [x["id"] for x in listed["items"]] == ["knowledge:garden"]
    assert read["id"] == "knowledge:garden" and read["sources"][0]["event_id"] == e1
    assert recall.read(store, W, "knowledge:garden")["body"] == "Conclusion: the plot is the garden"
    assert states(store)[e2] == "linked"


# --- compact: the same protocol with its one tool (it used to fail the batch on the first bad call) --------
def _compact_nodes(body) -> list[dict]:
    return json.loads(next(m for m in body["messages"] if m["role"] == "user")["content"])["nodes"]


def _hot(store) -> int:
    n = objects_hot_nodes.c
    with store.connect() as conn:
        return len(conn.execute(select(n.node_id).where(n.active.is_(True), n.level == 0)).all())


def test_a_compact_batch_answers_an_unknown_tool_or_a_malformed_submission_as_a_correction(store, ingest):
    add(ingest, [f"garden watering note {i}" for i in range(8)])
    with FakeOpenAI() as server:
        octx = _model(store, server)
        timeline.intake(octx)
        server.push("tools", [("submit_graph", {"objects": [{"id": "person:ana", "name": "Ana"}]})])
        server.push("tools", [("submit_compact", {"summary": "garden watering notes"})])  # no covers
        server.tool_answer = lambda body: [
            ("submit_compact", {"summary": "garden watering notes", "covers": [x["id"] for x in _compact_nodes(body)]})
        ]
        worker.enqueue(octx, W, "compact")
        rep = worker.run_worker(octx)
    assert (rep.failures, rep.corrections, rep.committed) == (0, 2, 1)
    assert len(server.requests) == 3 and _hot(store) == 0  # one batch of 8, committed after 2 corrections
    ((i1, unknown),) = _results(server.requests[1])
    assert i1 == "call_0" and unknown == {
        "refused": "tool: 'submit_graph' is not a tool of this batch (submit_compact); compact only summarizes "
        "its nodes: object writes are refused during compact",
        "corrections_left": 2,
    }
    malformed = {"refused": "covers: must be a list of node ids", "corrections_left": 1}
    assert [r for _, r in _results(server.requests[2])] == [unknown, malformed]  # the conversation goes on
    assert count(store, objects_objects, objects_objects.c.object_id == "person:ana") == 0


def test_a_compact_batch_still_refused_after_3_corrections_is_a_failed_claim_and_the_5th_ends_the_job(store, ingest):
    add(ingest, [f"garden watering note {i}" for i in range(8)])
    with FakeOpenAI() as server:
        octx = _model(store, server)
        timeline.intake(octx)
        server.tool_answer = lambda body: [("memory_find", {"query": "garden"})]
        worker.enqueue(octx, W, "compact")
        rep = worker.run_worker(octx)
    sizes = [len(_compact_nodes(r)) for r in server.requests]
    # each claim: the first answer and 3 corrections; the batch halves after each failed claim
    assert sizes == [8] * 4 + [4] * 4 + [2] * 4 + [1] * 4 + [1] * 4
    assert (rep.failures, rep.corrections, rep.jobs_failed) == (5, 15, 1)
    assert "still refused after 3 corrections: tool: 'memory_find' is not a tool of this batch" in rep.errors[0]
    assert _jobs_all(store) == [("compact", "failed")] and _hot(store) == 8  # nothing half-written


# --- limits apply to what is sent and received -------------------------------------------------------------
def test_the_seed_limits_are_the_defaults():
    cfg = ObjectsConfig()
    assert (cfg.worker_timeout_seconds, cfg.lease_seconds, cfg.transfer_budget_bytes) == (300, 360, 96_000)
    assert (logic.PROPOSAL_MAX_BYTES, logic.MAX_MODEL_ROUNDS, logic.MAX_FIELD_CORRECTIONS) == (900_000, 16, 3)


def test_the_batch_time_limit_cuts_a_model_call_that_runs_past_it(store, ingest):
    _, (e0,) = ready(store, ingest, ["a call that never answers"])
    with FakeOpenAI() as server:
        server.hold("a call that never answers")  # the provider keeps the request without an answer
        # 8 s, not 2: the claim's clock starts before the page and the prompt are built, and on a
        # loaded machine that once took 2 s, so no round started at all (the next test's case).
        octx = _model(store, server, timeout=600.0, worker_timeout_seconds=8)  # lease 68 s
        worker.enqueue(octx, W, "organize")
        reps: list[worker.WorkerReport] = []
        run = threading.Thread(target=lambda: reps.append(worker.run_worker(octx, max_batches=1)), daemon=True)
        run.start()
        run.join(90)  # the batch's 8 s end the call, long before the client's 600 s or the lease
        finished = not run.is_alive()
        server.release()
    assert finished, "the model call outlived the batch's time limit"
    (rep,) = reps
    assert rep.failures == 1 and "the batch's 8 s ran out during a model call" in rep.errors[0]
    assert states(store) == {e0: "pending"} and _jobs(store) == [("organize", "queued")]  # backed off


def test_no_model_round_starts_past_the_batch_time_limit(store, ingest):
    _, (e0,) = ready(store, ingest, ["a model that keeps listing"])
    with FakeOpenAI() as server:
        server.latency = 0.7  # every answer takes 0.7 s
        server.tool_answer = lambda body: [("memory_list", {"type": "knowledge"})]
        octx = _model(store, server, timeout=600.0, worker_timeout_seconds=2)
        worker.enqueue(octx, W, "organize")
        rep = worker.run_worker(octx, max_batches=1)
    assert rep.failures == 1 and "the batch's 2 s" in rep.errors[0]
    assert len(server.requests) < logic.MAX_MODEL_ROUNDS  # stopped by the time limit, not by the 16 rounds


def test_read_tool_results_count_against_the_transfer_budget(store, ingest):
    texts = [f"garden {i:02d} " + "garden " * 1_140 for i in range(20)] + ["a note about the plot"]
    octx, ids = ready(store, ingest, texts)  # 20 events of about 8,000 characters, then a short one
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx, max_batches=20)  # all 20 attached to knowledge:garden: 160,000 bytes of evidence
    assert len(recall.read(store, W, "knowledge:garden")["sources"]) == 20
    with FakeOpenAI() as server:
        server.push("tools", [("memory_evidence", {"id": "knowledge:garden"})])
        server.push("tools", [("memory_evidence", {"id": "knowledge:garden", "offset": 11})])
        server.tool_answer = lambda body: [_linked(body)]
        rep = worker.run_worker(_model(store, server))
    assert rep.outcomes == {"linked": 1} and states(store)[ids[-1]] == "linked"
    talk = json.dumps(server.requests[-1]["messages"], ensure_ascii=False)
    assert 0 < sum(e in talk for e in ids[:20]) < 20  # not all 160,000 bytes of evidence went along
    claim = _claim(server.requests[-1])
    material = len(claim["event"]["text"].encode()) + _bytes(claim["core"]) + sum(_bytes(o) for o in claim["objects"])
    assert claim["transfer_bytes_left"] == 96_000 - material
    (_, first), (_, second) = _results(server.requests[-1])
    sent = sum(len(m["content"].encode()) for m in server.requests[-1]["messages"] if m["role"] == "tool")
    assert material + sent <= 96_000  # the page, the objects and every read result within the budget
    assert 0 < len(first["items"]) < 20 and first["next_offset"] == len(first["items"])
    assert first["truncated"].startswith(f"the first {len(first['items'])} of 20 items")
    assert second["refused"].endswith("bytes are left of this batch's transfer budget of 96,000: not sent")


def test_the_proposal_size_is_the_arguments_as_sent(store, ingest):
    _, (e0,) = ready(store, ingest, ["a long dossier about the garden"])
    body = "园" * 15_000  # 45,000 bytes as UTF-8, 90,000 as the \u escapes a provider may send
    big = [{"id": f"knowledge:k{i}", "name": f"K{i}", "body": body} for i in range(19)]
    with FakeOpenAI() as server:
        octx = _model(store, server)
        worker.enqueue(octx, W, "organize")
        claimed: dict = {}

        def first_answer(b):
            name, args = _linked(b, objects=big)
            claimed["wire"] = len(json.dumps(args).encode())  # as the fake provider sends it
            claimed["utf8"] = _bytes(args)
            server.tool_answer = lambda b: [_linked(b)]
            return [(name, args)]

        server.tool_answer = first_answer
        rep = worker.run_worker(octx)
    assert claimed["utf8"] < 900_000 <= claimed["wire"]  # under the limit only when re-encoded
    ((_, refusal),) = _results(server.requests[1])
    assert refusal["refused"] == f"submission: proposal is {claimed['wire']:,} bytes (must be under 900,000)"
    echoed = server.requests[1]["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert len(echoed) < 100  # the oversized proposal is not sent back to the model
    assert rep.outcomes == {"linked": 1} and states(store) == {e0: "linked"}
    assert recall.read(store, W, "knowledge:k0") is None
