"""Chinese through the offline consolidator and memory_search: a world's Chinese days summarized by
the offline model carry what each day was about (its nouns and names, none of the function words
every day shares), and a question in Chinese finds its day (issue 18: English and Chinese)."""

import pytest
from sqlalchemy import select

from memory_pipeline import domains
from memory_pipeline.lib.cache import KVCache
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.recall.documents import MemoryKind
from memory_pipeline.recall.search import memory_search
from memory_pipeline.temporal import context, summaries
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline_tests.conftest import CST, conversation, cst

# Every day says the same function words and pronouns (所以, 但是, 然后, 我们, 觉得, 今天); each day
# has its own topic.
DAYS = {
    cst(2026, 3, 2, 20).date(): (
        [
            "我今天去北京出差了，所以有点累。但是我们见了客户，然后老板请我们吃烤鸭。",
            "烤鸭好吃吗？你们去的是哪家店？",
            "在全聚德，我觉得烤鸭一般，但是客户很满意。",
        ],
        {"北京", "烤鸭", "客户", "全聚德"},
    ),
    cst(2026, 3, 3, 20).date(): (
        [
            "今天我回杭州给妈妈过生日，所以我们去西湖散步了。",
            "西湖美吗？你们然后做了什么？",
            "我们买了生日蛋糕，我觉得妈妈很开心，但是西湖人太多。",
        ],
        {"杭州", "妈妈", "西湖", "生日蛋糕"},
    ),
    cst(2026, 3, 4, 20).date(): (
        [
            "今天我上了第一节钢琴课，所以手指很酸。",
            "钢琴老师怎么样？你们练了什么？",
            "老师让我们练音阶，然后弹了一首练习曲，我觉得钢琴很难但是很有意思。",
        ],
        {"钢琴", "老师", "音阶", "练习曲"},
    ),
    cst(2026, 3, 5, 20).date(): (
        [
            "今天我的猫生病了，所以我们去了宠物医院。",
            "猫怎么了？医生然后怎么说？",
            "兽医说是肠胃炎，给猫打了针，我觉得它明天会好，但是今天它不吃饭。",
        ],
        {"猫", "宠物医院", "兽医", "肠胃炎"},
    ),
}
FUNCTION_WORDS = {"所以", "但是", "然后", "我们", "你们", "觉得", "今天", "怎么", "什么"}
QUESTIONS = {
    "我在哪家店吃的烤鸭？": cst(2026, 3, 2).date(),
    "给妈妈过生日去了哪里？": cst(2026, 3, 3).date(),
    "钢琴老师让我练了什么？": cst(2026, 3, 4).date(),
    "猫得了什么病？": cst(2026, 3, 5).date(),
}


@pytest.fixture
def zh_store(tmp_path) -> Store:
    import json

    from memory_pipeline.events.ingest import ingest_file

    store = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    ensure_schema(store, domains.version_locations())
    events = [
        e
        for day, (texts, _topic) in DAYS.items()
        for e in conversation("zh", f"zh.{day.isoformat()}", cst(day.year, day.month, day.day, 20), texts)
    ]
    path = tmp_path / "zh.jsonl"
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    assert ingest_file(store, path).inserted == len(events)
    ctx = context.TemporalContext(store, LLMClient(store), KVCache(None), TemporalSummaryConfig(), CST)
    summaries.regenerate_many(ctx, "day", sorted(DAYS))
    return store


def test_chinese_day_summaries_name_what_the_day_was_about_and_no_function_word(zh_store):
    t = temporal_summaries.c
    with zh_store.connect() as conn:
        rows = {
            r.period_start: r.content for r in conn.execute(select(t.period_start, t.content).where(t.window == "day"))
        }
    assert set(rows) == set(DAYS)
    for day, (_texts, topic) in DAYS.items():
        words = set(rows[day].split(", "))
        assert len(rows[day]) <= 100, rows[day]  # the seed's day cap
        assert topic <= words, (day, rows[day])
        assert not FUNCTION_WORDS & words, (day, rows[day])


def test_a_chinese_question_finds_its_day(zh_store):
    activity = TowerConfig().activity_type
    for question, day in QUESTIONS.items():
        hits = memory_search(zh_store, "zh", question, 3, activity_type=activity, tz=CST)
        days = [h.start.astimezone(CST).date() for h in hits if h.kind is MemoryKind.DAY_SUMMARY and h.start]
        assert days and days[0] == day, (question, [(h.kind, h.text) for h in hits])
