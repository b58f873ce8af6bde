"""memory_search's recall alone, re-scored on a store `eval locomo` already built (seconds instead of
a full eval's minutes): the way to measure a change to the search or its hit ordering.

The store file is copied first (SQLite's backup API) and only the copy is touched: migrated to the
project's head (``ensure_schema``), its search index brought up to date (``--rebuild``: rewritten
from the memory tables, for a change to what a document holds), then every question of the files is
asked of ``memory_search`` exactly as the eval asks it (``recall_eval.search_days``: 20 hits, their
days in hit order). The questions are the eval's (category 5 and those without usable evidence left
out, counted).

    .venv/bin/python bench/recall_search.py STORE [FILE.json ...] [--rebuild] [--json OUT] [--misses OUT]

STORE: the eval's SQLite store (``memory.sqlite`` in the folder it printed) or that folder. FILE:
the LoCoMo files the store was built from (default: every ``*.json`` in ``$LOCOMO_DIR``). Prints
R@1, R@5 and their counts; ``--misses`` writes the questions whose evidence day is not in the top 5
(with the days ranked and the evidence days), to read what the search misses."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from zoneinfo import ZoneInfo

from memory_pipeline import domains
from memory_pipeline.lib import settings
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.migrate import ensure_schema
from memory_pipeline.operations.recall_eval import search_days
from memory_pipeline.recall import days as day_index
from memory_pipeline.recall import search
from memory_pipeline.recall.metric import KS, Index, score_rankings
from memory_pipeline.recall.questions import questions, world_of
from memory_pipeline.tower import config as tower_config


def copy_store(source: Path, folder: Path) -> Path:
    """A consistent copy of a SQLite store (its WAL included) in ``folder``."""
    target = folder / "memory.sqlite"
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path, help="the eval's SQLite store, or the folder it printed")
    ap.add_argument("files", type=Path, nargs="*", help="the LoCoMo files (default: $LOCOMO_DIR/*.json)")
    ap.add_argument("--rebuild", action="store_true", help="rewrite every world's search documents first")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--misses", type=Path, help="write the questions missed at 5 here (JSON lines)")
    args = ap.parse_args(argv)

    source = args.store / "memory.sqlite" if args.store.is_dir() else args.store
    if not source.is_file():
        print(f"{source}: no such store", file=sys.stderr)
        return 2
    files = args.files
    if not files:
        folder = os.environ.get("LOCOMO_DIR")
        if not folder:
            print("no LoCoMo files given and LOCOMO_DIR is not set", file=sys.stderr)
            return 2
        files = sorted(Path(folder).glob("*.json"))
    tz = ZoneInfo(settings.timezone_name())
    activity_type = tower_config.load().activity_type

    with tempfile.TemporaryDirectory(prefix="recall-search-") as tmp:
        t0 = time.monotonic()
        store = Store(f"sqlite:///{copy_store(source, Path(tmp))}")
        ensure_schema(store, domains.version_locations())
        worlds = [world_of(p) for p in files]
        event_days = day_index.message_days(store, worlds, tz)
        left_out: Counter[str] = Counter()
        asked = [q for p in files for q in questions(p, event_days, left_out)]
        for world in worlds:  # the index brought up to date before the clock starts
            search.refresh(store, world, tz, activity_type, force=args.rebuild)
        prepared = time.monotonic() - t0

        ranked: dict[int, list] = {}

        def rank(q):
            days = search_days(store, q, event_days=event_days, tz=tz, activity_type=activity_type)
            ranked[id(q)] = days
            return days

        t1 = time.monotonic()
        score = score_rankings(Index.MEMORY_SEARCH, asked, rank)
        seconds = time.monotonic() - t1
        store.engine.dispose()

    out = {
        "store": str(source),
        "questions": score.questions,
        "questions_left_out": dict(left_out),
        **{f"hits_at_{k}": score.hits[k] for k in KS},
        **{f"r_at_{k}": round(score.recall(k), 4) for k in KS},
        "search_seconds": round(seconds, 1),
        "prepare_seconds": round(prepared, 1),
    }
    print(
        f"memory_search on {len(files)} file(s): {score.questions} questions "
        f"(left out: {', '.join(f'{n} {why}' for why, n in left_out.items()) or 'none'})\n"
        + "\n".join(f"R@{k} {score.recall(k):.3f} ({score.hits[k]} of {score.questions})" for k in KS)
        + f"\nsearch {seconds:.1f} s (copy, migration and index {prepared:.1f} s)"
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    if args.misses:
        with args.misses.open("w", encoding="utf-8") as f:
            for q in asked:
                top = ranked[id(q)][: max(KS)]
                if not q.evidence_days & set(top):
                    row = {
                        "world": q.world,
                        "question": q.text,
                        "category": q.category,
                        "evidence_days": sorted(d.isoformat() for d in q.evidence_days),
                        "top5": [d.isoformat() for d in top],
                    }
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
