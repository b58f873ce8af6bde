"""The command line an operator uses: ingest errors, operations with capped ranges, the read path."""

import json
import socket

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline_tests.conftest import conversation, cst, event, locomo_doc, write_locomo

runner = CliRunner()
RANGE = "is out of range (supported: 1970-01-01 to 9998-12-31 UTC)"
GOOD = conversation("w1", "c1", cst(2026, 7, 18, 6), ["hello garden", "tomatoes!"])


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
    assert "before MEMORY_PARTITION_START" not in result.output


def test_ingest_counts_add_up_to_the_lines_and_it_says_what_no_partition_covers(env):
    """A blank line and a line repeating an id of the file were counted in no column; a message
    dated before the first partition was stored without a word, then missing from every asset."""
    one = event("w1", "c1", "user", "hi", cst(2026, 7, 18, 6))
    old = event("w1", "c1", "user", "long ago", cst(2021, 3, 1, 9))
    path = env / "e.jsonl"
    path.write_text(json.dumps(one) + "\n\n" + json.dumps(one) + "\n" + json.dumps(old) + "\n")
    result = runner.invoke(app, ["ingest", str(path)])
    said = result.output.replace("\n", " ")
    assert result.exit_code == 0 and "4 lines, 2 inserted, 0 already present, 0 rejected, 2 blank or repeated" in said
    assert "1 message(s) in the store are dated before MEMORY_PARTITION_START (2022-01-01)" in said, said


def test_skip_bad_counts_a_line_with_several_faults_once_and_lists_each(env):
    """A line with four faults was '4 rejected': the counts of a two-line file added up to five."""
    good = event("w1", "c1", "user", "hi", cst(2026, 7, 18, 6))
    bad = event("w:1", "c1", "bot", "x", cst(2026, 7, 18, 6)) | {"timestamp": "soon", "debug": "x"}
    path = _jsonl(env / "e.jsonl", [good, {**bad, "message_id": "b1"}])
    for counts in (
        "1 inserted, 0 already present, 1 rejected, 1 new",
        "0 inserted, 1 already present, 1 rejected, 0 new",
    ):
        result = runner.invoke(app, ["ingest", "--skip-bad", str(path)])
        said = " ".join(result.output.split())
        assert result.exit_code == 0 and f"e.jsonl: 2 lines, {counts} conversation(s)" in said, said
        assert said.count(":2: field ") == 4, said  # each fault of the line is listed


def test_operate_and_read_from_the_command_line(env, monkeypatch):
    events = (
        conversation("w1", "a", cst(2026, 7, 17, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "v", cst(2026, 7, 18, 6, 2), ["viewer talk", "viewer reply"])
        + conversation("w1", "p", cst(2026, 7, 18, 6, 5), ["deploy broke", "deploy fixed"])
    )
    assert runner.invoke(app, ["ingest", str(_jsonl(env / "e.jsonl", events))]).exit_code == 0
    result = runner.invoke(app, ["rebuild", "day", "--from", "2026-07-01", "--to", "2099-12-31"])
    assert result.exit_code == 0, result.output
    assert "capped at" in result.output and "1 run(s)" in result.output
    said = " ".join(result.output.split())
    assert "partition(s) requested (run whether materialized or not), 1 run(s)" in said, said  # none skipped
    assert "skipped" not in said
    # the range's note comes before the progress bar, which is labelled with the command
    assert said.index("--to 2099-12-31 capped at") < said.index("rebuild day ━"), said
    result = runner.invoke(app, ["backfill", "day", "--from", "2026-07-01", "--to", "2026-07-20"])
    said = " ".join(result.output.split())
    assert "0 partition(s) requested, 20 already materialized and skipped (unchanged per their record)" in said
    assert "backfill day ━" in said and "changed day" not in said, said
    missing = runner.invoke(app, ["backfill", "day", "--from", "2026-07-01", "--to", "2026-07-20", "--missing-only"])
    assert "backfill day (missing only) ━" in " ".join(missing.output.split()), missing.output
    regenerated = runner.invoke(app, ["regenerate", "day", "2026-07-17"])
    assert regenerated.exit_code == 0 and "regenerate day ━" in regenerated.output, regenerated.output
    for command in ("backfill", "rebuild"):  # what the default --from is: years before the data, maybe
        assert "(default: the first partition, MEMORY_PARTITION_START)" in " ".join(
            runner.invoke(app, [command, "--help"]).output.replace("│", " ").split()
        )
    bad_key = runner.invoke(app, ["regenerate", "month", "2026-13"])
    assert bad_key.exit_code == 2 and "is not a partition key of month" in bad_key.output
    open_month = runner.invoke(app, ["regenerate", "day", "2099-01-01"])  # never a future partition
    assert open_month.exit_code == 2 and "empty range: partition 2099-01-01 is after the last day partition" in (
        " ".join(open_month.output.split())
    )
    assert "(no later window has closed yet)" in " ".join(open_month.output.split())
    assert (
        runner.invoke(
            app,
            ["rebuild", "chunks", "--from", "2026-07-18", "--to", "2026-07-18", "--as-of", "2026-07-18T07:00:00+08:00"],
        ).exit_code
        == 0
    )
    # chunks keep no record of what changed since: the line does not say the skipped are unchanged
    again = runner.invoke(app, ["backfill", "chunks", "--from", "2026-07-18", "--to", "2026-07-18"])
    said = " ".join(again.output.split())
    assert again.exit_code == 0 and "unchanged per their record" not in said, said
    assert (
        "chunks: 0 partition(s) requested, 1 already materialized and skipped (chunks keeps no record of what "
        "changed since: `memory-pipeline rebuild chunks --from .. --to ..` re-runs them), 0 run(s)" in said
    )
    rolls = runner.invoke(app, ["system-rolls", "--as-of", "2026-07-18T07:00:00+08:00"])
    assert rolls.exit_code == 0 and "no REDIS_URL" not in rolls.stderr, rolls.output
    # Without REDIS_URL the rolls went to the run's in-process cache and die with it: said (it read "ok")
    with monkeypatch.context() as m:
        m.delenv("REDIS_URL")
        alone = runner.invoke(app, ["system-rolls", "--as-of", "2026-07-18T07:00:00+08:00"])
    assert alone.exit_code == 0 and ": ok" in alone.stdout, alone.output
    assert "no REDIS_URL: the system rolls went to this run's in-process cache and are gone when it exits" in (
        " ".join(alone.stderr.split())
    )
    future = runner.invoke(app, ["system-rolls", "--as-of", "2099-01-01T00:00:00+08:00"])  # capped, said so
    assert future.exit_code == 0 and "is in the future: the runs take now instead" in future.output, future.output
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
    shown = runner.invoke(app, ["read", "--world", "w1", "--at", "2026-07-17T23:00:00.5Z"])  # the same instant
    assert "system prompt segment for w1 at 2026-07-18T07:00:00+08:00 " in shown.output, shown.output
    status = runner.invoke(app, ["status"])
    assert "no_sessions" in status.output and "temporal_day_s" in status.output


def _out(result) -> str:
    return result.output.replace("\n", "")


def _counts(store) -> tuple[int, int, int]:
    with store.connect() as conn:
        return tuple(
            conn.execute(select(func.count()).select_from(t)).scalar_one() for t in (messages, conversations, worlds)
        )


def test_import_locomo_refuses_bad_files_before_writing_any(env, store):
    good = write_locomo(env, locomo_doc(), name="26.json")
    for zone in ("Mars/Olympus", "America", "../etc"):
        result = runner.invoke(app, ["import-locomo", str(good), "--tz", zone])
        assert result.exit_code == 2
        assert f"--tz '{zone}': unknown time zone (an IANA name such as Asia/Shanghai or UTC)" in _out(result)
    bad = write_locomo(env, {**locomo_doc(), "session_1_date_time": None}, name="27.json")
    result = runner.invoke(app, ["import-locomo", str(good), str(bad)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{bad}:$.session_1_date_time: field 'session_1_date_time': missing" in _out(result)
    assert _counts(store) == (0, 0, 0)  # the good file first in line was not written either
    result = runner.invoke(app, ["import-locomo", str(good), "--tz", "UTC"])
    assert result.exit_code == 0 and "6 inserted" in result.output
    assert _counts(store) == (6, 2, 1)


def test_ingest_refusals_print_ids_verbatim(env, store):
    """Rich markup in an id ('[/]' would close a tag) is printed as text, not interpreted."""
    bad = _jsonl(env / "markup.jsonl", [{**event("w[/]1", "c1", "user", "hi", cst(2026, 7, 18, 6)), "message_id": "m"}])
    result = runner.invoke(app, ["ingest", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:1: field 'world_id': character '[' at position 1 is not allowed" in _out(result)
    assert _counts(store) == (0, 0, 0)


def test_bad_options_are_refused_before_anything_runs(env):
    assert runner.invoke(app, ["ingest", str(_jsonl(env / "e.jsonl", GOOD))]).exit_code == 0
    cases = [
        (["read", "--world", "w1", "--at", "garbage"], "--at 'garbage' is not an ISO 8601 datetime"),
        (["read", "--world", "w1", "--at", "0001-01-01T00:00:00+08:00"], f"--at '0001-01-01T00:00:00+08:00' {RANGE}"),
        (["read", "--world", "w1", "--at", "9999-12-31T23:59:00-08:00"], f"--at '9999-12-31T23:59:00-08:00' {RANGE}"),
        (["read", "--world", "w1", "--at", "2026-07-18T07:00"], "--at '2026-07-18T07:00' has no time zone offset"),
        (["read", "--world", "w:1"], "--world 'w:1': character ':' at position 1 is not allowed (ids are 1-128"),
        (["read", "--world", "w1", "--conversation", "c*"], "--conversation 'c*': character '*' at position 1"),
        (["rebuild", "chunks", "--as-of", "notadate"], "--as-of 'notadate' is not an ISO 8601 datetime"),
        (["rebuild", "chunks", "--as-of", "2026-07-18T07:00:00"], "--as-of '2026-07-18T07:00:00' has no time zone"),
        (["system-rolls", "--as-of", "0001-01-01T00:00:00+08:00"], f"--as-of '0001-01-01T00:00:00+08:00' {RANGE}"),
        (["regenerate", "day", "2026-07-17", "--world", "a:b"], "--world 'a:b': character ':' at position 1"),
        (
            ["regenerate", "day", "2026-07-17", "--world", "nobody"],
            "--world 'nobody': no such world, nothing has been ingested for it",
        ),
        (
            ["rebuild", "day", "--from", "2019-01-01", "--to", "2019-12-31"],
            "empty range: --to 2019-12-31 is before the first partition 2022-01-01 "
            "(nothing is partitioned before MEMORY_PARTITION_START)",
        ),
        (["regenerate", "year", "2019"], "empty range: partition 2019 is before the first partition 2022"),
        (["regenerate", "day", "2026-02-30"], "partition '2026-02-30' is not a partition key of day (one such as '"),
        (["backfill", "foo"], "unknown window 'foo' (one of "),
        # the UI's name of the asset (the CLI's target is tower_windows)
        (
            ["backfill", "tower_day_windows"],
            "unknown window 'tower_day_windows': that is the asset of the target 'tower_windows'; give 'tower_windows'",
        ),
        (["backfill", "day", "--from", "2026-1-5"], "--from '2026-1-5' is not a partition key of day (one such as '"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and message in _out(result), (args, result.output)
        assert "run(s)" not in result.output and "Traceback" not in result.output
        assert "━" not in result.output, (args, result.output)  # refused before a progress bar is drawn
    assert not (env / "dagster_home").exists()  # no Dagster instance was even opened
    unknown = runner.invoke(app, ["read", "--world", "nobody", "--at", "2026-07-18T07:00:00+08:00"])
    assert unknown.exit_code == 1 and "no such world 'nobody': nothing has been ingested for it" in _out(unknown)


def test_a_range_starting_before_the_first_partition_starts_there_with_a_note():
    from memory_pipeline import operations

    keys, notes = operations.partition_keys("day", "2019-01-01", "2022-01-02")
    assert keys == ["2022-01-01", "2022-01-02"]
    assert notes == ["--from 2019-01-01 starts at 2022-01-01: nothing is partitioned before MEMORY_PARTITION_START"]
    with pytest.raises(operations.RangeError, match="--as-of 'x' is not an ISO 8601 datetime"):
        operations.materialize("day", "2022-01-01", "2022-01-01", as_of="x")


def test_read_without_redis_says_why_no_roll_is_there(monkeypatch, pg_url, tmp_path):
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    events = conversation("w1", "a", cst(2026, 7, 17, 9), ["tomatoes planted", "tomatoes watered"])
    assert runner.invoke(app, ["ingest", str(_jsonl(tmp_path / "e.jsonl", events))]).exit_code == 0
    result = runner.invoke(app, ["read", "--world", "w1", "--at", "2026-07-18T07:00:00+08:00"])
    assert result.exit_code == 0, result.output
    assert "(no roll cached: the block is skipped)" in result.stdout
    assert "no REDIS_URL: w1's rolls are cached in Redis" in result.stderr.replace("\n", "")
    # with JSON the answer on stdout stays JSON; the hint is on stderr
    as_json = runner.invoke(app, ["read", "--world", "w1", "--at", "2026-07-18T07:00:00+08:00", "--json"])
    assert json.loads(as_json.stdout)["system_block"] == "" and "no REDIS_URL" in as_json.stderr
    # REDIS_URL set but not answering: said so, not that it is unset
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{port}/4")
    down = runner.invoke(app, ["read", "--world", "w1", "--at", "2026-07-18T07:00:00+08:00"])
    said = down.stderr.replace("\n", "")
    assert down.exit_code == 0 and "no REDIS_URL" not in said, down.output
    assert f"Redis at REDIS_URL=redis://127.0.0.1:{port}/4 did not answer: w1's rolls are cached in Redis" in said


def test_a_failed_runs_line_is_one_line_however_long(env):
    """A month whose days were never built fails naming them: the run's line is one line of the
    output (not wrapped at the console's width), its text whole, so a script can read it."""
    events = conversation("w1", "a", cst(2026, 7, 17, 9), ["tomatoes planted", "tomatoes watered"]) + conversation(
        "w2", "b", cst(2026, 7, 18, 9), ["garden plan", "ok"]
    )
    assert runner.invoke(app, ["ingest", str(_jsonl(env / "e.jsonl", events))]).exit_code == 0
    result = runner.invoke(app, ["regenerate", "month", "2026-07"])
    assert result.exit_code != 0
    (line,) = [x for x in result.output.splitlines() if " failed: " in x]
    assert len(line) > 120 and line.endswith("run those day partitions first (or select them in the same launch)")
    assert "failed: month 2026-07: 29 child row(s) missing in 15 day partition(s) 2026-07-17...2026-07-31: " in line
    ranged = runner.invoke(app, ["rebuild", "month", "--from", "2026-06", "--to", "2026-07"])
    (line,) = [x for x in ranged.output.splitlines() if " failed: " in x]
    assert ranged.exit_code == 1 and line.count("failed") == 1, line  # it read "failed 1 of 2 ... failed; ..."
    assert (
        "(2 partition(s), " in line
        and "s) failed: 1 of 2 month partition(s); rows of the others are written: month 2026-07: " in line
    )


def test_status_counts_requests_apart_from_ledger_rows(env, store):
    from datetime import UTC, datetime

    from memory_pipeline.lib.store.tables import llm_ledger

    def row(outcome: str, attempts: int) -> dict:
        return dict(
            at=datetime.now(UTC), asset="temporal_day_summaries", task="day", model="m1", prompt_version="v1",
            tokens_in=0, tokens_out=0, latency_ms=0, attempts=attempts, outcome=outcome, cache_key="k",
        )  # fmt: skip

    rows = [row("ok", 1), row("ok", 3), row("error", 4), row("cache_hit", 0), row("cache_hit", 0)]
    rows += [row("breaker_open", 0)] * 3
    with store.begin() as conn:
        conn.execute(llm_ledger.insert(), rows)
    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    table = {
        cells[2]: cells[3:5]
        for line in status.output.splitlines()
        if (cells := [c.strip() for c in line.strip("│┃ ").split("│")])[0] == "temporal_day_summaries"
    }
    # (ledger rows, requests): retries count as requests; a cache hit or a refusal of the open breaker sends none
    assert table == {"ok": ["2", "4"], "error": ["1", "4"], "cache_hit": ["2", "0"], "breaker_open": ["3", "0"]}
    assert "requests: sent to the model, retries included" in " ".join(status.output.split())


def test_read_says_when_the_viewing_conversation_is_none_of_the_worlds(env):
    """A viewing conversation with no events in the world is read as a new one (an agent's first
    turn), and said so on stderr: a mistyped id, or another world's conversation, read silently as
    a view of that name. The world's own conversation reads with no note."""
    events = GOOD + conversation("w2", "other", cst(2026, 7, 18, 6), ["elsewhere"])
    assert runner.invoke(app, ["ingest", str(_jsonl(env / "e.jsonl", events))]).exit_code == 0
    at = ["--at", "2026-07-18T07:00:00+08:00"]
    own = runner.invoke(app, ["read", "--world", "w1", "--conversation", "c1", *at])
    assert own.exit_code == 0 and "--conversation" not in own.stderr, own.stderr
    for viewer, why in (("nope", "none has been ingested"), ("other", "it belongs to world 'w2'")):
        out = runner.invoke(app, ["read", "--world", "w1", "--conversation", viewer, *at])
        said = " ".join(out.stderr.split())
        assert out.exit_code == 0, out.output
        assert f"--conversation {viewer}: no conversation of world w1 ({why}); read as a new conversation" in said


def test_a_command_that_starts_no_run_loads_neither_dagster_nor_dbt_nor_litellm(tmp_path):
    """`status` (and `--help`) in a process of their own: the warning filters of the console's entry
    point once imported the whole of dagster (0.5 s, half of `status`) for classes dagster_shared
    holds. The command still prints its report."""
    import os
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from memory_pipeline.cli import main\n"
        "sys.argv = ['memory-pipeline', sys.argv[1]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('dagster', 'dagster_dbt', 'dbt', 'litellm')\n"
        "print('loaded:', sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")} | {"MEMORY_DATA_DIR": str(tmp_path)}
    for command in ("status", "--help"):
        done = subprocess.run(
            [sys.executable, "-c", code, command], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        *printed, loaded = done.stdout.splitlines()
        assert loaded == "loaded: []", (command, done.stdout[-500:])
        assert len(printed) > 5, (command, done.stdout)  # its report, or its help
