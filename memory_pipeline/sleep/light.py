"""Seed 003 light sleep (02:00 CST, partition D = the previous CST natural day): the only path
that extracts semantic memory from conversations. Per world: the sessions with a recallable
(user/assistant, non-empty) message timestamped in D, three user messages built by code, the
three-tool whitelist, and a state record per run. One read of the day's messages, one of the
worlds' active memories and one of the self layer for all worlds of the run. A world whose day
changed (late messages), run again where later places are done, is a rebuild of the day: it is put
back to before D's light sleep first and the later places turn stale (sleep/order.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import astuple, dataclass, field, replace
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import select

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.llm.at_once import each_world
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import conversations, counted_conversations, messages
from memory_pipeline.lib.text import short_hash
from memory_pipeline.lib.timeutil import day_bounds
from memory_pipeline.sleep import prompts
from memory_pipeline.sleep.context import LoopResult, SleepContext, all_refused, memory_loop, worlds_at_once
from memory_pipeline.sleep.logic import LIGHT_TOOLS, MemoryState, Rules, Stage, duplicate_of
from memory_pipeline.sleep.memory import Provenance, load_self_layer, write_changes
from memory_pipeline.sleep.order import DAY_ROW
from memory_pipeline.sleep.prompts import SessionMaterial
from memory_pipeline.sleep.runs import ALL_REFUSED, ANSWERS_CUT, StageRun
from memory_pipeline.sleep.tables import sleep_runs

RECALLABLE_ROLES = ("user", "assistant")


@dataclass
class LightPrompt:
    system: str
    messages: list[dict[str, Any]]
    sessions: list[str]
    truncated: int
    input_chars: int
    message_two_ids: list[str]
    cut: dict[str, int] = field(default_factory=dict)  # session -> older messages left out


@dataclass
class _Asked:
    """One world's light sleep: built before the run asks (state, prompt), the loop's answer after."""

    state: MemoryState
    prompt: LightPrompt
    loop: LoopResult


@dataclass
class LightResult:
    worlds: int = 0
    reused: int = 0
    sessions: int = 0
    sessions_truncated: int = 0
    created: int = 0
    updated: int = 0
    deprecated: int = 0
    rejected: int = 0
    duplicates_skipped: int = 0
    llm_calls: int = 0
    restored: int = 0  # worlds put back to before this day's light sleep first (later places were done)
    stale_days: list[date] = field(default_factory=list)  # days whose later records those restores made stale
    per_world: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Worlds whose record was built from an answer the provider cut (the next run asks them again).
    worlds_truncated: list[str] = field(default_factory=list)
    # Every tool call the model made was refused and nothing applied: asked again at the next run.
    worlds_all_refused: list[str] = field(default_factory=list)
    worlds_at_once: int = 0  # the threads that asked the model (memory.sleep.worlds_at_once; one on SQLite)


def day_sessions(conn: Any, day: date, ctx: SleepContext) -> dict[str, list[SessionMaterial]]:
    """Sessions by world: each with its recallable messages of ``day`` (tool turns, empty turns,
    debug and cron conversations left out). A session spanning midnight gives only D's part."""
    start, end = day_bounds(day, ctx.tz)
    q = (
        select(
            conversations.c.world_id,
            messages.c.conversation_id,
            conversations.c.platform,
            conversations.c.title,
            messages.c.at,
            messages.c.role,
            messages.c.content,
        )
        .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
        .where(messages.c.at >= start, messages.c.at < end, messages.c.role.in_(RECALLABLE_ROLES))
        .where(counted_conversations())
        .order_by(conversations.c.world_id, messages.c.conversation_id, messages.c.at, messages.c.message_id)
    )
    grouped: dict[str, dict[str, list[Any]]] = defaultdict(dict)
    for w, conv, platform, title, at, role, content in conn.execute(q):
        if not (content or "").strip():
            continue
        grouped[w].setdefault(conv, [platform, title, []])[2].append((at, role, content))
    return {
        w: [SessionMaterial(c, p, t, tuple(lines)) for c, (p, t, lines) in sorted(convs.items())]
        for w, convs in grouped.items()
    }


def build_prompt(
    day: date, sessions: Sequence[SessionMaterial], state: MemoryState, system: str, ctx: SleepContext
) -> LightPrompt:
    """The three messages; over the budget, sessions are dropped oldest-updated first (and a
    session larger than the whole budget cut to its newest messages: prompts.fit_sessions) and
    message 1 ends with the truncation marker."""

    def m2_for(ids: set[str]) -> tuple[str, list[str]]:
        hits = [m for m in state.active() if ids & set(m.source_sessions)]
        return prompts.light_message_two(hits, ctx.tz), [m.id for m in hits]

    m3 = prompts.LIGHT_INSTRUCTIONS
    m2_all, _ = m2_for({s.session_id for s in sessions})
    head = len(prompts.light_message_one(day, [], 0)) + len(prompts.TRUNCATED) + 8
    budget = ctx.cfg.light_input_max_chars - len(system) - len(m2_all) - len(m3) - head
    fitted = prompts.fit_sessions(sessions, ctx.tz, budget)
    m1 = prompts.light_message_one(day, fitted.blocks, fitted.dropped)
    m2, m2_ids = m2_for(set(fitted.sessions))
    msgs = [{"role": "user", "content": m} for m in (m1, m2, m3)]
    return LightPrompt(
        system,
        msgs,
        fitted.sessions,
        fitted.dropped,
        len(system) + len(m1) + len(m2) + len(m3),
        m2_ids,
        fitted.cut,
    )


def system_for(ctx: SleepContext, blocks: dict[str, dict[str, str]], pinned: dict[str, list[str]], world: str) -> str:
    return prompts.system_prompt(ctx.cfg.block_names(), blocks.get(world, {}), pinned.get(world, []))


def material_fp(sessions: Sequence[SessionMaterial]) -> str:
    """The day's material of one world (every session's recallable lines, before truncation): a late
    message changes it; the state it is read against does not (that is the day order's business)."""
    return short_hash([astuple(s) for s in sessions], length=32)


def record_fields(prompt: LightPrompt, loop: LoopResult, stats: dict[str, int]) -> dict[str, Any]:
    """A world's light sleep record (``sleep_runs``) besides its key and input fingerprint."""
    return {
        "sessions": len(prompt.sessions),
        "sessions_truncated": prompt.truncated,
        "input_chars": prompt.input_chars,
        "llm_calls": loop.llm_calls,
        "tool_calls": loop.tool_calls,
        "applied": len(loop.changes),
        "rejected": len(loop.rejected),
        "created": stats["created"],
        "detail": {
            **stats,
            "session_ids": prompt.sessions,
            "sessions_cut": prompt.cut,
            "reply": loop.text[:500],
            "rejected_calls": [r["error"] for r in loop.rejected],
            "skipped_calls": [s["result"] for s in loop.skipped],
            **({ANSWERS_CUT: loop.cut} if loop.cut else {}),
            **({ALL_REFUSED: True} if all_refused(loop) else {}),
        },
    }


def ask_world(
    ctx: SleepContext,
    sessions: Sequence[SessionMaterial],
    state: MemoryState,
    prompt: LightPrompt,
    end_of_day: datetime,
    loop: LoopResult,
) -> None:
    """One world's light sleep with the model (its tool loop over ``state``, results in ``loop``);
    no call when no session fits the budget (message 1 would be empty)."""
    kept = set(prompt.sessions)
    sent = [s for s in sessions if s.session_id in kept]
    last_at = max((s.updated_at for s in sent), default=end_of_day)
    # A fact without observed_at takes its session's time: that session's last message of the day.
    times = {s.session_id: s.updated_at for s in sent}
    rules = Rules(
        Stage.LIGHT, LIGHT_TOOLS, last_at, frozenset(kept), frozenset(prompt.message_two_ids), session_times=times
    )
    candidates = set(prompt.message_two_ids)

    def guard(call: Any) -> str | None:
        dup = duplicate_of(state, call, candidates | {c.memory.id for c in state.changes})
        return f"skipped: duplicate of {dup} (already in message 2)" if dup else None

    if not prompt.sessions:
        loop.text = f"not asked: no session fits light_input_max_chars ({prompt.truncated} dropped)"
        return
    memory_loop(
        ctx,
        state,
        rules,
        task="light_sleep",
        system=prompt.system,
        messages=prompt.messages,
        tools=prompts.tools(LIGHT_TOOLS),
        guard=guard,
        result=loop,
    )


def run_light_sleep(ctx: SleepContext, day: date, world_ids: Sequence[str] | None = None) -> LightResult:
    out = LightResult()
    with ctx.store.connect() as conn:
        run = StageRun.open(conn, ctx, Stage.LIGHT, day, world_ids)
        by_world = day_sessions(conn, day, ctx)
        due = sorted(by_world)  # every world this place has (a filtered run leaves the others due)
        if world_ids is not None:
            by_world = {w: s for w, s in by_world.items() if w in set(world_ids)}
        worlds = sorted(by_world)
        fps = {w: material_fp(by_world[w]) for w in worlds}
        todo = [w for w in worlds if not run.reusable(w, fps[w])]
        active = run.prepare(conn, todo)
        taken = run.taken_ids(conn, todo)
        blocks, pinned = load_self_layer(conn, todo, ctx.cfg.pinned_top)
    end_of_day = day_bounds(day, ctx.tz)[1]
    asked: dict[str, _Asked] = {}
    for world in worlds:
        out.worlds += 1
        if world not in todo:
            prev = run.previous[world]  # the same material was extracted already: nothing to ask or write
            out.reused += 1
            out.sessions += prev["sessions"]
            out.sessions_truncated += prev["sessions_truncated"]
            continue
        sessions = by_world[world]
        state = MemoryState(world, active.get(world, []), salt=f"light:{day}", taken=taken.get(world, ()))
        prompt = build_prompt(day, sessions, state, system_for(ctx, blocks, pinned, world), ctx)
        asked[world] = _Asked(state, prompt, LoopResult())

    def ask(world: str, llm: LLMClient) -> _Asked:
        """The world's tool loop, in a thread of its own when worlds run at once (its own client)."""
        a = asked[world]
        ask_world(replace(ctx, llm=llm), by_world[world], a.state, a.prompt, end_of_day, a.loop)
        return a

    def failed(world: str, exc: BaseException) -> None:
        loop = asked[world].loop
        if isinstance(exc, Exception):
            run.failed(world, exc, {"llm_calls": loop.llm_calls, "changes_not_written": len(loop.changes)})

    def write(world: str, a: _Asked) -> None:
        prompt, loop = a.prompt, a.loop
        out.sessions += len(prompt.sessions)
        out.sessions_truncated += prompt.truncated
        ops = [str(c.op) for c in loop.changes]
        stats = {
            "created": ops.count("create"),
            "updated": ops.count("update"),
            "deprecated": ops.count("deprecate"),
            "rejected": len(loop.rejected),
            "duplicates_skipped": len(loop.skipped),
        }
        out.created += stats["created"]
        out.updated += stats["updated"]
        out.deprecated += stats["deprecated"]
        out.rejected += stats["rejected"]
        out.duplicates_skipped += stats["duplicates_skipped"]
        out.llm_calls += loop.llm_calls
        out.restored += world in run.ahead
        out.per_world[world] = {"sessions": len(prompt.sessions), "truncated": prompt.truncated, **stats}
        if loop.cut:
            out.worlds_truncated.append(world)
        refused = all_refused(loop)
        if refused:
            out.worlds_all_refused.append(world)
        # From a cut answer, or one whose every call was refused: no fingerprint, so no run takes the
        # day as extracted already (a model sending only broken calls left the day done and empty).
        fp = None if loop.cut or refused else fps[world]
        record = run.record(world, input_fp=fp, **record_fields(prompt, loop, stats))

        def changes(conn: Any) -> None:
            write_changes(conn, loop.changes, Provenance(Stage.LIGHT, day))

        run.commit(world, record, changes, active=a.state.active(), taken=a.state.taken)

    out.worlds_at_once = each_world(ctx.llm, list(asked), worlds_at_once(ctx), ask, write, failed)
    run.finish(out.worlds, out.per_world, worlds if world_ids is None else None, due)
    out.stale_days = sorted(run.stale_days)
    return out


def late_days(store: Store, tz: ZoneInfo) -> dict[date, datetime]:
    """Days whose light sleep ran before some of their recallable messages were ingested (late
    data), with the newest such ingest: two queries, whatever the history's length. Re-running
    light sleep for such a day asks the model only for the worlds whose material changed."""
    with store.connect() as conn:
        done: dict[date, datetime] = dict(
            conn.execute(
                select(sleep_runs.c.day, sleep_runs.c.finished_at).where(
                    sleep_runs.c.stage == str(Stage.LIGHT), sleep_runs.c.world_id == DAY_ROW
                )
            )
            .tuples()
            .all()
        )
        if not done:
            return {}
        q = (
            select(messages.c.at, messages.c.ingested_at)
            .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
            .where(messages.c.ingested_at > min(done.values()), messages.c.role.in_(RECALLABLE_ROLES))
            .where(counted_conversations(), messages.c.content != "")
        )
        out: dict[date, datetime] = {}
        for at, ingested in conn.execute(q):
            day = at.astimezone(tz).date()
            if day in done and ingested > done[day]:
                out[day] = max(out.get(day, ingested), ingested)
    return out
