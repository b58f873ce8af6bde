"""The recall metric's rules: BM25 day ranking (English and Chinese), R@1/R@5 counting, the exact
chance level, and which LoCoMo questions are measured."""

import json
import math
from collections import Counter
from datetime import date, timedelta

import pytest

from memory_pipeline.recall.metric import (
    DayRanker,
    Index,
    Question,
    fts_query,
    query_terms,
    random_expectation,
    score_index,
    score_random,
    stem,
    stems,
)
from memory_pipeline.recall.questions import QuestionError, questions

D = [date(2023, 5, 1) + timedelta(days=i) for i in range(8)]


def test_the_day_holding_the_rare_words_of_the_question_ranks_first():
    texts = {
        D[0]: "We talked about the weather and the weather again.",
        D[1]: "Caroline went to a pottery class and made a blue bowl.",
        D[2]: "Melanie ran a charity marathon for the animal shelter.",
        D[3]: "The weather was nice; we talked about work.",
    }
    ranker = DayRanker(texts, texts)
    assert ranker.rank("What did Caroline make at the pottery class?")[0] == D[1]
    assert ranker.rank("Which charity did Melanie run for?")[0] == D[2]
    ranker.close()


def test_porter_stemming_matches_other_forms_of_a_word():
    ranker = DayRanker({D[0]: "She was painting sunsets.", D[1]: "He fixed the car."}, D[:2])
    assert ranker.rank("What does she paint?")[0] == D[0]


def test_a_word_stems_as_the_index_tokenizer_stores_it():
    assert stem("greyhounds") == stem("greyhound") == "greyhound"
    assert stem("painting") == stem("paints") == stem("paint") == "paint"
    assert stem("Café") == "cafe"  # unicode61 folds case and diacritics before porter
    assert stem("foo_bar") == "foo bar"  # unicode61 splits on "_": both tokens
    assert stems("The greyhounds were running") == {"the", "greyhound", "were", "run"}
    # exactly the terms the metric's own FTS5 table indexed
    ranker = DayRanker({D[0]: "Two greyhounds running", D[1]: "a cat's sleeping"}, D[:2])
    ranker.db.execute("CREATE VIRTUAL TABLE terms USING fts5vocab(days, 'row')")
    indexed = {t for (t,) in ranker.db.execute("SELECT term FROM terms")}
    assert (
        indexed
        == stems("Two greyhounds running a cat's sleeping")
        == {"two", "greyhound", "run", "a", "cat", "s", "sleep"}
    )


def test_a_question_asks_each_stem_once():
    assert query_terms("Did she paint? What is her painting of, and which paints?") == [
        "did", "she", "paint", "what", "is", "her", "of", "and", "which",
    ]  # fmt: skip
    assert fts_query("greyhounds or a greyhound?") == '"greyhounds" OR "or" OR "a"'
    # "paint" and "sunset" are each on one day, as rare as each other: the question's forms of
    # "paint" count once, so the shorter day wins as BM25 has it (counted twice, "paint" won)
    texts = {D[0]: "we paint a lot", D[1]: "a sunset", D[2]: "x y", D[3]: "x y z", D[4]: "q r", D[5]: "r s"}
    ranker = DayRanker(texts, texts)
    assert ranker.rank("painting paint sunset")[:2] == ranker.rank("paint sunset")[:2] == [D[1], D[0]]


def test_chinese_text_is_ranked_by_its_characters():
    texts = {D[0]: "今天我们去杭州西湖划船", D[1]: "他在北京学习钢琴", D[2]: "天气很好"}
    ranker = DayRanker(texts, texts)
    assert ranker.rank("他在哪里学钢琴？")[0] == D[1]
    assert ranker.rank("我们在西湖做了什么")[0] == D[0]
    assert query_terms("学钢琴") == ["学", "钢", "琴"]


def test_every_candidate_day_is_ranked_and_unmatched_days_follow_in_a_fixed_order():
    texts = {D[0]: "pottery", D[1]: ""}
    ranker = DayRanker(texts, D)
    ranked = ranker.rank("pottery class")
    assert ranked[0] == D[0] and sorted(ranked) == D  # days without text still compete
    assert ranked == ranker.rank("pottery class")  # deterministic
    assert DayRanker({}, D).rank("nothing matches") == DayRanker({}, D).rank("nothing matches")


def test_question_syntax_never_reaches_fts5_as_an_operator():
    assert (
        fts_query('What "is" NEAR(a b) OR NOT c*?') == '"what" OR "is" OR "near" OR "a" OR "b" OR "or" OR "not" OR "c"'
    )
    assert fts_query("?!") is None
    assert DayRanker({D[0]: "x"}, D[:3]).rank("?!")[0] in D[:3]


def test_recall_counts_a_hit_when_any_evidence_day_is_in_the_top_k():
    texts = {"w": {d: f"filler day {i}" for i, d in enumerate(D)} | {D[6]: "the pottery class"}}
    hit = Question("w", "pottery", frozenset({D[6]}))
    two_days = Question("w", "pottery", frozenset({D[0], D[6]}))
    miss = Question("w", "pottery", frozenset({D[0]}))  # D[0] has no pottery: at best 2nd
    score = score_index(Index.RAW, [hit, two_days, miss], texts, {"w": D})
    assert score.questions == 3
    assert score.hits[1] == 2  # hit and two_days rank D[6] first
    assert score.recall(1) == pytest.approx(2 / 3)
    assert score.chars == sum(len(t) for t in texts["w"].values()) and score.days == len(D)


def test_chance_level_is_exact():
    assert random_expectation(10, 1, 1) == pytest.approx(0.1)
    assert random_expectation(10, 1, 5) == pytest.approx(0.5)
    assert random_expectation(10, 2, 5) == pytest.approx(1 - math.comb(8, 5) / math.comb(10, 5))
    assert random_expectation(3, 1, 5) == 1.0  # fewer days than k: every day is in the top 5
    qs = [Question("w", "q", frozenset({D[0]}))]
    assert score_random(qs, {"w": D}).recall(5) == pytest.approx(5 / 8)


def _locomo(tmp_path, qa, name="26.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"speaker_a": "A", "speaker_b": "B", "qa": qa}), encoding="utf-8")
    return path


def test_category_5_and_questions_without_usable_evidence_are_left_out_and_counted(tmp_path):
    path = _locomo(
        tmp_path,
        [
            {"question": "q1", "evidence": ["D1:2"], "category": 2},
            {"question": "q2", "evidence": ["D1:1; D2:3"], "category": 1},  # two turns in one entry
            {"question": "q3", "evidence": ["D1:2"], "category": 5},
            {"question": "q4", "evidence": [], "category": 4},
            {"question": "q5", "evidence": ["D9:9"], "category": 3},
        ],
    )
    days = {"locomo-26.D1.1": D[0], "locomo-26.D1.2": D[0], "locomo-26.D2.3": D[1]}
    left: Counter[str] = Counter()
    got = questions(path, days, left)
    assert [(q.text, q.evidence_days) for q in got] == [
        ("q1", frozenset({D[0]})),
        ("q2", frozenset({D[0], D[1]})),
    ]
    assert all(q.world == "locomo-26" for q in got)
    assert left == {"category 5 (adversarial)": 1, "no evidence": 1, "evidence names no imported turn": 1}


def test_a_file_without_questions_is_refused_by_name(tmp_path):
    path = tmp_path / "30.json"
    path.write_text(json.dumps({"speaker_a": "A", "speaker_b": "B"}), encoding="utf-8")
    with pytest.raises(QuestionError, match=r"30.json:\$\.qa: missing"):
        questions(path, {})
    bad = _locomo(tmp_path, [{"question": 3}], "41.json")
    with pytest.raises(QuestionError, match=r"41.json:\$\.qa\[0\]\.question: expected a string"):
        questions(bad, {})
    # a question is a memory_search query: blank or too long failed that search after the whole build
    for text in ("", "  ", "x" * 2001):
        bad = _locomo(
            tmp_path, [{"question": "ok?", "evidence": ["D1:1"], "category": 1}, {"question": text}], "42.json"
        )
        with pytest.raises(QuestionError, match=r"42.json:\$\.qa\[1\]\.question: expected 1 to 2,000 characters"):
            questions(bad, {})
    # a category that is not an integer: "5" was measured as if it were not the adversarial 5
    for category in ("5", 5.0, True, None):
        bad = _locomo(tmp_path, [{"question": "ok?", "evidence": ["D1:1"], "category": category}], "43.json")
        with pytest.raises(QuestionError, match=r"43.json:\$\.qa\[0\]\.category: expected an integer"):
            questions(bad, {})
    # none at all: an adversarial question (5) without it was measured as any other
    bad = _locomo(tmp_path, [{"question": "ok?", "evidence": ["D1:1"]}], "44.json")
    with pytest.raises(QuestionError, match=r"44.json:\$\.qa\[0\]\.category: missing \(an integer; 5"):
        questions(bad, {})
    # a question that is no object is named as such, not by a field it does not have
    bad = _locomo(tmp_path, ["What did she paint?"], "45.json")
    with pytest.raises(QuestionError, match=r'45.json:\$\.qa\[0\]: expected a question object, got "What did'):
        questions(bad, {})
