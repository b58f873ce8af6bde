"""Seed 003, sleep: light sleep (02:00, the only extraction of semantic memory from
conversations), deep sleep (03:00, three rounds over the active set, the day's snapshot) and the
self autobiography (04:00).

Pure: ``logic`` (the memory tools, message 1 / 1.5, size bands), ``narrative``, ``prompts``,
``offline_rules`` (the offline model's tool calls). I/O without Dagster: ``memory``, ``context``
(the tool loop), ``light``, ``deep``, ``autobiography``, ``snapshots``, ``reports``."""
