"""Read-only queries over the LLM ledger (every domain's calls), for status tables."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from memory_pipeline.lib.kinds import LedgerOutcome
from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import llm_ledger


def ledger_totals(store: Store) -> list[dict[str, Any]]:
    """Calls and tokens per asset, model and outcome, with their cost: ``cost_usd`` the sum of the
    prices litellm reported (None when no call of the row had one: the offline model, a model
    without a known price, cache hits and failures), ``priced`` how many calls had one."""
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
        .order_by(lc.asset, lc.model, lc.outcome)
    )
    # cost_usd is JSON (a number, or JSON null): summed here, the same on PostgreSQL and SQLite.
    priced = select(lc.asset, lc.model, lc.outcome, lc.cost_usd).where(lc.outcome == str(LedgerOutcome.OK))
    with store.connect() as conn:
        rows = [dict(r) | {"cost_usd": None, "priced": 0} for r in conn.execute(q).mappings()]
        by_key = {(r["asset"], r["model"], r["outcome"]): r for r in rows}
        for asset, model, outcome, cost in conn.execute(priced):
            row = by_key.get((asset, model, outcome))
            if row is None or not isinstance(cost, int | float):
                continue
            row["cost_usd"] = (row["cost_usd"] or 0.0) + float(cost)
            row["priced"] += 1
    return rows
