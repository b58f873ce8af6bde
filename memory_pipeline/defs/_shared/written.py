"""The partitions a range run (BackfillPolicy.single_run: one step for many partitions) has
written, each with its metadata. A step that ends in success records them all at once: the run's
one MaterializeResult carries each partition's metadata. A step that fails records nothing of its
own, though the partitions it finished before the failure are written in the store; so when the
step fails, each of those gets its own materialization, logged before the exception leaves the
step, and the partitions that failed or were not done get none."""

from __future__ import annotations

from types import TracebackType

from dagster import AssetExecutionContext, AssetKey, AssetMaterialization
from dagster._core.definitions.metadata import RawMetadataMapping  # what AssetMaterialization takes; not public


class Written:
    """``with Written(context) as written:`` around a range run's work, ``written.add(key, metadata)``
    for each partition once its rows are written (what a success would show for it, the same
    metadata). An exception leaving the block logs one materialization per added partition, then
    goes on unchanged (a Failure keeps its text)."""

    def __init__(self, context: AssetExecutionContext) -> None:
        self._context = context
        self._done: dict[tuple[AssetKey, str], RawMetadataMapping] = {}

    def add(self, key: str, metadata: RawMetadataMapping, asset_key: AssetKey | None = None) -> None:
        """Partition ``key`` (of ``asset_key``: a multi-asset names it) is written."""
        self._context.add_asset_metadata(metadata, asset_key=asset_key, partition_key=key)
        self._done[(asset_key or self._context.assets_def.key, key)] = metadata

    def __enter__(self) -> Written:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # A failure only: a run canceled from outside (Dagster's interrupt is a BaseException) is
        # left as Dagster leaves it; the next run reuses the rows it wrote.
        if isinstance(exc, Exception):
            for (asset_key, key), metadata in self._done.items():
                # log_event writes the event to the instance at once: it outlives the raise.
                self._context.log_event(AssetMaterialization(asset_key=asset_key, partition=key, metadata=metadata))
            self._done.clear()
