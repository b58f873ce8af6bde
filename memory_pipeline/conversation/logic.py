"""Seed 002 pure rules: the Step-0 gate and the triggers, the summary's exact Markdown layout
(rendered by the program from the model's four sections), its format checks, the check line,
and the tool the model answers with."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Any

TITLE = "# 对话历程摘要（滚动）"
QUOTE = (
    "> 由 conversation_summary skill 维护。rolling 更新，不覆盖。\n> 作为 long context 的压缩锚，防止角色漂向共情模板。"
)
ARC = "## 最近情感主线（至 {day}）"
PREFS = "## 已知用户偏好 / 事实（归集自 user_profile.md，以最近为准）"
KEYS = "## 情绪关键点（最近 30 条里）"
HOOKS = "## 未解决的钩子"
CHECK_LINE = "我对咱们最近聊的事的印象是 {recap}，大致对吗？"
TOOL = "write_conversation_summary"
# The arc is 3-5 sentences (seed 002), never more than max_sentences; one "sentence" without a stop
# could still be any length: a correction of 500,000 characters was stored as the verified arc.
ARC_MAX_CHARS = 2000
STATES = ("投入", "回避", "波动")


class InitStatus(StrEnum):
    PENDING = "pending"
    PHASE1_DONE = "phase1_done"
    PHASE2_DONE = "phase2_done"
    DONE = "done"


class Trigger(StrEnum):
    ENTRIES = "entries"  # >= 30 entries after covered_range's end
    USER_CHECK = "user_check"  # 用户主动校验记忆
    PREFERENCE_OVERRIDE = "preference_override"  # Phase 5 用户偏好 override
    CORRECTION = "correction"  # the user denied the check line: a new version with their wording


class FormatError(ValueError):
    """The model's answer breaks the layout (a failure: nothing written, retried after the backoff)."""

    kind = "format"


class AuthorViewError(FormatError):
    """The answer breaks the seed's author's view (摘抄台词, 流水账, dated events, writing long_arc):
    refused like a format error, and logged as such."""

    kind = "author_view"


class TruncatedAnswer(FormatError):
    """The provider cut the answer at its output limit (finish_reason length), whatever its tool call
    held: an incomplete generation is a failed one (seed 002 失败降级: nothing written, retried at a
    later trigger), never a version."""

    kind = "truncated"


class FailureKind(StrEnum):
    """What the failure log's ``error`` starts with: ``<kind>: <what went wrong>``."""

    FORMAT = "format"  # no tool call, a bad field, more than 10 sentences, the layout check
    AUTHOR_VIEW = "author_view"  # quoted lines, a running log, dates, writing long_arc
    MODEL = "model"  # timeout or provider failure
    HAIKU_CLASS = "haiku_class"  # refused before any call
    TRUNCATED = "truncated"  # the answer was cut at the output limit (finish_reason length)


def gate(status: str | None, entries: int, min_entries: int = 30) -> bool:
    """Step 0: initialization_status must be done (missing = not done) and the history must hold at
    least ``min_entries`` entries; a miss is a silent skip."""
    return status == InitStatus.DONE and entries >= min_entries


def due(status: str | None, entries: int, covered_end: int, explicit: bool, min_entries: int = 30) -> bool:
    """Whether a conversation gets a new summary version now. The entries trigger needs at least
    ``min_entries`` entries after covered_range's end; an explicit trigger (user check, preference
    override) needs no new entries. Every trigger passes the gate."""
    if not gate(status, entries, min_entries):
        return False
    return explicit or entries - covered_end >= min_entries


BACKOFF_MAX_MINUTES = 24 * 60  # however many failures in a row are allowed, a retry a day at least


@dataclass(frozen=True)
class Backoff:
    """Where a conversation stands after failures in a row (seed: 下次触发重试, bounded here): the
    next attempt waits ``base_minutes`` after the first failure, doubling after each further one up
    to BACKOFF_MAX_MINUTES; after ``max_failures`` in a row it is held until an operator retries it."""

    consecutive: int
    last_failure_at: datetime
    last_error: str

    def held(self, max_failures: int) -> bool:
        return self.consecutive >= max_failures

    def next_attempt(self, base_minutes: int) -> datetime:
        wait = base_minutes
        for _ in range(1, self.consecutive):
            if wait >= BACKOFF_MAX_MINUTES:
                break
            wait *= 2
        return self.last_failure_at + timedelta(minutes=min(wait, BACKOFF_MAX_MINUTES))

    def waiting(self, now: datetime, base_minutes: int, max_failures: int) -> bool:
        return self.held(max_failures) or now < self.next_attempt(base_minutes)

    def state(self, now: datetime, base_minutes: int, max_failures: int) -> FailingState:
        if self.held(max_failures):
            return FailingState.HELD
        return FailingState.BACKING_OFF if self.waiting(now, base_minutes, max_failures) else FailingState.RETRY_DUE


class FailingState(StrEnum):
    """Where a conversation whose last attempts failed stands, as `conversation status` says it."""

    BACKING_OFF = "backing off"  # not asked again before its next attempt
    RETRY_DUE = "retry due"  # the wait is over: the next trigger asks again
    HELD = "held"  # too many failures in a row: waits for `conversation retry`


def is_haiku_class(model: str) -> bool:
    """Seed: ❌ 用 Haiku 压缩（精度不足以识别情感主线）."""
    return "haiku" in model.lower()


_SENTENCE_END = re.compile(r"[。！？!?]+|\.(?=\s|$)")
_CLAUSE_END = re.compile(r"[，,；;：:。！？!?]+|\.(?=\s|$)")
# What follows a number range that makes it a quantity, not a month-day (10-12 个小时, 10-12 次).
_UNIT = (
    r"\s*(?:个|小时|钟头|钟|分钟|分|秒|天|日|晚|夜|周|星期|礼拜|月|年|岁|次|回|遍|趟|点|人|位|名|本|页|章|集|部|篇|句|"
    r"条|段|杯|瓶|顿|块|元|万|千|百|斤|公斤|克|公里|里|米|层|度|%|％|h\b|hours?\b|days?\b|mins?\b|km\b|kg\b|"
    r"times\b|years?\b|weeks?\b)"
)
# Dates as the seed writes them (2026-04-18, 04-19, 4月18日) and their kin (2026/4/18, 2026年4月18日,
# 4月18号, 4月18, 四月十八日, April 18, 18 April). A two-digit range followed by a unit is a quantity.
_MONTH_EN = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December|"
    r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\b\.?"
)
_DAY_EN = r"(?:3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?\b"
_DATE = re.compile(
    r"(?<!\d)\d{4}\s*(?:[-/.]\s*\d{1,2}\s*[-/.]|年\s*\d{1,2}\s*月)\s*\d{1,2}\s*[日号]?(?!\d)"
    r"|(?<!\d)\d{1,2}\s*月\s*\d{1,2}\s*[日号]"
    rf"|(?<!\d)(?:1[0-2]|0?[1-9])\s*月\s*(?:3[01]|[12]\d|0?[1-9])(?!\d)(?!{_UNIT})"
    r"|[一二三四五六七八九十]{1,2}月[一二三四五六七八九十廿]{1,3}[日号]"
    rf"|{_MONTH_EN}\s*{_DAY_EN}(?!\s*%)|(?<!\d){_DAY_EN}\s+(?:of\s+)?{_MONTH_EN}"
    rf"|(?<![\d/.-])(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?![\d/.-])(?!{_UNIT})"
)
# What may be a date or a number: a bare M/D or M-D (4/18, 4-18) is also a fraction, a ratio or a
# range (3/4, 24/7, 3-5), and one alone is taken for a number. Two leading items of a list (4/18 聊剧本
# / 4/19 聊工作), or two clauses that pair one with telling, are a dated event list. A dotted M.D is a
# version or a decimal (3.5, 3.11), never a date here; followed by 的, "of" or a unit it is a quantity.
_NUMERIC_DATE = re.compile(
    rf"(?<![\d/.:-])(?:1[0-2]|0?[1-9])[/-](?:3[01]|[12]\d|0?[1-9])(?![\d/.:%％-])(?!\s*(?:的|of\b)|{_UNIT})"
)
_DATE_MARK, _NUMERIC_MARK = "\x01", "\x02"
_LEADS = re.compile(rf"^\s*(?:(?:在|于|从|自|on|since|by)\s*)?{_NUMERIC_MARK}", re.IGNORECASE)
# A day that comes back every year may stand in a fact (生日：5月3日).
_RECURRING_DAY = re.compile(r"生日|忌日|纪念日|周年|birthday|anniversary", re.IGNORECASE)


def sentences(text: str) -> int:
    parts = [p for p in _SENTENCE_END.split(text) if p.strip()]
    return len(parts)


@dataclass(frozen=True)
class Sections:
    arc: str
    preferences: tuple[str, ...]
    key_points: tuple[tuple[str, str], ...]  # (topic, 投入 / 回避 / 波动)
    hooks: tuple[str, ...]


def _strings(args: Mapping[str, Any], name: str, limit: int = 20) -> tuple[str, ...]:
    value = args.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise FormatError(f"field '{name}': expected a list of non-empty strings")
    if len(value) > limit:
        raise FormatError(f"field '{name}': {len(value)} items (limit {limit})")
    return tuple(" ".join(v.split()) for v in value)


def parse_sections(call: Mapping[str, Any], max_sentences: int = 10) -> Sections:
    """The model's tool call as the four sections, or FormatError naming what is wrong."""
    if call.get("name") != TOOL:
        raise FormatError(f"tool call {call.get('id')}: expected {TOOL}, got {call.get('name')!r}")
    args = call.get("arguments")
    if not isinstance(args, dict):
        raise FormatError(f"tool call {call.get('id')}: arguments are not a JSON object")
    extra = sorted(set(args) - {"emotional_arc", "preferences", "emotional_key_points", "unresolved_hooks"})
    if "long_arc" in extra:
        raise AuthorViewError(
            "field 'long_arc': the summary may refer to long_arc, never write it (long_arc 优先，不能改写)"
        )
    if extra:
        raise FormatError(f"field '{extra[0]}': unexpected field")
    arc = args.get("emotional_arc")
    if not isinstance(arc, str) or not arc.strip():
        raise FormatError("field 'emotional_arc': missing or empty")
    arc = " ".join(arc.split())
    if len(arc) > ARC_MAX_CHARS:
        raise FormatError(f"field 'emotional_arc': {len(arc)} characters (more than {ARC_MAX_CHARS})")
    n = sentences(arc)
    if n > max_sentences:
        raise FormatError(f"field 'emotional_arc': {n} sentences (more than {max_sentences}: 没提炼到主线)")
    points = args.get("emotional_key_points", [])
    if not isinstance(points, list):
        raise FormatError("field 'emotional_key_points': expected a list")
    kp = []
    for i, p in enumerate(points):
        if not isinstance(p, dict) or not isinstance(p.get("topic"), str) or not p["topic"].strip():
            raise FormatError(f"field 'emotional_key_points[{i}]': expected {{topic, state}}")
        if p.get("state") not in STATES:
            raise FormatError(
                f"field 'emotional_key_points[{i}].state': {p.get('state')!r} is not one of 投入, 回避, 波动"
            )
        kp.append((" ".join(p["topic"].split()), str(p["state"])))
    return Sections(arc, _strings(args, "preferences"), tuple(kp), _strings(args, "unresolved_hooks"))


# --- the author's view, checked in code after the model answers ------------------------------------

QUOTE_LINE_TOKENS = 6  # a whole history line of at least 6 tokens copied is a quoted line
QUOTE_RUN_TOKENS = 12  # so is any run of 12 consecutive tokens of one line (or of long_arc)
RUNNING_LOG_ITEMS = 4  # a sentence that tells what was talked about as a list of 4+ items is a running log
TIMELINE_DATES_MAX = 2  # more dates than this in one summary is a dated event list, whatever the layout
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
# Quoted speech (摘抄台词): a verb of saying before the quote (用户说「…」, 她说了一句“…”), the line
# pointed at (那句「…」), a speaker's name and a colon (用户：「…」, The user: '…'), or the speaker after it
# (“我没事，”她说; "I'm fine," she said). A quoted word or phrase is not speech (对'拖了一年'的自责).
_SPEAKER = r"(?:用户|角色|她|他|我|你|对方|(?:the )?user|(?:the )?character|she|he|I)"
_REPORTED = re.compile(
    r"(?:说|讲|问|答|道|喊|回复|回答|表示|提到|said|says|asked|asks|replied|replies|wrote|texted"
    r"|told (?:(?:the )?(?:me|her|him|them|us|user|character)))[了过着]?\s*(?:[一这那]?句话?)?\s*[:：，,]?\s*[「『“\"‘']"
    r"|[那这一]句话?\s*[:：]?\s*[「『“\"‘']"
    rf"|(?:^|(?<=[\s，。；！？,.;!?」』”\"]))\s*{_SPEAKER}\s*[:：]\s*[「『“\"‘']"
    rf"|[」』”\"]\s*[,，.。!！?？]?\s*(?:{_SPEAKER}\s*(?:又|也|就|还|只|then\s)?\s*"
    r"(?:(?:说|问|答|道|喊|回)(?=[，,。.！!？?；;：:\s]|完|着|道|了|$)|said|asked|replied|says)"
    r"|(?:said|asked|replied)\s+(?:the )?(?:user|character|she|he))",
    re.IGNORECASE,
)
# A verb of telling; not the same characters inside other words (小说 a novel, 说明, 说不定, 无聊, 讲究,
# 谈恋爱, 提高 / 提升 / 提前 / 提醒 / 提供 / 提交 / 前提).
_TOLD_EN = (
    r"\b(?:(?:talk|chat|spoke|speak)(?:ed|s|ted)?\s+(?:about|of)|told|discuss(?:ed|es)?|mention(?:ed|s)?|brought up)\b"
)
_TOLD = re.compile(
    rf"(?<!小)说(?!明|不定)|(?<!无)聊|讲(?!究)|谈(?!恋爱)|(?<!前)提(?![高升前醒供交])|{_TOLD_EN}",
    re.IGNORECASE,
)
_ITEM_SEP = re.compile(r"、|(?<!\d)[/／](?!\d)")  # 24/7 and 3/4 are not lists
# The last item of a list joined by a conjunction (剧本、工作、墓地和搬家; the script, work and moving).
_LAST_AND = re.compile(r".(?:以及|和|与|及|还有|跟)|\s(?:and|or)\s", re.IGNORECASE)
# A word of feeling: a list of topics that says how the user was about them is the emotional
# thread (她聊到工作、家庭、健康、感情时都很投入), not a running log (用户讲了 A、B、C、D).
_FEELING = re.compile(
    r"投入|回避|波动|开心|高兴|快乐|兴奋|激动|难过|伤心|悲伤|哽咽|哭|焦虑|担心|担忧|紧张|害怕|恐惧|不安|自责|愧疚|内疚|"
    r"后悔|防御|抗拒|崩溃|放松|轻松|平静|平稳|释然|失落|沮丧|低落|委屈|生气|愤怒|烦|累|疲惫|压力|期待|犹豫|纠结|感动|"
    r"温暖|孤独|寂寞|在意|热情|兴致|情绪|心情|感受|难受|痛苦|无奈|心疼|想念|思念|失望|郁闷|苦恼|尴尬|害羞|骄傲|自豪|"
    r"满足|幸福|安心|沉默|躲|岔开|抵触|释怀|迷茫|无助|慌|怕|泪|笑|"
    r"excited|happy|glad|sad|upset|anxious|worried|nervous|afraid|guilty|defensive|relaxed|calm|tired|stressed|"
    r"engaged|avoid|moved|lonely|emotional|cried|crying|tears|tense|angry|frustrated|hurt|scared|proud|relieved|"
    r"ashamed|embarrassed|hopeful|exhausted|overwhelmed|griev|quiet|withdr[ae]w|deflect|laugh|lit up|opened up|"
    r"changed the subject|uneasy|resent",
    re.IGNORECASE,
)


def tokens(text: str) -> list[str]:
    """Each CJK character a token, each run of other letters or digits a token (case-folded):
    quotes are compared on these, punctuation and spacing ignored."""
    return _TOKEN.findall(text.casefold())


def section_texts(s: Sections) -> list[tuple[str, str]]:
    """(field name as the tool call spells it, text) of every section the model wrote."""
    return (
        [("emotional_arc", s.arc)]
        + [(f"preferences[{i}]", p) for i, p in enumerate(s.preferences)]
        + [(f"emotional_key_points[{i}].topic", t) for i, (t, _st) in enumerate(s.key_points)]
        + [(f"unresolved_hooks[{i}]", h) for i, h in enumerate(s.hooks)]
    )


def check_dates(texts: Sequence[tuple[str, str]]) -> None:
    """Seed: ❌ 包含具体日期细节（除非是时间线关键点）, ❌ 罗列事件 ("2026-04-18 聊剧本 / 04-19 聊工作").
    A date may anchor a timeline key point (4月18日父亲忌日那天她崩溃了): one date in a clause, not
    tied to what was talked about, at most TIMELINE_DATES_MAX in the summary. Refused: two dates in
    one clause (a list), a date with 聊/讲/说/谈/提 in its clause (an item of a dated event list), a
    date in a preference or fact (standing facts carry none, but a day that comes back every year
    may: 生日：5月3日), more than TIMELINE_DATES_MAX dates; and of the numbers that may be dates
    (``_NUMERIC_DATE``), two leading items of one field or two clauses telling what was said."""
    total = told_numeric = 0
    for name, text in texts:
        marked = _NUMERIC_DATE.sub(_NUMERIC_MARK, _DATE.sub(_DATE_MARK, text))
        leading = 0
        for clause in _CLAUSE_END.split(marked):
            dates, numeric = clause.count(_DATE_MARK), clause.count(_NUMERIC_MARK)
            told = _TOLD.search(clause) is not None
            leading += sum(1 for item in _ITEM_SEP.split(clause) if _LEADS.match(item))
            told_numeric += bool(numeric and told)
            if not dates:
                continue
            if name.startswith("preferences") and not _RECURRING_DAY.search(clause):
                raise AuthorViewError(f"field '{name}': contains a date (a standing fact carries none: 摘要不是流水账)")
            if dates + numeric > 1 or told:
                raise AuthorViewError(
                    f"field '{name}': contains a date in a dated event list (罗列事件，不是时间线关键点): "
                    f"{_shown_clause(clause, text)!r}"
                )
            total += dates
        if leading > 1 or told_numeric > 1:
            raise AuthorViewError(
                f"field '{name}': contains a date in a dated event list (罗列事件，不是时间线关键点): {text[:60]!r}"
            )
    if total > TIMELINE_DATES_MAX:
        raise AuthorViewError(
            f"the summary contains {total} dates (more than {TIMELINE_DATES_MAX} timeline key points: 摘要不是流水账)"
        )


def _shown_clause(clause: str, text: str) -> str:
    """The clause as the model wrote it (its dates were marked for counting)."""
    pattern = re.escape(clause.strip()).replace(re.escape(_DATE_MARK), ".+?").replace(re.escape(_NUMERIC_MARK), ".+?")
    found = re.search(pattern, text)
    return (found.group(0) if found else clause.strip())[:60]


def listed_items(sentence: str) -> int:
    """How many things a sentence lists: items apart by 、 or a slash, the last one maybe joined by
    a conjunction (剧本、工作、墓地和搬家); in English, what follows a verb of telling apart by commas
    (talked about the script, work, the cemetery(,) and moving); or one clause per thing told
    (先聊了剧本，又聊了工作，然后聊了墓地，最后聊了搬家)."""
    parts = _ITEM_SEP.split(sentence)
    last = _CLAUSE_END.split(parts[-1])[0]
    listed = len(parts) + (1 if len(parts) > 1 and _LAST_AND.search(last) else 0)
    told = re.search(_TOLD_EN, sentence, re.IGNORECASE)
    if told:
        tail = re.split(r"[;:；：]", sentence[told.end() :])[0].split(",")
        last = tail[-1].strip()
        joined = len(tail) > 1 and _LAST_AND.search(f" {last} ") is not None and not re.match(r"(?:and|or)\b", last)
        listed = max(listed, len(tail) + joined)
    clauses = sum(1 for c in _CLAUSE_END.split(sentence) if _TOLD.search(c))
    return max(listed, clauses)


def running_log(sentence: str) -> bool:
    """A sentence that tells what was talked about as a list of RUNNING_LOG_ITEMS or more things
    (``listed_items``), with no word of how the user felt (流水账)."""
    if _TOLD.search(sentence) is None or _FEELING.search(sentence) is not None:
        return False
    return listed_items(sentence) >= RUNNING_LOG_ITEMS


def check_author_view(s: Sections, history: Sequence[tuple[int, str]], long_arc: str = "") -> None:
    """Seed 002 Step 2 as far as code can tell, on the model's sections (before the program adds
    the user-profile facts): no quoted lines (摘抄台词: reported speech in quotation marks, a whole
    history line of >= 6 tokens or a run of 12 of one copied verbatim), no running log (流水账:
    ``running_log``), no dates unless a timeline key point (``check_dates``), and long_arc
    referred to at most, never written (no run of 12 of its tokens). AuthorViewError names the field
    and the line (L number)."""
    texts = section_texts(s)
    for name, text in texts:
        if _REPORTED.search(text):
            raise AuthorViewError(f"field '{name}': quotes what was said (摘抄台词): {text[:60]!r}")
    check_dates(texts)
    for sentence in _SENTENCE_END.split(s.arc):
        if running_log(sentence):
            raise AuthorViewError(f"field 'emotional_arc': a running log of topics (流水账): {sentence.strip()[:60]!r}")
    streams = {name: tokens(text) for name, text in texts}
    joined = {name: "\x1f" + "\x1f".join(t) + "\x1f" for name, t in streams.items()}
    windows: dict[tuple[str, ...], str] = {}
    for name, t in streams.items():
        for i in range(len(t) - QUOTE_RUN_TOKENS + 1):
            windows.setdefault(tuple(t[i : i + QUOTE_RUN_TOKENS]), name)
    sources = [(f"history line L{n}", line) for n, line in history]
    if long_arc.strip():
        sources.append(("long_arc (the summary may refer to the arc, never write it)", long_arc))
    for what, line in sources:
        t = tokens(line)
        for i in range(len(t) - QUOTE_RUN_TOKENS + 1):
            hit = windows.get(tuple(t[i : i + QUOTE_RUN_TOKENS]))
            if hit is not None:
                raise AuthorViewError(f"field '{hit}': copies {what} verbatim (摘抄台词): {''.join(t[i : i + 6])}…")
        if QUOTE_LINE_TOKENS <= len(t) < QUOTE_RUN_TOKENS and what.startswith("history"):
            needle = "\x1f" + "\x1f".join(t) + "\x1f"
            for name, hay in joined.items():
                if needle in hay:
                    raise AuthorViewError(f"field '{name}': copies {what} verbatim (摘抄台词): {line[:40]!r}")


def render(s: Sections, until: date, last_updated: datetime, start: int, end: int) -> str:
    """The seed's session_summary.md layout, exactly."""
    prefs = "\n".join(f"- {p}" for p in s.preferences) or "- （暂无）"
    keys = "\n".join(f"- {t} → {st}" for t, st in s.key_points) or "- （暂无）"
    hooks = "\n".join(f"- {h}" for h in s.hooks) or "- （暂无）"
    return (
        f"{TITLE}\n\n{QUOTE}\n\n{ARC.format(day=until.isoformat())}\n\n{s.arc}\n\n{PREFS}\n\n{prefs}\n\n"
        f"{KEYS}\n\n{keys}\n\n{HOOKS}\n\n{hooks}\n\n---\n\n"
        f"<!-- last_updated: {last_updated.isoformat(timespec='seconds')} -->\n"
        f"<!-- covered_range: L{start} - L{end} -->\n"
    )


_LAYOUT = re.compile(
    r"\A# 对话历程摘要（滚动）\n\n> .+\n> .+\n\n## 最近情感主线（至 \d{4}-\d{2}-\d{2}）\n\n.+\n\n"
    r"## 已知用户偏好 / 事实（归集自 user_profile\.md，以最近为准）\n\n(- .+\n)+\n## 情绪关键点（最近 30 条里）\n\n"
    r"(- .+ → (投入|回避|波动)\n|- （暂无）\n)+\n## 未解决的钩子\n\n(- .+\n)+\n---\n\n"
    r"<!-- last_updated: \S+ -->\n<!-- covered_range: L\d+ - L\d+ -->\n\Z"
)


def layout_ok(markdown: str) -> bool:
    return _LAYOUT.match(markdown) is not None


def check_line(arc: str) -> str:
    first = _SENTENCE_END.split(arc)[0].strip()
    return CHECK_LINE.format(recap=first[:80])


def merge_preferences(profile: Sequence[tuple[str, str]], from_model: Sequence[str]) -> tuple[str, ...]:
    """Profile facts first (newest first: most recent wins), then the model's not already there."""
    out = [f"{k}：{v}" for k, v in profile]
    seen = {o.casefold() for o in out}
    out += [p for p in from_model if p.casefold() not in seen]
    return tuple(dict.fromkeys(out))
