"""The offline deterministic model: the embedded default, so the graph runs with no provider.

It is not a language model. A summary is a headline of the material's most telling content words
(``headline``: frequent, and rarer in the language), within the requested character target; the
domains' tool-calling rules extract (the most informative sentences of a text, ``key_sentences``,
weighing words by how rare they are in the language). It gives the same answer for the same input.
v2: extractive rules; v3: objects for the things a text names (``subject_terms``) and scores
independent of the hash seed; v4: a clitic is its word ("Caroline's" is Caroline, "who's" no
subject) and the autobiography tells five memories; v5: a headline counts a word with every form of
its stem, weighs it by rarity too, leaves out the names people are addressed by, and separates words
with commas; v6: Chinese is cut into words and their parts of speech by jieba, and only its content
words count (nouns, verbs, adjectives: no 所以, 但是, 我们); v7: a Chinese sentence is weighed by those
content words too, not by every run of two characters; v8: sleep's rules order memories of one
time by their content before their ids (ids are new in every run), so a rebuild answers as a clean
run (an earlier version's answer in a cache or a stage record is not reused).
"""

from __future__ import annotations

import math
import re
from collections import Counter

from memory_pipeline.lib.text import (
    COMMON_ZIPF,
    PROPER_TAGS,
    ChineseWord,
    chinese_content_words,
    has_cjk,
    is_cjk,
    porter_stems,
    zipf,
)

NAME = "offline/deterministic-extractive-v8"

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


HEADLINE_SEPARATOR = ", "  # one comma per word: " · " cost 3 characters of a 100-character day each
# Rarity weighs in gently: a word said often outranks a rare one said once (count x weight^(1/3));
# ranked by rarity alone, a day is named by its one-off words, which a question seldom asks about.
RARITY_EXPONENT = 1 / 3
_LINE_STAMP = re.compile(r"^\s*\[[^\]]{0,40}\]\s*")  # "[09:00] ", "[2026-01-06 09:00] "
# A JSON object's key ('"todo": "buy seeds"'): the record's field name, not what it says. Only a
# quoted string followed by a colon and a JSON value, so prose quoting a word before a colon stays.
_JSON_KEY = re.compile(r'"[^"\n]{1,64}"\s*:(?=\s*(?:["\[{\-\d]|true\b|false\b|null\b))')


def headline_words(material: str) -> list[str]:
    """The content words of ``material``, most telling first: each word counted with every form of
    its stem (FTS5's porter stem, as the search index sees it: "paint", "painted", "painting" are one
    word, written in its shortest form), times its language weight (``word_weight``: common words
    weigh nothing) to the power RARITY_EXPONENT. Lines starting with '#' are headers (platform,
    date) and a line's leading "[...]" its time stamp, not content, nor are a JSON record's field
    names (a tower entry's '"todo": ...' says what follows, not what happened) unless its values
    have no content word; the names the material addresses people by ("Hey Mel!") name the
    participants, who are in every one of their conversations and tell none apart. Chinese counts
    its content words (``chinese_content_words``), weighed by ``chinese_weight``."""
    lines = (material or "").splitlines()
    body = "\n".join(_LINE_STAMP.sub("", line) for line in lines if not line.lstrip().startswith("#"))
    values = _JSON_KEY.sub(" ", body)
    if values != body:  # the field names only when the values have no content word at all
        return _ranked_words(values) or _ranked_words(body)
    return _ranked_words(body)


def _ranked_words(body: str) -> list[str]:
    skip = addressed(body)
    found: list[str] = []
    for token in _TOKEN.findall(body):
        w = base_word(token)
        if w is not None and len(w) > 2:
            found.append(w)
    counts = Counter(w for w in found if w not in _STOP and w not in skip and word_weight(w) > 0)
    weight = {w: word_weight(w) for w in counts}
    for cw in chinese_content_words(body):
        if (cjk_weight := chinese_weight(cw)) > 0:
            counts[cw.word] += 1
            weight[cw.word] = max(weight.get(cw.word, 0.0), cjk_weight)
    if not counts:
        return []
    forms: dict[str, list[str]] = {}
    for w, stem in zip(counts, porter_stems(list(counts)), strict=True):
        forms.setdefault(stem, []).append(w)
    score = {
        stem: sum(counts[w] for w in ws) * max(weight[w] for w in ws) ** RARITY_EXPONENT for stem, ws in forms.items()
    }
    return [min(forms[s], key=lambda w: (len(w), w)) for s in sorted(score, key=lambda s: (-score[s], s))]


def headline(material: str, max_chars: int) -> str:
    """The most telling content words (``headline_words``) joined with ", ", as many as fit in
    ``max_chars`` (a longer word is passed over for a shorter one after it; the first word cut to
    ``max_chars`` when none fits); '' for no words."""
    ranked, out = headline_words(material), ""
    for word in ranked:
        candidate = f"{out}{HEADLINE_SEPARATOR}{word}" if out else word
        if len(candidate) <= max_chars:
            out = candidate
    return out or (ranked[0][:max_chars] if ranked else "")


# ---- extractive rules: which sentences of a text carry the most information ------------------------

_TOKEN = re.compile(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|\d+")
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s*")
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|my|me|we|we're|we've|our|us)\b|我|我们", re.IGNORECASE)
SENTENCE_MIN_CHARS = 15  # "Thanks, Mel!" says nothing to remember
SENTENCE_MIN_CJK_CHARS = 5  # a Chinese sentence says as much in fewer characters
SENTENCE_MAX_CHARS = 200
FIRST_PERSON_WEIGHT = 2.0  # a speaker's statement about themselves: the facts a memory is for
QUESTION_WEIGHT = 0.3  # a question asks; it seldom states a fact


# English clitics: "Caroline's" is Caroline, "who's" is who; "n't" only ever ends an auxiliary.
_CLITICS = frozenset({"s", "ve", "ll", "d", "re", "m"})


def base_word(token: str) -> str | None:
    """The word a token stands for, lowercased: a clitic dropped ("Caroline's" -> "caroline",
    "what've" -> "what"), None for a negated auxiliary ("can't", "didn't"); other tokens as they are."""
    key = token.lower()
    head, sep, tail = key.partition("'")
    if not sep:
        return key
    if tail == "t":
        return None
    return head if tail in _CLITICS else key


UNKNOWN_WORD_WEIGHT = 0.8  # a word the language data does not know: a name, a coined word, a typo


def _rarity(z: float, common: float) -> float:
    """The weight of a known word of Zipf ``z``: nothing from ``common`` up, rarer weighs more."""
    return 0.0 if z >= common else min(3.0, max(0.3, 6.0 - z))


def word_weight(word: str) -> float:
    """How much a word tells a sentence apart: rarer in the language weighs more. Very common words
    weigh nothing; an English word the language data does not know (a name, a typo) weighs like an
    uncommon one; two Chinese characters that are no word weigh nothing."""
    z = zipf(word)
    if z == 0:
        return 0.0 if is_cjk(word) else UNKNOWN_WORD_WEIGHT
    return _rarity(z, COMMON_ZIPF)


# A Chinese noun as common as 公司 (6.0) or 北京 (5.75) still says what a day was about: the function
# words that are as common (所以, 但是, 我们) are left out by their part of speech, not their frequency.
CJK_NOUN_COMMON_ZIPF = 6.3


def chinese_weight(cw: ChineseWord) -> float:
    """``word_weight`` for a Chinese content word: a noun weighs nothing only above
    CJK_NOUN_COMMON_ZIPF, a verb or adjective above COMMON_ZIPF (觉得, 知道 are said of anything); a
    word the language data does not know (a name jieba found: 全聚德) weighs like an uncommon one."""
    z = zipf(cw.word)
    if z == 0:
        return UNKNOWN_WORD_WEIGHT
    return _rarity(z, CJK_NOUN_COMMON_ZIPF if cw.pos.startswith("n") else COMMON_ZIPF)


def sentence_words(sentence: str) -> dict[str, float]:
    """Each distinct word of a sentence with its weight: English words of 3+ letters and numbers by
    ``word_weight``, Chinese content words (jieba's, ``chinese_content_words``) by ``chinese_weight``
    (a run of characters is no word: 北京烤鸭 is 北京 and 烤鸭, never 京烤)."""
    out = {w: word_weight(w) for t in _TOKEN.findall(sentence) if (w := base_word(t)) is not None and len(w) > 2}
    for cw in chinese_content_words(sentence):
        out[cw.word] = max(out.get(cw.word, 0.0), chinese_weight(cw))
    return out


def sentence_score(sentence: str) -> float:
    """The information a sentence carries: its distinct words' weights, a first-person statement
    counted double and a question at a third."""
    # fsum: exact whatever the order of the words (a plain sum of floats over a set depends on the
    # hash seed, and a tie between two sentences would flip from one process to the next)
    score = math.fsum(sentence_words(sentence).values())
    if _FIRST_PERSON.search(sentence):
        score *= FIRST_PERSON_WEIGHT
    if sentence.rstrip().endswith(("?", "？")):
        score *= QUESTION_WEIGHT
    return score


def sentences(text: str) -> list[str]:
    """The sentences of a text, each at most SENTENCE_MAX_CHARS (cut at a word, marked '…')."""
    out = []
    for part in _SENTENCE.split(" ".join((text or "").split())):
        part = part.strip()
        if len(part) < (SENTENCE_MIN_CJK_CHARS if has_cjk(part) else SENTENCE_MIN_CHARS):
            continue
        if len(part) > SENTENCE_MAX_CHARS:
            part = part[: SENTENCE_MAX_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;: ") + "…"
        out.append(part)
    return out


SUBJECT_ZIPF = 5.0  # "garden" (4.6) names a topic; "people" (5.9), "house" (5.2) are said of anything
_ADDRESS = re.compile(
    r"\b(?i:hey|hi|hello|thanks|thank you|bye|dear|congrats|congratulations|sorry)[,!]?\s+([A-Z][a-z]+)\b"
    r"|,\s*([A-Z][a-z]+)\s*[!?]"  # "... a place, Sweden." is no address; "Great, Mel!" is
)


def subject_terms(text: str) -> list[tuple[str, str]]:
    """The things a text names that may recur: (key, name) of each distinct word that is not
    everyday vocabulary (Zipf below SUBJECT_ZIPF, or unknown to the language data: a name, a
    coined word; three letters at least) and each Chinese noun (``chinese_content_words``) of two
    characters or more below that frequency, or a name the language data does not know (全聚德).
    Rarest first, then in order of appearance. The name is the word as written where it stands
    mid-sentence (a capital there marks a name), lowercased otherwise."""
    found: dict[str, tuple[float, int, str]] = {}
    at = 0
    for sentence in _SENTENCE.split(" ".join((text or "").split())):
        for i, token in enumerate(_TOKEN.findall(sentence)):
            at += 1
            key = base_word(token)
            if key is None or len(key) < 3 or key.isdigit() or key in _STOP or (z := zipf(key)) >= SUBJECT_ZIPF:
                continue
            name = token[: len(key)] if i > 0 else key
            if key not in found or (found[key][2] == key and name != key):
                found[key] = (z, found[key][1] if key in found else at, name)
        for cw in chinese_content_words(sentence):
            at += 1
            if not cw.pos.startswith("n") or cw.word in found:
                continue
            z = zipf(cw.word)
            if (0 < z < SUBJECT_ZIPF and len(cw.word) > 1) or (z == 0 and cw.pos.startswith(PROPER_TAGS)):
                found[cw.word] = (z, at, cw.word)
    return [(key, name) for key, (_z, _at, name) in sorted(found.items(), key=lambda kv: (kv[1][0], kv[1][1]))]


def addressed(text: str) -> set[str]:
    """Names a text addresses a person by ("Hey Mel!", "Thanks, Caroline", "How are you, Jon?")."""
    return {(a or b).lower() for a, b in _ADDRESS.findall(text or "")}


def key_sentences(items: list[tuple[str, str]], share: int = 4, cap: int = 12) -> list[tuple[str, str]]:
    """The most informative sentences of ``items`` ((speaker, text), in order): a ``share``-th of
    them (at least 2, at most ``cap``), best first by ``sentence_score``, returned in their order.
    A sentence of common words only (score 0) says nothing to keep."""
    scored = [
        (sentence_score(s), (i, j), who, s)
        for i, (who, text) in enumerate(items)
        for j, s in enumerate(sentences(text))
    ]
    if not scored:
        return []
    keep = min(cap, max(2, math.ceil(len(scored) / share)))
    best = [x for x in sorted(scored, key=lambda x: (-x[0], x[1]))[:keep] if x[0] > 0]
    return [(who, s) for _score, _at, who, s in sorted(best, key=lambda x: x[1])]
