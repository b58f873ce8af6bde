"""A real Dagster deployment for end-to-end tests: ``dagster-webserver`` and ``dagster-daemon`` as
subprocesses on the production dagster.yaml (runs, event logs and schedules in PostgreSQL) and
workspace (one standing code server, ``dagster api grpc``, that both reach), a memory store in its
own PostgreSQL schema and Redis.

Every wait is bounded; both process groups are ended on stop, whatever happened; the processes'
output goes to log files whose tails are shown when something fails."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import create_engine, text

from memory_pipeline.defs._shared.deployment import CODE_LOCATION_MODULE
from memory_pipeline.lib.settings import REPO_ROOT

BIN = Path(sys.executable).parent  # dagster-webserver and dagster-daemon of this virtual environment
ADMIN_PG_URL = os.environ.get("TEST_DATABASE_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")

# What the UI's "Materialize" dialog sends for a range of a partitioned asset (ui-core
# LaunchAssetChoosePartitionsDialog.tsx, onLaunchAsBackfill, asset-job branch).
LAUNCH_BACKFILL = """
mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on PartitionSetNotFoundError { message }
    ... on PartitionKeysNotFoundError { message }
    ... on UnauthorizedError { message }
    ... on PipelineNotFoundError { message }
    ... on RunConflict { message }
    ... on InvalidSubsetError { message }
  }
}
"""

BACKFILL_STATUS = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill {
      id status numPartitions isAssetBackfill
      runs(limit: 100) { runId status tags { key value } }
      error { message }
    }
    ... on PythonError { message stack }
    ... on BackfillNotFoundError { message }
  }
}
"""

WORKSPACE = """
query Workspace {
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name loadStatus
        locationOrLoadError { __typename ... on PythonError { message stack } }
      }
    }
    ... on PythonError { message }
  }
}
"""

DAEMONS = """
query Daemons {
  instance { daemonHealth { allDaemonStatuses { daemonType required healthy } } }
}
"""

CHECK_EXECUTIONS = """
query CheckExecutions($assetKey: AssetKeyInput!, $checkName: String!, $limit: Int!) {
  assetCheckExecutions(assetKey: $assetKey, checkName: $checkName, limit: $limit) {
    runId status partition
    evaluation { success partition targetMaterialization { runId } }
  }
}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create_schema(prefix: str) -> tuple[str, str]:
    """A fresh PostgreSQL schema: (schema, SQLAlchemy URL whose connections use it)."""
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(ADMIN_PG_URL)
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    finally:
        admin.dispose()
    return schema, f"{ADMIN_PG_URL}?options=-csearch_path%3D{schema}"


def drop_schema(schema: str) -> None:
    admin = create_engine(ADMIN_PG_URL)
    try:
        with admin.begin() as conn:
            conn.execute(text("SET lock_timeout = '20s'"))
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
    finally:
        admin.dispose()


def dagster_pg_url(sqlalchemy_url: str) -> str:
    """dagster-postgres wants a plain postgresql:// URL (SQLAlchemy 2.0 reads it as psycopg2)."""
    return sqlalchemy_url.replace("postgresql+psycopg2://", "postgresql://", 1)


def tail(path: Path, lines: int = 60) -> str:
    try:
        content = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        return f"({path}: {exc})"
    return "\n".join(content[-lines:])


def spawn_logged(cmd: list[str], env: dict[str, str], log_path: Path, **popen: Any) -> subprocess.Popen:
    """``cmd`` from the checkout, its output to ``log_path``, in a session of its own: its process
    group (code servers, run workers, a Celery worker's children) is ended as one. ``popen``: any
    other Popen argument (a ``preexec_fn``)."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **popen,
        )


class StackError(AssertionError):
    """A wait ran out or the deployment answered with an error; the message has the log tails."""


class DagsterStack:
    """Webserver + daemon on one DAGSTER_HOME. Use as a context manager, or call start/stop.

    By default both reach one standing code server (deploy/production/workspace.yaml, on a free
    port), as production runs it on one machine. ``workspace``: another workspace file instead,
    e.g. the repository's workspace.yaml, whose code servers the webserver and the daemon start
    themselves (the daemon a new one every 60 s)."""

    def __init__(self, home: Path, env: dict[str, str], workspace: Path | None = None):
        self.home = home
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs = {"webserver": home / "webserver.log", "daemon": home / "daemon.log"}
        self.code_port: int | None = None
        if workspace is None:
            self.code_port = free_port()
            workspace = production_workspace(home, self.code_port)
            self.logs = {"code server": home / "code-server.log", **self.logs}
        self.workspace = workspace
        self.procs: dict[str, subprocess.Popen] = {}

    # -- processes ---------------------------------------------------------------------------

    def start(self, *names: str, timeout: float = 600.0) -> None:
        """Start ``names`` (default: both) that are not running yet, after the standing code
        server (if any) answers: a webserver finding it down would show the location as failed."""
        if self.code_port is not None and "code server" not in self.procs:
            self._spawn("code server", code_server_command(self.code_port))
            self.wait_code_server(timeout)
        commands = {
            "webserver": [
                str(BIN / "dagster-webserver"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-w",
                str(self.workspace),
            ],
            "daemon": [str(BIN / "dagster-daemon"), "run", "-w", str(self.workspace)],
        }
        for name, cmd in commands.items():
            if (names and name not in names) or name in self.procs:
                continue
            self._spawn(name, cmd)

    def _spawn(self, name: str, cmd: list[str]) -> None:
        self.procs[name] = spawn_logged(cmd, self.env, self.logs[name])

    def members(self, name: str) -> list[str]:
        """The command lines of the live processes in ``name``'s process group."""
        out = []
        for pid in _group_members({self.procs[name].pid}):
            try:
                out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                pass  # ended meanwhile
        return out

    def wait_code_server(self, timeout: float) -> None:
        """The standing code server answers a ping (it loads the code location before it serves)."""
        from dagster._core.errors import DagsterUserCodeUnreachableError
        from dagster._grpc.client import DagsterGrpcClient

        client = DagsterGrpcClient(port=self.code_port, host="127.0.0.1")

        def answers() -> bool:
            try:
                client.ping("stack")
            except DagsterUserCodeUnreachableError:
                return False
            return True

        self.wait_until("the code server to answer", answers, timeout)

    def stop(self, timeout: float = 20.0) -> list[int]:
        """SIGTERM to each process group (the processes, their code servers and run workers), then
        SIGKILL to whatever is left after ``timeout``. Returns the pids still alive after that."""
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        groups = {proc.pid for proc in self.procs.values()}
        while _group_members(groups) and time.monotonic() < deadline:
            time.sleep(0.2)  # children (code servers, run workers) finishing after their parent
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGKILL)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 5
        while (left := _group_members(groups)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def __enter__(self) -> DagsterStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tails(self, lines: int = 60) -> str:
        parts = []
        for name, path in self.logs.items():
            proc = self.procs.get(name)
            state = (
                "not started" if proc is None else f"exit code {proc.poll()}" if proc.poll() is not None else "running"
            )
            parts.append(f"----- {name} ({state}): last {lines} lines of {path} -----\n{tail(path, lines)}")
        return "\n".join(parts)

    def fail(self, message: str) -> StackError:
        return StackError(f"{message}\n{self.log_tails()}")

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise self.fail(f"dagster {name} exited with code {proc.returncode}")

    # -- GraphQL -----------------------------------------------------------------------------

    def graphql(self, query: str, variables: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = json.load(response)
        if payload.get("errors"):
            raise self.fail(f"GraphQL errors: {json.dumps(payload['errors'])[:2000]}")
        return payload["data"]

    def wait_until(self, what: str, probe: Callable[[], Any], timeout: float, interval: float = 1.0) -> Any:
        """Call ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                result = probe()
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                result, last = None, exc
            if result:
                return result
            time.sleep(interval)
        raise self.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")

    def wait_webserver(self, timeout: float = 300.0) -> None:
        """The webserver answers and its code location is loaded."""

        def server_up():
            with urllib.request.urlopen(f"{self.url}/server_info", timeout=5) as response:
                return response.status == 200

        self.wait_until("the webserver to answer /server_info", server_up, timeout)

        def location_loaded():
            data = self.graphql(WORKSPACE)["workspaceOrError"]
            if data["__typename"] != "Workspace":
                raise self.fail(f"workspace: {data}")
            entries = data["locationEntries"]
            if not entries or any(e["loadStatus"] != "LOADED" for e in entries):
                return False
            for entry in entries:
                if entry["locationOrLoadError"]["__typename"] == "PythonError":
                    raise self.fail(f"code location {entry['name']} failed to load: {entry['locationOrLoadError']}")
            return True

        self.wait_until("the code location to load", location_loaded, timeout)

    def daemon_statuses(self) -> dict[str, bool]:
        """{daemon type: healthy} of the daemons the instance requires, as the UI shows them."""
        statuses = self.graphql(DAEMONS)["instance"]["daemonHealth"]["allDaemonStatuses"]
        return {s["daemonType"]: s["healthy"] for s in statuses if s["required"]}

    def wait_daemons_healthy(self, timeout: float = 300.0) -> dict[str, bool]:
        def healthy():
            statuses = self.daemon_statuses()
            return statuses if statuses and all(statuses.values()) else None

        return self.wait_until("the daemons to report healthy", healthy, timeout, interval=2.0)

    def launch_backfill(self, asset: str, partitions: list[str], tags: dict[str, str] | None = None) -> str:
        """``tags``: more run tags, as the launch dialog's "Add tags" sets them."""
        tags = {"dagster/from_ui": "true", **(tags or {})}
        params = {
            "tags": [{"key": k, "value": v} for k, v in tags.items()],
            "assetSelection": [{"path": [asset]}],
            "partitionNames": partitions,
            "fromFailure": False,
        }
        result = self.graphql(LAUNCH_BACKFILL, {"backfillParams": params})["launchPartitionBackfill"]
        if result["__typename"] != "LaunchBackfillSuccess":
            raise self.fail(f"launchPartitionBackfill: {result}")
        return result["backfillId"]

    def backfill(self, backfill_id: str) -> dict[str, Any]:
        data = self.graphql(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]
        if data["__typename"] != "PartitionBackfill":
            raise self.fail(f"partitionBackfillOrError: {data}")
        return data

    def wait_backfill(self, backfill_id: str, timeout: float = 600.0) -> dict[str, Any]:
        """Poll until the backfill leaves REQUESTED (and CANCELING / FAILING): its final state."""
        done = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}

        def finished():
            data = self.backfill(backfill_id)
            return data if data["status"] in done else None

        return self.wait_until(f"backfill {backfill_id} to finish", finished, timeout, interval=2.0)


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session: the group id is the leader's pid
    except (ProcessLookupError, PermissionError):
        pass


def _group_members(groups: set[int]) -> list[int]:
    """Live (not zombie) processes whose process group is one of ``groups``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if fields[0] != "Z" and int(fields[2]) in groups:
            members.append(int(entry.name))
    return members


def stack_env(home: Path, dagster_url: str, memory_url: str, redis_url: str) -> dict[str, str]:
    """The environment of both processes (and so of the code servers and run workers): this
    checkout first on the path, the offline model, nothing inherited that names another store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        DAGSTER_PG_URL=dagster_pg_url(dagster_url),
        MEMORY_DATABASE_URL=memory_url,
        REDIS_URL=redis_url,
        MEMORY_DATA_DIR=str(home / "data"),
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        DBT_SEND_ANONYMOUS_USAGE_STATS="false",
        PYTHONUNBUFFERED="1",
    )
    return env


# How long a test stack's run may take from launch to its worker starting before run monitoring
# fails it. Production's 300 s (asserted in test_production_instance against the shipped file) is
# too short for a 2-core machine running several stacks at once: a run worker importing the code
# location there has taken minutes, and a start timeout then fails a run the test waits for.
TEST_START_TIMEOUT_SECONDS = 1800


def code_server_command(port: int) -> list[str]:
    """The standing code server as deploy/production/workspace.yaml's header starts it."""
    server = load_from_production()["grpc_server"]
    return [
        str(BIN / "dagster"),
        "api",
        "grpc",
        "-m",
        CODE_LOCATION_MODULE,
        "-h",
        server["host"],
        "-p",
        str(port),
        "--location-name",
        server["location_name"],
    ]


def load_from_production() -> dict[str, Any]:
    """The one entry of deploy/production/workspace.yaml's ``load_from``."""
    (entry,) = yaml.safe_load((REPO_ROOT / "deploy" / "production" / "workspace.yaml").read_text())["load_from"]
    return entry


def production_workspace(home: Path, port: int) -> Path:
    """deploy/production/workspace.yaml as it ships, except the code server's port (a free one)."""
    home.mkdir(parents=True, exist_ok=True)
    entry = load_from_production()
    entry["grpc_server"]["port"] = port
    path = home / "workspace.yaml"
    path.write_text(yaml.safe_dump({"load_from": [entry]}, sort_keys=False))
    return path


def production_home(home: Path) -> Path:
    """deploy/production/dagster.yaml as it ships, except the start timeout above."""
    home.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load((REPO_ROOT / "deploy" / "production" / "dagster.yaml").read_text())
    config["run_monitoring"]["start_timeout_seconds"] = TEST_START_TIMEOUT_SECONDS
    (home / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return home


class CeleryWorkers:
    """``memory-pipeline celery-worker`` processes (one Celery worker each, concurrency 1) on the
    broker of ``env`` (MEMORY_CELERY_BROKER_URL), each in a session of its own and logging to a file."""

    def __init__(self, home: Path, env: dict[str, str], names: list[str]):
        self.home, self.names = home, names
        self.env = {**env, "PATH": os.pathsep.join([str(BIN), env.get("PATH", "")])}
        self.logs = {name: home / f"celery-{name}.log" for name in names}
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        config = REPO_ROOT / "deploy" / "celery" / "celery.yaml"
        for name in self.names:
            cmd = [str(BIN / "memory-pipeline"), "celery-worker", "-y", str(config), "-n", name, "--concurrency", "1"]
            self.procs[name] = spawn_logged(cmd, self.env, self.logs[name])

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Each worker logs ``<name>@<host> ready.`` once it consumes from the broker."""
        deadline = time.monotonic() + timeout
        waiting = set(self.names)
        while waiting and time.monotonic() < deadline:
            for name in list(waiting):
                proc = self.procs[name]
                if proc.poll() is not None:
                    raise StackError(f"celery worker {name} exited with code {proc.returncode}\n{self.log_tails()}")
                text = self.logs[name].read_text(encoding="utf-8", errors="replace")
                if f"{name}@" in text and " ready." in text:
                    waiting.discard(name)
            time.sleep(1.0)
        if waiting:
            raise StackError(
                f"timed out after {timeout:.0f} s waiting for workers {sorted(waiting)}\n{self.log_tails()}"
            )

    def stop(self, timeout: float = 30.0) -> list[int]:
        """SIGTERM (a warm shutdown), then SIGKILL to what is left; the pids still alive after that."""
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        groups = {proc.pid for proc in self.procs.values()}
        deadline = time.monotonic() + timeout
        while _group_members(groups) and time.monotonic() < deadline:
            time.sleep(0.2)
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGKILL)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 5
        while (left := _group_members(groups)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def log_tails(self, lines: int = 40) -> str:
        return "\n".join(
            f"----- celery worker {name}: last {lines} lines of {path} -----\n{tail(path, lines)}"
            for name, path in self.logs.items()
        )
