"""Read-only queries over the LLM ledger (every domain's calls), for status tables."""

from __future__ import annotations

from typing import Any, TypedDict, cast

from sqlalchemy import ColumnElement, func, literal_column, select

from memory_pipeline.lib.store import Store
from memory_pipeline.lib.store.tables import llm_ledger


def _cost_number(dialect: str) -> ColumnElement[Any]:
    """``cost_usd`` (JSON: a number, or JSON null where the model has no price) as a float or SQL
    NULL, read in the database so the ledger is summed there, not fetched row by row."""
    col = f"{llm_ledger.name}.cost_usd"
    if dialect == "postgresql":
        return literal_column(f"CASE WHEN json_typeof({col}) = 'number' THEN ({col} #>> '{{}}')::float8 END")
    return literal_column(f"CASE WHEN json_type({col}) IN ('integer', 'real') THEN json_extract({col}, '$') END")


class LedgerTotal(TypedDict):
    """One row of ``ledger_totals``: an asset's calls to one model with one outcome. ``calls`` counts
    ledger rows; ``requests`` what was sent to the model, retries included (a cache hit and a call
    the open breaker refused send none)."""

    asset: str
    model: str
    outcome: str
    calls: int
    requests: int
    tokens_in: int
    tokens_out: int
    cost_usd: float | None
    priced: int


def ledger_totals(store: Store) -> list[LedgerTotal]:
    """Calls and tokens per asset, model and outcome, with their cost: ``cost_usd`` the sum of the
    prices litellm reported (None when no call of the row had one: the offline model, a model
    without a known price, cache hits and failures), ``priced`` how many calls had one."""
    lc = llm_ledger.c
    cost = _cost_number(store.dialect)
    q = (
        select(
            lc.asset,
            lc.model,
            lc.outcome,
            func.count().label("calls"),
            func.coalesce(func.sum(lc.attempts), 0).label("requests"),
            func.coalesce(func.sum(lc.tokens_in), 0).label("tokens_in"),
            func.coalesce(func.sum(lc.tokens_out), 0).label("tokens_out"),
            func.sum(cost).label("cost_usd"),
            func.count(cost).label("priced"),
        )
        .group_by(lc.asset, lc.model, lc.outcome)
        .order_by(lc.asset, lc.model, lc.outcome)
    )
    with store.connect() as conn:
        rows = [dict(r) for r in conn.execute(q).mappings()]
    for r in rows:
        r["cost_usd"] = None if r["cost_usd"] is None else float(r["cost_usd"])
    return cast(list[LedgerTotal], rows)  # DB rows: the columns selected above, cost_usd made a float
