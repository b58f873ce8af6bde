"""Seed 001 §3, §5 on PostgreSQL: an organize commit that claims its job's next page in its own
transaction (``worker._claim_next``), a world's batches on one held connection
(``worker.RunStore``), and the commit's lease check and revision advance in one statement. Each
batch still holds its own lease (a holder of its own, the world's one valid lease) with its job
``running``; the claim is the one a new turn would make (the rotation, the agent's flags and the
next-turn reservation read again in that transaction), and a claimed batch the run never runs is
handed back as if it had never been claimed."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import event, select, update

from memory_pipeline.lib.store import leases
from memory_pipeline.lib.store.tables import partition_leases
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.objects import graph, offline_rules, worker
from memory_pipeline.objects.logic import SubmissionError
from memory_pipeline.objects.tables import objects_jobs, objects_worlds
from memory_pipeline_tests.integration.test_objects import W, claim_for, ready, states, sub
from memory_pipeline_tests.integration.test_objects_reliability import _leases_now


def _job(store, job_id):
    j = objects_jobs.c
    with store.connect() as conn:
        return conn.execute(select(objects_jobs).where(j.job_id == job_id)).mappings().one()


def _watch(store, monkeypatch, job_id):
    """Per model call: the store's transactions committed before it, the job's status and the
    world leases held."""
    commits = [0]
    event.listen(store.engine, "commit", lambda _conn: commits.__setitem__(0, commits[0] + 1))
    seen: list[tuple[int, str, list]] = []
    real = offline_rules.organize

    def model(**kw):
        holders = [r.holder for r in _leases_now(store)]
        with store.connect() as conn:
            status = conn.execute(select(objects_jobs.c.status).where(objects_jobs.c.job_id == job_id)).scalar_one()
        seen.append((commits[0], status, holders))
        return real(**kw)

    monkeypatch.setattr(offline_rules, "organize", model)
    return seen


def test_a_commit_claims_its_jobs_next_page_and_each_batch_holds_its_own_lease(store, ingest, monkeypatch):
    octx, ids = ready(store, ingest, ["garden visit", "compost note", "harbor walk"])
    job = worker.enqueue(octx, W, "organize")["job_id"]
    seen = _watch(store, monkeypatch, job)
    rep = worker.run_worker(octx)
    assert rep.committed == 3 and rep.failures == 0 and rep.jobs_done == 1
    assert {states(store)[i] for i in ids} == {"linked"}
    # one transaction between two batches: the commit of one, which claimed the next
    assert [b[0] - a[0] for a, b in zip(seen, seen[1:], strict=False)] == [1, 1]
    assert all(status == "running" and len(held) == 1 for _, status, held in seen)
    holders = [held[0] for _, _, held in seen]
    assert len(set(holders)) == 3 and all(h.startswith(f"job{job}-") for h in holders)
    # counted as claims one by one (the last turn's claim found no page left and finished the job)
    row = _job(store, job)
    assert (row["status"], row["claims"], row["batches_done"], row["consecutive_failures"]) == ("done", 4, 3, 0)
    assert _leases_now(store) == []


def test_another_runs_reservation_of_the_next_turn_leaves_the_next_claim_to_a_new_turn(store, ingest, monkeypatch):
    octx, ids = ready(store, ingest, ["garden visit", "compost note"])
    job = worker.enqueue(octx, W, "organize")["job_id"]
    seen = _watch(store, monkeypatch, job)
    first = offline_rules.organize

    def model(**kw):  # another run waiting for the world reserves its next turn during the first batch
        if not seen:
            leases.try_acquire(store, worker.NEXT_TURN_ASSET, W, f"{job}@another-run", worker.NEXT_TURN_TTL)
        return first(**kw)

    monkeypatch.setattr(offline_rules, "organize", model)
    rep = worker.run_worker(octx)
    assert rep.committed == 2 and {states(store)[i] for i in ids} == {"linked"}
    # the commit gave the lease up and the job back; the next batch was a turn of its own (two transactions)
    assert seen[1][0] - seen[0][0] == 2
    assert all(status == "running" and len(held) == 1 for _, status, held in seen)


def test_a_claimed_batch_the_run_never_runs_is_handed_back_as_never_claimed(store, ingest, monkeypatch):
    """The run stops (the process told to stop) after a commit claimed the job's next page: the
    lease is given up and the job is back as before that claim (queued, its claims and rotation
    place), the page pending."""
    octx, (e1, e2) = ready(store, ingest, ["garden visit", "compost note"])
    job = worker.enqueue(octx, W, "organize")["job_id"]
    seen = _watch(store, monkeypatch, job)
    real_turn = worker._turn
    turns = [0]

    def turn(*a, **kw):
        turns[0] += 1
        if turns[0] == 2:
            assert kw["chain"].claimed is not None  # the first commit claimed the second page
            raise KeyboardInterrupt
        return real_turn(*a, **kw)

    monkeypatch.setattr(worker, "_turn", turn)
    after_first: dict = {}
    real_commit = graph.commit

    def commit(octx_, claim, raw, **kw):
        after_first.update(_job(store, job))  # the job as the first batch's claim left it
        return real_commit(octx_, claim, raw, **kw)

    monkeypatch.setattr(graph, "commit", commit)
    try:
        worker.run_worker(octx)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the run was not interrupted")
    assert len(seen) == 1 and _leases_now(store) == []
    row = _job(store, job)
    assert row["status"] == "queued" and row["claims"] == 1 == after_first["claims"]
    assert row["last_claimed_at"] == after_first["last_claimed_at"] and row["batches_done"] == 1
    assert states(store) == {e1: "linked", e2: "pending"}


def test_a_worlds_batches_share_one_connection_given_back_at_the_end_and_taken_again_after_a_pause(
    store, ingest, monkeypatch
):
    """``worker.RunStore``: the transactions of a world's batches run on one held connection (no
    pool checkout, so no liveness ping, a batch); a pause longer than CONNECTION_IDLE_SECONDS (a
    provider's model call) takes a connection from the pool again (pinged); none is left
    checked out when the run ends."""
    octx, ids = ready(store, ingest, [f"garden visit {i}" for i in range(4)])
    worker.enqueue(octx, W, "organize")
    checkouts = [0]
    event.listen(store.engine.pool, "checkout", lambda *_a: checkouts.__setitem__(0, checkouts[0] + 1))
    seen = []
    real = offline_rules.organize

    def model(**kw):
        seen.append(checkouts[0])
        return real(**kw)

    monkeypatch.setattr(offline_rules, "organize", model)
    rep = worker.run_worker(octx, max_batches=2)
    assert rep.committed == 2 and seen[1] == seen[0]  # the second batch took no connection from the pool
    assert store.engine.pool.checkedout() == 0
    monkeypatch.setattr(worker, "CONNECTION_IDLE_SECONDS", -1.0)  # every transaction after a "pause"
    seen.clear()
    rep = worker.run_worker(octx)
    assert rep.committed == 2 and {states(store)[i] for i in ids} == {"linked"}
    assert seen[1] > seen[0] and store.engine.pool.checkedout() == 0


def test_a_refused_commit_passes_no_lease_and_the_lease_is_refused_before_the_revision(store, ingest):
    """The lease's check (here passing it on to a next batch) and the revision's advance are one
    statement on PostgreSQL: a stale write leaves the lease with its batch and the revision where
    it was; a write both stale and under an expired lease is refused for the lease."""
    octx, (e1,) = ready(store, ingest, ["about the garden"])
    worker.enqueue(octx, W, "organize")  # creates project:daily
    claim = claim_for(octx, e1)
    claim.pass_lease_to = "job-next"

    def revision():
        with store.connect() as conn:
            return conn.execute(select(objects_worlds.c.graph_revision)).scalar_one()

    at = revision()
    stale = sub(claim, graph_revision=claim.graph_revision - 1, attach=["project:daily"])
    try:
        graph.commit(octx, claim, stale)
    except SubmissionError as exc:
        assert "stale" in str(exc)
    else:
        raise AssertionError("a stale write was committed")
    assert [r.holder for r in _leases_now(store)] == ["h-test"] and revision() == at
    with store.begin() as conn:
        conn.execute(update(partition_leases).values(expires_at=utcnow() - timedelta(seconds=1)))
    try:
        graph.commit(octx, claim, {**stale, "token": f"{stale['token']}-2"})
    except SubmissionError as exc:
        assert "lease" in str(exc) and "stale" not in str(exc)
    else:
        raise AssertionError("a write under an expired lease was committed")
    assert revision() == at
    claim.pass_lease_to = None  # the lease renewed: the same write at the current revision commits
    with store.begin() as conn:
        conn.execute(update(partition_leases).values(expires_at=utcnow() + timedelta(seconds=60)))
    receipt = graph.commit(octx, claim, {**stale, "token": f"{stale['token']}-3", "graph_revision": at})
    assert receipt["revision"] == at + 1 == revision()
