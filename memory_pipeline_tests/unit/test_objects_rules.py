"""Pure rules of seed 001 (object memory), with the seed's numbers."""

from __future__ import annotations

import math
import uuid
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipeline.lib.llm import offline
from memory_pipeline.lib.settings import ConfigError
from memory_pipeline.objects import logic, offline_rules, prompts
from memory_pipeline.objects.config import ObjectsConfig
from memory_pipeline.objects.config import load as load_config
from memory_pipeline.objects.logic import (
    JobOrigin,
    JobView,
    Outcome,
    SubmissionError,
    check_graph_write,
    check_outcome,
)
from memory_pipeline_tests.conftest import CST, cst


def base(**kw):
    return {"token": "tok-00001", "graph_revision": 3, "event_id": "e1", "outcome": "linked", "page_end": 10, **kw}


def obj(oid="person:qhy", **kw):
    return {"id": oid, "name": "QHY", **kw}


@pytest.mark.parametrize(
    "key", ["garden\n", "gar\nden", "a\x7f", "a\x85", "\ud800", "gar\udcffden", "a b", "a/b", "k" * 97]
)
def test_an_object_key_with_a_control_character_or_lone_surrogate_is_refused(key):
    """A trailing newline made a near-duplicate object; a lone surrogate reached the store (an
    internal error) and the answer (which could not be serialized)."""
    with pytest.raises(SubmissionError) as refused:
        logic.parse_object_id(f"knowledge:{key}", "id")
    assert "must be 1-96 characters without spaces, control characters" in str(refused.value)
    assert logic.parse_object_id("knowledge:番茄-garden.v2", "id")[1] == "番茄-garden.v2"


def test_the_seed_numbers():
    assert (logic.EVENT_MAX_CHARS, logic.SLICE_MAX_CHARS, logic.COMPACT_BATCH_MAX) == (32_000, 2_000, 8)
    assert (logic.PAGE_MAX_CHARS, logic.PAGE_MIN_CHARS) == (8_000, 256)
    assert (logic.BUDGET_DEFAULT_BYTES, logic.BUDGET_MIN_BYTES, logic.BUDGET_MAX_BYTES) == (96_000, 24_000, 200_000)
    assert (logic.SUMMARY_MAX_CHARS, logic.BODY_MAX_CHARS, logic.PROGRESS_MAX_CHARS, logic.REASON_MAX_CHARS) == (
        400,
        16_000,
        2_000,
        1_000,
    )
    assert (logic.MAX_OBJECTS_PER_WRITE, logic.MAX_RELATIONS_PER_WRITE, logic.MAX_CORE_PER_WRITE) == (32, 64, 3)
    assert logic.lease_seconds(logic.WORKER_TIMEOUT_DEFAULT_SECONDS) == 360
    assert ObjectsConfig().lease_seconds == 360
    assert (logic.DEEP_BATCH_MAX, logic.MAX_CONSECUTIVE_FAILURES, logic.AUTO_SUPPRESS) == (4, 5, timedelta(hours=1))
    assert (logic.MAX_MODEL_ROUNDS, logic.MAX_FIELD_CORRECTIONS) == (16, 3)
    assert (logic.STATUS_EARLIEST, logic.PROJECTION_PER_PASS, logic.PROJECTION_PAGE) == (20, 10, 50)
    assert logic.HOT_VIEW_MAX_BYTES == 350_000 and logic.PROPOSAL_MAX_BYTES == 900_000


def test_slices_are_at_most_2000_and_cover_the_event():
    text = "x" * 4_500
    parts = logic.slices(text)
    assert [len(p) for p in parts] == [2000, 2000, 500] and "".join(parts) == text


def test_threshold_ends_below_60_percent():
    assert not logic.threshold_done(600, 1000) and logic.threshold_done(599, 1000)


def test_head_levels_and_shrinking():
    assert logic.head_level([0, 0, 1]) == 2 and logic.head_level([0]) == 1
    assert [logic.shrink(8), logic.shrink(4), logic.shrink(2), logic.shrink(1)] == [4, 2, 1, 1]


def test_page_size_shrinks_on_failure_and_budget_never_below_256():
    assert logic.page_chars(96_000, 0) == 8_000
    assert logic.page_chars(96_000, 1) == 4_000
    assert logic.page_chars(96_000, 10) == 256
    assert logic.page_chars(10_000, 0) == 2_500  # 4 bytes per character at most
    assert logic.page_chars(100, 0) == 256


def test_transfer_budget_range():
    assert logic.check_budget(24_000) == 24_000 and logic.check_budget(200_000) == 200_000
    for bad in (23_999, 200_001):
        with pytest.raises(SubmissionError, match="transfer_budget_bytes"):
            logic.check_budget(bad)


def test_compact_submission_refuses_object_writes_bad_coverage_and_longer_results():
    ids = ["a#0", "b#0"]
    assert logic.check_compact_submission({"summary": "short", "covers": ids}, ids, 100) == "short"
    with pytest.raises(SubmissionError, match="object writes are refused"):
        logic.check_compact_submission({"summary": "s", "covers": ids, "objects": [obj()]}, ids, 100)
    with pytest.raises(SubmissionError, match="covers"):
        logic.check_compact_submission({"summary": "s", "covers": ["a#0"]}, ids, 100)
    with pytest.raises(SubmissionError, match="not shorter"):
        logic.check_compact_submission({"summary": "x" * 100, "covers": ids}, ids, 100)


@pytest.mark.parametrize("chars", [1, 2, 16])
def test_nodes_too_short_to_shorten_may_keep_their_length_never_grow(chars):
    ids = ["a#0"]
    assert logic.check_compact_submission({"summary": "好" * chars, "covers": ids}, ids, chars) == "好" * chars
    with pytest.raises(SubmissionError, match="not shorter than its nodes"):
        logic.check_compact_submission({"summary": "好" * (chars + 1), "covers": ids}, ids, chars)


def test_nodes_over_16_characters_must_be_summarized_shorter():
    ids = ["a#0"]
    with pytest.raises(SubmissionError, match="not shorter than its nodes: 17 >= 17"):
        logic.check_compact_submission({"summary": "x" * 17, "covers": ids}, ids, 17)


@pytest.mark.parametrize(
    ("field", "raw", "limit"),
    [("summary", "s" * 401, 400), ("body", "b" * 16_001, 16_000)],
)
def test_object_field_limits_refused_with_field_error_never_cut(field, raw, limit):
    assert check_graph_write(base(objects=[obj(**{field: "s" * limit})])).objects[0]
    with pytest.raises(SubmissionError) as e:
        check_graph_write(base(objects=[obj(**{field: raw})]))
    assert e.value.field == f"objects[0].{field}" and f"limit {limit:,}" in e.value.problem


def test_progress_and_reason_limits():
    assert check_graph_write(base(progress="p" * 2_000, reason="r" * 1_000))
    with pytest.raises(SubmissionError, match="progress"):
        check_graph_write(base(progress="p" * 2_001))
    with pytest.raises(SubmissionError, match="reason"):
        check_graph_write(base(reason="r" * 1_001))


def test_per_write_limits_32_objects_64_relations_3_core():
    objs = [obj(f"knowledge:k{i}") for i in range(32)]
    rels = [{"src": f"knowledge:k{i}", "label": "related_to", "dst": "knowledge:k0"} for i in range(1, 33)] * 2
    assert len(check_graph_write(base(objects=objs, relations=rels[:64])).relations) == 64
    with pytest.raises(SubmissionError, match="at most 32 objects"):
        check_graph_write(base(objects=[*objs, obj("knowledge:k99")]))
    with pytest.raises(SubmissionError, match="at most 64 relations"):
        check_graph_write(base(relations=[*rels[:64], rels[0]]))
    core = [{"name": n, "content": "x"} for n in logic.CORE_NAMES]
    assert len(check_graph_write(base(core=core)).core) == 3
    with pytest.raises(SubmissionError, match="at most 3 core"):
        check_graph_write(base(core=[*core, core[0]]))


def test_types_labels_and_member_of_points_to_a_project():
    for t in ("person", "task", "todo", "schedule", "knowledge", "project"):
        assert check_graph_write(base(objects=[obj(f"{t}:x")])).objects[0].type == t
    with pytest.raises(SubmissionError, match="unknown type"):
        check_graph_write(base(objects=[obj("pet:rex")]))
    for label in ("member_of", "related_to", "assigned_to", "depends_on", "about", "supersedes", "knows"):
        dst = "project:p" if label == "member_of" else "person:b"
        assert check_graph_write(base(relations=[{"src": "person:a", "label": label, "dst": dst}])).relations
    with pytest.raises(SubmissionError, match="not a relation label") as e:
        check_graph_write(base(relations=[{"src": "person:a", "label": "works closely with", "dst": "person:b"}]))
    assert e.value.field == "relations[0].label"
    with pytest.raises(SubmissionError, match="member_of points to a project"):
        check_graph_write(base(relations=[{"src": "person:a", "label": "member_of", "dst": "person:b"}]))


@pytest.mark.parametrize(
    "secret",
    [
        "sk-abcdefghijklmnopqrstuvwx",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "AKIAABCDEFGHIJKLMNOP",
        "password: hunter22",
        "-----BEGIN RSA PRIVATE KEY-----",
        "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9",
    ],
)
def test_credential_refuses_secret_values(secret):
    ok = {
        "id": "credential:github",
        "name": "GitHub deploy key",
        "purpose": "deploys the site",
        "reference": "1Password vault Ops, item 'GitHub deploy'",
    }
    assert check_graph_write(base(objects=[ok])).objects[0].reference.startswith("1Password")
    with pytest.raises(SubmissionError, match="looks like a secret") as e:
        check_graph_write(base(objects=[{**ok, "reference": secret}]))
    assert e.value.field == "objects[0].reference"
    with pytest.raises(SubmissionError, match="purpose"):
        check_graph_write(base(objects=[{"id": "credential:x", "name": "x", "reference": "vault"}]))


def test_outcome_rules():
    def w(**kw):
        return check_graph_write(base(**kw))

    page = dict(page_start=0, page_stop=8_000, event_chars=20_000)
    check_outcome(w(outcome="continue", page_end=8_000, progress="p1"), **page, changed=False, had_target=False)
    with pytest.raises(SubmissionError, match="skipped unread page"):
        check_outcome(w(outcome="continue", page_end=9_000, progress="p"), **page, changed=False, had_target=False)
    with pytest.raises(SubmissionError, match="whole event read"):
        check_outcome(w(outcome="linked", page_end=8_000, attach=["person:a"]), **page, changed=True, had_target=False)
    last = dict(page_start=16_000, page_stop=20_000, event_chars=20_000)
    with pytest.raises(SubmissionError, match="no idle continue"):
        check_outcome(w(outcome="continue", page_end=20_000, progress="p"), **last, changed=False, had_target=False)
    check_outcome(w(outcome="continue", page_end=20_000, progress="p"), **last, changed=True, had_target=False)
    with pytest.raises(SubmissionError, match="at least one durable"):
        check_outcome(w(outcome="linked", page_end=20_000), **last, changed=False, had_target=False)
    check_outcome(w(outcome="linked", page_end=20_000), **last, changed=False, had_target=True)  # attach only
    with pytest.raises(SubmissionError, match="reason"):
        check_outcome(w(outcome="archive_only", page_end=20_000), **last, changed=False, had_target=False)
    check_outcome(
        w(outcome="archive_only", page_end=20_000, reason="chit-chat"), **last, changed=False, had_target=False
    )
    with pytest.raises(SubmissionError, match="cannot be without long-term value"):
        check_outcome(w(outcome="archive_only", page_end=20_000, reason="x"), **last, changed=False, had_target=True)


def test_rotation_least_recent_claim_and_explicit_first_among_never_claimed():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    jobs = [
        JobView(1, JobOrigin.THRESHOLD, t0, None),
        JobView(2, JobOrigin.EXPLICIT, t0 + timedelta(minutes=1), None),
        JobView(3, JobOrigin.NIGHTLY, t0, t0 + timedelta(minutes=5)),
        JobView(4, JobOrigin.THRESHOLD, t0, t0 + timedelta(minutes=2)),
        JobView(5, JobOrigin.HOURLY, t0, None, not_before=t0 + timedelta(hours=1)),
    ]
    assert [j.job_id for j in logic.rotation_order(jobs, t0 + timedelta(minutes=10))] == [2, 1, 4, 3]


def test_an_explicit_organize_or_deep_waits_for_an_earlier_explicit_compact():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    compact = JobView(1, JobOrigin.EXPLICIT, t0, t0, mode=logic.JobMode.COMPACT)
    organize = JobView(2, JobOrigin.EXPLICIT, t0, None, mode=logic.JobMode.ORGANIZE)
    deep = JobView(3, JobOrigin.EXPLICIT, t0, None, mode=logic.JobMode.DEEP)
    hourly = JobView(4, JobOrigin.HOURLY, t0, None, mode=logic.JobMode.ORGANIZE)
    later_compact = JobView(5, JobOrigin.EXPLICIT, t0, None, mode=logic.JobMode.COMPACT)
    jobs = [compact, organize, deep, hourly, later_compact]
    assert [j.job_id for j in logic.rotation_order(jobs, t0)] == [5, 4, 1]
    # once the compact is done, the requests go (explicit never-claimed first, by age)
    assert [j.job_id for j in logic.rotation_order([organize, deep, hourly], t0)] == [2, 3, 4]
    # an organize requested before a compact does not wait for it
    assert not logic.waits_for_compact(organize, [organize, later_compact])


def test_deep_due_at_0250_quiet_once_per_local_date_and_catch_up_today_only():
    quiet = cst(2026, 1, 15, 1, 0)
    assert not logic.deep_due(cst(2026, 1, 15, 2, 49), date(2026, 1, 14), quiet)
    assert logic.deep_due(cst(2026, 1, 15, 2, 50), date(2026, 1, 14), quiet)
    assert not logic.deep_due(cst(2026, 1, 15, 2, 50), date(2026, 1, 15), quiet)  # once per date
    assert not logic.deep_due(cst(2026, 1, 15, 2, 53), None, cst(2026, 1, 15, 2, 50))  # not quiet for 5 min
    assert logic.deep_due(cst(2026, 1, 15, 2, 55), None, cst(2026, 1, 15, 2, 50))
    # started at 14:00 after days of downtime: today's review is caught up, once
    assert logic.deep_due(cst(2026, 1, 15, 14, 0), date(2026, 1, 10), quiet)


def test_day_status_complete_only_when_all_final():
    assert logic.day_status({"linked": 3, "archive_only": 1}, open_day=False) == "complete"
    assert logic.day_status({"linked": 3, "blocked": 1}, open_day=False) == "partial"
    assert logic.day_status({"linked": 3, "pending": 1}, open_day=False) == "partial"
    assert logic.day_status({"linked": 3, "blocked": 1}, open_day=True) == "partial"
    assert logic.day_status({"linked": 3}, open_day=True) == "open"


def test_projection_paths_are_stable_hashes_per_type_and_pages_hold_50():
    p = logic.projection_path("person:qhy")
    assert p.startswith("person/") and p.endswith(".md") and p == logic.projection_path("person:qhy")
    d = logic.Dossier(
        "person:qhy", "person", "QHY", "active", "s", "b", sources=[(f"e{i}", "2026-01-01") for i in range(120)]
    )
    assert logic.projection_pages(d) == 3
    first = logic.render_markdown(d, 0)
    assert first.count("`e") == 50 and "More relations and sources" in first
    assert logic.render_markdown(d, 2).count("`e") == 20
    full = logic.Dossier(
        "person:qhy",
        "person",
        "QHY",
        "active",
        "gardener",
        "Role: gardener",
        cues=["who waters the tomatoes"],
        relations=[("person:qhy", "member_of", "project:garden")],
        sources=[("e1", "2026-01-10T09:00:00+08:00")],
    )
    text = logic.render_markdown(full)
    for part in ("Role: gardener", "- who waters the tomatoes", "person:qhy **member_of** project:garden"):
        assert part in text
    assert "- 2026-01-10T09:00:00+08:00 `e1`" in text  # the attachment's time and id


def test_config_is_strict(tmp_path):
    f = tmp_path / "memory.yaml"
    f.write_text("memory:\n  objects:\n    transfer_budget_bytes: 23000\n")
    with pytest.raises(ConfigError, match=r"memory.objects.transfer_budget_bytes: must be within 24,000-200,000"):
        load_config(f)
    f.write_text("memory:\n  objects:\n    compact_threshold_tokens: 'many'\n")
    with pytest.raises(ConfigError, match="memory.objects.compact_threshold_tokens: expected int"):
        load_config(f)
    f.write_text("memory:\n  objects:\n    nope: 1\n")
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(f)
    f.write_text("memory:\n  objects:\n    worker_timeout_seconds: 100\n")
    assert load_config(f).lease_seconds == 160


def test_offline_rules_are_deterministic_and_follow_o1_to_o4():
    kw = dict(token="t-0000001", graph_revision=1, event_id="e", page_end=10, event_chars=10)
    _, calls = offline_rules.organize(
        page_text="the garden", read_objects=[{"id": "knowledge:garden", "name": "garden"}], **kw
    )
    assert calls[0]["arguments"]["outcome"] == "linked" and calls[0]["arguments"]["attach"] == ["knowledge:garden"]
    _, calls = offline_rules.organize(page_text="tomatoes tomatoes", read_objects=[], **kw)
    assert calls[0]["arguments"]["objects"][0]["id"] == "knowledge:tomatoes"
    # O2 and O3 in one answer: the garden is linked, the words rarer than everyday vocabulary that
    # are not yet objects become objects, the person addressed by name a person; everyday words
    # ("then", "and") never do.
    text = "Hey Mel! We walked the garden, then compost, tomatoes, zucchini and seedlings."
    _, calls = offline_rules.organize(page_text=text, read_objects=[{"id": "knowledge:garden", "name": "garden"}], **kw)
    args = calls[0]["arguments"]
    made = {o["id"]: o for o in args["objects"]}
    assert made["person:mel"] == {"id": "person:mel", "name": "Mel", "summary": offline_rules.PERSON_SUMMARY}
    assert set(made) == {f"knowledge:{w}" for w in ("walked", "compost", "tomatoes", "zucchini", "seedlings")} | {
        "person:mel"
    }
    assert args["attach"] == sorted(["knowledge:garden", *made]) and args["outcome"] == "linked"
    assert args["relations"] == [{"src": o, "label": "member_of", "dst": "project:daily"} for o in made]
    assert [k for k, _ in offline.subject_terms("then the and was with")] == []
    # at most NEW_OBJECTS_PER_PAGE, the rarest first
    many = "Compost, zucchini, seedlings, trellis, mulch, aphids, ladybugs, kale, chard, okra and walked."
    _, calls = offline_rules.organize(page_text=many, read_objects=[], **kw)
    made = [o["name"] for o in calls[0]["arguments"]["objects"]]
    rarest = sorted(made + ["walked"], key=offline.zipf)
    assert len(made) == offline_rules.NEW_OBJECTS_PER_PAGE == 8 and "walked" not in made and rarest[-1] == "walked"
    # Chinese: words found by the language's word list, not by character pairs
    _, calls = offline_rules.organize(page_text="我们今天去了博物馆看恐龙化石", read_objects=[], **kw)
    assert {o["name"] for o in calls[0]["arguments"]["objects"]} == {"博物馆", "恐龙", "化石"}
    _, calls = offline_rules.organize(page_text="{}", read_objects=[], **kw)
    assert calls[0]["arguments"]["outcome"] == "archive_only"
    _, calls = offline_rules.organize(page_text="x", read_objects=[], **{**kw, "event_chars": 20})
    assert calls[0]["arguments"]["outcome"] == "continue"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "token",
                "graph_revision",
                "event_id",
                "outcome",
                "page_end",
                "progress",
                "reason",
                "objects",
                "relations",
                "attach",
                "core",
                "reviewed",
                "evidence",
                "extra",
            ]
        ),
        json_values,
        max_size=8,
    )
    | json_values
)
def test_arbitrary_submissions_are_accepted_or_refused_naming_a_field(raw):
    try:
        check_graph_write(raw)
    except SubmissionError as exc:
        assert exc.field and exc.problem


def test_outcome_enum_values():
    assert [str(o) for o in Outcome] == ["continue", "linked", "archive_only"]
    assert cst(2026, 1, 1).tzinfo is CST


def test_a_proposal_of_900000_bytes_is_refused():
    big = [
        obj(f"knowledge:k{i}", body="b" * 16_000, aliases=[f"{i}" + "a" * 190] * 32, cues=[f"{i}" + "c" * 190] * 32)
        for i in range(32)
    ]
    with pytest.raises(SubmissionError, match="must be under 900,000") as e:
        check_graph_write(base(objects=big))
    assert e.value.field == "submission"
    assert check_graph_write(base(objects=big[:20]))  # 20 such objects fit


def test_the_proposal_limit_applies_to_the_size_as_transferred():
    small = base(objects=[obj()])
    with pytest.raises(SubmissionError, match=r"proposal is 900,000 bytes \(must be under 900,000\)"):
        check_graph_write(small, size_bytes=900_000)
    assert check_graph_write(small, size_bytes=899_999).objects[0].object_id == "person:qhy"
    # the arguments string as a provider sent it: \u escapes count, six bytes a character
    call = {"id": "c1", "name": "submit_graph", "arguments": {"body": "园"}, "raw_arguments": '{"body": "\\u56ed"}'}
    (parsed,) = prompts.parse_tool_calls("", [call])
    assert (parsed.call_id, parsed.name, parsed.size) == ("c1", "submit_graph", 18)  # not 15 re-encoded
    (offline,) = prompts.parse_tool_calls("", [{"id": "o", "name": "submit_graph", "arguments": {"body": "园"}}])
    assert offline.size == len('{"body": "园"}'.encode())  # no wire: its JSON as UTF-8


def test_every_tool_call_of_an_answer_is_parsed_in_order():
    calls = [{"id": f"c{i}", "name": n, "arguments": {}} for i, n in enumerate(["memory_read", "submit_graph"])]
    assert [(c.call_id, c.name) for c in prompts.parse_tool_calls("", calls)] == [
        ("c0", "memory_read"),
        ("c1", "submit_graph"),
    ]
    (text,) = prompts.parse_tool_calls('{"tool": "memory_find", "arguments": {"query": "x"}}', [])
    assert (text.call_id, text.name, text.arguments) == (None, "memory_find", {"query": "x"})
    assert prompts.parse_tool_calls("I think the garden matters.", []) == []
    (fenced,) = prompts.parse_tool_calls('```json\n{"tool": "memory_find", "arguments": {"query": "x"}}\n```', [])
    assert (fenced.name, fenced.arguments) == ("memory_find", {"query": "x"})


def test_a_read_result_is_cut_to_the_items_that_fit_or_refused():
    items = [{"event_id": f"e{i}", "text": "x" * 1_000} for i in range(20)]
    result = {"object_id": "knowledge:k", "items": items, "next_offset": 20}
    whole, size = logic.fit_result(result, 96_000, 96_000)
    assert whole == result and size == logic.json_bytes(result)
    cut, size = logic.fit_result(result, 5_500, 96_000, offset=20)
    assert len(cut["items"]) == 5 and cut["next_offset"] == 25 and size <= 5_500
    assert (
        cut["truncated"] == "the first 5 of 20 items: 5,500 bytes were left of this batch's transfer budget of 96,000"
    )
    refused, size = logic.fit_result(result, 500, 96_000)
    assert (
        set(refused) == {"refused"}
        and "500 bytes are left of this batch's transfer budget of 96,000" in refused["refused"]
    )
    dossier, _ = logic.fit_result({"id": "person:a", "body": "y" * 2_000}, 1_000, 96_000)
    assert set(dossier) == {"refused"}  # a dossier is sent whole or not at all


def test_prompts_carry_the_dossier_rules_for_every_type():
    assert set(prompts.SUGGESTED_BODIES) == {str(t) for t in logic.ObjectType}
    for otype, body in prompts.SUGGESTED_BODIES.items():
        assert f"{otype}: {body}" in prompts.ORGANIZE_SYSTEM
    for rule in ("no quotes or tool logs in the body", "written as unknown, never guessed", "never a filter"):
        assert rule in prompts.ORGANIZE_SYSTEM
    _, calls = offline_rules.organize(
        token=f"t-{uuid.uuid4().hex}",
        graph_revision=1,
        event_id="e",
        page_text="tomatoes tomatoes",
        page_end=17,
        event_chars=17,
        read_objects=[],
    )
    (written,) = calls[0]["arguments"]["objects"]
    # Never guessed: the offline model writes no body; a reader's dossier shows it as unknown.
    assert written == {"id": "knowledge:tomatoes", "name": "tomatoes"}
    page = logic.render_markdown(logic.Dossier("knowledge:tomatoes", "knowledge", "tomatoes", "candidate", "", ""))
    assert "## Summary\n\n(unknown)\n\n## Body\n\n(unknown)" in page


def test_an_oversized_event_is_never_counted_complete():
    assert logic.day_status({"linked": 3, "oversized": 1}, open_day=False) == "partial"
    assert logic.day_status({"oversized": 1}, open_day=False) == "partial"
    assert logic.day_status({"linked": 3, "archive_only": 2}, open_day=False) == "complete"


def _tree(events: int) -> tuple[list[int], list[list[int]]]:
    """Run compact_pick over ``events`` one-slice events, merging as the worker does: (the levels
    left in the timeline, the levels of each batch)."""
    timeline = [0] * events  # levels in timeline order
    batches = []
    while (pick := logic.compact_pick(Counter(timeline), logic.COMPACT_BATCH_MAX, whole_range=True)) is not None:
        level, count = pick
        first = timeline.index(level)
        batches.append(timeline[first : first + count])
        timeline[first : first + count] = [level + 1]
    return timeline, batches


@pytest.mark.parametrize("events", [1, 7, 8, 9, 60, 64, 65, 500, 4_096])
def test_compaction_builds_a_tree_of_fan_out_8_not_a_chain(events):
    left, batches = _tree(events)
    top = max(left)
    # depth grows with log8 of the slices: between floor(log8 n) and ceil(log8 n)
    assert math.floor(math.log(events, 8) + 1e-9) <= top <= max(1, math.ceil(math.log(events, 8) - 1e-9))
    assert all(len(b) <= 8 and len(set(b)) == 1 for b in batches)  # one level per batch, at most 8 nodes
    assert left == sorted(left, reverse=True) and max(Counter(left).values()) < 8  # older heads higher; < 8 a level


def test_a_threshold_job_merges_the_lowest_level_with_two_nodes():
    assert logic.compact_pick({0: 3, 1: 5}, 8, whole_range=False) == (0, 3)
    assert logic.compact_pick({0: 1, 1: 5}, 8, whole_range=False) == (1, 5)
    assert logic.compact_pick({0: 1, 1: 1}, 8, whole_range=False) is None
    assert logic.compact_pick({0: 1, 1: 1}, 8, whole_range=True) == (0, 1)  # explicit: every raw slice
    assert logic.compact_pick({0: 20, 1: 9}, 4, whole_range=True) == (0, 4)  # shrunk after a failure
    assert logic.compact_pick({1: 5, 2: 7}, 8, whole_range=True) is None  # no raw left, no full group


@pytest.mark.parametrize(
    "field,value",
    [
        ("body", "API access: sk-abcdefghijklmnopqrstuvwx"),
        ("summary", "deploys with ghp_abcdefghijklmnopqrstuvwxyz0123"),
        ("body", "Role: admin\npassword: hunter22"),
        ("body", "服务器密码：hunter22"),
        ("name", "AKIAABCDEFGHIJKLMNOP"),
    ],
)
def test_secret_values_are_refused_in_every_objects_fields(field, value):
    with pytest.raises(SubmissionError, match="looks like a secret") as e:
        check_graph_write(base(objects=[obj(**{field: value})]))
    assert e.value.field == f"objects[0].{field}"
    with pytest.raises(SubmissionError, match="looks like a secret") as e:
        check_graph_write(base(objects=[obj("knowledge:deploy", cues=["deploy", "token=abcd1234efgh"])]))
    assert e.value.field == "objects[0].cues[1]"


def test_an_ordinary_object_may_name_hashes_and_unknown_passwords():
    fine = [
        "Fixed in commit 3f2a9c1b4d5e6f708192a3b4c5d6e7f8a9b0c1d2",
        "Password: unknown (asked the user to keep it in 1Password)",
        "token: <redacted>",
    ]
    for body in fine:
        assert check_graph_write(base(objects=[obj("knowledge:deploy", body=body)])).objects[0].body == body
    # a credential is held to the stricter rule: a high-entropy run is refused there
    cred = {"id": "credential:x", "name": "x", "purpose": "deploys", "reference": "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9"}
    with pytest.raises(SubmissionError, match="looks like a secret"):
        check_graph_write(base(objects=[cred]))


def test_a_core_document_appears_once_per_write():
    core = [{"name": "USER.md", "content": "a"}, {"name": "USER.md", "content": "b"}]
    with pytest.raises(SubmissionError, match="twice") as e:
        check_graph_write(base(core=core))
    assert e.value.field == "core[1].name"


def test_a_core_file_edited_by_a_human_is_imported_a_missing_one_written_again():
    act, h = logic.CoreFileAction, logic.content_hash
    assert logic.core_file_action("v1", h("v1"), "v1") is act.NONE
    assert logic.core_file_action("v2", h("v1"), "v1") is act.WRITE  # the store moved on: rewrite
    assert logic.core_file_action("v1", h("v1"), None) is act.WRITE  # deleted: restored
    assert logic.core_file_action("v1", h("v1"), "human") is act.IMPORT  # edited by hand: imported
    assert logic.core_file_action("v2", h("v1"), "human") is act.IMPORT  # both moved: the human edit wins
    assert logic.core_file_action(None, None, "human") is act.IMPORT  # a new file by hand
    assert logic.core_file_action("v1", None, "v1") is act.RECORD
    assert logic.core_file_action(None, None, None) is act.NONE


def test_enabling_keeps_hot_only_what_a_threshold_compaction_would_leave():
    # threshold 100 tokens at 4 characters each: 60% = 60 tokens, kept strictly below
    assert logic.kept_hot_on_enable([40, 40, 40, 400], 4.0, 100) == 3  # 10 + 10 + 10 tokens, then 100 more
    assert logic.kept_hot_on_enable([200, 40], 4.0, 100) == 1  # 50, then 60 would not stay below
    assert logic.kept_hot_on_enable([400], 4.0, 100) == 0
    assert logic.kept_hot_on_enable([], 4.0, 100) == 0


def test_worlds_at_once_is_one_to_eight_and_refused_by_name_otherwise():
    """Each world a run advances at once holds a store connection: 1-8, the default 4."""
    assert ObjectsConfig().worlds_at_once == 4
    for good in (1, 8):
        assert ObjectsConfig(worlds_at_once=good).validate().worlds_at_once == good
    for bad in (0, 9, -1):
        with pytest.raises(ConfigError, match=rf"^memory.objects.worlds_at_once: must be within 1-8, got {bad}$"):
            ObjectsConfig(worlds_at_once=bad).validate()


def test_integers_past_the_integer_column_are_refused_by_name():
    """A revision or page end past 2,147,483,647 (a PostgreSQL INTEGER column) is refused naming
    the field, as is a configured count; the largest value itself is accepted."""
    assert check_graph_write(base(graph_revision=2_147_483_647)).graph_revision == 2_147_483_647
    for field in ("graph_revision", "page_end"):
        with pytest.raises(SubmissionError, match=rf"^{field}: .*2,147,483,647"):
            check_graph_write(base(**{field: 2_147_483_648}))
    for name in ("max_batches_per_run", "compact_threshold_tokens", "worker_timeout_seconds", "hot_view_max_bytes"):
        with pytest.raises(ConfigError, match=rf"memory.objects.{name}: .*2,147,483,647"):
            ObjectsConfig(**{name: 2_147_483_648}).validate()
