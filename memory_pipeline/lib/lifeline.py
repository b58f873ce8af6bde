"""A step process dies with the process that started it.

Dagster's multiprocess executor runs each step in a ``multiprocessing`` child of the run worker.
When the run worker is killed (``kill -9``, the OOM killer), the run is marked failed, but the
orphaned step went on: it recorded its materializations and STEP_SUCCESS on the failed run, then
hung in multiprocessing's exit finalizer holding a database connection. :func:`exit_with_parent`
makes such a child exit at once when its parent does; the run's retry or re-execution redoes the
step (what it paid is already in the ledger and the cache)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading

EXIT_CODE = 70  # EX_SOFTWARE: not a clean end

_lock = threading.Lock()
_watching = False


def exit_with_parent() -> bool:
    """In a ``multiprocessing`` child: a daemon thread that ends this process the moment its parent
    exits. True when this call started it (once per process); False elsewhere (a CLI, a code
    server, a run worker started as a plain subprocess) or when it already runs."""
    global _watching
    parent = multiprocessing.parent_process()
    if parent is None:
        return False
    with _lock:
        if _watching:
            return False
        _watching = True

    def watch() -> None:
        parent.join()  # returns when the parent's end of the pipe closes: it exited, however
        sys.stderr.write(
            f"memory-pipeline: parent process {parent.pid} exited; step process {os.getpid()} exits with it\n"
        )
        sys.stderr.flush()
        os._exit(EXIT_CODE)  # not sys.exit: the exit finalizers are where the orphan hung

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
    return True
