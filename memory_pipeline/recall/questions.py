"""The questions of LoCoMo files (``qa``: question, evidence dia ids, category), turned into
metric questions: the world the file was imported as, and the CST days of its evidence turns.

Left out, and counted by reason: category 5 (adversarial: the answer is not in the conversation),
a question without evidence (an empty list, or none given), and one whose evidence names no
imported turn. Evidence entries are read for every ``D<session>:<turn>`` they hold (the files have
"D8:6; D9:17" in one entry, and a stray "D" that names none). Evidence that is not a list of such
strings is refused when the file is read, naming the file and the JSON path: a measurement must not
quietly drop a question its author meant."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any, TypedDict

from memory_pipeline.events.ingest import source_label
from memory_pipeline.events.locomo import load_document
from memory_pipeline.recall.metric import Question
from memory_pipeline.recall.search import QUERY_MAX_CHARS

ADVERSARIAL = 5
_DIA = re.compile(r"D(\d+):(\d+)")


class QuestionError(ValueError):
    pass


def world_of(path: Path, prefix: str = "locomo") -> str:
    return f"{prefix}-{path.stem}"  # as the importer names it


class QA(TypedDict):
    """One checked question of a file's ``qa`` list (its other fields are not read)."""

    question: str
    category: int
    evidence: list[str]


def read_qa(path: Path) -> list[QA]:
    """The ``qa`` list of a LoCoMo file; QuestionError naming the file and JSON path when it is not one."""
    source = source_label(path)
    doc, errors = load_document(path, source)
    if doc is None:
        raise QuestionError(str(errors[0]))
    nested = doc.get("conversation")
    conv = nested if isinstance(nested, dict) else doc
    qa = doc.get("qa", conv.get("qa"))
    if qa is None:
        raise QuestionError(f"{source}:$.qa: missing (no questions to measure recall with)")
    if not isinstance(qa, list):
        raise QuestionError(f"{source}:$.qa: expected an array of questions")
    out: list[QA] = []
    for i, item in enumerate(qa):
        if not isinstance(item, dict):
            raise QuestionError(f"{source}:$.qa[{i}]: expected a question object, got {_shown(item)}")
        question = item.get("question")
        if not isinstance(question, str):
            raise QuestionError(f"{source}:$.qa[{i}].question: expected a string")
        if not question.strip() or len(question) > QUERY_MAX_CHARS:
            raise QuestionError(
                f"{source}:$.qa[{i}].question: expected 1 to {QUERY_MAX_CHARS:,} characters, not blank "
                f"(it is a memory_search query), got {len(question)}"
            )
        # Required: without it an adversarial question (5: its answer is not in the conversation)
        # would be measured as any other.
        if "category" not in item:
            raise QuestionError(f"{source}:$.qa[{i}].category: missing (an integer; 5, adversarial, is left out)")
        category = item["category"]
        if isinstance(category, bool) or not isinstance(category, int):
            raise QuestionError(f"{source}:$.qa[{i}].category: expected an integer, got {_shown(category)}")
        evidence = item.get("evidence", [])
        if not isinstance(evidence, list):
            raise QuestionError(
                f'{source}:$.qa[{i}].evidence: expected a list of dia ids (like ["D1:3"]), got {_shown(evidence)}'
            )
        for j, entry in enumerate(evidence):
            if not isinstance(entry, str):
                raise QuestionError(
                    f'{source}:$.qa[{i}].evidence[{j}]: expected a dia id string (like "D1:3"), got {_shown(entry)}'
                )
        out.append(QA(question=question, category=category, evidence=[str(e) for e in evidence]))
    return out


def _shown(value: Any) -> str:
    """A JSON value as the file has it, cut short."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def questions(path: Path, event_days: dict[str, date], left_out: Counter[str] | None = None) -> list[Question]:
    """The measurable questions of one file; ``event_days`` maps raw event id -> CST day."""
    world = world_of(path)
    left_out = left_out if left_out is not None else Counter()
    out = []
    for item in read_qa(path):
        if item["category"] == ADVERSARIAL:
            left_out["category 5 (adversarial)"] += 1
            continue
        ids = [f"{world}.D{s}.{t}" for e in item["evidence"] for s, t in _DIA.findall(e)]
        if not ids:
            left_out["no evidence"] += 1
            continue
        days = frozenset(event_days[i] for i in ids if i in event_days)
        if not days:
            left_out["evidence names no imported turn"] += 1
            continue
        out.append(Question(world, item["question"], days, item["category"]))
    return out
