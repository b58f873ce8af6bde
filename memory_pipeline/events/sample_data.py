"""A deterministic sample data set in the JSONL ingestion format: several worlds over several
months, mixed platforms, debug and cron conversations, tool-only turns and quiet days."""

from __future__ import annotations

import json
import random
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from memory_pipeline.events.ingest import Event, ToolCalls, event_line

WORLDS = {
    "aria": ["garden", "tomatoes", "compost", "watering", "seedlings", "greenhouse", "harvest"],
    "bolt": ["refactor", "database", "migration", "deploy", "pipeline", "benchmark", "latency"],
    "cora": ["marathon", "training", "interval", "recovery", "nutrition", "stretching", "pacing"],
}
PLATFORMS = ["local", "discord", "weixin", "remote:coding", "remote:companion"]
SAMPLE_START = date(2025, 10, 1)
SAMPLE_END = date(2026, 1, 15)  # the demo reads "today" as this day at 10:00
SAMPLE_READ_AT = "2026-01-15T10:00:00+08:00"


def _sentence(rng: random.Random, topics: list[str]) -> str:
    a, b = rng.sample(topics, 2)
    verbs = ["planned", "discussed", "reviewed", "fixed", "compared", "scheduled", "measured"]
    return f"We {rng.choice(verbs)} the {a} and the {b} today, {rng.choice(['briefly', 'in detail', 'again'])}."


def generate(
    path: Path, start: date = SAMPLE_START, end: date = SAMPLE_END, seed: int = 7, tz: str = "Asia/Shanghai"
) -> int:
    """Write the sample to ``path``; returns the number of lines. Same arguments, same file."""
    rng = random.Random(seed)
    zone = ZoneInfo(tz)
    lines: list[Event] = []
    counter = 0

    def add(
        world: str,
        conv: str,
        platform: str,
        debug: bool,
        role: str,
        content: str,
        at: datetime,
        tool_calls: ToolCalls | None = None,
    ) -> None:
        nonlocal counter
        counter += 1
        lines.append(
            event_line(
                f"sample-{counter:07d}",
                world,
                conv,
                role,
                content,
                at,
                platform=platform,
                debug=debug,
                tool_calls=tool_calls,
            )
        )

    def add_tool_turn(
        world: str, conv: str, platform: str, at: datetime, name: str, arguments: dict[str, str], result: str
    ) -> None:
        """An empty assistant turn with tool_calls and the tool's answer: never material."""
        add(world, conv, platform, False, "assistant", "", at, [{"name": name, "arguments": arguments}])
        add(world, conv, platform, False, "tool", result, at + timedelta(seconds=1))

    for w_index, (world, topics) in enumerate(WORLDS.items()):
        day = start + timedelta(days=w_index * 9)  # worlds start on different days
        while day <= end:
            is_read_day = day == end
            n_convs = 3 if is_read_day else rng.choice([0, 0, 1, 1, 1, 2, 2, 3])
            for c in range(n_convs):
                platform = rng.choice(PLATFORMS)
                conv = f"{world}-{day:%Y%m%d}-{c}"
                hour = 8 + c if is_read_day else rng.randint(7, 21)
                at = datetime(day.year, day.month, day.day, hour, rng.randint(0, 50), tzinfo=zone)
                kind = rng.random()
                if kind < 0.08 and not is_read_day:  # tool-only turns: no material
                    add_tool_turn(world, conv, platform, at, "search", {"q": topics[0]}, '{"results": 3}')
                    continue
                for t in range(rng.randint(2, 8)):
                    at += timedelta(minutes=rng.randint(1, 9))
                    role = "user" if t % 2 == 0 else "assistant"
                    add(world, conv, platform, False, role, _sentence(rng, topics), at)
                    if role == "assistant" and rng.random() < 0.2:
                        lookup = {"topic": rng.choice(topics)}
                        add_tool_turn(world, conv, platform, at + timedelta(seconds=2), "lookup", lookup, "ok")
            if rng.random() < 0.15:  # excluded: debug and cron conversations
                at = datetime(day.year, day.month, day.day, 23, 5, tzinfo=zone)
                add(world, f"{world}-{day:%Y%m%d}-debug", "local", True, "user", "debug: dump state of the cache", at)
                add(world, f"{world}-{day:%Y%m%d}-cron", "cron", False, "assistant", "nightly report sent", at)
            day += timedelta(days=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    return len(lines)
