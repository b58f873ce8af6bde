"""Access in Dagster: nothing to schedule. Its one table (the memory server's tokens) is written by
`memory-pipeline tokens` and read by `memory-pipeline serve` on every request."""

from dagster import Definitions

defs = Definitions()
