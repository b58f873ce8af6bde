"""Worlds at once: a stage's model calls for several worlds in threads, each world's writes in the
calling thread, in the worlds' order.

A stage that asks the model about one world after another waits out the provider's latency once per
world. Here each world is asked in a thread with a client of its own (``LLMClient.fork``: the same
endpoint, settings and breaker, its own buffered ledger rows and counts); the calling thread takes
the answers in order and, before it writes a world, hands that world's buffered rows and counts to
the stage's client, so the world's ledger rows commit in the world's own transaction as they did one
world at a time. Reads and writes of the stage's bookkeeping stay in one thread.

After a failure no further world is asked; the worlds already asked are still written (their calls
were made: none goes unrecorded, none is paid for again by the next run), then the failure is
handed on, and the first failure, in the worlds' order, is raised."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from memory_pipeline.lib.llm.client import LLMClient

# Each world asked at once may hold a store connection (the client's cache reads, a paid call's
# ledger row); the store's pool keeps 5 and opens up to 10 more.
WORLDS_AT_ONCE_MAX = 8

T = TypeVar("T")


@dataclass
class _Asked(Generic[T]):
    llm: LLMClient
    value: T | None = None
    error: BaseException | None = None
    asked: bool = True  # False: not started, a failure came first


def each_world(
    llm: LLMClient,
    worlds: Sequence[str],
    at_once: int,
    ask: Callable[[str, LLMClient], T],
    write: Callable[[str, T], None],
    failed: Callable[[str, BaseException], None],
) -> int:
    """``ask(world, client)`` for every world, up to ``at_once`` at a time; ``write(world, answer)``
    or ``failed(world, error)`` in this thread, in ``worlds``' order. At 1 (or one world) everything
    runs here with ``llm`` itself, one world after another, stopping at the first failure, as a loop
    would. Raises the first failure after the rest is written. Returns the threads used."""
    threads = max(1, min(at_once, len(worlds)))
    if threads == 1:
        for world in worlds:
            try:
                answer = ask(world, llm)
            except BaseException as exc:
                failed(world, exc)
                raise
            write(world, answer)
        return 1
    stop = threading.Event()

    def one(world: str, client: LLMClient) -> _Asked[T]:
        got: _Asked[T] = _Asked(client)
        if stop.is_set():
            got.asked = False
            return got
        try:
            got.value = ask(world, client)
        except BaseException as exc:  # handed to the calling thread, which raises it
            got.error = exc
            stop.set()
        return got

    first: BaseException | None = None
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="world") as pool:
        futures: list[tuple[str, Future[_Asked[T]]]] = []
        for world in worlds:
            client = llm.fork()
            client.buffering = llm.buffering
            futures.append((world, pool.submit(one, world, client)))
        try:
            for world, future in futures:
                got = future.result()
                if not got.asked:
                    continue
                llm.adopt(got.llm)
                if got.error is not None:
                    failed(world, got.error)
                    first = first or got.error
                else:
                    write(world, cast(T, got.value))
        except BaseException:
            stop.set()  # this thread's own failure (a write, an interrupt): start no other world
            raise
    if first is not None:
        raise first
    return threads
