"""Seed 001 §4 memory_find through each world's index (objects.recall.world_index) on PostgreSQL:
the same answers as scoring every object of the world, a write seen by the next find, and a
world's query never reaching another world's objects."""

from __future__ import annotations

import random
from datetime import timedelta

from sqlalchemy import select

from memory_pipeline.lib.store import leases
from memory_pipeline.lib.store.tables import messages
from memory_pipeline.objects import graph, recall, timeline, worker
from memory_pipeline.objects.logic import JobMode
from memory_pipeline.objects.tables import (
    objects_event_state,
    objects_objects,
    objects_relations,
    objects_worlds,
)
from memory_pipeline_tests.integration.test_objects import add, compact_all, octx_for, sub

WORLDS = ("w1", "w2", "w3")
FIRST = "Ana Bo Cleo Dev Eli Fay Gus Hana Ivo Jade Kai Lena Milo Nora Omar Pia".split()
LAST = "Silva Chen Diaz Ito Khan Lopez Novak Ortiz Park Reyes Tanaka Weber".split()
TOPICS = "garden harvest marathon compost piano sourdough chess harbor lighthouse pottery tomatoes yoga".split()


def claim_in(octx, world, event_id, read=()):
    """A claim on ``event_id`` of ``world`` under the world's lease, as the worker takes one."""
    with octx.store.connect() as conn:
        ev = (
            conn.execute(select(objects_event_state).where(objects_event_state.c.event_id == event_id)).mappings().one()
        )
        text = conn.execute(select(messages.c.content).where(messages.c.message_id == event_id)).scalar()
        rev = conn.execute(select(objects_worlds.c.graph_revision).where(objects_worlds.c.world_id == world)).scalar()
    leases.try_acquire(octx.store, graph.LEASE_ASSET, world, "h-test", timedelta(seconds=360))
    page = graph.EventPage(event_id, len(text), 0, len(text), text, ev["occurred_at"], ev["event_day"])
    return graph.Claim(world, None, JobMode.ORGANIZE, "h-test", rev, set(read), page=page)


def ids(hits):
    return [h["id"] for h in hits]


def test_a_write_is_seen_by_the_next_find(store, ingest):
    """Created, rewritten (a word gone, a word new), and a new object: each seen by the next find."""
    octx = octx_for(store)
    e1, e2 = add(ingest, ["QHY waters the garden", "QHY at the harbor"])
    timeline.intake(octx)
    compact_all(octx)
    worker.enqueue(octx, "w1", "organize")
    c1 = claim_in(octx, "w1", e1)
    graph.commit(octx, c1, sub(c1, objects=[{"id": "person:qhy", "name": "QHY", "body": "Role: gardener"}]))
    assert ids(recall.find(store, "w1", "gardener")) == ["person:qhy"]
    assert recall.find(store, "w1", "lighthouse") == [] and recall.find(store, "w1", "harbor") == []
    c2 = claim_in(octx, "w1", e2, read=["person:qhy"])  # a rewrite alone: as many objects as before
    graph.commit(octx, c2, sub(c2, objects=[{"id": "person:qhy", "name": "QHY", "body": "Role: lighthouse keeper"}]))
    assert ids(recall.find(store, "w1", "lighthouse")) == ["person:qhy"]
    assert recall.find(store, "w1", "gardener") == []
    c3 = claim_in(octx, "w1", e2)
    graph.commit(
        octx, c3, sub(c3, objects=[{"id": "knowledge:harbor", "name": "the harbor", "cues": ["boats at dawn"]}])
    )
    assert ids(recall.find(store, "w1", "harbor")) == ["knowledge:harbor"]
    assert ids(recall.find(store, "w1", "dawn")) == ["knowledge:harbor"]
    for q in ("lighthouse", "gardener", "harbor", "dawn", "qhy"):
        assert recall.find_all(store, "w1", q) == recall.find_all(store, "w1", q, full_scan=True), q


def built_store(store) -> dict[str, dict[str, dict]]:
    """Three worlds of 150 objects each, as the graph write leaves its rows (one revision): people
    with a first-name alias, projects with members, topics and to-dos, cues from the topics, a
    summary and body of topic words; ~5% archived. The worlds share ids on purpose (person:ana-silva
    in each, a summary of its own world), so a leak shows in the answer."""
    rows: dict[str, dict[str, dict]] = {}
    for n, world in enumerate(WORLDS):
        rng = random.Random(7 + n)
        people = [f"{f} {last}" for f in FIRST for last in LAST]
        rng.shuffle(people)
        candidates = (
            [("person", "Ana Silva")]
            + [
                ("project", f"{t.title()} {s}")
                for t, s in zip(rng.sample(TOPICS, 6), ("Plan", "Club") * 3, strict=True)
            ]
            + [("knowledge", f"the {t}") for t in TOPICS]
            + [("person", p) for p in people if p != "Ana Silva"]
        )
        objs = rows.setdefault(world, {})
        for otype, name in candidates:
            if len(objs) == 120:
                break
            oid = f"{otype}:{'-'.join(name.lower().split())}"
            objs[oid] = {
                "world_id": world,
                "object_id": oid,
                "type": otype,
                "name": name,
                "aliases": [name.split()[0]] if otype == "person" else [],
                "summary": f"{world}: " + " ".join(rng.sample(TOPICS, 3)),
                "body": " ".join(rng.sample(TOPICS, 4)) + f" with {rng.choice(FIRST)}",
                "cues": rng.sample(TOPICS, 2),
                "status": "archived" if rng.random() < 0.05 else "active",
                "version": 1,
                "revision": 1,
            }
        for v in ("planned", "fixed", "started"):
            for t in TOPICS:
                oid = f"todo:{v}-{t}"
                objs[oid] = objs["person:ana-silva"] | {
                    "object_id": oid,
                    "type": "todo",
                    "name": f"{v} {t} with {rng.choice(FIRST)}",
                    "aliases": [],
                    "summary": f"{world}: {v} the {t}",
                }
        objs["person:ana-silva"]["status"] = "active"  # the answer to "Ana Silva" in every world
        projects = [o for o in objs if o.startswith("project:")]
        members = [
            {"world_id": world, "src": o, "label": "member_of", "dst": rng.choice(projects), "revision": 1}
            for o in objs
            if o.startswith("person:") and rng.random() < 0.3
        ]
        with store.begin() as conn:
            conn.execute(objects_worlds.insert().values(world_id=world, graph_revision=1))
            conn.execute(objects_objects.insert(), list(objs.values()))
            conn.execute(objects_relations.insert(), members)
    return rows


def queries(rows, rng) -> list[str]:
    """Queries made from the objects' own text, as an agent asks: full names, first names, pieces
    of names, cues, summary words, ids, a name with words around it, mixed case, several words, and
    words no object holds."""
    out = []
    for objs in rows.values():
        for o in rng.sample(list(objs.values()), 25):
            name, word = o["name"], rng.choice(o["summary"].split()[1:])
            a = rng.randrange(len(name))
            out += [
                name,
                name.split()[0],
                name[a : a + rng.randint(2, 6)],
                rng.choice(o["cues"]),
                word,
                f"ask {name.upper()} about the {rng.choice(TOPICS)}",
            ]
            if rng.random() < 0.3:
                out += [o["object_id"], f"{word} {rng.choice(TOPICS)} zeppelin", "zeppelin"]
    return out


def test_the_index_answers_as_the_full_scan_and_never_from_another_world(store):
    rows = built_store(store)
    rng = random.Random(19)
    asked = queries(rows, rng)
    assert len(asked) >= 400
    matched = 0
    for q in asked:
        world = rng.choice(WORLDS)
        hits = recall.find_all(store, world, q)
        assert hits == recall.find_all(store, world, q, full_scan=True), (world, q)
        assert recall.find_page(store, world, q, 3, 5) == (hits[3:8], len(hits))
        matched += bool(hits)
        # Private: every hit is this world's object as this world holds it (ids are shared).
        for h in hits:
            mine = rows[world][h["id"]]
            assert (h["summary"], h["name"]) == (mine["summary"], mine["name"]), (world, q, h["id"])
    assert matched > len(asked) * 0.8  # the queries reach objects: the comparison is not of empty answers


def test_a_query_never_reaches_another_worlds_objects(store):
    """Each world's own words (its summaries start with the world's id) and names only it holds
    are found in that world alone; the worlds' indexes are built side by side in one process."""
    rows = built_store(store)
    for world in WORLDS:
        assert {h["id"] for h in recall.find_all(store, world, world)} == {
            o for o, r in rows[world].items() if r["summary"].startswith(f"{world}:")
        }
        for other in WORLDS:
            if other == world:
                continue
            assert recall.find_all(store, world, other) == []
            only_other = [r["name"] for o, r in rows[other].items() if o not in rows[world]]
            for name in only_other[:20]:
                assert all(h["id"] in rows[world] for h in recall.find_all(store, world, name)), (world, name)
            hits = recall.find_all(store, world, "Ana Silva")
            assert (
                hits[0]["id"] == "person:ana-silva" and hits[0]["summary"] == rows[world]["person:ana-silva"]["summary"]
            )


def test_on_a_sqlite_file_nothing_is_read_again_until_a_commit(tmp_path, monkeypatch):
    """On a SQLite file the world's signature and its project members are read again only after a
    commit: a member added alone (no object row changes) is seen by the next find."""
    from memory_pipeline import domains
    from memory_pipeline.lib.store import Store
    from memory_pipeline.lib.store.migrate import ensure_schema

    lite = Store(f"sqlite:///{tmp_path / 'memory.sqlite'}")
    ensure_schema(lite, domains.version_locations())
    base = {"world_id": "w1", "aliases": [], "summary": "", "cues": [], "version": 1, "revision": 1, "status": "active"}
    with lite.begin() as conn:
        conn.execute(
            objects_objects.insert(),
            [
                base | {"object_id": "project:kiln", "type": "project", "name": "Kiln build", "body": "a kiln"},
                base | {"object_id": "person:ana", "type": "person", "name": "Ana", "body": "potter"},
                base | {"object_id": "person:bo", "type": "person", "name": "Bo", "body": "welder"},
            ],
        )
        conn.execute(
            objects_relations.insert().values(
                world_id="w1", src="person:ana", label="member_of", dst="project:kiln", revision=1
            )
        )
    reads = []
    real_execute = type(lite.engine.connect()).execute

    def counting(self, statement, *args, **kwargs):
        reads.append(statement)
        return real_execute(self, statement, *args, **kwargs)

    assert ids(recall.find(lite, "w1", "kiln")) == ["project:kiln", "person:ana"]
    monkeypatch.setattr(type(lite.engine.connect()), "execute", counting)
    assert ids(recall.find(lite, "w1", "kiln")) == ["project:kiln", "person:ana"]
    assert reads == []  # nothing committed since: no statement at all
    monkeypatch.undo()
    with lite.begin() as conn:
        conn.execute(
            objects_relations.insert().values(
                world_id="w1", src="person:bo", label="member_of", dst="project:kiln", revision=2
            )
        )
    assert ids(recall.find(lite, "w1", "kiln")) == ["project:kiln", "person:ana", "person:bo"]
