"""Seed 004 semantic summaries (I/O): a structured SummaryRecord per (window, group), appended to the
type's summary series, bottom-up from the finer level's summaries (one call per group; missing
children made from raw first) or, by `recompute`, straight from the raw entries.

The five guardrails: (1) only closed windows after the settle period (an explicit call over an open
one is refused); (2) idempotent per (window, group): a lease makes one call across processes, the
material fingerprint reuses an unchanged record, a success clears the retry ledger; (3) an empty
window costs nothing; (4) consecutive failures back off and past a limit are given up, with the
reason; (5) the semantic tick commits at most ``max_commits_per_round`` records."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, delete, select

from memory_pipeline.lib.llm import LLMClient, LLMHardFailure, LLMRequest, offline
from memory_pipeline.lib.store import Store, leases, upsert
from memory_pipeline.lib.text import hard_cap, short_hash
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.tower import prompts
from memory_pipeline.tower import types as types_io
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.entries import entries_by_pk, entries_in
from memory_pipeline.tower.logic import (
    RANGE,
    RANK,
    Granularity,
    JobState,
    Source,
    Strategy,
    TowerInputError,
    approx_tokens,
    backoff_delay,
    child_level,
    entry_text,
    is_settled,
    parse_sections,
    plan_chunks,
    provenance,
    render_sections,
    summary_levels,
    window_end,
    window_label,
    window_start,
)
from memory_pipeline.tower.tables import tower_summaries, tower_summary_attempts
from memory_pipeline.tower.types import MemoryType

LEASE_ASSET = "tower_summary"


class SummaryRefused(Exception):
    """A summary that must not be appended (nothing fits the token budget, or an aggregate that
    copies a child): the job fails with this reason and counts as a failure for the backoff."""


@dataclass
class SummaryContext:
    store: Store
    llm: LLMClient
    cfg: TowerConfig
    tz: ZoneInfo
    force_llm: bool = False
    lease_wait_seconds: float = 600.0
    # Guardrail 5: a round appends at most ``commit_limit`` records, every one counted (the children
    # a bottom-up summary makes from raw included); ``appended`` labels what this context wrote.
    commit_limit: int | None = None
    appended: list[str] = field(default_factory=list)
    # The ledger's partition is a Dagster partition key (an asset run: "2026-01-05", "2026-01"), not
    # a window's label (a job: "proj/log week 2026-01-05"); a child window made bottom-up is named
    # the same way, so analysts' marts read its data day.
    partition_keys: bool = False

    def make_room(self) -> None:
        """Called before each model call that would append a record: past the limit, the round is full."""
        if self.commit_limit is not None and len(self.appended) >= self.commit_limit:
            raise RoundFull


class RoundFull(Exception):
    """The round has appended its max_commits_per_round records: the rest waits for the next round."""


@dataclass(frozen=True)
class WindowKey:
    type_name: str
    granularity: str  # a level of the chain, or "range" for an explicit from/to
    start: datetime
    end: datetime
    group: str

    def lease_partition(self) -> str:
        return short_hash([self.type_name, self.granularity, self.start.isoformat(), self.end.isoformat(), self.group])

    def label(self, tz: ZoneInfo) -> str:
        grp = f" [{self.group}]" if self.group else ""
        return f"{self.type_name} {window_label(self.granularity, self.start, tz, self.end)}{grp}"

    def partition_key(self, tz: ZoneInfo) -> str:
        """The key a Dagster partition of this window has (day and week: the first day, month:
        YYYY-MM); a window of another length has none, so its label."""
        local = self.start.astimezone(tz)
        if self.granularity in (Granularity.DAY, Granularity.WEEK):
            return local.date().isoformat()
        if self.granularity == Granularity.MONTH:
            return f"{local:%Y-%m}"
        return self.label(tz)

    def where(self) -> list[Any]:
        s = tower_summaries.c
        return [
            s.type_name == self.type_name,
            s.granularity == self.granularity,
            s.start == self.start,
            s.end == self.end,
            s.group_value == self.group,
        ]


def level_key(t: MemoryType, g: Granularity, start: datetime, group: str, tz: ZoneInfo) -> WindowKey:
    return WindowKey(t.name, str(g), start, window_end(g, start, tz), group)


@dataclass
class Outcome:
    state: JobState
    record_id: int | None = None
    calls: int = 0  # ledger rows of the call: failed, cached and bottom-up children's calls included
    reused: bool = False
    reason: str = ""


# ---- reads ----------------------------------------------------------------------------------------


def newest(conn: Connection, key: WindowKey) -> Any | None:
    q = select(tower_summaries).where(*key.where()).order_by(tower_summaries.c.record_id.desc()).limit(1)
    return conn.execute(q).mappings().first()


def attempts(conn: Connection, key: WindowKey) -> Any | None:
    a = tower_summary_attempts.c
    q = select(tower_summary_attempts).where(
        a.type_name == key.type_name,
        a.granularity == key.granularity,
        a.start == key.start,
        a.end == key.end,
        a.group_value == key.group,
    )
    return conn.execute(q).mappings().first()


def record_view(r: Any, tz: ZoneInfo, current_entries: int | None = None) -> dict[str, Any]:
    """A SummaryRecord as every client-facing surface shows it (provenance keys as the seed names them)."""
    missing = max(0, current_entries - r["entry_count"]) if current_entries is not None else 0
    return {
        "record_id": r["record_id"],
        "series": f"{r['type_name']}.summary",
        "type": r["type_name"],
        "window": {
            "granularity": r["granularity"],
            "start": r["start"].astimezone(tz).isoformat(),
            "end": r["end"].astimezone(tz).isoformat(),
        },
        "group": r["group_value"],
        "sections": {
            k: list(r["sections"].get(k, []))
            for k in ("decisions", "conclusions", "todos", "state_changes", "keywords")
        },
        "text": r["text"],
        "refs": {"kind": r["ref_kind"], "ids": list(r["refs"])},
        "source": r["source"],
        "model": r["model"],
        "created_at": r["created_at"].astimezone(tz).isoformat(timespec="seconds"),
        "provenance": provenance(r["strategy"], r["chunks"], r["input_tokens"], r["clipped_entries"]),
        "entry_count": r["entry_count"],
        # A late entry updates the refs at once but never re-summarizes: the record says what it misses.
        "stale": missing > 0,
        "missing_entries": missing,
    }


# ---- guardrail 1 -------------------------------------------------------------------------------------


def refuse_unsettled(key: WindowKey, now: datetime, cfg: TowerConfig, tz: ZoneInfo) -> None:
    if key.end > now:
        raise TowerInputError(
            "window",
            f"{key.label(tz)} is still open (it closes at {key.end.astimezone(tz).isoformat()}); "
            "an open window is never summarized",
        )
    if not is_settled(key.end, now, cfg.settle):
        settles = (key.end + cfg.settle).astimezone(tz).isoformat()
        raise TowerInputError(
            "window", f"{key.label(tz)} closed less than {cfg.settle_minutes} min ago (settles at {settles})"
        )


def check_level(t: MemoryType, g: str) -> Granularity:
    if g not in t.chain:
        raise TowerInputError("granularity", f"{g!r} is not in {t.name}'s chain ({' → '.join(t.chain)})")
    level = Granularity(g)
    if RANK[level] > RANK[t.summary_cap]:
        raise TowerInputError(
            "granularity", f"{g} is above {t.name}'s summary cap ({t.summary_cap}); raise the cap to summarize it"
        )
    return level


# ---- the model ------------------------------------------------------------------------------------


@dataclass
class Made:
    sections: dict[str, list[str]]
    strategy: Strategy
    chunks: int
    input_tokens: int
    clipped: int
    cut: bool = False  # an answer it was made from was cut at the output limit (finish_reason length)


def _offline_aggregate(period: str, material: str, max_chars: int) -> str:
    """The offline model's aggregate: its content words as one conclusion that names the period
    ("week 2026-01-05: postgres, migration"). Alike children have alike words; the period's name
    keeps the aggregate from passing a child's text through (which the guardrail refuses). No
    content word: an empty answer (refused as empty, as any model's would be)."""
    budget = max_chars - len(period) - 2
    while True:  # the whole JSON within the hard cut, or the client would cut it mid-object
        words = offline.headline(material, max(1, budget))
        if not words:
            return ""
        keywords = [w for w in words.split(offline.HEADLINE_SEPARATOR) if w]
        answer = json.dumps({"conclusions": [f"{period}: {words}"], "keywords": keywords}, ensure_ascii=False)
        if len(answer) <= hard_cap(max_chars) or budget <= 1:
            return answer
        budget //= 2


def _ask(sctx: SummaryContext, task: str, header: str, items: list[str], period: str | None = None) -> str:
    """One model call. ``period`` (an aggregate's window) is what the offline model's answer names."""
    req = LLMRequest(
        task=task,
        system=prompts.spec(task, sctx.cfg.summary_max_chars),
        user="\n".join([header, *items]),
        prompt_version=prompts.PROMPT_VERSION,
        max_chars=sctx.cfg.summary_max_chars,
    )
    if period is not None:
        cap = sctx.cfg.summary_max_chars
        req = replace(req, offline_answer=lambda r: (_offline_aggregate(period, "\n".join(items), cap), []))
    return sctx.llm.complete(req, force=sctx.force_llm).text.strip()


def _make(sctx: SummaryContext, task: str, header: str, items: list[str], period: str | None = None) -> Made:
    """Within the token budget one direct call; over it one call per chunk, then one to merge."""
    cut_before = sctx.llm.stats.truncated
    plan = plan_chunks([approx_tokens(x) for x in items], sctx.cfg.input_budget_tokens, sctx.cfg.max_chunks)
    if not plan.chunks:  # an empty record would pass for a summary
        raise SummaryRefused(
            f"all {len(items)} item(s) are over the input budget of {sctx.cfg.input_budget_tokens} tokens "
            "each (memory.tower.input_budget_tokens): nothing to summarize, nothing appended"
        )
    if plan.strategy == Strategy.DIRECT:
        chosen = [items[i] for i in plan.chunks[0]] if plan.chunks else []
        answer = _ask(sctx, task, header, chosen, period)
    else:
        partials = [
            _ask(sctx, "tower_map", f"{header} (part {n + 1} of {len(plan.chunks)})", [items[i] for i in chunk])
            for n, chunk in enumerate(plan.chunks)
        ]
        answer = _ask(sctx, "tower_reduce", header, [f"part {n + 1}: {p}" for n, p in enumerate(partials)], period)
    sections = parse_sections(answer)
    if not any(sections.values()):  # an empty record would pass for a summary of the window
        raise SummaryRefused("the model's summary is empty (no section has an item): nothing appended")
    cut = sctx.llm.stats.truncated > cut_before
    return Made(sections, plan.strategy, len(plan.chunks), plan.input_tokens, plan.clipped, cut)


def _insert(
    conn: Connection,
    sctx: SummaryContext,
    key: WindowKey,
    made: Made,
    *,
    source: Source,
    ref_kind: str,
    refs: list[int],
    entry_count: int,
    fp: str,
) -> int:
    row = {
        "type_name": key.type_name,
        "granularity": key.granularity,
        "start": key.start,
        "end": key.end,
        "group_value": key.group,
        "sections": made.sections,
        "text": render_sections(made.sections),
        "ref_kind": ref_kind,
        "refs": refs,
        "source": str(source),
        "entry_count": entry_count,
        "model": sctx.llm.model,
        "prompt_version": prompts.PROMPT_VERSION,
        "strategy": str(made.strategy),
        "chunks": made.chunks,
        "input_tokens": made.input_tokens,
        "clipped_entries": made.clipped,
        # A record made from a cut answer is appended (and reported) but never reused as whole: its
        # fingerprint is one no run computes, so the next run asks again (the answer was not cached).
        "material_fp": short_hash([fp, "cut"], length=64) if made.cut else fp,
        "created_at": utcnow(),
    }
    inserted = conn.execute(tower_summaries.insert().values(row)).inserted_primary_key
    assert inserted is not None  # a single-row INSERT always has its key
    record_id = int(inserted[0])
    sctx.appended.append(key.label(sctx.tz))
    return record_id


def _fp(sctx: SummaryContext, kind: str, refs: list[int]) -> str:
    return short_hash([kind, sctx.llm.model, prompts.PROMPT_VERSION, sctx.cfg.input_budget_tokens, refs], length=64)


def _from_raw(sctx: SummaryContext, key: WindowKey, rows: list[Any]) -> Outcome:
    pks = [int(r["entry_pk"]) for r in rows]
    fp = _fp(sctx, "raw", pks)
    with sctx.store.connect() as conn:
        last = newest(conn, key)
        if last is not None and last["material_fp"] == fp and not sctx.force_llm:
            return Outcome(JobState.SUCCEEDED, last["record_id"], reused=True)
        full = entries_by_pk(conn, pks)
    items = _raw_items(sctx, key, full)
    sctx.make_room()
    made = _make(sctx, "tower_raw", f"# {key.label(sctx.tz)}: {len(items)} entries", items)
    with sctx.store.begin() as conn:
        rid = _insert(conn, sctx, key, made, source=Source.RAW, ref_kind="entry", refs=pks, entry_count=len(pks), fp=fp)
    return Outcome(JobState.SUCCEEDED, rid)


def _raw_items(sctx: SummaryContext, key: WindowKey, full: list[Any]) -> list[str]:
    """One line per entry, whole: only the token budget cuts, and what it cuts is counted."""
    items = []
    for e in full:
        grp = f" ({e['group_value']})" if e["group_value"] and not key.group else ""
        text = " ".join(entry_text(e["content"]).split())
        items.append(f"[{e['at'].astimezone(sctx.tz):%Y-%m-%d %H:%M}]{grp} {text}")
    return items


def _from_chain(sctx: SummaryContext, t: MemoryType, key: WindowKey, rows: list[Any]) -> Outcome:
    """Bottom-up: each finer child window with entries gets its summary (from raw where missing),
    then one call aggregates the children. A lone child is still aggregated by the model with the
    window's own header, and an answer whose text equals a child's is refused (SummaryRefused): an
    aggregate never passes a child's text through unchanged."""
    g = Granularity(key.granularity)
    child = child_level(t.chain, g)
    assert child is not None
    by_child: dict[datetime, list[Any]] = defaultdict(list)
    for r in rows:
        by_child[window_start(child, r["at"], sctx.tz)].append(r)
    made_children = False
    child_records: list[Any] = []
    for cstart in sorted(by_child):
        ckey = level_key(t, child, cstart, key.group, sctx.tz)
        with sctx.store.connect() as conn:
            rec = newest(conn, ckey)
        if rec is None:
            rec, made_child = _missing_child(sctx, ckey, by_child[cstart])
            made_children |= made_child
        child_records.append(rec)
    ids = [int(r["record_id"]) for r in child_records]
    fp = _fp(sctx, "chain", ids)
    with sctx.store.connect() as conn:
        last = newest(conn, key)
    if last is not None and last["material_fp"] == fp and not sctx.force_llm:
        return Outcome(JobState.SUCCEEDED, last["record_id"], reused=not made_children)
    header = f"period: {window_label(key.granularity, key.start, sctx.tz)} ({len(ids)} {child} windows)"
    items = [f"# {window_label(child, r['start'], sctx.tz)}\n{_child_material(r['sections'])}" for r in child_records]
    sctx.make_room()
    made = _make(sctx, "tower_aggregate", header, items, window_label(key.granularity, key.start, sctx.tz))
    text = render_sections(made.sections)
    if copied := next((r for r in child_records if r["text"] == text), None):
        raise SummaryRefused(
            f"the aggregate's text is identical to its child {window_label(child, copied['start'], sctx.tz)} "
            f"(record {copied['record_id']}): an aggregate never passes a child's text through unchanged; "
            "nothing appended"
        )
    with sctx.store.begin() as conn:
        rid = _insert(
            conn, sctx, key, made, source=Source.CHAIN, ref_kind="summary", refs=ids, entry_count=len(rows), fp=fp
        )
    return Outcome(JobState.SUCCEEDED, rid)


def _missing_child(sctx: SummaryContext, ckey: WindowKey, rows: list[Any]) -> tuple[Any, bool]:
    """A child window a bottom-up summary needs, made from raw under the lease a direct run of that
    window takes (so two processes never make it twice: the second finds the first's record once
    the lease is free), and, like a direct run, a success clears the child's retry ledger (it no
    longer shows as backing off or given up). Returns (the child's newest record, whether made here)."""
    holder = f"tower-{uuid.uuid4().hex[:12]}"
    with leases.held(sctx.store, LEASE_ASSET, ckey.lease_partition(), holder, wait=sctx.lease_wait_seconds):
        with sctx.store.connect() as conn:
            rec = newest(conn, ckey)
        if rec is not None:
            return rec, False  # made by whoever held the lease before us
        # The child's calls are its own unit of work: the ledger names its window, not the parent's.
        child = ckey.partition_key(sctx.tz) if sctx.partition_keys else ckey.label(sctx.tz)
        parent, sctx.llm.partition = sctx.llm.partition, child
        try:
            _from_raw(sctx, ckey, rows)
        finally:
            sctx.llm.partition = parent
        with sctx.store.begin() as conn:
            _clear_attempts(conn, ckey)
            return newest(conn, ckey), True


def _child_material(sections: dict[str, list[str]]) -> str:
    lines = [
        f"- {item}" for s in ("decisions", "conclusions", "todos", "state_changes") for item in sections.get(s) or []
    ]
    return "\n".join(lines)


def _failed(sctx: SummaryContext, key: WindowKey, error: str, now: datetime, scheduled: bool) -> Outcome:
    """Guardrail 4: back off (doubling), and past give_up_after record the window as given up. A
    window the semantic tick failed on is retried by the tick (``scheduled``), whatever its level."""
    with sctx.store.begin() as conn:
        prev = attempts(conn, key)
        failures = (prev["failures"] if prev else 0) + 1
        given_up = failures >= sctx.cfg.give_up_after
        upsert(
            conn,
            tower_summary_attempts,
            [
                {
                    "type_name": key.type_name,
                    "granularity": key.granularity,
                    "start": key.start,
                    "end": key.end,
                    "group_value": key.group,
                    "failures": failures,
                    "last_error": error[:2000],
                    "next_attempt_at": now + backoff_delay(failures, sctx.cfg.backoff),
                    "given_up_at": now if given_up else None,
                    "scheduled": scheduled or bool(prev and prev["scheduled"]),
                    "updated_at": now,
                }
            ],
            keys=["type_name", "granularity", "start", "end", "group_value"],
        )
    if given_up:
        return Outcome(JobState.GIVEN_UP, reason=f"given up after {failures} consecutive failures: {error}")
    return Outcome(JobState.FAILED, reason=f"failure {failures} of {sctx.cfg.give_up_after}: {error}")


def _clear_attempts(conn: Connection, key: WindowKey) -> None:
    a = tower_summary_attempts.c
    conn.execute(
        delete(tower_summary_attempts).where(
            a.type_name == key.type_name,
            a.granularity == key.granularity,
            a.start == key.start,
            a.end == key.end,
            a.group_value == key.group,
        )
    )


def summarize(
    sctx: SummaryContext, t: MemoryType, key: WindowKey, *, source: Source, now: datetime, scheduled: bool = False
) -> Outcome:
    """One (window, group). ``source`` chain (bottom-up) or raw (recompute). A scheduled call also
    respects the backoff; an explicit call retries a backing-off window but not a given-up one
    (recompute clears the given-up record: it is the operator's explicit rebuild). The outcome's
    ``calls`` are the ledger rows it made: the children's, the failed and the cached calls included."""
    before = sctx.llm.stats.ledger_rows
    out = _summarize(sctx, t, key, source=source, now=now, scheduled=scheduled)
    out.calls = sctx.llm.stats.ledger_rows - before
    return out


def _summarize(
    sctx: SummaryContext, t: MemoryType, key: WindowKey, *, source: Source, now: datetime, scheduled: bool
) -> Outcome:
    refuse_unsettled(key, now, sctx.cfg, sctx.tz)
    holder = f"tower-{uuid.uuid4().hex[:12]}"
    with leases.held(sctx.store, LEASE_ASSET, key.lease_partition(), holder, wait=sctx.lease_wait_seconds):
        with sctx.store.connect() as conn:
            ledger = attempts(conn, key)
            rows = entries_in(conn, key.type_name, key.start, key.end, key.group)
        if ledger is not None and ledger["given_up_at"] is not None and source == Source.CHAIN:
            return Outcome(
                JobState.GIVEN_UP, reason=f"given up after {ledger['failures']} failures: {ledger['last_error']}"
            )
        if ledger is not None and scheduled and ledger["next_attempt_at"] > now:
            until = ledger["next_attempt_at"].astimezone(sctx.tz).isoformat(timespec="seconds")
            return Outcome(JobState.FAILED, reason=f"backing off until {until}")
        if not rows:
            return Outcome(JobState.SKIPPED_EMPTY)  # guardrail 3: no call, no record
        if ledger is not None and not sctx.force_llm:
            # A retry asks afresh: the cached answer of a refused aggregate would only be refused again.
            sctx = replace(sctx, force_llm=True)
        chained = (
            source == Source.CHAIN
            and key.granularity != RANGE
            and child_level(t.chain, Granularity(key.granularity)) is not None
        )
        try:
            out = _from_chain(sctx, t, key, rows) if chained else _from_raw(sctx, key, rows)
        except (LLMHardFailure, SummaryRefused) as exc:
            return _failed(sctx, key, str(exc), now, scheduled)
        with sctx.store.begin() as conn:
            _clear_attempts(conn, key)  # guardrail 2: a success clears the retry ledger
        return out


# ---- the semantic tick and the summary partitions ------------------------------------------------------


def latest_settled(g: Granularity, now: datetime, settle: timedelta, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """The newest window of ``g`` whose end is at least ``settle`` ago."""
    edge = now - settle
    start = window_start(g, edge, tz)
    if window_end(g, start, tz) > edge:
        start = window_start(g, start - timedelta(microseconds=1), tz)
    return start, window_end(g, start, tz)


@dataclass
class RoundResult:
    committed: int = 0
    reused: int = 0
    deferred: int = 0
    skipped_empty: int = 0
    failed: int = 0
    given_up: int = 0
    calls: int = 0
    written: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def _groups(store: Store, t: MemoryType, start: datetime, end: datetime) -> list[str]:
    with store.connect() as conn:
        return sorted({r["group_value"] for r in entries_in(conn, t.name, start, end)})


def _one(
    sctx: SummaryContext, t: MemoryType, key: WindowKey, now: datetime, result: RoundResult, scheduled: bool
) -> None:
    before = len(sctx.appended)
    try:
        out = summarize(sctx, t, key, source=Source.CHAIN, now=now, scheduled=scheduled)
    except RoundFull:
        result.deferred += 1  # guardrail 5: what it appended so far stays (children are reused next round)
        return
    finally:
        written = sctx.appended[before:]
        result.committed += len(written)
        result.written += written
    result.calls += out.calls
    if out.state == JobState.SUCCEEDED:
        result.reused += out.reused  # a fresh success is counted above, by the records it appended
    elif out.state == JobState.SKIPPED_EMPTY:
        result.skipped_empty += 1
    elif out.state == JobState.GIVEN_UP:
        result.given_up += 1
        result.reasons.append(f"{key.label(sctx.tz)}: {out.reason}")
    else:
        result.failed += 1
        result.reasons.append(f"{key.label(sctx.tz)}: {out.reason}")


def semantic_tick(sctx: SummaryContext, now: datetime) -> RoundResult:
    """Guardrails 1-5 in one round: the windows the tick failed on whose backoff is over (oldest
    first), then, for each type with summaries on and each level up to its cap, only the latest
    settled window; a (window, group) with a record is done (no call); backing-off and given-up ones
    wait; at most max_commits_per_round records (every record appended, the children made bottom-up
    included), the rest deferred to the next round."""
    result = RoundResult()
    sctx = replace(sctx, commit_limit=sctx.cfg.max_commits_per_round, appended=[])
    types = {t.name: t for t in types_io.list_types(sctx.store) if t.summaries_enabled}
    keys = _due_retries(sctx.store, types, now)
    for t in types.values():
        for g in summary_levels(t.chain, t.summary_cap):
            start, end = latest_settled(g, now, sctx.cfg.settle, sctx.tz)
            keys += [WindowKey(t.name, str(g), start, end, group) for group in _groups(sctx.store, t, start, end)]
    for key in dict.fromkeys(keys):  # a due retry may also be a latest window: once
        with sctx.store.connect() as conn:
            if newest(conn, key) is not None:
                continue  # guardrail 2: done already, no call
            ledger = attempts(conn, key)
        if ledger is not None and (ledger["given_up_at"] is not None or ledger["next_attempt_at"] > now):
            continue
        _one(sctx, types[key.type_name], key, now, result, scheduled=True)
    return result


def _due_retries(store: Store, types: dict[str, MemoryType], now: datetime) -> list[WindowKey]:
    """Guardrail 4 for every level: the windows the tick failed on, not given up, whose backoff is
    over, of types that still summarize that level (a newer window being the latest does not leave
    a failed one behind)."""
    a = tower_summary_attempts.c
    q = (
        select(tower_summary_attempts)
        .where(a.scheduled.is_(True), a.given_up_at.is_(None), a.next_attempt_at <= now)
        .order_by(a.start, a.type_name, a.granularity, a.group_value)
    )
    with store.connect() as conn:
        rows = list(conn.execute(q).mappings())
    return [
        WindowKey(r["type_name"], r["granularity"], r["start"], r["end"], r["group_value"])
        for r in rows
        if r["type_name"] in types
        and r["granularity"] in summary_levels(types[r["type_name"]].chain, types[r["type_name"]].summary_cap)
    ]


def _period_types(store: Store, g: Granularity) -> list[MemoryType]:
    """The types a summary partition of ``g`` summarizes: summaries on and a cap reaching ``g``."""
    return [
        t for t in types_io.list_types(store) if t.summaries_enabled and g in summary_levels(t.chain, t.summary_cap)
    ]


def _period_start(g: Granularity, period: date, tz: ZoneInfo) -> datetime:
    return window_start(g, datetime(period.year, period.month, period.day, tzinfo=tz), tz)


def summarize_period(sctx: SummaryContext, g: Granularity, period: date, now: datetime) -> RoundResult:
    """A summary partition (a closed CST day, week or month): each type with summaries on whose cap
    reaches ``g``, each group with entries, bottom-up. Unsettled windows are left (and said)."""
    result = RoundResult()
    for t in _period_types(sctx.store, g):
        start = _period_start(g, period, sctx.tz)
        end = window_end(g, start, sctx.tz)
        if not is_settled(end, now, sctx.cfg.settle):
            result.reasons.append(f"{t.name} {window_label(g, start, sctx.tz)}: not settled yet, left for later")
            continue
        for group in _groups(sctx.store, t, start, end):
            _one(sctx, t, WindowKey(t.name, str(g), start, end, group), now, result, scheduled=False)
    return result


class FailedWindow(TypedDict):
    """A window whose summary failed: given up, or still retried."""

    window: str
    failures: int
    reason: str
    next_attempt_at: str
    retried_by: str


def given_up(store: Store, tz: ZoneInfo) -> list[FailedWindow]:
    return _ledger(store, tz, given_up=True)


def retrying(store: Store, tz: ZoneInfo) -> list[FailedWindow]:
    """Windows with failures not given up yet: when the next attempt may come, and who makes it."""
    return _ledger(store, tz, given_up=False)


def _ledger(store: Store, tz: ZoneInfo, *, given_up: bool) -> list[FailedWindow]:
    a = tower_summary_attempts.c
    q = select(tower_summary_attempts).where(a.given_up_at.is_not(None) if given_up else a.given_up_at.is_(None))
    with store.connect() as conn:
        rows = conn.execute(q.order_by(a.start, a.type_name, a.granularity, a.group_value)).mappings().all()
    return [_failed_view(r, tz) for r in rows]


def _failed_view(r: Any, tz: ZoneInfo) -> FailedWindow:
    return {
        "window": WindowKey(r["type_name"], r["granularity"], r["start"], r["end"], r["group_value"]).label(tz),
        "failures": r["failures"],
        "reason": r["last_error"],
        "next_attempt_at": r["next_attempt_at"].astimezone(tz).isoformat(timespec="seconds"),
        "retried_by": "the semantic tick" if r["scheduled"] else "the next explicit call",
    }


class LeftFailed(TypedDict):
    """A window of a summary partition whose last summary attempt failed (no newer record)."""

    window: FailedWindow
    type: str
    given_up: bool  # a run of the partition does not retry it: only ``recompute`` rebuilds it


def left_failed(store: Store, g: Granularity, periods: Sequence[date], tz: ZoneInfo) -> dict[date, list[LeftFailed]]:
    """For each summary partition of ``g`` starting at one of ``periods`` (closed CST days, weeks or
    months): its windows that the retry ledger holds as failed, backing off or given up, for the
    types a run of the partition summarizes. Read from the ledger in one query: no call. A run that
    succeeds with such a window still materializes the partition, so this says it is not complete."""
    starts = {_period_start(g, p, tz): p for p in periods}
    names = [t.name for t in _period_types(store, g)]
    a = tower_summary_attempts.c
    q = select(tower_summary_attempts).where(a.granularity == str(g), a.start.in_(list(starts)), a.type_name.in_(names))
    with store.connect() as conn:
        rows = conn.execute(q.order_by(a.start, a.type_name, a.group_value)).mappings().all()
    out: dict[date, list[LeftFailed]] = {p: [] for p in periods}
    for r in rows:
        out[starts[r["start"]]].append(
            {"window": _failed_view(r, tz), "type": r["type_name"], "given_up": r["given_up_at"] is not None}
        )
    return out


# ---- drift (beyond the seed) ---------------------------------------------------------------------------


@dataclass
class Drift:
    window: str
    # Keyword/section overlap of the chained summary with a recompute from raw (1.0: the same words);
    # None when no recompute fits the token budget.
    score: float | None
    identical_to_child: bool  # the coarse text equals a child's text byte for byte: no compression


def drift(sctx: SummaryContext, g: Granularity, period: date, sample: int) -> list[Drift]:
    """For up to ``sample`` chained (window, group) records of ``g`` starting at ``period``: the
    overlap with a recompute from raw (computed, not stored: a check never adds to the series)."""
    from memory_pipeline.tower.logic import keyword_overlap

    start = window_start(g, datetime(period.year, period.month, period.day, tzinfo=sctx.tz), sctx.tz)
    s = tower_summaries.c
    with sctx.store.connect() as conn:
        rows = conn.execute(
            select(tower_summaries)
            .where(s.granularity == str(g), s.start == start, s.source == str(Source.CHAIN))
            .order_by(s.type_name, s.group_value, s.record_id.desc())
        ).mappings()
        latest: dict[tuple[str, str], Any] = {}
        for r in rows:
            latest.setdefault((r["type_name"], r["group_value"]), r)
        chosen = list(latest.values())[:sample]
        children = {
            r["record_id"]: [
                c["text"]
                for c in conn.execute(select(s.text).where(s.record_id.in_([int(x) for x in r["refs"]]))).mappings()
            ]
            for r in chosen
        }
    out = []
    for r in chosen:
        key = WindowKey(r["type_name"], r["granularity"], r["start"], r["end"], r["group_value"])
        with sctx.store.connect() as conn:
            rows_e = entries_in(conn, key.type_name, key.start, key.end, key.group)
            full = entries_by_pk(conn, [int(e["entry_pk"]) for e in rows_e])
        items = _raw_items(sctx, key, full)
        identical = any(r["text"] == c for c in children[r["record_id"]])
        try:
            made = _make(sctx, "tower_raw", f"# {key.label(sctx.tz)}: {len(items)} entries", items)
        except SummaryRefused:
            out.append(Drift(key.label(sctx.tz), None, identical))
            continue
        out.append(Drift(key.label(sctx.tz), round(keyword_overlap(r["sections"], made.sections), 3), identical))
    return out
