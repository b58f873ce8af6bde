"""The one place the environment is read, and the strict loader of ``memory.<section>`` config.

The embedded default needs nothing: SQLite under ``data/``, an in-process cache and the offline
model. Every state path has one rule (:func:`data_dir`): ``MEMORY_DATA_DIR``, else ``data/`` of the
working directory, never a folder next to the installed code. Production sets ``MEMORY_DATABASE_URL``, ``REDIS_URL`` and ``MEMORY_LLM_MODEL`` (and
``MEMORY_DUCKDB_PATH`` for the analyst's DuckDB file). Each domain
declares its section as a frozen dataclass and loads it with :func:`load_section`.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from memory_pipeline.lib.kinds import ExecutorKind

# The checkout (the tests, the dbt project); never where state is written: see data_dir().
REPO_ROOT = Path(__file__).resolve().parents[2]
OFFLINE_MODEL = "offline/deterministic-extractive-v8"

# Names of the variables resources read through dg.EnvVar: the UI shows the name, never the value.
ENV_DATABASE_URL = "MEMORY_DATABASE_URL"
ENV_DATA_DIR = "MEMORY_DATA_DIR"
ENV_REDIS_URL = "REDIS_URL"
ENV_LLM_MODEL = "MEMORY_LLM_MODEL"
ENV_LLM_API_BASE = "MEMORY_LLM_API_BASE"
ENV_LLM_API_KEY = "MEMORY_LLM_API_KEY"
ENV_CONFIG_FILE = "MEMORY_CONFIG_FILE"
ENV_DUCKDB_PATH = "MEMORY_DUCKDB_PATH"
ENV_TIMEZONE = "MEMORY_TIMEZONE"
# Past one machine: the executor of every job, the Celery broker (Redis: also the result backend),
# and the bounded runs a backfill is split into.
ENV_EXECUTOR = "MEMORY_EXECUTOR"
ENV_CELERY_BROKER_URL = "MEMORY_CELERY_BROKER_URL"
ENV_BACKFILL_MAX_PARTITIONS_PER_RUN = "MEMORY_BACKFILL_MAX_PARTITIONS_PER_RUN"
# Dagster's own switch (read on every event): a batch of one run's asset events is one write.
ENV_DAGSTER_EVENT_BATCH_SIZE = "DAGSTER_EVENT_BATCH_SIZE"
DAGSTER_EVENT_BATCH_SIZE = "1000"


class ConfigError(ValueError):
    """A setting or config key with a wrong value; the message names the key."""


@contextmanager
def overridden(values: dict[str, str | None]) -> Iterator[None]:
    """Run with these variables set (None: unset), then put back what was there: for a process that
    builds Dagster definitions (their resources read the environment) for a store of its own."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def data_dir() -> Path:
    """Where every default state path lives: MEMORY_DATA_DIR, else ``data/`` of the working
    directory (absolute, so a process that changes directory later keeps writing there). The store
    ``memory.sqlite``, the Dagster instance ``dagster_home/``, ``logs/``, the Markdown projection
    ``objects/``, ``sample/`` and the analyst's ``analytics.duckdb`` (with ``analytics_parquet/`` and
    ``analytics_report.png``) are under it unless their own setting names another place."""
    return Path(env(ENV_DATA_DIR) or Path.cwd() / "data").resolve()


def make_folder(path: Path, setting: str) -> Path:
    """``path`` as a folder, made if missing; one that cannot be (a path under /proc or /sys, a file
    in the way, no permission) is a ConfigError naming ``setting``, the variable it comes from."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = exc.filename or path
        cause = "a file is in the way" if isinstance(exc, (FileExistsError, NotADirectoryError)) else exc.strerror
        shown = f"{setting}={env(setting)}" if env(setting) else f"{setting} (unset)"
        raise ConfigError(f"{shown}: cannot make the folder {where} ({cause})") from None
    return path


def default_sqlite_url() -> str:
    path = make_folder(data_dir(), ENV_DATA_DIR) / "memory.sqlite"
    return f"sqlite:///{path}"


def database_url() -> str:
    return env(ENV_DATABASE_URL) or default_sqlite_url()


def duckdb_path() -> Path:
    """The analyst's DuckDB file (MEMORY_DUCKDB_PATH), by default data/analytics.duckdb."""
    return Path(env(ENV_DUCKDB_PATH) or data_dir() / "analytics.duckdb")


def redis_url() -> str | None:
    return env(ENV_REDIS_URL)


def dagster_home() -> Path:
    """The Dagster instance folder: DAGSTER_HOME, else data/dagster_home (exported for Dagster).
    Also exports DAGSTER_EVENT_BATCH_SIZE=1000 unless set: Dagster then hands a run's planned
    events and an output's materializations over a range to the event log as one batch."""
    setting = "DAGSTER_HOME" if env("DAGSTER_HOME") else ENV_DATA_DIR
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(data_dir() / "dagster_home")))
    os.environ.setdefault(ENV_DAGSTER_EVENT_BATCH_SIZE, DAGSTER_EVENT_BATCH_SIZE)
    return make_folder(home, setting)


def child_environment(pythonpath_first: str) -> dict[str, str]:
    """This process's environment for a child process, with a folder put first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([pythonpath_first, *filter(None, [env.get("PYTHONPATH")])])
    return env


def offline_litellm() -> None:
    """litellm fetches its cost map from the internet at import unless told not to."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def config_file() -> str | None:
    return env(ENV_CONFIG_FILE)


def timezone_name() -> str:
    name = env(ENV_TIMEZONE, "Asia/Shanghai") or "Asia/Shanghai"
    if name == "localtime":  # a file of the machine's, not a zone: two machines would cut two calendars
        raise ConfigError(
            f"{ENV_TIMEZONE}: 'localtime' is this machine's own setting, not a zone the store can record; "
            "name the zone itself (e.g. Asia/Shanghai)"
        )
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder such as "America"
        raise ConfigError(f"{ENV_TIMEZONE}: unknown time zone {name!r}") from None
    return name


def partition_start() -> str:
    """First day of the partitioned history (YYYY-MM-DD); the LoCoMo data starts in 2022."""
    value = env("MEMORY_PARTITION_START", "2022-01-01") or "2022-01-01"
    try:
        import datetime as _dt

        _dt.date.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"MEMORY_PARTITION_START: {value!r} is not a date (YYYY-MM-DD)") from None
    return value


def llm_timeout_seconds() -> float:
    """Seconds one model call may take (0 would time every call out at once)."""
    value = float(_number("MEMORY_LLM_TIMEOUT_SECONDS", "60", float))
    if value == 0:
        raise ConfigError("MEMORY_LLM_TIMEOUT_SECONDS: must be greater than 0 (the seconds a model call may take)")
    return value


def llm_max_retries() -> int:
    return int(_number("MEMORY_LLM_MAX_RETRIES", "3", int))


def llm_breaker_failures() -> int:
    """Consecutive calls failing after their retries that open a provider's breaker (0: never)."""
    return int(_number("MEMORY_LLM_BREAKER_FAILURES", "5", int))


def llm_breaker_cooldown_seconds() -> float:
    """How long an open breaker refuses every call before it lets one through to try again."""
    return float(_number("MEMORY_LLM_BREAKER_COOLDOWN_SECONDS", "60", float))


def executor_kind() -> ExecutorKind:
    """MEMORY_EXECUTOR: multiprocess (default), celery or k8s; anything else is refused by name."""
    raw = env(ENV_EXECUTOR, ExecutorKind.MULTIPROCESS.value) or ExecutorKind.MULTIPROCESS.value
    try:
        kind = ExecutorKind(raw)
    except ValueError:
        allowed = ", ".join(k.value for k in ExecutorKind)
        raise ConfigError(f"{ENV_EXECUTOR}: {raw!r} is not one of {allowed}") from None
    if kind is ExecutorKind.CELERY and not env(ENV_CELERY_BROKER_URL):
        raise ConfigError(f"{ENV_EXECUTOR}=celery needs {ENV_CELERY_BROKER_URL} (e.g. redis://host:6379/9)")
    return kind


def backfill_max_partitions_per_run() -> int:
    """MEMORY_BACKFILL_MAX_PARTITIONS_PER_RUN: 0 (default) keeps a backfill one run per range;
    N splits it into runs of at most N partitions, which the run queue hands to several workers."""
    return int(_number(ENV_BACKFILL_MAX_PARTITIONS_PER_RUN, "0", int))


def _number(name: str, default: str, kind: type) -> Any:
    raw = env(name, default) or default
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}: {raw!r} is not a number") from None
    if value < 0:
        raise ConfigError(f"{name}: must not be negative, got {raw!r}")
    return value


T = TypeVar("T")


def _check_type(key: str, value: Any, annotation: Any) -> None:
    """YAML is loose (``'no'`` is a string, ``true`` is an int to Python): accept exactly the
    declared type, naming the key otherwise."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        if any(_matches(value, a) for a in typing.get_args(annotation)):
            return
    elif _matches(value, annotation):
        return
    want = getattr(annotation, "__name__", str(annotation))
    raise ConfigError(f"{key}: expected {want}, got {type(value).__name__} {value!r}")


def _matches(value: Any, annotation: Any) -> bool:
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    return isinstance(value, annotation) if isinstance(annotation, type) else True


def load_section(
    section: str, cls: type[T], path: str | os.PathLike[str] | None = None, sections: Sequence[str] = ()
) -> T:
    """``memory.<section>`` of the YAML file (``MEMORY_CONFIG_FILE``) as ``cls``, a frozen
    dataclass whose fields carry the defaults. Unknown keys and wrong types are errors naming
    ``file: memory.<section>.<key>``; a missing file or section gives the defaults. ``sections``:
    every section the project reads; any other key under ``memory`` (a misspelt section would
    otherwise leave its settings at their defaults without a word), and any top-level key but
    ``memory``, is an error too."""
    path = path or config_file()
    if not path:
        return cls()
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    except yaml.MarkedYAMLError as exc:  # one line: where, and what the parser expected
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        said = " ".join(x for x in (exc.context, exc.problem) if x)
        raise ConfigError(f"{where}: not valid YAML ({said or type(exc).__name__})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if doc is None:
        return cls()
    if not isinstance(doc, dict) or not isinstance(doc.get("memory", {}) or {}, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'memory' key at the top")
    stray = sorted(map(str, set(doc) - {"memory"}))
    if stray:
        raise ConfigError(f"{path}: unknown top-level key(s) {', '.join(stray)}: the settings go under 'memory'")
    memory = doc.get("memory") or {}
    unknown = sorted(map(str, set(memory) - {*sections, section})) if sections else []
    if unknown:
        raise ConfigError(
            f"{path}: unknown section(s) memory.{', memory.'.join(unknown)} (the sections: {', '.join(sorted(sections))})"
        )
    raw = memory.get(section)
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: memory.{section} must be a mapping, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) in memory.{section}: {', '.join(map(str, unknown))}")
    hints = typing.get_type_hints(cls)
    for key, value in raw.items():
        _check_type(f"{path}: memory.{section}.{key}", value, hints[key])
    value = cls(**raw)
    validate = getattr(value, "validate", None)
    if validate is not None:
        try:
            validate()
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return value
