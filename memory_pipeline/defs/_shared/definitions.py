"""Platform automations every domain shares (resources injected by the root)."""

from dagster import Definitions

from memory_pipeline.defs._shared.cache import cache_writeback_sensor
from memory_pipeline.defs._shared.dead_runs import dead_runs_sensor

defs = Definitions(sensors=[cache_writeback_sensor, dead_runs_sensor])
