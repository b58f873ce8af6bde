"""The offline model's extractive rules: words weighed by how rare they are in the language, the most
informative sentences of a session kept (a quarter, 2 to 12), first-person statements preferred."""

import os
import subprocess
import sys

from memory_pipeline.lib.llm import offline


def test_rare_words_weigh_more_and_the_commonest_nothing():
    assert offline.word_weight("the") == 0.0 and offline.word_weight("have") == 0.0
    assert offline.word_weight("greyhound") > offline.word_weight("photo") > 0
    assert offline.word_weight("钢琴") > offline.word_weight("我们") >= 0
    assert offline.word_weight("zqxjkvw") == 0.8  # unknown to the language data: a name or a typo


def test_a_statement_about_oneself_outweighs_the_same_words_said_of_nobody_and_a_question_weighs_least():
    fact = "I adopted a greyhound from the shelter."
    neutral = "A greyhound was adopted from the shelter."
    asked = "Did you adopt a greyhound from the shelter?"
    assert offline.sentence_score(fact) > offline.sentence_score(neutral) > offline.sentence_score(asked)


def test_a_chinese_sentence_is_weighed_by_its_content_words_not_by_runs_of_characters():
    # 北京 and 烤鸭 are words; 京烤 is two characters across them, and 我们, 所以, 然后 say nothing
    assert set(offline.sentence_words("我们在北京吃了烤鸭")) == {"北京", "烤鸭"}
    assert offline.sentence_score("所以我们然后就觉得") == 0.0  # 觉得 is said of anything
    # a rare name (全聚德) is one word and weighs more than an everyday place (北京)
    assert offline.sentence_words("周末去全聚德吃饭")["全聚德"] > offline.sentence_words("去北京")["北京"] > 0
    assert offline.sentence_score("我周末去全聚德吃了烤鸭。") > offline.sentence_score("我觉得我们可以去看看。")


def test_sentences_split_on_ends_drop_the_empty_and_cut_the_long_at_a_word():
    text = "Thanks, Mel! I went to the pottery class on Friday. 我在杭州学钢琴。好的。" + " word" * 80
    got = offline.sentences(text)
    assert got[0] == "I went to the pottery class on Friday."
    assert got[1] == "我在杭州学钢琴。"  # "好的。" and "Thanks, Mel!" are too short to say anything
    assert len(got[2]) <= offline.SENTENCE_MAX_CHARS and got[2].endswith("…") and " wor…" not in got[2]


def test_key_sentences_keep_a_quarter_best_first_in_their_order():
    items = [("user", f"I visited museum number {i} in Stockholm with my sister.") for i in range(8)]
    items.insert(3, ("assistant", "That is so nice, what a day that must have been for you."))
    items.insert(5, ("user", "I finally ran the Boston marathon with my brother and a kangaroo mascot."))
    kept = offline.key_sentences(items)
    assert len(kept) == 3  # ceil(10 / 4)
    assert ("user", "I finally ran the Boston marathon with my brother and a kangaroo mascot.") in kept
    assert ("assistant", "That is so nice, what a day that must have been for you.") not in kept
    order = [items.index(k) for k in kept]
    assert order == sorted(order)
    assert offline.key_sentences([]) == [] and len(offline.key_sentences(items * 10)) == 12  # the cap
    assert len(offline.key_sentences(items[:1])) == 1  # fewer sentences than the minimum of 2


def test_a_sentence_scores_the_same_in_every_process():
    """Words are a set, whose order follows the process's hash seed; a float sum in that order
    differed in its last bits (20.44 vs 20.439999999999998), enough to flip a tie between sentences."""
    code = "from memory_pipeline.lib.llm import offline;print(repr(offline.sentence_score(" + repr(TIE_SENTENCE) + ")))"
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(8)
    }
    assert len(seen) == 1, seen


TIE_SENTENCE = (
    "Yesterday I finally finished painting the sunrise over the lake near my grandmother's cottage, "
    "with violet clouds, pine trees and a small wooden canoe drifting past the reeds."
)


def test_a_person_is_a_name_the_text_addresses_someone_by():
    assert offline.addressed("Hey Mel! Thanks, Caroline. How are you, Jon? Great news, Ana!") == {
        "mel",
        "caroline",
        "jon",
        "ana",
    }
    assert offline.addressed("We moved back home, Sweden. I met Jon at the park.") == set()


def test_a_clitic_is_its_word_and_a_negated_auxiliary_no_word():
    assert offline.base_word("Caroline's") == "caroline" and offline.base_word("what've") == "what"
    assert offline.base_word("they'll") == "they" and offline.base_word("I'm") == "i"
    assert offline.base_word("can't") is None and offline.base_word("didn't") is None
    assert offline.base_word("rock'n'roll") == "rock'n'roll"  # not a clitic: the token as it is
    # "who's", "one's" name no subject (their word is common); a name's possessive names the name
    terms = offline.subject_terms("Then who's there? It is one's own. Later Aragorn's story and Aragorn.")
    assert terms == [("aragorn", "Aragorn")]
    assert set(offline.sentence_words("who's can't what've Kyoto's")) == {"who", "what", "kyoto"}


def test_a_headline_counts_a_word_with_every_form_of_its_stem_and_writes_the_shortest():
    material = "I painted all week. The painting is done. Paint dries fast. The garden is green. Garden."
    words = offline.headline_words(material)
    assert words[0] == "paint" and "painting" not in words and "painted" not in words
    assert words.index("paint") < words.index("garden")  # three forms said beat one word said twice


def test_a_headline_leaves_out_the_names_people_are_addressed_by_and_the_commonest_words():
    material = "Hey Mel! I adopted a greyhound. Thanks, Mel! The greyhound is mine. Mel went home. We have it."
    words = offline.headline_words(material)
    assert "mel" not in words and "have" not in words and words[0] == "greyhound"


def test_a_headline_reads_a_json_records_values_not_its_field_names():
    """A tower entry is a JSON record: its keys name fields ("project", "todo"), which every entry
    repeats, so they outranked what the entries said; a quoted word before a colon in prose stays."""
    material = "\n".join(
        f'[2026-01-0{d} 09:00] {{"did": "repotted the {w} seedlings", "project": "greenhouse", "todo": "water {w}"}}'
        for d, w in ((5, "tomato"), (6, "pepper"), (7, "tomato"))
    )
    words = offline.headline_words(material)
    assert {"did", "project", "todo"}.isdisjoint(words), words
    assert words[0] == "tomato" and {"repotted", "seedlings", "greenhouse", "pepper"} <= set(words), words
    assert "orchard" in offline.headline_words('The sign said "orchard": we went in.')
    # values with no content word: the field names are all the record says
    assert offline.headline_words('{"project": "a", "did": "a work"}') == ["project"]


def test_rarity_breaks_a_tie_of_counts_and_the_headline_fits_its_target_with_commas():
    assert offline.headline_words("A photo and a greyhound.") == ["greyhound", "photo"]  # once each: rarer first
    got = offline.headline("greyhound greyhound photo photo lake lake shelter", 24)
    assert got == "greyhound, lake, photo" and len(got) <= 24  # "shelter" would not fit
    assert offline.headline("缓存 缓存 数据库 数据库 数据库", 20).split(offline.HEADLINE_SEPARATOR)[0] == "数据库"


CHINESE_DAY = """[09:00] user: 我昨天去北京出差了，所以今天有点累。但是公司的项目终于上线了，老板请我们吃了烤鸭。
[09:01] assistant: 恭喜！项目上线是大事。烤鸭好吃吗？你们在哪家店吃的？
[09:02] user: 在全聚德，其实我觉得一般般。下周我还要去上海见客户，然后周末回杭州看我妈妈。"""


def test_a_chinese_headline_is_the_content_words_of_a_real_segmentation():
    words = offline.headline_words(CHINESE_DAY)
    # what the day was about, the cities and the restaurant included (北京 and 公司 are as common in
    # the language as 所以 and 但是: parts of speech, not frequency, tell them apart)
    assert {"烤鸭", "项目", "上线", "北京", "上海", "杭州", "全聚德", "公司", "客户", "出差"} <= set(words)
    # no function word, pronoun or time word; no piece of a wrong cut ("我妈妈", "见客", "我觉")
    assert not {"所以", "但是", "然后", "其实", "我们", "你们", "今天", "昨天", "下周", "觉得"} & set(words)
    assert not {"我妈妈", "见客", "我觉", "我还"} & set(words)
    assert words[:2] == ["烤鸭", "上线"]  # said twice each and rare in the language
    assert len(offline.headline(CHINESE_DAY, 30)) <= 30


def test_chinese_subjects_are_nouns_rarer_than_everyday_words_and_names():
    subjects = [key for key, _name in offline.subject_terms(CHINESE_DAY)]
    assert subjects[0] == "全聚德"  # a name the language data does not know: rarest
    assert {"烤鸭", "杭州", "客户", "老板"} <= set(subjects)
    # verbs are no subjects, nor are nouns as common as 公司 (said of anything)
    assert not {"出差", "恭喜", "公司", "所以", "今天"} & set(subjects)
