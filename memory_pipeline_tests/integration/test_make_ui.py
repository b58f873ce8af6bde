"""`make ui` end to end: started as a script's background job starts it (SIGINT ignored, so a
``dagster dev`` left to itself ignores SIGTERM too), on a free port and a fresh data folder. Its
start prints no warning at all once the code location is loaded, and one SIGTERM to make ends
every process it started (webserver, daemon, code servers and their helpers) without a kill."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from memory_pipeline.lib.processes import ProcessInfo, processes
from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline_tests.dagster_stack import WORKSPACE, StackError, free_port, spawn_logged, tail

pytestmark = pytest.mark.e2e

# A Python warning ("...: BetaWarning: ...") or a record a logger wrote at level WARNING.
WARNING_LINE = re.compile(r"\w*Warning: |\bWARNING\b")


def venv_stamp() -> str:
    """The Makefile's $(STAMP): the venv is the one running this test, never rebuilt by it."""
    digest = hashlib.sha1((REPO_ROOT / "requirements.lock").read_bytes() + (REPO_ROOT / "pyproject.toml").read_bytes())
    return f".venv/.installed-{digest.hexdigest()[:12]}"


def session(sid: int) -> list[ProcessInfo]:
    return [p for p in processes() if p.sid == sid and p.state != "Z"]


def location_loaded(url: str) -> bool:
    """The webserver answers and its code location is loaded (the warnings come with the load)."""
    body = json.dumps({"query": WORKSPACE}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        data = json.load(response)["data"]["workspaceOrError"]
    entries = data.get("locationEntries") or []
    for entry in entries:
        if entry["locationOrLoadError"] and entry["locationOrLoadError"]["__typename"] == "PythonError":
            raise StackError(f"code location {entry['name']} failed to load: {entry['locationOrLoadError']}")
    return bool(entries) and all(e["loadStatus"] == "LOADED" for e in entries)


def test_make_ui_starts_without_warnings_and_one_sigterm_stops_every_process(tmp_path: Path):
    port, log = free_port(), tmp_path / "make-ui.log"
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "DAGSTER_"))}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONUNBUFFERED="1")
    command = ["make", "--no-print-directory", "-o", venv_stamp(), "ui"]
    command += [f"UI_PORT={port}", f"MEMORY_DATA_DIR={tmp_path / 'data'}"]
    # its session id is make's pid: every process it starts; SIGINT ignored as `make ui &` in a script
    make = spawn_logged(command, env, log, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 300
        while True:
            if make.poll() is not None:
                raise StackError(f"make ui exited with {make.returncode}\n{tail(log)}")
            try:
                if location_loaded(url):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise StackError(f"make ui did not serve a loaded code location within 300 s\n{tail(log)}")
            time.sleep(1.0)

        started = log.read_text(encoding="utf-8", errors="replace")
        assert "Serving dagster-webserver" in started, started
        assert [line for line in started.splitlines() if WARNING_LINE.search(line)] == [], started

        running = session(make.pid)
        commands = "\n".join(p.command for p in running)
        for part in ("dagster_webserver", "dagster._daemon", "code-server start", "api grpc"):
            assert part in commands, commands

        make.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 150  # dagster dev waits up to 60 s for each of its two services
        while (left := session(make.pid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert left == [], "\n".join(f"{p.pid} {p.command[:150]}" for p in left) + "\n" + tail(log)
        stopped = log.read_text(encoding="utf-8", errors="replace")
        assert "Dagster services shut down." in stopped, stopped
        assert "killed" not in stopped[len(started) :], stopped  # ended by itself, not by the deadline
    finally:
        for group in {p.pgid for p in session(make.pid)}:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        make.wait(timeout=10)


def test_the_code_location_loads_under_dagster_dev_without_the_environment_on_path():
    """`memory-pipeline ui` (not `make ui`) runs without `.venv/bin` on PATH: under dagster dev the
    dbt project is parsed again on load, with this environment's dbt, not one looked up on PATH."""
    import subprocess
    import sys

    path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if not (Path(p) / "dbt").exists())
    env = {**os.environ, "PATH": path, "DAGSTER_IS_DEV_CLI": "1", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    code = "import memory_pipeline.defs.analyst.dbt as d; print(d.MANIFEST.exists())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]
