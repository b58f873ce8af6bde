"""The rolling summaries' check: every newest version in the seed's layout, at most 10 sentences."""

from dagster import AssetCheckResult, AssetCheckSeverity, MetadataValue, asset_check

from memory_pipeline.conversation import summaries
from memory_pipeline.defs.conversation.assets import conversation_rolling_summaries
from memory_pipeline.resources import MemoryStoreResource


@asset_check(
    asset=conversation_rolling_summaries,
    name="rolling_summaries_in_seed_layout",
    description="Every conversation's newest summary version has the seed's exact layout (title, quote lines, "
    "the four sections, last_updated, covered_range) and at most 10 sentences.",
)
def rolling_summaries_in_seed_layout(memory_store: MemoryStoreResource) -> AssetCheckResult:
    audited, problems = summaries.layout_audit(memory_store.store())
    return AssetCheckResult(
        passed=not problems,
        severity=AssetCheckSeverity.ERROR,
        metadata={
            "summaries_audited": audited,
            "problems": len(problems),
            "first_problems": MetadataValue.md("\n".join(f"- {p}" for p in problems[:20]) or "none"),
        },
    )
