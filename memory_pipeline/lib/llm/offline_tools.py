"""Tool calling for the offline deterministic model (not a language model).

A request that offers tools gets its answer from a *rule*: a plain function a domain registers for
its task names, which reads the messages and returns (text, tool calls) by simple documented
rules. The same request always gets the same answer. The rules only ever answer the first turn:
once the conversation holds a tool result (the model's calls came back), the answer is a short
text with no call, so a tool loop ends after one round of calls. A task with no rule gets no call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# (messages, offered tool names) -> (text, [{"id", "name", "arguments"}])
Rule = Callable[[Sequence[dict[str, Any]], frozenset[str]], tuple[str, list[dict[str, Any]]]]

_RULES: dict[str, Rule] = {}


def register(task: str, rule: Rule) -> None:
    """Answer requests whose task is ``task`` (or starts with ``task:``) with ``rule``."""
    _RULES[task] = rule


def rule_for(task: str) -> Rule | None:
    return _RULES.get(task) or _RULES.get(task.split(":", 1)[0])


def respond(
    task: str, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]]]:
    if any(m.get("role") == "tool" for m in messages):
        return "done", []
    rule = rule_for(task)
    if rule is None:
        return "no rule for this task: no tool call", []
    offered = frozenset(str(t.get("function", {}).get("name")) for t in tools)
    text, calls = rule(messages, offered)
    # A rule never calls a tool the request does not offer; ids are stable per answer.
    kept = [c for c in calls if c["name"] in offered]
    return text, [{"id": f"offline_{i}", "name": c["name"], "arguments": c["arguments"]} for i, c in enumerate(kept)]
