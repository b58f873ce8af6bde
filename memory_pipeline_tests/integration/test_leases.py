"""Partition leases in the store (lib.store.leases), on PostgreSQL and SQLite: one holder at a time,
a waiter gets the partition when it is released, a dead holder's lease is taken over once it has
expired, a live one is renewed while it works, and the lease holds across processes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from itertools import pairwise

import pytest
from sqlalchemy import insert, select

from memory_pipeline import domains
from memory_pipeline.lib.store import Store, leases
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import partition_leases
from memory_pipeline.lib.timeutil import utcnow

A, P = "temporal_day_summaries", "2025-12-31"


@pytest.fixture(params=["postgresql", "sqlite"])
def lease_store(request, tmp_path) -> Store:
    if request.param == "postgresql":
        return request.getfixturevalue("store")
    store = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    ensure_schema(store, domains.version_locations())
    return store


def test_one_holder_at_a_time_and_the_next_takes_it_after_release(lease_store):
    assert leases.try_acquire(lease_store, A, P, "run-a") is None
    other = leases.try_acquire(lease_store, A, P, "run-b")
    assert other is not None and other.holder == "run-a" and other.expires_at > utcnow()
    assert leases.try_acquire(lease_store, A, P, "run-a") is None  # the holder's own: renewed
    assert leases.try_acquire(lease_store, A, "2025-12-30", "run-b") is None  # another partition is free
    assert not leases.release(lease_store, A, P, "run-b")  # not theirs
    assert leases.release(lease_store, A, P, "run-a")
    assert leases.try_acquire(lease_store, A, P, "run-b") is None
    assert leases.current(lease_store, A, P).holder == "run-b"


def test_a_dead_holder_is_taken_over_once_its_lease_expired(lease_store):
    past = utcnow() - timedelta(seconds=1)
    with lease_store.begin() as conn:
        conn.execute(
            insert(partition_leases).values(
                asset=A, partition=P, holder="dead-run", acquired_at=past - timedelta(minutes=5), expires_at=past
            )
        )
    with leases.held(lease_store, A, P, "run-b", wait=5, poll=0.05) as lease:
        assert lease.waited_for == [] and leases.current(lease_store, A, P).holder == "run-b"
    assert not leases.renew(lease_store, A, P, "dead-run")  # the dead run lost it for good
    assert leases.current(lease_store, A, P) is None


def test_a_waiter_logs_the_holder_and_takes_over_when_the_dead_lease_expires(lease_store):
    # Held by a worker that died without releasing: nobody renews it, it expires in a second.
    assert leases.try_acquire(lease_store, A, P, "dead-run", ttl=timedelta(seconds=1)) is None
    seen = []
    started = time.monotonic()
    with leases.held(lease_store, A, P, "run-b", wait=30, poll=0.1, on_wait=lambda h, w: seen.append(h.holder)):
        took = time.monotonic() - started
    assert seen == ["dead-run"] and 0.5 < took < 10


def test_an_ended_holder_that_missed_a_renewal_is_taken_over_before_expiry(lease_store):
    """A run marked failed after its worker was SIGKILLed: its lease (4 of 5 minutes left, so its
    last renewal was 60 s ago while it renews every 60 s) is taken at once by the re-run, not after
    the TTL; the same lease of a run still in progress is waited for."""
    now = utcnow()
    with lease_store.begin() as conn:
        conn.execute(
            insert(partition_leases).values(
                asset=A,
                partition=P,
                holder="killed-run",
                acquired_at=now - timedelta(minutes=2),
                expires_at=now + timedelta(minutes=3, seconds=30),  # last renewed 90 s ago
            )
        )
    with pytest.raises(leases.LeaseTimeout, match="still held by run killed-run"):
        with leases.held(lease_store, A, P, "rerun", wait=0.3, poll=0.05, ended=lambda h: False):
            pass
    asked = []
    with leases.held(
        lease_store, A, P, "rerun", wait=30, poll=0.05, ended=lambda h: asked.append(h) or h == "killed-run"
    ) as lease:
        assert lease.taken_from == "killed-run" and leases.current(lease_store, A, P).holder == "rerun"
    assert asked == ["killed-run"]
    assert not leases.renew(lease_store, A, P, "killed-run")  # its lease is gone for good


def test_an_ended_holder_that_still_renews_is_waited_for(lease_store):
    """The run is recorded as failed, but a process it left (the step subprocess of a killed
    orchestrator) renewed the lease just now: it is still working, so it is not taken over."""
    assert leases.try_acquire(lease_store, A, P, "failed-run") is None  # just taken: 5 minutes left
    with pytest.raises(leases.LeaseTimeout, match="still held by run failed-run"):
        with leases.held(lease_store, A, P, "rerun", wait=0.5, poll=0.05, ended=lambda h: True):
            pass
    assert leases.current(lease_store, A, P).holder == "failed-run"
    assert not leases.take_over(lease_store, A, P, "someone-else", "rerun")  # only from the holder named
    assert leases.take_over(lease_store, A, P, "failed-run", "rerun")
    assert leases.current(lease_store, A, P).holder == "rerun"


def _killed_holder(lease_store, partitions: list[str]) -> int:
    """A process that took the leases of ``partitions`` as run "killed-run" and was then killed with
    SIGKILL (and reaped): its leases are fresh (5 minutes left) and nobody will renew them."""
    code = (
        "import sys, time; from memory_pipeline.lib.store import Store, leases; "
        f"leases.try_acquire_many(Store(sys.argv[1]), {A!r}, {partitions!r}, 'killed-run'); "
        "print('held', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, lease_store.url], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    return proc.pid


def test_a_holder_whose_process_is_gone_is_taken_over_at_once(lease_store):
    """A CLI run killed with kill -9: nothing marks its run failed and its lease has 5 minutes left,
    but the lease names its host and pid, and that pid no longer runs here: taken over at once."""
    pid = _killed_holder(lease_store, [P, "2025-12-30", "2025-12-29"])
    other = leases.current(lease_store, A, P)
    assert (other.holder, other.host, other.pid) == ("killed-run", leases.this_host(), pid)
    assert other.host.startswith(socket.gethostname())
    assert other.dead and other.expires_at > utcnow() + timedelta(minutes=4)
    started = time.monotonic()
    with leases.held(lease_store, A, P, "rerun", wait=30, poll=0.05, ended=lambda h: False) as lease:
        assert lease.taken_from == "killed-run" and lease.dead == other
        assert lease.waited_for == [] and time.monotonic() - started < 30
        mine = leases.current(lease_store, A, P)
        assert (mine.holder, mine.pid) == ("rerun", os.getpid()) and not mine.dead
    with leases.held_free(lease_store, A, ["2025-12-30", "2025-12-29", "2025-12-28"], "rerun") as got:
        assert got.taken == {"2025-12-30", "2025-12-29", "2025-12-28"}
        assert {k: h.pid for k, h in got.dead.items()} == {"2025-12-30": pid, "2025-12-29": pid}


def test_status_names_a_killed_runs_leases_until_they_are_taken_over(lease_store, monkeypatch):
    """After `kill -9` of a command-line backfill, nothing in `status` showed its run or the leases
    it still held: it names them (read only), and no more once a run took them over."""
    from typer.testing import CliRunner

    from memory_pipeline.cli import app

    monkeypatch.setenv("MEMORY_DATABASE_URL", lease_store.url)
    assert leases.try_acquire(lease_store, A, "2025-12-20", "live-run") is None  # alive: never named
    pid = _killed_holder(lease_store, [P, "2025-12-30", "2025-12-29"])
    assert leases.dead_holders(lease_store) == {("killed-run", leases.this_host(), pid): 3}
    shown = " ".join(CliRunner().invoke(app, ["status"], catch_exceptions=False).output.split())
    assert f"run killed-run holds 3 partition lease(s) but its process (pid {pid} on host" in shown, shown
    assert "live-run" not in shown
    assert leases.dead_holders(lease_store) == {("killed-run", leases.this_host(), pid): 3}  # status wrote nothing
    with leases.held_free(lease_store, A, [P, "2025-12-30", "2025-12-29"], "rerun") as got:
        assert got.taken == {P, "2025-12-30", "2025-12-29"}
    assert leases.dead_holders(lease_store) == {}
    assert "killed-run" not in CliRunner().invoke(app, ["status"], catch_exceptions=False).output


def test_a_live_holder_or_one_on_another_host_is_never_taken_as_dead(lease_store):
    assert not leases.process_gone(leases.this_host(), os.getppid())  # alive
    assert not leases.process_gone(leases.this_host(), os.getpid())  # this process
    assert not leases.process_gone("another-host", 2**22 + 12345)  # unknown there: its lease expires
    # the same host name in another pid namespace (a container sharing the host's name): its pids
    # are not ours to look up
    assert not leases.process_gone(f"{socket.gethostname()}:pidns1", 2**22 + 12345)
    assert not leases.process_gone(None, None)  # a lease taken before processes were recorded
    assert leases.try_acquire(lease_store, A, P, "live-run") is None  # this process, alive
    with pytest.raises(leases.LeaseTimeout, match="still held by run live-run"):
        with leases.held(lease_store, A, P, "rerun", wait=0.3, poll=0.05):
            pass
    assert leases.take_over_dead(lease_store, A, [P], "rerun") == {}


def test_a_waiter_runs_after_the_holder_releases(lease_store):
    order = []
    holding = threading.Event()

    def first():
        with leases.held(lease_store, A, P, "run-a", poll=0.05):
            holding.set()
            order.append("a starts")
            time.sleep(0.6)
            order.append("a ends")

    t = threading.Thread(target=first)
    t.start()
    holding.wait(10)
    waited_for = []
    with leases.held(lease_store, A, P, "run-b", poll=0.05, on_wait=lambda h, w: waited_for.append(h.holder)) as lease:
        order.append("b starts")
    t.join()
    assert order == ["a starts", "a ends", "b starts"]
    assert waited_for == ["run-a"] and lease.waited > 0.3


def test_a_live_holder_is_renewed_while_it_works_and_a_bounded_wait_times_out(lease_store):
    ttl = timedelta(seconds=1)
    with leases.held(lease_store, A, P, "run-a", ttl=ttl, renew_every=0.2) as lease:
        time.sleep(2.0)  # twice the TTL: only the renewals keep it
        with pytest.raises(leases.LeaseTimeout, match=r"still held by run run-a .* after waiting \d+ s"):
            with leases.held(lease_store, A, P, "run-b", wait=0.5, poll=0.1):
                pass
    assert lease.renewals >= 5 and not lease.lost
    assert leases.current(lease_store, A, P) is None  # released on the way out


def test_a_lease_is_released_when_the_work_raises(lease_store):
    with pytest.raises(RuntimeError):
        with leases.held(lease_store, A, P, "run-a"):
            raise RuntimeError("LLM hard failure")
    assert leases.current(lease_store, A, P) is None


def _worker(url: str, name: str, queue) -> None:
    try:
        store = Store(url)
        spans = []
        for _ in range(4):
            with leases.held(store, A, P, name, poll=0.02, wait=60):
                start = time.time()
                time.sleep(0.15)
                spans.append((start, time.time()))
        queue.put(spans)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put(f"error: {type(exc).__name__}: {exc}")


def test_the_lease_holds_across_processes(lease_store):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(lease_store.url, f"run-{i}", queue)) for i in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert all(isinstance(r, list) for r in results), results
    spans = sorted(s for r in results for s in r)
    assert len(spans) == 8
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairwise(spans)), spans  # never two at once
    with lease_store.connect() as conn:
        assert conn.execute(select(partition_leases)).all() == []
