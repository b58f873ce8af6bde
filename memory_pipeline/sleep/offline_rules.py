"""The offline model's tool-calling rules for the sleep stages (deterministic; not a language model).

Light sleep (message 1 sessions, message 2 existing memories):
  - every user line saying 我喜欢 / 我不喜欢 / 我爱 / I like / I love / I prefer / I don't like becomes a
    ``preference`` memory with that line as content, unless message 2 already has it;
  - every session gives its most informative sentences as facts (``offline.key_sentences``: a
    quarter of its sentences, 2 to 12, scored by how rare their words are in the language, a
    first-person statement double, a question a third), each "<speaker>: <sentence>" with the
    session as source, typed ``experience`` (what was said in that session); a sentence already
    taken as a preference, or already in message 2, is skipped.
Deep sleep (message 1 as updated by message 1.5):
  - round contradiction: two memories of one type equal once a negation (不 / not / don't / doesn't /
    never) is removed contradict: the older one (observed_at) is deprecated, reason 新事实取代;
  - round split: content with several parts separated by ； or '; ' is split: one create per part
    (same type, sources, observed_at), then the original is deprecated, reason 已拆分;
  - round merge: memories of one type with the same normalized content are merged, keeping the
    newest one's content.
Autobiography: when two or more experience / imprint memories of the window are cited by no active
narrative, one narrative citing them all, told by the five most informative (``sentence_score``, NARRATIVE_PARTS) in
time order (milestone if one is an imprint, else event; significance = their count, at most 5);
otherwise no call ("nothing worth recording").
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from memory_pipeline.lib.llm import offline, offline_tools
from memory_pipeline.lib.text import has_cjk
from memory_pipeline.sleep.logic import CREATE, DEPRECATE, MERGE, normalized
from memory_pipeline.sleep.prompts import CREATE_AUTO

NARRATIVE_PARTS = 5
_SESSION = re.compile(r"^## session (\S+?)（")
_LINE = re.compile(r"^\[[0-9-]+ [0-9:]+\] (user|assistant): (.*)$")
_PREFERENCE = re.compile(
    r"(我不喜欢|我喜欢|我爱|\bI (?:really )?(?:like|love|prefer)\b|\bI don't like\b)", re.IGNORECASE
)
_NEGATION = re.compile(r"不|\bnot\b ?|\bdon't\b ?|\bdoesn't\b ?|\bnever\b ?", re.IGNORECASE)
_PROCESSED = re.compile(r"^(f-[0-9a-z]+) — ")
_NEW = re.compile(r'^(f-[0-9a-z]+) \((\w+)\) ("(?:[^"\\]|\\.)*") sources=\[([^\]]*)\] observed=(\S+)$')
_MODIFIED_CONTENT = re.compile(r'content 更新为 ("(?:[^"\\]|\\.)*")')


def _user_texts(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == "user"]


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        line = line.strip().rstrip(",")
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def light_rule(messages: Sequence[dict[str, Any]], offered: frozenset[str]) -> tuple[str, list[dict[str, Any]]]:
    texts = _user_texts(messages)
    if len(texts) < 2:
        return "no material", []
    existing = _json_lines(texts[1])
    have = {(m.get("type"), normalized(str(m.get("content", "")))) for m in existing}
    sessions: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in texts[0].splitlines():
        head = _SESSION.match(line)
        if head:
            current = head.group(1)
            sessions[current] = []
            continue
        body = _LINE.match(line)
        if body and current is not None:
            sessions[current].append((body.group(1), body.group(2)))
    calls: list[dict[str, Any]] = []
    for sid, lines in sessions.items():
        for role, text in lines:
            if role == "user" and _PREFERENCE.search(text):
                content = text.strip()[:200]
                if ("preference", normalized(content)) not in have:
                    have.add(("preference", normalized(content)))
                    calls.append(
                        {
                            "name": CREATE,
                            "arguments": {"type": "preference", "content": content, "source_sessions": [sid]},
                        }
                    )
        for role, sentence in offline.key_sentences(lines):
            if role == "user" and _PREFERENCE.search(sentence):
                continue  # its line was taken whole as a preference above
            mtype = "experience"  # what was said in this session: an experience of the agent's
            content = f"{role}: {sentence}"
            if (mtype, normalized(content)) in have:
                continue
            have.add((mtype, normalized(content)))
            calls.append({"name": CREATE, "arguments": {"type": mtype, "content": content, "source_sessions": [sid]}})
    return f"offline light sleep: {len(calls)} call(s)", calls


def _current_view(texts: list[str]) -> list[dict[str, Any]]:
    """Message 1's memories with message 1.5 applied (processed removed, new added, content updated)."""
    try:
        view = {m["id"]: dict(m) for m in json.loads(texts[0])}
    except (ValueError, KeyError, TypeError):
        return []
    if len(texts) > 2 and texts[1].startswith("# 增量变更"):
        for line in texts[1].splitlines():
            if (new := _NEW.match(line)) is not None:
                mid, mtype, content, sources, observed = new.groups()
                view[mid] = {
                    "id": mid,
                    "type": mtype,
                    "content": json.loads(content),
                    "source_sessions": [s for s in sources.split(",") if s],
                    "observed_at": observed,
                }
            elif (done := _PROCESSED.match(line)) is not None and "已修改" not in line:
                view.pop(done.group(1), None)
            if (mod := _MODIFIED_CONTENT.search(line)) is not None and (head := _PROCESSED.match(line)):
                if head.group(1) in view:
                    view[head.group(1)]["content"] = json.loads(mod.group(1))
    return [view[k] for k in sorted(view)]


def _in_time(m: dict[str, Any]) -> tuple[str, str, str]:
    """A memory's place in time: memories of one session share their time, and their ids are new
    in every run (a rebuild's too), so the content comes before the id: a rebuild's answers are a
    clean run's (v8; by id, the order of a session's facts in a narrative or a merge changed)."""
    return (str(m["observed_at"]), str(m["content"]), str(m["id"]))


def deep_rule(messages: Sequence[dict[str, Any]], offered: frozenset[str]) -> tuple[str, list[dict[str, Any]]]:
    texts = _user_texts(messages)
    view = _current_view(texts)
    intent = texts[-1] if texts else ""
    calls: list[dict[str, Any]] = []
    if "第 1 轮" in intent:
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for m in sorted(view, key=_in_time):
            key = (m["type"], normalized(_NEGATION.sub("", m["content"])))
            older = seen.get(key)
            if older is not None and normalized(older["content"]) != normalized(m["content"]):
                calls.append({"name": DEPRECATE, "arguments": {"id": older["id"], "reason": "新事实取代"}})
            seen[key] = m
    elif "第 2 轮" in intent:
        for m in view:
            parts = [p.strip() for p in re.split(r"；|; ", m["content"]) if len(p.strip()) >= 2]
            if len(parts) < 2:
                continue
            for p in parts:
                args = {
                    "type": m["type"],
                    "content": p,
                    "source_sessions": m["source_sessions"],
                    "observed_at": m["observed_at"],
                }
                calls.append({"name": CREATE, "arguments": args})
            calls.append({"name": DEPRECATE, "arguments": {"id": m["id"], "reason": "已拆分"}})
    elif "第 3 轮" in intent:
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for m in view:
            groups.setdefault((m["type"], normalized(m["content"])), []).append(m)
        for group in groups.values():
            if len(group) >= 2:
                in_time = sorted(group, key=_in_time)  # the merged memory's sessions come in this order
                calls.append(
                    {
                        "name": MERGE,
                        "arguments": {"source_ids": [m["id"] for m in in_time], "content": in_time[-1]["content"]},
                    }
                )
    return f"offline deep sleep: {len(calls)} call(s)", calls


def autobiography_rule(messages: Sequence[dict[str, Any]], offered: frozenset[str]) -> tuple[str, list[dict[str, Any]]]:
    texts = _user_texts(messages)
    if len(texts) < 2:
        return "无值得记录的叙事", []
    memories = _json_lines(texts[0])
    cited = {i for n in _json_lines(texts[1]) for i in n.get("source_memory_ids", [])}
    fresh = [m for m in memories if m["id"] not in cited]
    if len(fresh) < 2:
        return "无值得记录的叙事", []
    # the NARRATIVE_PARTS most informative of them, in time order, make the narrative
    told = sorted(
        sorted(fresh, key=lambda m: (-offline.sentence_score(str(m["content"])), *_in_time(m)[1:]))[:NARRATIVE_PARTS],
        key=_in_time,
    )
    chinese = any(has_cjk(str(m["content"])) for m in told)
    narrative = ("近来：" if chinese else "Lately: ") + ("；" if chinese else "; ").join(
        str(m["content"]) for m in told
    )
    kind = "milestone" if any(m["type"] == "imprint" for m in fresh) else "event"
    period = f"{fresh[0]['observed_at'][:10]}..{fresh[-1]['observed_at'][:10]}"
    args = {
        "narrative": narrative,
        "significance": min(5, len(fresh)),
        "kind": kind,
        "period": period,
        "source_memory_ids": [m["id"] for m in fresh],
    }
    return "offline autobiography: 1 narrative", [{"name": CREATE_AUTO, "arguments": args}]


def install() -> None:
    offline_tools.register("light_sleep", light_rule)
    offline_tools.register("deep_sleep", deep_rule)
    offline_tools.register("autobiography", autobiography_rule)
