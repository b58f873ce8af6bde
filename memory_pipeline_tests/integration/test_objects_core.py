"""Seed 001 core documents (AGENTS.md, SOUL.md, USER.md) on PostgreSQL: the organize model is
given them before it may replace one (an overwrite of a document the batch did not read is
refused, and so is one of a document changed since the batch read it), every write keeps the
prior version with who wrote it, the graph revision and when, and a human edit of a projected
core file is imported, never lost. The model is the local OpenAI-compatible fake server or a
claim committed directly."""

from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import select

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import leases
from memory_pipeline.objects import graph, logic, projection, reports, worker
from memory_pipeline.objects.config import ObjectsConfig
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.logic import SubmissionError
from memory_pipeline.objects.tables import objects_core, objects_core_versions, objects_worlds
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_objects import W, claim_for, ready, snapshot, sub

ANA = "# USER\nName: Ana (written by Ana)\nLikes: tea"


def _model(store, server) -> ObjectsContext:
    llm = LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0)
    return ObjectsContext(store, llm, ObjectsConfig(retry_backoff_seconds=0))


def _revision(store) -> int:
    with store.connect() as conn:
        return int(conn.execute(select(objects_worlds.c.graph_revision).where(objects_worlds.c.world_id == W)).scalar())


def _history(store, name="USER.md") -> list[tuple]:
    v = objects_core_versions.c
    with store.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                select(v.version, v.written_by, v.content, v.receipt_token, v.revision)
                .where(v.world_id == W, v.name == name)
                .order_by(v.version)
            ).all()
        ]


def _current(store, name="USER.md") -> str | None:
    c = objects_core.c
    with store.connect() as conn:
        return conn.execute(select(c.content).where(c.world_id == W, c.name == name)).scalar()


def test_the_model_is_given_the_core_documents_and_a_write_keeps_the_prior_version(store, ingest):
    """The audit's reproduction: a human's USER.md, then a model write of USER.md."""
    octx, (e0,) = ready(store, ingest, ["I switched to coffee"])
    imported = graph.import_core(octx, W, "USER.md", ANA)
    with FakeOpenAI() as f:
        f.push(
            "tools",
            [
                (
                    "submit_graph",
                    {
                        "token": "tok-core-01",
                        "graph_revision": imported["revision"],
                        "event_id": e0,
                        "outcome": "linked",
                        "page_end": 20,
                        "core": [{"name": "USER.md", "content": "Likes: coffee"}],
                    },
                )
            ],
        )
        o = _model(store, f)
        worker.enqueue(o, W, "organize")
        rep = worker.run_worker(o)
    assert rep.outcomes == {"linked": 1}
    claim = json.loads(f.requests[0]["messages"][-1]["content"])
    core = {d["name"]: d for d in claim["core"]}
    assert core["USER.md"]["content"] == ANA and core["USER.md"]["version"] == 1  # read before it is replaced
    assert core["SOUL.md"] == {"name": "SOUL.md", "absent": True} and core["AGENTS.md"]["absent"]
    assert _current(store) == "Likes: coffee"
    (v1, v2) = _history(store)
    assert v1 == (1, "human", ANA, None, imported["revision"])  # the human's text is kept
    assert v2 == (2, "model", "Likes: coffee", "tok-core-01", imported["revision"] + 1)


def test_an_overwrite_of_a_core_document_the_batch_did_not_read_is_refused(store, ingest):
    octx, (e1,) = ready(store, ingest, ["the user moved to Lisbon"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)  # creates project:daily
    graph.import_core(octx, W, "USER.md", ANA)
    claim = claim_for(octx, e1)  # a claim that was given no core document
    before = snapshot(store)
    with pytest.raises(SubmissionError, match="not read in this batch") as e:
        graph.commit(octx, claim, sub(claim, core=[{"name": "USER.md", "content": "Lives in Lisbon"}]))
    assert e.value.field == "core[0].name" and snapshot(store) == before and _current(store) == ANA
    # an absent document may be created (nothing to lose), as a new object may
    receipt = graph.commit(octx, claim, sub(claim, core=[{"name": "SOUL.md", "content": "Calm and precise."}]))
    assert receipt["core"] == ["SOUL.md"] and _history(store, "SOUL.md")[0][:2] == (1, "model")
    leases.release(store, graph.LEASE_ASSET, W, "h-test")


def test_a_core_document_over_the_transfer_budget_is_named_not_delivered_and_not_writable(store, ingest):
    octx, _ = ready(store, ingest, ["x"])
    graph.import_core(octx, W, "AGENTS.md", "a" * 5_000)
    graph.import_core(octx, W, "USER.md", "u" * 500)
    with store.connect() as conn:
        docs, read = graph.core_for_batch(conn, W, 2_000)
    by_name = {d["name"]: d for d in docs}
    assert "content" not in by_name["AGENTS.md"] and by_name["AGENTS.md"]["not_delivered"]
    assert by_name["USER.md"]["content"] == "u" * 500 and "AGENTS.md" not in read and read["SOUL.md"] is None


def test_a_core_document_edited_after_the_batch_read_it_is_never_overwritten(store, ingest):
    """A human edit imported while the batch is with the model: the model's write against the
    graph revision it was given is stale, and so is its retry against the new revision (the
    refusal told it the revision, not the document); it submits without the core write."""
    octx, (e0,) = ready(store, ingest, ["I switched to coffee"])
    graph.import_core(octx, W, "USER.md", ANA)
    edit = ANA + "\nAllergic to nuts (added by Ana)"

    def answer(body) -> str:
        claim = json.loads(next(m["content"] for m in body["messages"] if m["role"] == "user"))
        notes = json.dumps(body["messages"])  # wherever the refusals come back to the model
        args = {
            "token": claim["token"],
            "graph_revision": claim["graph_revision"],
            "event_id": claim["event"]["id"],
            "page_end": claim["event"]["page"][1],
            "outcome": "linked",
            "attach": ["project:daily"],
        }
        if "graph_revision: stale" not in notes:
            graph.import_core(octx, W, "USER.md", edit)  # the human saves USER.md now
        at = re.search(r"the graph is at (\d+)", notes)
        if at:
            args["graph_revision"] = int(at.group(1))
        if "core[0].name: stale" not in notes:
            args["core"] = [{"name": "USER.md", "content": "Likes: coffee"}]
        return json.dumps({"tool": "submit_graph", "arguments": args})

    with FakeOpenAI() as f:
        f.answer = answer
        o = _model(store, f)
        worker.enqueue(o, W, "organize")
        rep = worker.run_worker(o)
    assert rep.outcomes == {"linked": 1} and len(f.requests) == 3
    assert "core[0].name: stale: USER.md changed after this batch read it" in json.dumps(f.requests[2]["messages"])
    assert _current(store) == edit
    assert [(v, who, text) for v, who, text, *_ in _history(store)] == [(1, "human", ANA), (2, "human", edit)]


def test_a_human_edit_of_a_projected_core_file_is_imported_and_never_lost(store, ingest, tmp_path):
    octx, (e1,) = ready(store, ingest, ["the user likes tea"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    graph.import_core(octx, W, "USER.md", ANA)
    projection.project(store, tmp_path)
    path = tmp_path / W / "USER.md"
    assert path.read_text() == ANA and "[USER.md](USER.md)" in (tmp_path / W / "README.md").read_text()

    path.write_text(ANA + "\nLikes: green tea")  # a human edit of the file
    assert projection.needs_pass(store, tmp_path)  # the sensor's question
    rep = projection.project(store, tmp_path)
    assert rep.core_imported == [f"{W}/USER.md"] and _current(store) == ANA + "\nLikes: green tea"

    def model_writes(content):  # a batch that read the current document replaces it
        claim = claim_for(octx, e1)
        with store.connect() as conn:
            claim.core_read = graph.core_for_batch(conn, W, 96_000)[1]
        graph.commit(octx, claim, sub(claim, core=[{"name": "USER.md", "content": content}]))
        leases.release(store, graph.LEASE_ASSET, W, "h-test")

    model_writes("Likes: coffee")
    projection.project(store, tmp_path)
    assert path.read_text() == "Likes: coffee"  # the store moved on, the file follows

    path.write_text("Likes: coffee, never before noon")  # the human edits the file ...
    model_writes("Likes: espresso")  # ... while a model writes the document
    projection.project(store, tmp_path)
    assert _current(store) == path.read_text() == "Likes: coffee, never before noon"  # the human edit wins
    assert [who for _, who, *_ in _history(store)] == ["human", "human", "model", "model", "human"]
    assert "Likes: espresso" in [text for _, _, text, *_ in _history(store)]  # the model's version is kept too

    path.unlink()  # a deleted core file is written again from the store
    projection.project(store, tmp_path)
    assert path.read_text() == "Likes: coffee, never before noon" and len(_history(store)) == 5

    (tmp_path / W / "SOUL.md").write_text("Calm.")  # a new core file by hand
    projection.project(store, tmp_path)
    assert _current(store, "SOUL.md") == "Calm." and _history(store, "SOUL.md")[0][1] == "human"

    path.write_text("x" * 16_001)  # an edit the store refuses: reported, the file left as written
    rep = projection.project(store, tmp_path)
    assert any("USER.md: human edit not imported" in e for e in rep.errors)
    assert [e["object_id"] for e in reports.status(store, W)["projection"]["errors"]] == ["USER.md"]
    projection.project(store, tmp_path)
    assert path.read_text() == "x" * 16_001 and _current(store) == "Likes: coffee, never before noon"
    assert not projection.needs_pass(store, tmp_path)  # no pass every minute for it


def test_the_deep_review_is_given_the_core_documents_too(store, ingest, monkeypatch):
    octx, _ = ready(store, ingest, ["x"])
    worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    graph.import_core(octx, W, "SOUL.md", "Calm and precise.")
    spy = []
    real_complete = octx.llm.complete
    monkeypatch.setattr(octx.llm, "complete", lambda req, **kw: spy.append(req) or real_complete(req, **kw))
    worker.enqueue(octx, W, "deep")
    worker.run_worker(octx)
    core = {d["name"]: d for d in json.loads(spy[0].user)["core"]}
    assert spy[0].task == "objects_deep" and core["SOUL.md"]["content"] == "Calm and precise."
