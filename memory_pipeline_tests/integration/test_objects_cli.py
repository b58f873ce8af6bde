"""Seed 001 §5 on the command line (PostgreSQL; the provider is the local OpenAI-compatible fake
server): a subcommand that runs work exits 1 and prints what failed when any of it failed (a failed
claim, a job ended failed, events blocked; a projection error; an integrity problem when enabling),
and 0 only when all of it succeeded. A world skipped because another run held its lease, or because
its agent is busy, is no failure, and the output says so."""

from __future__ import annotations

import functools
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update
from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline.lib.store import leases
from memory_pipeline.objects import graph, logic, reports, worker
from memory_pipeline.objects.tables import objects_objects
from memory_pipeline_tests.fake_openai import FakeOpenAI
from memory_pipeline_tests.integration.test_objects import W, claim_for, ready, states, sub

PROVIDER = ("MEMORY_LLM_MODEL", "MEMORY_LLM_API_BASE", "MEMORY_LLM_API_KEY")


@pytest.fixture
def cli(store, monkeypatch, tmp_path):
    config = tmp_path / "memory.yaml"
    config.write_text("memory:\n  objects:\n    retry_backoff_seconds: 0\n", encoding="utf-8")
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(config))
    monkeypatch.setenv("MEMORY_DATABASE_URL", store.url)
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "data"))
    for name in PROVIDER:
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()

    def run(*argv, code=0):
        result = runner.invoke(app, list(argv))
        assert result.exit_code == code, (argv, result.output)
        return " ".join(result.output.split())  # the console wraps long lines

    return run


def _provider(monkeypatch, fake: FakeOpenAI) -> None:
    for name, value in zip(PROVIDER, ("openai/fake-model", fake.api_base, "k"), strict=True):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MEMORY_LLM_MAX_RETRIES", "0")


def test_objects_run_exits_1_naming_the_failed_claims_job_and_blocked_event(cli, store, ingest, monkeypatch):
    _, (e1, e2) = ready(store, ingest, ["hello Alice", "second event, the compost"])  # both pending
    with FakeOpenAI() as fake:
        for _ in range(logic.MAX_CONSECUTIVE_FAILURES):
            fake.push("status", 400)  # the request's own fault (a provider's 5xx never blocks)
        _provider(monkeypatch, fake)
        out = cli("objects", "run", code=1)
    # 5 failed claims of e1's first page end the hourly job and block only e1
    assert "failed claims 5, blocked events 1" in out
    assert "failed: 5 failed claim(s)" in out and f"events blocked: {e1}" in out
    job = [j for j in reports.status(store, W)["jobs"] if j["mode"] == "organize"]
    assert job == [{"mode": "organize", "status": "failed", "count": 1}]
    assert "jobs ended failed: w1 organize job" in out and f"batch {e1}[0:11]: " in out
    assert states(store) == {e1: "blocked", e2: "pending"}

    for name in PROVIDER:  # the offline model again: the cause is gone
        monkeypatch.delenv(name)
    cli("objects", "organize", W, "--retry-blocked")
    out = cli("objects", "run")
    assert "failed claims 0, blocked events 0" in out and "failed:" not in out
    assert states(store) == {e1: "linked", e2: "linked"}


def test_a_world_skipped_for_a_busy_lease_or_a_busy_agent_is_no_failure_and_is_named(cli, store, ingest, monkeypatch):
    octx, (e1,) = ready(store, ingest, ["hello Alice"])
    leases.try_acquire(store, graph.LEASE_ASSET, W, "another-run", timedelta(seconds=360))
    monkeypatch.setattr(worker, "run_worker", functools.partial(worker.run_worker, max_wait=0.5))
    out = cli("objects", "run")
    assert "lease busy (another run holds it; jobs stay queued): w1" in out and "failed:" not in out
    leases.release(store, graph.LEASE_ASSET, W, "another-run")
    assert f"{W}: busy=True stopped=False" in cli("objects", "flags", W, "--busy")
    assert f"{W}: busy=True stopped=False" in cli("objects", "flags", W)  # as stored (it said None)
    out = cli("objects", "run")
    assert "not claimed (the agent is marked busy or stopped): w1" in out and states(store) == {e1: "pending"}


def test_objects_project_exits_1_on_a_file_it_cannot_write(cli, store, ingest, tmp_path):
    octx, (e1,) = ready(store, ingest, ["garden watering seedlings"])
    worker.enqueue(octx, W, "organize", origin=logic.JobOrigin.HOURLY)  # creates project:daily
    c = claim_for(octx, e1)
    graph.commit(octx, c, sub(c, objects=[{"id": "person:ana", "name": "Ana"}]))
    folder = tmp_path / "data" / "objects" / W / "person"
    folder.parent.mkdir(parents=True)
    folder.write_text("a file where the person folder goes")
    out = cli("objects", "project", code=1)
    assert "failed: 1 error(s)" in out and "w1 person:ana: NotADirectoryError" in out
    folder.unlink()
    out = cli("objects", "project")
    assert "0 behind, 0 error(s)" in out and "failed:" not in out


def test_objects_enable_exits_1_when_its_integrity_check_finds_a_problem(cli, store, ingest):
    ready(store, ingest, ["garden watering seedlings"])
    assert json.loads(cli("objects", "enable"))["integrity"] == "ok"
    with store.begin() as conn:
        conn.execute(
            update(objects_objects).where(objects_objects.c.object_id == "project:daily").values(status="done")
        )
    out = cli("objects", "enable", code=1)
    assert "integrity check failed: w1 project:daily: type 'project' / status 'done' outside the vocabulary" in out


def test_organize_now_on_a_disabled_domain_says_that_no_run_takes_the_request(cli, store, ingest, tmp_path):
    ready(store, ingest, ["garden watering seedlings"])
    (tmp_path / "memory.yaml").write_text("memory:\n  objects:\n    enabled: false\n", encoding="utf-8")
    out = cli("objects", "organize", W, "--now")  # the request itself is taken: exit 0
    assert "memory.objects.enabled is false: the request is queued, and no run takes it until it is true" in out
    jobs = [(j["mode"], j["status"]) for j in reports.status(store, W)["jobs"]]
    assert sorted(jobs) == [("compact", "done"), ("compact", "queued"), ("organize", "queued")]
    assert "memory.objects.enabled is false: nothing done" in cli("objects", "run", code=1)


def test_objects_run_stops_at_the_breaker_with_its_one_line_and_the_next_run_does_the_rest(store, ingest, tmp_path):
    """The worker stopped by the provider's breaker, from the command line (its own process, as an
    operator runs it): 5 failed claims (one request each), the sixth world's batch refused and
    handed back; the breaker's line printed once, no traceback, exit 1. The next run, the provider
    back, does that batch only."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from memory_pipeline_tests.integration.test_objects_batch_protocol import _linked
    from memory_pipeline_tests.integration.test_objects_dagster import (
        BACKING_OFF,
        UNTOUCHED,
        breaker_state,
        six_worlds_pending,
    )

    events = six_worlds_pending(store, ingest)
    config = tmp_path / "memory.yaml"
    # one world at a time: the breaker's five failures, then the sixth world refused, in that order
    config.write_text("memory:\n  objects:\n    retry_backoff_seconds: 600\n    worlds_at_once: 1\n", encoding="utf-8")
    command = [str(Path(sys.executable).parent / "memory-pipeline"), "objects", "run"]
    with FakeOpenAI() as fake:
        for _ in range(50):
            fake.push("status", 500)
        env = {
            **os.environ,
            "MEMORY_CONFIG_FILE": str(config),
            "MEMORY_DATABASE_URL": store.url,
            "MEMORY_DATA_DIR": str(tmp_path / "data"),
            "MEMORY_LLM_MODEL": "openai/fake-model",
            "MEMORY_LLM_API_BASE": fake.api_base,
            "MEMORY_LLM_API_KEY": "k",
            "MEMORY_LLM_MAX_RETRIES": "0",
            "MEMORY_LLM_BREAKER_FAILURES": "5",
        }
        down = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        said = down.stdout + down.stderr
        assert down.returncode == 1, said
        assert len(fake.requests) == 5
        line = (
            f"LLM provider openai/fake-model at {fake.api_base} is failing: InternalServerError: "
            "litellm.InternalServerError: InternalServerError: OpenAIException - scripted 500 (5 consecutive "
            "failures); stopping: the batch it refused was handed back untouched; the jobs not done stay queued "
            "for the next run"
        )
        assert down.stderr.splitlines()[-1] == line, said
        assert said.count("is failing:") == 1 and "Traceback" not in said, said
        assert "stopped at world w6: committed batches 0, failed claims 5, model calls 5" in down.stdout
        state = breaker_state(store)
        assert state["ledger"] == {"error": 5, "breaker_open": 1}
        assert state["jobs"] == {**{f"w{i}": BACKING_OFF for i in range(1, 6)}, "w6": UNTOUCHED}
        assert state["failures"] == {f"w{i}": 1 for i in range(1, 6)} and state["leases"] == 0
        # objects status lists the newest failures, each with its time (zone), world, mode and job; it
        # printed one error's text under "failure history (newest 5)"
        keep = ("MEMORY_DATABASE_URL", "MEMORY_DATA_DIR", "MEMORY_CONFIG_FILE")
        shown = CliRunner().invoke(app, ["objects", "status"], env={k: env[k] for k in keep}, terminal_width=300)
        assert shown.exit_code == 0, shown.output
        listed = [line.strip() for line in shown.output.splitlines() if line.startswith("  ") and " job " in line]
        assert shown.output.count("failure history, newest first:") == 1, shown.output
        assert len(listed) == 5 and {line.split()[1] for line in listed} == {f"w{i}" for i in range(1, 6)}, listed
        for line in listed:
            assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00 w\d organize job \d+ batch \S+: ", line), line
            assert "scripted 500" in line, line

        fake.script.clear()
        fake.tool_answer = lambda body: [_linked(body)]
        again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        assert len(fake.requests) == 5 + 1
    assert breaker_state(store)["ledger"] == {"error": 5, "breaker_open": 1, "ok": 1}
    assert states(store)[events["w6"]] == "linked"


def test_objects_runs_calls_are_in_the_ledger_under_their_job(cli, store, ingest):
    """`objects run` with the offline model: every call of a batch is a ledger row naming the job
    it worked for (its world in world_id), never an empty partition."""
    from sqlalchemy import select

    from memory_pipeline.lib.store.tables import llm_ledger
    from memory_pipeline.objects.tables import objects_jobs

    ready(store, ingest, ["hello Alice", "second event, the compost"])
    cli("objects", "run")
    with store.connect() as conn:
        calls = conn.execute(select(llm_ledger.c.asset, llm_ledger.c.world_id, llm_ledger.c.partition)).all()
        jobs = {f"job {j}": w for j, w in conn.execute(select(objects_jobs.c.job_id, objects_jobs.c.world_id))}
    assert any(asset == "objects_cli" for asset, _, _ in calls)  # ``ready`` ran a batch of its own first
    assert all(partition in jobs and jobs[partition] == world for _, world, partition in calls), calls


AT = datetime(2026, 1, 5, 1, 2, 3, 456_000, tzinfo=UTC)
SHOWN = "2026-01-05T09:02:03+08:00"  # AT in the configured zone (Asia/Shanghai), to the second
STORED = "2026-01-05T01:02:03.456000+00:00"  # AT as stored and as the organize model reads it


def _object_with_evidence(store, ingest, world: str, object_id: str, text: str) -> str:
    """An object of ``world`` written at AT, attached to one event that occurred at AT: its id."""
    from memory_pipeline.objects import timeline
    from memory_pipeline.objects.tables import objects_attachments
    from memory_pipeline_tests.integration.test_objects import add, octx_for

    (eid,) = add(ingest, [text], start=AT, world=world)
    timeline.intake(octx_for(store))  # the event's record: its occurrence time, a source's time in read
    otype, _, key = object_id.partition(":")
    with store.begin() as conn:
        conn.execute(
            objects_objects.insert().values(
                world_id=world,
                object_id=object_id,
                type=otype,
                name=key.title(),
                aliases=[],
                summary=text,
                body="",
                cues=[key],
                status="active",
                version=1,
                revision=1,
                updated_at=AT,
            )
        )
        conn.execute(objects_attachments.insert().values(world_id=world, object_id=object_id, event_id=eid, revision=1))
    return eid


def test_find_read_and_evidence_show_times_in_the_configured_zone_and_the_models_tools_as_stored(
    cli, store, ingest, monkeypatch
):
    """`objects find / read / evidence` and `objects inspect object / event / events` print their
    times as every operator time: the configured zone, to the second. The organize model's read tools keep the stored form (UTC, microseconds),
    what its prompts have always held."""
    from memory_pipeline.objects import tools
    from memory_pipeline_tests.integration.test_objects import octx_for

    monkeypatch.setenv("MEMORY_TIMEZONE", "Asia/Shanghai")
    eid = _object_with_evidence(store, ingest, W, "person:zebra", "the zebra keeper")
    found = cli("objects", "find", W, "zebra")
    assert f'"updated_at": "{SHOWN}"' in found and "+00:00" not in found, found
    read = cli("objects", "read", W, "person:zebra")
    assert f'"updated_at": "{SHOWN}"' in read, read
    assert f'"event_id": "{eid}", "occurred_at": "{SHOWN}"' in read and "+00:00" not in read, read
    evidence = cli("objects", "evidence", W, "person:zebra")
    assert f'"event_id": "{eid}", "occurred_at": "{SHOWN}"' in evidence and "+00:00" not in evidence, evidence
    # the read-only inspect views too; the events' cursor keeps the stored time (it pages on it)
    shown = cli("objects", "inspect", "object", "person:zebra", "--world", W)
    assert f'"updated_at": "{SHOWN}"' in shown and f'"occurred_at": "{SHOWN}"' in shown, shown
    assert "+00:00" not in shown, shown
    event = cli("objects", "inspect", "event", eid)
    assert f'"occurred_at": "{SHOWN}"' in event and "+00:00" not in event, event
    listed = cli("objects", "inspect", "events", "2026-01-05T00:00:00+08:00", "2026-01-06T00:00:00+08:00")
    assert f'"event_id": "{eid}",' in listed and f'"occurred_at": "{SHOWN}"' in listed, listed
    assert "+00:00" not in listed, listed

    octx = octx_for(store)
    dossier = tools.batch_read(octx, W, "memory_read", {"id": "person:zebra"})
    assert dossier["updated_at"] == STORED and dossier["sources"] == [{"event_id": eid, "occurred_at": STORED}]
    items = tools.batch_read(octx, W, "memory_evidence", {"id": "person:zebra"})["items"]
    assert [(i["event_id"], i["occurred_at"]) for i in items] == [(eid, STORED)]
    assert tools.call(octx, "memory_read", {"world": W, "id": "person:zebra"})["updated_at"] == STORED  # no tz


def test_inspect_status_shows_its_times_in_the_configured_zone_as_the_agents_status_tool(
    cli, store, ingest, monkeypatch
):
    """`objects inspect status` prints an unfinished event's `occurred_at`, a failure's `at` and a
    world's `worker_error_at` and `auto_suppressed_until` in the configured zone, to the second (they
    printed `2026-01-10 12:00:00+00:00`, UTC with a space); memory_status with the zone answers the
    same, without it the stored times."""
    from zoneinfo import ZoneInfo

    from memory_pipeline.objects import timeline, tools
    from memory_pipeline.objects.tables import objects_failures, objects_worlds
    from memory_pipeline_tests.integration.test_objects import add, octx_for

    monkeypatch.setenv("MEMORY_TIMEZONE", "Asia/Shanghai")
    (eid,) = add(ingest, ["the zebra keeper"], start=AT)
    octx = octx_for(store)
    timeline.intake(octx)
    with store.begin() as conn:
        conn.execute(update(objects_worlds).values(worker_error="boom", worker_error_at=AT, auto_suppressed_until=AT))
        conn.execute(
            objects_failures.insert().values(world_id=W, job_id=1, mode="organize", batch="b", error="x", at=AT)
        )
    out = cli("objects", "inspect", "status", "--world", W)
    assert "+00:00" not in out and ".456" not in out, out
    st = json.loads(out)
    assert [(r["event_id"], r["occurred_at"]) for r in st["earliest_unfinished"]] == [(eid, SHOWN)]
    assert [f["at"] for f in st["failures"]] == [SHOWN]
    assert [(w["worker_error_at"], w["auto_suppressed_until"]) for w in st["worlds"]] == [(SHOWN, SHOWN)]
    assert json.loads(json.dumps(tools.call(octx, "memory_status", {"world": W}, tz=ZoneInfo("Asia/Shanghai")))) == st
    assert tools.call(octx, "memory_status", {"world": W})["failures"][0]["at"] == AT  # no tz: as stored


def test_organize_receipts_and_their_replays_give_created_at_in_the_configured_zone(cli, store, ingest, monkeypatch):
    """`objects organize` (with and without --now) prints the receipt's created_at in the configured
    zone to the second (it printed 2026-12-07T07:14:48.121103+00:00); a replay of the token prints
    the first answer's very created_at."""
    import re

    from memory_pipeline_tests.integration.test_objects import add

    monkeypatch.setenv("MEMORY_TIMEZONE", "Asia/Shanghai")
    add(ingest, ["the zebra keeper"], start=AT)
    zoned = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00"
    for argv in (("--token", "tok-now-1", "--now"), ("--mode", "compact", "--token", "tok-plain-1")):
        first = json.loads(cli("objects", "organize", W, *argv))
        again = json.loads(cli("objects", "organize", W, *argv))
        firsts, agains = (x if isinstance(x, list) else [x] for x in (first, again))
        assert [r["replayed"] for r in firsts + agains] == [False] * len(firsts) + [True] * len(agains)
        assert [r["created_at"] for r in agains] == [r["created_at"] for r in firsts], (first, again)
        assert all(re.fullmatch(zoned, r["created_at"]) for r in firsts), first


def test_the_demos_recall_line_shows_the_evidence_time_in_the_configured_zone(store, ingest):
    from zoneinfo import ZoneInfo

    from rich.console import Console

    from memory_pipeline.cli.demo import _print_objects

    _object_with_evidence(store, ingest, "aria", "knowledge:garden", "the garden at dawn")
    console = Console(record=True, width=400)
    _print_objects(console, store, ZoneInfo("Asia/Shanghai"))
    assert f"memory_evidence first: {SHOWN} 'the garden at dawn'" in console.export_text()


def test_objects_run_for_one_world_queues_no_other_worlds_job_and_keeps_to_its_batch_budget(
    cli, store, ingest, monkeypatch, tmp_path
):
    """`objects run --world w1` queued threshold and hourly jobs for every world, and
    `--max-batches 1` ran up to one batch for compaction and one more for the rest."""
    from sqlalchemy import select

    from memory_pipeline.objects import timeline
    from memory_pipeline.objects.tables import objects_jobs, objects_receipts
    from memory_pipeline_tests.integration.test_objects import add, octx_for

    config = tmp_path / "small.yaml"  # every world's hot timeline is past the threshold
    config.write_text("memory:\n  objects:\n    compact_threshold_tokens: 1\n    retry_backoff_seconds: 0\n")
    monkeypatch.setenv("MEMORY_CONFIG_FILE", str(config))
    add(ingest, ["hello Alice, the compost is ready", "the tomatoes need staking"], world="w1", conv="c1")
    add(ingest, ["Bob booked the ferry to Orkney", "the cello lesson moved"], world="w2", conv="c2")
    timeline.intake(octx_for(store))  # both worlds' hot timelines are past the threshold

    def batches() -> int:
        with store.connect() as conn:
            return len(conn.execute(select(objects_receipts.c.world_id)).all())

    cli("objects", "run", "--world", "w1", "--max-batches", "1")
    with store.connect() as conn:
        queued_for = set(conn.execute(select(objects_jobs.c.world_id)).scalars())
    assert queued_for == {"w1"}, queued_for
    assert batches() == 1
