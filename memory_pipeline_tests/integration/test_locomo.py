"""LoCoMo conversations: a small fixture the tests write themselves for the importer's rules, and the
real multi-month data (external, read from LOCOMO_DIR, default ../shared/data/locomo) end to end."""

import json
import os
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import func, select

from memory_pipeline.events.ingest import IngestError, ingest_events
from memory_pipeline.events.locomo import import_locomo, locomo_events, parse_session_time
from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline.temporal import summaries
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline_tests.conftest import CST, cst, locomo_doc, write_locomo

REAL_LOCOMO = Path(os.environ.get("LOCOMO_DIR", REPO_ROOT.parent / "shared" / "data" / "locomo"))
ID_RULE = "ids are 1-128 characters of A-Z a-z 0-9 . _ - @ + = / #, not starting with '/', without '..'"
RANGE = "is out of range (supported: 1970-01-01 to 9998-12-31 UTC)"
EXAMPLE = "'1:56 pm on 8 May, 2023'"


def _stand_in(speakers: tuple[str, str], first: date, sessions: int, turns: int, every_days: int) -> dict:
    """A LoCoMo-shaped conversation of the real files' size: ``sessions`` sessions ``every_days``
    apart from ``first``, the first one of 18 turns (as in 26.json), the others of ``turns``, with
    the real files' extra keys (observations, summaries, qa) that the importer ignores."""
    a, b = speakers
    topics = [
        "the pottery class",
        "a charity run",
        "the camping trip",
        "a new painting",
        "the adoption plans",
        "a concert last night",
        "the garden",
        "a book club",
        "the kids' school",
        "a job interview",
    ]
    doc: dict = {"speaker_a": a, "speaker_b": b, "qa": [{"question": "ignored", "answer": "ignored"}]}
    for n in range(1, sessions + 1):
        day = first + timedelta(days=every_days * (n - 1))
        doc[f"session_{n}_date_time"] = f"1:56 pm on {day.day} {day:%B}, {day.year}"
        doc[f"session_{n}"] = [
            {
                "speaker": a if i % 2 == 0 else b,
                "dia_id": f"D{n}:{i + 1}",
                "text": f"{'I' if i % 2 == 0 else 'We'} talked about {topics[(n + i) % len(topics)]} "
                f"and how it went this week ({n}.{i + 1}).",
            }
            for i in range(18 if n == 1 else turns)
        ]
        doc[f"session_{n}_summary"] = "ignored"
        doc[f"session_{n}_observation"] = {"ignored": []}
    return doc


@pytest.fixture(scope="module")
def locomo_dir(tmp_path_factory) -> Path:
    """The real LoCoMo files (LOCOMO_DIR, default ../shared/data/locomo) when they are there; on a
    clone of the repository alone, stand-ins of the same shape and size written here: 20 and 22
    sessions over six months, 18 turns in the first session of 26.json (what the tests assert)."""
    if (REAL_LOCOMO / "26.json").is_file() and (REAL_LOCOMO / "30.json").is_file():
        return REAL_LOCOMO
    folder = tmp_path_factory.mktemp("locomo-stand-in")
    write_locomo(folder, _stand_in(("Caroline", "Melanie"), date(2023, 5, 8), 20, 16, 9), "26.json")
    write_locomo(folder, _stand_in(("Gina", "Jon"), date(2023, 1, 20), 22, 20, 8), "30.json")
    return folder


def _counts(store) -> tuple[int, int, int]:
    with store.connect() as conn:
        return tuple(
            conn.execute(select(func.count()).select_from(t)).scalar_one() for t in (messages, conversations, worlds)
        )


def test_session_time_takes_the_zone_given():
    assert parse_session_time("1:56 pm on 8 May, 2023", CST) == datetime(2023, 5, 8, 13, 56, tzinfo=CST)
    utc = parse_session_time("1:56 pm on 8 May, 2023", ZoneInfo("UTC"))
    assert utc.astimezone(UTC) == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_fixture_imports_one_world_with_a_conversation_per_session(store, tmp_path):
    path = write_locomo(tmp_path, locomo_doc(sessions=2, turns=3))
    report = import_locomo(store, path, CST)
    assert (report.inserted, report.new_worlds, report.new_conversations) == (6, 1, 2)
    assert import_locomo(store, path, CST).inserted == 0  # idempotent
    with store.connect() as conn:
        rows = conn.execute(
            select(
                messages.c.message_id, messages.c.conversation_id, messages.c.role, messages.c.at, messages.c.source
            ).order_by(messages.c.at)
        ).all()
        world = conn.execute(select(worlds.c.world_id, worlds.c.name)).one()
        titles = conn.execute(select(conversations.c.title).order_by(conversations.c.title)).scalars().all()
    assert tuple(world) == ("locomo-26", "Melanie (with Caroline)")
    assert titles == ["Caroline & Melanie, session 1", "Caroline & Melanie, session 2"]
    assert [r[0] for r in rows[:3]] == ["locomo-26.D1.1", "locomo-26.D1.2", "locomo-26.D1.3"]
    assert {r[1] for r in rows} == {"locomo-26.session-1", "locomo-26.session-2"}
    assert [r[2] for r in rows[:3]] == ["user", "assistant", "user"]
    assert [r[3] for r in rows[:2]] == [cst(2023, 5, 8, 13, 56), cst(2023, 5, 8, 13, 57)]
    assert rows[0][4] == f"{path}:$.session_1[0]"


def test_every_session_present_is_imported_gaps_and_all(store, tmp_path):
    """Sessions 1 and 3 (no 2): both are imported; here the file wraps them in "conversation"."""
    doc = locomo_doc(sessions=3)
    del doc["session_2"]  # session_2_date_time stays: a date without a session is ignored
    report = import_locomo(store, write_locomo(tmp_path, {"conversation": doc}), CST)
    assert report.inserted == 6
    with store.connect() as conn:
        convs = conn.execute(select(conversations.c.conversation_id).order_by(conversations.c.conversation_id))
        assert convs.scalars().all() == ["locomo-26.session-1", "locomo-26.session-3"]


def test_a_byte_order_mark_is_accepted(store, tmp_path):
    path = write_locomo(tmp_path, b"\xef\xbb\xbf" + json.dumps(locomo_doc()).encode())
    assert import_locomo(store, path, CST).inserted == 6


def _edit(change):
    doc = locomo_doc()
    change(doc)
    return doc


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def change(doc):
        target = doc
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value

    return change


NOW = datetime(2026, 7, 17, 15, 59, tzinfo=UTC)  # 23:59 CST
# (case, file content or a change of locomo_doc(), where, field, exact problem)
BAD_FILES = [
    (
        "malformed JSON",
        '{\n  "speaker_a": "A",\n  "speaker_b":\n}',
        4,
        "<file>",
        "malformed JSON: Expecting value at column 1",
    ),
    (  # json's own wording ends in "at": it read "starting at at column 18"
        "truncated JSON",
        '{\n  "speaker_a": "A",\n  "speaker_b": "Mel',
        3,
        "<file>",
        "malformed JSON: Unterminated string starting at column 16",
    ),
    ("empty file", "", "$", "<file>", "empty file"),
    ("blank file", " \n\t\n", "$", "<file>", "empty file"),
    ("not UTF-8", b'{"speaker_a": "Ren\xe9"}', "$", "<file>", "bad encoding (not UTF-8) at byte offset 18"),
    ("top-level list", "[]", "$", "<file>", "expected a JSON object, got array"),
    ("deep nesting", "[" * 100_000, "$", "<file>", "malformed JSON: nested too deeply"),
    (
        "wrapper not an object",
        '{"conversation": []}',
        "$.conversation",
        "conversation",
        "expected an object, got array",
    ),
    ("missing speaker", _edit(lambda d: d.pop("speaker_b")), "$.speaker_b", "speaker_b", "missing"),
    ("speaker type", _set("speaker_a", ["C"]), "$.speaker_a", "speaker_a", "must be a string, got array"),
    ("same speakers", _set("speaker_b", "Caroline"), "$.speaker_b", "speaker_b", "must differ from speaker_a"),
    (
        "future session",
        _set("session_2_date_time", "1:56 pm on 8 May, 2099"),
        "$.session_2_date_time",
        "session_2_date_time",
        "'1:56 pm on 8 May, 2099' is in the future",
    ),
    (
        "year 1 session",
        _set("session_1_date_time", "1:56 pm on 8 May, 0001"),
        "$.session_1_date_time",
        "session_1_date_time",
        f"'1:56 pm on 8 May, 0001' {RANGE}",
    ),
    (
        "null session date",
        _set("session_2_date_time", None),
        "$.session_2_date_time",
        "session_2_date_time",
        f"missing (the session's start, e.g. {EXAMPLE})",
    ),
    (
        "session date type",
        _set("session_1_date_time", 20230508),
        "$.session_1_date_time",
        "session_1_date_time",
        f"must be a string like {EXAMPLE}, got number",
    ),
    (
        "unparsable session date",
        _set("session_1_date_time", "yesterday"),
        "$.session_1_date_time",
        "session_1_date_time",
        f"unparsable session time 'yesterday' (want e.g. {EXAMPLE})",
    ),
    (
        "session runs into the future",
        _set("session_2_date_time", "11:59 pm on 17 July, 2026"),  # 3 turns: the last at NOW + 2 minutes
        "$.session_2_date_time",
        "session_2_date_time",
        "'11:59 pm on 17 July, 2026': the session's last turn (#3, one minute apart) would be in the future",
    ),
    (
        "session not a list",
        _set("session_1", {"a": 1}),
        "$.session_1",
        "session_1",
        "expected a list of turns, got object",
    ),
    ("session null", _set("session_1", None), "$.session_1", "session_1", "expected a list of turns, got null"),
    (
        "leading zero",
        _set("session_01", []),
        "$.session_01",
        "session_01",
        "session number must be 1-999999 without leading zeros",
    ),
    (
        "turn a string",
        _set("session_1", 1, "hello"),
        "$.session_1[1]",
        "session_1[1]",
        "expected a turn object, got string",
    ),
    ("turn null", _set("session_1", 1, None), "$.session_1[1]", "session_1[1]", "expected a turn object, got null"),
    (
        "unknown speaker",
        _set("session_1", 0, "speaker", "Bob"),
        "$.session_1[0].speaker",
        "speaker",
        "unknown speaker 'Bob' (expected speaker_a or speaker_b)",
    ),
    (
        "150,000-character turn",
        _set("session_1", 1, "text", "x" * 150_000),
        "$.session_1[1].text",
        "text",
        "oversized body: 150000 characters (limit 100000)",
    ),
    (
        "NaN text",
        _set("session_1", 0, "text", float("nan")),
        "$.session_1[0].text",
        "text",
        "must be a string, got non-finite number",
    ),
    ("text type", _set("session_1", 0, "text", ["hi"]), "$.session_1[0].text", "text", "must be a string, got array"),
    (
        "NUL in text",
        _set("session_1", 0, "text", "a\x00"),
        "$.session_1[0].text",
        "text",
        "contains a NUL character (\\u0000) at position 1",
    ),
    (
        "surrogate in text",
        _set("session_1", 0, "text", "\ud800"),
        "$.session_1[0].text",
        "text",
        "contains a lone surrogate at position 0 (not encodable as UTF-8)",
    ),
    (
        "surrogate in caption",
        _set("session_1", 0, "blip_caption", "a photo \udfff"),
        "$.session_1[0].blip_caption",
        "blip_caption",
        "contains a lone surrogate at position 8 (not encodable as UTF-8)",
    ),
    (
        "over-long dia_id",
        _set("session_1", 0, "dia_id", "D1:" + "9" * 130),
        "$.session_1[0].dia_id",
        "dia_id",
        f"the message id it makes: too long: 143 characters ({ID_RULE})",
    ),
    (
        "dia_id outside the alphabet",
        _set("session_1", 0, "dia_id", "D1 1"),
        "$.session_1[0].dia_id",
        "dia_id",
        f"the message id it makes: character ' ' at position 12 is not allowed ({ID_RULE})",
    ),
    (
        "dia_id type",
        _set("session_1", 0, "dia_id", 11),
        "$.session_1[0].dia_id",
        "dia_id",
        "must be a string, got number",
    ),
    (
        "duplicate dia_id",
        _set("session_2", 0, "dia_id", "D1:1"),
        "$.session_2[0].dia_id",
        "dia_id",
        "duplicate: message id 'locomo-26.D1.1' is also made by $.session_1[0]",
    ),
    (
        "wrapped conversation",
        {"conversation": _edit(_set("session_1", 1, "text", 5))},
        "$.conversation.session_1[1].text",
        "text",
        "must be a string, got number",
    ),
]


@pytest.mark.parametrize("case,content,where,field,problem", BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_locomo_file_is_refused_whole_and_named_by_json_path(store, tmp_path, case, content, where, field, problem):
    content = _edit(content) if callable(content) else content
    path = write_locomo(tmp_path, content)
    with pytest.raises(IngestError) as info:
        import_locomo(store, path, CST, now=NOW)
    assert [str(e) for e in info.value.errors] == [f"{path}:{where}: field '{field}': {problem}"]
    assert "nothing was written" in str(info.value)
    assert _counts(store) == (0, 0, 0)


def test_a_file_name_outside_the_id_alphabet_is_refused(store, tmp_path):
    path = write_locomo(tmp_path, locomo_doc(), name="my file.json")
    events, errors = locomo_events(path, CST)
    assert events == []
    assert [str(e) for e in errors] == [
        f"{path}:$: field 'world_id': world id 'locomo-my file' (from the file name): "
        f"character ' ' at position 9 is not allowed ({ID_RULE})"
    ]


def test_skip_bad_imports_the_good_turns(store, tmp_path):
    doc = _edit(_set("session_1", 1, "text", float("inf")))
    report = import_locomo(store, write_locomo(tmp_path, doc), CST, skip_bad=True)
    assert report.inserted == 5 and [e.where for e in report.rejected] == ["$.session_1[1].text"]
    assert _counts(store) == (5, 2, 1)


def test_import_locomo_and_summarize_real_days(ctx, store, locomo_dir):
    path = locomo_dir / "26.json"
    events, errors = locomo_events(path, CST)
    assert errors == []
    assert len(events) > 300
    report = ingest_events(store, events, source=str(path))
    assert report.inserted == len(events) and report.new_worlds == 1
    assert ingest_events(store, events, source=str(path)).inserted == 0  # idempotent
    with store.connect() as conn:
        n_conv = conn.execute(select(func.count()).select_from(conversations)).scalar_one()
        first, last = conn.execute(select(func.min(messages.c.at), func.max(messages.c.at))).one()
    assert n_conv >= 19
    assert (last - first).days > 150  # months of real conversation

    day = parse_session_time("1:56 pm on 8 May, 2023", CST).date()
    result = summaries.regenerate_day(ctx, day)
    assert result.non_empty == 1
    # The first session is the world's first day, so nothing exists before it.
    assert summaries.regenerate_day(ctx, date(2023, 5, 7)).worlds == 0
    with store.connect() as conn:
        row = conn.execute(select(temporal_summaries)).mappings().one()
    assert row["content"] and len(row["content"]) <= 150 and row["source_kind"] == "message"
    assert row["source_count"] == 1 and len(row["source_ids"]) == 18
    assert summaries.audit_period(store, "day", day, CST) == []
    month = summaries.regenerate_rollup(ctx, "month", date(2023, 5, 1))
    assert month.non_empty == 1


def test_real_conversations_run_through_the_whole_graph(store, pg_url, redis_url, locomo_dir):
    from dagster import DagsterEventType, instance_for_test

    from memory_pipeline import operations
    from memory_pipeline_tests.integration.test_dagster import make_defs

    for name in ("26.json", "30.json"):
        events, errors = locomo_events(locomo_dir / name, CST)
        assert errors == []
        ingest_events(store, events, source=name)
    with store.connect() as conn:
        first, last = conn.execute(select(func.min(messages.c.at), func.max(messages.c.at))).one()
        session_days = {
            (w, d)
            for w, d in conn.execute(
                select(conversations.c.world_id, messages.c.at).join(
                    conversations, conversations.c.conversation_id == messages.c.conversation_id
                )
            ).all()
            for d in [d.astimezone(CST).date()]
        }
    lo, hi = first.astimezone(CST).date(), last.astimezone(CST).date()
    defs = make_defs(pg_url, redis_url)
    with instance_for_test() as instance:
        # Through the end of the year: a month waits for all of its days, a year for its months.
        steps = [
            ("day", lo.isoformat(), f"{hi.year}-12-31"),
            ("month", lo.strftime("%Y-%m"), f"{hi.year}-12"),
            ("year", str(lo.year), str(hi.year)),
        ]
        for window, a, b in steps:
            report = operations.materialize(window, a, b, instance=instance, defs=defs)
            assert report.success and len(report.runs) == 1, report.runs[0].error
            checks = instance.all_logs(report.runs[0].run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
            assert checks and all(c.dagster_event.event_specific_data.passed for c in checks)
    with store.connect() as conn:
        rows = conn.execute(
            select(
                temporal_summaries.c.world_id,
                temporal_summaries.c.window,
                temporal_summaries.c.period_start,
                temporal_summaries.c.empty_reason,
            )
        ).all()
    non_empty_days = {(w, p) for w, win, p, reason in rows if win == "day" and reason is None}
    assert non_empty_days == session_days  # one summary per world per day with a session, no more
    months = [r for r in rows if r[1] == "month"]
    assert months and all(r[3] in (None, "no_days") for r in months)
    years = {(r[0], r[2].year): r[3] for r in rows if r[1] == "year"}
    assert years and all(reason is None for reason in years.values())
