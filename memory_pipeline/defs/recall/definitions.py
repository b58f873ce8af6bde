"""Recall in Dagster: nothing to schedule. Its tables are written by a command (`eval`, which
launches the other domains' jobs itself, as the schedules would) and by memory_search, which
brings a world's documents up to date as it reads them; both are read by the analyst layer's
exports (recall_eval_runs, recall_eval_results and mart_recall_quality)."""

from dagster import Definitions

defs = Definitions()
