"""The Dagster shell of every domain (one folder each).

Dagster warns, once per use, about the beta, preview and superseded APIs these definitions use on
purpose (``backfill_policy``, ``allow_nonexistent_upstream_partitions``, partitioned asset checks,
``map_asset_specs``, a multi-asset sensor); dozens of such lines on every load of the code location
(``make ui``'s code server, run workers, the CLI) would hide a warning that matters. This package is
imported before any of its modules, so the filter below holds in every process that loads them.
Only those three categories, and only as raised by dagster or by this package: any other warning
still shows."""

import warnings

from dagster._utils.warnings import BetaWarning, PreviewWarning, SupersessionWarning

for _category in (BetaWarning, PreviewWarning, SupersessionWarning):
    warnings.filterwarnings("ignore", category=_category, module=r"(dagster|memory_pipeline)(\.|$)")
