"""Seed 001 reliability on PostgreSQL, line by line: every compact and deep batch holds the world's
lease too, and two workers on one world never hold it together; continuous compaction never
starves the nightly deep review; backoff doubles and a successful batch resets the count; deep
batches shrink on a capacity failure; a stopped world is not claimed and one hourly job at a
time; failed history stays failed; find by alias, cue and term; project approval by command and
tool only."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.llm.client import LLMHardFailure
from memory_pipeline.lib.store import leases
from memory_pipeline.lib.store.tables import partition_leases
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.objects import graph, logic, offline_rules, recall, reports, timeline, tools, worker
from memory_pipeline.objects.config import ObjectsConfig
from memory_pipeline.objects.context import ObjectsContext
from memory_pipeline.objects.tables import objects_jobs, objects_receipts
from memory_pipeline_tests.integration.test_objects import W, add, claim_for, ready, states, sub


def _leases_now(store):
    """The world leases held now (not a waiting run's reservation of the next turn)."""
    t = partition_leases.c
    with store.connect() as conn:
        return conn.execute(select(t.holder, t.acquired_at, t.expires_at).where(t.asset == graph.LEASE_ASSET)).all()


def _with_objects(store, ingest, n=9):
    """A world with ``n`` knowledge objects (plus project:daily) and no job in flight."""
    octx, (e1,) = ready(store, ingest, ["x"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    c = claim_for(octx, e1)
    graph.commit(octx, c, sub(c, objects=[{"id": f"knowledge:k{i}", "name": f"K{i}"} for i in range(n)]))
    leases.release(store, graph.LEASE_ASSET, W, "h-test")
    with store.begin() as conn:
        conn.execute(objects_jobs.update().values(status="done"))
    return octx


def test_compact_and_deep_batches_hold_the_worlds_lease_of_360_seconds(store, ingest, monkeypatch):
    octx = _with_objects(store, ingest)
    add(ingest, ["fresh garden note", "fresh compost note"], conv="c2")
    timeline.intake(octx)
    seen: dict[str, list] = {"compact": [], "deep": []}
    real_compact, real_deep = offline_rules.compact, offline_rules.deep

    def compact(nodes):
        seen["compact"].append(_leases_now(store))
        return real_compact(nodes)

    def deep(**kw):
        seen["deep"].append(_leases_now(store))
        return real_deep(**kw)

    monkeypatch.setattr(offline_rules, "compact", compact)
    monkeypatch.setattr(offline_rules, "deep", deep)
    compact_job = worker.enqueue(octx, W, "compact")
    deep_job = worker.enqueue(octx, W, "deep")
    worker.run_worker(octx)
    for mode, job in (("compact", compact_job), ("deep", deep_job)):
        assert seen[mode]
        for rows in seen[mode]:
            (lease,) = rows  # one valid lease, this job's batch's
            assert lease.holder.startswith(f"job{job['job_id']}-")
            assert lease.expires_at - lease.acquired_at == timedelta(seconds=360)
    assert _leases_now(store) == []


def test_two_workers_on_one_world_never_hold_the_lease_together(store, ingest, monkeypatch):
    octx, ids = ready(store, ingest, [f"garden visit {i}" for i in range(12)])
    worker.enqueue(octx, W, "organize")
    calls: list[tuple[float, float, int]] = []
    real = offline_rules.organize
    guard = threading.Lock()

    def model(**kw):
        start = time.monotonic()
        held = len(_leases_now(store))
        time.sleep(0.02)
        with guard:
            calls.append((start, time.monotonic(), held))
        return real(**kw)

    monkeypatch.setattr(offline_rules, "organize", model)
    reports_: list[worker.WorkerReport] = []

    def run():
        mine = ObjectsContext(store, LLMClient(store, asset="objects_test"), ObjectsConfig(retry_backoff_seconds=0))
        reports_.append(worker.run_worker(mine))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert {states(store)[i] for i in ids} == {"linked"}
    assert sum(r.committed for r in reports_) == 12  # each event archived once
    assert all(held == 1 for _, _, held in calls)
    spans = sorted((a, b) for a, b, _ in calls)
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:], strict=False))  # never at once
    with store.connect() as conn:
        revs = conn.execute(select(objects_receipts.c.revision).order_by(objects_receipts.c.revision)).scalars().all()
    assert revs == list(range(revs[0], revs[0] + len(revs)))


def test_continuous_compaction_never_starves_the_nightly_deep_review(store, ingest):
    octx = _with_objects(store, ingest, n=2)
    octx.cfg = ObjectsConfig(retry_backoff_seconds=0, compact_threshold_tokens=50)
    add(ingest, [f"interval training note {i} " * 3 for i in range(60)], conv="c3")
    timeline.intake(octx)
    assert [r["origin"] for r in worker.enqueue_threshold(octx)] == ["threshold"]
    worker.enqueue(octx, W, "deep", origin=logic.JobOrigin.NIGHTLY)
    with store.connect() as conn:
        before = conn.execute(select(func.max(objects_receipts.c.revision))).scalar()
    worker.run_worker(octx, max_batches=4)
    with store.connect() as conn:
        modes = (
            conn.execute(
                select(objects_receipts.c.mode)
                .where(objects_receipts.c.revision > before)
                .order_by(objects_receipts.c.revision)
            )
            .scalars()
            .all()
        )
    # by least-recent claim: compact, the never-claimed deep review, compact, then deep again (its end)
    assert modes == ["compact", "deep", "compact"]
    with store.connect() as conn:
        deep_status = conn.execute(select(objects_jobs.c.status).where(objects_jobs.c.mode == "deep")).scalar()
    assert deep_status == "done"  # 3 objects: one batch, then its end


def test_backoff_doubles_and_a_successful_batch_resets_the_count(store, ingest, monkeypatch):
    _, (e1, e2) = ready(store, ingest, ["garden one", "garden two"])
    now = [utcnow()]
    waits: list[float] = []

    def sleep(seconds):
        waits.append(seconds)
        now[0] += timedelta(seconds=seconds)

    octx = ObjectsContext(
        store,
        LLMClient(store, asset="objects_test"),
        ObjectsConfig(retry_backoff_seconds=2),
        clock=lambda: now[0],
        sleep=sleep,
    )
    failures = {e1: 4, e2: 4}
    real = offline_rules.organize

    def model(**kw):
        if failures[kw["event_id"]]:
            failures[kw["event_id"]] -= 1
            raise LLMHardFailure("provider busy")
        return real(**kw)

    monkeypatch.setattr(offline_rules, "organize", model)
    worker.enqueue(octx, W, "organize")
    rep = worker.run_worker(octx)
    assert waits == [2, 4, 8, 16] * 2  # doubled per consecutive failure, from the base again after a success
    assert rep.failures == 8 and rep.blocked_events == 0  # 4 + 4, never 5 in a row
    assert states(store) == {e1: "linked", e2: "linked"}


def test_deep_batches_shrink_on_a_capacity_failure(store, ingest, monkeypatch):
    octx = _with_objects(store, ingest)
    sizes = []
    real = offline_rules.deep

    def model(**kw):
        sizes.append(len(kw["object_ids"]))
        if len(kw["object_ids"]) > 1:
            raise LLMHardFailure("context window exceeded")
        return real(**kw)

    monkeypatch.setattr(offline_rules, "deep", model)
    job = worker.enqueue(octx, W, "deep")
    rep = worker.run_worker(octx)
    assert sizes[:3] == [4, 2, 1]  # halved per failure of the same batch
    with store.connect() as conn:
        status, pos, inventory = conn.execute(
            select(objects_jobs.c.status, objects_jobs.c.inventory_pos, objects_jobs.c.inventory).where(
                objects_jobs.c.job_id == job["job_id"]
            )
        ).one()
    assert status == "done" and pos == len(inventory) == 10 and rep.blocked_events == 0


def _deep_world(store, ingest, body_chars: int, core_chars: int, **cfg):
    """Four knowledge objects whose bodies are ``body_chars`` CJK characters (3 UTF-8 bytes each),
    project:daily, and a USER.md of ``core_chars`` CJK characters (none for 0)."""
    octx, (e1,) = ready(store, ingest, ["garden notes for the review"], **cfg)
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    c = claim_for(octx, e1)
    objs = [{"id": f"knowledge:k{i}", "name": f"K{i}", "body": "记" * body_chars} for i in range(4)]
    graph.commit(octx, c, sub(c, objects=objs))
    leases.release(store, graph.LEASE_ASSET, W, "h-test")
    if core_chars:
        graph.import_core(octx, W, "USER.md", "记" * core_chars)
    with store.begin() as conn:
        conn.execute(objects_jobs.update().values(status="done"))
    return octx


def _sent(value) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


@pytest.mark.parametrize(
    ("body_chars", "core_chars", "batches"),
    [
        # 4 dossiers of 16,000 CJK characters (48,000+ bytes each): one per batch within 96,000
        (16_000, 0, [["k0"], ["k1"], ["k2"], ["k3", "daily"]]),
        # 30,000+ bytes each: three fit, and the fourth goes to the next batch
        (10_000, 0, [["k0", "k1", "k2"], ["k3", "daily"]]),
        # the same with a USER.md of 15,000 bytes: the core documents count too, so two fit
        (10_000, 5_000, [["k0", "k1"], ["k2", "k3", "daily"]]),
    ],
)
def test_deep_batches_fit_their_objects_and_the_core_documents_to_the_transfer_budget(
    store, ingest, monkeypatch, body_chars, core_chars, batches
):
    octx = _deep_world(store, ingest, body_chars, core_chars)
    spy = []
    real_complete = octx.llm.complete
    monkeypatch.setattr(octx.llm, "complete", lambda req, **kw: spy.append(req) or real_complete(req, **kw))
    job = worker.enqueue(octx, W, "deep")
    rep = worker.run_worker(octx)
    claims = [json.loads(r.user) for r in spy if r.task == "objects_deep"]
    assert [[o["id"].split(":")[1] for o in c["objects"]] for c in claims] == batches
    for c in claims:  # what each batch sends stays within the seed's 96,000 bytes, and it says what is left
        sent = sum(_sent(o) for o in c["objects"]) + _sent(c["core"])
        assert sent <= logic.BUDGET_DEFAULT_BYTES == octx.cfg.transfer_budget_bytes
        assert c["transfer_bytes_left"] == logic.BUDGET_DEFAULT_BYTES - sent
        delivered = [d["name"] for d in c["core"] if "content" in d]
        assert delivered == (["USER.md"] if core_chars else [])
    with store.connect() as conn:
        status, pos = conn.execute(
            select(objects_jobs.c.status, objects_jobs.c.inventory_pos).where(objects_jobs.c.job_id == job["job_id"])
        ).one()
    assert (status, pos, rep.failures) == ("done", 5, 0)  # every object reviewed, none refused


def test_a_deep_object_alone_over_a_lower_budget_is_refused_by_name_and_never_sent(store, ingest):
    octx = _deep_world(store, ingest, 16_000, 0, transfer_budget_bytes=logic.BUDGET_MIN_BYTES)
    job = worker.enqueue(octx, W, "deep")
    rep = worker.run_worker(octx)
    assert rep.model_calls == 0 and rep.failures == logic.MAX_CONSECUTIVE_FAILURES and rep.jobs_failed == 1
    assert "deep review: knowledge:k0 alone is 48," in rep.errors[0]
    assert "over the transfer budget of 24,000 bytes (memory.objects.transfer_budget_bytes)" in rep.errors[0]
    with store.connect() as conn:
        status, pos = conn.execute(
            select(objects_jobs.c.status, objects_jobs.c.inventory_pos).where(objects_jobs.c.job_id == job["job_id"])
        ).one()
    assert (status, pos) == ("failed", 0)  # the inventory is not advanced past an object never reviewed


def test_a_stopped_world_is_not_claimed_and_one_hourly_job_at_a_time(store, ingest):
    octx, (e1,) = ready(store, ingest, ["garden"])
    assert [r["origin"] for r in worker.enqueue_hourly(octx)] == ["hourly"]
    assert worker.enqueue_hourly(octx) == []  # one in flight
    worker.set_flags(octx, W, stopped=True)
    assert worker.run_worker(octx).batches == 0 and states(store)[e1] == "pending"
    worker.set_flags(octx, W, stopped=False)
    worker.run_worker(octx)
    assert states(store)[e1] == "linked"


def test_failed_history_stays_failed_after_a_retry_succeeds(store, ingest, monkeypatch):
    octx, (bad,) = ready(store, ingest, ["poison event"])
    real = offline_rules.organize

    def broken(**kw):
        raise LLMHardFailure("provider down")

    monkeypatch.setattr(offline_rules, "organize", broken)
    failed = worker.enqueue(octx, W, "organize")
    worker.run_worker(octx)
    monkeypatch.setattr(offline_rules, "organize", real)
    worker.enqueue(octx, W, "organize", retry_blocked=True)
    worker.run_worker(octx)
    assert states(store)[bad] == "linked"
    st = reports.status(store)
    assert {"mode": "organize", "status": "failed", "count": 1} in st["jobs"]
    assert {"mode": "organize", "status": "done", "count": 1} in st["jobs"]
    assert len(st["failures"]) == 5 and all(f["job_id"] == failed["job_id"] for f in st["failures"])
    assert st["worlds"][0]["worker_error"] is None  # cleared by the next successful commit


def test_find_by_name_alias_cue_term_and_project(store, ingest):
    octx, (e1,) = ready(store, ingest, ["x"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    c = claim_for(octx, e1)
    person = {
        "id": "person:qhy",
        "name": "Qiu Hongyu",
        "aliases": ["QHY"],
        "summary": "gardener of the north plot",
        "cues": ["who waters the tomatoes"],
    }
    graph.commit(
        octx,
        c,
        sub(
            c,
            objects=[person, {"id": "project:greenhouse", "name": "Greenhouse"}],
            relations=[{"src": "person:qhy", "label": "member_of", "dst": "project:greenhouse"}],
        ),
    )
    for query in ("Qiu Hongyu", "QHY", "who waters the tomatoes", "north", "greenhouse"):
        assert "person:qhy" in [h["id"] for h in recall.find(store, W, query)], query
    assert recall.find(store, W, "harbor") == []


def test_a_project_is_activated_only_by_the_users_command_or_tool(store, ingest, monkeypatch):
    from memory_pipeline.cli import app

    octx, (e1,) = ready(store, ingest, ["x"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)
    c = claim_for(octx, e1)
    graph.commit(
        octx, c, sub(c, objects=[{"id": "project:greenhouse", "name": "G"}, {"id": "project:shed", "name": "S"}])
    )
    assert recall.read(store, W, "project:shed")["status"] == "candidate"
    assert tools.call(octx, "memory_approve", {"world": W, "id": "project:greenhouse"})["status"] == "active"
    with pytest.raises(tools.ToolError, match=r"memory_approve.id: .*not a candidate"):
        tools.call(octx, "memory_approve", {"world": W, "id": "project:greenhouse"})
    with pytest.raises(tools.ToolError, match=r"memory_approve.id: .*is not a project"):
        tools.call(octx, "memory_approve", {"world": W, "id": "person:qhy"})
    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    runner = CliRunner()
    assert runner.invoke(app, ["objects", "approve", W, "project:shed"]).exit_code == 0
    assert recall.read(store, W, "project:shed")["status"] == "active"
    again = runner.invoke(app, ["objects", "approve", W, "project:shed"])
    assert again.exit_code == 2 and "not a candidate" in again.output


def _job_status(store, job_id):
    with store.connect() as conn:
        return conn.execute(select(objects_jobs.c.status).where(objects_jobs.c.job_id == job_id)).scalar_one()


def test_a_job_reads_running_only_while_a_batch_holds_the_lease(store, ingest, monkeypatch, tmp_path):
    """An event of 19,998 characters is three organize pages of at most 8,000 (seed 001 §5): the
    job is ``running`` while a page's batch holds the world's lease, and given back ``queued`` when
    that batch commits, when the run stops between batches, and when the world is stopped; done at
    the end. Status and the CLI say so."""
    from memory_pipeline.cli import app

    octx, (big,) = ready(store, ingest, ["tomatoes " * 2_222])
    job = worker.enqueue(octx, W, "organize")["job_id"]
    seen: list[tuple[str, int]] = []
    real = offline_rules.organize

    def model(**kw):
        seen.append((_job_status(store, job), len(_leases_now(store))))
        return real(**kw)

    monkeypatch.setattr(offline_rules, "organize", model)
    rep = worker.run_worker(octx, max_batches=1)  # the run ends after the first page's commit
    assert rep.committed == 1 and seen == [("running", 1)]
    assert _job_status(store, job) == "queued" and _leases_now(store) == []
    assert {"mode": "organize", "status": "queued", "count": 1} in reports.status(store)["jobs"]
    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "data"))
    out = CliRunner().invoke(app, ["objects", "status"], terminal_width=200)
    assert out.exit_code == 0 and "organize queued 1" in out.output and "running" not in out.output

    # the agent is stopped after the second page's commit: the run stops between batches
    def stop_after(**kw):
        answer = model(**kw)
        worker.set_flags(octx, W, stopped=True)
        return answer

    monkeypatch.setattr(offline_rules, "organize", stop_after)
    rep = worker.run_worker(octx)
    assert rep.committed == 1 and rep.not_claimed == [W] and seen[1] == ("running", 1)
    assert _job_status(store, job) == "queued" and _leases_now(store) == []
    worker.set_flags(octx, W, stopped=False)
    monkeypatch.setattr(offline_rules, "organize", model)
    worker.run_worker(octx)
    assert seen[2] == ("running", 1) and _job_status(store, job) == "done"
    assert states(store) == {big: "linked"}


def test_a_batch_interrupted_mid_way_gives_its_job_back_queued(store, ingest, monkeypatch):
    """A run interrupted inside a batch (the process told to stop: not an error of the batch)
    releases the lease and gives the job back ``queued``, never ``running`` with no holder."""
    octx, (e1,) = ready(store, ingest, ["garden"])
    job = worker.enqueue(octx, W, "organize")["job_id"]

    def model(**kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(offline_rules, "organize", model)
    with pytest.raises(KeyboardInterrupt):
        worker.run_worker(octx)
    assert _job_status(store, job) == "queued" and _leases_now(store) == []
    assert states(store) == {e1: "pending"}
