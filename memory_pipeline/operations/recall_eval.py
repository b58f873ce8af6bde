"""`eval locomo`: build a fresh store from LoCoMo files, run every domain over it as Dagster runs (the
jobs the schedules launch), then measure each index's recall (``metric``) and record the run.

The run is self-contained: its own store (a new temporary SQLite file unless given), its own Dagster
instance and Markdown folder under the run's directory, the in-process cache, and the model asked
for (default: the embedded offline model). Nothing of the operator's store is read; the results are
written to the run's store and to the project's store (MEMORY_DATABASE_URL, else data/), where the
analyst export picks them up."""

from __future__ import annotations

import logging
import signal
import socket
import sqlite3
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import event, func, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import SQLAlchemyError

from memory_pipeline import domains
from memory_pipeline.lib import settings
from memory_pipeline.lib.jsontypes import JSONObject
from memory_pipeline.lib.kinds import LedgerOutcome
from memory_pipeline.lib.llm.client import model_problem
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.lib.store.tables import conversations, llm_ledger, messages
from memory_pipeline.recall import days as day_index
from memory_pipeline.recall.documents import Document
from memory_pipeline.recall.metric import KS, Index, Question, Score, score_index, score_random, score_rankings
from memory_pipeline.recall.questions import questions, world_of
from memory_pipeline.recall.search import memory_search, refresh
from memory_pipeline.recall.tables import recall_eval_results, recall_eval_runs
from memory_pipeline.sleep.logic import SizeBand
from memory_pipeline.tower import config as tower_config

ORGANIZE_ROUNDS_MAX = 200  # organize runs until no event is left to organize (each run a bounded batch count)
ROW_ORDER = (
    Index.RAW,
    Index.DAY_SUMMARIES,
    Index.SEMANTIC,
    Index.AUTOBIOGRAPHY,
    Index.OBJECTS,
    Index.CONVERSATION,
    Index.ALL_MEMORY,
    Index.MEMORY_SEARCH,
    Index.RANDOM,
)
DAY_TEXT_INDEXES = set(ROW_ORDER) - {Index.MEMORY_SEARCH, Index.RANDOM}  # those with characters per day
SEARCH_HITS = 20  # hits asked of memory_search per question, to find its top 5 days


class EvalError(ValueError):
    """A refusal before anything was built (a store holding events, a bad file)."""


class EvalInterrupted(Exception):
    """SIGINT or SIGTERM while the eval built: it stops there and records nothing."""


class _Interrupts:
    """Whether SIGINT or SIGTERM arrived while the eval built. Dagster's in-process runs put their
    own SIGINT (and SIGTERM) handler in place and reset what it caught when the run ends, so an
    interrupt inside a run could leave no trace and the eval went on to record a clean run. The
    interpreter writes every signal that has a Python handler to the wakeup fd whoever handles it:
    read after each run, it tells. Off the main thread (where no handler can be set) it tells nothing."""

    def __init__(self) -> None:
        self._read: socket.socket | None = None
        self._write: socket.socket | None = None
        self._old = -1
        self.seen: str = ""

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._read, self._write = socket.socketpair()
            self._read.setblocking(False)
            self._write.setblocking(False)
            self._old = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._read is not None and self._write is not None:
            signal.set_wakeup_fd(self._old)
            self._read.close()
            self._write.close()

    def check(self, what: str, directory: Path) -> None:
        """EvalInterrupted when an interrupt arrived (during ``what`` or before)."""
        if self._read is not None and not self.seen:
            try:
                got = self._read.recv(1024)
            except BlockingIOError:
                got = b""
            stops = {signal.SIGINT.value: "SIGINT", signal.SIGTERM.value: "SIGTERM"}
            self.seen = next((stops[n] for n in got if n in stops), "")
        if self.seen:
            raise EvalInterrupted(_interrupted(self.seen, what, directory))


def _interrupted(signal_name: str, what: str, directory: Path) -> str:
    return (
        f"interrupted ({signal_name}) during {what}: the eval stopped and recorded nothing "
        f"(its folder {directory} is left as it was)"
    )


@dataclass
class DagsterRun:
    name: str
    run_id: str
    success: bool
    seconds: float
    error: str = ""
    degraded: bool = False  # it succeeded, but some of its work failed (its metadata says which)


@dataclass
class EvalReport:
    run_id: str
    files: list[str]
    model: str
    store_url: str
    directory: Path
    worlds: int = 0
    days: int = 0
    questions: int = 0
    left_out: dict[str, int] = field(default_factory=dict)
    scores: list[Score] = field(default_factory=list)
    runs: list[DagsterRun] = field(default_factory=list)
    llm_calls: int = 0  # model calls (a request was made): answered or failed, cache hits not
    llm_failed: int = 0  # of those, the calls that failed (after their retries): no answer, no tokens
    llm_refused: int = 0  # refused by the open breaker without a request (not calls)
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    prompt_versions: dict[str, str] = field(default_factory=dict)
    wall_seconds: float = 0.0
    not_recorded: str = ""  # why the project's store did not take the results (they are in the run's)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def failed_runs(self) -> list[DagsterRun]:
        """The runs that failed, and those that succeeded degraded: either built less memory."""
        return [r for r in self.runs if not r.success or r.degraded]

    def as_json(self) -> JSONObject:
        return {
            "run_id": self.run_id,
            "files": [*self.files],  # copies: JSON values (a list[str] is not a list[JSONValue] to mypy)
            "model": self.model,
            "store": masked(self.store_url),
            "directory": str(self.directory),
            "worlds": self.worlds,
            "days": self.days,
            "questions": self.questions,
            "questions_left_out": {**self.left_out},
            "indexes": [
                {
                    "index": s.index.value,
                    "questions": s.questions,
                    "r_at_1": round(s.recall(1), 4),
                    "r_at_5": round(s.recall(5), 4),
                    "chars_per_day": round(s.chars_per_day, 1) if s.index in DAY_TEXT_INDEXES else None,
                }
                for s in self.scores
            ],
            "llm": {
                "calls": self.llm_calls,
                "failed": self.llm_failed,
                "refused_by_breaker": self.llm_refused,
                "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out,
                "cost_usd": self.cost_usd,
                "prompt_versions": {**self.prompt_versions},
            },
            "dagster_runs": [r.__dict__ for r in self.runs],
            "wall_seconds": round(self.wall_seconds, 1),
        }


def masked(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL: shown as given
        return url


def run_locomo(
    files: list[Path],
    *,
    store_url: str | None = None,
    model: str | None = None,
    directory: Path | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> EvalReport:
    """Build, run and measure; the report also lands in the run's store and the project's store."""
    started = time.monotonic()
    project_url = settings.database_url()
    for path in files:
        if not path.is_file():
            raise EvalError(f"{path}: " + ("a folder, not a LoCoMo JSON file" if path.is_dir() else "no such file"))
    stems = [world_of(p) for p in files]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise EvalError(f"two files would make the same world {twice[0]!r} (file names must differ)")
    _check_domains_on()
    tz = ZoneInfo(settings.timezone_name())
    checked = _checked_files(files, tz, say)  # every file read before anything is written
    named_by = "--model" if model else settings.ENV_LLM_MODEL
    model = model or settings.env(settings.ENV_LLM_MODEL) or settings.OFFLINE_MODEL
    problem = model_problem(model)
    if problem:  # before minutes of runs whose every call would fail on it
        raise EvalError(f"{named_by} {model!r}: {problem}")
    given = _empty_store(store_url) if store_url else None  # refused before any folder is made
    directory = directory or Path(tempfile.mkdtemp(prefix="memory-eval-"))
    directory.mkdir(parents=True, exist_ok=True)
    with scratch_sqlite(directory), _Interrupts() as interrupts:
        url = store_url or f"sqlite:///{directory / 'memory.sqlite'}"
        try:
            stop = partial(interrupts.check, directory=directory)
            report, store = _build_and_measure(files, checked, stems, tz, model, url, given, directory, say, stop)
        except KeyboardInterrupt:  # between the runs (Python's own handler; Dagster maps SIGTERM to it)
            interrupts.check("the build", directory)  # names the signal that came
            raise EvalInterrupted(_interrupted("SIGINT", "the build", directory)) from None
        interrupts.check("the measurement", directory)
    report.wall_seconds = time.monotonic() - started
    record(store, report)
    if project_url != url:
        try:
            project = Store(project_url)
            ensure_schema(project, domains.version_locations())
            record(project, report)
        except SQLAlchemyError as exc:  # the measurement stands in the run's store; say where it is not
            report.not_recorded = f"{masked(project_url)}: {type(exc).__name__}: {exc}"
    return report


def _check_domains_on() -> None:
    """EvalError when the configuration turns a measured domain off: its index would hold no memory
    and score as the random order, recorded as if measured."""
    from memory_pipeline.conversation import config as conversation_config
    from memory_pipeline.objects import config as objects_config
    from memory_pipeline.sleep import config as sleep_config
    from memory_pipeline.temporal import config as temporal_config

    for config in (temporal_config, sleep_config, objects_config, conversation_config):
        if not config.load().enabled:
            raise EvalError(
                f"memory.{config.SECTION}.enabled is false in the configuration: the eval measures every domain's "
                "memory (turn it on for the eval)"
            )


@contextmanager
def scratch_sqlite(directory: Path) -> Iterator[None]:
    """While the eval builds, SQLite files under its own folder (the temporary store and the run's
    Dagster instance, whose event log commits many times per run) are written
    without fsync (PRAGMA synchronous=OFF): they are scratch, a crash mid-run loses the run either
    way, and the waits for the disk were most of the Dagster runs' overhead. Files elsewhere (the
    project's store, a --store database) keep their settings."""
    root = directory.resolve()
    inside: dict[str, bool] = {}  # file -> under the folder (asked once per file: SQLite connects often)

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        if not isinstance(dbapi_conn, sqlite3.Connection):
            return
        files = [row[2] for row in dbapi_conn.execute("PRAGMA database_list") if row[2]]
        for f in files:
            if f not in inside:
                inside[f] = Path(f).resolve().is_relative_to(root)
        if files and all(inside[f] for f in files):
            dbapi_conn.execute("PRAGMA synchronous=OFF")

    event.listen(Engine, "connect", on_connect)
    try:
        yield
    finally:
        event.remove(Engine, "connect", on_connect)


class _WarnBand(logging.Filter):
    """Deep sleep's warn-band lines (one per world and night: 166 on the seven LoCoMo files, which
    buried the table): their sizes kept, the lines kept off the console."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "size_band", None) is not SizeBand.WARN:
            return True
        self.sizes.append(int(getattr(record, "chars", 0)))
        return False


@contextmanager
def _warn_band_counted() -> Iterator[list[int]]:
    from memory_pipeline.sleep import deep

    counted = _WarnBand()
    deep.log.addFilter(counted)
    try:
        yield counted.sizes
    finally:
        deep.log.removeFilter(counted)


def _build_and_measure(
    files: list[Path],
    checked: list[tuple[Path, list[dict[str, Any]]]],
    stems: list[str],
    tz: ZoneInfo,
    model: str,
    url: str,
    given: Store | None,
    directory: Path,
    say: Callable[[str], None],
    stop_if_interrupted: Callable[[str], None],
) -> tuple[EvalReport, Store]:
    """The fresh store (``given``, else a new SQLite file in ``directory``) built by every domain's
    Dagster runs, and the recall measured on it."""
    store = given or _empty_store(url)
    report = EvalReport(uuid.uuid4().hex[:16], [p.name for p in files], model, url, directory)
    env = {
        settings.ENV_DATABASE_URL: url,
        settings.ENV_LLM_MODEL: model,
        settings.ENV_REDIS_URL: None,  # the in-process cache: nothing shared with another run
        settings.ENV_DATA_DIR: str(directory),
        "DAGSTER_HOME": str(directory / "dagster_home"),
    }
    with settings.overridden(env):
        _import(store, checked, say)
        worlds = sorted(stems)
        candidates = day_index.world_days(store, worlds, tz)
        report.worlds = len(worlds)
        report.days = sum(len(d) for d in candidates.values())
        _run_domains(store, candidates, report, say, stop_if_interrupted)
        say("measuring recall")
        event_days = day_index.message_days(store, worlds, tz)
        left_out: Counter[str] = Counter()
        asked: list[Question] = [q for p in files for q in questions(p, event_days, left_out)]
        report.questions, report.left_out = len(asked), dict(left_out)
        activity_type = tower_config.load().activity_type
        texts = day_index.day_texts(store, worlds, tz, activity_type)
        for world in worlds:  # every world indexed before the first question: BM25's term statistics
            refresh(store, world, tz, activity_type)  # are the store's, not those of the worlds asked so far
        for index in ROW_ORDER:
            if index is Index.RANDOM:
                report.scores.append(score_random(asked, candidates))
            elif index is Index.MEMORY_SEARCH:
                rank = partial(search_days, store, event_days=event_days, tz=tz, activity_type=activity_type)
                report.scores.append(score_rankings(index, asked, rank))
            else:
                report.scores.append(score_index(index, asked, texts[index], candidates))
        _ledger(store, report)
    return report, store


def _checked_files(
    files: list[Path], tz: ZoneInfo, say: Callable[[str], None] = lambda _: None
) -> list[tuple[Path, list[dict[str, Any]]]]:
    """Each file's validated events, or EvalError naming the first file, JSON path and field at fault
    (a turn the importer refuses, or questions that cannot be read)."""
    from memory_pipeline.events.locomo import locomo_events
    from memory_pipeline.recall.questions import QuestionError, read_qa

    out = []
    for path in files:
        events, errors = locomo_events(path, tz)
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise EvalError(f"{errors[0]}{more}")
        try:
            read_qa(path)
        except QuestionError as exc:
            raise EvalError(str(exc)) from exc
        out.append((path, events))
    # The questions the build will measure, from the turns it will import: none is no measurement.
    days = {e["message_id"]: e["at"].astimezone(tz).date() for _, events in out for e in events if e["at"]}
    left_out: Counter[str] = Counter()
    asked = {path: len(questions(path, days, left_out)) for path, _ in out}
    if not sum(asked.values()):
        why = ", ".join(f"{n} {reason}" for reason, n in left_out.items()) or "no question in the files"
        raise EvalError(f"no question to measure recall with (left out: {why})")
    for path, n in asked.items():
        if not n:  # it still counts: its world is built and its days are the search's statistics
            say(f"{path.name}: no question of it can be measured (its conversation is built all the same)")
    return out


def _empty_store(url: str) -> Store:
    """The store to build in, migrated; EvalError when it cannot be opened or already holds events."""
    try:
        store = Store(url)
        ensure_schema(store, domains.version_locations())
        with store.connect() as conn:
            held = int(conn.execute(select(func.count()).select_from(messages)).scalar() or 0)
    except (SQLAlchemyError, ImportError) as exc:  # ImportError: the URL's driver is not installed
        raise EvalError(f"--store {masked(url)}: cannot open it: {type(exc).__name__}: {exc}") from exc
    if held:
        raise EvalError(
            f"{masked(url)} already holds {held} raw events: eval builds memory from the files alone "
            "(give --store an empty database, or leave it out for a new temporary SQLite file)"
        )
    return store


def _import(store: Store, checked: list[tuple[Path, list[dict[str, Any]]]], say: Callable[[str], None]) -> None:
    from memory_pipeline.events.ingest import ingest_events, source_label

    for path, events in checked:
        rep = ingest_events(store, events, source=source_label(path))
        say(f"imported {path.name}: {rep.inserted} turns, {rep.new_conversations} sessions")


def _run_domains(
    store: Store,
    candidates: dict[str, set[date]],
    report: EvalReport,
    say: Callable[[str], None],
    stop_if_interrupted: Callable[[str], None] = lambda _what: None,
) -> None:
    """The Dagster runs the schedules would launch once the days are closed: day summaries, the nights
    of sleep (each day's three stages before the next day's), object memory until nothing is left to
    organize, and the rolling summaries of every conversation (its Step-0 gate opened).
    ``stop_if_interrupted(what)`` is called after each run (it raises to stop the eval)."""
    from memory_pipeline import operations
    from memory_pipeline.conversation.summaries import set_init_status
    from memory_pipeline.definitions import build_defs
    from memory_pipeline.objects import reports as object_reports
    from memory_pipeline.objects.logic import EventState
    from memory_pipeline.operations.runner import execute_job, failure_line

    all_days = sorted({d for days in candidates.values() for d in days})
    if not all_days:
        return
    yesterday = datetime.now(ZoneInfo(settings.timezone_name())).date() - timedelta(days=1)
    first, last = all_days[0].isoformat(), min(all_days[-1], yesterday).isoformat()
    instance = operations.get_instance()
    defs = build_defs()
    for window in ("day", "sleep"):
        say(f"{window}: {first} .. {last}")
        with _warn_band_counted() as warned:
            rep = operations.materialize(window, first, last, instance=instance, defs=defs)
        if warned:
            say(f"deep sleep: {len(warned)} world-night(s) in the warn band, the largest {max(warned):,} characters")
        for r in rep.runs:
            report.runs.append(DagsterRun(f"{window} {r.first}..{r.last}", r.run_id, r.success, r.seconds, r.error))
        stop_if_interrupted(f"the {window} runs")

    def job(name: str, config: dict[str, Any] | None = None) -> bool:
        t0 = time.monotonic()
        result = execute_job(name, run_config=config, instance=instance, defs=defs)
        error, degraded = "", False
        if not result.success:
            error = failure_line(result)
        for ev in result.get_asset_materialization_events():
            meta = {k: v.value for k, v in ev.step_materialization_data.materialization.metadata.items()}
            if meta.get("degraded") is True:  # the objects worker's: failed claims, jobs or blocked events
                degraded = True
                error = error or (
                    f"degraded: {meta.get('failed_claims')} failed claim(s), {meta.get('jobs_failed')} job(s) "
                    f"failed, {meta.get('blocked_events')} event(s) blocked"
                )
        report.runs.append(DagsterRun(name, result.run_id, result.success, time.monotonic() - t0, error, degraded))
        stop_if_interrupted(name)
        return result.success

    say("objects: compaction and organize")
    job("objects_compaction_job")
    waiting = None
    for _ in range(ORGANIZE_ROUNDS_MAX):
        if not job("objects_organize_job"):
            break
        states = object_reports.state_counts(store)
        left = sum(n for s, n in states.items() if s in (EventState.HOT, EventState.PENDING, EventState.IN_PROGRESS))
        if left == 0 or left == waiting:  # done, or a run that moved nothing forward
            break
        waiting = left
    with store.connect() as conn:
        convs = [c for (c,) in conn.execute(select(conversations.c.conversation_id))]
    for conv in convs:
        set_init_status(store, conv, "done")
    say("rolling conversation summaries")
    job("conversation_rolling_summary_job")


def search_days(
    store: Store, question: Question, *, event_days: dict[str, date], tz: ZoneInfo, activity_type: str
) -> list[date]:
    """memory_search's answer to a question as days: its hits in rank order, each hit's lineage days
    in the order of its event ids (memory_search lists the events saying most about the query first;
    a day summary's own day), first mention kept. A hit covering many days does not fill the top 5
    with them: each day is one place in the ranking."""
    hits = memory_search(store, question.world, question.text, SEARCH_HITS, tz=tz, activity_type=activity_type)
    ranked: list[date] = []
    for hit in hits:
        doc = Document(question.world, hit.kind, hit.ref, hit.text, hit.start, hit.end, hit.event_ids)
        days = day_index.document_days(doc, event_days, tz)
        in_order = [event_days[e] for e in hit.event_ids if event_days.get(e) in days]
        for d in [*in_order, *sorted(days)]:
            if d not in ranked:
                ranked.append(d)
        if len(ranked) >= max(KS):
            break
    return ranked


def _ledger(store: Store, report: EvalReport) -> None:
    lc = llm_ledger.c
    with store.connect() as conn:
        rows = conn.execute(
            select(lc.task, lc.prompt_version, lc.tokens_in, lc.tokens_out, lc.cost_usd, lc.outcome)
        ).all()
    # A failed call is a call (its request went out) but no answer; a breaker refusal is neither.
    report.llm_calls = sum(1 for r in rows if r.outcome in (LedgerOutcome.OK, LedgerOutcome.ERROR))
    report.llm_failed = sum(1 for r in rows if r.outcome == LedgerOutcome.ERROR)
    report.llm_refused = sum(1 for r in rows if r.outcome == LedgerOutcome.BREAKER_OPEN)
    report.tokens_in = sum(r.tokens_in or 0 for r in rows)
    report.tokens_out = sum(r.tokens_out or 0 for r in rows)
    costs = [float(r.cost_usd) for r in rows if isinstance(r.cost_usd, int | float)]
    report.cost_usd = sum(costs) if costs else None
    report.prompt_versions = {r.task: r.prompt_version for r in rows if r.task and r.prompt_version}


def record(store: Store, report: EvalReport) -> None:
    """The run and one row per index (idempotent: a run id is written once)."""
    row = {
        "run_id": report.run_id,
        "dataset": "locomo",
        "files": report.files,
        "model": report.model,
        "prompt_versions": report.prompt_versions,
        "store": masked(report.store_url),
        "worlds": report.worlds,
        "days": report.days,
        "questions": report.questions,
        "questions_left_out": report.left_out,
        "llm_calls": report.llm_calls,
        "tokens_in": report.tokens_in,
        "tokens_out": report.tokens_out,
        "cost_usd": report.cost_usd,
        "wall_seconds": report.wall_seconds,
        "failed_runs": [f"{r.name} {r.run_id}: {r.error}" for r in report.failed_runs],
        "started_at": report.started_at,
        "finished_at": datetime.now(UTC),
    }
    results = [
        {
            "run_id": report.run_id,
            "index_name": s.index.value,
            "questions": s.questions,
            "r_at_1": s.recall(1),
            "r_at_5": s.recall(5),
            "chars_per_day": s.chars_per_day if s.index in DAY_TEXT_INDEXES else None,
        }
        for s in report.scores
    ]
    with store.begin() as conn:
        seen = conn.execute(select(recall_eval_runs.c.run_id).where(recall_eval_runs.c.run_id == report.run_id)).first()
        if seen:
            return
        conn.execute(recall_eval_runs.insert().values(row))
        if results:
            conn.execute(recall_eval_results.insert(), results)
