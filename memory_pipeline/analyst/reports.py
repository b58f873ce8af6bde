"""What the analyst file holds, and the coverage and cost picture (core, no Dagster).

Everything here reads the published DuckDB file through a read-only connection, like an analyst
does: it never blocks an export, and an export never blocks it."""

from __future__ import annotations

import io
import os
import uuid
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from memory_pipeline.analyst.files import AnalyticsFiles, connect_read_only
from memory_pipeline.analyst.registry import EXPORTS

MARTS_SCHEMA = "marts"


def table_counts(files: AnalyticsFiles) -> dict[str, int]:
    """Rows per table and model in the published file (``schema.name``; exports in ``main``)."""
    if not files.duckdb.exists():
        return {}
    with connect_read_only(files) as con:
        names = con.execute(
            "SELECT table_schema, table_name FROM information_schema.tables ORDER BY table_schema, table_name"
        ).fetchall()
        out = {}
        for schema, name in names:
            row = con.execute(f'SELECT count(*) FROM "{schema}"."{name}"').fetchone()
            out[f"{schema}.{name}"] = int(row[0]) if row else 0
        return out


@dataclass
class CoverageCost:
    """The figures the picture shows (also the asset's metadata)."""

    days: list[date] = field(default_factory=list)
    day_summaries: list[int] = field(default_factory=list)  # worlds with a non-empty day row, per day
    day_placeholders: list[int] = field(default_factory=list)
    day_missing: list[int] = field(default_factory=list)
    placeholders_by_reason: dict[str, dict[str, int]] = field(default_factory=dict)  # reason -> window -> n
    # LLM calls by the data day they served (mart_llm_cost_by_data_day, day partitions), not the
    # day they were made on: a backfill of October run in December is on October's days.
    cost_days: list[date] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)  # model calls and cache hits, per data day
    tokens: list[int] = field(default_factory=list)
    # Calls that served no single day: week, month, year (or other) partitions -> calls and cache
    # hits; "other" for the objects jobs' and the conversations' partitions, "none" for calls with no
    # partition (the system rolls).
    calls_off_days: dict[str, int] = field(default_factory=dict)
    total_calls: int = 0
    total_tokens_in: int = 0
    total_tokens_out: int = 0
    total_cost_usd: float | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "days": len(self.days),
            "first_day": self.days[0].isoformat() if self.days else "",
            "last_day": self.days[-1].isoformat() if self.days else "",
            "day_summaries": sum(self.day_summaries),
            "day_placeholders": sum(self.day_placeholders),
            "day_missing": sum(self.day_missing),
            "placeholders_by_reason": self.placeholders_by_reason,
            "llm_calls": self.total_calls,
            "llm_calls_on_data_days": sum(self.calls),
            "llm_calls_off_data_days": self.calls_off_days,
            "llm_tokens_in": self.total_tokens_in,
            "llm_tokens_out": self.total_tokens_out,
            "llm_cost_usd": self.total_cost_usd,
        }


def coverage_cost(files: AnalyticsFiles) -> CoverageCost:
    """Read the figures from the marts ``mart_temporal_coverage`` and ``mart_llm_cost_by_data_day``."""
    out = CoverageCost()
    with connect_read_only(files) as con:
        rows = con.execute(
            f"""SELECT period_start,
                       count(*) FILTER (WHERE status = 'summary'),
                       count(*) FILTER (WHERE status = 'placeholder'),
                       count(*) FILTER (WHERE status = 'missing')
                FROM {MARTS_SCHEMA}.mart_temporal_coverage WHERE grain = 'day' GROUP BY 1 ORDER BY 1"""
        ).fetchall()
        for d, s, p, m in rows:
            out.days.append(d)
            out.day_summaries.append(s)
            out.day_placeholders.append(p)
            out.day_missing.append(m)
        for reason, window, n in con.execute(
            f"""SELECT empty_reason, grain, count(*) FROM {MARTS_SCHEMA}.mart_temporal_coverage
                WHERE status = 'placeholder' GROUP BY 1, 2 ORDER BY 1, 2"""
        ).fetchall():
            out.placeholders_by_reason.setdefault(reason, {})[window] = n
        for d, calls, tokens in con.execute(
            f"""SELECT data_day, sum(calls + cache_hits), sum(tokens_in + tokens_out)
                FROM {MARTS_SCHEMA}.mart_llm_cost_by_data_day WHERE data_grain = 'day' GROUP BY 1 ORDER BY 1"""
        ).fetchall():
            out.cost_days.append(d)
            out.calls.append(int(calls))
            out.tokens.append(int(tokens))
        for grain, calls in con.execute(
            f"""SELECT coalesce(data_grain, 'none'), sum(calls + cache_hits)
                FROM {MARTS_SCHEMA}.mart_llm_cost_by_data_day WHERE data_grain IS DISTINCT FROM 'day'
                GROUP BY 1 ORDER BY 1"""
        ).fetchall():
            out.calls_off_days[grain] = int(calls)
        total = con.execute(
            f"""SELECT sum(calls), sum(tokens_in), sum(tokens_out), sum(cost_usd)
                FROM {MARTS_SCHEMA}.mart_llm_cost_by_data_day"""
        ).fetchone()
    if total is not None:
        out.total_calls, out.total_tokens_in, out.total_tokens_out = (int(v or 0) for v in total[:3])
        out.total_cost_usd = None if total[3] is None else float(total[3])
    return out


def _scale(values: list[int]) -> tuple[float, str]:
    """A divisor and its word, so an axis reads "tokens (millions)" with plain ticks, never "1e6"."""
    top = max(values, default=0)
    for factor, word in ((1_000_000_000, "billions"), (1_000_000, "millions"), (1_000, "thousands")):
        if top >= factor:
            return float(factor), word
    return 1.0, ""


def plain_number(value: float) -> str:
    """A tick as a plain decimal: thousands separated, at most six decimals, never an exponent
    ("1.5", "12,000", "0.0005"; not "1.5e+06" or "5e-04")."""
    text = f"{value:,.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


# Calls that served no single day, as the cost panel names them (mart_llm_cost_by_data_day.data_grain).
OFF_DAY_NAMES = {
    "week": "for weeks",
    "month": "for months",
    "year": "for years",
    "other": "for other partitions (an objects job, a conversation)",
    "none": "with no partition (the system rolls, for one)",
}


def off_days_note(calls_off_days: dict[str, int]) -> str:
    """What the cost panel leaves off its day axis, in words (empty when nothing is left off)."""
    parts = [
        f"{n:,} {OFF_DAY_NAMES.get(grain, grain)}"
        for grain, n in sorted(calls_off_days.items(), key=lambda kv: list(OFF_DAY_NAMES).index(kv[0]))
        if n
    ]
    return f"Calls that served no single day (not drawn): {'; '.join(parts)}." if parts else ""


def draw(figures: CoverageCost, title: str = "memory_pipeline: coverage and LLM cost") -> Any:
    """The picture as a matplotlib figure (the caller closes it). Three panels: worlds per day with
    a summary / a placeholder / no row; placeholders by reason and window; LLM calls (bars) and
    tokens (line) per data day, the CST day the calls served (their day partition), with the calls
    made for longer periods or outside any partition named below it. Date axes tick whole days (a
    bar sits on its day's tick), never hours; value axes are plain decimals, scaled in the label
    (thousands, millions), never offset or in scientific notation. A panel without data says so
    and draws no axis (no 1970-01-01)."""
    import matplotlib  # heavy: only where the picture is drawn

    matplotlib.use("Agg")
    from matplotlib import dates as mdates
    from matplotlib import pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    def plain(ax: Any) -> None:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: plain_number(v)))

    def by_day(ax: Any, days: list[date], xlabel: str) -> None:
        ax.set_xlabel(xlabel)
        if not days:  # an empty date axis would show matplotlib's default, 1970-01-01
            ax.set_xticks([])
            ax.set_yticks([])
            ax.text(0.5, 0.5, "no data", ha="center", va="center", color="#555555", transform=ax.transAxes)
            return
        span = (days[-1] - days[0]).days + 2  # a day of margin each side (below)
        locator: Any
        if span <= 31:  # a day tick every few days; AutoDateLocator would tick hours on a short span
            locator = mdates.DayLocator(interval=max(1, -(-span // 8)))  # type: ignore[no-untyped-call,unused-ignore]
        else:  # long spans: whole days, weeks or months as AutoDateLocator picks (never hours)
            locator = mdates.AutoDateLocator(minticks=3, maxticks=10)  # type: ignore[no-untyped-call,unused-ignore]
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))  # type: ignore[no-untyped-call,unused-ignore]
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        plain(ax)
        ax.set_xlim(days[0] - timedelta(days=1), days[-1] + timedelta(days=1))  # one day: a bar on its tick
        for label in ax.get_xticklabels():
            label.set_fontsize(8)

    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(11, 9.5), height_ratios=[3, 2, 3])
    fig.suptitle(title)
    if figures.days:
        top.bar(figures.days, figures.day_summaries, width=1.0, color="#2e7d32", label="summary")
        top.bar(
            figures.days,
            figures.day_placeholders,
            width=1.0,
            bottom=figures.day_summaries,
            color="#f9a825",
            label="placeholder",
        )
        stacked = [s + p for s, p in zip(figures.day_summaries, figures.day_placeholders, strict=True)]
        top.bar(figures.days, figures.day_missing, width=1.0, bottom=stacked, color="#c62828", label="no row")
        top.legend(loc="upper left", fontsize=8)
    by_day(top, figures.days, "CST day")
    top.set_title("Worlds per CST day: day summary, placeholder, or no row", fontsize=10)
    top.set_ylabel("worlds")

    labels, counts = [], []
    for reason, by_window in sorted(figures.placeholders_by_reason.items()):
        for window, n in sorted(by_window.items()):
            labels.append(f"{reason} ({window})")
            counts.append(n)
    if labels:
        middle.barh(labels, counts, color="#f9a825")
        for y, n in enumerate(counts):
            middle.text(n, y, f" {n}", va="center", fontsize=8)
        middle.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: plain_number(v)))
    else:
        middle.set_xticks([])
        middle.set_yticks([])
        middle.text(0.5, 0.5, "no placeholders", ha="center", va="center", transform=middle.transAxes)
    middle.set_title("Placeholders by empty_reason", fontsize=10)
    middle.tick_params(axis="y", labelsize=8)

    calls_by, calls_word = _scale(figures.calls)
    tokens_by, tokens_word = _scale(figures.tokens)
    if figures.cost_days:
        bottom.bar(
            figures.cost_days,
            [c / calls_by for c in figures.calls],
            width=0.8,
            color="#1565c0",
            label="calls (incl. cache hits)",
        )
        tokens = bottom.twinx()
        tokens.plot(
            figures.cost_days,
            [t / tokens_by for t in figures.tokens],
            color="#6a1b9a",
            marker="o",
            markersize=3,
            label="tokens",
        )
        tokens.set_ylabel(f"tokens in + out{f' ({tokens_word})' if tokens_word else ''}")
        plain(tokens)
        tokens.set_ylim(bottom=0)
        bottom.legend(loc="upper left", fontsize=8)
        tokens.legend(loc="upper right", fontsize=8)
    by_day(bottom, figures.cost_days, "data day (CST): the day the calls served, not the day they were made")
    if figures.total_cost_usd is not None:
        cost = f"${plain_number(figures.total_cost_usd)}"
    else:
        cost = "n/a (no priced model)" if figures.total_calls else "none (no call in the exported ledger)"
    bottom.set_title(
        f"LLM calls and tokens per data day, the CST day the calls served (cost of all calls: {cost})", fontsize=10
    )
    bottom.set_ylabel(f"calls{f' ({calls_word})' if calls_word else ''}")
    fig.tight_layout()
    if note := off_days_note(figures.calls_off_days):  # under the panel, below its axis label
        fig.subplots_adjust(bottom=fig.subplotpars.bottom + 0.03)
        fig.text(0.5, 0.01, note, ha="center", va="bottom", fontsize=8, wrap=True)
    return fig


def render_png(figures: CoverageCost, title: str = "memory_pipeline: coverage and LLM cost") -> bytes:
    """The picture (``draw``) as PNG bytes."""
    fig = draw(figures, title)
    from matplotlib import pyplot as plt

    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90)
        return buf.getvalue()
    finally:
        plt.close(fig)


def write_report(files: AnalyticsFiles) -> tuple[CoverageCost, bytes]:
    """Render the picture from the published file and write it to ``files.report`` atomically."""
    figures = coverage_cost(files)
    png = render_png(figures)
    files.report.parent.mkdir(parents=True, exist_ok=True)
    tmp = files.report.with_name(f".{files.report.name}.{uuid.uuid4().hex}")
    try:
        tmp.write_bytes(png)
        os.replace(tmp, files.report)
    finally:
        tmp.unlink(missing_ok=True)
    return figures, png


def exported_tables() -> list[str]:
    return [e.name for e in EXPORTS]
