"""The offline deterministic model: the embedded default, so the graph runs with no provider.

It is not a language model. It writes a headline from the most frequent content words of the
material, within the requested character target, and gives the same answer for the same input.
"""

from __future__ import annotations

import math
import re
from collections import Counter

NAME = "offline/deterministic-headline-v1"

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]{3,}|[\u4e00-\u9fff]{2,4}")
_STOP = set(
    """
    about after again also always another anything around because been before being between both
    could didn't does doing doesn't don't down during each even every from going gonna have having
    here hey it's just know like made make maybe more most much must need never only other over
    really right same should some still such sure than thank thanks that that's their them then
    there these they thing things think this those through time today told tomorrow very want was
    wasn't well were what when where which while will with would yeah yesterday you're your yours
    been into onto upon user assistant great good glad nice love feel feeling awesome amazing sounds
    again briefly detail compared discussed fixed measured planned reviewed scheduled conversation
    """.split()
)


def approx_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4)) if text else 0


def headline(material: str, max_chars: int) -> str:
    """Top content words joined with ' · ', never longer than ``max_chars``; '' for no words."""
    # Lines starting with '#' are headers (platform, date), not content.
    body = "\n".join(line for line in (material or "").splitlines() if not line.lstrip().startswith("#"))
    words = [w.lower().strip("'-") for w in _WORD.findall(body)]
    counts = Counter(w for w in words if w not in _STOP and len(w) > 1)
    if not counts:
        return ""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out = ""
    for word, _ in ranked:
        candidate = f"{out} · {word}" if out else word
        if len(candidate) > max_chars:
            break
        out = candidate
    return out or ranked[0][0][:max_chars]
