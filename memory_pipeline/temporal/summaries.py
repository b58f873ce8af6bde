"""Per-world day / month / year rows (seed 000 entity bodies): one row per (world, window,
period_start), placeholders with empty_reason exactly where the seed writes them, sources on
every row. Writes are idempotent: only rows whose content, reason or sources changed are written.

A range is worked set-based, in batches of periods (``BATCH``): one read of the batch's material
for all worlds, the cached answers in one query, and one transaction with the rows, the run
records and the LLM ledger and cache rows.

A run over all worlds that completes a period also records it in ``temporal_period_runs`` (same
transaction as the rows): when it started reading, the newest input it read, and the model, prompt
version and settings. The reconcile (``reconcile.stale_periods``) compares later input against that
record, and a run with ``skip_unchanged`` skips a period the record shows unchanged."""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Row, RowMapping, select

from memory_pipeline.lib.kinds import Window
from memory_pipeline.lib.llm import LLMHardFailure, LLMRequest
from memory_pipeline.lib.llm.client import CallStats
from memory_pipeline.lib.store import Store, retry_transient, upsert
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline.lib.text import short_hash
from memory_pipeline.lib.timeutil import day_bounds, expected_periods, local_date, period_bounds, utcnow
from memory_pipeline.temporal import logic, prompts
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.context import (
    Message,
    TemporalContext,
    buffered_llm,
    material_line,
    messages_between,
    summarize,
    summary_request,
)
from memory_pipeline.temporal.logic import EmptyReason
from memory_pipeline.temporal.tables import temporal_period_runs, temporal_summaries


class PartitionFailure(RuntimeError):
    """Some worlds of a window hit an LLM hard failure: nothing was written for them."""

    def __init__(self, window: str, period: str, failures: dict[str, str]):
        self.failures = failures
        detail = "; ".join(f"{w}: {e}" for w, e in sorted(failures.items())[:5])
        super().__init__(
            f"{window} {period}: LLM hard failure for {len(failures)} world(s), no new row written for them (a row "
            f"they had is kept): {detail}"
        )


# Partitions per set-based batch: one read of their material, one query for cached answers and one
# write transaction each, so memory stays flat over a year-long range.
BATCH = {"day": 31, "month": 12, "year": 5}


@dataclass
class PeriodResult:
    window: str
    period_start: date
    worlds: int = 0
    written: int = 0  # rows inserted or changed (rows the upsert wrote)
    unchanged: int = 0
    reused: int = 0  # summaries kept without a model call (same model, prompt and material)
    over_budget: int = 0  # day rows built from partial summaries (material over the budget)
    partial_summaries: int = 0  # day_conversation / day_part / day_group answers those took
    non_empty: int = 0
    placeholders: Counter[str] = field(default_factory=Counter)
    failures: dict[str, str] = field(default_factory=dict)
    disabled: bool = False
    preview: list[tuple[str, str, str]] = field(default_factory=list)  # (world, period, content or reason)
    # Worlds whose row was written from an answer the provider cut (finish_reason length): the
    # row is kept (the seed has no status for it) but not vouched for, so the next run asks again.
    truncated: list[str] = field(default_factory=list)
    # Worlds whose model answered with nothing: their empty_summary placeholder is not reused either.
    empty_answers: list[str] = field(default_factory=list)
    db_retries: int = 0  # attempts redone whole after a transient database error
    llm: CallStats = field(default_factory=CallStats)  # this partition's calls (all attempts)
    # Why the partition's input was not read at all (skip_unchanged and its record says nothing
    # changed since it was materialized); "" when it was read.
    skipped: str = ""


def config_fp(window: str, cfg: TemporalSummaryConfig) -> str:
    """The settings a window's rows depend on (besides model and prompt version): a record made
    with other caps is not "unchanged"."""
    keys = {
        "day": ("global_day_max_chars", "day_material_max_chars"),
        "month": ("month_max_chars",),
        "year": ("year_max_chars",),
    }[window]
    return short_hash([window, *(getattr(cfg, k) for k in keys)])


def _run_record(
    ctx: TemporalContext,
    result: PeriodResult,
    started: datetime,
    newest_input: datetime | None,
    world_ids: list[str] | None,
) -> RunRecord | None:
    """The ``temporal_period_runs`` row of a completed run, or None when the run does not vouch for
    the whole period: a ``world_ids`` subset read only some worlds' input (recording it would hide
    the other worlds' late messages), a run with hard failures left some worlds without a row, and
    one with a truncated or empty answer wrote a row that must be asked for again (skip_unchanged
    would not).
    ``materialized_at`` is when the run started reading, so input committed while it ran counts as
    newer than the record (at worst one more, model-free, re-run) instead of being missed. Model,
    prompt version and settings let a later run tell that nothing changed (skip_unchanged)."""
    if world_ids is not None or result.failures or result.truncated or result.empty_answers:
        return None
    return {
        "window": result.window,
        "period_start": result.period_start,
        "materialized_at": started,
        "material_ingested_at": newest_input,
        "worlds": result.worlds,
        "model": ctx.llm.model,
        "prompt_version": prompts.PROMPT_VERSION,
        "config_fp": config_fp(result.window, ctx.cfg),
    }


SummaryRow = dict[str, Any]  # a temporal_summaries row (``_row``)
RunRecord = dict[str, Any]  # a temporal_period_runs row (``_run_record``)

_COMPARED = ("content", "empty_reason", "source_count", "source_ids", "material_fp", "model", "prompt_version")
_KEYS = ("world_id", "window", "period_start")


def _write_batch(
    ctx: TemporalContext,
    results: dict[date, PeriodResult],
    rows: dict[date, list[SummaryRow]],
    existing: dict[tuple[date, str], SummaryRow],
    records: list[RunRecord],
) -> None:
    """One transaction for the batch: upsert the rows whose meaningful fields changed (a
    successful row clears empty_reason), the periods' run records, and the LLM ledger and cache
    rows the batch's calls buffered. ``written`` counts the rows of each period the upsert wrote."""
    now = datetime.now(UTC)
    changed = []
    for p, result in results.items():
        for row in rows.get(p, []):
            old = existing.get((p, row["world_id"]))
            if old is not None and all(old[k] == row[k] for k in _COMPARED):
                result.unchanged += 1
            else:
                changed.append(row | {"created_at": old["created_at"] if old else now, "updated_at": now})
                result.written += 1
    with ctx.store.begin() as conn:
        if changed:
            n = upsert(
                conn,
                temporal_summaries,
                changed,
                keys=_KEYS,
                update=[c for c in changed[0] if c not in (*_KEYS, "created_at")],
            )
            if n != len(changed):  # DO UPDATE writes every row it is given; anything else is a bug
                raise RuntimeError(f"upsert wrote {n} of {len(changed)} summary rows")
        if records:
            upsert(conn, temporal_period_runs, records, keys=["window", "period_start"])
        ctx.llm.write_pending(conn)
    ctx.llm.clear_pending()
    for p, result in results.items():
        for row in rows.get(p, []):
            if row["empty_reason"]:
                result.placeholders[row["empty_reason"]] += 1
            else:
                result.non_empty += 1
            if len(result.preview) < 20:
                result.preview.append(
                    (row["world_id"], row["period_start"].isoformat(), row["content"] or f"({row['empty_reason']})")
                )


def _row(
    world_id: str,
    window: str,
    period_start: date,
    content: str,
    reason: str | None,
    source_kind: str,
    source_ids: Sequence[str | int],
    source_count: int,
    material_fp: str | None,
    model: str | None,
) -> SummaryRow:
    return {
        "world_id": world_id,
        "window": window,
        "period_start": period_start,
        "content": content,
        "empty_reason": reason,
        "source_count": source_count,
        "source_kind": source_kind,
        "source_ids": source_ids,
        "material_fp": material_fp,
        "model": model,
        "prompt_version": prompts.PROMPT_VERSION,
    }


def _existing(conn: Connection, window: str, periods: list[date]) -> dict[tuple[date, str], SummaryRow]:
    t = temporal_summaries.c
    q = select(temporal_summaries).where(t.window == window, t.period_start.in_(periods))
    return {(r["period_start"], r["world_id"]): dict(r) for r in conn.execute(q).mappings()}


def _first_events(conn: Connection, before: datetime, world_ids: list[str] | None) -> list[tuple[str, datetime]]:
    """(world, first_event_at) of the worlds whose first event is before ``before``, by id."""
    q = select(worlds.c.world_id, worlds.c.first_event_at).where(worlds.c.first_event_at < before)
    if world_ids is not None:
        q = q.where(worlds.c.world_id.in_(world_ids))
    return [(w, at) for w, at in conn.execute(q.order_by(worlds.c.world_id))]


def _alive(first: list[tuple[str, datetime]], end: datetime) -> list[str]:
    """Worlds whose first event is before the window's end: no placeholders before a world existed."""
    return [w for w, at in first if at < end]


def _reusable(ctx: TemporalContext, prev: SummaryRow | None, fp: str) -> bool:
    return (
        prev is not None
        and not ctx.force_llm
        and not ctx.rebuild
        and (prev["material_fp"], prev["model"], prev["prompt_version"]) == (fp, ctx.llm.model, prompts.PROMPT_VERSION)
    )


def _summarize_or_placeholder(
    ctx: TemporalContext,
    result: PeriodResult,
    prev: SummaryRow | None,
    world_id: str,
    fp_parts: list[object],
    produce: Callable[[], str],
    source_kind: str,
    source_ids: Sequence[str | int],
    source_count: int,
) -> SummaryRow | None:
    """The row for one world: reused as is when model, prompt version and material fingerprint
    (``fp_parts`` and the sources) match the stored row (no call at all), else ``produce()`` asks
    the model (one or more calls); None on a hard failure."""
    fp = short_hash([*fp_parts, source_ids])

    def row(content: str, reason: str | None, ids: Sequence[str | int], count: int, model: str | None) -> SummaryRow:
        return _row(world_id, result.window, result.period_start, content, reason, source_kind, ids, count, fp, model)

    if prev is not None and _reusable(ctx, prev, fp):
        result.reused += 1
        return row(prev["content"], prev["empty_reason"], prev["source_ids"], prev["source_count"], prev["model"])
    cut_before = ctx.llm.stats.truncated
    try:
        text = produce()
    except LLMHardFailure as exc:
        result.failures[world_id] = str(exc)  # no placeholder for a hard failure
        return None
    if not text:
        # The seed's placeholder for a model that answered with nothing. A provider's empty answer
        # (a hiccup, a filter) gets no fingerprint, so no run reuses it (nor was it cached): the
        # next run asks again. The offline model's is its deterministic answer: asked again, the same.
        placeholder = row("", EmptyReason.EMPTY_SUMMARY, [], 0, ctx.llm.model)
        if ctx.llm.is_offline:
            return placeholder
        result.empty_answers.append(world_id)
        return placeholder | {"material_fp": None}
    out = row(text, None, source_ids, source_count, ctx.llm.model)
    if ctx.llm.stats.truncated == cut_before:
        return out
    # An answer it was built from was cut: written, but with no fingerprint, so no run reuses it as
    # whole (the answer was not cached either: the next run asks again).
    result.truncated.append(world_id)
    return out | {"material_fp": None}


@dataclass(frozen=True)
class _Partial:
    """A partial summary of a busy day: a conversation, a part of one, or a group of partials."""

    first: datetime
    last: datetime
    label: str
    text: str

    def render(self, tz: ZoneInfo) -> str:
        """A header line (time span and what it summarizes) and the summary on the next line."""
        return f"# {self.first.astimezone(tz):%H:%M}-{self.last.astimezone(tz):%H:%M} {self.label}\n{self.text}"


# Room kept for the "# <platform> conversation, part i of n" header of a conversation part.
_PART_HEADER_ROOM = 80


def _day_from_partials(ctx: TemporalContext, result: PeriodResult, world_id: str, convs: list[list[Message]]) -> str:
    """A day whose material exceeds day_material_max_chars: every conversation is summarized on
    its own (task day_conversation), one over the budget in consecutive parts that each fit
    (day_part); then the day from those partial summaries (day_reduce), after merging consecutive
    groups of them (day_group) while they still exceed the budget. Every call is a ledger row."""
    budget, n, tz = ctx.cfg.day_material_max_chars, ctx.cfg.global_day_max_chars, ctx.tz
    partials: list[_Partial] = []
    for msgs in convs:
        platform = msgs[0]["platform"]
        lines = [material_line(m["at"], m["role"], m["content"], tz) for m in msgs]
        block = f"# {platform} conversation\n" + "\n".join(lines)
        if len(block) <= budget:
            parts = [("day_conversation", f"{platform} conversation", block, msgs[0], msgs[-1])]
        else:
            groups = logic.pack([len(ln) + 1 for ln in lines], budget - _PART_HEADER_ROOM)
            parts = [
                (
                    "day_part",
                    f"{platform} conversation, part {k} of {len(groups)}",
                    f"# {platform} conversation, part {k} of {len(groups)}\n" + "\n".join(lines[i] for i in g),
                    msgs[g[0]],
                    msgs[g[-1]],
                )
                for k, g in enumerate(groups, 1)
            ]
        for task, label, material, first, last in parts:
            text = summarize(ctx, task, material, n, world_id)
            result.partial_summaries += 1
            if text:
                partials.append(_Partial(first["at"], last["at"], label, text))
    while partials:
        items = [p.render(tz) for p in partials]
        if len(partials) == 1 or sum(len(it) + 1 for it in items) - 1 <= budget:
            return summarize(ctx, "day_reduce", "\n".join(items), n, world_id)
        merged = []
        for g in logic.pack([len(it) + 1 for it in items], budget, min_group=2):
            if len(g) == 1:
                merged.append(partials[g[0]])
                continue
            text = summarize(ctx, "day_group", "\n".join(items[i] for i in g), n, world_id)
            result.partial_summaries += 1
            if text:
                group = [partials[i] for i in g]
                span = min(p.first for p in group), max(p.last for p in group)
                merged.append(_Partial(*span, f"{len(g)} partial summaries merged", text))
        partials = merged
    return ""


class OpenWindowError(ValueError):
    """A day, month or year that has not ended yet is never summarized as if it were closed."""


def _require_closed(window: str, period_start: date, end: datetime) -> None:
    if end > utcnow():
        raise OpenWindowError(f"{window} {period_start.isoformat()} is not closed yet (it ends {end.isoformat()})")


@dataclass(frozen=True)
class _DayMaterial:
    """A world-day's material, conversation by conversation, as the day call reads it."""

    convs: list[list[Message]]
    full: str
    ids: list[str]
    fits: bool  # within day_material_max_chars: one `day` call

    def fp_parts(self, budget: int) -> list[object]:
        # How a day over the budget is split depends on the budget.
        return [self.full] if self.fits else [self.full, {"day_material_max_chars": budget}]


def _day_material(ctx: TemporalContext, material: list[Message]) -> _DayMaterial:
    by_conv: dict[str, list[Message]] = defaultdict(list)
    for m in material:
        by_conv[m["conversation_id"]].append(m)
    convs = sorted(by_conv.values(), key=lambda ms: (ms[0]["at"], ms[0]["conversation_id"]))
    full = "\n\n".join(
        f"# {ms[0]['platform']} conversation\n"
        + "\n".join(material_line(m["at"], m["role"], m["content"], ctx.tz) for m in ms)
        for ms in convs
    )
    fits = len(full) <= ctx.cfg.day_material_max_chars
    return _DayMaterial(convs, full, [m["message_id"] for m in material], fits)


def _day_row(
    ctx: TemporalContext, result: PeriodResult, prev: SummaryRow | None, world_id: str, dm: _DayMaterial
) -> SummaryRow | None:
    """A world's day row from ALL of its material, conversation by conversation (seed 000: every
    active conversation is covered, no editorial selection): one call when the day fits
    day_material_max_chars, else partial summaries first. Sources are every material message,
    source_count the conversations; the fingerprint covers all of it, so an unchanged day is reused
    without a call."""
    if dm.fits:

        def produce() -> str:
            return summarize(ctx, "day", dm.full, ctx.cfg.global_day_max_chars, world_id)

    else:

        def produce() -> str:
            result.over_budget += 1
            return _day_from_partials(ctx, result, world_id, dm.convs)

    fp_parts = dm.fp_parts(ctx.cfg.day_material_max_chars)
    return _summarize_or_placeholder(ctx, result, prev, world_id, fp_parts, produce, "message", dm.ids, len(dm.convs))


def regenerate_many(
    ctx: TemporalContext,
    window: str,
    periods: list[date],
    world_ids: list[str] | None = None,
    *,
    skip_unchanged: bool = False,
) -> dict[date, PeriodResult]:
    """Day, month or year rows of a batch of periods, set-based: one read of their material (the
    days' messages, or the child rows) for all worlds, their cached answers in one query, then one
    transaction with the rows, the run records and the LLM ledger and cache rows of every call.
    Each period gets its own result (hard failures included: PartitionFailure is the caller's to
    raise per period). A transient database error redoes the whole batch (lib.store.retry_transient):
    the transaction rolled back whole, and the calls already made are served from this client
    (their ledger rows are written with the retry). With ``skip_unchanged`` (and no ``world_ids``,
    no force_llm), a period whose run record shows nothing changed since it was materialized is
    not read at all (``skipped`` says why)."""
    periods = sorted(set(periods))
    if not periods:
        return {}
    stats = {p: CallStats() for p in periods}
    retries = 0

    def count(_attempt: int, _exc: BaseException) -> None:
        nonlocal retries
        retries += 1

    def once() -> dict[date, PeriodResult]:
        if window == "day":
            return _days_once(ctx, periods, world_ids, skip_unchanged, stats)
        return _rollups_once(ctx, window, periods, world_ids, skip_unchanged, stats)

    try:
        with buffered_llm(ctx):
            results = retry_transient(once, what=f"{window} {logic.period_key(window, periods[0])}", on_retry=count)
    finally:
        ctx.llm.partition = None
    for p, result in results.items():
        result.db_retries = retries
        result.llm = stats[p]
    return results


def _calls_of(ctx: TemporalContext, stats: dict[date, CallStats], window: str, p: date) -> _Counting:
    """Bind the client's ledger rows to period ``p`` and count its calls in ``stats[p]``."""
    ctx.llm.partition = logic.period_key(window, p)
    return _Counting(ctx.llm.stats, stats[p])


class _Counting:
    """Adds what the client's stats gained inside the ``with`` to a period's stats."""

    def __init__(self, total: CallStats, into: CallStats) -> None:
        self.total, self.into = total, into

    def __enter__(self) -> None:
        self.before = replace(self.total)

    def __exit__(self, *exc: object) -> None:
        for f in fields(CallStats):
            setattr(
                self.into,
                f.name,
                getattr(self.into, f.name) + getattr(self.total, f.name) - getattr(self.before, f.name),
            )


def _prefetch(ctx: TemporalContext, conn: Connection, reqs: list[LLMRequest]) -> None:
    if reqs and not ctx.force_llm:
        ctx.llm.prefetch(reqs, conn)


def _days_once(
    ctx: TemporalContext,
    days: list[date],
    world_ids: list[str] | None,
    skip_unchanged: bool,
    stats: dict[date, CallStats],
) -> dict[date, PeriodResult]:
    results = {d: PeriodResult("day", d) for d in days}
    bounds = {d: day_bounds(d, ctx.tz) for d in days}
    for d in days:
        _require_closed("day", d, bounds[d][1])
    if not ctx.cfg.enabled:
        for r in results.values():
            r.disabled = True
        return results
    started = utcnow()
    with ctx.store.connect() as conn:
        skipped = _unchanged(conn, ctx, "day", days) if skip_unchanged and world_ids is None else {}
        for d, why in skipped.items():
            results[d].skipped = why
        todo = [d for d in days if d not in skipped]
        if not todo:
            return results
        first = _first_events(conn, bounds[todo[-1]][1], world_ids)
        msgs = messages_between(conn, bounds[todo[0]][0], bounds[todo[-1]][1], world_ids)
        existing = _existing(conn, "day", todo)
        wanted = set(todo)
        by_day_world: dict[tuple[date, str], list[Message]] = defaultdict(list)
        newest: dict[date, datetime] = {}
        for m in msgs:
            d = local_date(m["at"], ctx.tz)
            if d in wanted:
                by_day_world[(d, m["world_id"])].append(m)
                if d not in newest or m["ingested_at"] > newest[d]:
                    newest[d] = m["ingested_at"]  # every eligible message read
        plans: dict[tuple[date, str], _DayMaterial | EmptyReason] = {}
        reqs: list[LLMRequest] = []
        for d in todo:
            for w in _alive(first, bounds[d][1]):
                day_msgs = by_day_world.get((d, w), [])
                material = [m for m in day_msgs if logic.is_material(m["role"], m["content"])]
                if not day_msgs or not material:
                    plans[(d, w)] = EmptyReason.EMPTY if day_msgs else EmptyReason.NO_SESSIONS
                    continue
                dm = plans[(d, w)] = _day_material(ctx, material)
                fp = short_hash([*dm.fp_parts(ctx.cfg.day_material_max_chars), dm.ids])
                if dm.fits and not _reusable(ctx, existing.get((d, w)), fp):
                    reqs.append(summary_request("day", dm.full, ctx.cfg.global_day_max_chars, w))
        _prefetch(ctx, conn, reqs)
    rows: dict[date, list[SummaryRow]] = defaultdict(list)
    records: list[RunRecord] = []
    for d in todo:
        result = results[d]
        with _calls_of(ctx, stats, "day", d):
            for w in _alive(first, bounds[d][1]):
                result.worlds += 1
                plan = plans[(d, w)]
                if isinstance(plan, EmptyReason):
                    rows[d].append(_row(w, "day", d, "", plan, "message", [], 0, None, None))
                    continue
                row = _day_row(ctx, result, existing.get((d, w)), w, plan)
                if row is not None:
                    rows[d].append(row)
        record = _run_record(ctx, result, started, newest.get(d), world_ids)
        if record is not None:
            records.append(record)
    _write_batch(ctx, {d: results[d] for d in todo}, rows, existing, records)
    return results


def _rollups_once(
    ctx: TemporalContext,
    window: str,
    periods: list[date],
    world_ids: list[str] | None,
    skip_unchanged: bool,
    stats: dict[date, CallStats],
) -> dict[date, PeriodResult]:
    """Months from their day rows, years from their month rows, ignoring empty children."""
    child = logic.CHILD_WINDOW[Window(window)]
    results = {p: PeriodResult(window, p) for p in periods}
    bounds = {p: period_bounds(window, p, ctx.tz) for p in periods}
    for p in periods:
        _require_closed(window, p, bounds[p][1])
    if not ctx.cfg.enabled:
        for r in results.values():
            r.disabled = True
        return results
    last = {p: local_date(bounds[p][1] - timedelta(seconds=1), ctx.tz) for p in periods}
    max_chars = ctx.cfg.month_max_chars if window == "month" else ctx.cfg.year_max_chars
    fmt = "%Y-%m-%d" if child == "day" else "%Y-%m"
    started = utcnow()
    with ctx.store.connect() as conn:
        skipped = _unchanged(conn, ctx, window, periods) if skip_unchanged and world_ids is None else {}
        for p, why in skipped.items():
            results[p].skipped = why
        todo = [p for p in periods if p not in skipped]
        if not todo:
            return results
        first = _first_events(conn, bounds[todo[-1]][1], world_ids)
        t = temporal_summaries.c
        q = (
            select(t.summary_id, t.world_id, t.period_start, t.content, t.empty_reason, t.updated_at)
            .where(t.window == child, t.period_start >= todo[0], t.period_start <= last[todo[-1]])
            .order_by(t.world_id, t.period_start)
        )
        wanted = set(todo)
        kids: dict[tuple[date, str], list[RowMapping]] = defaultdict(list)
        # The newest change among the child rows (placeholders too: a child turning empty changes
        # this period as much as a new summary does).
        newest: dict[date, datetime] = {}
        for k in conn.execute(q).mappings():
            p = _parent_start(window, k["period_start"])
            if p not in wanted:
                continue
            if p not in newest or k["updated_at"] > newest[p]:
                newest[p] = k["updated_at"]
            if k["empty_reason"] is None and k["content"] != "":
                kids[(p, k["world_id"])].append(k)
        existing = _existing(conn, window, todo)
        reqs: list[LLMRequest] = []
        for p in todo:
            for w in _alive(first, bounds[p][1]):
                ks = kids.get((p, w))
                if ks:
                    material = "\n".join(f"{k['period_start']:{fmt}}: {k['content']}" for k in ks)
                    if not _reusable(ctx, existing.get((p, w)), short_hash([material, [k["summary_id"] for k in ks]])):
                        reqs.append(summary_request(window, material, max_chars, w))
        _prefetch(ctx, conn, reqs)
    rows: dict[date, list[SummaryRow]] = defaultdict(list)
    records: list[RunRecord] = []
    for p in todo:
        result = results[p]
        with _calls_of(ctx, stats, window, p):
            for w in _alive(first, bounds[p][1]):
                result.worlds += 1
                ks = kids.get((p, w), [])
                if not ks:
                    rows[p].append(
                        _row(w, window, p, "", logic.CHILD_EMPTY_REASON[Window(window)], child, [], 0, None, None)
                    )
                    continue
                material = "\n".join(f"{k['period_start']:{fmt}}: {k['content']}" for k in ks)
                row = _summarize_or_placeholder(
                    ctx,
                    result,
                    existing.get((p, w)),
                    w,
                    [material],
                    functools.partial(summarize, ctx, window, material, max_chars, w),
                    child,
                    [k["summary_id"] for k in ks],
                    len(ks),
                )
                if row is not None:
                    rows[p].append(row)
        record = _run_record(ctx, result, started, newest.get(p), world_ids)
        if record is not None:
            records.append(record)
    _write_batch(ctx, {p: results[p] for p in todo}, rows, existing, records)
    return results


def _parent_start(window: str, child_start: date) -> date:
    return child_start.replace(day=1) if window == "month" else date(child_start.year, 1, 1)


def _unchanged(conn: Connection, ctx: TemporalContext, window: str, periods: list[date]) -> dict[date, str]:
    """Periods whose run record shows nothing changed since they were materialized: same model,
    prompt version and settings, no eligible message ingested after it (day), no child row written
    after it (month / year), and no world that existed by the period's end without a row. Their
    rows are what a re-run would write, so the run does not read their input (a few set-based
    queries for the whole batch)."""
    if ctx.force_llm:
        return {}
    from memory_pipeline.temporal import reconcile

    r = temporal_period_runs.c
    recs = conn.execute(select(temporal_period_runs).where(r.window == window, r.period_start.in_(periods))).mappings()
    same = (ctx.llm.model, prompts.PROMPT_VERSION, config_fp(window, ctx.cfg))
    cand = {
        rec["period_start"]: rec["materialized_at"]
        for rec in recs
        if (rec["model"], rec["prompt_version"], rec["config_fp"]) == same
    }
    if not cand:
        return {}
    bounds = {p: period_bounds(window, p, ctx.tz) for p in cand}
    missing = reconcile.missing_worlds(conn, [(p, bounds[p][1]) for p in sorted(cand)], window)
    if window == "day":
        changed = set(reconcile.late_messages(conn, [(p, *bounds[p], cand[p]) for p in sorted(cand)]))
        what = "no message ingested since"
    else:
        child = logic.CHILD_WINDOW[Window(window)]
        parents: list[reconcile.ParentRecord] = [
            (window, p, child, p, local_date(bounds[p][1] - timedelta(seconds=1), ctx.tz), cand[p])
            for p in sorted(cand)
        ]
        changed = {p for _w, p in reconcile.changed_children(conn, parents)}
        what = f"no {child} row written since"
    unvouched = reconcile.unvouched_periods(conn, window, sorted(cand))  # cut or empty answers: asked again
    return {
        p: f"unchanged since {at:%Y-%m-%d %H:%M:%S} UTC ({what}, no new world, same model, prompt version and "
        "settings): input not read, rows kept"
        for p, at in sorted(cand.items())
        if p not in missing and p not in changed and p not in unvouched
    }


def regenerate_day(ctx: TemporalContext, day: date, world_ids: list[str] | None = None) -> PeriodResult:
    return regenerate(ctx, "day", day, world_ids)


def regenerate_rollup(
    ctx: TemporalContext, window: str, period_start: date, world_ids: list[str] | None = None
) -> PeriodResult:
    """Month from its day rows, year from its month rows, ignoring empty children."""
    return regenerate(ctx, window, period_start, world_ids)


def regenerate(
    ctx: TemporalContext, window: str, period_start: date, world_ids: list[str] | None = None
) -> PeriodResult:
    """One period (a batch of one); PartitionFailure when some worlds hit an LLM hard failure
    (the other worlds' rows are written)."""
    result = regenerate_many(ctx, window, [period_start], world_ids)[period_start]
    if result.failures:
        raise PartitionFailure(window, period_start.isoformat(), result.failures)
    return result


def missing_children(
    ctx: TemporalContext, window: str, period_start: date, world_ids: list[str] | None = None
) -> list[tuple[str, str]]:
    """(world, child period) pairs a month/year needs but has no row for yet (placeholders count)."""
    return missing_children_many(ctx, window, [period_start], world_ids).get(period_start, [])


def missing_children_many(
    ctx: TemporalContext, window: str, periods: list[date], world_ids: list[str] | None = None
) -> dict[date, list[tuple[str, str]]]:
    """:func:`missing_children` of many periods with two queries; periods lacking none are left out."""
    periods = sorted(set(periods))
    if not periods:
        return {}
    return retry_transient(
        lambda: _missing_children_once(ctx, window, periods, world_ids),
        what=f"{window} {logic.period_key(window, periods[0])}",
    )


def _missing_children_once(
    ctx: TemporalContext, window: str, periods: list[date], world_ids: list[str] | None
) -> dict[date, list[tuple[str, str]]]:
    child = logic.CHILD_WINDOW[Window(window)]
    today = local_date(utcnow(), ctx.tz)
    ends = {p: period_bounds(window, p, ctx.tz)[1] for p in periods}
    lasts = {p: local_date(ends[p] - timedelta(seconds=1), ctx.tz) for p in periods}
    t = temporal_summaries.c
    with ctx.store.connect() as conn:
        first = _first_events(conn, ends[periods[-1]], world_ids)
        have = set(
            conn.execute(
                select(t.world_id, t.period_start)
                .where(t.window == child)
                .where(t.period_start >= periods[0], t.period_start <= lasts[periods[-1]])
            ).all()
        )
    child_end = {}
    out: dict[date, list[tuple[str, str]]] = {}
    for p in periods:
        expected = expected_periods(child, p, lasts[p], today)
        for c in expected:
            if c not in child_end:
                child_end[c] = period_bounds(child, c, ctx.tz)[1]
        missing = [
            (w, c.isoformat())
            for w, first_at in first
            if first_at < ends[p]
            for c in expected
            if child_end[c] > first_at and (w, c) not in have
        ]
        if missing:
            out[p] = missing
    return out


def _day_coverage(tag: str, row: RowMapping, convs: dict[str, set[str]]) -> list[str]:
    """A day row lists every material message of every eligible conversation of its world and day,
    or says why not: a placeholder for an empty model answer. A no_sessions / empty placeholder
    while material exists is stale."""
    if not convs:
        return []
    reason = row["empty_reason"]
    if reason == EmptyReason.EMPTY_SUMMARY:
        return []
    if reason is not None:
        return [f"{tag}: placeholder {reason} but {len(convs)} conversation(s) have material"]
    sources = set(row["source_ids"] or [])
    out = []
    for conv_id, ids in sorted(convs.items()):
        covered = ids & sources
        if not covered:
            out.append(f"{tag}: conversation {conv_id} ({len(ids)} material message(s)) is not among the sources")
        elif covered != ids:
            out.append(
                f"{tag}: conversation {conv_id}: {len(ids - covered)} of {len(ids)} material message(s) not among the sources"
            )
    return out


def audit_period(store: Store, window: str, period_start: date, tz: ZoneInfo, now: datetime | None = None) -> list[str]:
    """The problems :func:`period_audit` finds."""
    return period_audit(store, window, period_start, tz, now).problems


def period_audit(
    store: Store, window: str, period_start: date, tz: ZoneInfo, now: datetime | None = None
) -> logic.Audit:
    """:func:`period_audits` of one period."""
    return period_audits(store, window, [period_start], tz, now)[period_start]


def period_audits(
    store: Store, window: str, periods: list[date], tz: ZoneInfo, now: datetime | None = None
) -> dict[date, logic.Audit]:
    """Problems with the rows of each period: a non-empty row without sources, a source outside the
    window or world (or a debug, cron or non-material message), a day row that leaves out an
    eligible conversation with material (or some of its messages) without saying why, or any row
    for a period that is not closed yet (the future). Set-based, whatever the number of periods
    and worlds: one read of the periods' rows, one read of every message of the days (day) or of
    the child rows of the periods (month / year), and sources found in neither looked up by id
    (normally none). ``audited`` is the number of rows (placeholders included) of a period."""
    periods = sorted(set(periods))
    if not periods:
        return {}
    today = local_date(now or utcnow(), tz)
    bounds = {p: period_bounds(window, p, tz) for p in periods}
    lasts = {p: local_date(bounds[p][1] - timedelta(seconds=1), tz) for p in periods}
    wanted = set(periods)
    t = temporal_summaries.c
    # A message as the audit needs it: (at, world_id, counted = eligible conversation and material).
    found_messages: dict[str, tuple[datetime, str, bool]] = {}
    found_children: dict[int, RowMapping] = {}
    # A day row covers every eligible conversation of the day that has material.
    day_material: dict[tuple[date, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    # Plain rows, no tool_calls (they never decide what is material): a day range is every
    # message of its days, and a mapping or a decoded JSON value per message was most of the audit.
    mq = select(
        messages.c.message_id,
        messages.c.at,
        conversations.c.world_id,
        messages.c.conversation_id,
        messages.c.role,
        messages.c.content,
        conversations.c.platform,
        conversations.c.debug,
    ).join(conversations, conversations.c.conversation_id == messages.c.conversation_id)

    def found(rows: Sequence[Row[Any]]) -> None:
        for mid, at, world_id, conv_id, role, content, platform, debug in rows:
            counted = logic.is_eligible_conversation(platform, debug) and logic.is_material(role, content)
            found_messages[mid] = (at, world_id, counted)
            if counted and window == "day":
                d = at.astimezone(tz).date()
                if d in wanted:
                    day_material[(d, world_id)][conv_id].add(mid)

    with store.connect() as conn:
        rows = (
            conn.execute(select(temporal_summaries).where(t.window == window, t.period_start.in_(periods)))
            .mappings()
            .all()
        )
        if window == "day":
            q = mq.where(messages.c.at >= bounds[periods[0]][0], messages.c.at < bounds[periods[-1]][1])
            found(conn.execute(q).all())
        else:
            q = select(temporal_summaries).where(
                t.window == logic.CHILD_WINDOW[Window(window)],
                t.period_start >= periods[0],
                t.period_start <= lasts[periods[-1]],
            )
            found_children = {k["summary_id"]: k for k in conn.execute(q).mappings()}
        # Sources the range read did not find: outside the window, or gone. Looked up by id.
        other_messages = sorted(
            {i for r in rows if r["source_kind"] == "message" for i in r["source_ids"] or []} - found_messages.keys()
        )
        for i in range(0, len(other_messages), 5000):
            found(conn.execute(mq.where(messages.c.message_id.in_(other_messages[i : i + 5000]))).all())
        other_children = sorted(
            {i for r in rows if r["source_kind"] in ("day", "month") for i in r["source_ids"] or []}
            - found_children.keys()
        )
        for i in range(0, len(other_children), 5000):
            q = select(temporal_summaries).where(t.summary_id.in_(other_children[i : i + 5000]))
            found_children.update({k["summary_id"]: k for k in conn.execute(q).mappings()})
    problems: dict[date, list[str]] = {p: [] for p in periods}
    audited: Counter[date] = Counter()
    for p in periods:
        if p >= today or lasts[p] >= today:
            problems[p].append(f"{window} {p} is not closed on {today} (future or open window)")
    for r in rows:
        p = r["period_start"]
        audited[p] += 1
        problems[p].extend(_row_problems(window, r, bounds[p], lasts[p], found_messages, found_children, day_material))
    return {p: logic.Audit(audited[p], problems[p]) for p in periods}


def _row_problems(
    window: str,
    r: RowMapping,
    bounds: tuple[datetime, datetime],
    last: date,
    found_messages: dict[str, tuple[datetime, str, bool]],
    found_children: dict[int, RowMapping],
    day_material: dict[tuple[date, str], dict[str, set[str]]],
) -> list[str]:
    period_start = r["period_start"]
    start, end = (b.astimezone(UTC) for b in bounds)  # as the store's times are: a cheap comparison
    tag = f"{r['world_id']} {window} {period_start}"
    if r["empty_reason"] is None and (not r["content"] or r["source_count"] <= 0 or not r["source_ids"]):
        return [f"{tag}: non-empty row without sources"]
    problems = []
    if window == "day":
        problems.extend(_day_coverage(tag, r, day_material.get((period_start, r["world_id"]), {})))
    if r["empty_reason"] is not None and r["content"]:
        problems.append(f"{tag}: placeholder ({r['empty_reason']}) carries content")
    if not r["source_ids"]:
        return problems
    if r["source_kind"] == "message":
        world_id = r["world_id"]
        found = [found_messages[i] for i in r["source_ids"] if i in found_messages]
        outside = sum(1 for at, w, _ in found if not (start <= at < end) or w != world_id)
        excluded = sum(1 for _, _, counted in found if not counted)
        if len(found) != len(r["source_ids"]):
            problems.append(f"{tag}: {len(r['source_ids']) - len(found)} source message(s) do not exist")
        if outside:
            problems.append(f"{tag}: {outside} source message(s) outside the window or world")
        if excluded:
            problems.append(f"{tag}: {excluded} source message(s) are debug, cron or not material")
    else:
        kids = [found_children[i] for i in r["source_ids"] if i in found_children]
        ok = [
            k
            for k in kids
            if k["window"] == r["source_kind"]
            and k["world_id"] == r["world_id"]
            and period_start <= k["period_start"] <= last
            and k["empty_reason"] is None
        ]
        if len(ok) != len(r["source_ids"]):
            problems.append(f"{tag}: {len(r['source_ids']) - len(ok)} child source(s) missing, empty or outside")
    return problems
