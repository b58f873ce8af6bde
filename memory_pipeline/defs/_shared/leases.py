"""Every partition an asset works on is leased in the store for the run (lib.store.leases): two
overlapping runs (two backfills of the same range, a backfill and a schedule) never work on the
same partition at once. The second waits, then does the partition, finding the first run's rows
(reused by model, prompt version and material fingerprint: no LLM call). A lease whose run the
instance records as finished (its worker was killed, so the run was marked failed) is taken over
once it missed a renewal, rather than after its whole TTL; one whose process is gone (same host, pid
no longer running: a CLI run killed with kill -9, which nothing else marks failed) is taken over at
once, and its run is marked failed in the instance: a re-run of a killed run starts at once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from dagster import AssetExecutionContext

from memory_pipeline.lib.store import Store, leases

T = TypeVar("T")


def dead_holder(context: AssetExecutionContext, asset: str, keys: Sequence[str], other: leases.Holder) -> None:
    """Say (one line) that ``other``'s process is gone and its leases of ``keys`` were taken over, and
    mark its run failed when the instance still has it as running (a killed CLI run stays "Started")."""
    marked = ""
    run = context.instance.get_run_by_id(other.holder)
    if run is not None and not run.is_finished:
        context.instance.report_run_failed(
            run,
            message=f"its process ({other.process}) is gone (killed) without finishing; run "
            f"{context.run.run_id} took over its partition leases",
        )
        marked = "; marked it failed"
    shown = ", ".join(keys[:3]) + (f" (+{len(keys) - 3} more)" if len(keys) > 3 else "")
    context.log.warning(
        f"{asset} {shown}: run {other.holder} died without releasing its lease ({other.process} is gone); "
        f"took it over at once{marked}"
    )


def under_leases(
    context: AssetExecutionContext,
    store: Store,
    items: Sequence[tuple[str, T]],
    work: Callable[[str, T], None],
    *,
    wait_seconds: float,
    poll_seconds: float = leases.DEFAULT_POLL_SECONDS,
) -> dict[str, str]:
    """``work(key, item)`` for every partition of the run, each while holding the lease of (asset,
    partition) with the run id as holder. Partitions free now go first; those another run holds
    come after, waiting for it (a log line names it). Returns {key: reason} of the partitions left
    undone because they stayed held for more than ``wait_seconds``."""
    asset, holder = context.assets_def.key.to_user_string(), context.run.run_id
    undone: dict[str, str] = {}

    def waiting(key: str) -> Callable[[leases.Holder, float], None]:
        def log(other: leases.Holder, waited: float) -> None:
            context.log.warning(  # a warning: the CLI shows warnings, and this wait may be long
                f"{asset} {key}: run {other.holder} is working on this partition (lease until "
                f"{other.expires_at:%H:%M:%S} UTC); waiting up to {wait_seconds:.0f} s, then doing it "
                "(its rows are reused, no LLM call twice)"
            )

        return log

    def ended(other: str) -> bool:
        other_run = context.instance.get_run_by_id(other)
        return other_run is not None and other_run.is_finished

    def run(key: str, item: T, wait: float) -> None:
        with leases.held(
            store, asset, key, holder, wait=wait, poll=poll_seconds, on_wait=waiting(key), ended=ended
        ) as lease:
            if lease.dead is not None:
                dead_holder(context, asset, [key], lease.dead)
            elif lease.taken_from:
                context.log.warning(
                    f"{asset} {key}: took over the lease of run {lease.taken_from}, which has ended "
                    "(failed or canceled) without releasing it"
                )
            work(key, item)
        if lease.lost:
            context.log.warning(
                f"{asset} {key}: the lease expired while this run worked (no renewal got through) and "
                "another run took it over; both may have worked on this partition"
            )

    busy = []
    for key, item in items:
        if leases.try_acquire(store, asset, key, holder) is not None:
            busy.append((key, item))
            continue
        run(key, item, 0.0)  # taken above: held() finds it ours
    for key, item in busy:
        try:
            run(key, item, wait_seconds)
        except leases.LeaseTimeout as exc:
            undone[key] = str(exc)
    return undone


def under_leases_batched(
    context: AssetExecutionContext,
    store: Store,
    items: Sequence[tuple[str, T]],
    work: Callable[[list[tuple[str, T]]], None],
    *,
    batch_size: int,
    wait_seconds: float,
    poll_seconds: float = leases.DEFAULT_POLL_SECONDS,
) -> dict[str, str]:
    """:func:`under_leases` for set-based work: ``work(batch)`` per batch of at most
    ``batch_size`` partitions, whose leases are taken in one statement (the free ones), renewed
    together and released together. Partitions another run holds are done after, one by one,
    waiting for their lease as :func:`under_leases` does. Returns {key: reason} of those left undone."""
    asset, holder = context.assets_def.key.to_user_string(), context.run.run_id
    busy: list[tuple[str, T]] = []
    for i in range(0, len(items), batch_size):
        batch = list(items[i : i + batch_size])
        with leases.held_free(store, asset, [k for k, _ in batch], holder) as got:
            by_run: dict[str, list[str]] = {}
            for key, other in got.dead.items():
                by_run.setdefault(other.holder, []).append(key)
            for keys in by_run.values():
                dead_holder(context, asset, sorted(keys), got.dead[keys[0]])
            mine = [(k, item) for k, item in batch if k in got.taken]
            busy += [(k, item) for k, item in batch if k not in got.taken]
            if mine:
                work(mine)
        if got.lost:
            context.log.warning(
                f"{asset} {', '.join(sorted(got.lost)[:5])}: the lease expired while this run worked (no renewal "
                "got through) and another run took it over; both may have worked on these partitions"
            )
    return under_leases(
        context,
        store,
        busy,
        lambda key, item: work([(key, item)]),
        wait_seconds=wait_seconds,
        poll_seconds=poll_seconds,
    )
