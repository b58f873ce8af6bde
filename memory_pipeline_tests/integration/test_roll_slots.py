"""The Habitat's system-roll slots: list per world with sources_fp, age and TTL; regenerate one."""

import re
from datetime import date, datetime, timedelta

from typer.testing import CliRunner

from memory_pipeline.cli import app
from memory_pipeline.temporal import rolls, slots, summaries
from memory_pipeline_tests.conftest import conversation, cst

TODAY = date(2026, 7, 18)
NOW = cst(2026, 7, 18, 12)


def _by(listing):
    return {(s.world_id, s.kind): s for s in listing}


def _seed(ctx, ingest):
    ingest(
        conversation("w1", "a", cst(2026, 7, 2, 9), ["tomatoes planted", "tomatoes watered"])
        + conversation("w1", "b", cst(2026, 3, 3, 9), ["compost started", "compost warm"])
        + conversation("w2", "c", cst(2026, 7, 3, 9), ["marathon pacing", "marathon intervals"])
    )
    for d in (date(2026, 7, 2), date(2026, 7, 3), date(2026, 3, 3)):
        summaries.regenerate_day(ctx, d)
    summaries.regenerate_rollup(ctx, "month", date(2026, 3, 1))


def test_slots_show_state_fingerprint_age_and_ttl(ctx, store, ingest, redis_client):
    _seed(ctx, ingest)
    before = _by(slots.list_slots(store, ctx.cache, ctx.cfg, TODAY, now=NOW))
    assert before[("w1", "past_days")].state == slots.SlotState.MISSING
    assert before[("w1", "past_years")].state == slots.SlotState.EMPTY  # no year row yet
    assert before[("w2", "past_months")].state == slots.SlotState.EMPTY
    rolls.regenerate_system_rolls(ctx, TODAY)
    later = datetime.now(NOW.tzinfo) + timedelta(seconds=90)
    listed = _by(slots.list_slots(store, ctx.cache, ctx.cfg, TODAY, now=later))
    days = listed[("w1", "past_days")]
    assert days.state == slots.SlotState.FRESH and days.sources == 1 and days.cached_fp == days.sources_fp
    assert days.key == "anima:temporal:w1:sys_roll:past_days:2026-07-18"
    assert 86400 - 120 <= days.ttl_seconds <= 86400 and 80 <= days.age_seconds <= 200
    months = listed[("w1", "past_months")]
    assert months.state == slots.SlotState.FRESH and months.ttl_seconds > 30 * 86400
    # New material under a day row: the slot's rows changed, so it is stale until regenerated.
    ingest(conversation("w1", "d", cst(2026, 7, 10, 9), ["harvest soon", "harvest basket"]))
    summaries.regenerate_day(ctx, date(2026, 7, 10))
    stale = _by(slots.list_slots(store, ctx.cache, ctx.cfg, TODAY, ["w1"], now=NOW))
    assert set(stale) == {("w1", k) for k in ("past_days", "past_months", "past_years")}
    assert stale[("w1", "past_days")].state == slots.SlotState.STALE
    assert stale[("w1", "past_days")].sources == 2
    result = slots.regenerate_slot(ctx, "w1", "past_days", TODAY)
    assert result.regenerated == 1
    again = _by(slots.list_slots(store, ctx.cache, ctx.cfg, TODAY, ["w1"], now=NOW))
    assert again[("w1", "past_days")].state == slots.SlotState.FRESH
    assert again[("w1", "past_months")].state == slots.SlotState.FRESH  # untouched


def test_rolls_from_the_command_line(ctx, store, ingest, redis_url, pg_url, monkeypatch, tmp_path):
    _seed(ctx, ingest)
    monkeypatch.setenv("MEMORY_DATABASE_URL", pg_url)
    monkeypatch.setenv("REDIS_URL", redis_url)
    runner = CliRunner()
    at = ["--at", "2026-07-18T12:00+08:00"]
    result = runner.invoke(app, ["rolls", "regenerate", "--world", "w1", "--kind", "past_days", *at])
    assert result.exit_code == 0, result.output
    assert "w1 past_days for 2026-07-18: regenerated (cache: redis)" in result.output
    listing = runner.invoke(app, ["rolls", "list", "--world", "w1", *at])
    assert listing.exit_code == 0, listing.output
    line = next(ln for ln in listing.output.splitlines() if "past_days" in ln)
    assert "fresh" in line and "w1" in line
    # its age is on the wall clock, as its created_at and TTL are: --at (months back) picks the day only
    age, ttl = [cell.strip() for cell in line.split("│") if cell.strip()][-2:]
    assert re.fullmatch(r"\d+s", age) and int(age[:-1]) < 600 and re.fullmatch(r"\d+s", ttl), line
    bad = runner.invoke(app, ["rolls", "regenerate", "--world", "w1", "--kind", "past_weeks", *at])
    assert bad.exit_code == 2 and "is not a slot" in bad.output
    # an unknown world answered "nothing to cover", exit 0; a future --at covered days not ended
    ghost = runner.invoke(app, ["rolls", "regenerate", "--world", "ghost", "--kind", "past_days", *at])
    assert ghost.exit_code == 1, ghost.output
    assert ghost.stderr.strip() == "no such world 'ghost': nothing has been ingested for it"
    ahead = "2999-01-01T00:00:00+08:00"
    future = runner.invoke(app, ["rolls", "regenerate", "--world", "w1", "--kind", "past_days", "--at", ahead])
    assert future.exit_code == 2 and future.stdout == "", future.output
    said = " ".join(future.stderr.split())
    assert said == f"--at {ahead}: in the future; a slot covers the days before it, and they have not all ended"
    assert "in-process cache" not in result.stderr  # with Redis, no note
    # Without REDIS_URL the slot lives in this process alone: said so (it read as a plain success)
    monkeypatch.delenv("REDIS_URL")
    alone = runner.invoke(app, ["rolls", "regenerate", "--world", "w1", "--kind", "past_days", *at])
    assert alone.exit_code == 0 and "regenerated (cache: memory)" in alone.stdout, alone.output
    assert "no REDIS_URL: the slot went to this process's in-process cache and is gone when it exits" in " ".join(
        alone.stderr.split()
    )
