"""The analyst's files and the one way to change them (core I/O, no Dagster).

DuckDB lets one process write a database file at a time, and a process holding it open (even read-
only) keeps any other from opening it read-write. So no writer ever opens the published file:
under an exclusive lock (``<file>.lock``: writers queue, never collide), the writer copies the
published file to ``<file>.next``, changes the copy, checkpoints and closes it, and renames it over
the published path (``os.replace``, atomic). A reader that has the file open keeps reading the
version it opened, undisturbed; a reader that (re)connects afterwards sees the new version whole.
Parquet files are replaced the same way, one file at a time, from a temporary folder outside every
reader's glob."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from memory_pipeline.analyst.config import AnalystConfig


@dataclass(frozen=True)
class AnalyticsFiles:
    duckdb: Path  # the published DuckDB file analysts open
    parquet: Path | None  # the Parquet root, None when Parquet is off
    report: Path  # the coverage and cost picture
    threads: int = 2
    memory_limit: str = ""
    dbt_builds_kept: int = AnalystConfig.dbt_builds_kept

    @classmethod
    def at(cls, duckdb_path: str | os.PathLike[str], cfg: AnalystConfig) -> AnalyticsFiles:
        path = Path(duckdb_path).expanduser().resolve()
        parquet = (
            Path(cfg.parquet_dir).expanduser().resolve() if cfg.parquet_dir else path.parent / f"{path.stem}_parquet"
        )
        report = (
            Path(cfg.report_file).expanduser().resolve() if cfg.report_file else path.parent / f"{path.stem}_report.png"
        )
        parquet_root = parquet if cfg.parquet else None
        return cls(path, parquet_root, report, cfg.duckdb_threads, cfg.duckdb_memory_limit, cfg.dbt_builds_kept)

    @property
    def staging(self) -> Path:
        return self.duckdb.with_name(self.duckdb.name + ".next")

    @property
    def lock(self) -> Path:
        return self.duckdb.with_name(self.duckdb.name + ".lock")

    @property
    def dbt_parse_state(self) -> Path:
        """dbt's partial-parse state of the last build of this file, handed to the next one."""
        return self.duckdb.with_name(self.duckdb.name + ".dbt-parse.msgpack")

    @property
    def dbt_builds(self) -> Path:
        """The target folders of this file's last dbt builds, one per build (``prune_dbt_builds``)."""
        return self.duckdb.with_name(self.duckdb.name + ".dbt-builds")

    @property
    def parquet_tmp(self) -> Path | None:
        return None if self.parquet is None else self.parquet / ".tmp"

    def duckdb_config(self) -> dict[str, str | bool | int | float | list[str]]:
        """No extension is ever installed or loaded on demand: the ones used (parquet, json, icu)
        are built into the duckdb wheel. (The type is ``duckdb.connect``'s ``config``.)"""
        config: dict[str, str | bool | int | float | list[str]] = {
            "threads": self.threads,
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
        if self.memory_limit:
            config["memory_limit"] = self.memory_limit
        return config


def _holder() -> dict[str, Any]:
    """Who holds the lock, written into the lock file by the holder (read by those who wait)."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join(sys.argv)[:300],
        "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def holder_text(record: str) -> str:
    """The lock file's holder record as one phrase ("pid 12 on host-a (memory-pipeline export …)
    since …"). A holder clears its record when it lets go, so an empty file names nobody: another
    process holds the lock without recording itself (not this project's writer), or one that has
    just taken it."""
    try:
        h = json.loads(record)
        return f"pid {h['pid']} on {h['host']} ({h['command']}) since {h['since']}"
    except (ValueError, KeyError, TypeError):
        return "another process (it recorded no pid)"


@contextmanager
def writer_lock(files: AnalyticsFiles, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """One writer at a time, across processes (the Dagster pool ``duckdb`` does the same for runs
    of one instance; this also covers the CLI and a second instance). A writer that has to wait
    says so, and for whom, through ``on_wait`` before it blocks; the holder writes its pid, host
    and command into the lock file."""
    files.lock.parent.mkdir(parents=True, exist_ok=True)
    with open(files.lock, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                fh.seek(0)
                on_wait(
                    f"{files.duckdb.name}: waiting for the writer lock {files.lock}, held by {holder_text(fh.read())}"
                )
            started = time.monotonic()
            fcntl.flock(fh, fcntl.LOCK_EX)
            if on_wait is not None:
                on_wait(f"{files.duckdb.name}: got the writer lock after {time.monotonic() - started:.1f}s")
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps(_holder()))
            fh.flush()
            yield
        finally:
            fh.seek(0)
            fh.truncate()  # a record left behind would name a finished writer to the next one who waits
            fh.flush()
            fcntl.flock(fh, fcntl.LOCK_UN)


def _remove(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def publishing(
    files: AnalyticsFiles, on_wait: Callable[[str], None] | None = None, then: Callable[[], None] | None = None
) -> Iterator[Path]:
    """Yield a private copy of the published file to change (``<file>.next``); publish it
    atomically when the block ends without an exception, discard it otherwise (also when the copy
    itself fails half-way, as on a full disk). Whoever writes the copy must have closed it by then.
    ``then``: what goes out with it (the export's Parquet files), right after it, under the lock."""
    with writer_lock(files, on_wait):
        staging = files.staging
        _remove(staging)  # left by a writer that died
        try:
            if files.duckdb.exists():
                shutil.copyfile(files.duckdb, staging)
            yield staging
            # Fold any write-ahead log into the file: the published file never has one.
            with duckdb.connect(str(staging), config=files.duckdb_config()) as con:
                con.execute("CHECKPOINT")
            if staging.with_name(staging.name + ".wal").exists():
                raise RuntimeError(f"{staging}: a write-ahead log is left after the checkpoint")
            _fsync(staging)
            os.replace(staging, files.duckdb)
            _fsync(files.duckdb.parent)
            if then is not None:
                then()
        except BaseException:
            _remove(staging)
            raise


class ParquetFiles:
    """One export's Parquet files: each written whole in the temporary folder, then moved over its
    published path in one rename (a reader's glob never matches a half-written file), and only once
    the export's DuckDB file is published (``publish``): an export that fails publishes neither, so
    the two never disagree (``discard`` removes what it wrote)."""

    def __init__(self, files: AnalyticsFiles):
        assert files.parquet_tmp is not None
        self.tmp_dir = files.parquet_tmp
        self.moves: list[tuple[Path, Path]] = []

    def write(self, write: Any, target: Path) -> None:
        """``write(tmp_path)`` now; the move over ``target`` at ``publish``."""
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.tmp_dir / f"{uuid.uuid4().hex}.parquet"
        try:
            write(tmp)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.moves.append((tmp, target))

    def publish(self) -> None:
        for tmp, target in self.moves:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
        self.moves.clear()

    def discard(self) -> None:
        for tmp, _ in self.moves:
            tmp.unlink(missing_ok=True)
        self.moves.clear()


def prune_dbt_builds(files: AnalyticsFiles) -> list[Path]:
    """Remove all but the newest ``files.dbt_builds_kept`` build folders (by last change); returns
    the removed ones. Called by a writer, under the lock: no build of this file runs meanwhile."""
    if not files.dbt_builds.is_dir():
        return []
    folders = sorted(
        (p for p in files.dbt_builds.iterdir() if p.is_dir()), key=lambda p: (p.stat().st_mtime, p.name), reverse=True
    )
    for old in folders[files.dbt_builds_kept :]:
        shutil.rmtree(old, ignore_errors=True)
    return folders[files.dbt_builds_kept :]


def connect_read_only(files: AnalyticsFiles) -> duckdb.DuckDBPyConnection:
    """What analysts and the report do: a read-only connection to the published version."""
    return duckdb.connect(str(files.duckdb), read_only=True, config=files.duckdb_config())
