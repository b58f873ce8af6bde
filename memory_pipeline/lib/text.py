"""Text helpers shared by every summarizer."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import sqlite3
import threading
from collections.abc import Iterable
from typing import Any, NamedTuple


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


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def json_error(exc: json.JSONDecodeError, column: int | None = None) -> str:
    """What a JSON parse error says, and where on its line (``column``, default the error's own):
    json's own wording of some errors ends in "at" ("Unterminated string starting at"), which would
    read "at at column 7"."""
    return f"{exc.msg.removesuffix(' at')} at column {column or exc.colno}"


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type (for messages: "got array", never the value)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number" if not isinstance(value, float) or math.isfinite(value) else "non-finite number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def shown(value: object, limit: int = 40) -> str:
    """A short repr for messages (ids, names, timestamps; never a message body)."""
    if not isinstance(value, str):
        return json_type(value)
    text = repr(value[:limit])
    return text if len(value) <= limit else text + "…"


def text_problem(value: object, max_chars: int, *, controls: bool = False) -> str | None:
    """Why ``value`` cannot be stored as UTF-8 text on PostgreSQL, or None: not a string, longer
    than ``max_chars``, a NUL, a lone surrogate, or (unless ``controls``) any control character.
    Names positions, never the text."""
    if not isinstance(value, str):
        return f"must be a string, got {json_type(value)}"
    if len(value) > max_chars:
        return f"too long: {len(value)} characters (limit {max_chars})"
    nul = value.find("\x00")
    if nul >= 0:
        return f"contains a NUL character (\\u0000) at position {nul}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone surrogate at position {exc.start} (not encodable as UTF-8)"
    if not controls and (bad := _CONTROL.search(value)):
        return f"contains a control character at position {bad.start()}"
    return None


def short_hash(parts: Iterable[object], length: int = 16) -> str:
    """Stable short hash over JSON-serialisable parts (order matters: sort before calling)."""
    payload = json.dumps(list(parts), ensure_ascii=False, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:length]


# scheme://user:password@ -> scheme://user:***@ (a database, Redis or proxy URL in an error text)
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*):(?P<password>[^/@\s]+)@")
REDACTED = "***"


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` without any of ``secrets`` (an API key, a password: each occurrence becomes ***)
    and without the password of any ``scheme://user:password@`` URL in it. Secrets shorter than
    four characters are not searched for (they would blank out ordinary words)."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}:{REDACTED}@", text)


# ---- how common a word is in its language (wordfreq; its data ships in the wheel) -----------------

COMMON_ZIPF = 5.5  # "the", "have", "good": in every sentence, they tell texts apart no better than chance


def is_cjk(word: str) -> bool:
    return "\u4e00" <= word[0] <= "\u9fff"


_HAS_CJK = re.compile("[\u4e00-\u9fff]")  # is_cjk's range


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a Chinese character (a search in C: a day's English text is long)."""
    return _HAS_CJK.search(text) is not None


@functools.cache
def chinese_frequencies() -> dict[str, float]:
    from wordfreq import get_frequency_dict

    return get_frequency_dict("zh")


@functools.cache
def zipf(word: str) -> float:
    """wordfreq's Zipf frequency (7: "the"; 3: once per 10 million words; 0: unknown). A Chinese word
    is looked up as it is (wordfreq's own Chinese tokenizer would need a segmenter)."""
    if is_cjk(word):
        freq = chinese_frequencies().get(word, 0.0)
        return round(math.log10(freq) + 9, 2) if freq > 0 else 0.0
    from wordfreq import zipf_frequency

    return float(zipf_frequency(word, "en"))


# ---- Chinese words (jieba, wordfreq's own Chinese tokenizer; its dictionary ships in the package) ---


class ChineseWord(NamedTuple):
    word: str
    pos: str  # jieba's tag (ICTCLAS): "n" noun, "ns" place, "nr" person, "v" verb, "c" conjunction...


# Tags of the words that say what a text is about: nouns and names, verbs, adjectives, idioms and
# set phrases, abbreviations. Left out: pronouns (r), conjunctions (c: 所以, 但是), adverbs (d),
# prepositions (p), particles (u*), modal and interjections (y, e, o), numerals and measures (m, q)
# and time words (t: 今天, 下周; a summary's period already says when).
_CONTENT_TAGS = ("n", "v", "a", "i", "l", "j")
NOUN_TAGS = ("n",)  # n, nr (person), ns (place), nt (organization), nz (other proper), ng, nrt
PROPER_TAGS = ("nr", "ns", "nt", "nz")
_JIEBA_LOCK = threading.Lock()


@functools.cache
def _posseg() -> Any:
    import logging

    # jieba ships no types: its tagger's (word, flag) pairs are read by attribute, checked below
    import jieba  # type: ignore[import-untyped]
    import jieba.posseg  # type: ignore[import-untyped]

    jieba.setLogLevel(logging.WARNING)  # else every process prints its dictionary loading to stderr
    jieba.initialize()  # thread-safe (jieba's own lock); loads the dictionary from its cache file
    return jieba.posseg


def chinese_content_words(text: str) -> list[ChineseWord]:
    """The content words of the Chinese in ``text``, in order: jieba's segmentation and part of
    speech, kept when the tag is a content one (nouns, verbs, adjectives, idioms) and the word is two
    characters or more, or a one-character noun (猫, 书: a thing, where 吃, 去 are any day's verbs)."""
    if not has_cjk(text):
        return []
    posseg = _posseg()
    with _JIEBA_LOCK:  # jieba's tokenizer keeps state between calls
        pairs = posseg.lcut(text, HMM=True)
    out = []
    for pair in pairs:
        word, pos = str(pair.word), str(pair.flag)
        if not word or not is_cjk(word) or not pos.startswith(_CONTENT_TAGS):
            continue
        if len(word) > 1 or pos.startswith(NOUN_TAGS):
            out.append(ChineseWord(word, pos))
    return out


# ---- stems as SQLite FTS5 indexes them ------------------------------------------------------------


class _Stemmer:
    """FTS5's own ``porter unicode61`` tokenizer, asked through an in-memory table and its fts5vocab
    view (the term each token was indexed as): the stems are exactly a search index's, with no
    stemmer of our own to drift from it. One connection, guarded (the memory server searches from
    threads)."""

    CACHE_MAX = 100_000  # distinct words remembered (a long-running server meets new ones forever)

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.db: sqlite3.Connection | None = None
        self.cache: dict[str, str] = {}

    def stems(self, words: Iterable[str]) -> list[str]:
        words = list(words)
        with self.lock:
            todo = list(dict.fromkeys(w for w in words if w not in self.cache))
            if todo:
                if len(self.cache) + len(todo) > self.CACHE_MAX:
                    self.cache.clear()
                self.cache.update(self._ask(todo))
            return [self.cache[w] for w in words]

    def _ask(self, words: list[str]) -> dict[str, str]:
        if self.db is None:
            self.db = sqlite3.connect(":memory:", check_same_thread=False)
            self.db.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='porter unicode61')")
            self.db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        db = self.db
        db.executemany("INSERT INTO t (rowid, body) VALUES (?, ?)", enumerate(words, 1))
        tokens: dict[int, list[str]] = {}
        for term, doc in db.execute("SELECT term, doc FROM v ORDER BY doc, offset"):
            tokens.setdefault(doc, []).append(term)
        db.execute("DELETE FROM t")
        # a word the tokenizer splits ("a_b") stems to its tokens; one it drops entirely, to itself
        return {w: " ".join(tokens.get(i, [])) or w for i, w in enumerate(words, 1)}


_STEMMER = _Stemmer()


def porter_stems(words: Iterable[str]) -> list[str]:
    """Each word as SQLite FTS5's ``porter unicode61`` tokenizer indexes it ("greyhounds" ->
    "greyhound", "painting" -> "paint", "Café" -> "cafe")."""
    return _STEMMER.stems(words)


def unfenced(text: str | None) -> str:
    """A model's answer without the Markdown code fence real models often wrap JSON in
    (```json ... ```): the fence's first line (with its language tag) and its closing backticks
    removed. Any other answer is returned stripped, as it was."""
    text = (text or "").strip()
    if not text.startswith("```"):
        return text
    return text.strip("`").split("\n", 1)[-1].strip()
