"""Seed 001 §4 memory_find over one world's index (objects.recall.WorldIndex, no services): the
index leaves out no object that the full scan of the world scores above 0, and ranks the same."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipeline.objects import recall

# A small alphabet, so that labels and queries overlap inside words and across word boundaries, with
# NUL (the index joins its labels with it).
ALPHABET = "abcé Z-\n\x00"
words = st.text(alphabet=ALPHABET, min_size=0, max_size=8)


def row(i: int, name: str, aliases: list[str], cues: list[str], text: str, archived: bool) -> dict:
    return {
        "object_id": f"{('person', 'project', 'knowledge')[i % 3]}:o{i}",
        "type": ("person", "project", "knowledge")[i % 3],
        "name": name,
        "aliases": aliases,
        "summary": text,
        "body": text[::-1],
        "cues": cues,
        "status": "archived" if archived else "active",
        "version": 1,
        "updated_at": datetime(2026, 1, 1, tzinfo=UTC),
    }


objects = st.lists(
    st.tuples(words, st.lists(words, max_size=2), st.lists(words, max_size=2), words, st.booleans()), max_size=25
)


def index_of(objs) -> recall.WorldIndex:
    return recall.WorldIndex([recall._prepare(row(i, *o)) for i, o in enumerate(objs)])


def query_from(data, objs) -> str:
    """A query as an agent types one: a piece of a label or of the text, a label with more around
    it, an id, or anything; stripped and lowercased as find_all does."""
    labels = [x for o in objs for x in (o[0], *o[1], *o[2], o[3])] or [""]
    label = data.draw(st.sampled_from(labels))
    a = data.draw(st.integers(0, len(label)))
    b = data.draw(st.integers(a, len(label)))
    q = data.draw(
        st.sampled_from([label[a:b], data.draw(words) + label + data.draw(words), f"person:o{len(objs) // 2}"]) | words
    )
    return q.strip().lower()


def scored_by_scan(index: recall.WorldIndex, q: str, terms: set[str]) -> set[int]:
    return {i for i, p in enumerate(index.objects) if recall._score(p, q, terms) > 0}


@settings(max_examples=600, deadline=None)
@given(objs=objects, data=st.data())
def test_no_object_the_full_scan_scores_is_left_out_by_the_index(objs, data):
    index = index_of(objs)
    q = query_from(data, objs)
    if not q:  # find_all refuses an empty query
        return
    terms = recall._terms(q)
    assert scored_by_scan(index, q, terms) <= index.candidates(q, terms)
    assert index.ranked(q, terms) == index.ranked(q, terms, full_scan=True)


def test_each_way_an_object_matches_reaches_it_through_the_index():
    """Every clause of the score, each alone: the id, a label equal to the query, a label inside the
    query, the query inside a name, an alias, a cue, a word of the summary or body."""
    index = index_of(
        [
            ("Ana Silva", ["Nana"], ["waters the tomatoes"], "likes marathons", False),
            ("Greenhouse", [], ["glass"], "the north plot", True),
            ("Bob", [], [], "", False),
        ]
    )
    for q, expected in [
        ("person:o0", {0}),
        ("ana silva", {0}),
        ("ask ana silva today", {0}),
        ("silv", {0}),
        ("nan", {0}),
        ("tomato", {0}),
        ("marathons", {0}),
        ("house", {1}),
        ("glass of water", {1}),
        ("north", {1}),
        ("bob", {2}),
        ("zeppelin", set()),
    ]:
        terms = recall._terms(q)
        assert scored_by_scan(index, q, terms) == expected, q
        assert expected <= index.candidates(q, terms), q
