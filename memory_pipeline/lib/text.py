"""Text helpers shared by every summarizer."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from typing import Any


def hard_cap(max_chars: int) -> int:
    """Caps are prompt targets; the hard cut is at ceil(max_chars * 1.5) (seed 000)."""
    return math.ceil(max_chars * 1.5)


def hard_cut(text: str, max_chars: int) -> str:
    text = " ".join((text or "").split())
    return text[: hard_cap(max_chars)].rstrip()


def truncate(text: str, limit: int, marker: str = "…") -> str:
    """Cut to at most ``limit`` characters, the last one a marker when anything was dropped."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(marker))].rstrip() + marker


def short_hash(parts: Iterable[Any], length: int = 16) -> str:
    """Stable short hash over JSON-serialisable parts (order matters: sort before calling)."""
    payload = json.dumps(list(parts), ensure_ascii=False, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:length]
