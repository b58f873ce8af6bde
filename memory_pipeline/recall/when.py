"""The times a query names, as days: "on 16 June, 2023", "May 23, 2023", "in May 2022", "in 2023",
"2023-05-01", "2023年5月1日", "2023年5月". ``memory_search`` ranks memory of a named time before the
rest: a question that says when is asking about that time.

Only dates that say their year are read (a day or month alone, "in June", could be any year's; "may"
and "march" are also words); a day without its year takes the query's one year when it names
exactly one ("between August 11 and August 15 2023"). Each named day reaches one day further on
both sides: the asker's calendar and the store's zone can put the same moment on neighbouring days."""

from __future__ import annotations

import re
from calendar import monthrange
from datetime import date, timedelta

MONTHS = {
    name: i
    for i, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sept", "sep"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_M = r"(?P<m>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_D = r"(?P<d>\d{1,2})(?:st|nd|rd|th)?"
_Y = r"(?P<y>(?:19|20)\d\d)"
_PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        rf"\b{_Y}-(?P<mn>\d{{1,2}})-{_D}\b",  # 2023-05-01
        rf"{_Y}\s*年\s*(?P<mn>\d{{1,2}})\s*月(?:\s*{_D}\s*[日号])?",  # 2023年5月1日, 2023年5月
        rf"\b{_D}\s+(?:of\s+)?{_M}(?:,?\s*{_Y})?\b",  # 16 June, 2023
        rf"\b{_M}\s+{_D}\b(?:,?\s*{_Y}\b)?",  # May 23, 2023
        rf"\b{_M},?\s+{_Y}\b",  # May 2022
        rf"(?<!\d){_Y}\s*年",  # 2023年
        rf"\b(?:in|during|of|since|by|throughout)\s+{_Y}\b",  # in 2023
    )
]
_YEAR = re.compile(r"(?<!\d)((?:19|20)\d\d)(?!\d)")
SLACK = timedelta(days=1)


def named_periods(query: str) -> list[tuple[date, date]]:
    """The periods ``query`` names, first and last day (inclusive, slack included), in order, each once."""
    years = set(_YEAR.findall(query))
    only_year = int(next(iter(years))) if len(years) == 1 else None
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, date, date]] = []
    for pattern in _PATTERNS:
        for m in pattern.finditer(query):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue  # part of a date already read ("16 June, 2023" is not also "June, 2023")
            period = _period(m.groupdict(), only_year)
            if period is not None:
                taken.append(m.span())
                found.append((m.start(), period[0] - SLACK, period[1] + SLACK))
    return list(dict.fromkeys((a, b) for _, a, b in sorted(found)))


def _period(g: dict[str, str | None], only_year: int | None) -> tuple[date, date] | None:
    y, m, mn, d = g.get("y"), g.get("m"), g.get("mn"), g.get("d")
    year = int(y) if y else only_year
    month = MONTHS[m.lower()] if m else int(mn) if mn else None
    day = int(d) if d else None
    if year is None or (month is None and day is not None):
        return None
    try:
        if month is None:
            return date(year, 1, 1), date(year, 12, 31)
        if day is None:
            return date(year, month, 1), date(year, month, monthrange(year, month)[1])
        return date(year, month, day), date(year, month, day)
    except ValueError:  # "31 June": not a day
        return None
