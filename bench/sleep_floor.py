"""Seed 003's floors: what a span of nightly sleep costs without Dagster and without per-world
round trips, in the same invocation as the real runs (bench/run.py's sleep stage).

* ``set_based_floor``: a bench-only prototype of the span's light sleep, deep sleep and
  autobiography for every world, day by day in the same order, with the store read once (every
  message of the span in one query, the self layer's pinned facts in one) and every state kept in
  memory between days (the semantic memories, the ids each world has used, the narratives, the
  self blocks, each world's last deep-sleep output fingerprint). Each stage calls the package's
  pure code exactly as the real stage does (prompt building, the tool loop over ``MemoryState`` /
  ``NarrativeState`` with the offline model through an ``LLMClient`` that buffers its ledger rows,
  deep sleep's rounds and round logs, the autobiography summary), then every resulting row is
  COPYed at the end, in one transaction, into same-shape ``floor_*`` tables. It handles a forward
  run over days never slept before (what a year's catch-up is): no restore, nothing stale.
* ``compare``: the floor's rows against the real run's (see its docstring for what is compared).
* ``noop_definitions``: bench-only Dagster assets over the same partitions emitting what the real
  range run emits (per day and stage one materialization carrying the real run's metadata for it,
  one check evaluation, the day's log line of totals) and doing no work.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from floor import _copy
from sqlalchemy import select

from memory_pipeline.lib.llm.client import LLMClient
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import conversations, llm_ledger, messages
from memory_pipeline.lib.text import short_hash
from memory_pipeline.lib.timeutil import day_bounds
from memory_pipeline.sleep import deep, prompts
from memory_pipeline.sleep.autobiography import (  # the stage's pure helpers
    _recent,
    narratives_message,
    recent_memories_message,
)
from memory_pipeline.sleep.config import SleepConfig
from memory_pipeline.sleep.context import LoopResult, SleepContext, tool_loop
from memory_pipeline.sleep.light import (
    RECALLABLE_ROLES,
    ask_world,
    build_prompt,
    material_fp,
    record_fields,
    system_for,
)
from memory_pipeline.sleep.logic import (
    Change,
    Memory,
    MemoryState,
    MemoryStatus,
    Op,
    SizeBand,
    Stage,
    message_one,
    size_band,
)
from memory_pipeline.sleep.memory import Provenance, memory_row, version_row
from memory_pipeline.sleep.narrative import Narrative, NarrativeState, summary
from memory_pipeline.sleep.order import DAY_ROW
from memory_pipeline.sleep.prompts import SessionMaterial
from memory_pipeline.sleep.rebuild import SUMMARY_BEFORE, SUMMARY_BLOCK
from memory_pipeline.sleep.tables import (
    autobiographical_memories,
    pinned_facts,
    self_blocks,
    semantic_memories,
    semantic_memory_snapshots,
    semantic_memory_versions,
    sleep_runs,
)

ASSETS = {Stage.LIGHT: "sleep_light_sleep", Stage.DEEP: "sleep_deep_sleep", Stage.AUTOBIOGRAPHY: "sleep_autobiography"}


@dataclass
class FloorRows:
    memories: dict[str, dict[str, Any]] = field(default_factory=dict)  # memory_id -> newest row
    versions: list[dict[str, Any]] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    narratives: dict[str, dict[str, Any]] = field(default_factory=dict)
    blocks: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    runs: dict[tuple[str, date, str], dict[str, Any]] = field(default_factory=dict)
    ledger: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FloorResult:
    seconds: float
    rows: FloorRows
    calls: int
    log_dir: Path


def _record(stage: Stage, day: date, world: str, model: str, **values: Any) -> dict[str, Any]:
    """A state record as StageRun.record builds it (finished_at aside)."""
    row: dict[str, Any] = dict.fromkeys(
        ("sessions", "sessions_truncated", "input_chars", "llm_calls", "tool_calls", "applied", "rejected"), 0
    )
    row |= {"created": 0, "input_fp": None, "detail": {}}
    return (
        row
        | values
        | {
            "stage": str(stage),
            "day": day,
            "world_id": world,
            "status": "done",
            "model": model,
            "prompt_version": prompts.PROMPT_VERSION,
            "finished_at": datetime.now(UTC),
        }
    )


def set_based_floor(store: Store, first: date, last: date, tz: ZoneInfo, cfg: SleepConfig, log_dir: Path, model: str):
    """The sleep of ``first``..``last`` (every stage, every world) in memory, then one COPY per table."""
    started = time.perf_counter()
    start, _ = day_bounds(first, tz)
    _, end = day_bounds(last, tz)
    with store.connect() as conn:  # the span's messages, as light sleep's day_sessions reads each day
        q = (
            select(
                conversations.c.world_id,
                messages.c.conversation_id,
                conversations.c.platform,
                conversations.c.title,
                messages.c.at,
                messages.c.role,
                messages.c.content,
            )
            .join(conversations, conversations.c.conversation_id == messages.c.conversation_id)
            .where(messages.c.at >= start, messages.c.at < end, messages.c.role.in_(RECALLABLE_ROLES))
            .where(conversations.c.debug.is_(False), conversations.c.platform != "cron")
            .order_by(conversations.c.world_id, messages.c.conversation_id, messages.c.at, messages.c.message_id)
        )
        grouped: dict[date, dict[str, dict[str, list[Any]]]] = defaultdict(lambda: defaultdict(dict))
        for w, conv, platform, title, at, role, content in conn.execute(q):
            if (content or "").strip():
                grouped[at.astimezone(tz).date()][w].setdefault(conv, [platform, title, []])[2].append(
                    (at, role, content)
                )
        pinned: dict[str, list[str]] = defaultdict(list)
        for w, content in conn.execute(
            select(pinned_facts.c.world_id, pinned_facts.c.content).order_by(
                pinned_facts.c.world_id,
                pinned_facts.c.priority.desc(),
                pinned_facts.c.created_at,
                pinned_facts.c.fact_id,
            )
        ):
            if len(pinned[w]) < cfg.pinned_top:
                pinned[w].append(content)

    out = FloorRows()
    memories: dict[str, dict[str, Memory]] = defaultdict(dict)  # world -> id -> newest state
    taken: dict[str, set[str]] = defaultdict(set)
    narratives: dict[str, dict[str, Narrative]] = defaultdict(dict)
    blocks: dict[str, dict[str, str]] = defaultdict(dict)
    last_out: dict[str, str | None] = {}
    calls = 0

    def context(stage: Stage, day: date) -> SleepContext:
        llm = LLMClient(store, model=model, asset=ASSETS[stage], partition=day.isoformat())
        llm.buffering = True  # the offline model's ledger rows wait in the client: written at the end
        return SleepContext(store=store, llm=llm, cfg=cfg, tz=tz)

    def active(world: str) -> list[Memory]:
        live = memories.get(world, {})
        return [dataclasses.replace(live[k]) for k in sorted(live) if live[k].status == MemoryStatus.ACTIVE]

    def write(changes: list[Change], stage: Stage, day: date, round_: str | None = None) -> None:
        """As memory.write_changes: the newest state of each memory, one version row per change."""
        for c in changes:
            m = c.memory
            row = out.memories.get(m.id)
            if c.op in (Op.CREATE, Op.MERGE) or row is None:
                row = {"created_by": str(stage), "created_day": day}
            out.memories[m.id] = row | memory_row(m)
            memories[m.world_id][m.id] = copy.deepcopy(m)
            taken[m.world_id].add(m.id)
            out.versions.append(version_row(c, Provenance(stage, day, round_)))

    def finish(ctx: SleepContext, stage: Stage, day: date, worlds: int, detail: dict[str, Any]) -> None:
        nonlocal calls
        out.runs[(str(stage), day, DAY_ROW)] = _record(
            stage, day, DAY_ROW, model, detail={"worlds": worlds, "per_world": detail}
        )
        out.ledger += ctx.llm._pending_ledger
        calls += ctx.llm.stats.calls

    day = first
    while day <= last:
        end_of_day = day_bounds(day, tz)[1]
        # --- light sleep
        ctx = context(Stage.LIGHT, day)
        by_world = {
            w: [SessionMaterial(c, p, t, tuple(lines)) for c, (p, t, lines) in sorted(convs.items())]
            for w, convs in grouped.get(day, {}).items()
        }
        per_world: dict[str, dict[str, Any]] = {}
        for world in sorted(by_world):
            sessions = by_world[world]
            state = MemoryState(world, active(world), salt=f"light:{day}", taken=taken[world])
            prompt = build_prompt(day, sessions, state, system_for(ctx, blocks, pinned, world), ctx)
            loop = LoopResult()
            ask_world(ctx, sessions, state, prompt, end_of_day, loop)  # the stage's own call
            ops = [str(c.op) for c in loop.changes]
            stats = {
                "created": ops.count("create"),
                "updated": ops.count("update"),
                "deprecated": ops.count("deprecate"),
                "rejected": len(loop.rejected),
                "duplicates_skipped": len(loop.skipped),
            }
            per_world[world] = {"sessions": len(prompt.sessions), "truncated": prompt.truncated, **stats}
            out.runs[(str(Stage.LIGHT), day, world)] = _record(
                Stage.LIGHT,
                day,
                world,
                model,
                input_fp=material_fp(sessions),
                **record_fields(prompt, loop, stats),
            )
            write(loop.changes, Stage.LIGHT, day)
        finish(ctx, Stage.LIGHT, day, len(by_world), per_world)

        # --- deep sleep
        ctx = context(Stage.DEEP, day)
        worlds = sorted(w for w, ms in memories.items() if ms)
        seen = 0
        refused: dict[str, dict[str, str]] = {}
        for world in worlds:
            mems = active(world)
            if not mems:
                continue  # nothing as of this day: no snapshot, no record
            one = message_one(mems, tz)
            band = size_band(len(one), cfg.deep_warn_chars, cfg.deep_batch_chars, cfg.deep_refuse_chars)
            if band == SizeBand.REFUSED:
                reason = deep.refusal(world, len(one), cfg.deep_refuse_chars)
                refused[world] = {"refused": reason}
                out.runs[(str(Stage.DEEP), day, world)] = _record(
                    Stage.DEEP,
                    day,
                    world,
                    model,
                    input_chars=len(one),
                    detail={"refused": reason, "message_one_chars": len(one)},
                ) | {"status": "refused"}
                last_out[world] = None
                continue
            seen += 1
            fp = short_hash([prompts.PROMPT_VERSION, model, one], length=32)
            state = MemoryState(world, mems, salt=f"deep:{day}", taken=taken[world])
            records: list[deep.RoundRecord] = []
            writes: list[tuple[Any, list[Change]]] = []
            if fp == last_out.get(world):
                out_fp, detail = fp, {"output_fp": fp, "reused": True, "rounds": 0}
            else:
                system = system_for(ctx, blocks, pinned, world)
                for batch_type, batch in deep._batches(mems, band):
                    deep._run_batch(ctx, day, state, system, batch, batch_type, end_of_day, records, writes)
                out_fp = short_hash([prompts.PROMPT_VERSION, model, message_one(state.active(), tz)], length=32)
                detail = {"output_fp": out_fp, "reused": False, "rounds": len(records)}
            for prov, changes in writes:
                write(changes, Stage.DEEP, day, prov.round)
            out.snapshots += [
                {
                    "day": day,
                    "world_id": world,
                    "memory_id": m.id,
                    "type": m.type,
                    "content": m.content,
                    "source_sessions": list(m.source_sessions),
                    "observed_at": m.observed_at,
                }
                for m in state.active()
            ]
            out.runs[(str(Stage.DEEP), day, world)] = _record(
                Stage.DEEP,
                day,
                world,
                model,
                input_fp=fp,
                input_chars=sum(r.input_chars for r in records),
                llm_calls=sum(r.llm_calls for r in records),
                tool_calls=sum(r.tool_calls for r in records),
                applied=sum(r.applied for r in records),
                rejected=sum(len(r.rejected) for r in records),
                detail=detail,
            )
            last_out[world] = out_fp
            if records:
                deep.write_round_logs(log_dir, day, world, records)
        finish(ctx, Stage.DEEP, day, seen, refused)

        # --- the autobiography
        ctx = context(Stage.AUTOBIOGRAPHY, day)
        window_start = day_bounds(day - timedelta(days=cfg.autobiography_window_days - 1), tz)[0]
        per_world = {}
        worlds = sorted({w for w, ms in memories.items() if ms} | {w for w, ns in narratives.items() if ns})
        for world in worlds:
            items = [copy.deepcopy(n) for n in sorted(narratives[world].values(), key=lambda n: (n.created_day, n.id))]
            mems_shown = _recent(active(world), window_start, end_of_day, tz)
            if not mems_shown and not items:
                continue
            state_n = NarrativeState(world, day, items, [m["id"] for m in mems_shown])
            m1 = recent_memories_message(mems_shown)
            loop = LoopResult()
            if mems_shown:
                m2 = narratives_message(state_n)
                tool_loop(
                    ctx,
                    task="autobiography",
                    world_id=world,
                    system=system_for(ctx, blocks, pinned, world),
                    messages=[{"role": "user", "content": c} for c in (m1, m2, prompts.AUTO_INSTRUCTIONS)],
                    tools=[prompts.AUTO_SCHEMAS[n] for n in prompts.AUTO_TOOLS],
                    apply=state_n.apply,
                    describe=lambda c: f"{c.op} {c.narrative.id}",
                    result=loop,
                )
            created = sum(1 for c in loop.changes if c.op == "create")
            deprecated = sum(1 for c in loop.changes if c.op == "deprecate")
            block = summary(
                list(state_n.items.values()), day, cfg.autobiography_recent_days, cfg.autobiography_summary_max_chars
            )
            before = out.blocks.get((world, SUMMARY_BLOCK))
            before = {"content": before["content"], "updated_by": before["updated_by"]} if before else {}
            per_world[world] = {
                "memories": len(mems_shown),
                "narratives_created": created,
                "deprecated": deprecated,
                "rejected": len(loop.rejected),
            }
            out.runs[(str(Stage.AUTOBIOGRAPHY), day, world)] = _record(
                Stage.AUTOBIOGRAPHY,
                day,
                world,
                model,
                input_fp=short_hash([prompts.PROMPT_VERSION, m1], length=32),
                input_chars=len(m1),
                llm_calls=loop.llm_calls,
                tool_calls=loop.tool_calls,
                applied=created + deprecated,
                rejected=len(loop.rejected),
                created=created,
                detail={
                    "narratives_created": created,
                    "reply": loop.text[:500],
                    "rejected_calls": loop.rejected,
                    SUMMARY_BEFORE: before or None,
                },
            )
            for c in loop.changes:
                n = c.narrative
                narratives[world][n.id] = copy.deepcopy(n)
                row = out.narratives.get(n.id) or {}
                out.narratives[n.id] = row | {
                    k: getattr(n, a)
                    for k, a in (
                        ("memory_id", "id"),
                        ("world_id", "world_id"),
                        ("narrative", "narrative"),
                        ("significance", "significance"),
                        ("kind", "kind"),
                        ("period", "period"),
                        ("source_memory_ids", "source_memory_ids"),
                        ("status", "status"),
                        ("reason", "reason"),
                        ("created_day", "created_day"),
                        ("deprecated_day", "deprecated_day"),
                    )
                }
            blocks[world][SUMMARY_BLOCK] = block
            out.blocks[(world, SUMMARY_BLOCK)] = {
                "world_id": world,
                "name": SUMMARY_BLOCK,
                "content": block,
                "updated_by": str(Stage.AUTOBIOGRAPHY),
            }
        finish(ctx, Stage.AUTOBIOGRAPHY, day, len(per_world), per_world)
        day += timedelta(days=1)

    _write(store, out)
    return FloorResult(time.perf_counter() - started, out, calls, log_dir)


def _value(v: Any) -> Any:
    if isinstance(v, (list, dict)):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    return v


def _write(store: Store, out: FloorRows) -> None:
    """Every row, one COPY per table, in one transaction, into same-shape floor_* tables."""
    now = datetime.now(UTC)
    tables = {
        semantic_memories.name: [r | {"created_at": now, "updated_at": now} for r in out.memories.values()],
        semantic_memory_versions.name: [r | {"at": now} for r in out.versions],
        semantic_memory_snapshots.name: out.snapshots,
        autobiographical_memories.name: [r | {"created_at": now, "updated_at": now} for r in out.narratives.values()],
        self_blocks.name: [r | {"updated_at": now} for r in out.blocks.values()],
        sleep_runs.name: list(out.runs.values()),
        llm_ledger.name: out.ledger,
    }
    with store.begin() as conn:
        cursor = conn.connection.dbapi_connection.cursor()
        for name, rows in tables.items():
            cursor.execute(f"DROP TABLE IF EXISTS floor_{name}")
            cursor.execute(f"CREATE TABLE floor_{name} (LIKE {name} INCLUDING ALL)")
            if rows:
                cols = list(rows[0])
                _copy(cursor, f"floor_{name}", cols, [tuple(_value(r[c]) for c in cols) for r in rows])
        cursor.close()


# --- the comparison ------------------------------------------------------------------------------


def _norm(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.astimezone(UTC).isoformat()
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, (list, dict)):
        return json.dumps(v, ensure_ascii=False, sort_keys=True)
    if isinstance(v, str) and hasattr(v, "value"):  # StrEnum
        return str(v)
    return v


def _rows(rows: list[dict[str, Any]], columns: list[str]) -> Counter:
    return Counter(tuple((c, _norm(r.get(c))) for c in columns) for r in rows)


# What legitimately differs: ids a sequence assigns, and the times rows were written or calls made.
IGNORED = {
    semantic_memories.name: {"created_at", "updated_at"},
    semantic_memory_versions.name: {"version_id", "at"},
    semantic_memory_snapshots.name: set(),
    autobiographical_memories.name: {"created_at", "updated_at"},
    self_blocks.name: {"updated_at"},
    sleep_runs.name: {"finished_at"},
    llm_ledger.name: {"call_id", "at", "latency_ms"},
}


def compare(store: Store, floor: FloorResult, real_log_dir: Path) -> list[str]:
    """Differences between the real run's rows and the floor's: every column of semantic_memories,
    semantic_memory_versions, semantic_memory_snapshots, autobiographical_memories, self_blocks,
    sleep_runs (the state records, their detail JSON included) and llm_ledger, as multisets of rows,
    except the columns in IGNORED (sequence ids, write and call times, latencies); and deep sleep's
    round log files, byte for byte."""
    mine = {
        semantic_memories.name: list(floor.rows.memories.values()),
        semantic_memory_versions.name: floor.rows.versions,
        semantic_memory_snapshots.name: floor.rows.snapshots,
        autobiographical_memories.name: list(floor.rows.narratives.values()),
        self_blocks.name: list(floor.rows.blocks.values()),
        sleep_runs.name: list(floor.rows.runs.values()),
        llm_ledger.name: floor.rows.ledger,
    }
    tables = {
        t.name: t
        for t in (
            semantic_memories,
            semantic_memory_versions,
            semantic_memory_snapshots,
            autobiographical_memories,
            self_blocks,
            sleep_runs,
            llm_ledger,
        )
    }
    problems = []
    with store.connect() as conn:
        for name, table in tables.items():
            real = [dict(r) for r in conn.execute(select(table)).mappings()]
            columns = [c.name for c in table.columns if c.name not in IGNORED[name]]
            a, b = _rows(real, columns), _rows(mine[name], columns)
            if a != b:
                only_real, only_floor = a - b, b - a
                example = next(iter(only_real or only_floor))
                problems.append(
                    f"{name}: {len(real)} real rows, {len(mine[name])} floor rows; {sum(only_real.values())} only in "
                    f"the real run, {sum(only_floor.values())} only in the floor, e.g. "
                    f"{'real' if only_real else 'floor'} {dict(example)}"[:600]
                )
    real_logs = {p.relative_to(real_log_dir): p.read_bytes() for p in real_log_dir.rglob("*.json")}
    floor_logs = {p.relative_to(floor.log_dir): p.read_bytes() for p in floor.log_dir.rglob("*.json")}
    if real_logs != floor_logs:
        problems.append(
            f"round logs: {len(real_logs)} real files, {len(floor_logs)} floor files, "
            f"{sum(1 for k in real_logs if real_logs[k] != floor_logs.get(k))} differ"
        )
    return problems


# --- the Dagster no-op ---------------------------------------------------------------------------


def noop_definitions(metadata: dict[str, dict[str, dict]], log_lines: dict[str, str]):
    """The sleep multi-asset's shape (three subsettable assets over cst_day, one run per range) as
    no-op assets: per day and stage the real run's metadata, the day's log line (the real run logs
    one per day), and per partition one check evaluation tied to the newest materialization."""
    from dagster import (
        AssetCheckEvaluation,
        AssetCheckSeverity,
        AssetKey,
        AssetRecordsFilter,
        AssetSpec,
        BackfillPolicy,
        Definitions,
        MaterializeResult,
        MetadataValue,
        Output,
        asset_check,
        define_asset_job,
        multi_asset,
    )
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )

    from memory_pipeline.defs._shared.partitions import cst_day

    names = list(ASSETS.values())
    keys = [AssetKey(f"noop_{n}") for n in names]

    @multi_asset(
        name="noop_sleep_stages",
        specs=[AssetSpec(k, deps=keys[:i][-1:]) for i, k in enumerate(keys)],
        can_subset=True,
        partitions_def=cst_day,
        backfill_policy=BackfillPolicy.single_run(),
    )
    def _stages(context):
        for key in context.partition_keys:
            for name, akey in zip(names, keys, strict=True):
                context.add_asset_metadata(metadata.get(name, {}).get(key, {}), asset_key=akey, partition_key=key)
            context.log.info(log_lines.get(key, key))
        for akey in keys:
            yield MaterializeResult(asset_key=akey)

    def check(akey, name):
        @asset_check(asset=akey, partitions_def=cst_day, name=f"noop_{name}_check")
        def _check(context):
            (spec,) = context.check_specs
            part_keys = list(context.partition_keys)
            for i in range(0, len(part_keys), 31):
                batch = part_keys[i : i + 31]
                latest = {}
                for rec in context.instance.fetch_materializations(
                    AssetRecordsFilter(asset_key=akey, asset_partitions=batch), limit=len(batch)
                ).records:
                    latest.setdefault(rec.partition_key, rec)
                for key in batch:
                    rec = latest.get(key)
                    yield AssetCheckEvaluation(
                        asset_key=akey,
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
                            "disabled": False,
                            "worlds_audited": 0,
                            "problems": 0,
                            "first_problems": MetadataValue.md("none"),
                        },
                    )
            yield Output(None)

        return _check

    checks = [check(k, n) for k, n in zip(keys, names, strict=True)]
    job = define_asset_job("noop_sleep_job", selection=keys)
    return Definitions(assets=[_stages], asset_checks=checks, jobs=[job])


def run_noop(defs, instance, first: str, last: str) -> float:
    """The no-op over ``first``..``last`` as one run (as the real range run): seconds."""
    from memory_pipeline.operations.runner import QUIET

    started = time.perf_counter()
    job = defs.resolve_job_def("noop_sleep_job")
    if first == last:
        result = job.execute_in_process(instance=instance, partition_key=first, run_config=QUIET, raise_on_error=True)
    else:
        tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
        result = job.execute_in_process(instance=instance, tags=tags, run_config=QUIET, raise_on_error=True)
    assert result.success
    return time.perf_counter() - started


def real_log_lines(instance) -> dict[str, str]:
    """The real run's log line of each day (one per day, its stages' metadata), by partition key."""
    out: dict[str, str] = {}
    for run in instance.get_runs():
        for e in instance.all_logs(run.run_id):
            if e.dagster_event is None and e.user_message.startswith("sleep_light_sleep "):
                out[e.user_message.split()[1].rstrip(":")] = e.user_message
    return out
