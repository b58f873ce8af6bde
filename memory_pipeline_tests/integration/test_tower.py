"""Seed 004 (time tower) on the real PostgreSQL: memory types, append, structural windows, exact and
semantic recall, summaries bottom-up with the five guardrails, jobs, the activity type."""

import json
import re
from datetime import timedelta

import pytest
from sqlalchemy import event, func, select

from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store.tables import llm_ledger
from memory_pipeline.lib.timeutil import utcnow
from memory_pipeline.tower import summaries, windows
from memory_pipeline.tower.api import Tower
from memory_pipeline.tower.config import TowerConfig
from memory_pipeline.tower.logic import Granularity, JobState, Source, TowerInputError, WindowQuery
from memory_pipeline.tower.summaries import SummaryContext, WindowKey
from memory_pipeline.tower.tables import tower_entries, tower_summaries, tower_summary_attempts, tower_windows
from memory_pipeline_tests.conftest import CST, conversation, cst
from memory_pipeline_tests.fake_openai import FakeOpenAI


def make_tower(store, cfg=None, **llm):
    return Tower(
        store,
        cfg or TowerConfig(),
        CST,
        lambda p: LLMClient(store, asset="test_tower", partition=p, **llm),
        run_jobs="inline",
    )


@pytest.fixture
def tower(store):
    return make_tower(store)


def calls(store) -> int:
    with store.connect() as conn:
        return conn.execute(
            select(func.count()).select_from(llm_ledger).where(llm_ledger.c.outcome == "ok")
        ).scalar_one()


def count(store, table) -> int:
    with store.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def build(store, *days):
    for d in days:
        windows.build_day(store, d, CST)


def week_of_entries(tower, name="proj/decisions", days=(5, 6, 7), per_day=3, group=None):
    entries = []
    for d in days:
        for i in range(per_day):
            e = {
                "content": f"decided to use postgres for the {i} migration on day {d}",
                "at": cst(2026, 1, d, 9 + i).isoformat(),
                "id": f"{name.replace('/', '-')}-{group}-{d}-{i}",
            }
            if group:
                e["group"] = group
            entries.append(e)
    return tower.append(name, entries)


# ---- memory types --------------------------------------------------------------------------------


def test_types_crud_archive_and_builtins(tower, store):
    names = {t["name"] for t in tower.list_types()}
    assert {"worklog", "agent/activity"} <= names
    worklog = tower.get_type("worklog")
    assert worklog["chain"] == ["day", "week"] and worklog["summaries"] and worklog["group_field"] == "project"
    activity = tower.get_type("agent/activity")
    assert activity["chain"] == ["10min", "30min", "1h", "day", "week"] and not activity["summaries"]

    created = tower.create_type("proj/decisions", retention="365d")
    assert created["chain"] == ["10min", "30min", "1h", "day", "week"]  # the default chain
    assert not created["summaries"] and created["summary_cap"] == "week"  # off by default, cap week
    assert created["retention"] == "365d" and created["retention_enforced"] is False
    assert created["series"] == ["proj/decisions", "proj/decisions.summary"]
    updated = tower.update_type("proj/decisions", {"summaries": True, "chain": ["1h", "day", "week"]})
    assert updated["summaries"] and updated["chain"] == ["1h", "day", "week"]
    with pytest.raises(TowerInputError, match="name cannot be changed"):
        tower.update_type("proj/decisions", {"name": "other"})
    for bad in ("../x", "/x", "a//b", "a.b", "a b"):
        with pytest.raises(TowerInputError, match="field 'name'"):
            tower.create_type(bad)
    with pytest.raises(TowerInputError, match="field 'chain"):
        tower.create_type("bad/chain", chain=["day", "1h"])
    for twin, of in (("Worklog", "worklog"), ("Proj/Decisions", "proj/decisions")):  # one type to a reader
        with pytest.raises(
            TowerInputError, match=f"field 'name': '{twin}' differs from the memory type '{of}' only in case"
        ):
            tower.create_type(twin)

    week_of_entries(tower)
    build(store, cst(2026, 1, 5).date())
    tower.summarize("proj/decisions", WindowQuery.parse("day", "2026-01-05"))
    entries_before, summaries_before = count(store, tower_entries), count(store, tower_summaries)
    archived = tower.delete_type("proj/decisions")
    assert archived["archived"]
    with pytest.raises(TowerInputError, match="archived"):
        tower.append("proj/decisions", {"content": "late"})
    # Recall still works.
    assert tower.recall("proj/decisions", WindowQuery.parse("day", "2026-01-05"))["total_entries"] == 3
    assert tower.get_summary("proj/decisions", WindowQuery.parse("day", "2026-01-05"))["state"] == "found"
    with pytest.raises(TowerInputError, match="reserved"):
        tower.create_type("proj/decisions")
    assert (count(store, tower_entries), count(store, tower_summaries)) == (entries_before, summaries_before)
    assert "proj/decisions" not in {t["name"] for t in tower.list_types()}
    assert "proj/decisions" in {t["name"] for t in tower.list_types(include_archived=True)}
    with pytest.raises(TowerInputError, match="cannot be deleted"):
        tower.delete_type("worklog")


def test_the_activity_type_takes_entries_from_its_feed_only(tower, store, ingest):
    """An entry appended by hand under a message id still to come took that message's place: the
    feed (idempotent on the message id) then skipped the real message without a word."""
    day = cst(2026, 1, 5).date()
    forged = {"content": {"role": "user", "text": "forged"}, "at": cst(2026, 1, 5, 9).isoformat(), "id": "m-1"}
    for entries in ({**forged, "group": "w1"}, [forged]):
        with pytest.raises(TowerInputError, match="'agent/activity' is fed from the conversation messages"):
            tower.append("agent/activity", entries)
    ingest(conversation("w1", "c1", cst(2026, 1, 5, 9), ["tomatoes planted"], mid="m-1"))
    assert windows.build_day(store, day, CST, activity_type="agent/activity").activity_fed == 1
    got = tower.recall("agent/activity", WindowQuery.parse("day", "2026-01-05", group="w1"))
    assert [e["content"]["text"] for e in got["entries"]] == ["tomatoes planted"], got


def test_an_archived_activity_type_takes_no_more_messages(tower, store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 1, 5, 9), ["tomatoes planted", "tomatoes watered"]))
    day = cst(2026, 1, 5).date()
    assert windows.build_day(store, day, CST, activity_type="agent/activity").activity_fed == 2
    tower.delete_type("agent/activity")
    ingest(conversation("w1", "c2", cst(2026, 1, 5, 15), ["compost turned"]))
    ingest(conversation("w1", "c3", cst(2026, 1, 6, 9), ["seeds ordered"]))
    for d in (day, cst(2026, 1, 6).date()):  # the structural run of a day already fed, and of a new day
        built = windows.build_day(store, d, CST, activity_type="agent/activity")
        assert built.activity_fed == 0 and built.activity_archived
    with store.connect() as conn:
        fed = conn.execute(select(tower_entries.c.entry_id).where(tower_entries.c.type_name == "agent/activity")).all()
    assert len(fed) == 2  # the two messages fed before the archive, nothing since
    archived = tower.recall("agent/activity", WindowQuery.parse("day", "2026-01-05"))
    assert archived["total_entries"] == 2 and not archived["stale"]  # recall still works; nothing will be fed
    with pytest.raises(TowerInputError, match="archived"):
        tower.append("agent/activity", {"content": "by hand", "at": cst(2026, 1, 5, 10).isoformat()})
    # No feed will bring the later messages in: they are not counted as stale for ever.
    assert windows.audit_day(store, day, CST, activity_type="agent/activity").stale_entries == 0
    assert windows.stale_days(store, CST, cst(2026, 1, 8), activity_type="agent/activity") == {}


# ---- append ------------------------------------------------------------------------------------------


def test_append_is_idempotent_on_id_and_refuses_bad_input_whole(tower, store, tmp_path):
    tower.create_type("tool/errors", group_field="project")
    first = tower.append(
        "tool/errors",
        [
            {"content": {"error": "disk full", "project": "alpha"}, "id": "e1", "at": "2026-01-05T10:00:00+08:00"},
            {"content": "plain text", "id": "e2"},
        ],
    )
    assert first["inserted"] == 2
    again = tower.append(
        "tool/errors",
        {"content": {"error": "disk full", "project": "alpha"}, "id": "e1", "at": "2026-01-05T10:00:00+08:00"},
    )
    assert again["inserted"] == 0 and again["duplicates"] == 1
    with pytest.raises(TowerInputError, match="other content"):
        tower.append(
            "tool/errors",
            {"content": {"error": "changed", "project": "alpha"}, "id": "e1", "at": "2026-01-05T10:00:00+08:00"},
        )
    with store.connect() as conn:
        groups = {r[0]: r[1] for r in conn.execute(select(tower_entries.c.entry_id, tower_entries.c.group_value))}
    assert groups == {"e1": "alpha", "e2": ""}  # the group field is read from the content

    path = tmp_path / "errors.jsonl"
    path.write_text(
        json.dumps({"content": "ok one", "id": "f1"})
        + "\n"
        + json.dumps({"content": "bad time", "at": "yesterday"})
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(TowerInputError) as exc:
        tower.append_file("tool/errors", path)
    assert str(exc.value).startswith("errors.jsonl:2: field 'at'")
    path.write_text('{"content": "x"}\n{not json\n', encoding="utf-8")
    with pytest.raises(TowerInputError, match=r"errors.jsonl:2: field 'line'"):
        tower.append_file("tool/errors", path)
    assert count(store, tower_entries) == 2  # nothing half-written
    future = (utcnow() + timedelta(hours=1)).isoformat()
    with pytest.raises(TowerInputError, match=r"entries\[0\]: field 'at': is in the future"):
        tower.append("tool/errors", {"content": "x", "at": future})


def test_a_retry_without_at_is_a_duplicate_and_what_the_caller_sent_decides_a_conflict(tower, store):
    first = tower.append("worklog", {"content": {"project": "a", "did": "x"}, "id": "k1"})
    retry = tower.append("worklog", {"content": {"project": "a", "did": "x"}, "id": "k1"})  # `at` left out again
    assert (first["inserted"], retry["inserted"], retry["duplicates"]) == (1, 0, 1)
    with store.connect() as conn:
        stored_at = conn.execute(select(tower_entries.c.at).where(tower_entries.c.entry_id == "k1")).scalar_one()
    with pytest.raises(TowerInputError, match="field 'id': entry id 'k1' was stored from a request that left 'at' out"):
        tower.append("worklog", {"content": {"project": "a", "did": "x"}, "id": "k1", "at": stored_at.isoformat()})
    with pytest.raises(TowerInputError, match="field 'id': entry id 'k1' is stored with other content"):
        tower.append("worklog", {"content": {"project": "a", "did": "y"}, "id": "k1"})
    explicit = {"content": {"project": "a"}, "id": "k2", "at": "2026-01-05T10:00:00+08:00"}
    tower.append("worklog", explicit)
    assert tower.append("worklog", explicit)["duplicates"] == 1
    with pytest.raises(TowerInputError, match="is stored with another 'at'"):
        tower.append("worklog", {**explicit, "at": "2026-01-05T11:00:00+08:00"})
    with pytest.raises(TowerInputError, match="was stored from a request that gave 'at'"):
        tower.append("worklog", {"content": {"project": "a"}, "id": "k2"})
    assert count(store, tower_entries) == 2


def test_the_group_field_must_be_a_string_and_an_explicit_group_must_agree_with_it(tower, store):
    with pytest.raises(
        TowerInputError, match=r"entries\[0\]: field 'group': 'b' contradicts the content's project 'a'"
    ):
        tower.append("worklog", {"content": {"project": "a"}, "group": "b"})
    with pytest.raises(
        TowerInputError, match=r"entries\[0\]: field 'content.project': .* must be a string, got number"
    ):
        tower.append("worklog", {"content": {"project": 7}})
    assert count(store, tower_entries) == 0
    tower.append("worklog", [{"content": {"project": "a"}, "group": "a"}, {"content": {"project": None}}])
    with store.connect() as conn:
        assert sorted(conn.execute(select(tower_entries.c.group_value)).scalars()) == ["", "a"]


def test_an_entry_id_is_idempotent_within_its_group_and_another_groups_id_is_never_read(tower, store):
    """A world that appends an id another world stored gets an entry of its own: no refusal, so no
    answer that tells whether its guess of the other world's content was right."""
    tower.create_type("tool/errors", group_field="world")
    at = "2026-01-05T10:00:00+08:00"
    tower.append("tool/errors", {"content": "boom", "group": "aria", "id": "t1", "at": at})
    guess = tower.append("tool/errors", {"content": "wrong guess", "group": "bolt", "id": "t1", "at": at})
    assert (guess["inserted"], guess["duplicates"]) == (1, 0)  # bolt's own t1
    # Only bolt's own t1 is compared: aria's content is refused here as other than bolt's.
    with pytest.raises(TowerInputError, match="entry id 't1' is stored with other content"):
        tower.append("tool/errors", {"content": "boom", "group": "bolt", "id": "t1", "at": at})
    # One batch may hold the same id in two groups (an all-worlds caller); within a group it may not.
    both = tower.append(
        "tool/errors",
        [{"content": "x", "group": g, "id": "t2", "at": at} for g in ("aria", "bolt")],
    )
    assert both["inserted"] == 2
    with pytest.raises(TowerInputError, match=r"entries\[1\]: field 'id': duplicate id in this batch"):
        tower.append("tool/errors", [{"content": "y", "group": "cora", "id": "t3", "at": at}] * 2)
    with store.connect() as conn:
        rows = sorted(
            conn.execute(select(tower_entries.c.group_value, tower_entries.c.entry_id, tower_entries.c.content))
        )
    assert rows == [("aria", "t1", "boom"), ("aria", "t2", "x"), ("bolt", "t1", "wrong guess"), ("bolt", "t2", "x")]


# ---- structural windows and exact recall ------------------------------------------------------------------


def test_windows_refs_regenerable_audit_and_paginated_exact_recall(tower, store):
    tower.create_type("proj/decisions")
    tower.append(
        "proj/decisions",
        [
            {"content": f"note {i}", "at": (cst(2026, 1, 5, 9) + timedelta(minutes=7 * i)).isoformat(), "id": f"n{i}"}
            for i in range(250)
        ],
    )
    day = cst(2026, 1, 5).date()
    built = windows.build_day(store, day, CST)
    in_day = sum(1 for i in range(250) if (cst(2026, 1, 5, 9) + timedelta(minutes=7 * i)).date() == day)
    assert built.by_level["day"] == 1 and built.entries == in_day == 129
    with store.connect() as conn:
        rows = sorted(
            (r.granularity, r.start, r.entry_count, json.dumps(r.refs))
            for r in conn.execute(select(tower_windows).where(tower_windows.c.type_name == "proj/decisions"))
        )
    assert all(n > 0 for _, _, n, _ in rows)  # empty windows get no rows
    windows.build_day(store, day, CST)  # a regenerable view: rebuilt from raw, identical rows
    with store.connect() as conn:
        again = sorted(
            (r.granularity, r.start, r.entry_count, json.dumps(r.refs))
            for r in conn.execute(select(tower_windows).where(tower_windows.c.type_name == "proj/decisions"))
        )
    assert again == rows
    assert windows.audit_day(store, day, CST).problems == []

    page = tower.recall("proj/decisions", WindowQuery.parse("day", "2026-01-05"))
    assert page["total_entries"] == in_day and page["returned"] == 100 and page["next_cursor"]  # default 100
    assert page["total_chars"] == sum(len(f"note {i}") for i in range(in_day))
    second = tower.recall(
        "proj/decisions", WindowQuery.parse("day", "2026-01-05"), limit=1000, cursor=page["next_cursor"]
    )
    assert second["returned"] == in_day - 100 and second["next_cursor"] is None
    ids = [e["entry_id"] for e in page["entries"] + second["entries"]]
    assert ids == [f"n{i}" for i in range(in_day)]  # in time order, no gap, no duplicate
    with pytest.raises(TowerInputError, match="field 'limit'"):
        tower.recall("proj/decisions", WindowQuery.parse("day", "2026-01-05"), limit=1001)
    ranged = tower.recall(
        "proj/decisions", WindowQuery.parse(from_="2026-01-05T09:00:00+08:00", to="2026-01-05T10:00:00+08:00")
    )
    assert ranged["total_entries"] == 9  # 09:00, 09:07, ... 09:56

    browse = tower.windows("proj/decisions", WindowQuery.parse("day", "2026-01-05"))
    assert browse["level"] == "1h" and browse["total_entries"] == in_day
    assert sum(w["entry_count"] for w in browse["windows"]) == in_day


def test_a_page_stays_whole_when_an_entry_lands_earlier_in_the_window_while_it_is_read(tower, store, monkeypatch):
    """A page is read by its places in time order; an entry that lands before them between the two
    reads shifts the places by one, and the entry the shift pushed out is still read."""
    from memory_pipeline.tower import recall as recall_io

    tower.create_type("proj/decisions")
    tower.append(
        "proj/decisions",
        [{"content": f"note {i}", "at": cst(2026, 1, 5, 9, i).isoformat(), "id": f"n{i}"} for i in range(30)],
    )
    windows.build_day(store, cst(2026, 1, 5).date(), CST)
    places = recall_io._entries_now

    def then_an_early_entry(*args, **kwargs):
        out = places(*args, **kwargs)
        tower.append("proj/decisions", [{"content": "early", "at": cst(2026, 1, 5, 8).isoformat(), "id": "early"}])
        return out

    monkeypatch.setattr(recall_io, "_entries_now", then_an_early_entry)
    page = tower.recall("proj/decisions", WindowQuery.parse("day", "2026-01-05"), limit=10)
    assert [e["entry_id"] for e in page["entries"]] == [f"n{i}" for i in range(10)]
    monkeypatch.undo()
    after = tower.recall("proj/decisions", WindowQuery.parse("day", "2026-01-05"), limit=10)
    assert after["entries"][0]["entry_id"] == "early" and after["total_entries"] == 31


def test_exact_recall_of_a_range_of_a_century_reads_its_windows_by_one_range(tower, store):
    """Findings: a range's recall listed every finest window start of the range first (1970..9998 of
    a 10-minute type: 420 million, hours of CPU in a call the server's timeout abandoned but could
    not stop). The windows are read by one range query: the statements do not grow with the range."""
    tower.create_type("proj/decisions", retention="365d")
    week_of_entries(tower)
    for d in (5, 6, 7):
        windows.build_day(store, cst(2026, 1, d).date(), CST)
    statements: list[str] = []

    def count(_conn, _cursor, statement, *_rest) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        got = tower.recall(
            "proj/decisions", WindowQuery.parse(from_="2000-01-01T00:00:00+00:00", to="2100-01-01T00:00:00+00:00")
        )
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert got["total_entries"] == 9 and got["returned"] == 9
    assert len(statements) <= 12, len(statements)  # one per 1,000 finest windows: 5,263 statements


def test_exact_recall_of_one_group_walks_only_that_groups_windows_and_only_those_its_window_names(tower, store):
    """The walk reads each level's windows by a range of starts in the group: the other groups'
    windows in the same hours, and a child window the day's references do not name (written after
    the day's view was built), are not part of the answer."""
    tower.create_type("team/log", chain=["10min", "1h", "day"], group_field="member")
    start = cst(2026, 1, 5, 9)
    tower.append(
        "team/log",
        [
            {"content": f"{g} {i}", "at": (start + timedelta(minutes=5 * i)).isoformat(), "group": g, "id": f"{g}{i}"}
            for g in ("alpha", "beta", "gamma")
            for i in range(30)
        ],
    )
    day = start.date()
    windows.build_day(store, day, CST)
    whole = {
        g: tower.recall("team/log", WindowQuery.parse("day", "2026-01-05", group=g), limit=1000)
        for g in ("alpha", "beta")
    }
    assert [e["entry_id"] for e in whole["alpha"]["entries"]] == [f"alpha{i}" for i in range(30)]
    assert [e["entry_id"] for e in whole["beta"]["entries"]] == [f"beta{i}" for i in range(30)]
    assert {
        e["group"] for e in tower.recall("team/log", WindowQuery.parse("day", "2026-01-05"), limit=1000)["entries"]
    } == {
        "alpha",
        "beta",
        "gamma",
    }
    # A 10-minute window of alpha's off the grid (09:05), inside the range the walk reads, that no 1h
    # window names: not walked into.
    w = tower_windows.c
    with store.begin() as conn:
        (late,) = (
            conn.execute(select(tower_entries.c.entry_pk).where(tower_entries.c.entry_id == "beta0")).scalars().all()
        )
        row = (
            conn.execute(
                select(tower_windows).where(
                    w.type_name == "team/log", w.granularity == "10min", w.group_value == "alpha"
                )
            )
            .mappings()
            .first()
        )
        conn.execute(
            tower_windows.insert().values(
                {
                    **row,
                    "start": row["start"] + timedelta(minutes=5),
                    "end": row["end"] + timedelta(minutes=5),
                    "refs": [late],
                }
            )
        )
    again = tower.recall("team/log", WindowQuery.parse("day", "2026-01-05", group="alpha"), limit=1000)
    assert [e["entry_id"] for e in again["entries"]] == [f"alpha{i}" for i in range(30)]


def test_exact_recall_reads_as_many_statements_on_a_five_level_chain_as_on_a_two_level_one(tower, store):
    """The walk reads every level below the window in one query, then follows the references: a
    week's recall on 10min -> 30min -> 1h -> day -> week costs the statements it costs on day ->
    week, and returns the same entries."""
    tower.create_type("deep/log", chain=["10min", "30min", "1h", "day", "week"])
    tower.create_type("flat/log", chain=["day", "week"])
    for name in ("deep/log", "flat/log"):
        week_of_entries(tower, name=name, days=(5, 6, 7), per_day=4)
    for d in (5, 6, 7):
        windows.build_day(store, cst(2026, 1, d).date(), CST)
    windows.build_coarse(store, Granularity.WEEK, cst(2026, 1, 5).date(), CST)
    seen: list[str] = []

    def note(_conn, _cursor, statement, *_args):
        seen.append(statement)

    answers, counts = {}, {}
    for name in ("deep/log", "flat/log"):
        tower.recall(name, WindowQuery.parse("week", "2026-01-06"), limit=100)  # a pool connection opened first
        seen.clear()
        event.listen(store.engine, "before_cursor_execute", note)
        try:
            answers[name] = tower.recall(name, WindowQuery.parse("week", "2026-01-06"), limit=100)
        finally:
            event.remove(store.engine, "before_cursor_execute", note)
        counts[name] = len(seen)
    assert answers["deep/log"]["total_entries"] == answers["flat/log"]["total_entries"] == 12
    assert [e["content"] for e in answers["deep/log"]["entries"]] == [
        e["content"] for e in answers["flat/log"]["entries"]
    ]
    assert counts["deep/log"] == counts["flat/log"], counts


def test_the_cover_check_fails_a_window_whose_entry_count_disagrees_with_its_refs(tower, store):
    tower.create_type("proj/decisions", chain=["1h", "day", "week"])
    week_of_entries(tower, days=(5, 6))
    for d in (5, 6):
        windows.build_day(store, cst(2026, 1, d).date(), CST)
    windows.build_coarse(store, Granularity.WEEK, cst(2026, 1, 5).date(), CST)
    day = cst(2026, 1, 5).date()
    assert windows.audit_day(store, day, CST).problems == []
    assert windows.audit_coarse(store, Granularity.WEEK, day, CST).problems == []
    w = tower_windows.c
    for level in ("1h", "day", "week"):  # the refs stay right; only the count a client reads is off
        with store.begin() as conn:
            conn.execute(
                tower_windows.update()
                .where(w.type_name == "proj/decisions", w.granularity == level, w.start >= cst(2026, 1, 5))
                .where(w.start < cst(2026, 1, 5, 10))
                .values(entry_count=w.entry_count + 1)
            )
        audit = (
            windows.audit_coarse(store, Granularity.WEEK, day, CST)
            if level == "week"
            else windows.audit_day(store, day, CST)
        )
        assert any(f"proj/decisions [] {level} " in p and "entry_count" in p for p in audit.problems), audit.problems
        with store.begin() as conn:
            conn.execute(
                tower_windows.update()
                .where(w.type_name == "proj/decisions", w.granularity == level)
                .values(entry_count=w.entry_count - 1)
                .where(w.start >= cst(2026, 1, 5), w.start < cst(2026, 1, 5, 10))
            )
    assert windows.audit_day(store, day, CST).problems == []


def test_stale_read_says_so_and_a_late_entry_updates_refs_at_once(tower, store):
    tower.create_type("proj/decisions", summaries=True)
    week_of_entries(tower, days=(5,))
    build(store, cst(2026, 1, 5).date())
    windows.build_coarse(store, Granularity.WEEK, cst(2026, 1, 5).date(), CST)
    tower.summarize("proj/decisions", WindowQuery.parse("day", "2026-01-05"))
    # An entry appended straight to the raw series (as the open day's before its minute refresh) is
    # not in the materialized view: the read says so.
    with store.begin() as conn:
        conn.execute(
            tower_entries.insert().values(
                type_name="proj/decisions",
                entry_id="raw-late",
                at=cst(2026, 1, 5, 20),
                group_value="",
                content="late",
                chars=4,
                ingested_at=utcnow(),
            )
        )
    stale = tower.recall("proj/decisions", WindowQuery.parse("day", "2026-01-05"))
    assert stale["stale"] and stale["entries_not_in_view"] == 1 and stale["total_entries"] == 3
    assert windows.audit_day(store, cst(2026, 1, 5).date(), CST).stale_entries == 1
    later = cst(2026, 1, 8)
    assert windows.stale_days(store, CST, later, activity_type=None) == {cst(2026, 1, 5).date(): 1}
    # Through append, a late entry of a closed, materialized day updates the refs at once, and the
    # summary is marked stale with the count it misses (never re-summarized automatically).
    report = tower.append("proj/decisions", {"content": "another late one", "at": cst(2026, 1, 5, 21).isoformat()})
    assert report["late_windows_refreshed"] > 0
    fresh = tower.recall("proj/decisions", WindowQuery.parse("day", "2026-01-05"))
    assert not fresh["stale"] and fresh["total_entries"] == 5
    assert tower.recall("proj/decisions", WindowQuery.parse("week", "2026-01-05"))["total_entries"] == 5
    summary = tower.get_summary("proj/decisions", WindowQuery.parse("day", "2026-01-05"))["summaries"][0]
    assert summary["stale"] and summary["missing_entries"] == 2
    assert windows.audit_day(store, cst(2026, 1, 5).date(), CST).problems == []
    # the type's day was rebuilt (not the whole day's run): the late-data record agrees with the read
    assert windows.stale_days(store, CST, later, activity_type=None) == {}


def test_activity_type_is_fed_from_conversation_messages(tower, store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 1, 5, 9), ["tomatoes planted", "tomatoes watered", "compost"]))
    result = windows.build_day(store, cst(2026, 1, 5).date(), CST, activity_type="agent/activity")
    assert result.activity_fed == 3
    assert windows.build_day(store, cst(2026, 1, 5).date(), CST, activity_type="agent/activity").activity_fed == 0
    page = tower.recall("agent/activity", WindowQuery.parse("day", "2026-01-05", group="w1"))
    assert page["total_entries"] == 3 and page["entries"][0]["content"]["text"] == "tomatoes planted"
    assert tower.windows("agent/activity", WindowQuery.parse("day", "2026-01-05"))["level"] == "1h"


def test_activity_reads_say_stale_while_messages_wait_to_be_fed(tower, store, ingest):
    ingest(conversation("w1", "c1", cst(2026, 1, 5, 9), ["tomatoes planted", "tomatoes watered"]))
    day = cst(2026, 1, 5).date()
    windows.build_day(store, day, CST, activity_type="agent/activity")
    windows.build_coarse(store, Granularity.WEEK, day, CST)
    assert not tower.recall("agent/activity", WindowQuery.parse("day", "2026-01-05"))["stale"]
    ingest(conversation("w1", "c2", cst(2026, 1, 5, 13), ["late message"]))  # after the day was built
    recalled = tower.recall("agent/activity", WindowQuery.parse("day", "2026-01-05"))
    assert recalled["stale"] and recalled["entries_not_in_view"] == 1 and recalled["total_entries"] == 2
    by_group = tower.recall("agent/activity", WindowQuery.parse("day", "2026-01-05", group="w1"))
    assert by_group["entries_not_in_view"] == 1
    assert (
        tower.recall("agent/activity", WindowQuery.parse("day", "2026-01-05", group="w2"))["entries_not_in_view"] == 0
    )
    # Browse: the day listed in its week is stale; its children (hours) leave the 13:00 message out.
    week = tower.windows("agent/activity", WindowQuery.parse("week", "2026-01-05"))
    assert [(w["stale"], w["entries_not_in_view"]) for w in week["windows"]] == [(True, 1)]
    hours = tower.windows("agent/activity", WindowQuery.parse("day", "2026-01-05"))
    assert hours["stale"] and hours["entries_not_in_view"] == 1
    summary = tower.get_summary("agent/activity", WindowQuery.parse("day", "2026-01-05"))
    assert summary["stale"] and summary["entries_not_in_view"] == 1
    assert windows.audit_day(store, day, CST, activity_type="agent/activity").stale_entries == 1
    windows.build_day(store, day, CST, activity_type="agent/activity")  # the late-data run feeds it
    fresh = tower.recall("agent/activity", WindowQuery.parse("day", "2026-01-05"))
    assert not fresh["stale"] and fresh["total_entries"] == 3
    assert not tower.windows("agent/activity", WindowQuery.parse("day", "2026-01-05"))["stale"]


# ---- summaries -----------------------------------------------------------------------------------


def test_bottom_up_week_calls_match_the_formula_and_the_second_run_makes_none(tower, store):
    tower.create_type("proj/decisions", chain=["1h", "day", "week"], summaries=True, group_field="project")
    week_of_entries(tower, days=(5, 6, 7), group="alpha")
    week_of_entries(tower, days=(6, 8), group="beta")
    # One child already summarized.
    tower.summarize("proj/decisions", WindowQuery.parse("day", "2026-01-06", group="alpha"))
    before = calls(store)
    jobs = tower.summarize("proj/decisions", WindowQuery.parse("week", "2026-01-05"))["jobs"]
    assert {j["state"] for j in jobs} == {"succeeded"}
    # Σ over groups of (child days with entries but no summary + 1): alpha (2 + 1) + beta (2 + 1) = 6
    assert calls(store) - before == 6
    assert sum(j["llm_calls"] for j in jobs) == 6
    again = tower.summarize("proj/decisions", WindowQuery.parse("week", "2026-01-05"))["jobs"]
    assert calls(store) - before == 6 and all(j["llm_calls"] == 0 for j in again)
    week = tower.get_summary("proj/decisions", WindowQuery.parse("week", "2026-01-05", group="alpha"))["summaries"][0]
    assert week["source"] == "chain" and week["refs"]["kind"] == "summary" and len(week["refs"]["ids"]) == 3
    assert list(week["sections"]) == ["decisions", "conclusions", "todos", "state_changes", "keywords"]
    assert week["provenance"] == {
        "strategy": "direct",
        "chunks": 1,
        "inputTokens": week["provenance"]["inputTokens"],
        "clippedEntries": 0,
    }
    day_texts = {
        s["text"]
        for d in (5, 6, 7)
        for s in tower.get_summary("proj/decisions", WindowQuery.parse("day", f"2026-01-0{d}", group="alpha"))[
            "summaries"
        ]
    }
    assert week["text"] not in day_texts  # an aggregate never passes a child's text through unchanged
    # the offline model's aggregate names its period: alike children never make a copy of one
    assert week["sections"]["conclusions"][0].startswith("week 2026-01-05: postgres")

    # recompute: from raw, bypassing the chain; appended (newest wins), nothing replaced.
    rec = tower.recompute("proj/decisions", WindowQuery.parse("week", "2026-01-05", group="alpha"))["jobs"][0]
    newest = tower.get_summary("proj/decisions", WindowQuery.parse("week", "2026-01-05", group="alpha"))["summaries"][0]
    assert newest["record_id"] == rec["record_id"] and newest["source"] == "raw" and newest["refs"]["kind"] == "entry"
    with store.connect() as conn:
        assert (
            conn.execute(
                select(func.count())
                .select_from(tower_summaries)
                .where(tower_summaries.c.granularity == "week", tower_summaries.c.group_value == "alpha")
            ).scalar_one()
            == 2
        )


def test_map_reduce_over_budget_and_clipped_entries_counted(store):
    tower = make_tower(store, TowerConfig(input_budget_tokens=60, max_chunks=2))
    tower.create_type("proj/log", chain=["day"], summaries=True)
    tower.append(
        "proj/log",
        [{"content": f"entry {i} " + "word " * 20, "at": cst(2026, 1, 5, 9, i).isoformat()} for i in range(8)]
        + [{"content": "huge " * 400, "at": cst(2026, 1, 5, 11).isoformat()}],
    )
    before = calls(store)
    job = tower.summarize("proj/log", WindowQuery.parse("day", "2026-01-05"))["jobs"][0]
    rec = tower.get_summary("proj/log", WindowQuery.parse("day", "2026-01-05"))["summaries"][0]
    prov = rec["provenance"]
    assert prov["strategy"] == "map_reduce" and prov["chunks"] == 2
    assert prov["clippedEntries"] >= 1  # the huge entry alone is over the budget: dropped and counted
    assert calls(store) - before == 3 == job["llm_calls"]  # two chunk calls and one merge


def test_guardrail_1_open_or_unsettled_windows_are_refused(tower, store):
    tower.create_type("proj/decisions", summaries=True)
    tower.append("proj/decisions", {"content": "now"})
    now = utcnow()
    with pytest.raises(TowerInputError, match="still open"):
        tower.summarize("proj/decisions", WindowQuery.parse("day", now.astimezone(CST).date().isoformat()))
    t = summaries.types_io.get(store, "proj/decisions")
    end = now - timedelta(minutes=2)
    key = WindowKey(t.name, "10min", end - timedelta(minutes=10), end, "")
    sctx = SummaryContext(store, LLMClient(store), TowerConfig(), CST)
    with pytest.raises(TowerInputError, match="settles at"):
        summaries.summarize(sctx, t, key, source=Source.CHAIN, now=now)
    # The tick only ever takes the latest settled window.
    start, stop = summaries.latest_settled(Granularity.MIN10, cst(2026, 1, 5, 10, 14), timedelta(minutes=5), CST)
    assert (start, stop) == (cst(2026, 1, 5, 9, 50), cst(2026, 1, 5, 10, 0))
    assert calls(store) == 0


def test_guardrail_2_and_3_idempotent_and_empty_costs_nothing(tower, store):
    tower.create_type("proj/decisions", summaries=True)
    week_of_entries(tower, days=(5,))
    first = tower.summarize("proj/decisions", WindowQuery.parse("day", "2026-01-05"))["jobs"][0]
    n = calls(store)
    second = tower.summarize("proj/decisions", WindowQuery.parse("day", "2026-01-05"))["jobs"][0]
    assert second["record_id"] == first["record_id"] and calls(store) == n
    empty = tower.summarize("proj/decisions", WindowQuery.parse("day", "2026-01-09"))["jobs"][0]
    assert empty["state"] == "skipped_empty" and calls(store) == n
    missing = tower.get_summary("proj/decisions", WindowQuery.parse("day", "2026-01-09"), summarize_on_miss=True)
    assert missing["state"] == "empty" and missing["jobs"] == [] and calls(store) == n
    assert count(store, tower_summaries) == 4  # the day and its three hours (bottom-up); none for the empty day


def test_guardrail_4_backoff_give_up_and_success_clears_the_ledger(store):
    with FakeOpenAI() as fake:
        for _ in range(20):
            fake.push("status", 400)
        failing = make_tower(
            store, TowerConfig(give_up_after=3), model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0
        )
        failing.create_type("proj/log", chain=["day"], summaries=True)
        failing.append(
            "proj/log",
            [
                {"content": "wrote the report", "at": cst(2026, 1, 5, 9).isoformat()},
                {"content": "fixed the build", "at": cst(2026, 1, 6, 9).isoformat()},
            ],
        )
        states = [
            failing.summarize("proj/log", WindowQuery.parse("day", "2026-01-05"))["jobs"][0]["state"] for _ in range(3)
        ]
        assert states == ["failed", "failed", "given_up"]
        with store.connect() as conn:
            row = conn.execute(select(tower_summary_attempts)).mappings().one()
        assert row["failures"] == 3 and row["given_up_at"] is not None and "400" in row["last_error"]
        asked = len(fake.requests)
        again = failing.summarize("proj/log", WindowQuery.parse("day", "2026-01-05"))["jobs"][0]
        assert again["state"] == "given_up" and "given up" in again["error"] and len(fake.requests) == asked
        # A scheduled round waits out the backoff: no call for a window that failed recently.
        failing.summarize("proj/log", WindowQuery.parse("day", "2026-01-06"))
        t = summaries.types_io.get(store, "proj/log")
        sctx = SummaryContext(store, failing.llm_factory("tick"), failing.cfg, CST)
        asked = len(fake.requests)
        out = summaries.summarize(
            sctx,
            t,
            summaries.level_key(t, Granularity.DAY, cst(2026, 1, 6), "", CST),
            source=Source.CHAIN,
            now=utcnow(),
            scheduled=True,
        )
        assert out.state == JobState.FAILED and len(fake.requests) == asked
        assert re.fullmatch(r"backing off until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00", out.reason), out.reason
    ok = make_tower(store)
    assert ok.summarize("proj/log", WindowQuery.parse("day", "2026-01-06"))["jobs"][0]["state"] == "succeeded"
    with store.connect() as conn:
        left = conn.execute(select(tower_summary_attempts.c.start)).scalars().all()
    assert left == [cst(2026, 1, 5)]  # the success cleared its window's ledger; the given-up one stays


def test_guardrail_5_commits_per_round_are_capped_and_the_tick_takes_only_the_latest_window(store):
    tower = make_tower(store, TowerConfig(max_commits_per_round=2))
    for p in ("a", "b", "c", "d", "e"):
        tower.append(
            "worklog",
            [
                {"content": {"project": p, "did": "wrote the report"}, "at": cst(2026, 1, 5, 9).isoformat()},
                {"content": {"project": p, "did": "older day"}, "at": cst(2025, 12, 20, 9).isoformat()},
            ],
        )
    sctx = SummaryContext(store, LLMClient(store), tower.cfg, CST)
    now = cst(2026, 1, 6, 0, 10)  # day 2026-01-05 settled at 00:05
    first = summaries.semantic_tick(sctx, now)
    assert (first.committed, first.deferred) == (2, 3)
    second = summaries.semantic_tick(sctx, now)
    third = summaries.semantic_tick(sctx, now)
    assert (second.committed, third.committed, third.deferred) == (2, 1, 0)
    assert summaries.semantic_tick(sctx, now).committed == 0  # idempotent: nothing left, no call
    with store.connect() as conn:
        starts = set(conn.execute(select(tower_summaries.c.start)).scalars())
    assert starts == {cst(2026, 1, 5)}  # only the latest closed day; 2025-12-20 is never touched


def test_semantic_recall_cap_level_from_to_and_summarize_on_miss(tower, store):
    tower.create_type("proj/decisions", chain=["day", "week"], summaries=True)
    week_of_entries(tower, days=(5, 12, 19))
    missing = tower.get_summary("proj/decisions", WindowQuery.parse("day", "2026-01-05"))
    assert missing["state"] == "missing" and missing["jobs"] == [] and calls(store) == 0
    on_miss = tower.get_summary("proj/decisions", WindowQuery.parse("day", "2026-01-05"), summarize_on_miss=True)
    assert on_miss["jobs"][0]["kind"] == "summarize_on_miss" and on_miss["jobs"][0]["state"] == "succeeded"
    assert tower.get_summary("proj/decisions", WindowQuery.parse("day", "2026-01-05"))["state"] == "found"
    for d in ("2026-01-05", "2026-01-12", "2026-01-19"):
        tower.summarize("proj/decisions", WindowQuery.parse("week", d))
    n = calls(store)
    year = tower.get_summary("proj/decisions", WindowQuery.parse(from_="2026-01-01", to="2027-01-01"))
    assert year["state"] == "cap_level" and len(year["summaries"]) == 3 and calls(store) == n
    assert {s["window"]["granularity"] for s in year["summaries"]} == {"week"}
    phase = tower.summarize(
        "proj/decisions", WindowQuery.parse(from_="2026-01-05T09:00:00+08:00", to="2026-01-05T11:00:00+08:00")
    )
    rec = tower.get_summary(
        "proj/decisions", WindowQuery.parse(from_="2026-01-05T09:00:00+08:00", to="2026-01-05T11:00:00+08:00")
    )
    assert rec["summaries"][0]["record_id"] == phase["jobs"][0]["record_id"]
    assert rec["summaries"][0]["source"] == "raw" and rec["summaries"][0]["entry_count"] == 2
    with pytest.raises(TowerInputError, match="above"):
        tower.update_type("proj/decisions", {"chain": ["day", "week", "month"]})
        tower.summarize("proj/decisions", WindowQuery.parse("month", "2026-01-01"))
    statuses = tower.list_jobs(limit=100)
    assert all(set(j) >= {"job_id", "state", "record_id"} for j in statuses)
    assert tower.job_status(statuses[0]["job_id"])["job_id"] == statuses[0]["job_id"]


def test_the_open_window_is_said_open_and_a_future_one_is_no_gap(tower, store):
    """Seed 004 summarizes closed windows only: the open day read as "missing" (its summary can
    never exist yet), and a range reaching past now listed the future weeks as gaps."""
    tower.create_type("r/now", chain=["day", "week"], summaries=True)
    now = utcnow().astimezone(CST)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    at = max(now - timedelta(seconds=5), midnight)  # today, so in this week too, whatever the clock says
    tower.append("r/now", {"content": "today's note", "at": at.isoformat()})
    today = tower.get_summary("r/now", WindowQuery.parse("day", now.date().isoformat()))
    assert today["state"] == "open" and today["missing_groups"] == [""]
    lo, hi = (now - timedelta(days=21)).date().isoformat(), (now + timedelta(days=40)).date().isoformat()
    wide = tower.get_summary("r/now", WindowQuery.parse(from_=lo, to=hi))
    assert wide["state"] == "cap_level" and wide["summaries"] == []
    *closed, current = wide["gaps"]
    assert [g["open"] for g in closed] == [False] * len(closed) and closed and current["open"] is True
    assert current["windows"] == 1 and current["entries"] == 1  # this week, holding today's entry
    assert current["start"] <= now.isoformat() < current["end"]  # and nothing after it: the future is no gap
    assert wide["total_gaps"] == len(wide["gaps"]) and calls(store) == 0


def test_a_type_with_summaries_off_is_never_summarized_not_even_when_asked(tower, store):
    """Seed 004: semantic summaries are opt-in per type (new types off). summarize, recompute and
    summarize_on_miss over such a type are refused naming it: no job, no call, no record."""
    tower.create_type("proj/notes", chain=["day", "week"])
    week_of_entries(tower, "proj/notes", days=(5,))
    day = WindowQuery.parse("day", "2026-01-05")
    for ask in (
        lambda: tower.summarize("proj/notes", day),
        lambda: tower.recompute("proj/notes", day),
        lambda: tower.get_summary("proj/notes", day, summarize_on_miss=True),
    ):
        with pytest.raises(TowerInputError, match="'proj/notes' has summaries off: switch them on"):
            ask()
    assert calls(store) == 0 and tower.list_jobs(limit=10) == []
    tower.update_type("proj/notes", {"summaries": True})
    assert tower.summarize("proj/notes", day)["jobs"][0]["state"] == "succeeded" and calls(store) == 1


def test_semantic_recall_pages_with_totals_and_says_where_a_wide_range_has_no_summary(tower, store):
    tower.create_type("r/year", chain=["week"], summaries=True)
    tower.append(
        "r/year",
        [{"content": f"month {m} garden notes", "at": f"2025-{m:02d}-10T12:00:00+08:00"} for m in range(1, 13)],
    )
    tower.append("r/year", {"content": "never summarized", "at": "2024-06-05T12:00:00+08:00"})
    for m in range(1, 13):
        tower.summarize("r/year", WindowQuery.parse("week", f"2025-{m:02d}-10"))
    n = calls(store)
    wide = tower.get_summary("r/year", WindowQuery.parse(from_="2024-01-01", to="2026-01-01"))
    assert wide["state"] == "cap_level" and (wide["total_summaries"], wide["total_gaps"]) == (12, 13)
    assert wide["returned"] == 25 and wide["next_cursor"] is None  # within the default limit of 100
    first = wide["gaps"][0]  # 2024 and the first days of 2025: no summary, one entry never summarized
    assert (first["start"], first["end"]) == ("2024-01-01T00:00:00+08:00", "2025-01-06T00:00:00+08:00")
    assert (first["windows"], first["entries"]) == (53, 1)
    assert all(g["entries"] == 0 for g in wide["gaps"][1:])
    assert wide["total_chars"] == sum(len(x["text"]) for x in wide["summaries"])
    items, cursor = [], None
    while True:  # the client decides how much: pages of 5 items (summaries and gaps) in time order
        page = tower.get_summary(
            "r/year", WindowQuery.parse(from_="2024-01-01", to="2026-01-01"), limit=5, cursor=cursor
        )
        assert page["returned"] == len(page["summaries"]) + len(page["gaps"]) <= 5
        items += [(x["window"]["start"], "summary") for x in page["summaries"]]
        items += [(g["start"], "gap") for g in page["gaps"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(items) == 25 and sorted(items) == sorted(set(items))
    assert [k for _, k in sorted(items)] == ["gap"] + ["summary", "gap"] * 12
    for bad in (0, 1001, True):
        with pytest.raises(TowerInputError, match="field 'limit': must be an integer from 1 to 1000"):
            tower.get_summary("r/year", WindowQuery.parse(from_="2024-01-01", to="2026-01-01"), limit=bad)
    assert calls(store) == n  # reading never calls an LLM
    # A week that starts before the range but overlaps it is part of the answer (Nov 1 is a Saturday).
    tower.append("r/year", {"content": "a weekend", "at": "2025-11-01T10:00:00+08:00"})
    tower.summarize("r/year", WindowQuery.parse("week", "2025-11-01"))
    november = tower.get_summary("r/year", WindowQuery.parse(from_="2025-11-01", to="2025-12-01"))
    assert [x["window"]["start"] for x in november["summaries"]] == [
        "2025-10-27T00:00:00+08:00",
        "2025-11-10T00:00:00+08:00",
    ]


def test_semantic_recall_of_one_window_pages_its_groups(tower, store):
    tower.append(
        "worklog",
        [{"content": {"project": p, "did": f"{p} work"}, "at": cst(2026, 1, 5, 10).isoformat()} for p in "abcde"],
    )
    for p in "ace":
        tower.summarize("worklog", WindowQuery.parse("day", "2026-01-05", group=p))
    whole = tower.get_summary("worklog", WindowQuery.parse("day", "2026-01-05"))
    assert whole["state"] == "partial" and (whole["total_summaries"], whole["total_missing_groups"]) == (3, 2)
    page = tower.get_summary("worklog", WindowQuery.parse("day", "2026-01-05"), limit=2)
    assert [s["group"] for s in page["summaries"]] == ["a"] and page["missing_groups"] == ["b"]
    rest = tower.get_summary("worklog", WindowQuery.parse("day", "2026-01-05"), limit=1000, cursor=page["next_cursor"])
    assert [s["group"] for s in rest["summaries"]] == ["c", "e"] and rest["missing_groups"] == ["d"]
    assert rest["next_cursor"] is None and rest["state"] == "partial"


def test_an_empty_answer_for_a_group_the_type_does_not_have_says_so(tower):
    """Findings: `tower summary worklog -g week -a 2026-01-05 --group alpha` said "empty", which reads
    as "nothing that week" when no entry was ever in group alpha."""
    tower.append("worklog", [{"content": {"project": "aria", "did": "x"}, "at": cst(2026, 1, 5, 10).isoformat()}])
    unknown = tower.get_summary("worklog", WindowQuery.parse("week", "2026-01-05", group="alpha"))
    assert unknown["state"] == "empty"
    assert unknown["group_note"] == "no entry of worklog is in group 'alpha', in this window or any other"
    recalled = tower.recall("worklog", WindowQuery.parse("week", "2026-01-05", group="alpha"))
    assert recalled["total_entries"] == 0 and recalled["group_note"] == unknown["group_note"]
    # A group the type has, in a week without its entries: empty, and no note.
    quiet = tower.get_summary("worklog", WindowQuery.parse("week", "2026-01-12", group="aria"))
    assert quiet["state"] == "empty" and "group_note" not in quiet
    assert "group_note" not in tower.recall("worklog", WindowQuery.parse("week", "2026-01-12", group="aria"))
    assert "group_note" not in tower.recall("worklog", WindowQuery.parse("week", "2026-01-05", group="aria"))


def test_jobs_return_at_once_in_the_background(store):
    tower = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="t", partition=p))
    tower.create_type("proj/decisions", summaries=True)
    week_of_entries(tower, days=(5,))
    job = tower.summarize("proj/decisions", WindowQuery.parse("day", "2026-01-05"))["jobs"][0]
    assert job["state"] in ("queued", "running", "succeeded")
    tower.wait_jobs()
    done = tower.job_status(job["job_id"])
    assert done["state"] == "succeeded" and done["record_id"]
    tower.close()


def test_jobs_started_from_many_threads_share_one_pool_and_done_jobs_are_not_kept(store):
    """The server starts jobs from its worker threads at once; it runs for months."""
    import threading

    tower = Tower(store, TowerConfig(), CST, lambda p: LLMClient(store, asset="t", partition=p))
    tower.create_type("proj/decisions", summaries=True)
    week_of_entries(tower, days=(5, 6, 7))
    pools, barrier = [], threading.Barrier(6)

    def start(day: str) -> None:
        barrier.wait()
        tower.summarize("proj/decisions", WindowQuery.parse("day", day))
        pools.append(tower._pool)

    threads = [threading.Thread(target=start, args=(f"2026-01-0{5 + i % 3}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(pools) == 6 and len({id(p) for p in pools}) == 1  # one pool, whoever came first
    tower.wait_jobs()
    for _ in range(5):  # each start drops the jobs already done
        tower.summarize("proj/decisions", WindowQuery.parse("day", "2026-01-05"))
        tower.wait_jobs()
    assert len(tower.futures) == 1
    states = {tower.job_status(j["job_id"])["state"] for j in tower.list_jobs()}
    assert states == {"succeeded"}
    tower.close()


def test_the_tick_writes_sub_day_windows_as_they_settle_and_switching_on_starts_from_the_latest(store):
    tower = make_tower(store)
    tower.create_type("agent/notes", chain=["10min", "1h", "day"])  # summaries off: history without summaries
    tower.append(
        "agent/notes",
        [{"content": f"step {i} of the deploy", "at": cst(2026, 1, 5, 10, i).isoformat()} for i in range(0, 30, 3)]
        + [{"content": "older", "at": cst(2026, 1, 3, 9).isoformat()}],
    )
    sctx = SummaryContext(store, LLMClient(store), TowerConfig(), CST)
    assert summaries.semantic_tick(sctx, cst(2026, 1, 5, 10, 16)).committed == 0  # off: nothing
    tower.update_type("agent/notes", {"summaries": True})
    at_1016 = summaries.semantic_tick(sctx, cst(2026, 1, 5, 10, 16))
    assert at_1016.written == ["agent/notes 10min 2026-01-05T10:00+08:00"]  # 10:10-10:20 is not settled yet
    at_1026 = summaries.semantic_tick(sctx, cst(2026, 1, 5, 10, 26))
    assert at_1026.written == ["agent/notes 10min 2026-01-05T10:10+08:00"]
    with store.connect() as conn:
        starts = set(conn.execute(select(tower_summaries.c.start)).scalars())
    assert not any(s < cst(2026, 1, 5) for s in starts)  # 2026-01-03 (history before the switch) is left alone


def test_two_processes_summarizing_the_same_window_make_one_call(store):
    import threading

    with FakeOpenAI() as fake:
        fake.latency = 1.0
        fake.default_text = json.dumps({"decisions": ["use postgres"], "keywords": ["postgres"]})
        towers = [make_tower(store, model="openai/fake", api_base=fake.api_base, api_key="k") for _ in range(2)]
        towers[0].create_type("proj/log", chain=["day"], summaries=True)
        towers[0].append("proj/log", {"content": "chose postgres", "at": cst(2026, 1, 5, 9).isoformat()})
        out: list = []
        threads = [
            threading.Thread(
                target=lambda t=t: out.append(t.summarize("proj/log", WindowQuery.parse("day", "2026-01-05")))
            )
            for t in towers
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(fake.requests) == 1  # the lease: the second waited, then reused the first's record
    ids = {o["jobs"][0]["record_id"] for o in out}
    assert len(ids) == 1 and count(store, tower_summaries) == 1
    rec = towers[0].get_summary("proj/log", WindowQuery.parse("day", "2026-01-05"))["summaries"][0]
    assert rec["sections"]["decisions"] == ["use postgres"] and rec["model"] == "openai/fake"


def test_reading_never_calls_an_llm(tower, store):
    tower.create_type("proj/decisions", summaries=True)
    week_of_entries(tower, days=(5,))
    build(store, cst(2026, 1, 5).date())
    tower.windows("proj/decisions")
    tower.windows("proj/decisions", WindowQuery.parse("day", "2026-01-05"))
    tower.recall("proj/decisions", WindowQuery.parse("day", "2026-01-05"))
    tower.recall("proj/decisions", WindowQuery.parse(from_="2026-01-01", to="2026-02-01"))
    assert tower.get_summary("proj/decisions", WindowQuery.parse("day", "2026-01-05"))["state"] == "missing"
    assert (
        tower.get_summary("proj/decisions", WindowQuery.parse(from_="2026-01-01", to="2027-01-01"))["state"]
        == "cap_level"
    )
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(llm_ledger)).scalar_one() == 0


def test_config_section_is_strict(tmp_path):
    from memory_pipeline.lib.settings import ConfigError
    from memory_pipeline.tower import config as tower_config

    path = tmp_path / "memory.yaml"
    path.write_text("memory:\n  tower:\n    settle_minutes: 'five'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"memory.yaml: memory.tower.settle_minutes: expected int, got str"):
        tower_config.load(path)
    path.write_text("memory:\n  tower:\n    max_commits: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) in memory.tower: max_commits"):
        tower_config.load(path)
    path.write_text("memory:\n  tower:\n    give_up_after: 0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="give_up_after"):
        tower_config.load(path)
    path.write_text("memory:\n  tower:\n    max_commits_per_round: 7\n    mcp_port: 8901\n", encoding="utf-8")
    cfg = tower_config.load(path)
    assert (cfg.max_commits_per_round, cfg.mcp_port, cfg.semantic_tick_minutes, cfg.settle_minutes) == (7, 8901, 10, 5)
    assert (cfg.backoff_minutes, cfg.give_up_after, cfg.mcp_host) == (10, 5, "127.0.0.1")


def test_an_aggregate_of_a_single_child_is_not_the_childs_text(tower, store):
    tower.create_type("proj/weekly", chain=["day", "week"], summaries=True)
    tower.append("proj/weekly", [{"content": "chose postgres over mysql", "at": cst(2026, 1, 6, 9).isoformat()}])
    job = tower.summarize("proj/weekly", WindowQuery.parse("week", "2026-01-05"))["jobs"][0]
    assert job["llm_calls"] == 2  # the child from raw, then the aggregate: never a copy without a call
    day = tower.get_summary("proj/weekly", WindowQuery.parse("day", "2026-01-06"))["summaries"][0]
    week = tower.get_summary("proj/weekly", WindowQuery.parse("week", "2026-01-05"))["summaries"][0]
    assert week["refs"]["ids"] == [day["record_id"]] and week["text"] != day["text"]


def test_concurrent_appends_of_the_same_ids_store_each_entry_once(store):
    import threading

    towers = [make_tower(store) for _ in range(4)]
    towers[0].create_type("proj/log", chain=["day"])
    batch = [{"content": f"entry {i}", "id": f"same-{i}", "at": cst(2026, 1, 5, 9, i).isoformat()} for i in range(50)]
    reports: list = []
    threads = [threading.Thread(target=lambda t=t: reports.append(t.append("proj/log", batch))) for t in towers]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(reports) == 4 and sum(r["inserted"] for r in reports) == 50
    assert sum(r["duplicates"] for r in reports) == 150 and count(store, tower_entries) == 50


def test_a_child_made_bottom_up_takes_its_own_lease_and_its_success_clears_its_ledger(store):
    """The day 2026-01-06 failed when summarized by itself (a retry is listed); then the week is
    summarized bottom-up. While another process holds the day's lease (making it), the week waits for
    it and makes nothing; once the day is free, the week makes it, and the day's ledger is cleared."""
    from memory_pipeline.lib.store import leases

    with FakeOpenAI() as fake:
        fake.push("status", 400)
        failing = make_tower(store, model="openai/fake", api_base=fake.api_base, api_key="k", max_retries=0)
        failing.create_type("proj/weekly", chain=["day", "week"], summaries=True)
        failing.append("proj/weekly", {"content": "chose postgres over mysql", "at": cst(2026, 1, 6, 9).isoformat()})
        assert failing.summarize("proj/weekly", WindowQuery.parse("day", "2026-01-06"))["jobs"][0]["state"] == "failed"
    (retrying,) = summaries.retrying(store, CST)
    assert retrying["window"] == "proj/weekly day 2026-01-06" and retrying["failures"] == 1

    t = summaries.types_io.get(store, "proj/weekly")
    day = summaries.level_key(t, Granularity.DAY, cst(2026, 1, 6), "", CST)
    week = summaries.level_key(t, Granularity.WEEK, cst(2026, 1, 5), "", CST)
    other = "another-process"
    assert leases.try_acquire(store, summaries.LEASE_ASSET, day.lease_partition(), other) is None
    impatient = SummaryContext(store, LLMClient(store), TowerConfig(), CST, lease_wait_seconds=0)
    with pytest.raises(leases.LeaseTimeout, match=other):
        summaries.summarize(impatient, t, week, source=Source.CHAIN, now=utcnow())
    assert count(store, tower_summaries) == 0 and calls(store) == 0  # the day was left to its holder
    assert leases.release(store, summaries.LEASE_ASSET, day.lease_partition(), other)

    job = make_tower(store).summarize("proj/weekly", WindowQuery.parse("week", "2026-01-05"))["jobs"][0]
    assert job["state"] == "succeeded" and job["llm_calls"] == 2  # the day from raw, then the week
    assert summaries.retrying(store, CST) == [] and summaries.given_up(store, CST) == []
    assert count(store, tower_summary_attempts) == 0
    with store.connect() as conn:
        assert list(conn.execute(select(tower_summaries.c.granularity).order_by("record_id")).scalars()) == [
            "day",
            "week",
        ]


def test_a_wide_read_on_a_short_chain_returns_its_top_level_summaries_and_the_gaps(tower, store):
    """Chains that stop below the default cap (week): `day` alone, and `day` → `month` (month is above
    the cap). A read wider than the cap has no week to return: it returns the day summaries covering
    the range and the gaps between them, not an empty answer."""
    for name, chain in (("r/daily", ["day"]), ("r/monthly", ["day", "month"])):
        tower.create_type(name, chain=chain, summaries=True)
        tower.append(
            name,
            [{"content": f"chose postgres on day {d}", "at": cst(2026, 1, d, 10).isoformat()} for d in (5, 6, 20)],
        )
        for d in ("2026-01-05", "2026-01-06"):
            assert tower.summarize(name, WindowQuery.parse("day", d))["jobs"][0]["state"] == "succeeded"
    n = calls(store)
    ranged = tower.get_summary("r/daily", WindowQuery.parse(from_="2026-01-01", to="2026-02-01"))
    month = tower.get_summary("r/monthly", WindowQuery.parse("month", "2026-01-15"))
    assert calls(store) == n  # a read never calls the model
    for wide in (ranged, month):
        assert wide["state"] == "cap_level" and (wide["total_summaries"], wide["total_gaps"]) == (2, 2)
        assert [(s["window"]["granularity"], s["window"]["start"]) for s in wide["summaries"]] == [
            ("day", "2026-01-05T00:00:00+08:00"),
            ("day", "2026-01-06T00:00:00+08:00"),
        ]
        gaps = [(g["start"][:10], g["end"][:10], g["windows"], g["entries"]) for g in wide["gaps"]]
        assert gaps == [("2026-01-01", "2026-01-05", 4, 0), ("2026-01-07", "2026-02-01", 25, 1)]  # the 20th
        assert "the chain's top summarized level is day" in wide["note"]


def test_a_summary_made_from_an_answer_the_provider_cut_is_not_reused(store):
    """The provider stops the day's answer at its output limit (finish_reason length): the record is
    appended and counted (the client's truncated answers), but the next summarize of the window
    asks again instead of reusing it; a whole answer is then reused as usual."""
    with FakeOpenAI() as fake:
        fake.default_text = json.dumps({"decisions": ["use postgres"], "keywords": ["postgres"]})
        fake.push("length", json.dumps({"decisions": ["use post"], "keywords": ["post"]}))
        tower = make_tower(store, model="openai/fake", api_base=fake.api_base, api_key="k")
        tower.create_type("proj/log", chain=["day"], summaries=True)
        tower.append("proj/log", {"content": "chose postgres", "at": cst(2026, 1, 5, 9).isoformat()})
        day = WindowQuery.parse("day", "2026-01-05")
        assert tower.summarize("proj/log", day)["jobs"][0]["state"] == "succeeded"
        assert len(fake.requests) == 1
        tower.summarize("proj/log", day)
        assert len(fake.requests) == 2  # the cut record was not taken for the window's summary
        tower.summarize("proj/log", day)
        assert len(fake.requests) == 2  # the whole one is
    with store.connect() as conn:
        texts = conn.execute(select(tower_summaries.c.text).order_by(tower_summaries.c.record_id)).scalars().all()
    assert len(texts) == 2 and "use post" in texts[0] and "use postgres" in texts[1]


def test_a_child_window_made_bottom_up_is_in_the_ledger_under_its_own_window(tower, store):
    """A week summarized bottom-up makes its missing day summaries first: each day's call is logged
    under that day's window, the aggregating call under the week's."""
    tower.create_type("proj/log", chain=["day", "week"], summaries=True)
    tower.append(
        "proj/log",
        [
            {"content": "wrote the report", "at": cst(2026, 1, 5, 9).isoformat()},
            {"content": "fixed the build", "at": cst(2026, 1, 6, 9).isoformat()},
        ],
    )
    job = tower.summarize("proj/log", WindowQuery.parse("week", "2026-01-05"))["jobs"][0]
    assert job["state"] == "succeeded", job
    with store.connect() as conn:
        rows = conn.execute(select(llm_ledger.c.task, llm_ledger.c.partition).order_by(llm_ledger.c.call_id)).all()
    assert sorted(rows) == [
        ("tower_aggregate", "proj/log week 2026-01-05"),
        ("tower_raw", "proj/log day 2026-01-05"),
        ("tower_raw", "proj/log day 2026-01-06"),
    ]
