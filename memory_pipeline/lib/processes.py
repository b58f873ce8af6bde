"""Processes by group, read from /proc (Linux): what a supervisor waits for and ends as one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    command: str


def processes() -> list[ProcessInfo]:
    """Every process this user can see, zombies included (``state`` "Z")."""
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # ended while we looked
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        found.append(ProcessInfo(int(entry.name), int(fields[1]), int(fields[2]), int(fields[3]), fields[0], command))
    return found


def group_members(pgid: int) -> list[ProcessInfo]:
    """The live (not zombie) processes of process group ``pgid``."""
    return [p for p in processes() if p.pgid == pgid and p.state != "Z"]
