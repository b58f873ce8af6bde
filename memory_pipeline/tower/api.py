"""Seed 004 Python API (I/O): the one facade the CLI and the MCP endpoint call. Every argument is
checked, the window arguments when the caller builds their WindowQuery (a bad one raises
TowerInputError naming the field; nothing is written); reading never calls an LLM; summarize,
recompute and summarize_on_miss run as jobs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import TypedDict
from zoneinfo import ZoneInfo

from memory_pipeline.lib import settings
from memory_pipeline.lib.jsontypes import JSONObject
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.text import json_type
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.tower import config as tower_config
from memory_pipeline.tower import entries as entries_io
from memory_pipeline.tower import jobs as jobs_io
from memory_pipeline.tower import recall as recall_io
from memory_pipeline.tower import types as types_io
from memory_pipeline.tower import windows as windows_io
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.entries import AppendCounts
from memory_pipeline.tower.jobs import JobView
from memory_pipeline.tower.logic import (
    RANGE,
    JobKind,
    JobState,
    Source,
    TowerInputError,
    WindowQuery,
    check_limit,
    check_name,
)
from memory_pipeline.tower.summaries import SummaryContext, WindowKey, check_level, refuse_unsettled, summarize
from memory_pipeline.tower.types import TypeView

JOB_ASSET = "tower_summarize_job"


class AppendAnswer(AppendCounts):
    """append's answer: the counts, and the windows and days the late entries refreshed."""

    late_windows_refreshed: int
    late_days_refreshed: list[str]


class StartedJobs(TypedDict):
    """summarize's and recompute's answer: the jobs started, one per group."""

    jobs: list[JobView]


class Tower:
    """``run_jobs``: "thread" (a background worker: the call returns the job id at once; the MCP
    server) or "inline" (the CLI: the job runs before the call returns, same states)."""

    def __init__(
        self,
        store: Store,
        cfg: TowerConfig | None = None,
        tz: ZoneInfo | None = None,
        llm_factory: Callable[[str], LLMClient] | None = None,
        run_jobs: str = "thread",
    ):
        self.store = store
        self.cfg = cfg or tower_config.load()
        self.tz = tz or ZoneInfo(settings.timezone_name())
        self.llm_factory = llm_factory or (lambda partition: LLMClient.from_settings(store, JOB_ASSET, partition))
        self.run_jobs = run_jobs
        self._pool: ThreadPoolExecutor | None = None
        # The server calls _start from several worker threads at once: one pool, one list.
        self._pool_lock = threading.Lock()
        self.futures: list[Future[None]] = []
        types_io.ensure_builtins(store, self.cfg.activity_type)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    # ---- types ------------------------------------------------------------------------------------

    def create_type(self, name: object, owner_worlds: list[str] | None = None, **fields: object) -> TypeView:
        """``owner_worlds``: the server's, for a type a token of some worlds creates (only a token
        holding them all changes it); None, the operator's."""
        allowed = {"description", "chain", "summaries", "group_field", "retention", "summary_cap"}
        if unknown := sorted(set(fields) - allowed):
            raise TowerInputError(unknown[0], f"unknown field (allowed: {', '.join(sorted(allowed))})")
        return types_io.create(self.store, name, owner_worlds=owner_worlds, **fields).as_dict(self.tz)

    def list_types(self, include_archived: object = False) -> list[TypeView]:
        if not isinstance(include_archived, bool):
            raise TowerInputError("include_archived", f"expected true or false, got {json_type(include_archived)}")
        return [t.as_dict(self.tz) for t in types_io.list_types(self.store, include_archived)]

    def get_type(self, name: object) -> TypeView:
        return types_io.get(self.store, name, "name").as_dict(self.tz)

    def update_type(self, name: object, changes: object) -> TypeView:
        return types_io.update_type(self.store, name, changes).as_dict(self.tz)

    def delete_type(self, name: object) -> TypeView:
        return types_io.archive(self.store, name).as_dict(self.tz)

    # ---- append -----------------------------------------------------------------------------------

    def append(self, type_name: object, entries: object, source: str = "api") -> AppendAnswer:
        """``entries``: one entry or a list of them, each {content, at?, id?, group?}."""
        if isinstance(entries, dict):
            entries = [entries]
        if not isinstance(entries, list) or not entries:
            raise TowerInputError("entries", "must be an entry object or a non-empty list of them")
        if len(entries) > 10_000:
            raise TowerInputError("entries", f"at most 10000 per call, got {len(entries)}")
        return self._append(type_name, ((f"entries[{i}]", e) for i, e in enumerate(entries)), source)

    def append_file(self, type_name: object, path: Path) -> AppendAnswer:
        return self._append(type_name, entries_io.read_jsonl(Path(path)), f"file:{Path(path).name}")

    def _append(self, type_name: object, items: Iterable[tuple[str, object]], source: str) -> AppendAnswer:
        report = entries_io.append(
            self.store, type_name, list(items), self.tz, source=source, fed=self.cfg.activity_type
        )
        refreshed, days = 0, list[date]()
        if report.inserted and report.days:
            refreshed, days = windows_io.refresh_after_late_entries(
                self.store, report.type_name, report.days, self.tz, utcnow()
            )
        # late_days_refreshed: days of these entries; the window count spans every group of the type
        return {
            **report.as_dict(),
            "late_windows_refreshed": refreshed,
            "late_days_refreshed": [d.isoformat() for d in days],
        }

    # ---- recall -----------------------------------------------------------------------------------

    def _limit(self, limit: object) -> int:
        return check_limit(limit, self.cfg.recall_default_limit, self.cfg.recall_max_limit)

    def _fed(self, t: types_io.MemoryType) -> bool:
        """``t`` is the activity type and still fed from the conversation messages: its reads count
        the messages not fed yet as entries not in view."""
        return t.name == self.cfg.activity_type and not t.archived

    def windows(
        self, type_name: object, window: WindowQuery = WindowQuery(), *, limit: object = None, cursor: object = None
    ) -> JSONObject:
        """``window``: a level (default the chain's coarsest), and with ``anchor`` that window's children."""
        t = types_io.get(self.store, type_name)
        return recall_io.browse(
            self.store, t, self.tz, window, limit=self._limit(limit), cursor=cursor, fed=self._fed(t)
        )

    def recall(
        self, type_name: object, window: WindowQuery, *, limit: object = None, cursor: object = None
    ) -> JSONObject:
        t = types_io.get(self.store, type_name)
        spec = recall_io.resolve(t, self.tz, window)
        return recall_io.recall(
            self.store, t, spec, self.tz, group=window.group, limit=self._limit(limit), cursor=cursor, fed=self._fed(t)
        )

    def get_summary(
        self,
        type_name: object,
        window: WindowQuery,
        *,
        summarize_on_miss: object = False,
        limit: object = None,
        cursor: object = None,
    ) -> JSONObject:
        """The stored summary; `missing` says so. With ``summarize_on_miss`` a job per missing group of
        the page is started (the stated exception to "reading never calls an LLM"); an empty window
        makes none. ``limit`` and ``cursor`` page the answer as they page exact recall."""
        if not isinstance(summarize_on_miss, bool):
            raise TowerInputError("summarize_on_miss", f"expected true or false, got {json_type(summarize_on_miss)}")
        t = types_io.get(self.store, type_name)
        spec = recall_io.resolve(t, self.tz, window)
        answer = recall_io.get_summary(
            self.store, t, spec, self.tz, group=window.group, limit=self._limit(limit), cursor=cursor, fed=self._fed(t)
        )
        answer["jobs"] = []
        if summarize_on_miss and answer["missing_groups"]:
            keys = [WindowKey(t.name, spec.granularity, spec.start, spec.end, g) for g in answer["missing_groups"]]
            self._check_summarizable(t, keys[0], Source.CHAIN)
            answer["jobs"] = [self._start(JobKind.SUMMARIZE_ON_MISS, k, Source.CHAIN) for k in keys]
        return answer

    # ---- summarize / recompute as jobs ---------------------------------------------------------------

    def _keys(self, type_name: object, window: WindowQuery) -> tuple[types_io.MemoryType, list[WindowKey]]:
        t = types_io.get(self.store, type_name)
        spec = recall_io.resolve(t, self.tz, window)
        if window.group is None:
            with self.store.connect() as conn:
                groups = recall_io.groups_with_entries(conn, t, spec) or [""]
        else:
            groups = [window.group]
        return t, [WindowKey(t.name, spec.granularity, spec.start, spec.end, g) for g in groups]

    def _check_summarizable(self, t: types_io.MemoryType, key: WindowKey, source: Source) -> None:
        if not t.summaries_enabled:  # seed 004: summaries are opt-in per type, explicit calls included
            raise TowerInputError(
                "type",
                f"{t.name!r} has summaries off: switch them on for the type first "
                "(mem/update_type, or `tower types update NAME '{\"summaries\": true}'`)",
            )
        if key.granularity != RANGE:
            check_level(t, key.granularity)
        elif recall_io.cap_span(t, recall_io.Spec(RANGE, key.start, key.end), self.tz):
            raise TowerInputError(
                "to",
                f"a from/to wider than the summary cap ({t.summary_cap}) is not summarized: "
                "get_summary returns the cap-level summaries inside it",
            )
        refuse_unsettled(key, utcnow(), self.cfg, self.tz)

    def summarize(self, type_name: object, window: WindowQuery) -> StartedJobs:
        """Bottom-up over the chain (a from/to is summarized from raw). Returns the job ids at once."""
        t, keys = self._keys(type_name, window)
        for k in keys:
            self._check_summarizable(t, k, Source.CHAIN)
        return {"jobs": [self._start(JobKind.SUMMARIZE, k, Source.CHAIN) for k in keys]}

    def recompute(self, type_name: object, window: WindowQuery) -> StartedJobs:
        """From the raw entries, bypassing the chain (seed: recompute 绕过链条)."""
        t, keys = self._keys(type_name, window)
        for k in keys:
            self._check_summarizable(t, k, Source.RAW)
        return {"jobs": [self._start(JobKind.RECOMPUTE, k, Source.RAW) for k in keys]}

    def _start(self, kind: JobKind, key: WindowKey, source: Source) -> JobView:
        job_id = jobs_io.submit(self.store, kind, key)
        if self.run_jobs == "inline":
            self._run(job_id, key, source)
        else:
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tower-job")
                # Jobs done are dropped (a server runs for months; their outcome is in the jobs table),
                # but not one whose thread raised (the store failed under it): wait_jobs raises that.
                self.futures = [f for f in self.futures if not f.done() or f.exception() is not None]
                self.futures.append(self._pool.submit(self._run, job_id, key, source))
        row = jobs_io.load(self.store, job_id)
        return jobs_io.view(row, self.tz)

    def _run(self, job_id: str, key: WindowKey, source: Source) -> None:
        jobs_io.set_state(self.store, job_id, JobState.RUNNING)
        llm: LLMClient | None = None
        try:
            t = types_io.get(self.store, key.type_name)
            llm = self.llm_factory(key.label(self.tz))
            sctx = SummaryContext(self.store, llm, self.cfg, self.tz)
            out = summarize(sctx, t, key, source=source, now=utcnow())
            error = out.reason or None
            jobs_io.set_state(self.store, job_id, out.state, record_id=out.record_id, calls=out.calls, error=error)
        except Exception as exc:  # noqa: BLE001 - a job records why it failed; the caller polls
            # The job's client is its own: its ledger rows are the calls the job made before failing.
            calls = llm.stats.ledger_rows if llm is not None else 0
            jobs_io.set_state(self.store, job_id, JobState.FAILED, calls=calls, error=f"{type(exc).__name__}: {exc}")

    def job_status(self, job_id: object) -> JobView:
        if not isinstance(job_id, str) or not job_id.isalnum() or len(job_id) > 36:
            raise TowerInputError("job_id", "not a job id returned by summarize, recompute or get_summary")
        row = jobs_io.load(self.store, job_id)
        if row is None:
            raise TowerInputError("job_id", f"no job {job_id!r}")
        return jobs_io.view(row, self.tz)

    def list_jobs(
        self,
        type_name: object = None,
        state: object = None,
        limit: object = None,
        groups: Collection[str] | None = None,
        offset: int = 0,
    ) -> list[JobView]:
        """Newest first from ``offset``; ``groups`` keeps the jobs of those groups only (the MCP
        server's world scope)."""
        name, state = self._job_filter(type_name, state)
        rows = jobs_io.list_jobs(
            self.store, type_name=name, state=state, limit=self._limit(limit), groups=groups, offset=offset
        )
        return [jobs_io.view(r, self.tz) for r in rows]

    def count_jobs(self, type_name: object = None, state: object = None, groups: Collection[str] | None = None) -> int:
        """How many jobs ``list_jobs`` pages through."""
        name, state = self._job_filter(type_name, state)
        return jobs_io.count_jobs(self.store, type_name=name, state=state, groups=groups)

    def _job_filter(self, type_name: object, state: object) -> tuple[str | None, str | None]:
        name = check_name(type_name, "type") if type_name is not None else None
        if state is not None and (not isinstance(state, str) or state not in {str(s) for s in JobState}):
            raise TowerInputError("state", f"one of {', '.join(JobState)}")
        return name, state

    def wait_jobs(self) -> None:
        """Wait for the background jobs started so far (tests, the CLI's --wait)."""
        with self._pool_lock:
            pending = list(self.futures)
        for f in pending:
            f.result()
