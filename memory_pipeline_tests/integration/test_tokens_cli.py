"""Access tokens on the command line against PostgreSQL: create prints the token once (its last
line) and stores only its sha256; list shows name, worlds, read-only, created, revoked and never a
token; revoke refuses it from then on; bad input exits 2 and writes nothing."""

import hashlib
import json
import re

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from memory_pipeline.access import tokens
from memory_pipeline.access.tables import access_tokens
from memory_pipeline.cli import app

runner = CliRunner()


@pytest.fixture
def env(monkeypatch, pg_url, tmp_path):
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return tmp_path


def _rows(store):
    with store.connect() as conn:
        return [dict(r) for r in conn.execute(select(access_tokens)).mappings()]


def test_create_prints_the_token_once_and_stores_only_its_hash(env, store):
    made = runner.invoke(app, ["tokens", "create", "--world", "w1", "--world", "w2", "--world", "w1", "--name", "bot"])
    assert made.exit_code == 0, made.output
    token = made.output.strip().splitlines()[-1]
    assert token.startswith("mp_") and len(token) > 40
    (row,) = _rows(store)
    assert row["name"] == "bot" and row["worlds"] == ["w1", "w2"] and row["read_only"] is False
    assert row["token_hash"] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in json.dumps(row, default=str)  # the token itself is nowhere in the store
    assert tokens.verify(store, token).worlds == frozenset({"w1", "w2"})
    assert tokens.verify(store, token + "x") is None

    ro = runner.invoke(app, ["tokens", "create", "--world", "w3", "--read-only"])
    assert ro.exit_code == 0, ro.output
    ro_token = ro.output.strip().splitlines()[-1]
    assert tokens.verify(store, ro_token).read_only is True
    assert ro_token != token

    listed = runner.invoke(app, ["tokens", "list", "--json"])
    assert listed.exit_code == 0 and token not in listed.output and ro_token not in listed.output
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert [(r["name"], r["worlds"], r["read_only"], r["revoked_at"]) for r in rows] == [
        ("bot", ["w1", "w2"], False, None),
        (rows[1]["name"], ["w3"], True, None),
    ]
    assert rows[1]["name"].startswith("token-")
    # the table's form: the zone, to the second (it read 2026-12-07T07:12:29.184180+00:00)
    zoned = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00"
    assert all(re.fullmatch(zoned, r["created_at"]) for r in rows), rows
    table = runner.invoke(app, ["tokens", "list"])
    assert table.exit_code == 0 and "bot" in table.output and "w1, w2" in table.output and token not in table.output
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00", table.output), table.output  # created: CST


def test_revoke_refuses_the_token_and_keeps_its_name(env, store):
    token = runner.invoke(app, ["tokens", "create", "--world", "w1", "--name", "bot"]).output.strip().splitlines()[-1]
    assert tokens.verify(store, token) is not None
    revoked = runner.invoke(app, ["tokens", "revoke", "bot"])
    assert revoked.exit_code == 0, revoked.output
    assert tokens.verify(store, token) is None
    (row,) = _rows(store)
    assert row["revoked_at"] is not None
    again = runner.invoke(app, ["tokens", "revoke", "bot"])
    assert again.exit_code == 2 and "revoked already" in again.output
    # when, as `tokens list` shows it: the configured zone, to the second (it was UTC, to the microsecond)
    assert re.search(r"revoked already \(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00\)", again.output), again.output
    unknown = runner.invoke(app, ["tokens", "revoke", "nobody"])
    assert unknown.exit_code == 2 and "no token named 'nobody'" in unknown.output
    reused = runner.invoke(app, ["tokens", "create", "--world", "w1", "--name", "bot"])
    assert reused.exit_code == 2 and "exists already" in reused.output
    listed = json.loads(runner.invoke(app, ["tokens", "list", "--json"]).output)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00", listed["revoked_at"]), listed


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ([], "needs at least one world"),
        (["--world", "a:b"], "world 'a:b'"),
        (["--world", "w1", "--name", "has space"], "name 'has space'"),
        (["--world", "w1", "--all-worlds"], "not both"),
        (["--world", "*"], "--world '*': character '*' at position 0 is not allowed"),  # --all-worlds grants that
    ],
)
def test_bad_input_exits_2_and_writes_nothing(env, store, args, problem):
    out = runner.invoke(app, ["tokens", "create", *args])
    assert out.exit_code == 2 and problem in " ".join(out.output.split()), out.output
    assert _rows(store) == []


def test_all_worlds_token(env, store):
    out = runner.invoke(app, ["tokens", "create", "--all-worlds", "--name", "ops"])
    assert out.exit_code == 0 and "every world" in out.output
    grant = tokens.verify(store, out.output.strip().splitlines()[-1])
    assert grant.all_worlds and grant.holds("any-world")


def test_the_demo_makes_a_read_only_token_for_its_sample_worlds_once(store):
    import importlib

    from rich.console import Console

    from memory_pipeline.events import sample_data

    demo = importlib.import_module("memory_pipeline.cli.demo")  # the package exports the command as `demo`

    console = Console(record=True, width=300)
    demo._server_token(console, store)
    out = console.export_text()
    token = out.strip().splitlines()[-1]
    grant = tokens.verify(store, token)
    assert grant is not None and grant.read_only and grant.worlds == frozenset(sample_data.WORLDS)
    assert "Authorization: Bearer <token>" in out
    again = Console(record=True, width=300)
    demo._server_token(again, store)  # a second demo on the same store makes no second token
    assert "token 'demo' exists already" in again.export_text() and len(_rows(store)) == 1
