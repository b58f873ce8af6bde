"""Floors the benchmark measures the project against, in the same invocation.

* ``set_based_floor``: a bench-only prototype of the year's summary work done in one pass: one
  query reading every message of the range, grouping by world and CST day in memory, the same
  material, fingerprints and offline-model headlines as the project, month and year rows from
  those, then one COPY of the rows with their ledger and cache rows (into same-shape tables), in
  one transaction. ``compare_rows`` checks that it produced the rows the real run wrote.
* ``noop_definitions``: bench-only Dagster assets over the same partitions that emit exactly the
  events a real range run emits (one materialization per partition, carrying the real run's
  metadata for that partition, and one check evaluation per partition) and do no work.
* ``raw_copy``: the file's message rows COPYed into a same-shape table (no checks at all).
"""

from __future__ import annotations

import io
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import orjson
from sqlalchemy import select

from memory_pipeline.lib.llm import offline
from memory_pipeline.lib.llm.client import LLMClient, LLMRequest
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import conversations, messages, worlds
from memory_pipeline.lib.text import hard_cut, short_hash
from memory_pipeline.lib.timeutil import day_bounds
from memory_pipeline.temporal import logic, prompts
from memory_pipeline.temporal.config import TemporalSummaryConfig
from memory_pipeline.temporal.context import material_line
from memory_pipeline.temporal.logic import EmptyReason
from memory_pipeline.temporal.tables import temporal_summaries

# --- (b) the set-based floor ----------------------------------------------------------------------


@dataclass
class FloorResult:
    seconds: float
    rows: int
    calls: int
    by_key: dict[tuple[str, str, str], dict] = field(default_factory=dict)  # (world, window, period)


def _copy_text(value) -> str:
    if value is None:
        return "\\N"
    text = value if isinstance(value, str) else str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _copy(cursor, table: str, columns: list[str], rows: list[tuple]) -> None:
    buf = io.StringIO("".join("\t".join(_copy_text(v) for v in row) + "\n" for row in rows))
    quoted = ", ".join(f'"{c}"' for c in columns)  # "window" is a keyword
    cursor.copy_expert(f"COPY {table} ({quoted}) FROM STDIN", buf)


def set_based_floor(store: Store, year: int, tz: ZoneInfo) -> FloorResult:
    """The day, month and year rows of ``year`` for every world, in one pass (see the module)."""
    cfg = TemporalSummaryConfig()
    client = LLMClient(store)  # only for its cache key: the one the project's calls are stored under
    started = time.perf_counter()
    start, _ = day_bounds(date(year, 1, 1), tz)
    end, _ = day_bounds(date(year + 1, 1, 1), tz)
    with store.connect() as conn:
        first_event = dict(conn.execute(select(worlds.c.world_id, worlds.c.first_event_at)).all())
        rows = conn.execute(
            select(
                messages.c.message_id,
                messages.c.conversation_id,
                messages.c.role,
                messages.c.content,
                messages.c.tool_calls,
                messages.c.at,
                conversations.c.world_id,
                conversations.c.platform,
            )
            .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
            .where(messages.c.at >= start, messages.c.at < end)
            .where(conversations.c.debug.is_(False), conversations.c.platform != "cron")
            .order_by(messages.c.at, messages.c.message_id)
        ).all()
    by_world_day: dict[tuple[str, date], list] = defaultdict(list)
    for r in rows:
        by_world_day[(r.world_id, r.at.astimezone(tz).date())].append(r)

    now = datetime.now(UTC)
    cache: dict[str, str] = {}
    tokens: dict[str, tuple[int, int]] = {}
    ledger: list[tuple] = []
    out: list[dict] = []
    ids = iter(range(1, 10**9))

    def summarize(task: str, material: str, max_chars: int, world_id: str, partition: str) -> str:
        req = LLMRequest(task, prompts.spec(task, max_chars), material, prompts.PROMPT_VERSION, max_chars, world_id)
        key = client._cache_key(req)
        if key in cache:
            ledger.append(
                (now, task, partition, task, world_id, offline.NAME, prompts.PROMPT_VERSION, 0, 0, "cache_hit", key)
            )
            return cache[key].strip()
        text = hard_cut(offline.headline(material, max_chars), max_chars)
        tin, tout = offline.approx_tokens(req.system + req.user), offline.approx_tokens(text)
        ledger.append(
            (now, task, partition, task, world_id, offline.NAME, prompts.PROMPT_VERSION, tin, tout, "ok", key)
        )
        cache[key] = text
        tokens[key] = (tin, tout)
        return text.strip()

    def row(world_id, window, period, content, reason, kind, source_ids, count, fp, model) -> dict:
        r = {
            "summary_id": next(ids),
            "world_id": world_id,
            "window": window,
            "period_start": period,
            "content": content,
            "empty_reason": reason,
            "source_count": count,
            "source_kind": kind,
            "source_ids": source_ids,
            "material_fp": fp,
            "model": model,
            "prompt_version": prompts.PROMPT_VERSION,
        }
        out.append(r)
        return r

    def summarized(world_id, window, period, task, material, fp_parts, max_chars, kind, source_ids, count):
        fp = short_hash([*fp_parts, source_ids])
        text = summarize(task, material, max_chars, world_id, logic.period_key(window, period))
        if not text:
            return row(world_id, window, period, "", EmptyReason.EMPTY_SUMMARY, kind, [], 0, fp, offline.NAME)
        return row(world_id, window, period, text, None, kind, source_ids, count, fp, offline.NAME)

    days_by_world: dict[str, list[dict]] = defaultdict(list)
    day = date(year, 1, 1)
    while day.year == year:
        day_end = day_bounds(day, tz)[1]
        for world_id in sorted(w for w, first in first_event.items() if first is not None and first < day_end):
            msgs = by_world_day.get((world_id, day), [])
            if not msgs:
                r = row(world_id, "day", day, "", EmptyReason.NO_SESSIONS, "message", [], 0, None, None)
            else:
                material = [m for m in msgs if logic.is_material(m.role, m.content, m.tool_calls)]
                if not material:
                    r = row(world_id, "day", day, "", EmptyReason.EMPTY, "message", [], 0, None, None)
                else:
                    by_conv: dict[str, list] = defaultdict(list)
                    for m in material:
                        by_conv[m.conversation_id].append(m)
                    convs = sorted(by_conv.values(), key=lambda ms: (ms[0].at, ms[0].conversation_id))
                    full = "\n\n".join(
                        f"# {ms[0].platform} conversation\n"
                        + "\n".join(material_line(m.at, m.role, m.content, tz) for m in ms)
                        for ms in convs
                    )
                    if len(full) > cfg.day_material_max_chars:
                        # The floor is one direct call per day; busy days (partial summaries) would
                        # need the whole reduce tree. The bench's generator never makes one.
                        raise ValueError(
                            f"floor prototype: {world_id} {day} has {len(full)} characters of material, over "
                            f"day_material_max_chars ({cfg.day_material_max_chars}); generate smaller days"
                        )
                    source_ids = [m.message_id for m in material]
                    r = summarized(
                        world_id,
                        "day",
                        day,
                        "day",
                        full,
                        [full],
                        cfg.global_day_max_chars,
                        "message",
                        source_ids,
                        len(convs),
                    )
            days_by_world[world_id].append(r)
        day += timedelta(days=1)

    def rollup(window: str, child_rows: dict[str, list[dict]], periods: list[date], child_of, max_chars: int):
        fmt = "%Y-%m-%d" if window == "month" else "%Y-%m"
        reason = logic.CHILD_EMPTY_REASON[window]
        child = logic.CHILD_WINDOW[window]
        made: dict[str, list[dict]] = defaultdict(list)
        for period in periods:
            period_end = day_bounds(_next(window, period), tz)[0]
            for world_id in sorted(w for w, first in first_event.items() if first is not None and first < period_end):
                kids = [
                    k
                    for k in child_rows.get(world_id, [])
                    if child_of(k["period_start"]) == period and k["empty_reason"] is None and k["content"] != ""
                ]
                if not kids:
                    r = row(world_id, window, period, "", reason, child, [], 0, None, None)
                else:
                    material = "\n".join(f"{k['period_start']:{fmt}}: {k['content']}" for k in kids)
                    ids_ = [k["summary_id"] for k in kids]
                    r = summarized(
                        world_id, window, period, window, material, [material], max_chars, child, ids_, len(kids)
                    )
                made[world_id].append(r)
        return made

    months = [date(year, m, 1) for m in range(1, 13)]
    month_rows = rollup("month", days_by_world, months, lambda d: d.replace(day=1), cfg.month_max_chars)
    rollup("year", month_rows, [date(year, 1, 1)], lambda d: d.replace(month=1, day=1), cfg.year_max_chars)

    with store.begin() as conn:
        cursor = conn.connection.dbapi_connection.cursor()
        for name in ("temporal_summaries", "llm_ledger", "llm_cache"):
            cursor.execute(f"DROP TABLE IF EXISTS floor_{name}")
            cursor.execute(f"CREATE TABLE floor_{name} (LIKE {name} INCLUDING ALL)")
        cols = list(out[0]) + ["created_at", "updated_at"] if out else []
        _copy(
            cursor,
            "floor_temporal_summaries",
            cols,
            [
                tuple(json.dumps(v) if k == "source_ids" else v for k, v in r.items())
                + (now.isoformat(), now.isoformat())
                for r in out
            ],
        )
        _copy(
            cursor,
            "floor_llm_ledger",
            [
                "at",
                "asset",
                "partition",
                "task",
                "world_id",
                "model",
                "prompt_version",
                "tokens_in",
                "tokens_out",
                "outcome",
                "cache_key",
                "latency_ms",
                "attempts",
            ],
            [(e[0].isoformat(), f"temporal_{e[1]}", *e[2:], 0, 1) for e in ledger],
        )
        _copy(
            cursor,
            "floor_llm_cache",
            ["cache_key", "model", "prompt_version", "response", "tokens_in", "tokens_out", "created_at"],
            [(k, offline.NAME, prompts.PROMPT_VERSION, v, *tokens[k], now.isoformat()) for k, v in cache.items()],
        )
        cursor.close()
    seconds = time.perf_counter() - started
    by_key = {(r["world_id"], r["window"], r["period_start"].isoformat()): r for r in out}
    return FloorResult(seconds, len(out), sum(1 for e in ledger if e[9] == "ok"), by_key)


def _next(window: str, period: date) -> date:
    if window == "month":
        return date(period.year + (period.month == 12), period.month % 12 + 1, 1)
    return date(period.year + 1, 1, 1)


def compare_rows(store: Store, floor: FloorResult) -> list[str]:
    """Differences between the real run's rows and the floor's (sources of months and years
    compared as the keys of the rows they point at, since row ids are each table's own)."""
    with store.connect() as conn:
        real = [dict(r) for r in conn.execute(select(temporal_summaries)).mappings()]
    real_key = {r["summary_id"]: (r["world_id"], r["window"], r["period_start"].isoformat()) for r in real}
    floor_key = {r["summary_id"]: k for k, r in floor.by_key.items()}
    problems = []
    seen = set()
    for r in real:
        key = (r["world_id"], r["window"], r["period_start"].isoformat())
        seen.add(key)
        f = floor.by_key.get(key)
        if f is None:
            problems.append(f"{key}: no floor row")
            continue
        for col in ("content", "empty_reason", "source_count", "source_kind", "model"):
            if (r[col] or None) != (f[col] or None):
                problems.append(f"{key}: {col} {r[col]!r} != {f[col]!r}")
        if r["window"] == "day":
            if r["source_ids"] != f["source_ids"] or r["material_fp"] != f["material_fp"]:
                problems.append(f"{key}: sources or fingerprint differ")
        elif [real_key[i] for i in r["source_ids"]] != [floor_key[i] for i in f["source_ids"]]:
            problems.append(f"{key}: sources differ")
    problems += [f"{k}: only in the floor" for k in set(floor.by_key) - seen]
    return problems


# --- (a) the Dagster no-op baseline -------------------------------------------------------------


def real_metadata(instance, asset_name: str) -> dict[str, dict]:
    """Per partition, the metadata of the real run's newest materialization of ``asset_name``."""
    from dagster import AssetKey, AssetRecordsFilter

    out: dict[str, dict] = {}
    cursor = None
    while True:
        page = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(asset_name)), limit=1000, cursor=cursor
        )
        for rec in page.records:
            mat = rec.asset_materialization
            out.setdefault(mat.partition, dict(mat.metadata))
        if not page.has_more:
            return out
        cursor = page.cursor


def noop_definitions(metadata: dict[str, dict[str, dict]]):
    """Assets ``noop_day``/``noop_month``/``noop_year`` over the real partitions definitions, each
    with a per-partition check, emitting what the real range run emits and doing no work."""
    from dagster import (
        AssetCheckEvaluation,
        AssetCheckSeverity,
        AssetRecordsFilter,
        AssetSelection,
        BackfillPolicy,
        Definitions,
        MaterializeResult,
        MetadataValue,
        Output,
        asset,
        asset_check,
        define_asset_job,
    )
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,  # as the real checks import it
    )

    from memory_pipeline.defs._shared.partitions import cst_day, cst_month, cst_year

    def make(window, defn, meta):
        @asset(name=f"noop_{window}", partitions_def=defn, backfill_policy=BackfillPolicy.single_run())
        def _asset(context):
            for key in context.partition_keys:
                context.add_asset_metadata(meta.get(key, {}), partition_key=key)
            return MaterializeResult()

        @asset_check(asset=_asset, partitions_def=defn, name=f"noop_{window}_check")
        def _check(context):
            (spec,) = context.check_specs
            keys = list(context.partition_keys)
            for i in range(0, len(keys), 31):
                # Tied to each partition's newest materialization, looked up 31 partitions a query.
                batch = keys[i : i + 31]
                latest = {}
                for rec in context.instance.fetch_materializations(
                    AssetRecordsFilter(asset_key=_asset.key, asset_partitions=batch), limit=len(batch)
                ).records:
                    latest.setdefault(rec.partition_key, rec)
                for key in batch:
                    rec = latest.get(key)
                    yield AssetCheckEvaluation(
                        asset_key=_asset.key,
                        check_name=spec.name,
                        passed=True,
                        partition=key,
                        severity=AssetCheckSeverity.ERROR,
                        blocking=spec.blocking,
                        target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
                            storage_id=rec.storage_id, run_id=rec.run_id, timestamp=rec.timestamp
                        )
                        if rec
                        else None,
                        metadata={
                            "rows_audited": getattr(meta.get(key, {}).get("worlds"), "value", 0),
                            "problems": 0,
                            "first_problems": MetadataValue.md("none"),
                        },
                    )
            yield Output(None)

        return _asset, _check, define_asset_job(f"noop_{window}_job", selection=AssetSelection.assets(_asset))

    made = [make(w, d, metadata.get(w, {})) for w, d in (("day", cst_day), ("month", cst_month), ("year", cst_year))]
    assets, checks, jobs = (list(x) for x in zip(*made, strict=True))
    return Definitions(assets=assets, asset_checks=checks, jobs=jobs)


def run_noop(defs, instance, ranges: list[tuple[str, str, str]]) -> float:
    """The no-op runs over ``ranges`` [(window, first, last)], one run per range: seconds."""
    from memory_pipeline.operations.runner import QUIET  # the real runs' run config: console at WARNING

    started = time.perf_counter()
    for window, first, last in ranges:
        tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
        job = defs.resolve_job_def(f"noop_{window}_job")
        if first == last:
            result = job.execute_in_process(
                instance=instance, partition_key=first, run_config=QUIET, raise_on_error=True
            )
        else:
            result = job.execute_in_process(instance=instance, tags=tags, run_config=QUIET, raise_on_error=True)
        assert result.success
    return time.perf_counter() - started


# --- (c) the raw COPY of the file's message rows ------------------------------------------------


def raw_copy(store: Store, path: Path, foreign_key: bool = False) -> tuple[float, int]:
    """Read the file with orjson and COPY its message rows into a same-shape table (messages'
    columns and indexes, no checks, no dedupe): (seconds, rows). ``LIKE ... INCLUDING ALL`` does
    not copy foreign keys: ``foreign_key`` adds messages' own (to the store's conversations, which
    must hold the file's): the ingest's floor, since the key is work every ingest must do."""
    started = time.perf_counter()
    n = 0
    with store.begin() as conn:
        cursor = conn.connection.dbapi_connection.cursor()
        cursor.execute("DROP TABLE IF EXISTS raw_copy_messages")
        cursor.execute("CREATE TABLE raw_copy_messages (LIKE messages INCLUDING ALL)")
        if foreign_key:
            cursor.execute(
                "ALTER TABLE raw_copy_messages ADD FOREIGN KEY (conversation_id) REFERENCES conversations (conversation_id)"
            )
        now = datetime.now(UTC).isoformat()

        class Reader:
            def __init__(self, fh):
                self.fh = fh

            def read(self, size=-1):
                nonlocal n
                out = []
                for raw in self.fh:
                    e = orjson.loads(raw)
                    at = datetime.fromisoformat(e["timestamp"]).astimezone(UTC).isoformat()
                    calls = json.dumps(e.get("tool_calls"))
                    out.append(
                        f"{e['message_id']}\t{e['conversation_id']}\t{e['role']}\t{_copy_text(e.get('content') or '')}\t"
                        f"{_copy_text(calls)}\t{at}\t{now}\t{_copy_text(f'{path}:{n + len(out) + 1}')}\n"
                    )
                    if len(out) >= 2000:
                        break
                n += len(out)
                return "".join(out)

            readline = read

        with open(path, "rb") as fh:
            cursor.copy_expert(
                "COPY raw_copy_messages (message_id, conversation_id, role, content, tool_calls, at, ingested_at, source) "
                "FROM STDIN",
                Reader(fh),
                size=1 << 20,
            )
        cursor.close()
    return time.perf_counter() - started, n
