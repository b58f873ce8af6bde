"""Partition leases in the store: while a run works on one partition of one asset it holds the
lease of (asset, partition); a second run that wants the same partition waits until it is released
and then does it (finding the first run's rows, so paying nothing twice). Leases live in the store,
never in a process, so they hold across processes, workers and machines.

A lease expires ``ttl`` after it was taken or last renewed; the holder renews it from a background
thread while it works. A lease past its expiry belongs to a dead worker and is taken over; so is
one whose holder the caller knows has ended (``gone``: a run its orchestrator recorded as failed
after a SIGKILL) once it has also missed a renewal, so a re-run need not wait out the TTL. A lease
records the process that took it (host and pid): a holder on this host whose process is gone (a
CLI run killed with ``kill -9``, which nothing marks failed) is taken over at once. Taking
is one atomic statement on both dialects: ``INSERT .. ON CONFLICT (asset, partition) DO UPDATE ..
WHERE the lease expired or is already ours`` (its row count says whether it was taken).

Expiry compares the workers' clocks with each other (UTC): keep them in sync (NTP) to well within
the TTL."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import BindParameter, Connection, bindparam, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from memory_pipeline.lib.store.db import Store, cached_insert
from memory_pipeline.lib.store.tables import partition_leases
from memory_pipeline.lib.timeutil import utcnow

DEFAULT_TTL = timedelta(minutes=5)
DEFAULT_POLL_SECONDS = 1.0
DEFAULT_WAIT_SECONDS = 1800.0


@dataclass(frozen=True)
class Holder:
    """Who holds a lease, and until when (unless renewed); the process that took it, when known."""

    holder: str
    expires_at: datetime
    host: str | None = None
    pid: int | None = None

    @property
    def process(self) -> str:
        return f"pid {self.pid} on host {self.host}" if self.pid is not None else "process unknown"

    @property
    def dead(self) -> bool:
        """Its process is known to be gone: it ran on this host and that pid no longer runs."""
        return process_gone(self.host, self.pid)


def this_host() -> str:
    """This host as a lease records it: its name and its pid namespace (two containers sharing a host
    name, as with host networking, number their processes apart; a pid is only comparable inside one)."""
    try:
        return f"{socket.gethostname()}:pidns{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return socket.gethostname()


def this_process() -> tuple[str, int]:
    return this_host(), os.getpid()


def process_gone(host: str | None, pid: int | None) -> bool:
    """True only when it is certain: ``pid`` on this host has exited (or is a zombie nobody reaped).
    Another host's process, or an unknown one, is never called gone (its lease expires instead). A
    pid the system has since given to another process counts as alive: that costs a wait, never a
    double run."""
    if host is None or pid is None or host != this_host() or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it exists, as another user
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # killed, not yet reaped by its parent
    except (OSError, IndexError):
        return False


def dead_holders(store: Store) -> dict[tuple[str, str, int], int]:
    """(run id, host, pid) -> leases it still holds, for each holder whose process on this host is
    provably gone (``process_gone``: killed with ``kill -9``): what `status` shows until the next run
    of those partitions takes them over (at once) and the instance's run is marked failed. Reads only."""
    p = partition_leases.c
    q = (
        select(p.holder, p.host, p.pid, func.count())
        .where(p.host == this_host(), p.pid.is_not(None))
        .group_by(p.holder, p.host, p.pid)
    )
    with store.connect() as conn:
        rows = conn.execute(q).all()
    return {(h, host, pid): int(n) for h, host, pid, n in rows if process_gone(host, pid)}


class LeaseTimeout(RuntimeError):
    """The partition stayed held by another run for longer than the caller would wait."""

    def __init__(self, asset: str, partition: str, other: Holder, waited: float):
        self.other = other
        self.waited = waited
        super().__init__(
            f"{asset} {partition}: still held by run {other.holder} (lease until "
            f"{other.expires_at:%Y-%m-%d %H:%M:%S} UTC) after waiting {waited:.0f} s; not done by this run"
        )


def try_acquire(
    store: Store,
    asset: str,
    partition: str,
    holder: str,
    ttl: timedelta = DEFAULT_TTL,
    now: datetime | None = None,
    conn: Connection | None = None,
) -> Holder | None:
    """Take the lease when it is free, expired, or already ``holder``'s (renewing it then). Returns
    None when taken, else who holds it. With ``conn``, in the caller's transaction (the lease is
    taken when it commits; a second taker waits for that on the row)."""
    now = now or utcnow()
    if conn is not None:
        return _acquire(conn, asset, partition, holder, ttl, now)
    with store.begin() as own:
        return _acquire(own, asset, partition, holder, ttl, now)


_Ins = TypeVar("_Ins", postgresql.Insert, sqlite.Insert)


def _take(
    conn: Connection, asset: str, partitions: list[str], holder: str, ttl: timedelta, now: datetime
) -> postgresql.Insert | sqlite.Insert:
    """The one statement that takes leases: insert, or take over where expired or already ours."""
    host, pid = this_process()
    rows = [
        {
            "asset": asset,
            "partition": p,
            "holder": holder,
            "acquired_at": now,
            "expires_at": now + ttl,
            "host": host,
            "pid": pid,
        }
        for p in partitions
    ]
    if conn.dialect.name == "postgresql":
        return _taking_over(postgresql.insert(partition_leases).values(rows), now, holder)
    return _taking_over(sqlite.insert(partition_leases).values(rows), now, holder)


def _taking_over(ins: _Ins, now: datetime | BindParameter[Any], holder: str | BindParameter[Any]) -> _Ins:
    """The take-over clause of every lease take: the row becomes ``holder``'s where it has expired
    at ``now`` or is already ``holder``'s (values, or bind parameters in the cached statement)."""
    t = partition_leases.c
    return ins.on_conflict_do_update(
        index_elements=["asset", "partition"],
        set_={c: ins.excluded[c] for c in ("holder", "acquired_at", "expires_at", "host", "pid")},
        where=(t.expires_at <= now) | (t.holder == holder),
    )


def _take_one(conn: Connection) -> Any:
    """``_take`` of one partition with its values as parameters (``_take_one_values``): one
    statement built and compiled once (``cached_insert``) where ``_take`` is made again each call."""
    return cached_insert(
        conn,
        partition_leases,
        ("leases.take_one",),
        lambda ins: _taking_over(ins, bindparam("taken_at"), bindparam("taker")),
    )


def _take_one_values(asset: str, partition: str, holder: str, ttl: timedelta, now: datetime) -> dict[str, Any]:
    host, pid = this_process()
    row = {"asset": asset, "partition": partition, "holder": holder, "acquired_at": now, "expires_at": now + ttl}
    return row | {"host": host, "pid": pid, "taken_at": now, "taker": holder}


def _acquire(conn: Connection, asset: str, partition: str, holder: str, ttl: timedelta, now: datetime) -> Holder | None:
    t = partition_leases.c
    if conn.execute(_take_one(conn), _take_one_values(asset, partition, holder, ttl, now)).rowcount == 1:
        return None
    row = conn.execute(
        select(t.holder, t.expires_at, t.host, t.pid).where(t.asset == asset, t.partition == partition)
    ).one_or_none()
    # Released between the two statements: free now, the next attempt takes it.
    return Holder(row.holder, row.expires_at, row.host, row.pid) if row is not None else Holder("", now)


def take_over(
    store: Store,
    asset: str,
    partition: str,
    gone: str,
    holder: str,
    ttl: timedelta = DEFAULT_TTL,
    now: datetime | None = None,
) -> bool:
    """Take the lease from ``gone``, a holder known to have ended, whatever its expiry. Atomic: only
    while ``gone`` still holds it (two runs taking over at once: one wins, the other waits)."""
    now = now or utcnow()
    t = partition_leases.c
    host, pid = this_process()
    with store.begin() as conn:
        stmt = (
            update(partition_leases)
            .where(t.asset == asset, t.partition == partition, t.holder == gone)
            .values(holder=holder, acquired_at=now, expires_at=now + ttl, host=host, pid=pid)
        )
        return bool(conn.execute(stmt).rowcount)


def take_over_dead(
    store: Store, asset: str, partitions: list[str], holder: str, ttl: timedelta = DEFAULT_TTL
) -> dict[str, Holder]:
    """Take over every lease of ``partitions`` whose process is gone (:func:`process_gone`), at once
    whatever its expiry: {partition: the dead holder} of those taken."""
    if not partitions:
        return {}
    t = partition_leases.c
    with store.connect() as conn:
        rows = conn.execute(
            select(t.partition, t.holder, t.expires_at, t.host, t.pid).where(
                t.asset == asset, t.partition.in_(partitions), t.holder != holder, t.pid.is_not(None)
            )
        ).all()
    taken: dict[str, Holder] = {}
    for r in rows:
        other = Holder(r.holder, r.expires_at, r.host, r.pid)
        if other.dead and take_over(store, asset, r.partition, other.holder, holder, ttl):
            taken[r.partition] = other
    return taken


def renew(
    store: Store, asset: str, partition: str, holder: str, ttl: timedelta = DEFAULT_TTL, now: datetime | None = None
) -> bool:
    """Push the expiry of ``holder``'s lease to now + ttl. False when it is no longer theirs (it
    expired and another run took it over)."""
    now = now or utcnow()
    t = partition_leases.c
    with store.begin() as conn:
        stmt = (
            update(partition_leases)
            .where(t.asset == asset, t.partition == partition, t.holder == holder)
            .values(expires_at=now + ttl)
        )
        return bool(conn.execute(stmt).rowcount)


def release(store: Store, asset: str, partition: str, holder: str) -> bool:
    """Give the lease up (only ``holder``'s own: a lease taken over is left to its new holder)."""
    t = partition_leases.c
    with store.begin() as conn:
        stmt = delete(partition_leases).where(t.asset == asset, t.partition == partition, t.holder == holder)
        return bool(conn.execute(stmt).rowcount)


def current(store: Store, asset: str, partition: str) -> Holder | None:
    t = partition_leases.c
    with store.connect() as conn:
        row = conn.execute(
            select(t.holder, t.expires_at, t.host, t.pid).where(t.asset == asset, t.partition == partition)
        ).one_or_none()
    return Holder(row.holder, row.expires_at, row.host, row.pid) if row is not None else None


@dataclass
class Lease:
    """A lease held by this process: what it waited for, and whether a renewal found it lost."""

    asset: str
    partition: str
    holder: str
    waited: float = 0.0
    waited_for: list[str] = field(default_factory=list)  # the other holders it waited for
    taken_from: str = ""  # a holder that had ended, whose lease this one took over
    dead: Holder | None = None  # that holder, when it was taken over because its process is gone
    lost: bool = False
    renewals: int = 0


def _renew_until(stop: threading.Event, store: Store, lease: Lease, ttl: timedelta, every: float) -> None:
    while not stop.wait(every):
        try:
            if renew(store, lease.asset, lease.partition, lease.holder, ttl):
                lease.renewals += 1
            else:
                lease.lost = True
                return
        except Exception:  # noqa: BLE001 - a store hiccup: the lease lasts ttl, try again next time
            continue


@contextmanager
def held(
    store: Store,
    asset: str,
    partition: str,
    holder: str,
    *,
    ttl: timedelta = DEFAULT_TTL,
    wait: float = DEFAULT_WAIT_SECONDS,
    poll: float = DEFAULT_POLL_SECONDS,
    renew_every: float | None = None,
    on_wait: Callable[[Holder, float], None] | None = None,
    ended: Callable[[str], bool] | None = None,
) -> Iterator[Lease]:
    """Hold the lease of (asset, partition) for the body of the ``with``: take it, waiting (polling
    every ``poll`` seconds, at most ``wait`` seconds, then LeaseTimeout) while another live holder
    has it; ``on_wait(holder, waited)`` is called when the wait starts and whenever the holder
    changes. ``ended(holder)`` says whether a holder has ended (its run failed or was canceled): its
    lease is taken over once it has missed a renewal (a process it left behind, such as a step
    subprocess of a killed orchestrator, still renews and is waited for). It is renewed every
    ``renew_every`` seconds (ttl/5) while the body runs and released after it, also when it raises."""
    started = time.monotonic()
    lease = Lease(asset, partition, holder)
    every = renew_every if renew_every is not None else ttl.total_seconds() / 5
    while (other := try_acquire(store, asset, partition, holder, ttl)) is not None:
        waited = time.monotonic() - started
        if not other.holder:
            continue  # released just now
        if other.dead:  # its process is gone (kill -9): nothing will renew or release it
            if take_over(store, asset, partition, other.holder, holder, ttl):
                lease.taken_from, lease.dead = other.holder, other
                break
            continue
        silent = other.expires_at - utcnow() < ttl - timedelta(seconds=1.5 * every)
        if silent and ended is not None and ended(other.holder):
            if take_over(store, asset, partition, other.holder, holder, ttl):
                lease.taken_from = other.holder
                break
            continue  # another run took it over first, or it was released: look again
        if waited >= wait:
            raise LeaseTimeout(asset, partition, other, waited)
        if not lease.waited_for or lease.waited_for[-1] != other.holder:
            lease.waited_for.append(other.holder)
            if on_wait is not None:
                on_wait(other, waited)
        time.sleep(max(0.0, min(poll, wait - waited)))
    lease.waited = time.monotonic() - started
    stop = threading.Event()
    beat = threading.Thread(
        target=_renew_until, args=(stop, store, lease, ttl, every), name=f"lease {asset} {partition}", daemon=True
    )
    beat.start()
    try:
        yield lease
    finally:
        stop.set()
        beat.join()
        release(store, asset, partition, holder)


# --- many partitions at once (set-based range runs) ------------------------------------------


def try_acquire_many(
    store: Store,
    asset: str,
    partitions: list[str],
    holder: str,
    ttl: timedelta = DEFAULT_TTL,
    now: datetime | None = None,
) -> set[str]:
    """:func:`try_acquire` for many partitions in one statement: the partitions taken (free,
    expired or already ``holder``'s); the others are held by live runs."""
    if not partitions:
        return set()
    now = now or utcnow()
    with store.begin() as conn:
        stmt = _take(conn, asset, list(dict.fromkeys(partitions)), holder, ttl, now)
        return set(conn.execute(stmt.returning(partition_leases.c.partition)).scalars())


def renew_many(store: Store, asset: str, partitions: list[str], holder: str, ttl: timedelta = DEFAULT_TTL) -> set[str]:
    """:func:`renew` for many partitions in one statement: those still ``holder``'s."""
    t = partition_leases.c
    with store.begin() as conn:
        stmt = (
            update(partition_leases)
            .where(t.asset == asset, t.partition.in_(partitions), t.holder == holder)
            .values(expires_at=utcnow() + ttl)
            .returning(t.partition)
        )
        return set(conn.execute(stmt).scalars())


def release_many(store: Store, asset: str, partitions: list[str], holder: str) -> int:
    t = partition_leases.c
    with store.begin() as conn:
        stmt = delete(partition_leases).where(t.asset == asset, t.partition.in_(partitions), t.holder == holder)
        return int(conn.execute(stmt).rowcount or 0)


@dataclass
class Leases:
    """Leases of many partitions taken at once by this process (never waiting for them)."""

    asset: str
    holder: str
    taken: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)  # found taken over by another run at a renewal
    dead: dict[str, Holder] = field(default_factory=dict)  # taken over from a holder whose process is gone


def _renew_many_until(stop: threading.Event, store: Store, held: Leases, ttl: timedelta, every: float) -> None:
    while not stop.wait(every):
        alive = held.taken - held.lost
        if not alive:
            return
        try:
            held.lost |= alive - renew_many(store, held.asset, sorted(alive), held.holder, ttl)
        except Exception:  # noqa: BLE001 - a store hiccup: the leases last ttl, try again next time
            continue


@contextmanager
def held_free(
    store: Store,
    asset: str,
    partitions: list[str],
    holder: str,
    *,
    ttl: timedelta = DEFAULT_TTL,
    renew_every: float | None = None,
) -> Iterator[Leases]:
    """Take the leases of every partition of ``partitions`` that is free now, in one statement;
    renew them together (one thread, one statement per renewal) while the body runs and release
    them together after it, also when it raises. ``taken`` says which; the rest are held by
    other runs (the caller waits for those one by one with :func:`held`). A lease whose process is
    gone is taken over first (``dead`` says whose)."""
    dead = take_over_dead(store, asset, partitions, holder, ttl)
    got = Leases(asset, holder, try_acquire_many(store, asset, partitions, holder, ttl), dead=dead)
    stop = threading.Event()
    every = renew_every if renew_every is not None else ttl.total_seconds() / 5
    beat = threading.Thread(
        target=_renew_many_until, args=(stop, store, got, ttl, every), name=f"leases {asset}", daemon=True
    )
    beat.start()
    try:
        yield got
    finally:
        stop.set()
        beat.join()
        if got.taken:
            try:
                release_many(store, asset, sorted(got.taken), holder)
            except Exception:  # noqa: BLE001 - a store that is down: the leases expire after ttl,
                pass  # and the error the body raised (if any) is the one to report
