"""Seed 002 I/O: which conversations are due (one grouped query per evaluation), the rolling
summary run (a new version per success; on failure nothing written and an event in the failure
log), the user's check and correction, and the injected history (never an LLM). Never writes
semantic memory or a conversation's messages."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict, cast
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, delete, func, select, update

from memory_pipeline.conversation import logic
from memory_pipeline.conversation.config import ConversationConfig
from memory_pipeline.conversation.logic import Backoff, FailingState, FailureKind, FormatError, Sections, Trigger
from memory_pipeline.conversation.tables import (
    conversation_init_status,
    conversation_summaries,
    conversation_summary_backoff,
    conversation_summary_failures,
    conversation_summary_requests,
    user_profile_facts,
)
from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.llm import LLMClient, LLMHardFailure, LLMProviderDown, LLMRequest, offline, offline_tools
from memory_pipeline.lib.store import Store, requests, upsert, world_ingested
from memory_pipeline.lib.store.tables import conversations, counted_conversations, messages
from memory_pipeline.lib.timeutil import local_date, utcnow

PROMPT_VERSION = "conversation-summary-v2"  # v2: dates allowed as timeline key points
RECALLABLE = ("user", "assistant")

TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": logic.TOOL,
        "description": "Write the rolling summary's four sections (the program lays out the Markdown).",
        "parameters": {
            "type": "object",
            "properties": {
                "emotional_arc": {"type": "string", "description": "3-5 sentences, never more than 10"},
                "preferences": {"type": "array", "items": {"type": "string"}},
                "emotional_key_points": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "topic": {"type": "string"},
                            "state": {"type": "string", "enum": list(logic.STATES)},
                        },
                    },
                },
                "unresolved_hooks": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["emotional_arc", "preferences", "emotional_key_points", "unresolved_hooks"],
        },
    },
}

INSTRUCTIONS = """# 对话历程摘要（作者视角）
压缩要保留情感脉络（哪些话题让用户投入 / 回避 / 情绪波动），而非流水账。本次总结的是上次摘要之后的新增部分，
与上一版摘要滚动合并（不是覆盖）。
不要：流水账（"用户讲了 A、B、C"）、罗列带日期的事件、摘抄台词；除非是时间线关键点，不写具体日期。
要（3-5 句，绝不超过 10 句）：情感主线；角色已知的用户偏好/重要事实；情感关键点（话题 → 投入 / 回避 / 波动）；未解决的钩子。
long_arc（角色自己的心事）优先于本摘要的情感基调：可以提到"用户聊到 X 让角色想起 arc"，但不改写 arc。
用 write_conversation_summary 一次写出四部分。程序会检查：引用原话（整句或长段照抄）、流水账、带日期的事件罗列
（时间线关键点可以带一个日期，全篇至多两个）、改写 long_arc 都会被拒绝，本次摘要作废、稍后重试。"""

LONG_ARC_HEAD = "# long_arc（角色自己的心事；情感基调以它为准。摘要可以提到它，不能改写它）"


class InputError(ValueError):
    """Bad input at an entry point: names the field; nothing written."""


# What a run stopped by the provider's breaker leaves (the end of its one line).
LEFT_FOR_NEXT_RUN = "the conversations not done stay due for the next run"


def _conv_id(value: Any, name: str = "conversation_id") -> str:
    problem = validate_id(value)
    if problem:
        raise InputError(f"field '{name}': {problem}")
    return str(value)


class StoredSections(TypedDict):
    """A summary version's four sections as its ``sections`` column holds them."""

    arc: str
    preferences: list[str]
    key_points: list[list[str]]  # [topic, 投入 / 回避 / 波动]
    hooks: list[str]


class SummaryRow(TypedDict):
    """One summary version (a ``conversation_summaries`` row)."""

    conversation_id: str
    version: int
    world_id: str
    content: str
    covered_start: int
    covered_end: int
    last_updated: datetime
    verified: bool
    verified_at: datetime | None
    check_line: str | None
    trigger: str
    model: str | None
    sections: StoredSections
    created_at: datetime


class HistoryEntry(TypedDict):
    """A recallable history entry, numbered L1..Ln (``n``) in its conversation."""

    n: int
    message_id: str
    role: str
    content: str
    at: datetime


class InjectedHistory(TypedDict):
    """What the agent gets as context (``injected_history``)."""

    long_arc: str | None
    summary: str | None
    entries: list[HistoryEntry]


class RequestAnswer(TypedDict):
    """``request``'s answer: the trigger recorded and when."""

    trigger: str
    requested_at: str


class CorrectionAnswer(TypedDict):
    """``correct_request``'s answer: the new version."""

    version: int


class ConfirmationAnswer(TypedDict):
    """``confirm_request``'s answer: the newest version, and whether it was verified just now."""

    version: int
    changed: bool


class Failing(TypedDict):
    """A conversation whose last attempts failed (``failing``)."""

    conversation_id: str
    consecutive_failures: int
    state: FailingState
    next_attempt: datetime | None
    last_error: str


class ConversationStatus(TypedDict):
    """``status``'s counts."""

    conversations_summarized: int
    summary_versions: int
    unverified: int
    failures_logged: int
    backing_off: int
    retry_due: int
    held: int
    open_requests: int
    initialization_done: int


@dataclass
class Due:
    conversation_id: str
    world_id: str
    trigger: Trigger
    entries: int
    covered_end: int


def _latest(conn: Any, ids: Sequence[str] | None = None) -> dict[str, SummaryRow]:
    newest = select(
        conversation_summaries.c.conversation_id, func.max(conversation_summaries.c.version).label("v")
    ).group_by(conversation_summaries.c.conversation_id)
    if ids is not None:
        newest = newest.where(conversation_summaries.c.conversation_id.in_(list(ids)))
    sub = newest.subquery()
    q = select(conversation_summaries).join(
        sub,
        (sub.c.conversation_id == conversation_summaries.c.conversation_id)
        & (sub.c.v == conversation_summaries.c.version),
    )
    # DB rows: conversation_summaries' columns, as SummaryRow names them.
    return {r["conversation_id"]: cast(SummaryRow, dict(r)) for r in conn.execute(q).mappings()}


def _counts(conn: Any) -> dict[str, tuple[str, int]]:
    q = (
        select(conversations.c.conversation_id, conversations.c.world_id, func.count(messages.c.message_id))
        .join(messages, messages.c.conversation_id == conversations.c.conversation_id)
        .where(messages.c.role.in_(RECALLABLE), messages.c.content != "")
        .where(counted_conversations())
        .group_by(conversations.c.conversation_id, conversations.c.world_id)
    )
    return {c: (w, n) for c, w, n in conn.execute(q)}


def backoffs(conn: Any, ids: Sequence[str] | None = None) -> dict[str, Backoff]:
    """The conversations whose last attempts failed, with how many in a row and the last error."""
    q = select(conversation_summary_backoff)
    if ids is not None:
        q = q.where(conversation_summary_backoff.c.conversation_id.in_(list(ids)))
    return {
        r["conversation_id"]: Backoff(r["consecutive_failures"], r["last_failure_at"], r["last_error"])
        for r in conn.execute(q).mappings()
    }


def due_conversations(store: Store, cfg: ConversationConfig, now: datetime | None = None) -> list[Due]:
    """Conversations that pass the gate and have a trigger, and are not waiting out a failure's
    backoff or held after too many in a row: five grouped queries, whatever the count."""
    now = now or utcnow()
    with store.connect() as conn:
        waiting = {
            c
            for c, b in backoffs(conn).items()
            if b.waiting(now, cfg.retry_backoff_minutes, cfg.max_consecutive_failures)
        }
        counts = _counts(conn)
        status: dict[str, str] = dict(
            conn.execute(select(conversation_init_status.c.conversation_id, conversation_init_status.c.status))
            .tuples()
            .all()
        )
        latest = _latest(conn)
        open_reqs: dict[str, str] = {}
        for c, trig in conn.execute(
            select(conversation_summary_requests.c.conversation_id, conversation_summary_requests.c.trigger)
            .where(conversation_summary_requests.c.done_at.is_(None))
            .order_by(conversation_summary_requests.c.request_id)
        ):
            open_reqs.setdefault(c, trig)
    out = []
    for conv, (world, n) in sorted(counts.items()):
        if conv in waiting:
            continue
        covered = latest[conv]["covered_end"] if conv in latest else 0
        explicit = conv in open_reqs
        if logic.due(status.get(conv), n, covered, explicit, cfg.min_entries):
            trig = Trigger(open_reqs[conv]) if explicit and n - covered < cfg.min_entries else Trigger.ENTRIES
            out.append(Due(conv, world, trig, n, covered))
    return out


def history(conn: Any, ids: Sequence[str]) -> dict[str, list[HistoryEntry]]:
    """Recallable entries by conversation, numbered L1..Ln, in one query."""
    q = (
        select(messages.c.conversation_id, messages.c.message_id, messages.c.role, messages.c.content, messages.c.at)
        .where(messages.c.conversation_id.in_(list(ids)), messages.c.role.in_(RECALLABLE), messages.c.content != "")
        .order_by(messages.c.conversation_id, messages.c.at, messages.c.message_id)
    )
    out: dict[str, list[HistoryEntry]] = defaultdict(list)
    for conv, mid, role, content, at in conn.execute(q):
        out[conv].append({"n": len(out[conv]) + 1, "message_id": mid, "role": role, "content": content, "at": at})
    return out


@dataclass
class RunResult:
    written: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # failed too many times in a row: waits for an operator
    not_done: list[str] = field(default_factory=list)  # not reached: the provider's breaker stopped the run
    # Failed because the answer was cut at the output limit (also in ``failed``): nothing written.
    truncated: list[str] = field(default_factory=list)


class ProviderStopped(LLMProviderDown):
    """The provider's breaker refused a summary's call (no request made): the run stopped there.
    That conversation and those after it were not asked (no failure recorded: they stay due);
    ``result`` says what the run did before, and lists them in ``not_done``."""

    def __init__(self, down: LLMProviderDown, result: RunResult):
        super().__init__(str(down))
        self.result = result


def _profile(conn: Any, worlds: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    q = (
        select(user_profile_facts.c.world_id, user_profile_facts.c.key, user_profile_facts.c.value)
        .where(user_profile_facts.c.world_id.in_(list(worlds)))
        .order_by(user_profile_facts.c.world_id, user_profile_facts.c.updated_at.desc(), user_profile_facts.c.key)
    )
    for w, k, v in conn.execute(q):
        out[w].append((k, v))
    return out


def _line(e: HistoryEntry, tz: ZoneInfo, limit: int) -> str:
    text = " ".join(str(e["content"]).split())[:limit]
    return f"L{e['n']} **{e['role']}** {text}"


def run(
    store: Store,
    llm: LLMClient,
    cfg: ConversationConfig,
    tz: ZoneInfo,
    due: Sequence[Due],
    now: datetime | None = None,
    long_arcs: Mapping[str, str] | None = None,
) -> RunResult:
    """A new summary version per due conversation; a failure writes nothing but its failure-log event.
    ``long_arcs``: each world's long_arc (the self layer's block, read by the caller): shown to the
    model, checked against its answer, never written."""
    out = RunResult()
    if not due:
        return out
    now = now or utcnow()
    ids = [d.conversation_id for d in due]
    worlds = sorted({d.world_id for d in due})
    with store.connect() as conn:
        hist = history(conn, ids)
        latest = _latest(conn, ids)
        profile = _profile(conn, worlds)
        failing = backoffs(conn, ids)
    arcs = long_arcs or {}

    def fail(d: Due, kind: FailureKind, message: str) -> None:
        """Nothing written but the failure-log event, ``<kind>: <message>``, and one more failure in
        a row (the next trigger retries after the backoff; too many in a row hold it)."""
        error = f"{kind}: {message}"[:2000]
        out.failed[d.conversation_id] = error
        before = failing.get(d.conversation_id)
        in_a_row = (before.consecutive if before else 0) + 1
        with store.begin() as conn:
            conn.execute(
                conversation_summary_failures.insert().values(
                    conversation_id=d.conversation_id,
                    at=now,
                    trigger=str(d.trigger),
                    error=error,
                    model=llm.model,
                )
            )
            upsert(
                conn,
                conversation_summary_backoff,
                [
                    {
                        "conversation_id": d.conversation_id,
                        "consecutive_failures": in_a_row,
                        "last_failure_at": now,
                        "last_error": error,
                    }
                ],
                keys=["conversation_id"],
            )
        if in_a_row >= cfg.max_consecutive_failures:
            out.held.append(d.conversation_id)

    for i, d in enumerate(due):
        entries = hist.get(d.conversation_id, [])
        prev = latest.get(d.conversation_id)
        if logic.is_haiku_class(llm.model):
            fail(
                d,
                FailureKind.HAIKU_CLASS,
                f"model {llm.model} is Haiku-class (seed: 不用 Haiku 压缩): refused before any call",
            )
            continue
        try:
            sections = _ask(llm, cfg, tz, d, entries, prev, arcs.get(d.world_id, ""))
        except FormatError as exc:
            fail(d, FailureKind(exc.kind), str(exc))
            if isinstance(exc, logic.TruncatedAnswer):
                out.truncated.append(d.conversation_id)
            continue
        except LLMHardFailure as exc:
            fail(d, FailureKind.MODEL, str(exc))
            continue
        except LLMProviderDown as exc:  # every later call would be refused too: stop here
            out.not_done = [x.conversation_id for x in due[i:]]
            raise ProviderStopped(exc, out) from None
        sections = Sections(
            sections.arc,
            logic.merge_preferences(profile.get(d.world_id, []), sections.preferences),
            sections.key_points,
            sections.hooks,
        )
        start = 1
        end = len(entries)
        until = local_date(entries[-1]["at"], tz) if entries else local_date(now, tz)
        text = logic.render(sections, until, now.astimezone(tz), start, end)
        if not logic.layout_ok(text):
            fail(d, FailureKind.FORMAT, "the rendered summary fails the seed's layout check")
            continue
        version = (prev["version"] + 1) if prev else 1
        with store.begin() as conn:
            conn.execute(
                conversation_summaries.insert().values(
                    conversation_id=d.conversation_id,
                    version=version,
                    world_id=d.world_id,
                    content=text,
                    covered_start=start,
                    covered_end=end,
                    last_updated=now,
                    verified=False,
                    check_line=logic.check_line(sections.arc),
                    trigger=str(d.trigger),
                    model=llm.model,
                    sections={
                        "arc": sections.arc,
                        "preferences": list(sections.preferences),
                        "key_points": [list(k) for k in sections.key_points],
                        "hooks": list(sections.hooks),
                    },
                    created_at=now,
                )
            )
            conn.execute(
                update(conversation_summary_requests)
                .where(
                    conversation_summary_requests.c.conversation_id == d.conversation_id,
                    conversation_summary_requests.c.done_at.is_(None),
                )
                .values(done_at=now, outcome=f"version {version}")
            )
            conn.execute(  # a success ends the failures in a row
                delete(conversation_summary_backoff).where(
                    conversation_summary_backoff.c.conversation_id == d.conversation_id
                )
            )
        out.written.append(d.conversation_id)
    return out


def _ask(
    llm: LLMClient,
    cfg: ConversationConfig,
    tz: ZoneInfo,
    d: Due,
    entries: list[HistoryEntry],
    prev: SummaryRow | None,
    long_arc: str = "",
) -> Sections:
    """The model's four sections, parsed and checked (layout, sentences, the author's view) against
    exactly the lines it was shown; FormatError / AuthorViewError otherwise (TruncatedAnswer for an
    answer cut at the output limit)."""
    previous = prev["content"] if prev else "（尚无摘要）"
    new_from = (prev["covered_end"] + 1) if prev else 1
    lines = "\n".join(_line(e, tz, cfg.entry_max_chars) for e in entries)
    msgs = [{"role": "user", "content": f"# 已有 summary（上次覆盖至 L{new_from - 1}）\n{previous}"}]
    if long_arc.strip():
        msgs.append({"role": "user", "content": f"{LONG_ARC_HEAD}\n{long_arc}"})
    msgs += [
        {"role": "user", "content": f"# RECENT_HISTORY（全量；本次总结 L{new_from} 起的新增部分）\n{lines}"},
        {"role": "user", "content": INSTRUCTIONS},
    ]
    req = LLMRequest(
        task="conversation_summary",
        system="你是角色的作者，维护与用户对话的滚动历程摘要。",
        user="conversation_summary",
        prompt_version=PROMPT_VERSION,
        world_id=d.world_id,
        tools=[TOOL_SCHEMA],
        conversation=tuple(msgs),
    )
    # The unit of work is this conversation's next summary: its ledger row names the conversation.
    partition, llm.partition = llm.partition, d.conversation_id
    try:
        answer = llm.complete(req, force=True)  # a failed answer is never reused
    finally:
        llm.partition = partition
    if answer.truncated:  # before its tool call is read: a cut answer is never a version
        raise logic.TruncatedAnswer(
            f"answer cut at the output limit (finish_reason length, {answer.tokens_out} output tokens): "
            "nothing written, asked again at a later trigger"
        )
    calls = [c for c in answer.tool_calls if c.get("name") == logic.TOOL]
    if not calls:
        other = sorted({str(c.get("name")) for c in answer.tool_calls})
        instead = f": it called {', '.join(repr(n) for n in other)} instead" if other else ": no tool call"
        raise FormatError(f"the model answered without write_conversation_summary{instead} (format error)")
    sections = logic.parse_sections(calls[0], cfg.max_sentences)
    shown = [(e["n"], " ".join(str(e["content"]).split())[: cfg.entry_max_chars]) for e in entries]
    logic.check_author_view(sections, shown, long_arc)
    return sections


# --- entry points: gate status, explicit triggers, the user's correction, the read path ------------


def _world_of(conn: Any, conversation_id: str) -> str:
    """The world of a stored conversation; a conversation never ingested is refused (a request or a
    gate status for it would wait for ever, and show in the status as open)."""
    q = select(conversations.c.world_id).where(conversations.c.conversation_id == conversation_id)
    world = conn.execute(q).scalar()
    if not world:
        raise InputError(f"field 'conversation_id': no conversation {conversation_id!r}")
    return str(world)


def set_init_status(store: Store, conversation_id: str, status: str) -> None:
    conversation_id = _conv_id(conversation_id)
    if status not in {s.value for s in logic.InitStatus}:
        raise InputError(f"field 'status': {status!r} is not one of pending, phase1_done, phase2_done, done")
    with store.begin() as conn:
        _world_of(conn, conversation_id)
        upsert(
            conn,
            conversation_init_status,
            [{"conversation_id": conversation_id, "status": status, "updated_at": utcnow()}],
            keys=["conversation_id"],
        )


REQUEST = "conversation_request"  # the kind of its request ids (lib.store.requests)


def request(
    store: Store, conversation_id: str, trigger: str, request_id: str | None = None
) -> tuple[RequestAnswer, bool]:
    """The user's memory check (user_check) or a preference override of a stored conversation:
    served at the sensor's next tick. With a caller-given ``request_id`` (per world) a repeated
    request answers the first one's answer and True, and records nothing."""
    conversation_id = _conv_id(conversation_id)
    if trigger not in (Trigger.USER_CHECK, Trigger.PREFERENCE_OVERRIDE):
        raise InputError(f"field 'trigger': {trigger!r} is not one of user_check, preference_override")
    if request_id is not None and (problem := requests.problem(request_id)):
        raise InputError(f"field 'request_id': {problem}")
    with store.connect() as conn:
        world = _world_of(conn, conversation_id)
    now = utcnow()

    def write(conn: Any) -> RequestAnswer:
        conn.execute(
            conversation_summary_requests.insert().values(
                conversation_id=conversation_id, trigger=trigger, requested_at=now
            )
        )
        return {"trigger": str(trigger), "requested_at": now.isoformat()}

    return requests.once(
        store, world, REQUEST, request_id, write, {"conversation": conversation_id, "trigger": trigger}
    )


def set_profile(store: Store, world_id: str, key: str, value: str, conversation_id: str | None = None) -> None:
    """A user-profile fact of an ingested world (newest wins); with one of that world's
    conversations, a preference-override trigger for it, in the same transaction."""
    problem = validate_id(world_id)
    if problem:
        raise InputError(f"field 'world_id': {problem}")
    if not isinstance(key, str) or not key.strip() or len(key) > 128 or "\x00" in key:
        raise InputError("field 'key': a non-empty string of at most 128 characters")
    if not isinstance(value, str) or not value.strip() or len(value) > 2000 or "\x00" in value:
        raise InputError("field 'value': a non-empty string of at most 2000 characters")
    if not world_ingested(store, world_id):
        raise InputError(f"field 'world_id': no such world {world_id!r}: nothing has been ingested for it")
    now = utcnow()
    with store.begin() as conn:
        if conversation_id is not None:
            conversation_id = _conv_id(conversation_id)
            if _world_of(conn, conversation_id) != world_id:  # named as absent: another world's is not its to see
                raise InputError(f"field 'conversation_id': no conversation {conversation_id!r} in world {world_id!r}")
            conn.execute(
                conversation_summary_requests.insert().values(
                    conversation_id=conversation_id, trigger=Trigger.PREFERENCE_OVERRIDE, requested_at=now
                )
            )
        upsert(
            conn,
            user_profile_facts,
            [{"world_id": world_id, "key": key.strip(), "value": value.strip(), "updated_at": now}],
            keys=["world_id", "key"],
        )


def correct(store: Store, conversation_id: str, arc: str, tz: ZoneInfo, now: datetime | None = None) -> int:
    """The user denied the check line: a new, verified version with their emotional arc (no silent
    false memory); the other sections and the covered range are kept."""
    return int(correct_request(store, conversation_id, arc, tz, now)[0]["version"])


CORRECTION = "conversation_correction"  # the kind of its request ids (lib.store.requests)


def correct_request(
    store: Store,
    conversation_id: str,
    arc: str,
    tz: ZoneInfo,
    now: datetime | None = None,
    request_id: str | None = None,
) -> tuple[CorrectionAnswer, bool]:
    """``correct`` once per caller-given ``request_id`` (per world): ``{"version": n}`` and False, or
    for a repeated id the first correction's answer and True, nothing written."""
    conversation_id = _conv_id(conversation_id)
    if request_id is not None and (problem := requests.problem(request_id)):
        raise InputError(f"field 'request_id': {problem}")
    now = now or utcnow()
    with store.connect() as conn:
        prev = _latest(conn, [conversation_id]).get(conversation_id)
    if prev is None:
        raise InputError(f"field 'conversation_id': {conversation_id!r} has no summary to correct")
    s = prev["sections"]
    sections = logic.parse_sections(
        {
            "name": logic.TOOL,
            "arguments": {
                "emotional_arc": arc,
                "preferences": s["preferences"],
                "emotional_key_points": [{"topic": t, "state": st} for t, st in s["key_points"]],
                "unresolved_hooks": s["hooks"],
            },
        }
    )
    m = re.search(r"## 最近情感主线（至 (\d{4}-\d{2}-\d{2})）", prev["content"])
    until = datetime.fromisoformat(m.group(1)).date() if m else local_date(now, tz)
    text = logic.render(sections, until, now.astimezone(tz), prev["covered_start"], prev["covered_end"])

    def write(conn: Any) -> CorrectionAnswer:
        conn.execute(
            conversation_summaries.insert().values(
                conversation_id=conversation_id,
                version=prev["version"] + 1,
                world_id=prev["world_id"],
                content=text,
                covered_start=prev["covered_start"],
                covered_end=prev["covered_end"],
                last_updated=now,
                verified=True,
                verified_at=now,
                check_line=None,
                trigger=str(Trigger.CORRECTION),
                model=None,
                sections={**s, "arc": sections.arc},
                created_at=now,
            )
        )
        return {"version": int(prev["version"]) + 1}

    return requests.once(
        store, prev["world_id"], CORRECTION, request_id, write, {"conversation": conversation_id, "arc": arc}
    )


def latest(store: Store, conversation_id: str) -> SummaryRow | None:
    """The newest summary version of a conversation (its row), or None: none written yet. InputError
    for an id never ingested (a mistyped id is not a conversation still waiting)."""
    conversation_id = _conv_id(conversation_id)
    with store.connect() as conn:
        row = _latest(conn, [conversation_id]).get(conversation_id)
        if row is None:
            _require_ingested(conn, conversation_id)
        return row


def _require_ingested(conn: Connection, conversation_id: str) -> None:
    known = conn.execute(
        select(conversations.c.conversation_id).where(conversations.c.conversation_id == conversation_id)
    ).first()
    if known is None:
        raise InputError(f"field 'conversation_id': no conversation {conversation_id!r} has been ingested")


def confirm(store: Store, conversation_id: str, version: int | None = None, now: datetime | None = None) -> bool:
    """The user said yes to the check line: the newest version is marked verified (its content is
    not touched). ``version``, when given, must be the newest: the user confirms the check line they
    were shown, never an older one. False when it was verified already (nothing changed)."""
    return bool(confirm_request(store, conversation_id, version, now)[0]["changed"])


CONFIRMATION = "conversation_confirmation"  # the kind of its request ids (lib.store.requests)


def confirm_request(
    store: Store,
    conversation_id: str,
    version: int | None = None,
    now: datetime | None = None,
    request_id: str | None = None,
) -> tuple[ConfirmationAnswer, bool]:
    """``confirm`` once per caller-given ``request_id`` (per world): ``{"version", "changed"}`` and
    False, or for a repeated id the first confirmation's answer and True, nothing written."""
    conversation_id = _conv_id(conversation_id)
    if request_id is not None and (problem := requests.problem(request_id)):
        raise InputError(f"field 'request_id': {problem}")
    with store.connect() as conn:
        newest = _latest(conn, [conversation_id]).get(conversation_id)
    if newest is None:
        raise InputError(f"field 'conversation_id': {conversation_id!r} has no summary to confirm")

    def write(conn: Any) -> ConfirmationAnswer:
        row = _latest(conn, [conversation_id])[conversation_id]  # versions are never removed
        if version is not None and version != row["version"]:
            raise InputError(
                f"field 'version': {version} is not the newest version of {conversation_id!r} ({row['version']}): "
                "only the newest check line can be confirmed"
            )
        if row["verified"]:
            return {"version": row["version"], "changed": False}
        conn.execute(
            update(conversation_summaries)
            .where(
                conversation_summaries.c.conversation_id == conversation_id,
                conversation_summaries.c.version == row["version"],
            )
            .values(verified=True, verified_at=now or utcnow())
        )
        return {"version": row["version"], "changed": True}

    arguments = {"conversation": conversation_id, "version": version}
    return requests.once(store, newest["world_id"], CONFIRMATION, request_id, write, arguments)


def retry(store: Store, conversation_id: str) -> Backoff:
    """An operator's explicit retry of a failing (held or backing off) conversation: its failures in
    a row are forgotten, so the next trigger asks again (the failure log keeps every event)."""
    conversation_id = _conv_id(conversation_id)
    with store.begin() as conn:
        state = backoffs(conn, [conversation_id]).get(conversation_id)
        if state is None:
            _require_ingested(conn, conversation_id)  # a mistyped id is not a healthy conversation
            raise InputError(f"field 'conversation_id': {conversation_id!r} has no failures to retry")
        conn.execute(
            delete(conversation_summary_backoff).where(
                conversation_summary_backoff.c.conversation_id == conversation_id
            )
        )
    return state


def injected_history(
    store: Store, conversation_id: str, cfg: ConversationConfig, long_arcs: Mapping[str, str] | None = None
) -> InjectedHistory:
    """What the agent gets as context (seed Step 4), in this order: the world's long_arc (it wins
    on emotional tone), then with trimming on the summary plus the last 20 entries, off the last 49.
    Raw events are never deleted either way. No LLM call."""
    conversation_id = _conv_id(conversation_id)
    with store.connect() as conn:
        entries = history(conn, [conversation_id]).get(conversation_id, [])
        prev = _latest(conn, [conversation_id]).get(conversation_id)
        world = conn.execute(
            select(conversations.c.world_id).where(conversations.c.conversation_id == conversation_id)
        ).scalar()
    arc = (long_arcs or {}).get(world) if world else None
    # long_arc comes first: on emotional tone it wins over the summary (seed: long_arc 优先).
    if cfg.trim_history and prev is not None:
        return {"long_arc": arc, "summary": prev["content"], "entries": entries[-cfg.trimmed_tail :]}
    return {"long_arc": arc, "summary": None, "entries": entries[-cfg.history_tail :]}


# --- the offline model's rule ----------------------------------------------------------------------


_LIKES = re.compile(r"(?:喜欢|爱|\blike\b|\blove\b)\s*([^\s，。！？,.!?；;]+(?:\s+[A-Za-z]+)?)", re.IGNORECASE)
# A like said negated ("I don't like", "never loved", "不喜欢", "没爱过"): the words just before it.
_NEGATED = re.compile(
    r"(?:\b(?:do|does|did|would|could)(?:n['’]?t|\s+not)|\bnever|\bnot|不|没有?)\s*(?:really\s+|真的|太)?$",
    re.IGNORECASE,
)


def _stances(users: Sequence[str]) -> dict[str, bool]:
    """What the user's lines say they like (True) or do not (False), oldest line first: a later
    line about the same thing replaces the earlier one and moves it last (seed 002: 以最近为准)."""
    stances: dict[str, bool] = {}
    for line in users:
        for m in _LIKES.finditer(line):
            thing = _join(logic.tokens(m.group(1))[:4])
            if thing:
                stances.pop(thing, None)
                stances[thing] = not _NEGATED.search(line[: m.start()])
    return stances


def _join(tokens: Sequence[str]) -> str:
    """Tokens back to text: CJK characters side by side, words apart."""
    out = ""
    for t in tokens:
        if out and out[-1].isascii() and t[0].isascii():
            out += " "
        out += t
    return out


def _own_words(text: str, lines: Sequence[tuple[int, str]], field: str = "unresolved_hooks") -> bool:
    """Whether ``text``, written in ``field``, passes the check the program runs on every answer."""
    sections = {
        "emotional_arc": Sections(text, (), (), ()),
        "preferences": Sections("。", (text,), (), ()),
    }.get(field, Sections("。", (), (), (text,)))
    try:
        logic.check_author_view(sections, lines)
    except logic.AuthorViewError:
        return False
    return True


def offline_rule(msgs: Sequence[dict[str, Any]], offered: frozenset[str]) -> tuple[str, list[dict[str, Any]]]:
    """Deterministic, not a language model, and in the author's view: the arc is three fixed
    sentences around the first three words of the offline headline of the user's lines (plus one
    that refers to long_arc when the world has one); each thing a user line says it likes (喜欢 / 爱 / like / love
    and at most the next four tokens) is a preference "用户喜欢…", or "用户不喜欢…" when the line says it
    negated ("don't like", "不喜欢"); the newest line about a thing wins, newest first; those three words are key points
    (投入); the words of the last user question make the unresolved hook. Whatever would still copy
    a line is left out (the arc falls back to one without the words)."""
    texts = [str(m.get("content") or "") for m in msgs if m.get("role") == "user"]
    body = next((t for t in texts if t.startswith("# RECENT_HISTORY")), "")
    has_arc = any(t.startswith(LONG_ARC_HEAD) for t in texts)
    shown = [ln.split(" ", 1) for ln in body.splitlines() if ln.startswith("L") and " **" in ln]
    lines = [(int(n[1:]), rest.split("** ", 1)[-1]) for n, rest in shown if n[1:].isdigit()]
    users = [ln.split("**user** ", 1)[1] for ln in body.splitlines() if "**user** " in ln]
    words = [w for w in offline.headline("\n".join(users), 60).split(offline.HEADLINE_SEPARATOR) if w] if users else []
    top = "、".join(words[:3]) or "日常"
    arc = f"这段时间用户主要在聊{top}。用户在这些话题上持续投入。整体情绪平稳，没有明显的回避。"
    if not _own_words(arc, lines, "emotional_arc"):
        arc = "这段时间用户的话题比较集中。用户在这些话题上持续投入。整体情绪平稳，没有明显的回避。"
    if has_arc and words:
        arc += f"聊到{words[0]}时，让角色想起自己的长线心事。"
    stated = [f"用户{'喜欢' if likes else '不喜欢'}{x}" for x, likes in reversed(_stances(users).items())]
    prefs = [p for p in stated if _own_words(p, lines, "preferences")][:5]  # the newest first
    questions = [u for u in users if u.rstrip().endswith(("?", "？"))]
    asked = (
        [w for w in offline.headline(questions[-1], 40).split(offline.HEADLINE_SEPARATOR) if w][:2] if questions else []
    )
    hooks = [h for h in ([f"用户关于{'、'.join(asked)}的问题还没有结论"] if asked else []) if _own_words(h, lines)]
    points = [{"topic": w, "state": "投入"} for w in words[:3] if _own_words(w, lines)]
    args = {"emotional_arc": arc, "preferences": prefs, "emotional_key_points": points, "unresolved_hooks": hooks}
    return json.dumps({"offline": True}), [{"name": logic.TOOL, "arguments": args}]


offline_tools.register("conversation_summary", offline_rule)


def failure_counts(store: Store) -> dict[str, int]:
    """Failures logged per conversation (a sensor's run key changes after each, so it retries)."""
    with store.connect() as conn:
        q = select(conversation_summary_failures.c.conversation_id, func.count()).group_by(
            conversation_summary_failures.c.conversation_id
        )
        return dict(conn.execute(q).tuples().all())


def layout_audit(store: Store) -> tuple[int, list[str]]:
    """Every newest summary version is in the seed's layout with at most 10 sentences in its arc."""
    with store.connect() as conn:
        latest = _latest(conn)
    problems = []
    for conv, row in sorted(latest.items()):
        if not logic.layout_ok(row["content"]):
            problems.append(f"{conv} v{row['version']}: layout differs from the seed's")
        if logic.sentences(row["sections"].get("arc", "")) > 10:
            problems.append(f"{conv} v{row['version']}: more than 10 sentences")
    return len(latest), problems


def failing(store: Store, cfg: ConversationConfig, now: datetime | None = None) -> list[Failing]:
    """Conversations whose last attempts failed: held (waits for `conversation retry`), backing off
    until ``next_attempt``, or due again at the next trigger once it has passed; with the last
    error. Reads only."""
    now = now or utcnow()
    with store.connect() as conn:
        states = backoffs(conn)
    out: list[Failing] = []
    for conv, b in sorted(states.items()):
        state = b.state(now, cfg.retry_backoff_minutes, cfg.max_consecutive_failures)
        out.append(
            {
                "conversation_id": conv,
                "consecutive_failures": b.consecutive,
                "state": state,
                "next_attempt": None if state == FailingState.HELD else b.next_attempt(cfg.retry_backoff_minutes),
                "last_error": b.last_error,
            }
        )
    return out


def status(store: Store, cfg: ConversationConfig | None = None, now: datetime | None = None) -> ConversationStatus:
    cfg = cfg or ConversationConfig()
    with store.connect() as conn:
        versions = conn.execute(select(func.count()).select_from(conversation_summaries)).scalar_one()
        convs = conn.execute(select(func.count(func.distinct(conversation_summaries.c.conversation_id)))).scalar_one()
        unverified = sum(1 for r in _latest(conn).values() if not r["verified"])
        failures = conn.execute(select(func.count()).select_from(conversation_summary_failures)).scalar_one()
        open_requests = conn.execute(
            select(func.count())
            .select_from(conversation_summary_requests)
            .where(conversation_summary_requests.c.done_at.is_(None))
        ).scalar_one()
        done = conn.execute(
            select(func.count())
            .select_from(conversation_init_status)
            .where(conversation_init_status.c.status == "done")
        ).scalar_one()
    states = [f["state"] for f in failing(store, cfg, now)]
    return {
        "conversations_summarized": convs,
        "summary_versions": versions,
        "unverified": unverified,
        "failures_logged": failures,
        "backing_off": states.count(FailingState.BACKING_OFF),
        "retry_due": states.count(FailingState.RETRY_DUE),
        "held": states.count(FailingState.HELD),
        "open_requests": open_requests,
        "initialization_done": done,
    }
