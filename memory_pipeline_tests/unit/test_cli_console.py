"""What the command line prints of stored text: an agent's or a file's text (an ESC sequence, a
carriage return, a bell) is shown, never sent to the operator's terminal as a control."""

from __future__ import annotations

import importlib
import io
from pathlib import Path

from rich.console import Console

cli_console = importlib.import_module("memory_pipeline.cli.console")  # the package exports its Console as `console`

CLI = Path(cli_console.__file__).resolve().parent


def test_escape_shows_control_characters_and_keeps_newlines_and_tabs():
    text = "ok\x07\x1b[31m red\r over\x7f\x9b2J [b]x[/b]\n\tnext"
    shown = cli_console.escape(text)
    out = io.StringIO()
    Console(file=out, force_terminal=False, width=200).print(shown)
    printed = out.getvalue()
    assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) < 0xA0 for c in printed), repr(printed)
    first, second = printed.splitlines()  # the newline kept (rich expands the tab)
    assert first == "ok\\x07\\x1b[31m red\\x0d over\\x7f\\x9b2J [b]x[/b]"  # markup printed as text
    assert second.strip() == "next"


def test_every_command_escapes_through_the_console_module():
    for path in CLI.glob("*.py"):
        if path.name != "console.py":
            assert "rich.markup" not in path.read_text(encoding="utf-8"), f"{path.name}: use cli.console.escape"


def test_a_priced_cost_never_reads_as_zero_and_an_unpriced_one_is_a_dash():
    from memory_pipeline.cli.temporal import _cost

    assert _cost(None, 0, 3) == "—"
    assert _cost(0.000026, 3, 3) == "0.000026"
    assert _cost(3e-8, 1, 1) == "3.0e-08"  # "0.000000" would read as free
    assert _cost(0.0, 1, 1) == "0.000000"  # litellm's own 0 (a free model) is shown as it is
    assert _cost(0.5, 2, 4) == "0.500000 (2 unpriced)"


def test_a_run_interrupted_by_a_signal_says_so_not_dagsters_class_path():
    """Ctrl-C or SIGTERM during a run's step: the run line read `failed:
    dagster._core.errors.DagsterExecutionInterruptedError` (the error's message is its class path)."""
    import sys

    from dagster._core.errors import DagsterExecutionInterruptedError
    from dagster._utils.error import serializable_error_info_from_exc_info

    from memory_pipeline.operations.runner import INTERRUPTED, error_line

    try:
        raise DagsterExecutionInterruptedError()
    except DagsterExecutionInterruptedError:
        info = serializable_error_info_from_exc_info(sys.exc_info())
    assert "dagster._core.errors.DagsterExecutionInterruptedError" in info.message  # what was shown
    assert error_line(info) == INTERRUPTED
    assert INTERRUPTED.startswith("interrupted by a signal (Ctrl-C or SIGTERM)")
    try:
        raise OSError(28, "No space left on device")
    except OSError:
        other = serializable_error_info_from_exc_info(sys.exc_info())
    assert error_line(other) == "OSError: [Errno 28] No space left on device"  # any other cause as before


def test_reads_timeline_shows_offsets_only_when_its_times_have_two():
    """`read` printed each time as HH:MM: on a fall-back day (America/New_York, 2026-11-01) the two
    01:30s were the same line. With more than one UTC offset among the times each shows its own;
    a day of one offset keeps the plain clock."""
    from memory_pipeline.cli.temporal import clock_labels

    fall_back = ["2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-01T09:05:12.5-05:00"]
    assert clock_labels(fall_back) == ["01:30 (-04:00)", "01:30 (-05:00)", "09:05 (-05:00)"]
    assert clock_labels(["2026-01-05T09:00:00+08:00", "2026-01-05T21:45:00+08:00"]) == ["09:00", "21:45"]
    assert clock_labels([]) == []
