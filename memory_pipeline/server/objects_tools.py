"""Seed 001's read tools on the memory server: ``objects/find``, ``objects/read``,
``objects/evidence`` and ``objects/status``, the object memory's recall (objects.recall) and status
(objects.reports) as ``memory-pipeline objects find / read / evidence / inspect status`` give them,
each for one world of the caller's token. Read-only; never calls a model."""

from __future__ import annotations

from typing import Any

from memory_pipeline.lib.store.requests import RequestConflict
from memory_pipeline.objects import logic, recall, reports
from memory_pipeline.server import paging
from memory_pipeline.server.auth import require_text, require_world
from memory_pipeline.server.tools import Access, ToolRegistry
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.logic import TowerInputError

TOOL_NAMES = (
    "objects/find",
    "objects/read",
    "objects/evidence",
    "objects/status",
    "objects/organize",
    "objects/approve",
    "objects/resident",
)

LIMIT_MAX = 100
QUERY_MAX_CHARS = 500
WORLD_DOC = " `world`: one of the token's worlds."
PAGE_DOC = (
    f" `limit` (1-{LIMIT_MAX}, default {recall.PAGE}) and `cursor` (the previous page's `next_cursor`) page the "
    "answer: `total` items match, `next_cursor` is null on the last page."
)


def _page(tool: str, query: dict[str, Any], limit: int | None, cursor: str | None) -> paging.Page:
    return paging.page(tool, query, limit, cursor, default=recall.PAGE, maximum=LIMIT_MAX)


def _object_id(value: str) -> None:
    try:
        logic.parse_object_id(value, "id")
    except logic.SubmissionError as exc:
        raise TowerInputError("id", exc.problem) from None


def register(reg: ToolRegistry, tower: Tower) -> None:
    store = tower.store

    @reg.tool(
        name="objects/find",
        description="Find objects (people, projects, places, ...) of `world` whose name, alias, cue or words "
        f"match `query` (at most {QUERY_MAX_CHARS} characters), best first (live before archived), then the "
        "direct members of a matched project; each with id, type, name, aliases, summary, body, cues, status "
        "and score. No embeddings; never calls a model." + WORLD_DOC + PAGE_DOC,
        access=Access.READ,
    )
    def find(world: str, query: str, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        require_world(tower.store, world)
        require_text("query", query)  # a lone surrogate, as the command line's memory_find refuses it
        if not query.strip():
            raise TowerInputError("query", "must not be empty")
        if len(query) > QUERY_MAX_CHARS:
            raise TowerInputError("query", f"at most {QUERY_MAX_CHARS} characters")
        p = _page("objects/find", {"world": world, "query": query}, limit, cursor)
        items, total = recall.find_page(store, world, query, p.offset, p.limit, tz=tower.tz)
        return {"world": world, "items": items, **p.answer(total, len(items))}

    @reg.tool(
        name="objects/read",
        description="Read one object of `world` by `id` ('<type>:<key>', as objects/find returns it): the "
        "whole dossier, its relations both ways and its sources (event ids and times). Never calls a model."
        + WORLD_DOC,
        access=Access.READ,
    )
    def read(world: str, id: str) -> dict[str, Any]:
        require_world(tower.store, world)
        _object_id(id)
        doc = recall.read(store, world, id, tz=tower.tz)
        if doc is None:
            raise TowerInputError("id", f"no object {id} in world {world}")
        return dict(doc)  # the tool's answer as it declares it (its output schema)

    @reg.tool(
        name="objects/evidence",
        description="The evidence of one object of `world` by `id`: its attachments expanded to the raw event "
        "text, oldest first. Never calls a model." + WORLD_DOC + PAGE_DOC,
        access=Access.READ,
    )
    def evidence(world: str, id: str, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        require_world(tower.store, world)
        _object_id(id)
        p = _page("objects/evidence", {"world": world, "id": id}, limit, cursor)
        answer = recall.evidence(store, world, id, p.offset, p.limit, tz=tower.tz)
        if answer is None:
            raise TowerInputError("id", f"no object {id} in world {world}")
        items = answer["items"]
        return {"object_id": id, "items": items, **p.answer(recall.evidence_count(store, world, id), len(items))}

    @reg.tool(
        name="objects/status",
        description="The object memory's status for `world`: events per state, whether all are organized "
        "(`complete`), the earliest unfinished and the not-organized events, jobs per mode and status, the "
        "newest failures, the worker's error and flags, the Markdown projection's lag. Never calls a model."
        + WORLD_DOC,
        access=Access.READ,
    )
    def status(world: str) -> dict[str, Any]:
        require_world(tower.store, world)
        return {"world": world, **reports.status(store, world, tz=tower.tz)}

    register_writes(reg, tower)


def _octx(tower: Tower) -> Any:
    from memory_pipeline.lib.llm import LLMClient
    from memory_pipeline.objects import config as objects_config
    from memory_pipeline.objects.context import ObjectsContext

    # The writes here only record requests and approvals: the client is never called (jobs run in Dagster).
    llm = LLMClient.from_settings(tower.store, asset="memory_server")
    return ObjectsContext(tower.store, llm, objects_config.load(), tower.tz)


def register_writes(reg: ToolRegistry, tower: Tower) -> None:
    """memory_organize, memory_approve and the resident view (seed 001 §3, §4)."""
    from sqlalchemy.exc import IntegrityError

    from memory_pipeline.lib.text import short_hash
    from memory_pipeline.objects import graph, worker
    from memory_pipeline.server.conversation_tools import REQUEST_DOC, request_id_problem

    octx = _octx(tower)

    @reg.tool(
        name="objects/organize",
        description="memory_organize for `world`: queue a `mode` job (compact | organize | deep; default "
        "organize) with `scope`, a goal and search hint for the model (never a filter), and with "
        "`retry_blocked` release the world's blocked events. Answers the enqueue receipt at once; the "
        "job runs in the object memory's Dagster runs, never inside this call (`objects_enabled` false: none "
        "takes it until memory.objects.enabled is true)." + WORLD_DOC + REQUEST_DOC,
        access=Access.WRITE,
    )
    def organize(
        world: str, request_id: str, mode: str = "organize", scope: str = "", retry_blocked: bool = False
    ) -> dict[str, Any]:
        require_world(tower.store, world)
        require_text("scope", scope)
        request_id_problem(request_id)
        # The domain's request token, per world: one world's ids never replay another's receipt.
        token = f"mcp.{short_hash([world, request_id], 40)}"
        try:
            try:
                receipt = worker.enqueue(octx, world, mode, scope, retry_blocked, token)
            except IntegrityError:  # the same id at once: the other call was first
                receipt = worker.enqueue(octx, world, mode, scope, retry_blocked, token)
        except worker.RequestError as exc:
            field, _, problem = str(exc).partition(": ")
            raise TowerInputError(field, problem) from None
        except RequestConflict:
            raise RequestConflict(request_id) from None  # the caller's id, not the domain's token
        # Off, the job stays queued until memory.objects.enabled is true (as `objects organize` warns).
        return {"world": world, **receipt, "objects_enabled": octx.cfg.enabled}

    @reg.tool(
        name="objects/approve",
        description="The user's approval, relayed after asking them: the candidate project `id` "
        "('project:<key>') of `world` becomes active. Never calls a model." + WORLD_DOC + REQUEST_DOC,
        access=Access.WRITE,
    )
    def approve(world: str, id: str, request_id: str) -> dict[str, Any]:
        require_world(tower.store, world)
        _object_id(id)
        request_id_problem(request_id)
        try:
            result, replayed = graph.approve_request(octx, world, id, request_id)
        except logic.SubmissionError as exc:
            raise TowerInputError("id" if exc.field == "object_id" else exc.field, exc.problem) from None
        return {"world": world, **result, "replayed": replayed}

    @reg.tool(
        name="objects/resident",
        description="What the agent of `world` holds every turn: the core documents (AGENTS.md, SOUL.md, "
        "USER.md; any may be absent), a bounded directory of object ids and names (never the dossiers: "
        "recall is on demand) and the hot timeline within its byte cap (`hot_nodes_shown` of "
        "`hot_nodes_total`). Never calls a model." + WORLD_DOC,
        access=Access.READ,
    )
    def resident(world: str) -> dict[str, Any]:
        require_world(tower.store, world)
        return {"world": world, **recall.resident(tower.store, world, octx.cfg.hot_view_max_bytes)}
