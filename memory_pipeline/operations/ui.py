"""`memory-pipeline ui` (what `make ui` runs): ``dagster dev`` on the repository's workspace.yaml,
started and stopped as one unit.

``dagster dev`` stops its webserver, daemon and code server on SIGINT, and maps SIGTERM to whatever
SIGINT does, so where SIGINT is ignored (a command started in the background of a script, under
nohup) SIGTERM is ignored too, and a SIGTERM to ``make`` alone never reached it. Here it runs in a
process group of its own with SIGINT at its default; SIGTERM, SIGINT or SIGHUP to this process is
passed on to it once, as SIGINT, and then the whole group (webserver, daemon, code servers, their
helpers) is waited for up to a deadline; whatever is left after it is killed, and said so.

Run as a module, this is ``dagster`` 's own command line with one notice filtered: that
``dagster dev`` is superseded by ``dg dev`` (of a package we do not install)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from types import FrameType

from memory_pipeline.lib.processes import ProcessInfo, group_members
from memory_pipeline.lib.settings import REPO_ROOT
from memory_pipeline.operations.runner import dagster_home

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
DEFAULT_STOP_TIMEOUT = 90.0  # dagster dev gives the webserver and the daemon 60 s each to end
_POLL = 0.2


def dagster_dev_command(port: int | None = None, host: str | None = None) -> list[str]:
    command = [sys.executable, "-m", __name__, "dev", "-w", str(REPO_ROOT / "workspace.yaml")]
    if port is not None:
        command += ["-p", str(port)]
    if host is not None:
        command += ["-h", host]
    return command


def run_ui(
    port: int | None = None,
    host: str | None = None,
    stop_timeout: float = DEFAULT_STOP_TIMEOUT,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> int:
    """Run ``dagster dev`` until it ends or a stop signal arrives; the exit code is dagster dev's
    (1 if anything had to be killed)."""
    # The instance the CLI's runs use (DAGSTER_HOME, else <data dir>/dagster_home) with the CLI's
    # dagster.yaml when it has none, so a UI started first does not run on a config-less instance.
    dagster_home()
    stop: dict[str, float] = {}
    child: subprocess.Popen[bytes] | None = None

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        if "at" in stop:
            return  # a second SIGINT would cut dagster dev's own shutdown short
        stop["at"] = time.monotonic() + stop_timeout
        say(f"{signal.Signals(signum).name}: stopping dagster dev (up to {stop_timeout:.0f} s)")
        if child is not None:
            _signal(child.pid, signal.SIGINT)

    # Handlers first: a caught signal is reset to its default in the child (an ignored one would
    # stay ignored), and a signal during the start is not lost.
    previous = {sig: signal.signal(sig, request_stop) for sig in STOP_SIGNALS}
    try:
        child = subprocess.Popen(
            dagster_dev_command(port, host), cwd=REPO_ROOT, stdin=subprocess.DEVNULL, process_group=0
        )
        if "at" in stop:
            _signal(child.pid, signal.SIGINT)
        while (code := child.poll()) is None and time.monotonic() < stop.get("at", float("inf")):
            time.sleep(_POLL)
        # dagster dev ended (or the deadline passed): its group must empty, on a stop by the
        # deadline, after a crash within a short grace (its code server would linger on).
        deadline = stop.get("at", time.monotonic() + 10.0)
        while (left := group_members(child.pid)) and time.monotonic() < deadline:
            time.sleep(_POLL)
        if left:
            say(_killed(left, stop_timeout))
            _signal(child.pid, signal.SIGKILL, group=True)
            code = child.wait()
            return 1
        return code if code is not None else child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _signal(pid: int, sig: signal.Signals, group: bool = False) -> None:
    try:
        os.killpg(pid, sig) if group else os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _killed(left: list[ProcessInfo], timeout: float) -> str:
    lines = [f"killed {len(left)} processes of dagster dev still running after {timeout:.0f} s:"]
    lines += [f"  {p.pid} {p.command[:120]}" for p in left]
    return "\n".join(lines)


if __name__ == "__main__":
    from dagster._cli import main
    from dagster._utils.warnings import SupersessionWarning

    warnings.filterwarnings("ignore", message=r"Function `dev_command` is superseded", category=SupersessionWarning)
    sys.argv[0] = "dagster"
    main()  # type: ignore[no-untyped-call]  # unannotated in dagster
