"""Seed 004 on the command line against PostgreSQL: types, append (text, JSON, JSONL file), windows,
recall, summary, summarize, jobs and status; bad input exits 2 naming the field and writes nothing."""

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline.tower.tables import tower_entries
from memory_pipeline_tests.fake_openai import FakeOpenAI

runner = CliRunner()


@pytest.fixture
def env(monkeypatch, pg_url, redis_url, tmp_path):
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return tmp_path


def run(*args):
    return runner.invoke(app, ["tower", *args])


def test_the_tower_from_the_command_line(env, store):
    assert (
        run("types", "create", "tool/errors", "--chain", "1h,day,week", "--summaries", "--retention", "90d").exit_code
        == 0
    )
    listed = run("types", "list")
    assert "tool/errors" in listed.output and "90d (declared)" in listed.output and "worklog" in listed.output
    bad = run("types", "create", "../etc")
    assert bad.exit_code == 2 and "field 'name'" in bad.output and "Traceback" not in bad.output
    assert (
        run("append", "tool/errors", "--text", "disk full", "--at", "2026-01-05T10:00:00+08:00", "--id", "e1").exit_code
        == 0
    )
    again = run("append", "tool/errors", "--text", "disk full", "--at", "2026-01-05T10:00:00+08:00", "--id", "e1")
    assert "0 inserted, 1 already present" in again.output
    lines = env / "errors.jsonl"
    lines.write_text(
        json.dumps({"content": {"code": 28}, "at": "2026-01-05T11:00:00+08:00"})
        + "\n"
        + json.dumps({"content": "x", "id": "bad id!"})
        + "\n",
        encoding="utf-8",
    )
    refused = run("append", "tool/errors", "--file", str(lines))
    assert refused.exit_code == 2 and "errors.jsonl:2: field 'id'" in refused.output
    with store.connect() as conn:
        assert conn.execute(select(func.count()).select_from(tower_entries)).scalar_one() == 1
    lines.write_text(json.dumps({"content": {"code": 28}, "at": "2026-01-05T11:00:00+08:00"}) + "\n", encoding="utf-8")
    assert "1 inserted" in run("append", "tool/errors", "--file", str(lines)).output

    recall = run("recall", "tool/errors", "-g", "day", "-a", "2026-01-05")
    assert recall.exit_code == 0 and '"total_entries": 0' in recall.output  # windows not materialized yet
    assert '"entries_not_in_view": 2' in recall.output  # and the read says so
    summarized = run("summarize", "tool/errors", "-g", "day", "-a", "2026-01-05")
    assert summarized.exit_code == 0 and '"state": "succeeded"' in summarized.output
    summary = run("summary", "tool/errors", "-g", "day", "-a", "2026-01-05")
    assert '"state": "found"' in summary.output and '"clippedEntries": 0' in summary.output
    assert '"kind": "summarize"' in run("jobs").output
    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0 and "Time tower per memory type" in status.output and "tool/errors" in status.output
    open_window = run("summarize", "tool/errors", "-g", "day", "-a", "2099-01-01")
    assert open_window.exit_code == 2 and "is still open" in open_window.output


def test_mcp_command_binds_127_0_0_1_8900_unless_told(env):
    from memory_pipeline.tower.config import TowerConfig

    help_text = runner.invoke(app, ["mcp", "--help"]).output
    assert "--host" in help_text and "--port" in help_text and "streamable HTTP" in help_text
    assert (TowerConfig().mcp_host, TowerConfig().mcp_port) == ("127.0.0.1", 8900)


def _flat(output: str) -> str:
    return " ".join(output.split())  # the console wraps long lines at the terminal width


def test_status_prints_the_guardrail_defaults_and_a_configured_change(env, store, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG_FILE", raising=False)
    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0
    # The decision for seed 004: tick every 10 min, settle 5 min, backoff doubling from 10 min, given up
    # after 5 consecutive failures, at most 20 commits per round.
    assert (
        "guardrails (memory.tower): semantic tick every 10 min, settle 5 min, backoff doubling from 10 min, "
        "given up after 5 failures, at most 20 commits per round; structural refresh every 60 s; "
        "input budget 4000 tokens"
    ) in _flat(status.output)
    config = env / "memory.yaml"
    config.write_text("memory:\n  tower:\n    semantic_tick_minutes: 15\n    give_up_after: 3\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(config))
    changed = _flat(runner.invoke(app, ["status"]).output)
    assert "semantic tick every 15 min, settle 5 min" in changed and "given up after 3 failures" in changed


def test_a_failed_summarize_job_exits_non_zero_and_status_lists_the_window_as_retrying(env, store, monkeypatch):
    with FakeOpenAI() as fake:
        fake.push("status", 400).push("status", 400)
        monkeypatch.setenv("MEMORY_LLM_MODEL", "openai/fake")
        monkeypatch.setenv("MEMORY_LLM_API_BASE", fake.api_base)
        monkeypatch.setenv("MEMORY_LLM_API_KEY", "k")
        monkeypatch.setenv("MEMORY_LLM_MAX_RETRIES", "0")
        monkeypatch.delenv("MEMORY_CONFIG_FILE", raising=False)
        assert (
            run("append", "worklog", "--json", '{"project": "a"}', "--at", "2026-01-05T10:00:00+08:00").exit_code == 0
        )
        failed = run("summarize", "worklog", "-g", "day", "-a", "2026-01-05")
        assert failed.exit_code == 1 and '"state": "failed"' in failed.output
        assert "1 of 1 job(s) failed" in failed.output
        missed = run("summary", "worklog", "-g", "day", "-a", "2026-01-05", "--summarize-on-miss")
        assert missed.exit_code == 1 and '"state": "failed"' in missed.output
    status = _flat(runner.invoke(app, ["status"]).output)
    assert "retrying worklog day 2026-01-05 [a]: failure 2 of 5, next attempt from" in status
    # A time an operator reads: whole seconds in the configured zone (never microseconds).
    import re

    assert re.search(r"next attempt from \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00 by", status), status
    assert "by the next explicit call" in status
    for name in ("MEMORY_LLM_MODEL", "MEMORY_LLM_API_BASE", "MEMORY_LLM_API_KEY"):
        monkeypatch.delenv(name)
    ok = run("summarize", "worklog", "-g", "day", "-a", "2026-01-05")  # the offline model
    assert ok.exit_code == 0 and '"state": "succeeded"' in ok.output


def test_a_backfill_that_leaves_a_summary_window_failed_names_its_warn_check_on_the_run_line(env, store, monkeypatch):
    """The run succeeds by design (a window failing alone backs off) and its partition is
    materialized, but its check tower_summaries_complete (WARN) fails: the run line names the check
    and the warning, and the command exits 0 as for a warning (only an ERROR check exits 1). The
    backfill after it (the offline model) redoes the window, and its line is ok."""
    assert run("append", "worklog", "--json", '{"project": "a"}', "--at", "2026-01-05T10:00:00+08:00").exit_code == 0
    monkeypatch.delenv("MEMORY_CONFIG_FILE", raising=False)
    days = ["backfill", "tower_day_summaries", "--from", "2026-01-05", "--to", "2026-01-05"]
    with FakeOpenAI() as fake:
        fake.push("status", 400)
        monkeypatch.setenv("MEMORY_LLM_MODEL", "openai/fake")
        monkeypatch.setenv("MEMORY_LLM_API_BASE", fake.api_base)
        monkeypatch.setenv("MEMORY_LLM_API_KEY", "k")
        monkeypatch.setenv("MEMORY_LLM_MAX_RETRIES", "0")
        failed = runner.invoke(app, days)
    said = _flat(failed.output)
    assert failed.exit_code == 0, said
    assert (
        "ok, 1 check(s) failed: tower_summaries_complete 2026-01-05 (WARN); 1 warning(s): tower_day_summaries" in said
    )
    assert "did not pass" not in said
    for name in ("MEMORY_LLM_MODEL", "MEMORY_LLM_API_BASE", "MEMORY_LLM_API_KEY"):
        monkeypatch.delenv(name)
    redone = runner.invoke(app, days)
    said = _flat(redone.output)
    assert redone.exit_code == 0, said
    assert "2026-01-05: re-run, 1 window failed" in said and ") ok" in said and "check(s) failed" not in said


def test_dates_out_of_range_are_one_line_refusals_naming_the_field(env):
    for args in (("-g", "week", "-a", "9999-12-31"), ("-g", "day", "-a", "0001-01-01")):
        out = run("recall", "worklog", *args)
        assert out.exit_code == 2 and "Traceback" not in out.output
        assert _flat(out.output).startswith("field 'anchor': is out of range (supported: 1970-01-01 to 9998-12-31 UTC)")


def test_an_empty_chain_or_group_field_given_is_refused_not_taken_as_the_default(env, store, tmp_path):
    for args, said in (
        (("--chain", ""), "field 'chain[0]': empty (one of"),
        (("--chain", "day,,week"), "field 'chain[1]': empty (one of"),
        (("--group-field", ""), "--group-field: empty"),
    ):
        out = run("types", "create", "proj/empty", *args)
        assert out.exit_code == 2 and said in _flat(out.output), (args, out.output)
    assert "proj/empty" not in run("types", "list").output
    # an unknown key of an entry is named as the other fields are, once quoted
    assert run("types", "create", "proj/keys").exit_code == 0
    lines = tmp_path / "keys.jsonl"
    lines.write_text('{"content": "x", "extra": 1}\n', encoding="utf-8")
    out = run("append", "proj/keys", "--file", str(lines))
    assert out.exit_code == 2 and "keys.jsonl:1: field 'extra': unknown field" in _flat(out.output), out.output


def test_summary_pages_from_the_command_line(env, store):
    for p in ("a", "b", "c"):
        run("append", "worklog", "--json", json.dumps({"project": p}), "--at", "2026-01-05T10:00:00+08:00")
        run("summarize", "worklog", "-g", "day", "-a", "2026-01-05", "--group", p)
    first = json.loads(run("summary", "worklog", "-g", "day", "-a", "2026-01-05", "--limit", "2").output)
    assert [s["group"] for s in first["summaries"]] == ["a", "b"] and first["total_summaries"] == 3
    rest = json.loads(
        run("summary", "worklog", "-g", "day", "-a", "2026-01-05", "--cursor", first["next_cursor"]).output
    )
    assert [s["group"] for s in rest["summaries"]] == ["c"] and rest["next_cursor"] is None


@pytest.mark.parametrize("with_redis", [True, False], ids=["redis", "no-redis"])
def test_the_mcp_banner_is_printed_once_the_port_accepts_connections(env, pg_url, redis_url, with_redis):
    """Without REDIS_URL the server said nothing, and every prompt block answered "ok" with no
    system block (the rolls are cached in Redis): it says so before its banner."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = Path(sys.executable).with_name("memory-pipeline")
    child_env = {**os.environ, "MEMORY_DATABASE_URL": pg_url, "REDIS_URL": redis_url, "DAGSTER_HOME": str(env)}
    if not with_redis:
        del child_env["REDIS_URL"]
    proc = subprocess.Popen([str(cli), "mcp", "--port", str(port)], stderr=subprocess.PIPE, text=True, env=child_env)
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
        deadline = time.monotonic() + 120
        before = []
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line.startswith("MCP endpoint"):
                break
            before.append(line)
        # The moment the banner is out, a client connects (no retry).
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        assert line.strip() == f"MCP endpoint: http://127.0.0.1:{port} (and /mcp); Ctrl-C stops it"
        said = " ".join(" ".join(before).split())
        warned = "no REDIS_URL: temporal/prompt_block's system block is made of the past days" in said
        assert warned != with_redis, said
        assert not warned or said.endswith("Set REDIS_URL to the Redis they are built in"), said
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_append_to_a_materialized_closed_day_says_its_windows_were_refreshed(env, store):
    """docs/tower.md: an entry appended to an already materialized closed day updates its windows
    at once and the answer lists the day. The command's line said only received / inserted."""
    first = run("append", "worklog", "--text", "kiln fired", "--at", "2026-01-05T10:00:00+08:00", "--id", "k1")
    assert first.exit_code == 0 and "refreshed" not in first.output, first.output  # nothing materialized yet
    built = runner.invoke(app, ["backfill", "tower_windows", "--from", "2026-01-05", "--to", "2026-01-05"])
    assert built.exit_code == 0, built.output
    late = run("append", "worklog", "--text", "kiln cooled", "--at", "2026-01-05T16:00:00+08:00", "--id", "k2")
    said = " ".join(late.output.split())
    assert late.exit_code == 0 and "1 inserted" in said, said
    assert "; closed day(s) already materialized, their windows refreshed: 2026-01-05 (" in said, said


def test_backfill_of_the_day_windows_reruns_a_day_whose_messages_came_late(env, store):
    """A message of a closed day ingested after its windows were materialized (fed into the
    activity type): backfill's mode "changed" re-runs that day, naming why, though it is long past
    the late-data sensor's 31 days; a day with nothing late is skipped. It skipped every
    materialized day ("tower_windows keeps no record"), though the sensor's record was there."""
    from memory_pipeline_tests.conftest import conversation, cst, event

    path = env / "e.jsonl"
    path.write_text(
        "".join(json.dumps(e) + "\n" for e in conversation("w1", "c1", cst(2026, 1, 5, 9), ["kiln day", "it fired"]))
    )
    assert runner.invoke(app, ["ingest", str(path)]).exit_code == 0
    built = runner.invoke(app, ["backfill", "tower_windows", "--from", "2026-01-05", "--to", "2026-01-06"])
    assert built.exit_code == 0, built.output
    quiet = " ".join(
        runner.invoke(app, ["backfill", "tower_windows", "--from", "2026-01-05", "--to", "2026-01-06"]).output.split()
    )
    assert "0 partition(s) requested, 2 already materialized and skipped" in quiet, quiet
    late = env / "late.jsonl"
    late.write_text(json.dumps(event("w1", "c1", "user", "the kiln cracked", cst(2026, 1, 5, 18))) + "\n")
    assert runner.invoke(app, ["ingest", str(late)]).exit_code == 0
    again = runner.invoke(app, ["backfill", "tower_windows", "--from", "2026-01-05", "--to", "2026-01-06"])
    said = " ".join(again.output.split())
    assert again.exit_code == 0, said
    assert "1 partition(s) requested, 1 already materialized and skipped" in said, said
    assert "2026-01-05: re-run, late data: 1 entry arrived after its windows were materialized" in said, said
