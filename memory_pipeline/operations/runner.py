"""Operator actions as real Dagster runs recorded in the instance: regenerate a partition, backfill
missing partitions, rebuild a range, and the run-per-partition baseline the benchmark compares.

A range is one run (the assets' BackfillPolicy.single_run), as the UI's backfill launches it."""

import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    Definitions,
    ExecuteInProcessResult,
    Failure,
    Field,
    InitLoggerContext,
    JobDefinition,
    PartitionKeyRange,
    TimeWindowPartitionsDefinition,
    logger,
)
from dagster._core.errors import (
    DagsterExecutionInterruptedError,
    DagsterExecutionStepExecutionError,
    DagsterInvalidConfigError,
)
from dagster_shared.error import SerializableErrorInfo

from memory_pipeline.defs._shared.dead_runs import fail_dead_runs, process_tags
from memory_pipeline.defs._shared.run_config import RangeError, check_as_of, check_worlds
from memory_pipeline.lib import settings
from memory_pipeline.operations.registry import targets

INSTANCE_YAML = """\
# Embedded default: SQLite run/event storage under this folder. Production: deploy/production/dagster.yaml.
# Every LLM-calling asset is in the pool "llm": the run queue (dagster dev, the UI) launches one run
# that uses it at a time (default_limit: the limit of any pool not set in the UI). Run granularity:
# a run launched outside the queue (the CLI's runs) is not held back, and one killed mid-step
# leaves no claimed slot behind that would block the next run.
concurrency:
  pools:
    default_limit: 1
    granularity: run
# Dagster's SQLite event log (same files, history/runs/) writing a batch of a run's asset events
# in one transaction, on kept connections (DAGSTER_EVENT_BATCH_SIZE turns the batches on).
event_log_storage:
  module: memory_pipeline.operations.event_log
  class: BatchSqliteEventLogStorage
telemetry:
  enabled: false
"""

# What the CLI wrote before, byte for byte: such a file is replaced by INSTANCE_YAML; any other
# (an operator's edit) is kept as it is.
OLD_INSTANCE_YAMLS = (
    """\
# Embedded default: SQLite run/event storage under this folder. Production: deploy/production/dagster.yaml.
telemetry:
  enabled: false
scheduler:
  module: dagster._core.scheduler
  class: DagsterDaemonScheduler
  config:
    max_catchup_runs: 40
""",
    """\
# Embedded default: SQLite run/event storage under this folder. Production: deploy/production/dagster.yaml.
telemetry:
  enabled: false
""",
    """\
# Embedded default: SQLite run/event storage under this folder. Production: deploy/production/dagster.yaml.
# Every LLM-calling asset is in the pool "llm": the run queue (dagster dev, the UI) launches one run
# that uses it at a time (default_limit: the limit of any pool not set in the UI). Run granularity:
# a run launched outside the queue (the CLI's runs) is not held back, and one killed mid-step
# leaves no claimed slot behind that would block the next run.
concurrency:
  pools:
    default_limit: 1
    granularity: run
telemetry:
  enabled: false
""",
)


def dagster_home() -> Path:
    """The instance folder, with the CLI's dagster.yaml written if it has none or an old default."""
    home = settings.dagster_home()
    yaml = home / "dagster.yaml"
    if not yaml.exists() or yaml.read_text() in OLD_INSTANCE_YAMLS:
        tmp = yaml.with_name(f".dagster.yaml.{os.getpid()}")
        tmp.write_text(INSTANCE_YAML)
        os.replace(tmp, yaml)  # a process reading it at the same time sees one whole file
    return home


def get_instance() -> DagsterInstance:
    """The Dagster instance of DAGSTER_HOME (else data/dagster_home). A dagster.yaml it cannot be
    opened with (a key Dagster refuses, an environment variable it reads that is not set) is a
    ConfigError naming the file and what is wrong, one line, not Dagster's traceback."""
    home = dagster_home()
    try:
        return DagsterInstance.get()
    except DagsterInvalidConfigError as exc:
        said = "; ".join(_config_problem(e.message, e.error_data) for e in exc.errors) or str(exc).splitlines()[0]
        raise settings.ConfigError(f"{home / 'dagster.yaml'} (DAGSTER_HOME's instance): {said}") from None


_UNSET_VARIABLE = re.compile(r'environment variable "(?P<name>[^"]+)" which is not set')


def _config_problem(message: str, data: object) -> str:
    """One error of a dagster.yaml Dagster refused, on one line: an unset variable by its name."""
    text = data.message if isinstance(data, SerializableErrorInfo) else message
    unset = _UNSET_VARIABLE.search(text)
    if unset:
        return f"it reads {unset['name']}, which is not set"
    return " ".join(message.splitlines()[0].split(" Expected: ")[0].split())  # not the whole schema expected


def partition_keys(
    window: str, start: str | None, end: str | None, labels: tuple[str, str] = ("--from", "--to")
) -> tuple[list[str], list[str]]:
    """Keys of ``window`` within [start, end] and notes. End is capped at the last closed window
    (CST today for chunks): a future partition is never generated. ``labels``: what the messages
    call ``start`` and ``end`` (the options that gave them)."""
    known = targets()
    if window not in known:
        # an asset's name, as the UI shows it, under a target of another name (tower_day_windows)
        named = [name for name, t in known.items() if t.asset_key.to_user_string() == window]
        if named:
            raise RangeError(
                f"unknown window {window!r}: that is the asset of the target {named[0]!r}; give {named[0]!r}"
            )
        raise RangeError(f"unknown window {window!r} (one of {', '.join(known)})")
    defn = known[window].partitions
    if not isinstance(defn, TimeWindowPartitionsDefinition):  # every registered target is
        raise RangeError(f"window {window!r} is not partitioned by time")
    keys = defn.get_partition_keys()
    if not keys:
        return [], ["no closed partition yet"]
    notes = []
    for label, value in zip(labels, (start, end), strict=True):
        if value is not None:
            try:
                canonical = defn.time_window_for_partition_key(value).start.strftime(defn.fmt)
            except Exception:  # noqa: BLE001 - re-raised with the expected format
                canonical = None
            if canonical != value:  # keys compare as strings: 2026-1-5 must be written 2026-01-05
                raise RangeError(f"{label} {value!r} is not a partition key of {window} (one such as {keys[-1]!r})")
    lo = start or keys[0]
    hi = end or keys[-1]
    if hi < keys[0]:
        raise RangeError(
            f"empty range: {labels[1]} {hi} is before the first partition {keys[0]} "
            "(nothing is partitioned before MEMORY_PARTITION_START)"
        )
    if lo < keys[0]:
        notes.append(f"{labels[0]} {lo} starts at {keys[0]}: nothing is partitioned before MEMORY_PARTITION_START")
        lo = keys[0]
    if lo > keys[-1]:
        raise RangeError(
            f"empty range: {labels[0]} {lo} is after the last {window} partition {keys[-1]}"
            " (no later window has closed yet)"
        )
    if hi > keys[-1]:
        notes.append(f"{labels[1]} {hi} capped at {keys[-1]}: the window after it is not closed yet")
        hi = keys[-1]
    if lo > hi:
        raise RangeError(f"empty range: {labels[0]} {lo} is after {labels[1]} {hi}")
    return [k for k in keys if lo <= k <= hi], notes


def materialized(instance: DagsterInstance, window: str) -> set[str]:
    return set(instance.get_materialized_partitions(targets()[window].asset_key))


def contiguous(all_keys: list[str], chosen: set[str]) -> list[tuple[str, str]]:
    """Runs of consecutive chosen keys, in order, as (first, last)."""
    out, cur = [], None
    for k in all_keys:
        if k in chosen:
            cur = (cur[0], k) if cur else (k, k)
        elif cur:
            out.append(cur)
            cur = None
    if cur:
        out.append(cur)
    return out


@dataclass
class RunSummary:
    window: str
    first: str
    last: str
    partitions: int
    run_id: str
    success: bool
    error: str = ""
    seconds: float = 0.0
    job: str = ""  # the Dagster job the run is listed under in the UI (a window is the CLI's name for it)


@dataclass
class OperationReport:
    window: str
    mode: str
    requested: int = 0
    skipped_existing: int = 0
    runs: list[RunSummary] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # mode "changed": why each materialized partition is re-run (stale per its record, ...)
    reasons: dict[str, str] = field(default_factory=dict)
    # mode "changed": the target keeps a record of what changed (its ``changed`` function); without
    # one, a materialized partition is skipped as in mode "missing", whatever changed since
    keeps_record: bool = False

    @property
    def partitions(self) -> int:
        """Partitions the runs covered."""
        return sum(r.partitions for r in self.runs)

    @property
    def success(self) -> bool:
        return all(r.success for r in self.runs)


MODES = ("rebuild", "missing", "changed")


def run_config(
    window: str,
    *,
    force_llm: bool = False,
    worlds: list[str] | None = None,
    as_of: str = "",
    rebuild: bool = False,
) -> dict[str, Any]:
    """The run config of an operator's run. It never waits for missing child rows (only runs tagged
    as the nightly cascade do), so a month or year with missing children fails at once, naming them.
    ``rebuild`` (mode "rebuild"): partitions whose record shows nothing changed are rewritten too,
    from the LLM cache (for targets that take it)."""
    target = targets()[window]
    if not target.configurable:
        return dict(QUIET)
    cfg: dict[str, Any] = {"force_llm": force_llm, "worlds": worlds or [], "as_of": as_of}
    if rebuild and target.rebuilds:
        cfg["rebuild"] = True
    return {"ops": {targets()[window].op_name: {"config": cfg}}, **QUIET}


# Runs started from the CLI log warnings to the console, one line each; a failure is the one line
# the CLI prints from the run's result (``error_line``). The instance keeps everything, tracebacks too.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


class _OperatorConsole(logging.Handler):
    """Warnings on stderr, one line each (the first line of the message). Errors are Dagster's own
    failure reports (our assets raise; none logs an error), each with the stack trace appended:
    the CLI states the failure in one line from the run's result instead."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            return
        meta = getattr(record, "dagster_meta", None)
        meta = meta if isinstance(meta, dict) else {}
        text = str(meta.get("orig_message") or record.getMessage()).strip()
        if text:
            where = f"{meta['step_key']}: " if meta.get("step_key") else ""
            print(f"{record.levelname.lower()}: {where}{text.splitlines()[0]}", file=sys.stderr, flush=True)


@logger(
    {"log_level": Field(str, is_required=False, default_value="WARNING"), "name": Field(str, is_required=False)},
    description="The console of an operator's run: warnings one line each, failures left to the CLI.",
)
def operator_console(init_context: InitLoggerContext) -> logging.Logger:
    log = logging.Logger("memory_pipeline.run", level=init_context.logger_config["log_level"])
    log.addHandler(_OperatorConsole())
    return log


def operator_job(job: JobDefinition) -> JobDefinition:
    """The job with the operator's console logger in place of Dagster's (which prints every
    failure with its stack trace, some 80 lines for one LLM error)."""
    return job.with_logger_defs({"console": operator_console})


INTERRUPTED = (
    "interrupted by a signal (Ctrl-C or SIGTERM) during a step: what its steps committed is kept, "
    "the rest is left to do; run the command again"
)


def error_line(error: SerializableErrorInfo | None) -> str:
    """A step's failure naming its cause: Dagster wraps an exception raised in an asset in "Error
    occurred while executing op ...", and the cause (e.g. ``OSError: [Errno 28] No space left on
    device``) is the chained error; a deliberate ``Failure`` is its own message, kept whole without
    the class path Dagster puts before it (``dagster._core.definitions.events.Failure: ``): the
    operator reads what the asset said, the UI keeps Dagster's form."""
    if error is None:
        return "run failed"
    while error.cause is not None and error.cls_name == DagsterExecutionStepExecutionError.__name__:
        error = error.cause
    if error.cls_name == DagsterExecutionInterruptedError.__name__:  # its message is its class path alone
        return INTERRUPTED
    message = error.message.strip()
    if error.cls_name == Failure.__name__:
        message = message.removeprefix(f"{Failure.__module__}.{Failure.__name__}:").strip()
    elif error.cls_name:
        # Another exception keeps its class, not its module's path ("LLMHardFailure: ...", as
        # "OSError: ..." already reads; "memory_pipeline.lib.llm.client.LLMHardFailure: ..." was noise).
        module, found, rest = message.partition(f".{error.cls_name}: ")
        if found and module and not any(c.isspace() for c in module):
            message = f"{error.cls_name}: {rest}"
    return message or (error.cls_name or "error")


def failure_line(result: ExecuteInProcessResult) -> str:
    """A failed run's line: its first failed step's cause (``error_line``)."""
    failures = [e for e in result.all_events if e.is_step_failure]
    return error_line(failures[0].step_failure_data.error) if failures else "run failed"


def _defs(defs: Definitions | None) -> Definitions:
    if defs is not None:
        return defs
    from memory_pipeline.definitions import build_defs

    return build_defs()  # resources from the environment as it is now


def run_range(
    instance: DagsterInstance,
    window: str,
    first: str,
    last: str,
    config: dict[str, Any],
    defs: Definitions | None = None,
) -> RunSummary:
    target = targets()[window]
    job = operator_job(_defs(defs).resolve_job_def(target.job))
    tags = {"memory_pipeline/operation": window, **process_tags()}
    started = datetime.now()
    selection: list[AssetKey] | None = None  # None: the whole job
    if target.subset:  # selecting an asset in execute_in_process would also select every check of it
        selection = [target.asset_key]
    elif target.selection:
        selection = list(target.selection)
    if first != last:
        tags |= {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
    result = job.execute_in_process(
        run_config=config,
        instance=instance,
        partition_key=first if first == last else None,
        raise_on_error=False,
        tags=tags,
        asset_selection=selection,
    )
    error = "" if result.success else failure_line(result)
    n = len(target.partitions.get_partition_keys_in_range(PartitionKeyRange(first, last)))
    seconds = (datetime.now() - started).total_seconds()
    return RunSummary(window, first, last, n, result.run_id, result.success, error, seconds, target.job)


@dataclass(frozen=True)
class FailedCheck:
    """A check result of a run that did not pass: ``check partition``, and whether its severity is
    WARN (attention: e.g. a tower window left failed, which its backoff retries) or ERROR (what the
    run wrote is wrong, or a world was refused)."""

    name: str
    partition: str | None
    warn: bool

    def __str__(self) -> str:
        return " ".join(x for x in (self.name, self.partition, "(WARN)" if self.warn else "") if x)


@dataclass(frozen=True)
class RunFindings:
    """What a run that succeeded may still report: the messages its steps logged at WARNING or above
    (a degraded run: cut or empty answers, worlds refused, Redis down), and its checks that did not
    pass."""

    warnings: list[str]
    failed_checks: list[FailedCheck]


def run_findings(instance: DagsterInstance, run_id: str) -> RunFindings:
    """:class:`RunFindings` of a run, read from its whole log: only where it is shown (the CLI's run
    lines), not in every run."""
    warnings, failed = [], []
    for e in instance.all_logs(run_id):
        if e.dagster_event is None:
            level = e.level if isinstance(e.level, int) else logging.getLevelName(e.level.upper())
            if isinstance(level, int) and level >= logging.WARNING and e.user_message:
                warnings.append(e.user_message)
        elif e.dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluation = e.dagster_event.event_specific_data
            if isinstance(evaluation, AssetCheckEvaluation) and not evaluation.passed:
                warn = evaluation.severity == AssetCheckSeverity.WARN
                failed.append(FailedCheck(evaluation.check_name, evaluation.partition, warn))
    return RunFindings(warnings, failed)


def finished_steps(instance: DagsterInstance, run_id: str) -> list[str]:
    """The steps of a run that succeeded, in order: what a failed run still did (an analyst run's
    dbt build publishes its file when its step ends, whatever the steps after it do)."""
    return [
        e.step_key for e in instance.all_logs(run_id, of_type=DagsterEventType.STEP_SUCCESS) if e.step_key is not None
    ]


def materialize(
    window: str,
    start: str | None = None,
    end: str | None = None,
    *,
    mode: str = "rebuild",
    force_llm: bool = False,
    worlds: list[str] | None = None,
    as_of: str = "",
    per_partition: bool = False,
    rebuild: bool = False,
    instance: DagsterInstance | None = None,
    progress: Callable[[int, int], None] | None = None,
    defs: Definitions | None = None,
) -> OperationReport:
    """mode "rebuild": every partition in the range (regenerate = a one-partition range);
    mode "missing": only partitions never materialized (an existing placeholder is not re-run);
    mode "changed" (incremental): partitions never materialized, and those whose rows a run would
    change according to the domain's record (late data, a new world, child rows written since, another
    model, prompt version or settings); an unchanged range launches no run at all. A target
    without such a record treats "changed" as "missing". ``rebuild`` (what ``memory-pipeline
    rebuild|regenerate`` pass): the runs rewrite partitions whose record shows nothing changed too,
    from the LLM cache; otherwise the assets skip those."""
    if mode not in MODES:
        raise RangeError(f"unknown mode {mode!r} ({', '.join(MODES)})")
    as_of, worlds = check_as_of(as_of), check_worlds(worlds)
    keys, notes = partition_keys(window, start, end)
    instance = instance or get_instance()
    report = OperationReport(window, mode, notes=fail_dead_runs(instance) + notes)
    chosen = set(keys)
    if mode in ("missing", "changed"):
        done = materialized(instance, window)
        changed_fn = targets()[window].changed
        if mode == "changed" and changed_fn is not None:
            report.keeps_record = True
            defs = _defs(defs)
            report.reasons = {k: why for k, why in changed_fn(defs, keys, as_of, instance).items() if k in done}
            done -= set(report.reasons)
        report.skipped_existing = len(chosen & done)
        chosen -= done
    report.requested = len(chosen)
    spans = [(k, k) for k in keys if k in chosen] if per_partition else contiguous(keys, chosen)
    config = run_config(window, force_llm=force_llm, worlds=worlds, as_of=as_of, rebuild=rebuild)
    defs = _defs(defs) if spans else defs
    for i, (first, last) in enumerate(spans):
        report.runs.append(run_range(instance, window, first, last, config, defs))
        if progress:
            progress(i + 1, len(spans))
    return report


def execute_job(
    name: str,
    *,
    run_config: Mapping[str, object] | None = None,
    tags: Mapping[str, str] | None = None,
    instance: DagsterInstance | None = None,
    defs: Definitions | None = None,
) -> ExecuteInProcessResult:
    """Job ``name`` run in this process as an operator's command runs one: the operator's console
    (warnings one line each, a failure left to the caller's one line, no stack traces) and the
    process tags a dead run is found by (``fail_dead_runs``)."""
    job = operator_job(_defs(defs).resolve_job_def(name))
    return job.execute_in_process(
        instance=instance or get_instance(),
        raise_on_error=False,
        tags={**(tags or {}), **process_tags()},
        run_config={**(run_config or {}), **QUIET},
    )


def run_system_rolls(
    as_of: str = "", force: bool = False, instance: DagsterInstance | None = None, defs: Definitions | None = None
) -> RunSummary:
    as_of = check_as_of(as_of)
    started = datetime.now()
    result = execute_job(
        "temporal_system_rolls_job",
        run_config={"ops": {"temporal_system_rolls": {"config": {"as_of": as_of, "force_llm": force}}}},
        instance=instance,
        defs=defs,
    )
    error = "" if result.success else failure_line(result)
    return RunSummary(
        "system_rolls",
        as_of or "now",
        as_of or "now",
        1,
        result.run_id,
        result.success,
        error,
        (datetime.now() - started).total_seconds(),
    )
