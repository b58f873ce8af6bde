"""memory_search on both engines (SQLite FTS5 and PostgreSQL full-text search): one ranked recall over
every domain's memory of one world, each hit with its kind, time and lineage to raw event ids; no
path reaches another world; the index follows memory as it is written; bad input refused by name."""

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Connection, select, update
from typer.testing import CliRunner

from memory_pipeline import domains
from memory_pipeline.cli import app
from memory_pipeline.conversation.tables import conversation_summaries
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.objects.tables import objects_attachments, objects_objects
from memory_pipeline.recall.documents import MemoryKind
from memory_pipeline.recall.search import SearchError, memory_search, refresh, search_page
from memory_pipeline.recall.tables import recall_documents
from memory_pipeline.sleep.tables import autobiographical_memories, semantic_memories
from memory_pipeline.temporal.tables import temporal_summaries
from memory_pipeline.tower.tables import tower_entries, tower_summaries
from memory_pipeline.tower.types import ensure_builtins
from memory_pipeline_tests.conftest import CST, event

ACTIVITY = "agent/activity"
runner = CliRunner()
D1, D2 = datetime(2023, 5, 8, 13, 0, tzinfo=CST), datetime(2023, 5, 9, 13, 0, tzinfo=CST)


@pytest.fixture(params=["postgresql", "sqlite"])
def engine_store(request, store, tmp_path) -> Store:
    if request.param == "postgresql":
        return store
    lite = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    ensure_schema(lite, domains.version_locations())
    return lite


def _ingest(store: Store, tmp_path, events: list[dict]) -> None:
    import json

    from memory_pipeline.events.ingest import ingest_file

    path = tmp_path / f"events-{len(list(tmp_path.glob('events-*')))}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    assert not ingest_file(store, path).rejected


def _memory(mid: str, world: str, content: str, sessions: list[str], status: str = "active") -> dict:
    now = datetime.now(UTC)
    return {
        "memory_id": mid,
        "world_id": world,
        "type": "experience",
        "content": content,
        "source_sessions": sessions,
        "observed_at": now,
        "status": status,
        "version": 1,
        "created_by": "light_sleep",
        "updated_at": now,
    }


def _two_worlds(store: Store, tmp_path) -> None:
    """World a: pottery on day 1, a marathon on day 2, memory of every kind. World b: pottery too."""
    _ingest(
        store,
        tmp_path,
        [
            event("a", "a.s1", "user", "I went to a pottery class", D1, mid="a1"),
            event("a", "a.s1", "assistant", "Nice, what did you make?", D1 + timedelta(minutes=1), mid="a2"),
            event("a", "a.s2", "user", "I ran the city marathon", D2, mid="a3"),
            event("a", "a.s3", "user", "我在杭州学钢琴", D2 + timedelta(hours=2), mid="a4"),
            event("b", "b.s1", "user", "My secret pottery studio", D1, mid="b1"),
        ],
    )
    now = datetime.now(UTC)
    with store.begin() as conn:
        day_id = conn.execute(
            temporal_summaries.insert().values(
                world_id="a",
                window="day",
                period_start=date(2023, 5, 8),
                content="Caroline took a pottery class and made a bowl.",
                source_count=2,
                source_kind="message",
                source_ids=["a1", "a2"],
            )
        ).inserted_primary_key[0]
        conn.execute(
            temporal_summaries.insert().values(
                world_id="a",
                window="month",
                period_start=date(2023, 5, 1),
                content="May: pottery, then a marathon.",
                source_count=1,
                source_kind="day",
                source_ids=[day_id],
            )
        )
        conn.execute(
            semantic_memories.insert(),
            [
                _memory("m-run", "a", "The user ran the city marathon.", ["a.s2"]),
                _memory("m-old", "a", "The user hates marathons.", ["a.s2"], status="deprecated"),
                _memory("m-piano", "a", "用户在杭州学钢琴。", ["a.s3"]),
                _memory("m-b", "b", "The user keeps a secret pottery studio.", ["b.s1"]),
            ],
        )
        conn.execute(
            autobiographical_memories.insert().values(
                memory_id="n1",
                world_id="a",
                narrative="The spring the user ran a marathon.",
                significance=4,
                kind="milestone",
                source_memory_ids=["m-run"],
                status="active",
                created_day=date(2023, 5, 9),
            )
        )
        obj = {"world_id": "a", "aliases": ["clay"], "summary": "", "cues": ["wheel"], "version": 1, "revision": 1}
        conn.execute(
            objects_objects.insert(),
            [
                obj | {"object_id": "o1", "type": "knowledge", "name": "Pottery", "body": "bowls", "status": "active"},
                obj
                | {"object_id": "o2", "type": "knowledge", "name": "Pottery old", "body": "x", "status": "archived"},
            ],
        )
        conn.execute(objects_attachments.insert().values(world_id="a", object_id="o1", event_id="a1", revision=1))
        conn.execute(
            conversation_summaries.insert().values(
                conversation_id="a.s1",
                version=1,
                world_id="a",
                content="They talked about the pottery class.",
                covered_start=2,
                covered_end=2,
                last_updated=now,
                trigger="entries",
                sections={},
            )
        )
    ensure_builtins(store, ACTIVITY)
    with store.begin() as conn:
        pk = conn.execute(
            tower_entries.insert().values(
                type_name=ACTIVITY, entry_id="a3", at=D2, group_value="a", content={"text": "marathon"}, chars=8
            )
        ).inserted_primary_key[0]
        summary = {
            "type_name": ACTIVITY,
            "granularity": "day",
            "start": D2.replace(hour=0),
            "end": D2.replace(hour=0) + timedelta(days=1),
            "sections": {},
            "ref_kind": "entry",
            "refs": [pk],
            "source": "raw",
            "entry_count": 1,
            "model": "m",
            "prompt_version": "p",
            "strategy": "direct",
            "chunks": 1,
            "input_tokens": 1,
            "clipped_entries": 0,
            "material_fp": "x",
        }
        conn.execute(tower_summaries.insert().values(summary | {"group_value": "a", "text": "Ran the marathon tower"}))
        conn.execute(tower_summaries.insert().values(summary | {"group_value": "b", "text": "b's marathon tower"}))


def _person(conn: Connection, world: str, name: str, events: tuple[str, ...]) -> None:
    """A person object attached to ``events``, as organize would leave it (no body, no cues)."""
    oid = f"person:{name.lower()}"
    conn.execute(
        objects_objects.insert().values(
            world_id=world,
            object_id=oid,
            type="person",
            name=name,
            aliases=[],
            summary="",
            body="",
            cues=[],
            status="active",
            version=1,
            revision=1,
        )
    )
    conn.execute(
        objects_attachments.insert(),
        [{"world_id": world, "object_id": oid, "event_id": e, "revision": 1} for e in events],
    )


def _search(store: Store, world: str, query: str, k: int = 10):
    return memory_search(store, world, query, k, tz=CST, activity_type=ACTIVITY)


def test_every_kind_of_memory_is_found_with_its_lineage(engine_store, tmp_path):
    _two_worlds(engine_store, tmp_path)
    hits = {(h.kind, h.ref): h for h in _search(engine_store, "a", "pottery marathon class bowl clay tower", 20)}
    kinds = {k for k, _ in hits}
    assert kinds == {
        MemoryKind.DAY_SUMMARY,
        MemoryKind.MONTH_SUMMARY,
        MemoryKind.SEMANTIC,
        MemoryKind.NARRATIVE,
        MemoryKind.OBJECT,
        MemoryKind.CONVERSATION_SUMMARY,
        MemoryKind.TOWER_SUMMARY,
    }
    by_kind = {k: h for (k, _), h in hits.items()}
    assert by_kind[MemoryKind.DAY_SUMMARY].event_ids == ("a1", "a2")
    assert by_kind[MemoryKind.DAY_SUMMARY].start == datetime(2023, 5, 8, tzinfo=CST)
    assert by_kind[MemoryKind.MONTH_SUMMARY].event_ids == ("a1", "a2")  # through its day
    assert by_kind[MemoryKind.SEMANTIC].event_ids == ("a3",)  # the messages of its source session
    assert by_kind[MemoryKind.NARRATIVE].event_ids == ("a3",)  # through its source memory
    assert by_kind[MemoryKind.OBJECT].event_ids == ("a1",) and by_kind[MemoryKind.OBJECT].start == D1
    assert by_kind[MemoryKind.CONVERSATION_SUMMARY].event_ids == ("a2",)  # the L2 it covers
    assert by_kind[MemoryKind.TOWER_SUMMARY].event_ids == ("a3",)
    assert (MemoryKind.SEMANTIC, "m-old") not in hits and (MemoryKind.OBJECT, "o2") not in hits


def test_no_hit_ever_comes_from_another_world(engine_store, tmp_path):
    _two_worlds(engine_store, tmp_path)
    for query in ("secret pottery studio", "marathon tower", "pottery"):
        assert all("secret" not in h.text and "b's" not in h.text for h in _search(engine_store, "a", query, 100))
    b_hits = _search(engine_store, "b", "pottery marathon", 100)
    assert {h.ref for h in b_hits} == {"m-b"} | {h.ref for h in b_hits if h.kind is MemoryKind.TOWER_SUMMARY}
    assert all(e.startswith("b") for h in b_hits for e in h.event_ids)


def test_a_worlds_scores_and_order_do_not_move_when_another_world_writes(engine_store, tmp_path):
    """BM25's statistics are the caller's world's own: another world's memory can neither reorder
    its hits nor be read off its scores (one FTS5 index per world on SQLite; ts_rank on PostgreSQL
    scores a document by itself)."""
    _two_worlds(engine_store, tmp_path)
    query = "pottery marathon wheel"

    def ranked() -> list[tuple[str, float]]:
        return [(h.ref, h.score) for h in _search(engine_store, "a", query, 20)]

    before = ranked()
    assert len(before) >= 3
    with engine_store.begin() as conn:
        conn.execute(
            semantic_memories.insert(),
            [_memory(f"m-b{i}", "b", f"Pottery note {i}: pottery wheel, pottery kiln.", ["b.s1"]) for i in range(40)],
        )
    assert len(_search(engine_store, "b", "pottery", 100)) >= 40  # b's documents indexed
    assert ranked() == before


def test_the_rarest_match_ranks_first_and_chinese_is_searchable(engine_store, tmp_path):
    _two_worlds(engine_store, tmp_path)
    assert _search(engine_store, "a", "Where does the user study piano? 钢琴")[0].ref == "m-piano"
    assert _search(engine_store, "a", "他在哪里学钢琴")[0].ref == "m-piano"
    assert _search(engine_store, "a", "the spring milestone")[0].kind is MemoryKind.NARRATIVE
    # FTS syntax in a question is only words
    assert _search(engine_store, "a", 'pottery" OR NEAR(x* AND') != []
    assert _search(engine_store, "a", "?!") == []


def test_the_index_follows_memory_as_it_is_written(engine_store, tmp_path):
    _two_worlds(engine_store, tmp_path)
    assert _search(engine_store, "a", "kayak") == []
    with engine_store.begin() as conn:
        conn.execute(semantic_memories.insert().values(_memory("m-kayak", "a", "The user bought a kayak.", ["a.s2"])))
    assert [h.ref for h in _search(engine_store, "a", "kayak")] == ["m-kayak"]
    with engine_store.begin() as conn:  # deep sleep deprecates it
        conn.execute(
            update(semantic_memories)
            .where(semantic_memories.c.memory_id == "m-kayak")
            .values(status="deprecated", updated_at=datetime.now(UTC))
        )
    assert _search(engine_store, "a", "kayak") == []
    # unchanged sources: nothing rewritten
    assert refresh(engine_store, "a", CST, ACTIVITY) is None
    with engine_store.connect() as conn:
        assert {r.world_id for r in conn.execute(select(recall_documents.c.world_id))} == {"a"}  # only what was asked


def test_bad_input_is_refused_by_name(engine_store, tmp_path):
    _two_worlds(engine_store, tmp_path)
    for query, k, message in [
        ("", 5, "query: must be a non-empty string"),
        ("x" * 2001, 5, "query: too long: 2001 characters"),
        ("pot\x00tery", 5, r"query: contains a NUL character \(\\u0000\) at position 3"),  # searched as if absent
        ("pot\ud800tery", 5, "query: contains a lone surrogate at position 3"),
        ("pottery", 0, "k: must be an integer from 1 to 100, got 0"),
        ("pottery", 101, "k: must be an integer from 1 to 100, got 101"),
    ]:
        with pytest.raises(SearchError, match=message):
            _search(engine_store, "a", query, k)
    with pytest.raises(SearchError, match="world 'nobody': no such world"):
        _search(engine_store, "nobody", "pottery")
    for bad in ("a\x00b", "bad world!", ""):  # a NUL was the PostgreSQL driver's bare ValueError
        with pytest.raises(SearchError, match=r"world .*(not allowed|must not be empty)"):
            _search(engine_store, bad, "pottery")


def test_the_command_searches_one_world(store, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    _two_worlds(store, tmp_path)
    result = runner.invoke(app, ["search", "a", "marathon", "-k", "3"])
    assert result.exit_code == 0, result.output
    assert "semantic_memory" in result.output and "a3" in result.output and "secret" not in result.output
    result = runner.invoke(app, ["search", "a", "marathon", "--json"])
    import json

    hits = json.loads(result.output)
    assert hits and all(set(h) == {"kind", "ref", "text", "start", "end", "event_ids", "score"} for h in hits)
    spans = [t for h in hits for t in (h["start"], h["end"]) if t]
    assert spans and all(t.endswith("+08:00") for t in spans), spans  # the configured zone, not UTC
    result = runner.invoke(app, ["search", "a", "marathon", "-k", "0"])
    assert result.exit_code == 2 and "k: must be an integer from 1 to 100" in result.output
    # a world is refused as every command refuses it: a bad id names the rule (2), an unknown one 1
    result = runner.invoke(app, ["search", "bad world!", "marathon"])
    assert result.exit_code == 2 and "WORLD 'bad world!': character ' ' at position 3" in result.output
    result = runner.invoke(app, ["search", "nope", "marathon"])
    assert result.exit_code == 1 and "no such world 'nope': nothing has been ingested for it" in result.output


def test_a_rolling_summary_covers_the_entries_the_conversation_domain_numbers(store, tmp_path):
    """Recall numbers a conversation's history entries itself (it reads tables only): the same
    L1..Ln as the rolling summary's own numbering, tool turns and empty lines left out."""
    from memory_pipeline.conversation.summaries import history
    from memory_pipeline.recall.documents import history_ids

    _ingest(
        store,
        tmp_path,
        [
            event("a", "a.c", "user", "first", D1, mid="c1"),
            event("a", "a.c", "tool", '{"ok": true}', D1 + timedelta(minutes=1), mid="c2"),
            event("a", "a.c", "assistant", "second", D1 + timedelta(minutes=2), mid="c3"),
            event("a", "a.c", "user", "third", D1 + timedelta(minutes=2), mid="c0"),  # same time: by id
        ],
    )
    with store.connect() as conn:
        theirs = [e["message_id"] for e in history(conn, ["a.c"])["a.c"]]
        assert history_ids(conn, ["a.c"])["a.c"] == theirs == ["c1", "c0", "c3"]


def test_a_hit_lists_the_events_saying_most_about_the_query_first(engine_store, tmp_path):
    _two_worlds(engine_store, tmp_path)
    d3 = D2 + timedelta(days=3)
    _ingest(
        engine_store,
        tmp_path,
        [
            event("a", "a.s4", "user", "Andrew came over, we talked about football", d3, mid="a5"),
            event(
                "a",
                "a.s4",
                "user",
                "Andrew said his greyhound Bolt loves the beach",
                d3 + timedelta(minutes=1),
                mid="a6",
            ),
            event("a", "a.s4", "user", "Andrew and I cooked dinner", d3 + timedelta(minutes=2), mid="a7"),
        ],
    )
    with engine_store.begin() as conn:
        _person(conn, "a", "Andrew", ("a1", "a5", "a6", "a7"))
    (andrew,) = [h for h in _search(engine_store, "a", "Does Andrew have a greyhound?", 20) if h.ref == "person:andrew"]
    # "andrew" is in three of its four events and weighs little, "greyhound" in one: that one first;
    # the rest busiest day first (a5, a7 on the same day as a6), then the earlier day (a1)
    assert andrew.event_ids == ("a6", "a5", "a7", "a1")
    # asked with another form of the word: compared as the index stems it, the same event first
    (plural,) = [h for h in _search(engine_store, "a", "Andrew's greyhounds?", 20) if h.ref == "person:andrew"]
    assert plural.event_ids == ("a6", "a5", "a7", "a1")
    # the same hit asked about nothing its events tell apart keeps the busiest day first
    (plain,) = [h for h in _search(engine_store, "a", "Andrew", 20) if h.ref == "person:andrew"]
    assert plain.event_ids[-1] == "a1" and set(plain.event_ids[:3]) == {"a5", "a6", "a7"}


def _sqlite(tmp_path, name: str = "memory.sqlite") -> Store:
    lite = Store(f"sqlite:///{tmp_path / name}")
    ensure_schema(lite, domains.version_locations())
    return lite


def test_a_commit_from_another_process_is_seen_and_no_commit_skips_the_check(tmp_path, monkeypatch):
    """On a SQLite file the freshness check runs only when something was committed since the last
    search of the world: here by another process, which this one never told."""
    import subprocess
    import sys

    from memory_pipeline.recall import search as search_module

    lite = _sqlite(tmp_path)
    _two_worlds(lite, tmp_path)
    checks = []
    real = search_module._sources_fp
    monkeypatch.setattr(search_module, "_sources_fp", lambda *a: checks.append(a) or real(*a))
    assert _search(lite, "a", "kayak") == []
    assert _search(lite, "a", "kayak") == []  # once more after the refresh's own write
    checks.clear()
    for _ in range(3):
        assert _search(lite, "a", "pottery")
    assert checks == []  # nothing committed since: no check
    script = (
        "import sys\n"
        "from memory_pipeline.lib.store import Store\n"
        "from memory_pipeline.sleep.tables import semantic_memories\n"
        "from memory_pipeline_tests.integration.test_recall_search import _memory\n"
        "with Store(sys.argv[1]).begin() as conn:\n"
        "    conn.execute(semantic_memories.insert().values(_memory('m-kayak', 'a', 'The user bought a kayak.', ['a.s2'])))\n"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", script, lite.url], check=True, cwd=root)
    assert [h.ref for h in _search(lite, "a", "kayak")] == ["m-kayak"]
    assert checks  # the commit was seen


def test_each_world_has_a_rowid_range_of_its_own(tmp_path):
    from memory_pipeline.recall.search import DOC_SPAN
    from memory_pipeline.recall.tables import recall_index_state

    lite = _sqlite(tmp_path)
    _two_worlds(lite, tmp_path)
    assert _search(lite, "a", "pottery") and _search(lite, "b", "pottery")
    with lite.connect() as conn:
        base = dict(conn.execute(select(recall_index_state.c.world_id, recall_index_state.c.doc_base)).all())
        docs = conn.execute(select(recall_documents.c.world_id, recall_documents.c.doc_id)).all()
    assert base["a"] != base["b"] and abs(base["a"] - base["b"]) >= DOC_SPAN
    assert docs and all(base[w] <= d < base[w] + DOC_SPAN for w, d in docs)
    # a rewrite keeps the range: a new document of world a takes the next id of a's range
    with lite.begin() as conn:
        conn.execute(semantic_memories.insert().values(_memory("m-kayak", "a", "The user bought a kayak.", ["a.s2"])))
    assert [h.ref for h in _search(lite, "a", "kayak")] == ["m-kayak"]
    with lite.connect() as conn:
        ids = dict(conn.execute(select(recall_documents.c.ref, recall_documents.c.doc_id)).all())
    assert base["a"] <= ids["m-kayak"] < base["a"] + DOC_SPAN
    assert ids["m-kayak"] == max(d for w, d in docs if w == "a") + 1


def test_new_worlds_searched_at_once_are_given_distinct_ranges(tmp_path):
    """Six new worlds indexed by six threads at once (each its own connection): a range is never
    given twice, and each world finds its own memory only."""
    import threading

    from memory_pipeline.recall.tables import recall_index_state

    lite = _sqlite(tmp_path)
    names = [f"w{i}" for i in range(6)]
    _ingest(lite, tmp_path, [event(w, f"{w}.s1", "user", f"{w} likes kayaks", D1, mid=f"{w}-1") for w in names])
    with lite.begin() as conn:
        conn.execute(
            semantic_memories.insert(), [_memory(f"m-{w}", w, f"{w} bought a kayak.", [f"{w}.s1"]) for w in names]
        )
    barrier = threading.Barrier(len(names))
    found: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def search(world: str) -> None:
        try:
            barrier.wait(timeout=60)
            found[world] = [h.ref for h in _search(lite, world, "kayak")]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=search, args=(w,)) for w in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert found == {w: [f"m-{w}"] for w in names}
    with lite.connect() as conn:
        bases = [b for (b,) in conn.execute(select(recall_index_state.c.doc_base))]
    assert len(bases) == len(names) and len(set(bases)) == len(names)


def test_documents_indexed_before_the_ranges_are_rebuilt_in_them(tmp_path):
    """Migration 0028 empties the derived documents on SQLite; the next search rebuilds the world's
    documents in its range, the same hits as before."""
    from sqlalchemy import text

    from memory_pipeline.lib.store.migrate import upgrade
    from memory_pipeline.recall.search import DOC_SPAN, fts_table
    from memory_pipeline.recall.tables import recall_index_state

    lite = Store(f"sqlite:///{tmp_path / 'old.sqlite'}")
    upgrade(lite, domains.version_locations(), "0027_lease_process")
    with lite.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO recall_documents (world_id, kind, ref, text, search_text, event_ids, fingerprint,"
                " indexed_at) VALUES ('a', 'semantic_memory', 'm-old-index', 'pottery', 'pottery', '[]', 'x', :now)"
            ),
            {"now": "2026-01-01 00:00:00.000000"},
        )
        conn.execute(
            text(
                "INSERT INTO recall_index_state (world_id, sources_fp, documents, indexed_at)"
                " VALUES ('a', 'x', 1, '2026-01-01 00:00:00.000000')"
            )
        )
    upgrade(lite, domains.version_locations())
    with lite.connect() as conn:
        assert conn.execute(select(recall_documents.c.doc_id)).all() == []
        # the index of every world is gone (0032): each world's own is made by its next search
        assert conn.execute(text("SELECT name FROM sqlite_master WHERE name = 'recall_documents_fts'")).all() == []
    _two_worlds(lite, tmp_path)
    assert {h.ref for h in _search(lite, "a", "pottery")} >= {"o1", "a.s1"}
    with lite.connect() as conn:
        (base,) = conn.execute(select(recall_index_state.c.doc_base).where(recall_index_state.c.world_id == "a")).one()
        ids = [d for (d,) in conn.execute(select(recall_documents.c.doc_id).where(recall_documents.c.world_id == "a"))]
        indexed = [d for (d,) in conn.execute(text(f"SELECT rowid FROM {fts_table(base)}"))]
    assert ids and all(base <= d < base + DOC_SPAN for d in ids)
    assert sorted(indexed) == sorted(ids)  # the world's index holds its documents and no other's


def test_every_page_states_the_same_total_also_past_the_last(engine_store, tmp_path):
    from memory_pipeline.recall.search import search_page

    _two_worlds(engine_store, tmp_path)

    def page(limit: int, offset: int):
        return search_page(engine_store, "a", "pottery marathon", limit, offset, activity_type=ACTIVITY, tz=CST)

    whole, total = page(100, 0)
    assert total == len(whole) >= 5
    walked = [h.ref for o in range(0, total, 2) for h in page(2, o)[0]]
    assert walked == [h.ref for h in whole]
    assert {page(2, o)[1] for o in range(0, total + 4, 2)} == {total}  # past the end too
    assert page(2, total + 2)[0] == []


def test_memory_of_a_time_the_query_names_ranks_first(engine_store, tmp_path):
    _two_worlds(engine_store, tmp_path)  # pottery on 8 May 2023 (a.s1), the marathon on 9 May (a.s2)
    with engine_store.begin() as conn:
        conn.execute(
            semantic_memories.insert().values(
                _memory("m-make", "a", "The user likes to make things: the user made a bowl.", ["a.s1"])
            )
        )
        _person(conn, "a", "Caroline", ("a1", "a3"))

    def memories(query: str) -> list[str]:
        return [h.ref for h in _search(engine_store, "a", query, 20) if h.kind is MemoryKind.SEMANTIC]

    assert memories("What did the user make?") == ["m-make", "m-run"]  # by score alone
    # the named day reaches a day further each side (the asker's zone is not the store's): 10 May
    # holds the marathon of the 9th, not the pottery of the 8th
    assert memories("What did the user make on 10 May, 2023?") == ["m-run", "m-make"]
    assert memories("What did the user make on May 10th, 2023?") == ["m-run", "m-make"]
    assert memories("What did the user make in May 2023?") == ["m-make", "m-run"]  # both of that month
    assert memories("What did the user make on 11 May, 2023?") == ["m-make", "m-run"]  # none of that time
    # the memory server's pages of such a query are the same ranking, page by page, with its total
    query = "What did the user make on 10 May, 2023?"
    whole, total = search_page(engine_store, "a", query, 100, 0, activity_type=ACTIVITY, tz=CST)
    pages = [search_page(engine_store, "a", query, 2, i, activity_type=ACTIVITY, tz=CST) for i in range(0, total, 2)]
    assert [h.ref for hits, _ in pages for h in hits] == [h.ref for h in whole]
    assert {n for _, n in pages} == {total} and total == len(whole) > 2

    def caroline(query: str) -> tuple[str, ...]:
        (hit,) = [h for h in _search(engine_store, "a", query, 20) if h.ref == "person:caroline"]
        return hit.event_ids

    assert caroline("Caroline") == ("a1", "a3")  # one event a day: the earlier day first
    assert caroline("Caroline on 10 May, 2023") == ("a3", "a1")  # the named time's event first
