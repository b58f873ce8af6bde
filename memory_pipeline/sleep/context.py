"""What every seed 003 stage shares: the context (store, model, config, zone) and the tool loop.

The loop sends the messages, validates each tool call the model returns against the in-memory
state (a refused call changes nothing and goes back to the model as an error result for that
call), keeps the accepted changes, and asks again with the results until the model makes no call
(or ``max_tool_turns``). It writes nothing: the stage commits a world's changes in one transaction
with its state record (sleep/runs.py), so a model failure mid-loop leaves nothing half-written."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from memory_pipeline.lib.llm import LLMClient, LLMRequest
from memory_pipeline.lib.store import Store
from memory_pipeline.sleep import offline_rules
from memory_pipeline.sleep.config import SleepConfig
from memory_pipeline.sleep.logic import Change, MemoryState, Rules, ToolError
from memory_pipeline.sleep.prompts import PROMPT_VERSION

if TYPE_CHECKING:
    from memory_pipeline.sleep.carry import ActiveCarry

offline_rules.install()


class StageFailure(RuntimeError):
    """A stage could not run for a day (input too large, a prerequisite missing): nothing written."""


@dataclass
class SleepContext:
    store: Store
    llm: LLMClient
    cfg: SleepConfig
    tz: ZoneInfo
    force: bool = False  # ignore the state record's reuse of an unchanged input
    carry: ActiveCarry | None = None  # a range run's active sets, kept from place to place (sleep/carry.py)


def worlds_at_once(ctx: SleepContext) -> int:
    """How many worlds a stage asks the model about at once: ``worlds_at_once``, or one on SQLite
    (a second writer waits for the first)."""
    return 1 if ctx.store.dialect == "sqlite" else ctx.cfg.worlds_at_once


@dataclass
class LoopResult:
    text: str = ""
    llm_calls: int = 0
    tool_calls: int = 0
    changes: list[Change] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)  # {"call", "error"}
    skipped: list[dict[str, Any]] = field(default_factory=list)  # duplicates the program refused to create
    # Answers the provider cut at the output limit (finish_reason length): what the loop kept of
    # them is written, but the stage's record says so and is never reused as whole (sleep/runs.py).
    cut: int = 0


def all_refused(loop: LoopResult) -> bool:
    """The model made tool calls and every one was refused: nothing it sent was applied. Not a
    done extraction (a reply that makes no call is one: the model found nothing to keep)."""
    return bool(loop.rejected) and not loop.changes and not loop.skipped


# A hook that may answer a call instead of applying it (light sleep's duplicate guard): the result
# text, or None to apply the call normally.
Guard = Callable[[Mapping[str, Any]], str | None]
# Applies one call to a state: the changes, or ToolError.
Apply = Callable[[Mapping[str, Any]], list[Any]]


def _assistant(text: str, calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {
                    "name": str(c.get("name")),
                    "arguments": c["arguments"]
                    if isinstance(c["arguments"], str)
                    else json.dumps(c["arguments"], ensure_ascii=False),
                },
            }
            for c in calls
        ],
    }


def tool_loop(
    ctx: SleepContext,
    *,
    task: str,
    world_id: str,
    system: str,
    messages: Sequence[dict[str, Any]],
    tools: list[dict[str, Any]],
    apply: Apply,
    describe: Callable[[Any], str],
    guard: Guard | None = None,
    on_change: Callable[[Any], None] | None = None,
    result: LoopResult | None = None,
) -> LoopResult:
    """``result`` (given by the caller) keeps what the loop did so far when a call raises."""
    result = result if result is not None else LoopResult()
    convo: list[dict[str, Any]] = list(messages)
    for _turn in range(ctx.cfg.max_tool_turns):
        req = LLMRequest(
            task=task,
            system=system,
            user=task,
            prompt_version=PROMPT_VERSION,
            world_id=world_id,
            tools=tools,
            conversation=tuple(convo),
        )
        result.llm_calls += 1  # counted before: a call that fails is one of the run's calls too
        answer = ctx.llm.complete(req, force=True)
        result.text = answer.text
        result.cut += answer.truncated
        if not answer.tool_calls:
            break
        result.tool_calls += len(answer.tool_calls)
        accepted: list[Any] = []
        replies = []
        for call in answer.tool_calls:
            said = guard(call) if guard else None
            if said is not None:
                result.skipped.append({"call": dict(call), "result": said})
                replies.append(said)
                continue
            try:
                changes = apply(call)
            except ToolError as exc:
                result.rejected.append({"call": _plain(call), "error": str(exc)})
                replies.append(f"error: {exc}")
                continue
            accepted.extend(changes)
            replies.append("ok: " + "; ".join(describe(c) for c in changes))
        for c in accepted:
            if on_change:
                on_change(c)
        result.changes.extend(accepted)
        convo.append(_assistant(answer.text, answer.tool_calls))
        convo += [
            {"role": "tool", "tool_call_id": c["id"], "content": r}
            for c, r in zip(answer.tool_calls, replies, strict=True)
        ]
    return result


def _plain(call: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": call.get("id"), "name": call.get("name"), "arguments": call.get("arguments")}


def memory_loop(
    ctx: SleepContext,
    state: MemoryState,
    rules: Rules,
    *,
    task: str,
    system: str,
    messages: Sequence[dict[str, Any]],
    tools: list[dict[str, Any]],
    guard: Guard | None = None,
    on_change: Callable[[Change], None] | None = None,
    result: LoopResult | None = None,
) -> LoopResult:
    """The tool loop over semantic memory: calls applied to ``state`` under ``rules``."""
    return tool_loop(
        ctx,
        task=task,
        world_id=state.world_id,
        system=system,
        messages=messages,
        tools=tools,
        apply=lambda call: state.apply(call, rules),
        describe=lambda c: f"{c.op} {c.memory.id}",
        guard=guard,
        on_change=on_change,
        result=result,
    )
