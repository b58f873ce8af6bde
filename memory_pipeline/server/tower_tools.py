"""Seed 004's 13 ``mem/*`` tools on the memory server (the seed fixes the count and the groups:
type management, append, structural recall, semantic recall, summarize, recompute, and the status
of asynchronous summarize jobs), each one the tower's Python API unchanged in meaning, behind the
caller's token. The SDK logs a warning about the ``/`` in these names; they are kept, as the seed
names ``mem/summarize``. Only ``mem/summarize``, ``mem/recompute`` and ``mem/get_summary`` with
``summarize_on_miss`` may cause LLM calls, and only as jobs.

Worlds in the tower are groups: the activity type groups by world id, and a token's worlds are the
group values it reaches in every type (worklog groups by project). A token of some worlds must name
``group`` (one of them) on every call that reads or writes a type's memory; an entry appended goes
to its group (explicit, or the type's group field in its content), which must be one of them too;
jobs are seen only for its groups. Type definitions carry no memory: any token lists and reads
them, and a writable one creates them; changing or archiving a type needs a writable token holding
every world with entries in it, and the built-in types (shared by all worlds) an --all-worlds token.
A type with no group field holds the memory of no world: only an --all-worlds token reaches it."""

from __future__ import annotations

import contextlib
from typing import Any

from memory_pipeline.access.logic import AccessError, Grant
from memory_pipeline.lib.jsontypes import JSONObject
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.server import paging
from memory_pipeline.server.auth import caller
from memory_pipeline.server.tools import Access, ToolRegistry, note_worlds
from memory_pipeline.tower import entries as entries_io
from memory_pipeline.tower import types as types_io
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.logic import TowerInputError, WindowQuery, encode_cursor, validate_entry

TOOL_NAMES = (
    "mem/create_type",
    "mem/list_types",
    "mem/get_type",
    "mem/update_type",
    "mem/delete_type",
    "mem/append",
    "mem/windows",
    "mem/recall",
    "mem/get_summary",
    "mem/summarize",
    "mem/recompute",
    "mem/job_status",
    "mem/list_jobs",
)

WINDOW_DOC = (
    " The window is `granularity` (a level of the type's chain) + `anchor` (a date YYYY-MM-DD or an ISO "
    "datetime with offset inside it), or `from` + `to` (ISO datetimes: an irregular window such as a task phase)."
)
PAGE_DOC = (
    " `limit` (default 100, max 1000) and `cursor` (the previous page's `next_cursor`) page the answer: `total` "
    "items match, `next_cursor` is null on the last page."
)
GROUP_DOC = " `group`: a group value (in the activity type, a world id); a token of some worlds must name one of them."


def scoped_group(grant: Grant, group: str | None) -> None:
    """A call naming no group spans every group: only for a token of every world."""
    if grant.all_worlds:
        return
    if group is None:
        held = ", ".join(sorted(grant.worlds))
        raise AccessError(f"group: required: this token reads only its worlds ({held})")
    grant.require_world(group)


def _require_world_groups(grant: Grant, group_field: Any, where: str) -> None:
    """A token of some worlds appends only to its worlds' groups: a type it creates or changes
    grouped by no world is one it could never append to again."""
    if not grant.all_worlds and group_field in (None, ""):
        raise AccessError(
            f"{where}: required: this token appends only to its worlds' groups (only an --all-worlds token "
            "has a type grouped by no world)"
        )


def _may_change_type(tower: Tower, grant: Grant, name: Any) -> None:
    t = types_io.get(tower.store, name, "name")  # an unknown or bad name: the tower's own refusal
    if grant.all_worlds:
        return
    if t.builtin:
        raise AccessError(f"type {t.name!r}: built in, shared by every world: only an --all-worlds token changes it")
    # Whose type it is decides first: the refusal of another's type never depends on who wrote to it.
    if t.owner_worlds is None or not all(grant.holds(w) for w in t.owner_worlds):
        raise AccessError(
            f"type {t.name!r}: not created by this token's worlds: only its creator or an --all-worlds token changes it"
        )
    if any(not grant.holds(g) for g in entries_io.groups_of(tower.store, t.name)):
        raise AccessError(f"type {t.name!r}: holds memory of a world this token does not hold")


def _may_append(tower: Tower, grant: Grant, type_name: Any, entries: list[Any]) -> None:
    """Each entry's group must be one of the token's worlds (a bad entry: the tower's own refusal)."""
    t = types_io.get(tower.store, type_name)
    if t.group_field is None:
        # Before the entries: with a group or without, this token never appends here (an entry's
        # group drew "this type has no group field", as if leaving it out would do).
        raise AccessError(f"type {t.name!r}: groups by no world: only an --all-worlds token appends to it")
    now = utcnow()
    items = entries if isinstance(entries, list) else [entries]
    for i, raw in enumerate(items):
        where = f"entries[{i}]"
        group = validate_entry(raw, group_field=t.group_field, now=now, where=where).group
        if group != "":
            note_worlds([group])  # the call's log names it, refused or not, as another tool's world
            grant.require_world(group)
        else:  # the entry names no group: it would land in the empty one, which is no world's
            raise TowerInputError(
                f"content.{t.group_field}",
                "missing: the type groups by it, and this token appends only to its worlds",
                where,
            )


def _append_groups(tower: Tower, type_name: Any, entries: list[Any]) -> set[str]:
    """The groups an --all-worlds token's append names, for the call's log: the tower refuses a bad
    type or entry itself, in its own order."""
    try:
        t = types_io.get(tower.store, type_name)
    except TowerInputError:
        return set()
    now, groups = utcnow(), set[str]()
    for raw in entries if isinstance(entries, list) else [entries]:
        with contextlib.suppress(TowerInputError):
            groups.add(validate_entry(raw, group_field=t.group_field, now=now).group)
    return groups


def _tower_page(tower: Tower, tool: str, query: dict[str, Any], limit: int | None, cursor: str | None) -> paging.Page:
    cfg = tower.cfg
    return paging.page(tool, query, limit, cursor, default=cfg.recall_default_limit, maximum=cfg.recall_max_limit)


def _paged(p: paging.Page, answer: dict[str, Any], total: int) -> dict[str, Any]:
    """The tower's page with the server's cursor: the tower pages by offset, the server's cursor
    also binds the tool and the query."""
    return {**answer, **p.answer(total, answer["returned"])}


def _total(answer: JSONObject, *counts: str) -> int:
    """The sum of the answer's counts (ints the tower sets; a count the answer's shape has not is 0)."""
    total = 0
    for name in counts:
        n = answer.get(name, 0)
        assert isinstance(n, int)
        total += n
    return total


def _at(p: paging.Page) -> str | None:
    """The tower's own cursor for the page's offset."""
    return encode_cursor(p.offset) if p.offset else None


def register(reg: ToolRegistry, tower: Tower) -> None:
    tool = reg.tool

    @tool(
        name="mem/create_type",
        description="Create a memory type. Name: [A-Za-z0-9_/-]+ (no '..', no "
        "leading or trailing '/'). chain: granularities from 10min, 30min, 1h, 3h, day, week, month "
        "(default 10min → 30min → 1h → day → week); summaries: semantic summaries on (default off); "
        "group_field: e.g. project; retention: declared only (never enforced); summary_cap: default week.",
        access=Access.WRITE,
    )
    def create_type(
        name: str,
        description: str = "",
        chain: list[str] | None = None,
        summaries: bool = False,
        group_field: str | None = None,
        retention: str | None = None,
        summary_cap: str | None = None,
    ) -> dict[str, Any]:
        grant = caller()
        _require_world_groups(grant, group_field, "group_field")
        return dict(
            tower.create_type(
                name,
                owner_worlds=None if grant.all_worlds else sorted(grant.worlds),
                description=description,
                chain=chain,
                summaries=summaries,
                group_field=group_field,
                retention=retention,
                summary_cap=summary_cap,
            )
        )

    @tool(
        name="mem/list_types",
        description="List memory types (archived ones with include_archived)." + PAGE_DOC,
        access=Access.READ,
    )
    def list_types(
        include_archived: bool = False, limit: int | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        p = _tower_page(tower, "mem/list_types", {"include_archived": include_archived}, limit, cursor)
        types, page = p.slice(tower.list_types(include_archived))
        return {"types": types, **page}

    @tool(
        name="mem/get_type",
        description="Show one memory type: chain, summaries switch, cap, group "
        "field, declared retention, its two series.",
        access=Access.READ,
    )
    def get_type(name: str) -> dict[str, Any]:
        return dict(tower.get_type(name))

    @tool(
        name="mem/update_type",
        description="Update a type (not its name): description, chain, "
        "summaries, group_field, retention, summary_cap, given in `changes`.",
        access=Access.WRITE,
    )
    def update_type(name: str, changes: dict[str, Any]) -> dict[str, Any]:
        grant = caller()
        _may_change_type(tower, grant, name)
        if "group_field" in changes:
            _require_world_groups(grant, changes["group_field"], "changes.group_field")
        return dict(tower.update_type(name, changes))

    @tool(
        name="mem/delete_type",
        description="Archive a type: appends are refused, recall still works, "
        "the name stays reserved; no entry or summary is ever deleted. worklog cannot be deleted.",
        access=Access.WRITE,
    )
    def delete_type(name: str) -> dict[str, Any]:
        _may_change_type(tower, caller(), name)
        return dict(tower.delete_type(name))

    @tool(
        name="mem/append",
        description="Append entries to a type's raw series (append-only). Each entry: "
        "{content: any JSON or text, at?: ISO datetime (default now), id?: idempotency key, group?: "
        "the type's group value}. A bad entry refuses the whole call, naming the entry and field. "
        "A token of some worlds appends only to groups that are its worlds.",
        access=Access.WRITE,
    )
    def append(type: str, entries: list[Any]) -> dict[str, Any]:
        grant = caller()
        if grant.all_worlds:
            note_worlds(_append_groups(tower, type, entries))  # its worlds are its entries' groups
            return dict(tower.append(type, entries, source="mcp"))
        _may_append(tower, grant, type, entries)
        answer = dict(tower.append(type, entries, source="mcp"))
        # The refreshed days rebuild every group's windows: their count would say how many the other
        # worlds have. The days are the caller's own entries'.
        answer.pop("late_windows_refreshed")
        return answer

    @tool(
        name="mem/windows",
        description="Structural recall, one level at a time: the windows of a "
        "level, or (with anchor) a window's children, with entry counts and staleness. Never calls an LLM."
        + PAGE_DOC
        + GROUP_DOC,
        access=Access.READ,
    )
    def windows(
        type: str,
        granularity: str | None = None,
        anchor: str | None = None,
        group: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        scoped_group(caller(), group)
        query = {"type": type, "granularity": granularity, "anchor": anchor, "group": group}
        p = _tower_page(tower, "mem/windows", query, limit, cursor)
        window = WindowQuery.parse(granularity, anchor, group=group)
        answer = tower.windows(type, window, limit=p.limit, cursor=_at(p))
        return _paged(p, answer, _total(answer, "total_windows"))

    @tool(
        name="mem/recall",
        description="Exact recall: resolve a window to its raw entries by walking the "
        "references; returns the raw volume (navigation, not compression), with total entries and "
        "characters. Never calls an LLM." + PAGE_DOC + WINDOW_DOC + GROUP_DOC,
        access=Access.READ,
    )
    def recall(
        type: str,
        granularity: str | None = None,
        anchor: str | None = None,
        from_: str | None = None,
        to: str | None = None,
        group: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        scoped_group(caller(), group)
        query = {"type": type, "granularity": granularity, "anchor": anchor, "from": from_, "to": to, "group": group}
        p = _tower_page(tower, "mem/recall", query, limit, cursor)
        window = WindowQuery.parse(granularity, anchor, from_, to, group)
        answer = tower.recall(type, window, limit=p.limit, cursor=_at(p))
        return _paged(p, answer, _total(answer, "total_entries"))

    @tool(
        name="mem/get_summary",
        description="Semantic recall: the stored summary (state found), or "
        "missing / empty, or open (a window not closed yet, summarized once it closes); a range wider than "
        "the cap returns the cap-level summaries of the windows overlapping it and the gaps (stretches of "
        "closed windows with no summary, with their entry counts; the window now is a gap with open: true, "
        "later ones are none). With "
        "summarize_on_miss a summarize job starts for the page's missing groups (never for an empty window; "
        "a writable token only)." + PAGE_DOC + WINDOW_DOC + GROUP_DOC,
        access=Access.READ,
    )
    def get_summary(
        type: str,
        granularity: str | None = None,
        anchor: str | None = None,
        from_: str | None = None,
        to: str | None = None,
        group: str | None = None,
        summarize_on_miss: bool = False,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        grant = caller()
        scoped_group(grant, group)
        if summarize_on_miss:  # starts jobs that write summaries
            grant.require_write("mem/get_summary with summarize_on_miss")
        query = {"type": type, "granularity": granularity, "anchor": anchor, "from": from_, "to": to, "group": group}
        p = _tower_page(tower, "mem/get_summary", query, limit, cursor)
        window = WindowQuery.parse(granularity, anchor, from_, to, group)
        answer = tower.get_summary(type, window, summarize_on_miss=summarize_on_miss, limit=p.limit, cursor=_at(p))
        # One window: its groups, each found or missing; wider than the cap: summaries and gaps.
        return _paged(p, answer, _total(answer, "total_summaries", "total_missing_groups", "total_gaps"))

    @tool(
        name="mem/summarize",
        description="Start summarize jobs (one per group) over a closed, settled "
        "window, bottom-up over the chain (a from/to window from raw). Returns job ids at once."
        + WINDOW_DOC
        + GROUP_DOC,
        access=Access.WRITE,
    )
    def summarize(
        type: str,
        granularity: str | None = None,
        anchor: str | None = None,
        from_: str | None = None,
        to: str | None = None,
        group: str | None = None,
    ) -> dict[str, Any]:
        scoped_group(caller(), group)
        return dict(tower.summarize(type, WindowQuery.parse(granularity, anchor, from_, to, group)))

    @tool(
        name="mem/recompute",
        description="Start recompute jobs: rebuild a window's summary from the raw "
        "entries, bypassing the chain (faithful, costs more tokens). Returns job ids at once." + WINDOW_DOC + GROUP_DOC,
        access=Access.WRITE,
    )
    def recompute(
        type: str,
        granularity: str | None = None,
        anchor: str | None = None,
        from_: str | None = None,
        to: str | None = None,
        group: str | None = None,
    ) -> dict[str, Any]:
        scoped_group(caller(), group)
        return dict(tower.recompute(type, WindowQuery.parse(granularity, anchor, from_, to, group)))

    @tool(
        name="mem/job_status",
        description="State of a summarize job: queued, running, succeeded, "
        "skipped_empty, failed or given_up, with the summary record id.",
        access=Access.READ,
    )
    def job_status(job_id: str) -> dict[str, Any]:
        answer = tower.job_status(job_id)
        # Another world's job is answered as no job at all: neither its world nor that it exists.
        if not caller().holds(answer["group"]):
            raise TowerInputError("job_id", f"no job {job_id!r}")
        return dict(answer)

    @tool(
        name="mem/list_jobs",
        description="Recent summarize jobs, newest first (filter by type, state); only the jobs of the token's "
        "worlds." + PAGE_DOC,
        access=Access.READ,
    )
    def list_jobs(
        type: str | None = None, state: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        grant = caller()
        groups = None if grant.all_worlds else grant.worlds
        # The token's worlds are part of the query: another token's cursor does not continue it.
        query = {"type": type, "state": state, "groups": sorted(groups) if groups is not None else None}
        p = _tower_page(tower, "mem/list_jobs", query, limit, cursor)
        jobs = tower.list_jobs(type, state, p.limit, groups=groups, offset=p.offset)
        return {"jobs": jobs, **p.answer(tower.count_jobs(type, state, groups=groups), len(jobs))}
