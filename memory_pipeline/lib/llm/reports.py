"""Read-only queries over the LLM ledger (every domain's calls), for status tables."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import llm_ledger


def ledger_totals(store: Store) -> list[dict[str, Any]]:
    """Calls and tokens per asset, model and outcome."""
    lc = llm_ledger.c
    q = (
        select(
            lc.asset,
            lc.model,
            lc.outcome,
            func.count().label("calls"),
            func.coalesce(func.sum(lc.tokens_in), 0).label("tokens_in"),
            func.coalesce(func.sum(lc.tokens_out), 0).label("tokens_out"),
        )
        .group_by(lc.asset, lc.model, lc.outcome)
        .order_by(lc.asset, lc.outcome)
    )
    with store.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]
