"""Seed 004 prompts: a structured summary with the five fixed sections (决策 / 结论 / 待办 / 状态变更 /
关键词), from raw entries, from the finer level's summaries (the chain), or from partial summaries."""

from __future__ import annotations

PROMPT_VERSION = "tower-v1"

_SECTIONS = (
    'Answer with one JSON object and nothing else: {"decisions": [...], "conclusions": [...], '
    '"todos": [...], "state_changes": [...], "keywords": [...]} (lists of short strings, empty when none).'
)


def spec(task: str, max_chars: int) -> str:
    what = {
        "tower_raw": "Summarize what happened in this time window from its raw entries.",
        "tower_aggregate": "Summarize this time window from the summaries of its finer windows; compress, "
        "do not copy any one of them.",
        "tower_map": "Summarize this part of a time window's material.",
        "tower_reduce": "Merge these partial summaries of one time window into one.",
    }[task]
    return f"{what} {_SECTIONS} At most {max_chars} characters in all."
