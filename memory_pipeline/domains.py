"""The domains of the project, in migration order. The platform (``lib``) never names them; this
module does, for the three things that span all of them: the migration history, the tables and
the sections of the config file."""

from __future__ import annotations

import importlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# Every domain with tables; each has <domain>/tables.py and <domain>/migrations/.
DOMAINS = ("events", "temporal", "tower", "sleep", "conversation", "objects", "recall", "access")
# Every ``memory.<section>`` of MEMORY_CONFIG_FILE, each read by its domain's config module: a key
# under ``memory`` that is none of them is refused by every domain's load.
CONFIG_SECTIONS = ("temporal_summary", "tower", "sleep", "conversation", "objects", "analyst")


def version_locations() -> list[str]:
    """Alembic version folders: the platform's, then each domain's."""
    folders = [PACKAGE / "lib" / "store" / "migrations" / "versions"]
    folders += [PACKAGE / d / "migrations" for d in DOMAINS]
    return [str(f) for f in folders]


def load_tables() -> None:
    """Import every domain's tables onto the shared metadata (for the schema-drift test)."""
    for d in DOMAINS:
        importlib.import_module(f"memory_pipeline.{d}.tables")
