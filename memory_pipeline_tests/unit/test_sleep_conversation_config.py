"""memory.sleep and memory.conversation are validated strictly (types, unknown keys, ranges), and
the conversation summary's pure rules (gate, layout, sentences)."""

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipeline.conversation import config as conversation_config
from memory_pipeline.conversation import logic
from memory_pipeline.lib.settings import ConfigError
from memory_pipeline.sleep import config as sleep_config


def write(tmp_path, body):
    p = tmp_path / "memory.yaml"
    p.write_text(body, encoding="utf-8")
    return p


@pytest.mark.parametrize(
    "body, message",
    [
        ("memory:\n  sleep:\n    enabled: 'no'\n", "memory.sleep.enabled: expected bool, got str 'no'"),
        ("memory:\n  sleep:\n    pinned_top: true\n", "memory.sleep.pinned_top: expected int, got bool True"),
        ("memory:\n  sleep:\n    naptime: 3\n", "unknown key(s) in memory.sleep: naptime"),
        ("memory:\n  sleep:\n    pinned_top: 0\n", "memory.sleep.pinned_top: must be a positive integer"),
        ("memory:\n  sleep:\n    self_blocks: a,b,c\n", "expected six distinct names in one comma-separated string"),
        ("memory:\n  sleep:\n    self_blocks: a,b,c,d,e,f\n", "must include autobiography_summary"),
        ("memory:\n  sleep:\n    deep_batch_chars: 5000\n", "deep_warn_chars < deep_batch_chars < deep_refuse_chars"),
    ],
)
def test_sleep_section_is_strict(tmp_path, body, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sleep_config.load(write(tmp_path, body))


@pytest.mark.parametrize(
    "body, message",
    [
        ("memory:\n  conversation:\n    trim_history: 1\n", "memory.conversation.trim_history: expected bool"),
        ("memory:\n  conversation:\n    min_entries: -3\n", "must be a positive integer"),
        ("memory:\n  conversation:\n    trim: true\n", "unknown key(s) in memory.conversation: trim"),
    ],
)
def test_conversation_section_is_strict(tmp_path, body, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        conversation_config.load(write(tmp_path, body))


def test_defaults():
    s, c = sleep_config.load(None), conversation_config.load(None)
    assert (s.pinned_top, s.light_input_max_chars, len(s.block_names())) == (20, 120_000, 6)
    assert (c.min_entries, c.trim_history, c.history_tail, c.trimmed_tail, c.max_sentences) == (30, False, 49, 20, 10)


@pytest.mark.parametrize("status", [None, "pending", "phase1_done", "phase2_done"])
def test_gate_needs_done(status):
    assert not logic.gate(status, 100)


@pytest.mark.parametrize("n, ok", [(29, False), (30, True), (31, True)])
def test_gate_counts(n, ok):
    assert logic.gate("done", n) is ok and logic.due("done", n, 0, False) is ok


def test_rendered_layout_is_the_seeds():
    s = logic.Sections("用户在处理家里的事。她有些自责。", ("住北京",), (("剧本", "投入"),), ("墓地还没定",))
    text = logic.render(s, date(2026, 4, 20), datetime(2026, 4, 21, 8, tzinfo=ZoneInfo("Asia/Shanghai")), 1, 42)
    assert text == (
        "# 对话历程摘要（滚动）\n\n"
        "> 由 conversation_summary skill 维护。rolling 更新，不覆盖。\n"
        "> 作为 long context 的压缩锚，防止角色漂向共情模板。\n\n"
        "## 最近情感主线（至 2026-04-20）\n\n用户在处理家里的事。她有些自责。\n\n"
        "## 已知用户偏好 / 事实（归集自 user_profile.md，以最近为准）\n\n- 住北京\n\n"
        "## 情绪关键点（最近 30 条里）\n\n- 剧本 → 投入\n\n"
        "## 未解决的钩子\n\n- 墓地还没定\n\n---\n\n"
        "<!-- last_updated: 2026-04-21T08:00:00+08:00 -->\n"
        "<!-- covered_range: L1 - L42 -->\n"
    )
    assert logic.layout_ok(text) and not logic.layout_ok(text.replace("## 未解决的钩子", "## 钩子"))
    assert logic.check_line(s.arc) == "我对咱们最近聊的事的印象是 用户在处理家里的事，大致对吗？"


@settings(max_examples=300, deadline=None)
@given(
    args=st.dictionaries(
        st.sampled_from(["emotional_arc", "preferences", "emotional_key_points", "unresolved_hooks", "x"]),
        st.recursive(
            st.none() | st.text(max_size=40) | st.integers(),
            lambda i: st.lists(i, max_size=3) | st.dictionaries(st.text(max_size=6), i, max_size=3),
            max_leaves=8,
        ),
    )
)
def test_arbitrary_summary_answers_parse_or_fail_with_format_error(args):
    try:
        s = logic.parse_sections({"id": "c", "name": logic.TOOL, "arguments": args})
    except logic.FormatError:
        return
    assert logic.sentences(s.arc) <= 10


def test_the_production_file_loads_with_the_defaults():
    from memory_pipeline.lib.settings import REPO_ROOT

    path = REPO_ROOT / "deploy" / "production" / "memory.yaml"
    assert sleep_config.load(path) == sleep_config.SleepConfig()
    assert conversation_config.load(path) == conversation_config.ConversationConfig()


# --- the author's view (decisions: a whole line of 6+ tokens, or 12 tokens in a row, is a quote) ---

HISTORY = [(1, "我昨天终于去看了墓地"), (2, "I really want to finish the script before the summer holidays start")]


def _sections(arc="她这段时间在处理家里的事。", prefs=(), hooks=(), topics=()):
    return logic.Sections(arc, tuple(prefs), tuple((t, "投入") for t in topics), tuple(hooks))


def test_a_whole_line_of_six_tokens_is_a_quote_five_are_not():
    logic.check_author_view(_sections(hooks=("她终于去看了墓地",)), [(3, "去看了墓地")])  # 5 tokens
    with pytest.raises(logic.AuthorViewError, match=r"field 'unresolved_hooks\[0\]': copies history line L3 verbatim"):
        logic.check_author_view(_sections(hooks=("她说终于去看了墓地了",)), [(3, "终于去看了墓地")])  # 7
    # punctuation, spacing and case do not hide a copy
    with pytest.raises(logic.AuthorViewError, match="L1 verbatim"):
        logic.check_author_view(_sections(prefs=("我 昨天，终于去看了 墓地！",)), HISTORY)


def test_twelve_tokens_in_a_row_of_a_longer_line_are_a_quote_eleven_are_not():
    logic.check_author_view(
        _sections(hooks=("really want to finish the script before the summer holidays start",)), HISTORY
    )
    with pytest.raises(logic.AuthorViewError, match="copies history line L2 verbatim"):
        logic.check_author_view(
            _sections(hooks=("She: I really want to finish the script before the summer holidays start",)), HISTORY
        )


@pytest.mark.parametrize(
    "sections, message",
    [
        (_sections(arc="用户说「我爸走了」。角色只回了一句。"), "quotes what was said"),
        (_sections(arc='She said "I am tired". It was late.'), "quotes what was said"),
        (_sections(arc="用户聊了剧本、工作、墓地、搬家。"), "running log"),
        (_sections(prefs=("2026-04-18 开始写剧本",)), r"field 'preferences\[0\]': contains a date"),
        (_sections(arc="她04-19又提起了工作。"), "contains a date"),
    ],
)
def test_the_seeds_dont_list_is_refused(sections, message):
    with pytest.raises(logic.AuthorViewError, match=message):
        logic.check_author_view(sections, HISTORY)


def test_what_the_seed_allows_passes():
    ok = _sections(
        arc="用户这段时间在处理父亲去世一年后的丧事。先是找墓地的务实，夹着对拖了一年的自责。聊到剧本让角色想起自己的心事。",
        prefs=("美国读书工作过，现和妈妈住北京", "喜欢耽美/权斗小说"),
        hooks=("她提过想讨论剧本但还没真正开始",),
        topics=("《妻为上》", "2026-04 的墓地"),  # a timeline key point may carry its date
    )
    logic.check_author_view(ok, HISTORY, long_arc="角色一直放不下离开故乡这件事")
    with pytest.raises(logic.AuthorViewError, match="copies long_arc"):
        logic.check_author_view(
            _sections(arc="角色一直放不下离开故乡这件事，心里总惦记着老房子。"),
            HISTORY,
            long_arc="角色一直放不下离开故乡这件事，心里总惦记着老房子。",
        )


# --- what the seed allows is accepted; what it forbids is still refused -----------------------------


@pytest.mark.parametrize(
    "sections",
    [
        _sections(arc="她每天加班 10-12 个小时，很疲惫。说起工作时语气很平。"),
        _sections(arc="她觉得自己 24/7 都在待命，有些撑不住。"),
        _sections(arc="剧本已经写完了 3/4，她对结尾还在犹豫。"),
        _sections(arc="4月18日父亲忌日那天她情绪崩溃了。之后慢慢平静下来。"),  # a timeline key point
        _sections(topics=("4月18日 父亲忌日",)),  # a key point's own date
        _sections(hooks=("2026-05-01 搬家之前想把剧本定稿",)),
        _sections(arc="她聊到工作、家庭、健康、感情时都很投入。"),  # a list that says how she felt
    ],
    ids=["hours-range", "24-7", "fraction", "key-point-date-in-arc", "key-point-topic", "hook-date", "feeling-list"],
)
def test_what_the_seed_allows_is_accepted(sections):
    logic.check_author_view(sections, HISTORY)


@pytest.mark.parametrize(
    "sections, message",
    [
        (_sections(arc="2026-04-18 聊剧本 / 04-19 聊工作 / 04-20 聊墓地。"), "dated event list"),  # the seed's
        (_sections(arc="她4月18日谈起剧本。"), "dated event list"),
        (_sections(hooks=("04-19 聊工作的事还没说完",)), r"field 'unresolved_hooks\[0\]': contains a date"),
        (
            _sections(arc="4月18日她去了墓地。4月19日她很难过。", hooks=("2026-04-20 搬家",)),
            "contains 3 dates",
        ),
        (_sections(arc="用户讲了剧本、工作、墓地、搬家。"), "running log"),
        (_sections(prefs=("2026-04-18 开始写剧本",)), r"field 'preferences\[0\]': contains a date"),
    ],
    ids=["seed-list", "dated-talk", "dated-hook", "three-dates", "running-log", "dated-fact"],
)
def test_what_the_seed_forbids_is_still_refused(sections, message):
    with pytest.raises(logic.AuthorViewError, match=message):
        logic.check_author_view(sections, HISTORY)


@pytest.mark.parametrize(
    "sections",
    [
        # 小说 (a novel) is not 说: a list of what she reads, in the emotional arc
        _sections(arc="她平时爱看耽美、权斗、悬疑、历史小说，自己也在写剧本。说到剧本时很投入。"),
        _sections(arc="4月18日她开始写小说，那之后整个人轻松了不少。"),  # a timeline key point
        _sections(arc="她从3月2日起每天提前一小时起床跑步，精神好多了。"),  # 提前 is not 提
        _sections(arc="她4月18日开始谈恋爱了，整个人都亮了起来。"),  # 谈恋爱 (dating) is not 谈
    ],
    ids=["novels", "dated-novel", "earlier", "dating"],
)
def test_a_word_that_only_contains_a_telling_character_is_not_telling(sections):
    logic.check_author_view(sections, HISTORY)


@pytest.mark.parametrize(
    "arc",
    [
        "用户讲了剧本、工作、墓地和搬家。",  # the last item joined by 和
        "The user talked about the script, work, the cemetery and moving.",
        "The user talked about the script, work, the cemetery, and moving house.",
        "She discussed work, family, health, money.",
        "用户先聊了剧本，又聊了工作，然后聊了墓地，最后聊了搬家。",  # one clause per thing told
    ],
    ids=["zh-and", "en-list", "en-oxford", "en-bare", "zh-clauses"],
)
def test_a_running_log_is_refused_in_any_of_its_forms(arc):
    with pytest.raises(logic.AuthorViewError, match="running log"):
        logic.check_author_view(_sections(arc=arc), HISTORY)


@pytest.mark.parametrize(
    "arc",
    [
        "她聊到父亲时哽咽，说起墓地却很务实，提到剧本又兴奋起来，谈到懒就有防御感。",
        "When she talked about her father, she cried, then went quiet, then changed the subject.",
        "She talked about work, her mother, the move and the cemetery, and was tense the whole time.",
        "She talked about her father, which was hard, and about work.",
        "用户讲了剧本、工作和搬家，还没说到墓地。",  # three things
    ],
    ids=["zh-feelings", "en-avoidance", "en-tense", "en-clauses", "three"],
)
def test_what_was_told_with_how_she_felt_or_fewer_than_four_things_is_no_running_log(arc):
    logic.check_author_view(_sections(arc=arc), HISTORY)


@pytest.mark.parametrize(
    "sections",
    [
        _sections(arc="4/18 聊剧本 / 4/19 聊工作 / 4/20 聊墓地。"),
        _sections(arc="4/18：剧本；4/19：工作；4/20：墓地。"),
        _sections(arc="她4/18聊剧本，4/19又聊工作。"),
        _sections(arc="4月18 聊剧本，之后就不太说话了。"),
        _sections(arc="四月十八日聊了剧本，后来很少再提。"),
        _sections(arc="On April 18 she talked about the script and then went quiet."),
        _sections(arc="Apr 18: the script. Apr 19: work. Apr 20: the cemetery."),
        _sections(arc="18 April: the script; 19 April: work; 20 April: the cemetery."),
        _sections(prefs=("5月3日开始写剧本",)),
    ],
    ids=[
        "slash-list",
        "slash-items",
        "slash-told",
        "no-ri",
        "chinese-numerals",
        "en-told",
        "en-abbr",
        "en-day-first",
        "fact",
    ],
)
def test_a_dated_event_list_is_refused_in_any_date_format(sections):
    with pytest.raises(logic.AuthorViewError, match="date"):
        logic.check_author_view(sections, HISTORY)


@pytest.mark.parametrize(
    "sections",
    [
        _sections(arc="她最近总是晚上10点以后才愿意聊工作，语气也松了一些。"),
        _sections(arc="她今年32岁，说到年龄时明显有些焦虑；公司裁员20%的消息让她提心吊胆。"),
        _sections(arc="Python 3.5、3.8、3.11她都试过，说起升级就烦。"),  # versions
        _sections(arc="她的作息是9-5，每周见3-4次朋友，提到周末才会松一口气。"),
        _sections(arc="她3/4的时间都在加班，说起这件事很委屈。"),
        _sections(arc="周末她去了墓地，回来后很平静。上周三聊到父亲时她哭了。"),
        _sections(arc="2024年她搬到北京，2024年3月那次面试让她很受打击。"),  # a year, a month
        _sections(arc="On 18 April, her father's anniversary, she broke down; by May she sounded calmer."),
        _sections(hooks=("她提过4/18想去扫墓，还没定",)),  # one M/D alone is taken for a number
        _sections(prefs=("生日是5月3日", "手机号138-1234-5678", "Her birthday is May 3")),  # days that come back
    ],
    ids=[
        "time",
        "age-percent",
        "versions",
        "ranges",
        "fraction",
        "weekdays",
        "year-month",
        "en-key-point",
        "one-md",
        "birthday",
    ],
)
def test_times_counts_versions_and_yearly_days_are_not_dated_events(sections):
    logic.check_author_view(sections, HISTORY)


@pytest.mark.parametrize(
    "arc",
    [
        "用户：「我爸走了」角色：「嗯」",  # a script of who said what
        "The user: 'my dad passed away.' The character: 'I see.'",
        "她那句「我爸走了」让角色很难受。",  # the line pointed at
        "她跟角色说了一句「我好累」，然后就下线了。",
        "“我没事，”她说，但语气很低落。",  # the speaker after the quote
        "「我爸走了」，她说完就沉默了。",
        '"I\'m fine," she said, but she sounded tired.',
        '"I\'m fine," said the user, and changed the subject.',
    ],
    ids=["zh-script", "en-script", "that-line", "said-a-line", "zh-after", "zh-after-2", "en-after", "en-said-the"],
)
def test_quoted_speech_is_refused_however_it_is_attributed(arc):
    with pytest.raises(logic.AuthorViewError, match="quotes what was said"):
        logic.check_author_view(_sections(arc=arc), HISTORY)


@pytest.mark.parametrize(
    "arc",
    [
        "先是找墓地的务实，夹着对'拖了一年'的自责。聊到《妻为上》时投入，聊到'懒'时有防御感。",  # the seed's own
        "她把自己形容成“社畜”，说起来有点自嘲。",
        "她的口头禅「随便」背后其实是累；她最在意的一个词：「懒」。",
        '"Fine" is her default answer when work comes up, and she sounds defensive.',
        "She's said before that work is hard, and she's tired of 'being strong' all the time.",
    ],
    ids=["seed", "self-description", "catchphrase", "en-word", "en-apostrophes"],
)
def test_a_quoted_word_or_phrase_is_not_quoted_speech(arc):
    logic.check_author_view(_sections(arc=arc), HISTORY)


def test_a_failing_conversation_backs_off_doubling_and_is_held_after_five_in_a_row():
    at = datetime(2026, 3, 2, 9, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
    cfg = conversation_config.ConversationConfig()
    assert (cfg.retry_backoff_minutes, cfg.max_consecutive_failures) == (10, 5)
    waits = [logic.Backoff(n, at, "format: x").next_attempt(10) - at for n in range(1, 5)]
    assert [w.total_seconds() / 60 for w in waits] == [10, 20, 40, 80]
    b = logic.Backoff(2, at, "format: x")
    assert b.waiting(at + waits[0], 10, 5) and not b.waiting(at + waits[1], 10, 5)
    held = logic.Backoff(5, at, "format: x")
    assert held.held(5) and held.waiting(at + waits[-1] * 100, 10, 5)  # held: no clock lets it through


def test_the_backoff_stops_doubling_at_a_day_however_many_failures_are_allowed_in_a_row(tmp_path):
    """An operator who allows 40 failures in a row gets a retry a day at most, never a wait past
    the calendar's end (which raised in every sensor tick and in `conversation status`)."""
    at = datetime(2026, 3, 2, 9, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
    cfg = conversation_config.load(write(tmp_path, "memory:\n  conversation:\n    max_consecutive_failures: 40\n"))
    waits = {n: logic.Backoff(n, at, "format: x").next_attempt(cfg.retry_backoff_minutes) - at for n in (8, 9, 39)}
    assert waits == {8: timedelta(minutes=1280), 9: timedelta(days=1), 39: timedelta(days=1)}
    assert not logic.Backoff(39, at, "format: x").waiting(at + timedelta(days=1), 10, 40)
    with pytest.raises(ConfigError, match="retry_backoff_minutes: at most 1440"):
        conversation_config.load(write(tmp_path, "memory:\n  conversation:\n    retry_backoff_minutes: 2000\n"))
