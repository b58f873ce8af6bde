"""A setting the command cannot use is one line on stderr naming it, never a traceback, and leaves
nothing half-done: the console script itself, in a process of its own, on a fresh data folder."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy import func, select

from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import messages
from memory_pipeline_tests.conftest import REDIS_URL, conversation, cst

CLI = str(Path(sys.executable).with_name("memory-pipeline"))


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MEMORY_") and k not in ("DAGSTER_HOME", "DAGSTER_PG_URL", "REDIS_URL")
    }
    return subprocess.run(
        [CLI, *args],
        env={**base, "MEMORY_DATA_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_bad_time_zone_is_one_line_and_leaves_the_new_store_migratable(tmp_path):
    bad = _run(tmp_path, "status", MEMORY_TIMEZONE="Mars/Base")
    assert bad.returncode == 2, bad.stderr
    assert _lines(bad.stderr) == ["MEMORY_TIMEZONE: unknown time zone 'Mars/Base'"]
    # the migrations that need the zone stopped before their DDL (on SQLite each ALTER commits)
    good = _run(tmp_path, "status")
    assert good.returncode == 0, good.stderr
    assert "store: 0 worlds" in good.stdout


def test_a_store_of_another_time_zone_is_one_line_naming_both_before_any_write_or_run(tmp_path):
    """The store was ingested under the default zone (it records Asia/Shanghai); under another, an
    ingest, a status and a backfill are each one line (exit 2), no message is added and no run is
    started; `db current` answers under any zone and names the store's."""

    def write(name: str, hour: int) -> Path:
        path = tmp_path / name
        rows = conversation("w1", "c1", cst(2026, 1, 5, hour), ["hi", "hello", "how are you"])
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    assert _run(tmp_path, "ingest", str(write("a.jsonl", 9))).returncode == 0
    said = "MEMORY_TIMEZONE='Europe/Berlin', but this store's calendar is 'Asia/Shanghai' (recorded "
    for args in (
        ("ingest", str(write("b.jsonl", 10))),
        ("status",),
        ("backfill", "day", "--from", "2026-01-05", "--to", "2026-01-05"),
    ):
        bad = _run(tmp_path, *args, MEMORY_TIMEZONE="Europe/Berlin")
        assert bad.returncode == 2, (args, bad.stdout, bad.stderr)
        assert len(_lines(bad.stderr)) == 1 and bad.stderr.startswith(said), (args, bad.stderr)
    assert not (tmp_path / "dagster_home").exists()
    with Store(f"sqlite:///{tmp_path / 'memory.sqlite'}").connect() as conn:
        assert conn.execute(select(func.count()).select_from(messages)).scalar() == 3
    assert _run(tmp_path, "status").returncode == 0
    where = _run(tmp_path, "db", "current", MEMORY_TIMEZONE="Europe/Berlin")
    assert where.returncode == 0, where.stderr
    assert "calendar zone: Asia/Shanghai (recorded " in where.stdout


def test_a_store_that_does_not_answer_is_one_line_naming_the_variable_without_its_password(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = _run(tmp_path, "status", MEMORY_DATABASE_URL=f"postgresql://postgres:hunter22@127.0.0.1:{port}/test")
    assert down.returncode == 1, down.stderr
    said = " ".join(down.stderr.split())
    assert said.startswith(f"the store (MEMORY_DATABASE_URL=postgresql://postgres:***@127.0.0.1:{port}/test)"), said
    assert "did not answer" in said and "hunter22" not in said and "Traceback" not in said


def test_a_bad_temporal_setting_is_refused_before_any_run(tmp_path):
    """It used to launch the run, which failed on the setting and was recorded as a failed run."""
    cfg = tmp_path / "memory.yaml"
    cfg.write_text('memory:\n  temporal_summary:\n    enabled: "no"\n')
    bad = _run(tmp_path, "regenerate", "day", "2025-12-02", MEMORY_CONFIG_FILE=str(cfg))
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert _lines(bad.stderr) == [f"{cfg}: memory.temporal_summary.enabled: expected bool, got str 'no'"]
    assert "run " not in bad.stdout and not (tmp_path / "dagster_home").exists()


def test_a_model_litellm_cannot_call_is_refused_before_any_run_or_call(tmp_path):
    """It started the runs (and `objects run` its batches): every call failed on litellm's
    several-line text, and litellm's coloured "Provider List" banner reached stdout."""
    model = {"MEMORY_LLM_MODEL": "nosuchprovider/foo"}
    said = "MEMORY_LLM_MODEL 'nosuchprovider/foo': names no provider litellm knows"
    for args in (("backfill", "day", "--from", "2025-12-01", "--to", "2025-12-02"), ("objects", "run")):
        bad = _run(tmp_path, *args, **model)
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert _lines(bad.stderr) == [f"{said} (write it as provider/model, e.g. openai/gpt-4o-mini)"], bad.stderr
        assert "Provider List" not in bad.stdout and "run " not in bad.stdout, bad.stdout
    assert not (tmp_path / "dagster_home").exists()


def test_a_search_path_naming_no_schema_is_one_line_not_a_traceback(tmp_path):
    """`db upgrade` too: it printed the whole CREATE TABLE it failed on, in a traceback."""
    url = "postgresql://postgres@127.0.0.1:5432/test?options=-csearch_path%3Dno_such_schema_here"
    for command in (["status"], ["db", "upgrade"]):
        missing = _run(tmp_path, *command, MEMORY_DATABASE_URL=url)
        said = " ".join(missing.stderr.split())
        assert missing.returncode == 1 and "Traceback" not in said, (command, missing.stderr)
        assert "cannot be migrated: no schema has been selected to create in" in said
        assert said.endswith("(does the schema its search_path names exist?)"), said


def test_a_database_url_that_is_none_is_one_line_naming_the_variable(tmp_path):
    bad = _run(tmp_path, "status", MEMORY_DATABASE_URL="garbage")
    assert bad.returncode == 2, bad.stderr
    assert _lines(bad.stderr) == ["MEMORY_DATABASE_URL: Could not parse SQLAlchemy URL from given URL string"]


def test_a_bad_analyst_setting_refuses_the_export_before_any_run(tmp_path):
    config = tmp_path / "memory.yaml"
    config.write_text("memory:\n  analyst:\n    duckdb_threads: two\n", encoding="utf-8")
    bad = _run(tmp_path, "export", "--from", "2026-01-14", MEMORY_CONFIG_FILE=str(config))
    assert bad.returncode == 2, bad.stderr
    assert _lines(bad.stderr) == [f"{config}: memory.analyst.duckdb_threads: expected int, got str 'two'"]
    # no run was started and no analyst file written
    assert not (tmp_path / "dagster_home").exists() and not list(tmp_path.glob("analytics*"))


def test_the_status_reports_refuse_a_bad_setting_before_their_first_line(tmp_path):
    """`status` printed its temporal, ledger, tower and objects tables, then the refusal of a bad
    objects key, and never its sleep and conversation sections; `objects status` likewise. A
    report checks every setting it reads first: nothing on stdout, the one line, exit 2."""
    cfg = tmp_path / "memory.yaml"
    cfg.write_text("memory:\n  objects:\n    worlds_at_once: 0\n")
    for command in (["status"], ["objects", "status"]):
        bad = _run(tmp_path, *command, MEMORY_CONFIG_FILE=str(cfg))
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert _lines(bad.stderr) == [f"{cfg}: memory.objects.worlds_at_once: must be within 1-8, got 0"]
        assert bad.stdout == "", bad.stdout
    late = _run(tmp_path, "status", MEMORY_PARTITION_START="2022-13-01")
    assert late.returncode == 2 and late.stdout == "", late.stdout + late.stderr
    assert _lines(late.stderr) == ["MEMORY_PARTITION_START: '2022-13-01' is not a date (YYYY-MM-DD)"]


def test_the_db_commands_on_a_database_or_role_that_does_not_exist_are_the_one_line_of_status(tmp_path):
    """`db current` and `db upgrade` printed a traceback of ~450 lines ending in the driver's FATAL."""
    cases = {
        "postgresql://postgres:hunter22@127.0.0.1:5432/nodb_x": 'database "nodb_x" does not exist',
        "postgresql://norole_x:hunter22@127.0.0.1:5432/test": 'role "norole_x" does not exist',
    }
    for url, fatal in cases.items():
        shown = url.replace(":hunter22@", ":***@")
        said = (
            f"the store (MEMORY_DATABASE_URL={shown}) did not answer: connection to server at "
            f'"127.0.0.1", port 5432 failed: FATAL: {fatal}'
        )
        for command in (["db", "current"], ["db", "upgrade"], ["status"]):
            bad = _run(tmp_path, *command, MEMORY_DATABASE_URL=url)
            assert bad.returncode == 1, bad.stdout + bad.stderr
            assert _lines(bad.stderr) == [said], bad.stderr


def test_a_database_the_store_does_not_support_is_one_line_naming_the_ones_it_does(tmp_path):
    """A mysql:// URL was a traceback ending in ModuleNotFoundError: No module named 'MySQLdb'."""
    said = (
        "MEMORY_DATABASE_URL: the scheme 'mysql' is not supported: "
        "the store is sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE"
    )
    for command in (["status"], ["db", "current"]):
        bad = _run(tmp_path, *command, MEMORY_DATABASE_URL="mysql://u:hunter22@h/db")
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert _lines(bad.stderr) == [said], bad.stderr


def test_a_data_folder_that_cannot_be_made_is_one_line_naming_the_variable(tmp_path):
    """A MEMORY_DATA_DIR under /sys or /proc, or naming a file, was a traceback through
    default_sqlite_url ending in PermissionError, FileNotFoundError or FileExistsError."""
    afile = tmp_path / "afile"
    afile.write_text("")
    (tmp_path / "e.jsonl").write_text("")
    cases = {
        "/sys/x": "cannot make the folder /sys/x (Operation not permitted)",
        "/proc/x": "cannot make the folder /proc/x (No such file or directory)",
        str(afile): f"cannot make the folder {afile} (a file is in the way)",
    }
    commands = (["ingest", str(tmp_path / "e.jsonl")], ["backfill", "day", "--from", "2026-01-01"])
    for folder, said in cases.items():
        for command in (["status"], *(commands if folder == "/sys/x" else ())):
            bad = _run(tmp_path, *command, MEMORY_DATA_DIR=folder)
            assert bad.returncode == 2, bad.stdout + bad.stderr
            assert _lines(bad.stderr) == [f"MEMORY_DATA_DIR={folder}: {said}"], (command, bad.stderr)
            assert bad.stdout == "", bad.stdout


def test_a_redis_url_that_is_none_or_that_redis_refuses_is_one_line_naming_the_variable(tmp_path):
    """`read` with REDIS_URL=notaurl was redis-py's ValueError, with a database number past the
    server's databases its ResponseError, each a traceback; a port nothing listens on was already
    the in-process fallback."""
    events = conversation("w1", "a", cst(2026, 1, 15, 9), ["tomatoes planted", "tomatoes watered"])
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert _run(tmp_path, "ingest", str(tmp_path / "e.jsonl")).returncode == 0
    read = ("read", "--world", "w1", "--at", "2026-01-15T10:00+08:00")
    server = urlsplit(REDIS_URL).netloc.rsplit("@", 1)[-1]  # the test Redis; database 99 is refused
    cases = {
        "notaurl": "REDIS_URL=notaurl: Redis URL must specify one of the following schemes "
        "(redis://, rediss://, unix://)",
        f"redis://:hunter22@{server}/99": f"REDIS_URL=redis://:***@{server}/99: Redis refused it: "
        "DB index is out of range",
    }
    for url, said in cases.items():
        bad = _run(tmp_path, *read, REDIS_URL=url)
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert _lines(bad.stderr) == [said], bad.stderr
        assert bad.stdout == "" and "hunter22" not in bad.stderr


def test_an_instance_reading_an_unset_variable_is_one_line_naming_it_before_any_run(tmp_path):
    """The production dagster.yaml reads DAGSTER_PG_URL: unset, `backfill` printed Dagster's
    DagsterInvalidConfigError in 166 lines."""
    home = tmp_path / "dh"
    home.mkdir()
    shutil.copy(Path(__file__).parents[2] / "deploy" / "production" / "dagster.yaml", home)
    bad = _run(tmp_path, "backfill", "day", "--from", "2026-01-01", "--to", "2026-01-02", DAGSTER_HOME=str(home))
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert _lines(bad.stderr) == [
        f"{home}/dagster.yaml (DAGSTER_HOME's instance): it reads DAGSTER_PG_URL, which is not set"
    ]
    assert bad.stdout == "", bad.stdout
