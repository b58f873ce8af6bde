"""How much any extractive text of a day can recall under the eval's metric: the ceilings behind two
targets of `eval locomo` that the offline model does not meet (day summaries R@5 >= 0.70 within the
seed's caps; all memory R@5 >= the raw anchor's within 25% of its characters).

No store and no Dagster run: each world's day material is built from the LoCoMo files exactly as the
temporal day call reads it (``summaries._day_material``: every conversation of the CST day, one
"[HH:MM] role: text" line per message), and each row below is one rule applied to that material,
scored with the eval's own metric (``recall.metric.score_index``: BM25 over one text per day, every
day of the world a candidate, category 5 left out). In seconds instead of a full eval's minutes.

Rows:
- raw messages: the eval's anchor (every message's text), the yardstick for "of raw"; and the day
  call's material, the same with its time stamps and conversation headers;
- offline day summary: the offline model's answer to the day call (``headline`` at
  global_day_max_chars), as the eval's day row holds it;
- the same at the hard cap ceil(1.5 x max_chars): the most a stored summary may hold;
- an oracle at max_chars that sees the world's other days: content words ranked by their count in
  the day times their inverse day frequency in the world (what "distinguishes that period" means
  for BM25), which no summarizer of one day's material can compute;
- every distinct content word of the day (``headline`` with no cap): the most a bag of the day's own
  words can recall, and its size as a share of the raw characters;
- key sentences within 25% of the day's characters (``offline.sentence_score``, best first).

    .venv/bin/python bench/recall_ceiling.py [FILE.json ...] [--json OUT]

FILE: LoCoMo files (default: every ``*.json`` in ``$LOCOMO_DIR``)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

from memory_pipeline.events.locomo import locomo_events
from memory_pipeline.lib.llm import offline
from memory_pipeline.lib.text import hard_cap, porter_stems
from memory_pipeline.recall.metric import DayRanker, Index, Question, query_terms, score_index
from memory_pipeline.recall.questions import questions
from memory_pipeline.temporal import summaries
from memory_pipeline.temporal.config import TemporalSummaryConfig

Materials = dict[str, dict[date, str]]  # world -> CST day -> the day call's material


def load(files: list[Path], tz: ZoneInfo) -> tuple[Materials, Materials, list[Question]]:
    """(each world-day's material, its raw anchor text, the questions)."""
    cfg = TemporalSummaryConfig()
    ctx: Any = SimpleNamespace(tz=tz, cfg=cfg)  # all _day_material reads of a TemporalContext
    materials: Materials = {}
    anchors: Materials = {}
    asked: list[Question] = []
    for path in files:
        events, errors = locomo_events(path, tz)
        if errors:
            sys.exit(f"{errors[0]}")
        by_day: dict[date, list[dict[str, Any]]] = defaultdict(list)
        for e in events:
            by_day[e["at"].astimezone(tz).date()].append(e)
        world = events[0]["world_id"]
        materials[world] = {d: summaries._day_material(ctx, ms).full for d, ms in by_day.items()}
        anchors[world] = {d: "\n".join(m["content"] for m in ms) for d, ms in by_day.items()}
        asked += questions(path, {e["message_id"]: e["at"].astimezone(tz).date() for e in events})
    return materials, anchors, asked


def pack(words: list[str], max_chars: int) -> str:
    """Words joined as ``offline.headline`` joins them, as many as fit."""
    out = ""
    for w in words:
        candidate = f"{out}{offline.HEADLINE_SEPARATOR}{w}" if out else w
        if len(candidate) <= max_chars:
            out = candidate
    return out


def world_idf_oracle(materials: Materials, max_chars: int) -> Materials:
    """Content words by count in the day x log(days / days holding the word) x the model's language
    weight^RARITY_EXPONENT: the model's headline rule with the world's other days in view."""
    out: Materials = {}
    for world, days in materials.items():
        tokens = {d: offline.headline_words(t) for d, t in days.items()}
        counts = {d: Counter(_content_tokens(t)) for d, t in days.items()}
        vocab = sorted({w for c in counts.values() for w in c})
        stem = dict(zip(vocab, porter_stems(vocab), strict=True)) if vocab else {}
        df = Counter(s for c in counts.values() for s in {stem[w] for w in c})
        n = len(days)
        out[world] = {}
        for d, words in tokens.items():
            by_stem: Counter[str] = Counter()
            for w, k in counts[d].items():
                by_stem[stem[w]] += k
            score = {
                w: by_stem[stem[w]] * math.log(n / df[stem[w]]) * offline.word_weight(w) ** offline.RARITY_EXPONENT
                for w in words
                if w in stem
            }
            out[world][d] = pack(sorted(score, key=lambda w: (-score[w], w)), max_chars)
    return out


def _content_tokens(material: str) -> list[str]:
    return [w for t in offline._TOKEN.findall(material) if (w := offline.base_word(t)) is not None and len(w) > 2]


def key_sentences(material: str, share: float) -> str:
    """The day's highest-scoring sentences (message text only) within ``share`` of its characters."""
    body = "\n".join(line.split(": ", 1)[-1] for line in material.splitlines() if not line.startswith("#"))
    found = offline.sentences(body)
    budget, used, keep = len(body) * share, 0, set()
    for i in sorted(range(len(found)), key=lambda i: (-offline.sentence_score(found[i]), i)):
        if used + len(found[i]) <= budget:
            keep.add(i)
            used += len(found[i])
    return " ".join(found[i] for i in sorted(keep))


def word_ranks(materials: Materials, anchors: Materials, asked: list[Question], max_chars: int) -> Counter[str]:
    """For each question the raw anchor finds in its top 5 and the day summary does not: where the
    question's best-placed word ranks among ``headline_words`` of its first evidence day."""
    bands: Counter[str] = Counter()
    for world, days in materials.items():
        raw = DayRanker(anchors[world], days)
        summary = DayRanker({d: offline.headline(t, max_chars) for d, t in days.items()}, days)
        try:
            for q in (q for q in asked if q.world == world):
                if not q.evidence_days & set(raw.rank(q.text)[:5]) or q.evidence_days & set(summary.rank(q.text)[:5]):
                    continue
                ranked = offline.headline_words(days[min(q.evidence_days)])
                asked_stems = set(porter_stems(query_terms(q.text)))
                at = [i for i, s in enumerate(porter_stems(ranked) if ranked else []) if s in asked_stems]
                i = min(at) if at else None
                bands["not a content word" if i is None else "1-15" if i < 15 else "16-60" if i < 60 else "61+"] += 1
        finally:
            raw.close()
            summary.close()
    return bands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    files = args.files or sorted(Path(os.environ.get("LOCOMO_DIR", "")).glob("*.json"))
    if not files:
        sys.exit("no LoCoMo files: pass them, or set LOCOMO_DIR to their folder")
    tz = ZoneInfo("Asia/Shanghai")
    started = time.monotonic()
    materials, anchors, asked = load(files, tz)
    n = TemporalSummaryConfig().global_day_max_chars
    candidates = {w: list(days) for w, days in materials.items()}
    raw_chars = sum(len(t) for days in anchors.values() for t in days.values()) / sum(map(len, anchors.values()))

    def each(rule: Callable[[str], str]) -> Materials:
        return {w: {d: rule(t) for d, t in days.items()} for w, days in materials.items()}

    rows = [
        ("raw messages (the eval's anchor)", anchors),
        ("the day call's material (time stamps, headers)", materials),
        (f"offline day summary (headline, {n} characters)", each(lambda t: offline.headline(t, n))),
        (f"the same at the hard cap ({hard_cap(n)})", each(lambda t: offline.headline(t, hard_cap(n)))),
        (f"oracle: + the world's day frequency ({n})", world_idf_oracle(materials, n)),
        (
            "every distinct content word of the day",
            each(lambda t: offline.HEADLINE_SEPARATOR.join(offline.headline_words(t))),
        ),
        ("key sentences within 25% of the day", each(lambda t: key_sentences(t, 0.25))),
    ]
    results = []
    print(f"{len(asked)} questions, {sum(map(len, materials.values()))} days, {len(materials)} worlds")
    print(f"{'rule':<48} {'R@1':>5} {'R@5':>5} {'chars/day':>9} {'of raw':>7}")
    for name, texts in rows:
        s = score_index(Index.DAY_SUMMARIES, asked, texts, candidates)
        share = s.chars_per_day / raw_chars
        results.append(
            {
                "rule": name,
                "r_at_1": s.recall(1),
                "r_at_5": s.recall(5),
                "chars_per_day": s.chars_per_day,
                "share_of_raw": share,
            }
        )
        print(f"{name:<48} {s.recall(1):5.2f} {s.recall(5):5.2f} {s.chars_per_day:9,.0f} {share:7.0%}")
    bands = word_ranks(materials, anchors, asked, n)
    print(
        f"day summary misses the raw anchor finds: {sum(bands.values())}; the question's best word's rank among "
        "the day's content words: "
        + ", ".join(f"{b} {bands[b]}" for b in ("1-15", "16-60", "61+", "not a content word"))
    )
    print(f"{time.monotonic() - started:.1f} s")
    if args.json:
        out = {"questions": len(asked), "rows": results, "summary_miss_word_ranks": dict(bands)}
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
