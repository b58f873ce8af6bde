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
# The package whose ``config.load()`` reads each section.
CONFIG_PACKAGES = {"temporal_summary": "temporal", **{s: s for s in CONFIG_SECTIONS if s != "temporal_summary"}}


def check_config() -> None:
    """Every section of MEMORY_CONFIG_FILE read and validated, and the settings every report reads
    (the zone, the partitions' first day): ConfigError naming the first one wrong. A report checks
    before it prints, so a bad setting is one refusal, not a report cut off half-way."""
    from memory_pipeline.lib import settings

    settings.timezone_name()
    settings.partition_start()
    for section in CONFIG_SECTIONS:
        importlib.import_module(f"memory_pipeline.{CONFIG_PACKAGES[section]}.config").load()


def version_locations() -> list[str]:
    """Alembic version folders: the platform's, then each domain's."""
    folders = [PACKAGE / "lib" / "store" / "migrations" / "versions"]
    folders += [PACKAGE / d / "migrations" for d in DOMAINS]
    return [str(f) for f in folders]


def load_tables() -> None:
    """Import every domain's tables onto the shared metadata (for the schema-drift test)."""
    for d in DOMAINS:
        importlib.import_module(f"memory_pipeline.{d}.tables")
