"""The sleep and conversation command lines: recovery backfill in day order, diff, the memory tools
and their refusals (exit 2, the field named, nothing written), status, the conversation commands."""

import json
import re

from sqlalchemy import func, select
from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline.lib.store import Store
from memory_pipeline.sleep.logic import Stage
from memory_pipeline.sleep.order import DAY_ROW
from memory_pipeline.sleep.tables import pinned_facts, self_blocks, semantic_memories, sleep_runs
from memory_pipeline_tests.conftest import conversation, cst, event
from memory_pipeline_tests.integration.test_cli import env  # noqa: F401 - the fixture

runner = CliRunner()


def _ingest(folder, events):
    path = folder / "e.jsonl"
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    assert runner.invoke(app, ["ingest", str(path)]).exit_code == 0


def test_backfill_runs_each_day_in_order_then_diff_and_status(env, pg_url):  # noqa: F811
    _ingest(
        env,
        conversation("w1", "s-1", cst(2026, 3, 2, 9), ["我喜欢吃辣", "好"])
        + conversation("w1", "s-2", cst(2026, 3, 3, 9), ["我不喜欢吃辣", "好"]),
    )
    result = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-02", "--to", "2026-03-03"])
    assert result.exit_code == 0, result.output
    # One range run of the nights job, not a run per stage and day ...
    assert "sleep 2026-03-02..2026-03-03: 2 day(s) in one run" in result.output
    assert "of sleep_nights_job" in result.output
    days = [line.split() for line in result.output.splitlines() if line.strip().startswith("2026-03-0")]
    assert days == [
        ["2026-03-02", "light", "done,", "deep", "done,", "autobiography", "done"],
        ["2026-03-03", "light", "done,", "deep", "done,", "autobiography", "done"],
    ]
    # ... inside which each day's light, deep and autobiography finish before the next day's light sleep.
    with Store(pg_url).connect() as conn:
        r = sleep_runs.c
        finished = conn.execute(select(r.stage, r.day).where(r.world_id == DAY_ROW).order_by(r.finished_at)).all()
    assert [(stage, day.isoformat()) for stage, day in finished] == [
        (str(Stage.LIGHT), "2026-03-02"),
        (str(Stage.DEEP), "2026-03-02"),
        (str(Stage.AUTOBIOGRAPHY), "2026-03-02"),
        (str(Stage.LIGHT), "2026-03-03"),
        (str(Stage.DEEP), "2026-03-03"),
        (str(Stage.AUTOBIOGRAPHY), "2026-03-03"),
    ]
    diff = runner.invoke(app, ["sleep", "diff", "w1", "2026-03-02", "2026-03-03"])
    assert diff.exit_code == 0 and "deprecated:" in diff.output and "created:" in diff.output
    active = runner.invoke(app, ["sleep", "memories", "w1"], terminal_width=300)
    assert active.exit_code == 0 and "2026-03-03T09:0" in active.output, active.output  # observed: CST, not UTC
    assert re.search(r"2026-03-03T09:0\d:\d\d\+08:00", active.output), active.output
    # A side with no snapshot is refused by name, never reported as "everything deprecated".
    missing = runner.invoke(app, ["sleep", "diff", "w1", "2026-03-02", "2099-01-01"])
    assert missing.exit_code == 1 and "no snapshot of 2099-01-01" in missing.output
    assert "deprecated:" not in missing.output
    backwards = runner.invoke(app, ["sleep", "diff", "w1", "2026-03-03", "2026-03-02"])
    assert backwards.exit_code == 2 and "AFTER 2026-03-02 is before BEFORE 2026-03-03" in backwards.output
    assert "deprecated:" not in backwards.output
    unknown = runner.invoke(app, ["sleep", "diff", "nobody", "2026-03-02", "2026-03-03"])
    assert unknown.exit_code == 1 and "unknown world 'nobody'" in unknown.output

    # A day before the history with days between never slept: the restore would undo 03-02 and 03-03
    # for good (neither could run again). Refused before anything runs, naming the run that works.
    def records() -> list:
        with Store(pg_url).connect() as conn:
            return sorted(
                conn.execute(
                    select(sleep_runs.c.world_id, sleep_runs.c.stage, sleep_runs.c.day, sleep_runs.c.status)
                ).all()
            )

    before = records()
    for args, gap in (
        (["rebuild", "2026-02-20"], "2026-02-21..2026-03-01"),
        (["backfill", "--from", "2026-02-20", "--to", "2026-02-25"], "2026-02-26..2026-03-01"),
    ):
        refused = runner.invoke(app, ["sleep", *args])
        said = refused.output.replace("\n", "")
        assert refused.exit_code == 1 and f"{gap} never slept between" in said, refused.output
        assert "run 2026-02-20..2026-03-03 in one backfill instead" in said
    assert records() == before
    # The operator's generic backfill is refused the same way (it ran, undid both days and said ok).
    generic = runner.invoke(app, ["backfill", "sleep", "--from", "2026-02-20", "--to", "2026-02-25"])
    said = " ".join(generic.output.split())
    assert generic.exit_code == 1, said
    assert "failed: refused, nothing run: the sleep of 2026-02-20 would start the history before its first day" in said
    assert records() == before
    status = runner.invoke(app, ["status"])
    assert (
        status.exit_code == 0
        and "Sleep (seed 003)" in status.output
        and "Rolling conversation summaries" in status.output
    )
    assert "late data" not in runner.invoke(app, ["sleep", "status"]).output
    # A message of 03-02 ingested after its light sleep ran: `status` listed it as late, `sleep
    # status` said nothing. It names the day and the backfill that runs it again.
    (env / "late").mkdir()
    _ingest(env / "late", [event("w1", "s-1", "user", "其实我也喜欢甜的", cst(2026, 3, 2, 21), mid="late-1")])
    late = " ".join(runner.invoke(app, ["sleep", "status"]).output.split())
    assert "late data: 1 day(s) whose light sleep ran before some of their messages were ingested (2026-03-02)" in late
    assert "`memory-pipeline sleep backfill --from 2026-03-02 --to 2026-03-03` runs them again" in late
    # the operator's backfill of the nights runs them again too (it said both unchanged per their record)
    said = " ".join(
        runner.invoke(app, ["backfill", "sleep", "--from", "2026-03-02", "--to", "2026-03-03"]).output.split()
    )
    assert "sleep: 2 partition(s) requested, 0 already materialized and skipped" in said, said
    assert "2026-03-02: re-run, late data: messages ingested after its light sleep ran" in said
    assert "2026-03-03: re-run, after 2026-03-02: a re-run of a day turns the days after it stale" in said
    assert "late data" not in runner.invoke(app, ["sleep", "status"]).output
    assert runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-02", "--to", "2026-03-03"]).exit_code == 0
    assert "late data" not in runner.invoke(app, ["sleep", "status"]).output
    # A day never slept just before the history: its run starts the history there and turns the
    # days after it stale, so the generic backfill runs them too (it said them unchanged, left them
    # stale, and their memory undone).
    said = " ".join(
        runner.invoke(app, ["backfill", "sleep", "--from", "2026-03-01", "--to", "2026-03-03"]).output.split()
    )
    assert "sleep: 3 partition(s) requested, 0 already materialized and skipped" in said, said
    assert "2026-03-02: re-run, after 2026-03-01: a re-run of a day turns the days after it stale" in said, said
    assert "stale" not in runner.invoke(app, ["sleep", "status"]).output


def test_memory_tools_refuse_bad_input_by_field_and_write_nothing(env, pg_url):  # noqa: F811
    _ingest(env, conversation("w1", "s-1", cst(2026, 3, 2, 9), ["我养了一只猫"]))
    result = runner.invoke(app, ["sleep", "remember", "w1", "s-1", "   "])
    assert result.exit_code == 2 and "field 'content': empty" in result.output
    result = runner.invoke(app, ["sleep", "remember", "w1", "s-1", "x", "--type", "mood"])
    assert result.exit_code == 2 and "field 'type': 'mood' is not one of" in result.output
    result = runner.invoke(app, ["sleep", "pin", "bad:world", "x"])
    assert result.exit_code == 2 and "WORLD 'bad:world': character ':'" in result.output
    result = runner.invoke(app, ["sleep", "self-block", "w1", "mood", "x"])
    assert result.exit_code == 2 and "field 'name': 'mood' is not a self block" in result.output
    # a priority past the column's integer: it was the driver's OverflowError with a traceback
    result = runner.invoke(app, ["sleep", "pin", "w1", "big", "--priority", "99999999999999999999"])
    said = " ".join(result.output.split())
    assert (
        result.exit_code == 2 and "field 'priority': expected an integer from -2,147,483,648 to 2,147,483,647" in said
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    for world, session in (("w2", "s-1"), ("w1", "s-nope")):  # another world's session, or none
        result = runner.invoke(app, ["sleep", "remember", world, session, "用户养猫"])
        assert (
            result.exit_code == 2 and f"field 'session_id': no session '{session}' in world '{world}'" in result.output
        )
    # a mistyped world is refused, never given a self layer of its own nor shown as an empty one
    for args in (["pin", "w9", "x"], ["self-block", "w9", "identity", "x"], ["memories", "w9"], ["narratives", "w9"]):
        result = runner.invoke(app, ["sleep", *args])
        assert result.exit_code == 1 and "no such world 'w9': nothing has been ingested for it" in result.output, args
    store = Store(pg_url)
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(semantic_memories)).scalar_one() == 0
        assert conn.execute(select(func.count()).select_from(pinned_facts)).scalar_one() == 0
        assert conn.execute(select(func.count()).select_from(self_blocks)).scalar_one() == 0
    ok = runner.invoke(app, ["sleep", "remember", "w1", "s-1", "用户养猫"])
    assert ok.exit_code == 0
    # the operator's writes say what they did (they were silent)
    pinned = runner.invoke(app, ["sleep", "pin", "w1", "用户叫小王", "--priority", "3"])
    assert pinned.exit_code == 0 and "pinned for w1 at priority 3" in pinned.output, pinned.output
    block = runner.invoke(app, ["sleep", "self-block", "w1", "identity", "一个助手"])
    assert block.exit_code == 0 and "self block identity of w1 set (4 characters)" in block.output, block.output
    memory_id = ok.output.strip()
    assert runner.invoke(app, ["sleep", "delete", "w1", memory_id]).exit_code == 0
    assert runner.invoke(app, ["sleep", "delete", "w1", memory_id]).exit_code == 1


def test_conversation_commands(env, pg_url):  # noqa: F811
    _ingest(env, conversation("w1", "c1", cst(2026, 3, 2, 9), [f"我喜欢爬山 {i}" for i in range(30)]))
    assert runner.invoke(app, ["conversation", "init-status", "c1", "finished"]).exit_code == 2
    gate = runner.invoke(app, ["conversation", "init-status", "c1", "done"])
    assert gate.exit_code == 0 and "c1: init status done" in gate.output  # a write says what it did
    result = runner.invoke(app, ["conversation", "summarize"])
    assert result.exit_code == 0 and "1 due, 1 written, 0 failed" in result.output, result.output
    shown = runner.invoke(app, ["conversation", "show", "c1"])
    assert shown.exit_code == 0 and "# 对话历程摘要（滚动）" in shown.output
    # While unverified, show prints the check line the help promises, and how to answer it.
    assert "version 1, unverified" in shown.output and "我对咱们最近聊的事的印象是 " in shown.output
    assert "，大致对吗？" in shown.output and "conversation confirm c1 --version 1" in shown.output
    fixed = runner.invoke(app, ["conversation", "correct", "c1", "用户其实在为搬家发愁。"])
    assert fixed.exit_code == 0 and "version 2" in fixed.output
    shown = runner.invoke(app, ["conversation", "show", "c1"])
    assert "version 2, verified" in shown.output and "大致对吗" not in shown.output
    # A retried correction with its request id writes nothing more; another arc under it is refused.
    once = ["conversation", "correct", "c1", "用户在为搬家和新工作发愁。", "--request-id", "fix-1"]
    first, again = runner.invoke(app, once), runner.invoke(app, once)
    assert first.exit_code == 0 and "version 3 written (verified)" in first.output, first.output
    assert again.exit_code == 0 and "version 3 already written by this request id" in again.output, again.output
    other = runner.invoke(app, [*once[:3], "另一条主线。", *once[4:]])
    assert other.exit_code == 2 and "--request-id 'fix-1' was used for another request" in other.output, other.output
    # The user's yes to a check line: an older version is refused, the newest is verified (once).
    stale = runner.invoke(app, ["conversation", "confirm", "c1", "--version", "1"])
    assert stale.exit_code == 2 and "1 is not the newest version" in stale.output
    again = runner.invoke(app, ["conversation", "confirm", "c1"])
    assert again.exit_code == 0 and "already verified" in again.output
    nothing = runner.invoke(app, ["conversation", "retry", "c1"])
    assert nothing.exit_code == 2 and "no failures to retry" in nothing.output
    # a mistyped id is said to be none, not a healthy conversation with nothing to retry
    unknown = runner.invoke(app, ["conversation", "retry", "nosuch-conv"])
    assert unknown.exit_code == 2 and "no conversation 'nosuch-conv' has been ingested" in unknown.output, (
        unknown.output
    )
    unknown = runner.invoke(app, ["conversation", "show", "nosuch-conv"])
    assert unknown.exit_code == 2 and "no conversation 'nosuch-conv' has been ingested" in unknown.output


def test_the_user_confirms_a_summary_from_the_command_line(env, pg_url):  # noqa: F811
    from memory_pipeline.conversation.tables import conversation_summaries

    _ingest(env, conversation("w1", "c1", cst(2026, 3, 2, 9), [f"我喜欢爬山 {i}" for i in range(30)]))
    assert runner.invoke(app, ["conversation", "init-status", "c1", "done"]).exit_code == 0
    assert runner.invoke(app, ["conversation", "summarize"]).exit_code == 0
    result = runner.invoke(app, ["conversation", "confirm", "c1", "--version", "1"])
    assert result.exit_code == 0 and result.output.strip() == "verified"
    with Store(pg_url).connect() as conn:
        assert conn.execute(select(conversation_summaries.c.verified)).scalars().all() == [True]
    assert "version 1, verified" in runner.invoke(app, ["conversation", "show", "c1"]).output


def test_sleep_status_lists_a_refused_world_with_its_size(env, pg_url, monkeypatch):  # noqa: F811
    config = env / "memory.yaml"
    config.write_text(
        "memory:\n  sleep:\n    deep_warn_chars: 100\n    deep_batch_chars: 200\n    deep_refuse_chars: 300\n"
        f"    log_dir: {env / 'logs'}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(config))
    _ingest(
        env,
        conversation("w-big", "s-b", cst(2026, 3, 2, 9), ["我喜欢吃辣", "好", "我喜欢喝茶", "好", "我喜欢爬山", "好"])
        + conversation("w-small", "s-s", cst(2026, 3, 2, 10), ["garden tomatoes", "ok"]),
    )
    result = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-02", "--to", "2026-03-02"])
    # The other world slept and the run succeeded, but the day's check fails for the refused world:
    # the run line names the check and the warning, and the command exits 1.
    said = " ".join(result.output.split())
    assert result.exit_code == 1, said
    assert (
        "ok, 1 check(s) failed: deep_sleep_snapshot_current_and_nothing_deleted 2026-03-02; "
        "1 warning(s): sleep_deep_sleep 2026-03-02: world w-big" in said
    ), said
    assert "1 check result(s) of severity ERROR did not pass (on the run lines above)" in said, said
    status = runner.invoke(app, ["sleep", "status"], terminal_width=300)
    assert status.exit_code == 0 and "Worlds refused" in status.output
    (line,) = [ln for ln in status.output.splitlines() if "w-big" in ln]
    assert "deep_sleep" in line and "2026-03-02" in line and "over the 300 limit" in line


def _active(pg_url):
    with Store(pg_url).connect() as conn:
        return set(
            conn.execute(select(semantic_memories.c.content).where(semantic_memories.c.status == "active")).scalars()
        )


def _spicy_days(folder):
    _ingest(
        folder,
        conversation("r", "r-a", cst(2026, 3, 1, 9), ["我喜欢吃辣", "好"])
        + conversation("r", "r-b", cst(2026, 3, 2, 9), ["我不喜欢吃辣", "好"]),
    )
    done = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-01", "--to", "2026-03-02"])
    assert done.exit_code == 0, done.output


def test_a_late_message_backfilled_is_a_rebuild_of_its_day_and_the_command_says_what_is_left(env, pg_url):  # noqa: F811
    _spicy_days(env)
    late = env / "late.jsonl"
    late.write_text(json.dumps(event("r", "r-a", "user", "ok", cst(2026, 3, 1, 10), mid="r3")) + "\n", encoding="utf-8")
    assert runner.invoke(app, ["ingest", str(late)]).exit_code == 0
    light = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-01", "--to", "2026-03-01", "--stage", "light"])
    assert light.exit_code == 0, light.output
    assert not {"我喜欢吃辣", "我不喜欢吃辣"} <= _active(pg_url)  # what deep sleep resolved stays resolved
    assert "still stale: 2026-03-01 .. 2026-03-02" in light.output.replace("\n", " ")
    status = runner.invoke(app, ["sleep", "status"])
    assert "deep_sleep days stale" in status.output.replace("\n", " ")
    # the operator's backfill of the nights runs the stale days (it said them unchanged per their record)
    said = " ".join(
        runner.invoke(app, ["backfill", "sleep", "--from", "2026-03-01", "--to", "2026-03-02"]).output.split()
    )
    assert "sleep: 2 partition(s) requested, 0 already materialized and skipped" in said, said
    assert "2026-03-01: re-run, deep sleep, autobiography stale (an earlier place was run again)" in said
    assert "deep_sleep days stale" not in " ".join(runner.invoke(app, ["sleep", "status"]).output.split())
    again = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-01", "--to", "2026-03-02"])
    assert again.exit_code == 0 and "still stale" not in again.output
    assert "我不喜欢吃辣" in _active(pg_url) and "我喜欢吃辣" not in _active(pg_url)


def test_a_backfill_with_another_model_asks_that_model(env, pg_url, monkeypatch):  # noqa: F811
    """Finished days are not reused for another model: here it cannot answer, so the command fails
    (exit 1) and nothing changed; the same model reuses them (no call, exit 0)."""
    _spicy_days(env)
    before = _active(pg_url)
    same = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-01", "--to", "2026-03-01", "--stage", "light"])
    assert same.exit_code == 0 and _active(pg_url) == before
    monkeypatch.setenv("MEMORY_LLM_MODEL", "openai/other")
    monkeypatch.setenv("MEMORY_LLM_API_BASE", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEMORY_LLM_MAX_RETRIES", "0")
    other = runner.invoke(app, ["sleep", "backfill", "--from", "2026-03-01", "--to", "2026-03-01", "--stage", "light"])
    assert other.exit_code == 1 and "failed" in other.output
    assert _active(pg_url) == before


def test_narratives_reads_a_worlds_autobiographical_memory_and_no_other(env, pg_url):  # noqa: F811
    """Seed 003: recall can read autobiographical memory; a world's read reaches no other world's."""
    from datetime import date

    from memory_pipeline.lib.store import upsert
    from memory_pipeline.sleep.autobiography import write_narratives
    from memory_pipeline.sleep.narrative import Narrative, NarrativeChange
    from memory_pipeline.sleep.tables import self_blocks

    def made(nid, world, text, kind="event", status="active"):
        n = Narrative(nid, world, text, 4, kind, "2026 春", ["f-1"], date(2026, 3, 2), status=status)
        return NarrativeChange("create", n)

    store = Store(pg_url)
    _ingest(env, [event(w, f"{w}-c", "user", "hi", cst(2026, 3, 2, 9)) for w in ("w1", "w2", "w3")])
    with store.begin() as conn:
        write_narratives(
            conn,
            [
                made("a-1", "w1", "第一次独自搬家", kind="milestone"),
                made("a-2", "w1", "一件后来被取代的小事", status="deprecated"),
                made("b-1", "w2", "另一个世界的秘密"),
            ],
        )
        upsert(
            conn,
            self_blocks,
            [{"world_id": "w1", "name": "autobiography_summary", "content": "今年春天独自搬了家", "updated_by": "x"}],
            keys=["world_id", "name"],
        )
    shown = runner.invoke(app, ["sleep", "narratives", "w1"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "第一次独自搬家" in shown.output and "milestone" in shown.output
    assert "一件后来被取代的小事" not in shown.output and "另一个世界的秘密" not in shown.output
    assert "autobiography_summary: 今年春天独自搬了家" in shown.output
    every = runner.invoke(app, ["sleep", "narratives", "w1", "--all"], terminal_width=200)
    assert "一件后来被取代的小事" in every.output and "deprecated" in every.output
    assert "另一个世界的秘密" not in every.output
    none = runner.invoke(app, ["sleep", "narratives", "w3"])
    assert none.exit_code == 0 and "autobiography_summary: (none yet)" in none.output
    bad = runner.invoke(app, ["sleep", "narratives", "../x"])
    assert bad.exit_code == 2 and "field 'world_id'" in bad.output


def test_conversation_summarize_exits_1_when_a_summary_failed(env, pg_url, monkeypatch):  # noqa: F811
    _ingest(env, conversation("w1", "c1", cst(2026, 3, 2, 9), [f"我喜欢爬山 {i}" for i in range(30)]))
    assert runner.invoke(app, ["conversation", "init-status", "c1", "done"]).exit_code == 0
    monkeypatch.setenv("MEMORY_LLM_MODEL", "openai/unreachable")
    monkeypatch.setenv("MEMORY_LLM_API_BASE", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEMORY_LLM_MAX_RETRIES", "0")
    result = runner.invoke(app, ["conversation", "summarize"])
    assert result.exit_code == 1 and "1 due, 0 written, 1 failed" in result.output, result.output
    assert " DEGRADED: 1 due" in result.output and " ok:" not in result.output  # it said "ok" and exited 1
    assert "conversation status" in result.output


def test_conversation_summarize_stops_at_the_breaker_with_its_one_line(store, ingest, redis_url, tmp_path):
    """`conversation summarize` in its own process, the provider failing every request: 5 failed
    summaries, the sixth refused by the breaker; its line printed once (no Dagster stack), exit 1,
    the conversations not done named. The next run, the provider back, does exactly those."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from memory_pipeline_tests.fake_openai import FakeOpenAI
    from memory_pipeline_tests.integration.test_conversation import provider_outcomes, seven_due, summary_call

    seven_due(store, ingest)
    command = [str(Path(sys.executable).parent / "memory-pipeline"), "conversation", "summarize"]
    with FakeOpenAI() as fake:
        for _ in range(50):
            fake.push("status", 500)
        env = {
            **os.environ,
            "MEMORY_DATABASE_URL": store.url,
            "REDIS_URL": redis_url,
            "DAGSTER_HOME": str(tmp_path / "dagster_home"),
            "MEMORY_LLM_MODEL": "openai/fake-model",
            "MEMORY_LLM_API_BASE": fake.api_base,
            "MEMORY_LLM_API_KEY": "k",
            "MEMORY_LLM_MAX_RETRIES": "0",
            "MEMORY_LLM_BREAKER_FAILURES": "5",
        }
        # A deadline, not a timing: each run is a fresh CLI process (Dagster, dbt and litellm
        # imported), which a loaded 2-core machine has taken over 300 s to finish.
        down = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        said = down.stdout + down.stderr
        assert down.returncode == 1, said
        assert len(fake.requests) == 5
        assert "FAILED: 7 due, 0 written, 5 failed, 2 not done" in down.stdout
        assert down.stderr.splitlines()[-1] == (
            f"LLM provider openai/fake-model at {fake.api_base} is failing: "
            "InternalServerError: litellm.InternalServerError: InternalServerError: OpenAIException - scripted 500 "
            "(5 consecutive failures); stopping: the conversations not done stay due for the next run"
        ), said
        assert said.count("is failing:") == 1 and "Traceback" not in said, said
        assert provider_outcomes(store) == {"error": 5, "breaker_open": 1}

        fake.script.clear()
        fake.tool_answer = lambda body: summary_call()[1]
        again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        assert again.returncode == 0 and "2 due, 2 written, 0 failed" in again.stdout, again.stdout + again.stderr
        assert len(fake.requests) == 5 + 2
    assert provider_outcomes(store) == {"error": 5, "breaker_open": 1, "ok": 2}


def test_a_rebuild_refused_for_its_settings_restores_nothing(env, pg_url, monkeypatch):  # noqa: F811
    """A setting the run refuses, or sleep turned off: the rebuild restored memory and turned every
    day stale before the run refused (or ran nothing). Both are refused before the restore now."""
    _spicy_days(env)

    def state() -> tuple:
        with Store(pg_url).connect() as conn:
            runs = sorted(
                conn.execute(
                    select(sleep_runs.c.world_id, sleep_runs.c.stage, sleep_runs.c.day, sleep_runs.c.status)
                ).all()
            )
        return _active(pg_url), runs

    before = state()
    config = env / "bad.yaml"
    config.write_text("memory:\n  sleep:\n    pinned_top: -5\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(config))
    bad = runner.invoke(app, ["sleep", "rebuild", "2026-03-02"])
    assert bad.exit_code != 0 and "memory.sleep.pinned_top" in str(bad.exception), (bad.output, bad.exception)
    assert "restored semantic memory" not in bad.output and state() == before
    config.write_text("memory:\n  sleep:\n    enabled: false\n", encoding="utf-8")
    off = runner.invoke(app, ["sleep", "rebuild", "2026-03-02"])
    assert off.exit_code == 1 and "memory.sleep.enabled is false: a rebuild would restore memory" in off.output
    assert state() == before


def test_sleep_status_counts_narratives_by_status(env, store):  # noqa: F811
    """Narratives a rebuild deprecated were counted with the active ones ("35" for 3 active)."""
    from datetime import date

    from memory_pipeline.sleep.tables import autobiographical_memories

    rows = [
        {
            "memory_id": f"a-{i}",
            "world_id": "w1",
            "narrative": f"story {i}",
            "significance": 1,
            "kind": "event",
            "source_memory_ids": [],
            "status": status,
            "created_day": date(2026, 3, 2),
        }
        for i, status in enumerate(["active", "deprecated", "deprecated"])
    ]
    with store.begin() as conn:
        conn.execute(autobiographical_memories.insert(), rows)
    said = runner.invoke(app, ["sleep", "status"], terminal_width=300).output
    counted = {ln.split("│")[1].strip(): ln.split("│")[2].strip() for ln in said.splitlines() if "narratives" in ln}
    assert counted == {"autobiographical narratives active": "1", "autobiographical narratives deprecated": "2"}, said


def test_days_are_read_as_yyyy_mm_dd_and_messages_name_the_argument_given(env, store):  # noqa: F811
    """fromisoformat also reads 20260302 and 2026-W09-1: `sleep diff` took them, and `sleep
    backfill --from 2026-W49-1` compared the texts ("--to 2026-12-02 is before --from 2026-W49-1").
    A rebuild without --through was told about --through."""
    for args, said in (
        (["diff", "w1", "20260302", "2026-03-03"], "before '20260302': not a date (YYYY-MM-DD)"),
        (["backfill", "--from", "2026-W09-1", "--to", "2026-03-02"], "--from '2026-W09-1': not a date (YYYY-MM-DD)"),
        (["rebuild", "2021-01-01"], "empty range: day 2021-01-01 is before the first partition"),
    ):
        result = runner.invoke(app, ["sleep", *args])
        flat = " ".join(result.output.split())
        assert result.exit_code == 2 and said in flat, (args, flat)
        assert "--through" not in flat, flat


def test_a_long_arc_block_that_names_no_self_block_is_a_warning(env, pg_url, monkeypatch):  # noqa: F811
    """memory.conversation.long_arc_block naming no self block was taken without a word: every
    summary was written without a long arc. The run says so (and still writes them)."""
    _ingest(env, conversation("w1", "c1", cst(2026, 3, 2, 9), [f"我喜欢爬山 {i}" for i in range(30)]))
    config = env / "arc.yaml"
    config.write_text("memory:\n  conversation:\n    long_arc_block: nosuchblock\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(config))
    assert runner.invoke(app, ["conversation", "init-status", "c1", "done"]).exit_code == 0
    result = runner.invoke(app, ["conversation", "summarize"])
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and "1 due, 1 written, 0 failed" in said, said
    assert "memory.conversation.long_arc_block 'nosuchblock' is none of memory.sleep.self_blocks" in said, said
