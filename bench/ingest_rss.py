"""Ingest one file in a process of its own and print its peak RSS (the benchmark's memory figure).

python bench/ingest_rss.py STORE_URL FILE
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def peak_rss_kb() -> int:
    """VmHWM: the peak RSS of this process image. (getrusage's ru_maxrss would be no good here: on
    Linux it keeps the peak of the image before exec, i.e. of the benchmark that spawned us.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux


def main() -> None:
    from memory_pipeline.events.ingest import ingest_file
    from memory_pipeline.lib.store import Store

    url, path = sys.argv[1], Path(sys.argv[2])
    store = Store(url)
    started = time.perf_counter()
    report = ingest_file(store, path)
    seconds = time.perf_counter() - started
    peak_kb = peak_rss_kb()
    print(
        json.dumps(
            {
                "inserted": report.inserted,
                "seconds": seconds,
                "peak_rss_mb": round(peak_kb / 1024, 1),
                "mb": path.stat().st_size / 1e6,
            }
        )
    )


if __name__ == "__main__":
    main()
