"""Has anything been committed to the store since? A stamp that changes when it may have.

The memory server answers most calls from what it already read (the recall index's freshness, a
world's objects, a verified token) and must still see every write another process commits. On a
SQLite file that question costs one ``PRAGMA data_version`` on a connection of our own: its value
changes whenever another connection commits to the file (and never for that connection's own
commits, so the connection is used for nothing else). The file's inode is part of the stamp, so a
store deleted and made again is not taken for the old one.

PostgreSQL has no such counter and an in-memory SQLite database no file: :func:`stamp` is None
there, and callers check the store itself every time, as they would without this module."""

from __future__ import annotations

import os
import sqlite3
import threading

from sqlalchemy.engine import make_url

from memory_pipeline.lib.store.db import Store

Stamp = tuple[int, int, int]  # (st_dev, st_ino, data_version)

_watchers: dict[str, _Watcher] = {}
_lock = threading.Lock()


class _Watcher:
    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.conn: sqlite3.Connection | None = None
        self.ident: tuple[int, int] | None = None

    def stamp(self) -> Stamp | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        ident = (st.st_dev, st.st_ino)
        with self.lock:
            try:
                if self.conn is None or ident != self.ident:
                    if self.conn is not None:
                        self.conn.close()
                    # read-only, shared by the threads of one process under self.lock
                    self.conn = sqlite3.connect(
                        f"file:{self.path}?mode=ro", uri=True, check_same_thread=False, timeout=60
                    )
                    self.ident = ident
                (version,) = self.conn.execute("PRAGMA data_version").fetchone()
            except sqlite3.Error:
                self.conn = None
                return None
        return (*ident, int(version))


def stamp(store: Store) -> Stamp | None:
    """A value that differs from the previous one whenever a commit reached the store's file in
    between (None: no such value here, check the store itself)."""
    if store.dialect != "sqlite":
        return None
    path = make_url(store.url).database
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    path = os.path.abspath(path)
    watcher = _watchers.get(path)
    if watcher is None:
        with _lock:
            watcher = _watchers.setdefault(path, _Watcher(path))
    return watcher.stamp()
