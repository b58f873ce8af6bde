"""The command line an operator uses: ingest errors, operations with capped ranges, the read path."""

import json

import pytest
from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline_tests.conftest import conversation, cst, event

runner = CliRunner()


@pytest.fixture
def env(monkeypatch, pg_url, redis_url, tmp_path):
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return tmp_path


def _jsonl(path, events):
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_ingest_reports_bad_lines_and_writes_nothing(env):
    bad = _jsonl(
        env / "bad.jsonl",
        [
            event("w1", "c1", "user", "hi", cst(2026, 7, 18, 6)),
            {**event("w1", "c1", "robot", "x", cst(2026, 7, 18, 7)), "message_id": "r"},
        ],
    )
    result = runner.invoke(app, ["ingest", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:2: field 'role': unknown role 'robot'" in result.output.replace("\n", "")
    good = _jsonl(env / "good.jsonl", conversation("w1", "c1", cst(2026, 7, 18, 6), ["hello garden", "tomatoes!"]))
    result = runner.invoke(app, ["ingest", str(good)])
    assert result.exit_code == 0 and "2 inserted" in result.output
    assert "0 inserted" in runner.invoke(app, ["ingest", str(good)]).output


def test_operate_and_read_from_the_command_line(env):
    events = (
        conversation("w1", "a", cst(2026, 7, 17, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "v", cst(2026, 7, 18, 6, 2), ["viewer talk", "viewer reply"])
        + conversation("w1", "p", cst(2026, 7, 18, 6, 5), ["deploy broke", "deploy fixed"])
    )
    assert runner.invoke(app, ["ingest", str(_jsonl(env / "e.jsonl", events))]).exit_code == 0
    result = runner.invoke(app, ["rebuild", "day", "--from", "2026-07-01", "--to", "2099-12-31"])
    assert result.exit_code == 0, result.output
    assert "capped at" in result.output and "1 run(s)" in result.output
    result = runner.invoke(app, ["backfill", "day", "--from", "2026-07-01", "--to", "2026-07-20"])
    assert "already materialized and skipped" in result.output and "0 partition(s) requested" in result.output
    assert runner.invoke(app, ["regenerate", "day", "2026-07-17"]).exit_code == 0
    bad_key = runner.invoke(app, ["regenerate", "month", "2026-13"])
    assert bad_key.exit_code == 2 and "is not a month partition key" in bad_key.output
    open_month = runner.invoke(app, ["regenerate", "day", "2099-01-01"])  # never a future partition
    assert open_month.exit_code == 2 and "empty range" in open_month.output
    assert (
        runner.invoke(
            app,
            ["rebuild", "chunks", "--from", "2026-07-18", "--to", "2026-07-18", "--as-of", "2026-07-18T07:00:00+08:00"],
        ).exit_code
        == 0
    )
    assert runner.invoke(app, ["system-rolls", "--as-of", "2026-07-18T07:00:00+08:00"]).exit_code == 0
    out = runner.invoke(
        app, ["read", "--world", "w1", "--conversation", "v", "--at", "2026-07-18T07:00:00+08:00", "--json"]
    )
    assert out.exit_code == 0, out.output
    view = json.loads(out.output)
    assert view["system_block"].startswith("<temporal_summary>\nPast days: ")
    peers = [m for m in view["timeline"] if m.get("name") == "temporal_summary_peers"]
    assert [m["at"] for m in peers] == ["2026-07-18T06:30:00+08:00"]
    assert runner.invoke(app, ["read", "--world", "w1", "--at", "2026-07-18T07:00"]).exit_code == 2
    status = runner.invoke(app, ["status"])
    assert "no_sessions" in status.output and "temporal_day_s" in status.output
