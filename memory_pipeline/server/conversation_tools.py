"""Seed 002 on the memory server: ``conversation/summary`` (the rolling summary of one conversation
and, while unverified, its check line), ``conversation/check`` (the user's memory check: a new
version asked of the summary sensor), ``conversation/confirm`` (the user said yes to the check
line) and ``conversation/correct`` (the user said no: a new verified version with their own
emotional arc), as ``memory-pipeline conversation show / check / confirm / correct`` give them
(conversation.summaries). The
conversation must be one of ``world``'s: another world's is refused as a missing one is, with
nothing of it. Never calls an LLM."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from memory_pipeline.conversation import config as conversation_config
from memory_pipeline.conversation import summaries
from memory_pipeline.conversation.logic import FormatError
from memory_pipeline.lib import settings
from memory_pipeline.lib.ids import validate_id
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store import requests as request_ids
from memory_pipeline.lib.store.tables import conversations
from memory_pipeline.lib.timeutil import zone
from memory_pipeline.server.auth import require_text, require_world
from memory_pipeline.server.tools import Access, ToolRegistry
from memory_pipeline.sleep.memory import self_block_of
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.logic import TowerInputError

TOOL_NAMES = ("conversation/summary", "conversation/check", "conversation/confirm", "conversation/correct")

WORLD_DOC = " `world`: one of the token's worlds."
REQUEST_DOC = (
    " `request_id`: the caller's id of this write (the id alphabet): a repeated call with it writes "
    "nothing and returns the first answer (`replayed` true); the id with other arguments is refused."
)


def owned_conversation(store: Store, world: str, field: str, conversation_id: str) -> None:
    """``conversation_id`` is a conversation of ``world``; a missing one and another world's get the
    same one line (a world learns nothing about another)."""
    if problem := validate_id(conversation_id):
        raise TowerInputError(field, problem)
    with store.connect() as conn:
        q = select(conversations.c.world_id).where(conversations.c.conversation_id == conversation_id)
        owner = conn.execute(q).scalar()
    if owner != world:
        raise TowerInputError(field, f"no conversation {conversation_id!r} in world {world!r}")


def request_id_problem(request_id: str) -> None:
    if problem := request_ids.problem(request_id):
        raise TowerInputError("request_id", problem)


def domain_error(exc: Exception, names: dict[str, str]) -> TowerInputError:
    """The domain's one line ("field 'x': problem") as the server's input error, the domain's
    field named as the tool's argument (``names``)."""
    text = str(exc)
    if text.startswith("field '") and "': " in text:
        field, problem = text[len("field '") :].split("': ", 1)
        return TowerInputError(names.get(field, field), problem)
    return TowerInputError("arguments", text)


def register(reg: ToolRegistry, tower: Tower) -> None:
    store = tower.store
    cfg = conversation_config.load()

    @reg.tool(
        name="conversation/summary",
        description="The rolling summary of one conversation of `world` (`conversation_id`): its newest "
        "version (the seed's session_summary.md text and its four sections, the history lines covered, "
        "`verified`) and, while unverified, `check_line`: the recap to ask the user (a yes goes to "
        "conversation/confirm, a no to conversation/correct); `summary` null when none is written yet; with the "
        "world's `long_arc`, which wins on emotional tone. Never calls an LLM." + WORLD_DOC,
        access=Access.READ,
    )
    def summary(world: str, conversation_id: str) -> dict[str, Any]:
        require_world(store, world)
        owned_conversation(store, world, "conversation_id", conversation_id)
        row = summaries.latest(store, conversation_id)
        arc = self_block_of(store, cfg.long_arc_block, [world]).get(world)
        out: dict[str, Any] = {"world": world, "conversation_id": conversation_id, "long_arc": arc, "summary": None}
        if row is not None:
            out["summary"] = {
                "version": row["version"],
                "content": row["content"],
                "sections": row["sections"],
                "covered_start": row["covered_start"],
                "covered_end": row["covered_end"],
                # In the configured zone to the second, as every time an agent reads (stored in UTC).
                "last_updated": row["last_updated"].astimezone(tower.tz).isoformat(timespec="seconds"),
                "verified": row["verified"],
                "verified_at": row["verified_at"].astimezone(tower.tz).isoformat(timespec="seconds")
                if row["verified_at"]
                else None,
                "check_line": None if row["verified"] else row["check_line"],
                "trigger": row["trigger"],
            }
        return out

    @reg.tool(
        name="conversation/check",
        description="The user's memory check of a conversation of `world` (`conversation_id`; 你还记得我跟你聊过"
        "什么吗): asks for a new rolling summary version, which the summary sensor's next tick serves "
        "(through the initialization gate) in a Dagster run; this call only records the request. Never "
        "calls an LLM." + WORLD_DOC + REQUEST_DOC,
        access=Access.WRITE,
    )
    def check(world: str, conversation_id: str, request_id: str) -> dict[str, Any]:
        require_world(store, world)
        owned_conversation(store, world, "conversation_id", conversation_id)
        request_id_problem(request_id)
        try:
            result, replayed = summaries.request(store, conversation_id, "user_check", request_id)
        except summaries.InputError as exc:
            raise domain_error(exc, {}) from None
        return {"world": world, "conversation_id": conversation_id, **result, "replayed": replayed}

    @reg.tool(
        name="conversation/confirm",
        description="The user said yes to the check line of a conversation of `world` (`conversation_id`): "
        "its newest summary version is marked verified, its text untouched; `version` (optional) must be "
        "the newest, the one whose check line the user saw. `changed` false: it was verified already. "
        "Never calls an LLM." + WORLD_DOC + REQUEST_DOC,
        access=Access.WRITE,
    )
    def confirm(world: str, conversation_id: str, request_id: str, version: int | None = None) -> dict[str, Any]:
        require_world(store, world)
        owned_conversation(store, world, "conversation_id", conversation_id)
        request_id_problem(request_id)
        try:
            result, replayed = summaries.confirm_request(store, conversation_id, version, request_id=request_id)
        except summaries.InputError as exc:
            raise domain_error(exc, {}) from None
        return {"world": world, "conversation_id": conversation_id, **result, "replayed": replayed}

    @reg.tool(
        name="conversation/correct",
        description="The user denied the check line of a conversation of `world` (`conversation_id`): a new, "
        "verified summary version whose emotional arc is `arc`, the user's own account (3-5 sentences, "
        "never more than 10 nor 2,000 characters); the other sections and the covered range are kept. Answers the new "
        "`version`. Never calls an LLM." + WORLD_DOC + REQUEST_DOC,
        access=Access.WRITE,
    )
    def correct(world: str, conversation_id: str, arc: str, request_id: str) -> dict[str, Any]:
        require_world(store, world)
        require_text("arc", arc)
        owned_conversation(store, world, "conversation_id", conversation_id)
        request_id_problem(request_id)
        try:
            result, replayed = summaries.correct_request(
                store, conversation_id, arc, zone(settings.timezone_name()), request_id=request_id
            )
        except (summaries.InputError, FormatError) as exc:
            raise domain_error(exc, {"emotional_arc": "arc"}) from None
        return {"world": world, "conversation_id": conversation_id, **result, "replayed": replayed}
