"""Per-world day / month / year rows (seed 000 entity bodies): one row per (world, window,
period_start), placeholders with empty_reason exactly where the seed writes them, sources on
every row. Writes are idempotent: only rows whose content, reason or sources changed are written.

A run over all worlds that completes a period also records it in ``temporal_period_runs`` (same
transaction as the rows): when it started reading and the newest input it read. The reconcile
(``reconcile.stale_periods``) compares later input against that record."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import func, select

from memory_pipeline.lib.llm import LLMHardFailure
from memory_pipeline.lib.store import Store, retry_transient, upsert
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline.lib.text import short_hash
from memory_pipeline.lib.timeutil import day_bounds, expected_periods, local_date, period_bounds, utcnow
from memory_pipeline.temporal import logic, prompts
from memory_pipeline.temporal.context import TemporalContext, day_messages, material_line, summarize, worlds_alive
from memory_pipeline.temporal.logic import EmptyReason
from memory_pipeline.temporal.tables import temporal_period_runs, temporal_summaries


class PartitionFailure(RuntimeError):
    """Some worlds of a window hit an LLM hard failure: nothing was written for them."""

    def __init__(self, window: str, period: str, failures: dict[str, str]):
        self.failures = failures
        detail = "; ".join(f"{w}: {e}" for w, e in sorted(failures.items())[:5])
        super().__init__(
            f"{window} {period}: LLM hard failure for {len(failures)} world(s), no row written for them: {detail}"
        )


@dataclass
class PeriodResult:
    window: str
    period_start: date
    worlds: int = 0
    written: int = 0  # rows inserted or changed (the upsert's rowcount)
    unchanged: int = 0
    reused: int = 0  # summaries kept without a model call (same model, prompt and material)
    over_budget: int = 0  # day rows built from partial summaries (material over the budget)
    partial_summaries: int = 0  # day_conversation / day_part / day_group answers those took
    non_empty: int = 0
    placeholders: Counter = field(default_factory=Counter)
    failures: dict[str, str] = field(default_factory=dict)
    disabled: bool = False
    preview: list[tuple[str, str, str]] = field(default_factory=list)  # (world, period, content or reason)
    db_retries: int = 0  # attempts redone whole after a transient database error


def _retried(window: str, period_start: date, once) -> PeriodResult:
    """One period's unit of work (read, model calls, one write transaction), redone whole on a
    transient database error (lib.store.retry_transient): the write is idempotent and a failed
    transaction wrote nothing, so a retry never doubles nor half-writes a row; answers the failed
    attempt got are served from the LLM cache. StoreUnavailable names the period after the last
    attempt."""
    retries = 0

    def count(_attempt: int, _exc: BaseException) -> None:
        nonlocal retries
        retries += 1

    result: PeriodResult = retry_transient(
        once, what=f"{window} {logic.period_key(window, period_start)}", on_retry=count
    )
    result.db_retries = retries
    return result


def _existing_rows(conn, window: str, period_start: date) -> dict[str, dict]:
    rows = (
        conn.execute(
            select(temporal_summaries).where(
                temporal_summaries.c.window == window, temporal_summaries.c.period_start == period_start
            )
        )
        .mappings()
        .all()
    )
    return {r["world_id"]: dict(r) for r in rows}


def _row(
    world_id: str,
    window: str,
    period_start: date,
    content: str,
    reason: str | None,
    source_kind: str,
    source_ids: list,
    source_count: int,
    material_fp: str | None,
    model: str | None,
) -> dict:
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


def _run_record(
    result: PeriodResult, started: datetime, newest_input: datetime | None, world_ids: list[str] | None
) -> dict | None:
    """The ``temporal_period_runs`` row of a completed run, or None when the run does not vouch for
    the whole period: a ``world_ids`` subset read only some worlds' input (recording it would hide
    the other worlds' late messages), and a run with hard failures left some worlds without a row.
    ``materialized_at`` is when the run started reading, so input committed while it ran counts as
    newer than the record (at worst one more, model-free, re-run) instead of being missed."""
    if world_ids is not None or result.failures:
        return None
    return {
        "window": result.window,
        "period_start": result.period_start,
        "materialized_at": started,
        "material_ingested_at": newest_input,
        "worlds": result.worlds,
    }


def _write(
    ctx: TemporalContext,
    result: PeriodResult,
    rows: list[dict],
    existing: dict[str, dict],
    record: dict | None = None,
) -> None:
    """Upsert rows whose meaningful fields changed (a successful row clears empty_reason) and, in
    the same transaction, the period's run record."""
    with ctx.store.begin() as conn:
        now = datetime.now(UTC)
        changed = []
        for row in rows:
            old = existing.get(row["world_id"])
            same = old is not None and all(
                old[k] == row[k]
                for k in (
                    "content",
                    "empty_reason",
                    "source_count",
                    "source_ids",
                    "material_fp",
                    "model",
                    "prompt_version",
                )
            )
            if same:
                result.unchanged += 1
            else:
                changed.append(row | {"created_at": old["created_at"] if old else now, "updated_at": now})
        result.written += upsert(
            conn,
            temporal_summaries,
            changed,
            keys=["world_id", "window", "period_start"],
            update=[c for c in changed[0] if c not in ("world_id", "window", "period_start", "created_at")]
            if changed
            else [],
        )
        if record is not None:
            upsert(conn, temporal_period_runs, [record], keys=["window", "period_start"])
    for row in rows:
        if row["empty_reason"]:
            result.placeholders[row["empty_reason"]] += 1
        else:
            result.non_empty += 1
        if len(result.preview) < 20:
            result.preview.append(
                (row["world_id"], row["period_start"].isoformat(), row["content"] or f"({row['empty_reason']})")
            )


def _summarize_or_placeholder(ctx, result, prev, world_id, fp_parts, produce, source_kind, source_ids, source_count):
    """The row for one world: reused as is when model, prompt version and material fingerprint
    (``fp_parts`` and the sources) match the stored row (no call at all), else ``produce()`` asks
    the model (one or more calls); None on a hard failure."""
    fp = short_hash([*fp_parts, source_ids])

    def row(content, reason, ids, count, model):
        return _row(world_id, result.window, result.period_start, content, reason, source_kind, ids, count, fp, model)

    if (
        prev is not None
        and not ctx.force_llm
        and (prev["material_fp"], prev["model"], prev["prompt_version"]) == (fp, ctx.llm.model, prompts.PROMPT_VERSION)
    ):
        result.reused += 1
        return row(prev["content"], prev["empty_reason"], prev["source_ids"], prev["source_count"], prev["model"])
    try:
        text = produce()
    except LLMHardFailure as exc:
        result.failures[world_id] = str(exc)  # no placeholder for a hard failure
        return None
    if not text:
        return row("", EmptyReason.EMPTY_SUMMARY, [], 0, ctx.llm.model)
    return row(text, None, source_ids, source_count, ctx.llm.model)


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


def _day_from_partials(ctx: TemporalContext, result: PeriodResult, world_id: str, convs: list[list]) -> str:
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
                first, last = min(p.first for p in group), max(p.last for p in group)
                merged.append(_Partial(first, last, f"{len(g)} partial summaries merged", text))
        partials = merged
    return ""


class OpenWindowError(ValueError):
    """A day, month or year that has not ended yet is never summarized as if it were closed."""


def _require_closed(window: str, period_start: date, end: datetime) -> None:
    if end > utcnow():
        raise OpenWindowError(f"{window} {period_start.isoformat()} is not closed yet (it ends {end.isoformat()})")


def _day_row(ctx: TemporalContext, result: PeriodResult, prev, world_id: str, material: list) -> dict | None:
    """A world's day row from ALL of its material, conversation by conversation (seed 000: every
    active conversation is covered, no editorial selection): one call when the day fits
    day_material_max_chars, else partial summaries first. Sources are every material message,
    source_count the conversations; the fingerprint covers all of it, so an unchanged day is reused
    without a call."""
    by_conv: dict[str, list] = defaultdict(list)
    for m in material:
        by_conv[m["conversation_id"]].append(m)
    convs = sorted(by_conv.values(), key=lambda ms: (ms[0]["at"], ms[0]["conversation_id"]))
    full = "\n\n".join(
        f"# {ms[0]['platform']} conversation\n"
        + "\n".join(material_line(m["at"], m["role"], m["content"], ctx.tz) for m in ms)
        for ms in convs
    )
    budget = ctx.cfg.day_material_max_chars
    if len(full) <= budget:
        fp_parts = [full]

        def produce() -> str:
            return summarize(ctx, "day", full, ctx.cfg.global_day_max_chars, world_id)

    else:
        fp_parts = [full, {"day_material_max_chars": budget}]  # how it is split depends on the budget

        def produce() -> str:
            result.over_budget += 1
            return _day_from_partials(ctx, result, world_id, convs)

    ids = [m["message_id"] for m in material]
    return _summarize_or_placeholder(ctx, result, prev, world_id, fp_parts, produce, "message", ids, len(convs))


def regenerate_day(ctx: TemporalContext, day: date, world_ids: list[str] | None = None) -> PeriodResult:
    return _retried("day", day, lambda: _regenerate_day_once(ctx, day, world_ids))


def _regenerate_day_once(ctx: TemporalContext, day: date, world_ids: list[str] | None) -> PeriodResult:
    result = PeriodResult("day", day)
    start, end = day_bounds(day, ctx.tz)
    _require_closed("day", day, end)
    if not ctx.cfg.enabled:
        result.disabled = True
        return result
    started = utcnow()
    with ctx.store.connect() as conn:
        alive = worlds_alive(conn, end, world_ids)
        rows = day_messages(conn, day, ctx.tz, world_ids)
        existing = _existing_rows(conn, "day", day)
    by_world: dict[str, list] = defaultdict(list)
    for r in rows:
        by_world[r["world_id"]].append(r)
    out = []
    for world_id in alive:
        result.worlds += 1
        msgs = by_world.get(world_id, [])
        if not msgs:
            out.append(_row(world_id, "day", day, "", EmptyReason.NO_SESSIONS, "message", [], 0, None, None))
            continue
        material = [m for m in msgs if logic.is_material(m["role"], m["content"], m["tool_calls"])]
        if not material:
            out.append(_row(world_id, "day", day, "", EmptyReason.EMPTY, "message", [], 0, None, None))
            continue
        row = _day_row(ctx, result, existing.get(world_id), world_id, material)
        if row is not None:
            out.append(row)
    newest = max((r["ingested_at"] for r in rows), default=None)  # every eligible message read
    _write(ctx, result, out, existing, _run_record(result, started, newest, world_ids))
    if result.failures:
        raise PartitionFailure("day", day.isoformat(), result.failures)
    return result


def regenerate_rollup(
    ctx: TemporalContext, window: str, period_start: date, world_ids: list[str] | None = None
) -> PeriodResult:
    """Month from its day rows, year from its month rows, ignoring empty children."""
    return _retried(window, period_start, lambda: _regenerate_rollup_once(ctx, window, period_start, world_ids))


def _regenerate_rollup_once(
    ctx: TemporalContext, window: str, period_start: date, world_ids: list[str] | None
) -> PeriodResult:
    child = logic.CHILD_WINDOW[window]
    result = PeriodResult(window, period_start)
    start, end = period_bounds(window, period_start, ctx.tz)
    _require_closed(window, period_start, end)
    if not ctx.cfg.enabled:
        result.disabled = True
        return result
    last = local_date(end - timedelta(seconds=1), ctx.tz)
    max_chars = ctx.cfg.month_max_chars if window == "month" else ctx.cfg.year_max_chars
    started = utcnow()
    with ctx.store.connect() as conn:
        alive = worlds_alive(conn, end, world_ids)
        # The newest change among the child rows (placeholders too: a child turning empty changes
        # this period as much as a new summary does).
        newest = conn.execute(
            select(func.max(temporal_summaries.c.updated_at))
            .where(temporal_summaries.c.window == child)
            .where(temporal_summaries.c.period_start >= period_start, temporal_summaries.c.period_start <= last)
        ).scalar_one()
        q = (
            select(
                temporal_summaries.c.summary_id,
                temporal_summaries.c.world_id,
                temporal_summaries.c.period_start,
                temporal_summaries.c.content,
            )
            .where(temporal_summaries.c.window == child)
            .where(temporal_summaries.c.period_start >= period_start, temporal_summaries.c.period_start <= last)
            .where(temporal_summaries.c.empty_reason.is_(None), temporal_summaries.c.content != "")
            .order_by(temporal_summaries.c.world_id, temporal_summaries.c.period_start)
        )
        children = conn.execute(q).mappings().all()
        existing = _existing_rows(conn, window, period_start)
    by_world: dict[str, list] = defaultdict(list)
    for c in children:
        by_world[c["world_id"]].append(c)
    fmt = "%Y-%m-%d" if child == "day" else "%Y-%m"
    out = []
    for world_id in alive:
        result.worlds += 1
        kids = by_world.get(world_id, [])
        if not kids:
            out.append(
                _row(world_id, window, period_start, "", logic.CHILD_EMPTY_REASON[window], child, [], 0, None, None)
            )
            continue
        material = "\n".join(f"{k['period_start']:{fmt}}: {k['content']}" for k in kids)
        row = _summarize_or_placeholder(
            ctx,
            result,
            existing.get(world_id),
            world_id,
            [material],
            lambda material=material, world_id=world_id: summarize(ctx, window, material, max_chars, world_id),
            child,
            [k["summary_id"] for k in kids],
            len(kids),
        )
        if row is not None:
            out.append(row)
    _write(ctx, result, out, existing, _run_record(result, started, newest, world_ids))
    if result.failures:
        raise PartitionFailure(window, period_start.isoformat(), result.failures)
    return result


def missing_children(
    ctx: TemporalContext, window: str, period_start: date, world_ids: list[str] | None = None
) -> list[tuple[str, str]]:
    """(world, child period) pairs a month/year needs but has no row for yet (placeholders count)."""
    return retry_transient(
        lambda: _missing_children_once(ctx, window, period_start, world_ids),
        what=f"{window} {logic.period_key(window, period_start)}",
    )


def _missing_children_once(
    ctx: TemporalContext, window: str, period_start: date, world_ids: list[str] | None
) -> list[tuple[str, str]]:
    child = logic.CHILD_WINDOW[window]
    _, end = period_bounds(window, period_start, ctx.tz)
    last = local_date(end - timedelta(seconds=1), ctx.tz)
    periods = expected_periods(child, period_start, last, local_date(utcnow(), ctx.tz))
    with ctx.store.connect() as conn:
        first = dict(
            conn.execute(select(worlds.c.world_id, worlds.c.first_event_at).where(worlds.c.first_event_at < end)).all()
        )
        have = set(
            conn.execute(
                select(temporal_summaries.c.world_id, temporal_summaries.c.period_start)
                .where(temporal_summaries.c.window == child)
                .where(temporal_summaries.c.period_start >= period_start, temporal_summaries.c.period_start <= last)
            ).all()
        )
    missing = []
    for world_id, first_at in sorted(first.items()):
        if world_ids is not None and world_id not in world_ids:
            continue
        for p in periods:
            if period_bounds(child, p, ctx.tz)[1] > first_at and (world_id, p) not in have:
                missing.append((world_id, p.isoformat()))
    return missing


def regenerate(
    ctx: TemporalContext, window: str, period_start: date, world_ids: list[str] | None = None
) -> PeriodResult:
    if window == "day":
        return regenerate_day(ctx, period_start, world_ids)
    return regenerate_rollup(ctx, window, period_start, world_ids)


def _day_coverage(tag: str, row, convs: dict[str, set]) -> list[str]:
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
    """Problems with one window's rows: a non-empty row without sources, a source outside the
    window or world (or a debug, cron or non-material message), a day row that leaves out an
    eligible conversation with material (or some of its messages) without saying why, or any row
    for a period that is not closed yet (the future). Sources are fetched in one query per kind.
    ``audited`` is the number of rows (placeholders included) of the period read."""
    today = local_date(now or utcnow(), tz)
    problems: list[str] = []
    start, end = period_bounds(window, period_start, tz)
    last = local_date(end - timedelta(seconds=1), tz)
    if period_start >= today or last >= today:
        problems.append(f"{window} {period_start} is not closed on {today} (future or open window)")
    t = temporal_summaries.c
    with store.connect() as conn:
        rows = conn.execute(select(temporal_summaries).where(t.window == window, t.period_start == period_start))
        rows = rows.mappings().all()
        ids = {
            kind: sorted({i for r in rows if r["source_kind"] == kind for i in r["source_ids"] or []})
            for kind in ("message", "day", "month")
        }
        found_messages, found_children = {}, {}
        for i in range(0, len(ids["message"]), 5000):
            q = (
                select(messages, conversations.c.world_id, conversations.c.platform, conversations.c.debug)
                .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
                .where(messages.c.message_id.in_(ids["message"][i : i + 5000]))
            )
            found_messages.update({m["message_id"]: m for m in conn.execute(q).mappings()})
        children = ids["day"] + ids["month"]
        if children:
            q = select(temporal_summaries).where(t.summary_id.in_(children))
            found_children = {k["summary_id"]: k for k in conn.execute(q).mappings()}
        # A day row covers every eligible conversation of the day that has material.
        day_material: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
        if window == "day":
            for m in day_messages(conn, period_start, tz):
                if logic.is_material(m["role"], m["content"], m["tool_calls"]):
                    day_material[m["world_id"]][m["conversation_id"]].add(m["message_id"])
    for r in rows:
        tag = f"{r['world_id']} {window} {period_start}"
        if r["empty_reason"] is None and (not r["content"] or r["source_count"] <= 0 or not r["source_ids"]):
            problems.append(f"{tag}: non-empty row without sources")
            continue
        if window == "day":
            problems.extend(_day_coverage(tag, r, day_material.get(r["world_id"], {})))
        if r["empty_reason"] is not None and r["content"]:
            problems.append(f"{tag}: placeholder ({r['empty_reason']}) carries content")
        if not r["source_ids"]:
            continue
        if r["source_kind"] == "message":
            found = [found_messages[i] for i in r["source_ids"] if i in found_messages]
            outside = [m for m in found if not (start <= m["at"] < end) or m["world_id"] != r["world_id"]]
            excluded = [
                m
                for m in found
                if not logic.is_eligible_conversation(m["platform"], m["debug"])
                or not logic.is_material(m["role"], m["content"], m["tool_calls"])
            ]
            if len(found) != len(r["source_ids"]):
                problems.append(f"{tag}: {len(r['source_ids']) - len(found)} source message(s) do not exist")
            if outside:
                problems.append(f"{tag}: {len(outside)} source message(s) outside the window or world")
            if excluded:
                problems.append(f"{tag}: {len(excluded)} source message(s) are debug, cron or not material")
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
    return logic.Audit(len(rows), problems)
