"""The offline model's answers for seed 001's structured calls: simple documented rules, NOT a
language model. They exist so the object-memory graph runs with no provider; a real model is
one setting away (MEMORY_LLM_MODEL) and answers the same tool protocol.

Rules (deterministic; same batch, same answer):
- compact (C1): the summary is the offline headline of the batch's text, at most half its
  length (falling back to its first half when it has no content words); it covers every node.
- organize (O1) a page that is not the event's last: ``continue`` with progress "read a-b of n".
- organize (O2) last page: the event is attached to every read object the text names (its name
  or an alias, as a whole word, case-insensitive); nothing of theirs is rewritten.
- organize (O3) last page: the things the text names that no read object is yet
  (``offline.subject_terms``: words rarer than everyday vocabulary, names, Chinese words), the
  rarest NEW_OBJECTS_PER_PAGE of them, become new objects attached to the event, each
  member_of ``project:daily``: ``person:<name>`` for a name the text addresses someone by ("Hey
  Mel!"), ``knowledge:<word>`` otherwise. Only the name is written: the offline model draws no
  conclusion (the seed: missing facts are not guessed) and the raw words stay in the attachments,
  which ``memory_evidence`` reads. O2 and O3 together are ``linked``.
- organize (O4) otherwise: ``archive_only`` with the reason "no object target (offline rule O4)".
- deep (D1): every batch object confirmed reviewed, nothing rewritten.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from memory_pipeline.lib.llm import offline
from memory_pipeline.objects import logic

SUBMIT_COMPACT = "submit_compact"
SUBMIT_GRAPH = "submit_graph"
_WORD_KEY = re.compile(r"[^\w.-]+", re.UNICODE)
NEW_OBJECTS_PER_PAGE = 8  # a page names a few things worth their own object; the rest are its words
PERSON_SUMMARY = "A person the conversation addresses by name."


def _call(name: str, arguments: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    return json.dumps(arguments, ensure_ascii=False), [{"id": "offline-0", "name": name, "arguments": arguments}]


def compact(nodes: Sequence[tuple[str, str]]) -> tuple[str, list[dict[str, Any]]]:
    """nodes: (node id, text). Rule C1."""
    text = "\n".join(t for _, t in nodes)
    limit = max(1, len(text) // 2)
    summary = offline.headline(text, min(limit, 400)) or " ".join(text.split())[:limit]
    return _call(SUBMIT_COMPACT, {"summary": summary, "covers": [n for n, _ in nodes]})


def _mentions(text: str, words: Sequence[str]) -> bool:
    low = text.lower()
    for w in words:
        w = w.strip().lower()
        if w and re.search(rf"(?<!\w){re.escape(w)}(?!\w)", low):
            return True
    return False


def organize(
    *,
    token: str,
    graph_revision: int,
    event_id: str,
    page_text: str,
    page_end: int,
    event_chars: int,
    read_objects: Sequence[Mapping[str, Any]],
) -> tuple[str, list[dict[str, Any]]]:
    """Rules O1-O4 for one claimed page."""
    base: dict[str, Any] = {
        "token": token,
        "graph_revision": graph_revision,
        "event_id": event_id,
        "page_end": page_end,
    }
    if page_end < event_chars:  # O1
        return _call(
            SUBMIT_GRAPH, {**base, "outcome": "continue", "progress": f"read {page_end} of {event_chars} characters"}
        )
    named = [o for o in read_objects if _mentions(page_text, [o.get("name", ""), *(o.get("aliases") or [])])]
    known = {str(n).strip().lower() for o in read_objects for n in [o.get("name", ""), *(o.get("aliases") or [])]}
    called = offline.addressed(page_text)
    new: dict[str, dict[str, Any]] = {}
    for key, name in offline.subject_terms(page_text):
        slug = _WORD_KEY.sub("-", key).strip("-")[:96]
        if key in known or not slug:
            continue
        oid = f"person:{slug}" if key in called else f"knowledge:{slug}"
        if oid in {o["id"] for o in read_objects}:
            continue
        new.setdefault(oid, {"id": oid, "name": name} | ({"summary": PERSON_SUMMARY} if key in called else {}))
        if len(new) == NEW_OBJECTS_PER_PAGE:
            break
    attach = sorted({o["id"] for o in named} | set(new))
    if attach:  # O2, O3
        return _call(
            SUBMIT_GRAPH,
            {
                **base,
                "outcome": "linked",
                "objects": list(new.values()),
                "relations": [{"src": oid, "label": "member_of", "dst": logic.BUILTIN_DAILY} for oid in new],
                "attach": attach,
                "evidence": [event_id],
                "progress": f"attached to {len(attach)} object(s), {len(new)} new",
            },
        )
    return _call(  # O4
        SUBMIT_GRAPH,
        {**base, "outcome": "archive_only", "reason": "no object target (offline rule O4)", "progress": "read"},
    )


def deep(*, token: str, graph_revision: int, object_ids: Sequence[str]) -> tuple[str, list[dict[str, Any]]]:
    """Rule D1."""
    return _call(SUBMIT_GRAPH, {"token": token, "graph_revision": graph_revision, "reviewed": list(object_ids)})
