"""The analyst export and the run console as an operator sees them: a failed export names its
cause, skips the stages after it and leaves no private copy; `--from` alone is one day; an LLM
failure is one line, not a traceback."""

from __future__ import annotations

import errno
import hashlib
import json

import pytest
from typer.testing import CliRunner

from memory_pipeline.analyst import files as files_module
from memory_pipeline.cli import app
from memory_pipeline_tests.conftest import conversation, cst
from memory_pipeline_tests.fake_openai import FakeOpenAI

runner = CliRunner()
DAY = "2026-07-17"


@pytest.fixture
def env(monkeypatch, pg_url, redis_url, tmp_path):
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("MEMORY_DUCKDB_PATH", str(tmp_path / "out" / "analytics.duckdb"))
    events = conversation("w1", "a", cst(2026, 7, 17, 9), ["tomatoes planted", "tomatoes watered"])
    path = tmp_path / "e.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert runner.invoke(app, ["ingest", str(path)]).exit_code == 0
    return tmp_path


def _md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _full_copy(src, dst):
    with open(src, "rb") as a, open(dst, "wb") as b:
        b.write(a.read(4096))
    raise OSError(errno.ENOSPC, "No space left on device")


def _full_parquet(parquet, write, target):
    raise OSError(errno.ENOSPC, "No space left on device")


def _full_at_publish(path):  # every Parquet file written, then the DuckDB file cannot be published
    raise OSError(errno.ENOSPC, "No space left on device")


def _parquet(out) -> dict[str, str]:
    return {str(p.relative_to(out)): _md5(p) for p in sorted((out / "analytics_parquet").rglob("*.parquet"))}


@pytest.mark.parametrize(
    "where",
    [
        (files_module.shutil, "copyfile", _full_copy),
        (files_module.ParquetFiles, "write", _full_parquet),
        (files_module, "_fsync", _full_at_publish),
    ],
)
def test_a_failed_export_names_its_cause_skips_the_rest_and_leaves_nothing_behind(env, monkeypatch, where):
    out = env / "out"
    first = runner.invoke(app, ["export", "--from", DAY, "--no-marts"])  # --from alone: that one day
    assert first.exit_code == 0, first.output
    assert f"export {DAY}..{DAY}: 1 day(s)" in first.output
    assert f"exports              {DAY}..{DAY}: 1 partition(s) in one run " in first.output
    assert " of analyst_export_job (" in first.output  # the job the UI lists the run under
    published, parquet = _md5(out / "analytics.duckdb"), _parquet(out)
    assert parquet
    events = conversation("w1", "b", cst(2026, 7, 17, 11), ["compost turned"])  # the next export has more
    (env / "more.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert runner.invoke(app, ["ingest", str(env / "more.jsonl")]).exit_code == 0

    monkeypatch.setattr(*where)  # the disk fills up: the private copy, or a Parquet file
    result = runner.invoke(app, ["export", "--from", DAY])
    lines = result.output.splitlines()
    assert result.exit_code == 1, result.output
    failed = [line for line in lines if "FAILED" in line]
    assert len(failed) == 1 and "exports" in failed[0], result.output
    assert "OSError: [Errno 28] No space left on device" in failed[0]  # the cause, on the summary line
    assert any("marts" in line and f"skipped (exports {DAY}..{DAY} failed)" in line for line in lines), result.output
    assert any("month_exports" in line and "skipped" in line for line in lines), result.output
    assert "Traceback" not in result.output and "Stack Trace" not in result.output
    assert "schema.table" not in result.output  # the old table is not listed as if current
    assert "holds the runs marked ok above and the steps a failed run finished" in result.output
    assert "finished before it failed" not in result.output  # the export is one step: none finished
    assert _md5(out / "analytics.duckdb") == published
    assert _parquet(out) == parquet  # the Parquet files go out with the DuckDB file or not at all
    assert not (out / "analytics.duckdb.next").exists() and not (out / "analytics.duckdb.next.wal").exists()
    parquet_tmp = out / "analytics_parquet" / ".tmp"
    assert not parquet_tmp.exists() or not list(parquet_tmp.iterdir())


def test_a_marts_run_that_fails_at_the_picture_names_the_dbt_builds_it_published(env, monkeypatch):
    from memory_pipeline.analyst import reports

    def full(_files):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reports, "write_report", full)
    result = runner.invoke(app, ["export", "--from", DAY])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    (failed,) = [i for i, line in enumerate(lines) if "FAILED" in line]
    assert lines[failed].lstrip().startswith("marts") and "No space left on device" in lines[failed]
    # The dbt builds ended before the picture's step and published the file: said, not denied.
    done = lines[failed + 1]
    assert "finished before it failed, and published: " in done, result.output
    assert "analyst_dbt_models" in done and "analyst_dbt_daily" in done and "coverage_report" not in done
    assert "holds the runs marked ok above and the steps a failed run finished" in result.output


def test_an_export_past_today_says_the_days_it_runs_and_no_month_the_user_did_not_type(env):
    from datetime import datetime, timedelta

    from memory_pipeline_tests.conftest import CST

    for _ in range(2):  # a run that spans CST midnight caps at another day: the second one does not
        today = datetime.now(CST).date()
        start = today.replace(day=1) - timedelta(days=1)  # the last day of a closed month
        after = today + timedelta(days=10)
        result = runner.invoke(app, ["export", "--from", start.isoformat(), "--to", after.isoformat(), "--no-marts"])
        if datetime.now(CST).date() == today:
            break
    assert result.exit_code == 0, result.output
    days = (today - start).days + 1
    assert f"export {start}..{today}: {days} day(s), " in result.output  # not ..{after}
    assert f"--to {after} capped at {today}" in " ".join(result.output.split())
    month = f"{start:%Y-%m}"
    assert f"month_exports        {month}..{month}: 1 partition(s)" in result.output
    assert f"--to {today:%Y-%m} capped" not in result.output  # a month the user never typed


def test_a_file_that_is_not_duckdb_is_refused_in_one_line(env):
    path = env / "out" / "analytics.duckdb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not a database\n" * 1000)
    result = runner.invoke(app, ["analytics"])
    assert result.exit_code == 1, result.output
    assert f"{path}: cannot be read as the analyst's DuckDB file (MEMORY_DUCKDB_PATH): " in " ".join(
        result.output.split()
    )
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)  # refused, not raised


def test_an_llm_failure_is_one_line_on_the_console(env, monkeypatch):
    with FakeOpenAI() as server:
        for _ in range(10):
            server.push("status", 500)
        monkeypatch.setenv("MEMORY_LLM_MODEL", "openai/fake-model")
        monkeypatch.setenv("MEMORY_LLM_API_BASE", server.api_base)
        monkeypatch.setenv("MEMORY_LLM_API_KEY", "test")
        monkeypatch.setenv("MEMORY_LLM_MAX_RETRIES", "1")
        result = runner.invoke(app, ["rebuild", "day", "--from", DAY, "--to", DAY])
    assert result.exit_code == 1, result.output
    assert "Stack Trace" not in result.output and "Traceback" not in result.output and 'File "' not in result.output
    flat = result.output.replace("\n", "")
    assert "openai/fake-model failed for day after 2 attempt(s)" in flat and "scripted 500" in flat
    assert "DagsterExecutionStepExecutionError" not in flat  # the cause, not Dagster's wrapper
    assert len(result.output.splitlines()) <= 8, result.output


def test_an_empty_answer_is_a_degraded_run_and_is_asked_again(env, monkeypatch):
    """The provider answers a day's summary with nothing: the seed's empty_summary placeholder is
    written, and the run line says so instead of a plain "ok" (it read as a success, and the empty
    answer, cached, came back on every later run without a call)."""
    with FakeOpenAI() as server:
        monkeypatch.setenv("MEMORY_LLM_MODEL", "openai/fake-model")
        monkeypatch.setenv("MEMORY_LLM_API_BASE", server.api_base)
        monkeypatch.setenv("MEMORY_LLM_API_KEY", "test")
        server.push("ok", "")
        empty = runner.invoke(app, ["regenerate", "day", DAY])
        flat = " ".join(empty.output.split())
        assert empty.exit_code == 0, empty.output
        assert "ok, 1 warning(s): day " + DAY + ": the model answered with nothing for w1: written as" in flat, flat
        again = runner.invoke(app, ["backfill", "day", "--from", DAY, "--to", DAY])  # not "unchanged": asked
        assert again.exit_code == 0 and len(server.requests) == 2, again.output
        assert "warning" not in again.output and " ok" in again.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "2021-12-31"], "--from 2021-12-31 is before the first partition 2022-01-01"),  # no --to given
        (["--from", "2021-12-30", "--to", "2021-12-31"], "--to 2021-12-31 is before the first partition 2022-01-01"),
        (["--from", "2026-7-17"], "--from '2026-7-17' is not a partition key of exports (one such as '"),
    ],
)
def test_a_bad_export_range_names_the_option_given(env, args, message):
    result = runner.invoke(app, ["export", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output.replace("\n", " "), result.output
    assert not (env / "out" / "analytics.duckdb").exists()  # refused before any run
