"""Seed 003 autobiography rules (pure): the two narrative tools (append-only: create, deprecate; no
content update) applied to an in-memory state, and phase B's compression of the active
narratives into ``self_blocks.autobiography_summary`` (recent finer, distant only milestones and
turning points)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from enum import StrEnum
from typing import Any

from memory_pipeline.lib.text import short_hash, truncate
from memory_pipeline.sleep.logic import ToolError
from memory_pipeline.sleep.prompts import AUTO_TOOLS, CREATE_AUTO, DEPRECATE_AUTO

NARRATIVE_MAX_CHARS = 4000


class NarrativeKind(StrEnum):
    EVENT = "event"
    MILESTONE = "milestone"
    TURNING_POINT = "turning_point"


@dataclass
class Narrative:
    id: str
    world_id: str
    narrative: str
    significance: int
    kind: str
    period: str | None
    source_memory_ids: list[str]
    created_day: date
    status: str = "active"
    reason: str | None = None
    deprecated_day: date | None = None  # the partition whose run deprecated it (a rebuild undoes it)


@dataclass
class NarrativeChange:
    op: str  # create | deprecate
    narrative: Narrative


def _err(call_id: str, tool: str, name: str, problem: str) -> ToolError:
    return ToolError(f"tool call {call_id} ({tool}): field '{name}': {problem}")


class NarrativeState:
    def __init__(self, world_id: str, day: date, narratives: Iterable[Narrative], memory_ids: Iterable[str]):
        self.world_id = world_id
        self.day = day
        self.items = {n.id: n for n in narratives}
        self.memory_ids = frozenset(memory_ids)  # the semantic memories phase A was shown
        self._seq = 0

    def apply(self, call: Mapping[str, Any]) -> list[NarrativeChange]:
        call_id, tool = str(call.get("id") or "?"), call.get("name")
        if tool not in AUTO_TOOLS:
            raise ToolError(f"tool call {call_id}: unknown tool {tool!r} (this stage offers {', '.join(AUTO_TOOLS)})")
        args = call.get("arguments")
        if not isinstance(args, dict):
            raise ToolError(f"tool call {call_id} ({tool}): arguments are not a JSON object")
        if tool == DEPRECATE_AUTO:
            extra = sorted(set(args) - {"id", "reason"})
            if extra:
                raise _err(call_id, tool, extra[0], "unexpected field")
            n = self.items.get(args.get("id"))  # type: ignore[arg-type]
            if n is None or n.status != "active":
                raise _err(call_id, tool, "id", f"no active autobiographical memory {args.get('id')!r}")
            reason = args.get("reason")
            if not isinstance(reason, str) or not reason.strip():
                raise _err(call_id, tool, "reason", "missing or empty")
            n.status, n.reason, n.deprecated_day = "deprecated", reason.strip()[:500], self.day
            return [NarrativeChange("deprecate", copy.deepcopy(n))]
        return [self._create(call_id, args)]

    def _create(self, call_id: str, args: Mapping[str, Any]) -> NarrativeChange:
        tool = CREATE_AUTO
        extra = sorted(set(args) - {"narrative", "significance", "kind", "period", "source_memory_ids"})
        if extra:
            raise _err(call_id, tool, extra[0], "unexpected field")
        text = args.get("narrative")
        if not isinstance(text, str) or not text.strip():
            raise _err(call_id, tool, "narrative", "missing or empty (an empty narrative is refused)")
        if len(text) > NARRATIVE_MAX_CHARS:
            raise _err(call_id, tool, "narrative", f"{len(text)} characters (limit {NARRATIVE_MAX_CHARS})")
        sig = args.get("significance")
        if isinstance(sig, bool) or not isinstance(sig, int) or not 1 <= sig <= 5:
            raise _err(call_id, tool, "significance", f"expected an integer 1..5, got {sig!r}")
        kind = args.get("kind")
        if kind not in {k.value for k in NarrativeKind}:
            raise _err(call_id, tool, "kind", f"{kind!r} is not one of event, milestone, turning_point")
        period = args.get("period")
        if period is not None and (not isinstance(period, str) or len(period) > 32):
            raise _err(call_id, tool, "period", "expected a short string such as 2026-01-01..2026-01-07")
        ids = args.get("source_memory_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise _err(call_id, tool, "source_memory_ids", "expected a non-empty list of memory ids")
        unknown = [i for i in ids if i not in self.memory_ids]
        if unknown:
            raise _err(call_id, tool, "source_memory_ids", f"{unknown[0]!r} is not one of the memories shown")
        while True:  # an id a deprecated narrative still holds (a re-run after a rebuild) is skipped
            self._seq += 1
            nid = "a-" + short_hash([self.world_id, self.day, self._seq, text], length=12)
            if nid not in self.items:
                break
        n = Narrative(nid, self.world_id, text.strip(), sig, str(kind), period, list(dict.fromkeys(ids)), self.day)
        self.items[nid] = n
        return NarrativeChange("create", copy.deepcopy(n))


def restore_narratives(narratives: Iterable[Narrative], day: date) -> list[NarrativeChange]:
    """A rebuild of ``day``: narratives created on ``day`` or later are deprecated (the re-run
    writes them again), those an autobiography run of ``day`` or later deprecated are active again.
    Append-only still: nothing is deleted or rewritten."""
    out = []
    for n in sorted(narratives, key=lambda n: n.id):
        if n.created_day >= day and n.status == "active":
            new = copy.deepcopy(n)
            new.status, new.deprecated_day = "deprecated", day
            new.reason = f"rebuild of {day}: written by the autobiography of {n.created_day}, undone"
            out.append(NarrativeChange("deprecate", new))
        elif n.created_day < day and n.status != "active" and n.deprecated_day is not None and n.deprecated_day >= day:
            new = copy.deepcopy(n)
            new.status, new.reason, new.deprecated_day = "active", None, None
            out.append(NarrativeChange("restore", new))
    return out


RECENT_HEAD = "## 近期"
DISTANT_HEAD = "## 更早（仅里程碑 / 转折点）"
RECENT_LINE_CHARS = 200  # recent finer ...
DISTANT_LINE_CHARS = 80  # ... distant one short line
_KEY_KINDS = (NarrativeKind.MILESTONE, NarrativeKind.TURNING_POINT)


def _line(n: Narrative, recent: bool) -> str:
    text = " ".join(n.narrative.split())
    if recent:
        return f"- [{n.created_day.isoformat()}·{n.kind}·{n.significance}] {truncate(text, RECENT_LINE_CHARS)}"
    return f"- [{n.created_day:%Y-%m}·{n.kind}] {truncate(text, DISTANT_LINE_CHARS)}"


def summary(narratives: Sequence[Narrative], day: date, recent_days: int, max_chars: int) -> str:
    """Phase B: the active narratives compressed by significance and time, at most ``max_chars``.
    Candidates: every narrative within ``recent_days`` of ``day`` (a finer line) and, before that,
    only milestones and turning points (one short line). Significance decides what stays: the
    budget is filled most significant first (then milestone / turning point before event, then
    newest), a line that does not fit is left out whole and a shorter one may still fit. So a
    significance-5 turning point of long ago outlasts any number of recent lesser events. Shown:
    the recent lines by significance then newest, the earlier ones in time order."""
    cutoff = day - timedelta(days=recent_days)
    active = [n for n in narratives if n.status == "active"]
    recent = {n.id for n in active if n.created_day > cutoff}
    candidates = [n for n in active if n.id in recent or n.kind in _KEY_KINDS]
    candidates.sort(key=lambda n: (-n.significance, n.kind not in _KEY_KINDS, -n.created_day.toordinal(), n.id))
    chosen: list[Narrative] = []
    used = 0  # characters of the lines kept, each with its newline (the last one is not written)
    heads: set[bool] = set()
    for n in candidates:
        is_recent = n.id in recent
        cost = len(_line(n, is_recent)) + 1
        if is_recent not in heads:
            cost += len(RECENT_HEAD if is_recent else DISTANT_HEAD) + 1
        if used + cost > max_chars + 1:
            continue
        used += cost
        heads.add(is_recent)
        chosen.append(n)
    near = sorted((n for n in chosen if n.id in recent), key=lambda n: (-n.significance, -n.created_day.toordinal()))
    far = sorted((n for n in chosen if n.id not in recent), key=lambda n: (n.created_day, n.id))
    lines = []
    if near:
        lines += [RECENT_HEAD, *(_line(n, True) for n in near)]
    if far:
        lines += [DISTANT_HEAD, *(_line(n, False) for n in far)]
    return "\n".join(lines)
