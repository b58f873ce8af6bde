"""Every `memory-pipeline ...` command that README.md and docs/*.md show (in a code block or inline
code) parses against the CLI itself: its subcommands exist, its options exist and take the values
shown, its arguments fit. Optional parts written ``[...]`` are checked both left out and given, with
their placeholders (N, ISO, C, ...) as sample values. A command renamed or an option dropped fails
here with the page and line that still shows it. Running them is the demo's and the integration
tests' part (test_cli.py, test_demo_guard.py); this keeps the pages from drifting."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from memory_pipeline import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

COMMAND = re.compile(r"(?:^|(?<=[\s`(])|(?<=bin/))memory-pipeline(?![-\w:])(?P<rest>[^`#|;&]*)")
CODE_SPAN = re.compile(r"`([^`]+)`")
OPTIONAL = re.compile(r"\[([^\[\]]*)\]")
# A placeholder as the pages write it, and a value of its kind for the parser.
PLACEHOLDERS = {
    "N": "1",
    "ISO": "2026-01-05T10:00+08:00",
    "C": "c0",
    "CURSOR": "c0",
    "T": "token",
    "M": "openai/gpt-4o-mini",
    "URL": "sqlite:///x.sqlite",
    "OUT": "out.json",
    "W": "w1",
    "W2": "w2",
    "D": "2026-01-05",
    "NAME": "n1",
    "KEY": "k1",
    "FILE": "events.jsonl",
    "FILE...": "events.jsonl",
    "...": "x",
    '"..."': "x",
}


def shown_commands(page: Path) -> list[tuple[int, str, bool]]:
    """(line, the argument text after ``memory-pipeline``, whether it is a whole command line) for
    each command the page shows: a code block's line is one to run; inline code in prose may name a
    command without its arguments ("`memory-pipeline read` shows ...")."""
    out: list[tuple[int, str, bool]] = []
    fenced = False
    for n, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        pieces = [line] if fenced else CODE_SPAN.findall(line)
        for piece in pieces:
            # the program named alone (a folder tree's comment, a Helm name) is no command to check
            out += [(n, m.group("rest").strip(), fenced) for m in COMMAND.finditer(piece) if m.group("rest").strip()]
    return out


def variants(rest: str) -> list[list[str]]:
    """The command without its optional parts and with all of them, placeholders filled in."""
    bare = OPTIONAL.sub(" ", rest)
    full = OPTIONAL.sub(lambda m: f" {m.group(1)} ", rest)
    return [[PLACEHOLDERS.get(w, w) for w in shlex.split(v)] for v in dict.fromkeys((bare, full))]


def parse(args: list[str], whole: bool = True) -> None:
    """Parse ``args`` as the CLI would, down to the leaf command, without running anything. Not
    ``whole``: a command named in prose, whose required arguments may be left out (its subcommands and
    the options it shows must still exist)."""
    from typer._click.exceptions import MissingParameter, NoArgsIsHelpError

    cmd = typer.main.get_command(cli.app)
    try:
        ctx = cmd.make_context("memory-pipeline", list(args))
        while hasattr(cmd, "resolve_command"):
            rest = [*ctx._protected_args, *ctx.args]
            if not rest:
                return  # a group shown alone ("memory-pipeline tower")
            name, cmd, rest = cmd.resolve_command(ctx, rest)
            ctx = cmd.make_context(name, rest, parent=ctx)
    except (MissingParameter, NoArgsIsHelpError):
        if whole:
            raise


SHOWN = [
    pytest.param(args, whole, id=f"{page.relative_to(ROOT)}:{line}:{i}")
    for page in PAGES
    for line, rest, whole in shown_commands(page)
    for i, args in enumerate(variants(rest))
]


def test_the_pages_show_commands() -> None:
    assert len(SHOWN) >= 40  # the extraction finds the pages' commands (43 distinct when written)


@pytest.mark.parametrize(("args", "whole"), SHOWN)
def test_a_shown_command_parses(args: list[str], whole: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = tmp_path / "checkout" / "here"  # "../x" stays inside tmp_path
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    for a in args:  # the files a command names exist (an argument may require one)
        if re.fullmatch(r"(\.\./)*[\w./-]+\.(jsonl|json|md|yaml)", a) and "*" not in a:
            (cwd / a).parent.mkdir(parents=True, exist_ok=True)
            (cwd / a).write_text("")
    parse(args, whole)


@pytest.mark.parametrize(
    ("args", "whole"),
    [
        (["tokens", "mint", "--world", "w1"], False),  # no such command, even named in prose
        (["tokens", "create", "--planet", "w1"], False),  # no such option
        (["search", "aria", "tomatoes", "-k", "many"], True),  # not an integer
        (["search", "aria"], True),  # a code block's command without its query
    ],
)
def test_a_command_that_drifted_is_refused(args: list[str], whole: bool) -> None:
    from typer._click.exceptions import UsageError

    with pytest.raises(UsageError):
        parse(args, whole)


def test_extraction_reads_code_blocks_and_inline_code_and_fills_placeholders(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "Run `memory-pipeline status` first.\n\n```bash\n"
        '.venv/bin/memory-pipeline search aria "greenhouse tomatoes" [-k N]   # ranked\n```\n'
    )
    found = shown_commands(page)
    assert found == [(1, "status", False), (4, 'search aria "greenhouse tomatoes" [-k N]', True)]
    assert variants(found[1][1]) == [
        ["search", "aria", "greenhouse tomatoes"],
        ["search", "aria", "greenhouse tomatoes", "-k", "1"],
    ]


MAKE = re.compile(r"(?:^|(?<=[\s`(]))make ([a-z][\w-]*)")


def shown_make_targets() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        fenced = False
        for n, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            for piece in [line] if fenced else CODE_SPAN.findall(line):
                out += [(f"{page.relative_to(ROOT)}:{n}", t) for t in MAKE.findall(piece)]
    return out


def test_every_make_target_shown_exists() -> None:
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))
    shown = shown_make_targets()
    assert {"demo", "test"} <= {t for _, t in shown}
    assert [f"{where}: make {t}" for where, t in shown if t not in targets] == []
