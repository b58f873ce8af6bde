"""The recall metric (pure): for each question, rank the candidate days of its world by BM25 of the
question against one text per day, and count a hit at k when a day holding an evidence turn is among
the top k. R@k is the share of questions with a hit.

BM25 is SQLite's FTS5 (``bm25()``, k1 = 1.2, b = 0.75) over the porter/unicode61 tokenizer: the same
engine ``memory_search`` ranks with on the embedded default. One FTS5 table per (world, index), so
term statistics are the world's days, as the metric says. Chinese has no spaces between words: a
run of CJK characters is indexed and queried as single characters (unigrams), which BM25 then weighs
like words. A question asks each stem once ("paint" and "painting" are one term, as the index sees
them: BM25 counted such a word twice). Days that match no term of the question score nothing and follow every day that does,
in an order fixed by a hash of (question, day): deterministic, and no better than chance."""

from __future__ import annotations

import hashlib
import math
import re
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum

from memory_pipeline.lib.text import porter_stems

KS = (1, 5)
_CJK = re.compile(r"([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af])")
_WORD = re.compile(r"\w+", re.UNICODE)


class Index(StrEnum):
    """What one text per day is built from (the rows of the recall table)."""

    RAW = "raw messages"
    DAY_SUMMARIES = "temporal day summaries"
    SEMANTIC = "sleep semantic memories"
    AUTOBIOGRAPHY = "autobiography"
    OBJECTS = "objects"
    CONVERSATION = "rolling conversation summaries"
    ALL_MEMORY = "all memory together"
    # Not a day text: the days of memory_search's hits, in hit order (see score_rankings).
    MEMORY_SEARCH = "memory_search"
    RANDOM = "random ranking"


# Every consolidated index: "all memory together" is their union (the raw anchor is not memory).
MEMORY_INDEXES = (Index.DAY_SUMMARIES, Index.SEMANTIC, Index.AUTOBIOGRAPHY, Index.OBJECTS, Index.CONVERSATION)


def fts_text(text: str) -> str:
    """Text as FTS5's unicode61 tokenizer should see it: CJK characters spaced apart."""
    return _CJK.sub(r" \1 ", text)


def words(text: str) -> list[str]:
    """The distinct tokens of a text, lowercased, in order (CJK as single characters)."""
    return list(dict.fromkeys(t.lower() for t in _WORD.findall(fts_text(text))))


def stem(word: str) -> str:
    """``word`` as the index stores it: FTS5's porter stem over unicode61 ("greyhounds" ->
    "greyhound", "painting" -> "paint", "Café" -> "cafe")."""
    return porter_stems([word])[0]


def stems(text: str) -> set[str]:
    """The stems of a text's words (:func:`words`, :func:`stem`)."""
    return set(porter_stems(words(text)))


def query_terms(text: str) -> list[str]:
    """The terms a question is asked with: its tokens in order (CJK as single characters), one per
    stem (the first form of each), so no word counts twice in BM25."""
    ws = words(text)
    first: dict[str, str] = {}
    for w, s in zip(ws, porter_stems(ws), strict=True):
        first.setdefault(s, w)
    return list(first.values())


def fts_query(text: str) -> str | None:
    """An FTS5 query matching any token of ``text`` (each quoted: no token is FTS5 syntax)."""
    terms = query_terms(text)
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms) if terms else None


@dataclass(frozen=True)
class Question:
    world: str
    text: str
    evidence_days: frozenset[date]
    category: int | None = None


@dataclass
class Score:
    """R@k over the questions of one index, and how much text it holds per candidate day."""

    index: Index
    questions: int = 0
    hits: dict[int, int] = field(default_factory=lambda: dict.fromkeys(KS, 0))
    expected: dict[int, float] = field(default_factory=lambda: dict.fromkeys(KS, 0.0))  # random only
    chars: int = 0
    days: int = 0

    def recall(self, k: int) -> float:
        if not self.questions:
            return 0.0
        if self.index is Index.RANDOM:
            return self.expected[k] / self.questions
        return self.hits[k] / self.questions

    @property
    def chars_per_day(self) -> float:
        return self.chars / self.days if self.days else 0.0


def _tiebreak(question: str, day: date) -> str:
    return hashlib.sha256(f"{question}\x00{day.isoformat()}".encode()).hexdigest()


class DayRanker:
    """BM25 over one world's day texts of one index."""

    def __init__(self, texts: Mapping[date, str], candidates: Iterable[date]):
        self.candidates = sorted(set(candidates))
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE days USING fts5(day UNINDEXED, body, tokenize='porter unicode61')")
        self.db.executemany(
            "INSERT INTO days (day, body) VALUES (?, ?)",
            [(d.isoformat(), fts_text(t)) for d, t in texts.items() if t.strip()],
        )

    def rank(self, question: str) -> list[date]:
        """Every candidate day, best first."""
        query = fts_query(question)
        scored: dict[date, float] = {}
        if query:
            # bm25() is smaller for better matches
            for day, score in self.db.execute("SELECT day, bm25(days) FROM days WHERE days MATCH ?", (query,)):
                scored[date.fromisoformat(day)] = score
        matched = sorted((d for d in self.candidates if d in scored), key=lambda d: (scored[d], d))
        rest = sorted((d for d in self.candidates if d not in scored), key=lambda d: _tiebreak(question, d))
        return matched + rest

    def close(self) -> None:
        self.db.close()


def random_expectation(days: int, evidence: int, k: int) -> float:
    """Chance that k days drawn at random from ``days`` hold one of ``evidence`` days."""
    if days <= 0 or evidence <= 0:
        return 0.0
    k = min(k, days)
    return 1.0 - math.comb(days - evidence, k) / math.comb(days, k)


def score_index(
    index: Index,
    questions: list[Question],
    texts: Mapping[str, Mapping[date, str]],
    candidates: Mapping[str, Iterable[date]],
) -> Score:
    """R@1 and R@5 of one index: ``texts[world][day]``; every day in ``candidates[world]`` competes."""
    score = Score(index)
    for world, days in candidates.items():
        days = sorted(set(days))
        world_texts = texts.get(world, {})
        score.days += len(days)
        score.chars += sum(len(world_texts.get(d, "")) for d in days)
        asked = [q for q in questions if q.world == world]
        if not asked:
            continue
        ranker = DayRanker(world_texts, days)
        try:
            for q in asked:
                ranked = ranker.rank(q.text)
                score.questions += 1
                for k in KS:
                    if q.evidence_days & set(ranked[:k]):
                        score.hits[k] += 1
        finally:
            ranker.close()
    return score


def score_rankings(index: Index, questions: list[Question], rank: Callable[[Question], Sequence[date]]) -> Score:
    """R@k of a ranking made elsewhere (``rank(question)``: days, best first; it may hold fewer than
    k days, and then has fewer chances)."""
    score = Score(index)
    for q in questions:
        ranked = list(rank(q))
        score.questions += 1
        for k in KS:
            if q.evidence_days & set(ranked[:k]):
                score.hits[k] += 1
    return score


def score_random(questions: list[Question], candidates: Mapping[str, Iterable[date]]) -> Score:
    """The chance level: the expected R@k of a ranking drawn at random (exact, not sampled)."""
    score = Score(Index.RANDOM)
    sizes = {w: len(set(d)) for w, d in candidates.items()}
    for q in questions:
        if q.world not in sizes:
            continue
        score.questions += 1
        for k in KS:
            score.expected[k] += random_expectation(sizes[q.world], len(q.evidence_days), k)
    return score
