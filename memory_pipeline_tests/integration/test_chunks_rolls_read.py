"""Day chunks (*/30 tick), peer and system rolls in Redis, and the read path (never an LLM call)."""

from datetime import date, datetime, timedelta

import pytest
from sqlalchemy import func, select

from memory_pipeline.lib.cache import KVCache
from memory_pipeline.lib.llm import LLMClient
from memory_pipeline.lib.store.tables import inbox, llm_ledger, messages
from memory_pipeline.lib.timeutil import bucket_label
from memory_pipeline.temporal import chunks, context, logic, read, rolls, summaries
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.tables import temporal_day_chunks, warmup_requests
from memory_pipeline_tests.conftest import CST, conversation, cst, event

DAY = date(2026, 7, 18)
HALF = timedelta(minutes=30)


def _chunks(store):
    with store.connect() as conn:
        return [
            dict(r)
            for r in conn.execute(
                select(temporal_day_chunks).order_by(
                    temporal_day_chunks.c.conversation_id, temporal_day_chunks.c.bucket
                )
            ).mappings()
        ]


def _ledger_count(store) -> int:
    with store.connect() as conn:
        return conn.execute(select(func.count()).select_from(llm_ledger)).scalar_one()


@pytest.fixture
def busy_morning(ingest):
    """Three conversations of one world active between 06:00 and 07:30; the viewer is 'v'."""
    ingest(
        conversation("w1", "v", cst(2026, 7, 18, 6, 2), ["viewer asks about tomatoes", "tomatoes answer"])
        + conversation("w1", "a", cst(2026, 7, 18, 6, 10), ["deploy pipeline broke", "rolled back deploy"])
        + conversation("w1", "b", cst(2026, 7, 18, 6, 40), ["marathon training plan", "interval pacing set"])
        + conversation("w1", "a", cst(2026, 7, 18, 7, 35), ["deploy fixed now", "great news on deploy"])
        + [event("w1", "a", "tool", "ci log", cst(2026, 7, 18, 6, 15))]
        + conversation("w2", "other-world", cst(2026, 7, 18, 6, 5), ["private stuff", "very private"])
    )


def test_tick_appends_one_chunk_per_closed_bucket_after_the_watermark(ctx, store, busy_morning):
    first = chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 7, 0))
    first_chunks = _chunks(store)
    assert first.chunks_written == 4  # v, a, other-world in 06:00; b in 06:30
    assert [(c["conversation_id"], bucket_label(c["bucket"].astimezone(CST))) for c in first_chunks] == [
        ("a", "2026-07-18T06:00+08:00"),
        ("b", "2026-07-18T06:30+08:00"),
        ("other-world", "2026-07-18T06:00+08:00"),
        ("v", "2026-07-18T06:00+08:00"),
    ]
    a = first_chunks[0]
    assert len(a["source_ids"]) == 2 and a["cst_date"] == DAY  # the tool turn is not material
    assert a["watermark_at"] == cst(2026, 7, 18, 6, 13) and len(a["summary"]) <= 75
    # Same tick again: nothing new. Later: only the 07:30 bucket of 'a', older first_chunks untouched.
    assert chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 7, 10)).chunks_written == 0
    later = chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 8, 0))
    assert later.chunks_written == 1
    after = _chunks(store)
    assert [c for c in after if c["chunk_id"] in {x["chunk_id"] for x in first_chunks}] == first_chunks
    new = [c for c in after if c["chunk_id"] not in {x["chunk_id"] for x in first_chunks}][0]
    assert bucket_label(new["bucket"].astimezone(CST)) == "2026-07-18T07:30+08:00"
    assert chunks.audit_chunks(store, DAY, CST, cst(2026, 7, 18, 8, 0)) == []


def test_the_open_bucket_is_never_summarized(ctx, store, busy_morning):
    chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 6, 29))
    assert _chunks(store) == []


def test_peer_rolls_in_redis_with_36h_ttl(ctx, store, redis_client, busy_morning):
    chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 7, 0))
    result = rolls.warm_peer_rolls(ctx, DAY, cst(2026, 7, 18, 7, 0))
    assert result.buckets == 3 and result.warmed > 0
    keys = sorted(redis_client.scan_iter("anima:temporal:w1:peer_roll:*"))
    assert keys and all(k.startswith("anima:temporal:w1:peer_roll:2026-07-18:2026-07-18T06") for k in keys)
    ttl = redis_client.ttl(keys[0])
    assert 36 * 3600 - 60 <= ttl <= 36 * 3600
    import json

    value = json.loads(redis_client.get(keys[0]))
    assert set(value) == {"summary", "sources_fp", "created_at"} and keys[0].endswith(value["sources_fp"])
    again = rolls.warm_peer_rolls(ctx, DAY, cst(2026, 7, 18, 7, 0))
    assert again.warmed == 0 and again.reused == result.warmed


def test_read_path_inserts_one_peer_message_per_closed_bucket_and_never_calls_an_llm(ctx, store, busy_morning):
    chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 7, 0))
    calls = _ledger_count(store)
    at = cst(2026, 7, 18, 7, 5)
    msgs, warmups = read.peer_messages(store, ctx.cache, ctx.cfg, "w1", "v", at, CST)
    assert _ledger_count(store) == calls  # reading never calls an LLM
    assert [(m["bucket"], m["at"], m["name"], m["role"], m["cache"]) for m in msgs] == [
        ("2026-07-18T06:00+08:00", "2026-07-18T06:30:00+08:00", "temporal_summary_peers", "assistant", "miss"),
        ("2026-07-18T06:30+08:00", "2026-07-18T07:00:00+08:00", "temporal_summary_peers", "assistant", "miss"),
    ]
    own = [c["summary"] for c in _chunks(store) if c["conversation_id"] == "v"][0]
    peer_a = [c["summary"] for c in _chunks(store) if c["conversation_id"] == "a"][0]
    assert own not in msgs[0]["content"] and peer_a in msgs[0]["content"]  # the viewer is excluded
    assert "private" not in " ".join(m["content"] for m in msgs)  # other worlds never leak
    assert warmups == 2
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(warmup_requests)).scalar_one() == 2
    # The background warm-up serves the requests; the next read hits the cache.
    served = rolls.warm_peer_rolls(ctx, DAY, cst(2026, 7, 18, 7, 5))
    assert served.requests_done == 2 and rolls.pending_warmup_days(store) == []
    hit, _ = read.peer_messages(store, ctx.cache, ctx.cfg, "w1", "v", at, CST)
    assert [m["cache"] for m in hit] == ["hit", "hit"]
    # New activity opens a newer bucket only: the older insertions stay byte-identical.
    chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 8, 0))
    rolls.warm_peer_rolls(ctx, DAY, cst(2026, 7, 18, 8, 0))
    later, _ = read.peer_messages(store, ctx.cache, ctx.cfg, "w1", "v", cst(2026, 7, 18, 8, 1), CST)
    assert later[:2] == hit and len(later) == 3 and later[2]["at"] == "2026-07-18T08:00:00+08:00"


def test_miss_path_concatenates_and_truncates_to_the_hard_cap(store, redis_url, ingest):
    texts = [f"conversation {i} about " + "tomatoes compost greenhouse harvest " * 3 for i in range(4)]
    for i, t in enumerate(texts):
        ingest(conversation("w1", f"c{i}", cst(2026, 7, 18, 6, 5 + i), [t, t + " reply"]))
    ctx = context.TemporalContext(
        store, LLMClient(store), KVCache(redis_url), TemporalSummaryConfig(peer_roll_max_chars=40), CST
    )
    chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 6, 30))
    msgs, _ = read.peer_messages(store, ctx.cache, ctx.cfg, "w1", "viewer-x", cst(2026, 7, 18, 6, 31), CST)
    assert len(msgs) == 1 and len(msgs[0]["content"]) == 60 and msgs[0]["content"].endswith("…")


def test_system_rolls_ttls_reuse_and_the_block(ctx, store, redis_client, ingest):
    ingest(
        conversation("w1", "a", cst(2026, 7, 2, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "b", cst(2026, 3, 3, 9), ["compost started", "compost warm"])
        + conversation("w1", "c", cst(2025, 5, 3, 9), ["greenhouse built", "greenhouse glass"])
    )
    for d in (date(2026, 7, 2), date(2026, 3, 3), date(2025, 5, 3)):
        summaries.regenerate_day(ctx, d)
    summaries.regenerate_rollup(ctx, "month", date(2026, 3, 1))
    summaries.regenerate_rollup(ctx, "month", date(2025, 5, 1))
    summaries.regenerate_rollup(ctx, "year", date(2025, 1, 1))
    today = date(2026, 7, 18)
    result = rolls.regenerate_system_rolls(ctx, today)
    assert result.regenerated == 3
    for kind, stamp, ttl in (
        ("past_days", "2026-07-18", 86400),
        ("past_months", "2026-07", 31 * 86400),
        ("past_years", "2026", 366 * 86400),
    ):
        key = f"anima:temporal:w1:sys_roll:{kind}:{stamp}"
        assert ttl - 60 <= redis_client.ttl(key) <= ttl
    calls = _ledger_count(store)
    again = rolls.regenerate_system_rolls(ctx, today)
    assert (again.reused, again.regenerated) == (3, 0) and _ledger_count(store) == calls
    # A changed source row changes sources_fp: only that roll is rebuilt.
    ingest(conversation("w1", "d", cst(2026, 7, 10, 9), ["harvest soon", "harvest basket"]))
    summaries.regenerate_day(ctx, date(2026, 7, 10))
    third = rolls.regenerate_system_rolls(ctx, today)
    assert (third.reused, third.regenerated) == (2, 1)

    calls = _ledger_count(store)
    block, texts = read.system_block(store, ctx.cache, ctx.cfg, "w1", cst(2026, 7, 18, 12), CST)
    assert block.rolls_used == ("past_days", "past_months", "past_years")
    lines = block.text.splitlines()
    assert lines[0] == "<temporal_summary>" and lines[-1] == "</temporal_summary>"
    assert [ln.split(":")[0] for ln in lines[1:-1]] == ["Past days", "Past months", "Past years"]
    assert all(len(v) <= 150 for v in texts.values())
    # The next day past_days misses (its key carries the date) and is skipped, no LLM call made;
    # in a new year every roll misses and the block is skipped whole.
    next_day, _ = read.system_block(store, ctx.cache, ctx.cfg, "w1", cst(2026, 7, 19, 12), CST)
    assert next_day.rolls_used == ("past_months", "past_years")
    empty, _ = read.system_block(store, ctx.cache, ctx.cfg, "w1", cst(2027, 1, 2, 12), CST)
    assert empty.text == "" and _ledger_count(store) == calls


def test_system_segment_over_the_limit_warns_both_subjects_once_per_day(store, redis_url):
    cfg = TemporalSummaryConfig(system_prompt_max_chars=60)
    cache = KVCache(redis_url)
    today = date(2026, 7, 18)
    for kind in logic.SYS_ROLL_KINDS:
        cache.set_json(
            logic.sys_roll_key(cfg.redis_key_prefix, "w1", kind, today),
            {"summary": kind * 5, "sources_fp": "x", "created_at": "t"},
            600,
        )
    for hour in (9, 10, 11):
        block, _ = read.system_block(store, cache, cfg, "w1", cst(2026, 7, 18, hour), CST)
        assert block.truncated and len(block.text) == 60
    with store.connect() as conn:
        rows = conn.execute(select(inbox.c.subject, inbox.c.source_ref)).all()
    assert sorted(rows) == [
        ("agent:w1", "temporal_summary:system_truncated:2026-07-18"),
        ("user:w1", "temporal_summary:system_truncated:2026-07-18"),
    ]


def test_redis_unreachable_falls_back_in_process(ctx, store, busy_morning):
    down = KVCache("redis://127.0.0.1:1/0")
    ctx.cache = down
    chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 7, 0))
    assert rolls.warm_peer_rolls(ctx, DAY, cst(2026, 7, 18, 7, 0)).warmed > 0
    assert down.backend == "memory"
    msgs, _ = read.peer_messages(store, down, ctx.cfg, "w1", "v", cst(2026, 7, 18, 7, 1), CST)
    assert [m["cache"] for m in msgs] == ["hit", "hit"]
    key = down.keys("anima:temporal:w1:peer_roll:")[0]
    assert 36 * 3600 - 60 <= down.ttl(key) <= 36 * 3600


def test_failed_warmup_stays_pending_and_an_expired_roll_is_requested_again(store, redis_url, redis_client, ingest):
    from memory_pipeline_tests.fake_openai import FakeOpenAI

    for i, topic in enumerate(
        ["tomatoes greenhouse seedlings", "deploy pipeline migration", "marathon interval pacing"]
    ):
        ingest(conversation("w1", f"c{i}", cst(2026, 7, 18, 6, 5 + i), [f"{topic} today", f"{topic} tomorrow"]))
    cfg = TemporalSummaryConfig(peer_roll_max_chars=40)  # three chunks do not fit: the model is asked
    offline = context.TemporalContext(store, LLMClient(store), KVCache(redis_url), cfg, CST)
    chunks.run_tick(offline, DAY, cst(2026, 7, 18, 6, 30))
    at = cst(2026, 7, 18, 6, 40)
    assert read.peer_messages(store, offline.cache, offline.cfg, "w1", "outsider", at, CST)[1] == 1
    with FakeOpenAI() as server:
        failing = context.TemporalContext(
            store,
            LLMClient(store, model="openai/fake", api_base=server.api_base, api_key="k", max_retries=0),
            KVCache(redis_url),
            cfg,
            CST,
        )
        for _ in range(8):
            server.push("status", 500)
        result = rolls.warm_peer_rolls(failing, DAY, at)
    assert result.failures and result.requests_done == 0
    assert [d for d, _ in rolls.pending_warmup_days(store)] == [DAY]
    assert rolls.warm_peer_rolls(offline, DAY, at).requests_done == 1
    assert rolls.pending_warmup_days(store) == []
    assert read.peer_messages(store, offline.cache, offline.cfg, "w1", "outsider", at, CST)[0][0]["cache"] == "hit"
    redis_client.flushdb()  # the roll expired or Redis restarted
    msgs, requested = read.peer_messages(store, offline.cache, offline.cfg, "w1", "outsider", at, CST)
    assert msgs[0]["cache"] == "miss" and requested == 1
    assert [d for d, _ in rolls.pending_warmup_days(store)] == [DAY]


def test_redis_stopped_mid_pipeline_falls_back_in_process(ctx, store, busy_morning, tmp_path):
    """A Redis of the test's own on another port, shut down between two steps."""
    import shutil
    import socket
    import subprocess
    import time

    import redis as redis_lib

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            shutil.which("redis-server"),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        client = redis_lib.Redis(port=port)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis_lib.ConnectionError:
                time.sleep(0.05)
        ctx.cache = KVCache(f"redis://127.0.0.1:{port}/0")
        chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 6, 30))
        assert rolls.warm_peer_rolls(ctx, DAY, cst(2026, 7, 18, 6, 30)).warmed > 0
        assert ctx.cache.backend == "redis" and client.dbsize() > 0
        try:
            client.shutdown(nosave=True)
        except redis_lib.ConnectionError:
            pass  # SHUTDOWN closes the connection it came on
        proc.wait(timeout=10)
    finally:
        proc.kill()
    # Redis is gone: the next tick and warm-up still succeed, on the in-process cache.
    chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 7, 0))
    result = rolls.warm_peer_rolls(ctx, DAY, cst(2026, 7, 18, 7, 0))
    assert result.failures == {} and result.warmed > 0 and ctx.cache.backend == "memory"
    msgs, _ = read.peer_messages(store, ctx.cache, ctx.cfg, "w1", "v", cst(2026, 7, 18, 7, 1), CST)
    assert msgs[-1]["cache"] == "hit" and msgs[-1]["bucket"] == "2026-07-18T06:30+08:00"


# --- late arrivals: every material message of the day in exactly one chunk ------------------------


def _late_day_events() -> dict[str, dict]:
    """Two conversations of w1 on DAY with fixed ids; 'a-tool' is not material."""
    specs = [
        ("a1", "a", "user", "sourdough starter feeding schedule", (6, 5)),
        ("a2", "a", "assistant", "feed the starter twice daily", (6, 13)),
        ("a3", "a", "user", "sourdough crumb too dense", (6, 13)),  # the same instant as a2
        ("a4", "a", "user", "oven spring questions", (6, 40)),
        ("a5", "a", "assistant", "steam the oven for spring", (7, 10)),
        ("a-tool", "a", "tool", "thermometer reading", (6, 20)),
        ("b1", "b", "user", "kayak trip packing list", (6, 10)),
        ("b4", "b", "assistant", "pack a dry bag for the kayak", (6, 25)),
        ("b2", "b", "user", "river levels this weekend", (7, 35)),
        ("b3", "b", "assistant", "river is high after rain", (7, 50)),
    ]
    return {mid: event("w1", conv, role, text, cst(2026, 7, 18, *hm), mid=mid) for mid, conv, role, text, hm in specs}


def _at(mid: str) -> datetime:
    return datetime.fromisoformat(_late_day_events()[mid]["timestamp"])


MATERIAL = {"a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3", "b4"}
ALL_IDS = sorted(_late_day_events())

# (files of message ids, the tick's now after each file as (hour, minute))
ORDERS = {
    "all_at_once": [(ALL_IDS, (8, 0))],
    "three_files_middle_for_chunked_buckets": [
        (["a1", "a2", "b1", "b2"], (7, 0)),
        (["a3", "b4", "a4"], (7, 5)),  # a3 at a's watermark instant, b4 into b's chunked 06:00 bucket
        (["a5", "b3", "a-tool"], (8, 0)),
    ],
    "one_message_at_the_watermark_instant": [
        ([i for i in ALL_IDS if i != "a3"], (8, 0)),
        (["a3"], (8, 10)),
    ],
    "earlier_buckets_after_later_ones": [
        (["a4", "a5", "b2", "b3"], (8, 0)),
        (["a1", "a2", "a3", "b1", "b4", "a-tool"], (8, 5)),
    ],
    "one_file_per_message_newest_first": [([mid], (8, i)) for i, mid in enumerate(sorted(ALL_IDS, key=_at)[::-1])],
}


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_every_material_message_ends_up_in_exactly_one_chunk_in_any_order(ctx, store, ingest, order):
    events = _late_day_events()
    written = 0
    for ids, (hour, minute) in ORDERS[order]:
        ingest([events[i] for i in ids])
        before = _chunks(store)
        written += chunks.run_tick(ctx, DAY, cst(2026, 7, 18, hour, minute)).chunks_written
        after = {c["chunk_id"]: c for c in _chunks(store)}
        assert all(after[c["chunk_id"]] == c for c in before)  # append-only: never rewritten
    written += chunks.run_tick(ctx, DAY).chunks_written  # the day is past: every bucket closed
    rows = _chunks(store)
    sources = [i for c in rows for i in c["source_ids"]]
    assert set(sources) == MATERIAL and len(sources) == len(MATERIAL)  # all of them, none twice
    assert written == len(rows)  # the counts are rows actually inserted
    for c in rows:  # each chunk's watermark is its own last message, inside its bucket
        last = max((_at(i), i) for i in c["source_ids"])
        assert (c["watermark_at"], c["watermark_message_id"]) == last
        assert all(c["bucket"] <= _at(i) < c["bucket"] + HALF for i in c["source_ids"])
    per_bucket = {}
    for c in rows:
        per_bucket.setdefault((c["conversation_id"], c["bucket"]), []).append(c["seq"])
    assert all(sorted(s) == list(range(len(s))) for s in per_bucket.values())
    assert chunks.audit_chunks(store, DAY, CST) == []
    assert chunks.run_tick(ctx, DAY).chunks_written == 0


def test_a_late_message_appends_a_further_chunk_with_a_true_count(ctx, store, ingest):
    events = _late_day_events()
    ingest([events[i] for i in ("a1", "a2", "b1")])
    assert chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 7, 0)).chunks_written == 2
    ingest([events["a3"], events["b4"]])  # a3 shares a2's timestamp, which is a's watermark
    late = chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 7, 1))
    assert (late.chunks_written, late.late_messages) == (2, 2)
    rows = _chunks(store)
    assert sorted((c["conversation_id"], c["seq"], tuple(c["source_ids"])) for c in rows) == [
        ("a", 0, ("a1", "a2")),
        ("a", 1, ("a3",)),
        ("b", 0, ("b1",)),
        ("b", 1, ("b4",)),
    ]
    # A concurrent tick that planned the same (conversation, bucket, seq) writes nothing and says so.
    row = {k: v for k, v in rows[0].items() if k != "chunk_id"}
    with store.begin() as conn:
        assert chunks.append_chunk(conn, row) is False
    with store.begin() as conn:
        assert chunks.append_chunk(conn, row | {"seq": 7, "source_ids": ["x"]}) is True


def test_audit_names_a_message_in_two_chunks_and_one_in_none(ctx, store, ingest):
    events = _late_day_events()
    ingest(list(events.values()))
    chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 7, 0))
    assert chunks.audit_chunks(store, DAY, CST) == [
        "conversation a: 1 material message(s) of closed buckets in no chunk, e.g. ['a5']",
        "conversation b: 2 material message(s) of closed buckets in no chunk, e.g. ['b2', 'b3']",
    ]  # the real now: every bucket of the past day is closed, the tick at 07:00 saw fewer
    assert chunks.audit_chunks(store, DAY, CST, tick_now=cst(2026, 7, 18, 7, 0)) == []
    a = [c for c in _chunks(store) if c["conversation_id"] == "a"][0]
    with store.begin() as conn:
        chunks.append_chunk(conn, {k: v for k, v in a.items() if k != "chunk_id"} | {"seq": 1})
        conn.execute(temporal_day_chunks.delete().where(temporal_day_chunks.c.conversation_id == "b"))
    assert chunks.audit_chunks(store, DAY, CST, tick_now=cst(2026, 7, 18, 7, 0)) == [
        "conversation a: 3 message(s) in two or more chunks, e.g. ['a1', 'a2', 'a3']",
        "conversation b: 2 material message(s) of closed buckets in no chunk, e.g. ['b1', 'b4']",
    ]
    # A message ingested after the tick read is not the tick's loss (the next tick takes it).
    ingest([event("w1", "c", "user", "fresh import", cst(2026, 7, 18, 6, 1), mid="c1")])
    with store.connect() as conn:
        read_at = conn.execute(select(func.min(messages.c.ingested_at))).scalar_one()
    late_problems = chunks.audit_chunks(store, DAY, CST, tick_now=cst(2026, 7, 18, 7, 0), ingested_before=read_at)
    assert not any("conversation c" in p for p in late_problems)
    assert chunks.audit_chunks(store, DAY, CST, coverage=False) == [late_problems[0]]


def test_peers_of_a_bucket_are_all_its_chunks(store, redis_url, ingest):
    cfg = TemporalSummaryConfig(peer_roll_max_chars=400)
    ctx = context.TemporalContext(store, LLMClient(store), KVCache(redis_url), cfg, CST)
    events = _late_day_events()
    ingest([events[i] for i in ("a1", "a2", "b1")])
    chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 6, 30))
    rolls.warm_peer_rolls(ctx, DAY, cst(2026, 7, 18, 6, 30))
    at = cst(2026, 7, 18, 7, 5)
    (before,), _ = read.peer_messages(store, ctx.cache, cfg, "w1", "b", at, CST)
    assert before["cache"] == "hit"
    ingest([events["a3"]])  # late: a's 06:00 bucket gets a second chunk
    chunks.run_tick(ctx, DAY, cst(2026, 7, 18, 7, 0))
    a_chunks = [c["summary"] for c in _chunks(store) if c["conversation_id"] == "a"]
    assert len(a_chunks) == 2
    (miss,), requested = read.peer_messages(store, ctx.cache, cfg, "w1", "b", at, CST)
    assert miss["cache"] == "miss" and requested == 1  # the bucket's sources changed: a new key
    assert all(s in miss["content"] for s in a_chunks)
    (own,), _ = read.peer_messages(store, ctx.cache, cfg, "w1", "a", at, CST)
    assert not any(s in own["content"] for s in a_chunks)  # the viewer's chunks all stay out
    warm = rolls.warm_peer_rolls(ctx, DAY, at)
    assert warm.buckets == 1 and warm.requests_done == 1 and not warm.failures
    assert [m["cache"] for m in read.peer_messages(store, ctx.cache, cfg, "w1", "b", at, CST)[0]] == ["hit"]


def test_a_fall_back_days_repeated_half_hours_are_buckets_of_their_own(store, redis_url, cfg, ingest):
    """MEMORY_TIMEZONE with DST (America/New_York, 2026-11-01: 01:00-02:00 happens twice). The two
    01:30s were one dict key (one ZoneInfo compares wall times, fold ignored): the tick failed with
    a KeyError, and a rebuild merged both half-hours into one bucket ending an hour late. Each is a
    30-minute bucket of its own now, 50 buckets that day, and the audit passes."""
    from datetime import UTC
    from zoneinfo import ZoneInfo

    from memory_pipeline.lib.timeutil import bucket_end, bucket_start, buckets_of_day

    ny = ZoneInfo("America/New_York")
    day = date(2026, 11, 1)
    first = datetime(2026, 11, 1, 5, 35, tzinfo=UTC)  # 01:35 EDT
    second = datetime(2026, 11, 1, 6, 35, tzinfo=UTC)  # 01:35 EST, the repeated hour
    assert bucket_start(first, ny) != bucket_start(second, ny)
    assert [bucket_end(bucket_start(t, ny)).astimezone(UTC).hour for t in (first, second)] == [6, 7]
    buckets = buckets_of_day(day, ny)
    assert len(buckets) == len(set(buckets)) == 50  # a 25-hour day
    ingest(
        conversation("w1", "c", first, ["lanterns tonight", "lanterns lit"])
        + conversation("w1", "c", second, ["mirrors tonight", "mirrors hung"])
    )
    ctx = context.TemporalContext(store, LLMClient(store), KVCache(redis_url), cfg, ny)
    now = datetime(2026, 11, 2, 12, tzinfo=UTC)
    result = chunks.run_tick(ctx, day, now)
    assert result.failures == {} and result.chunks_written == 2
    rows = _chunks(store)
    assert sorted((c["bucket"].astimezone(UTC).hour, c["bucket"].astimezone(UTC).minute) for c in rows) == [
        (5, 30),
        (6, 30),
    ]
    assert sorted(bucket_label(c["bucket"].astimezone(ny)) for c in rows) == [
        "2026-11-01T01:30-04:00",
        "2026-11-01T01:30-05:00",
    ]
    assert chunks.audit_chunks(store, day, ny, now) == []
