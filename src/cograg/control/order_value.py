"""The date a verified statement gives, for "Which band was formed first, A or B?" (English).

The plan of such a question looks each side up ("When was The Exies formed?") and used to hand both
verified statements to the model's reasoning step, which wrote which came first. Which of two dates
is earlier is not a model's job: the look-ups' verified statements are read here for the one date
each gives, and the plan's check (orchestrator/plan_tasks.py) compares the two.

A date is a year from 1000 to 2099, with its month and day where the statement writes them
("6 April 1849", "April 6, 1849", "April 1849", "1849-04-06", "1849"). A decade ("the 1950s") or a
year span ("1993–2002") is not one date. A statement that names two different dates ("formed in
1997, disbanded in 2010"), or none, gives None: the check then does not decide, and the model
reasons as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MONTH_NUMBER = {**{m: i + 1 for i, m in enumerate(_MONTHS)}, **{m[:3]: i + 1 for i, m in enumerate(_MONTHS)},
                 "sept": 9}
_MONTH = r"(?P<{0}>" + "|".join(sorted(_MONTH_NUMBER, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<{0}>1\d{{3}}|20\d{{2}})(?![\d/–-]|'?s\b)"
_DATE = re.compile(
    r"(?<![\d/–-])(?:"
    + r"(?P<iso_y>1\d{3}|20\d{2})-(?P<iso_m>\d{2})-(?P<iso_d>\d{2})\b"  # 1849-04-06
    + r"|(?P<dmy_d>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH.format("dmy_m") + r",?\s+" + _YEAR.format("dmy_y")
    + r"|" + _MONTH.format("mdy_m") + r"\s+(?P<mdy_d>\d{1,2})(?:st|nd|rd|th)?,?\s+" + _YEAR.format("mdy_y")
    + r"|" + _MONTH.format("my_m") + r",?\s+" + _YEAR.format("my_y")
    + r"|" + _YEAR.format("y")
    + r")", re.I)


@dataclass(frozen=True, order=True)
class Moment:
    """A date as precise as its statement writes it (month and day None where not written)."""

    year: int
    month: int | None = None
    day: int | None = None

    def __str__(self) -> str:
        if self.month is None:
            return str(self.year)
        month = _MONTHS[self.month - 1].capitalize()
        return f"{month} {self.day}, {self.year}" if self.day is not None else f"{month} {self.year}"


def moments(text: str) -> list[Moment]:
    """Every date `text` writes, in order (a year span such as "1993–2002" gives none)."""
    out: list[Moment] = []
    for m in _DATE.finditer(text):
        g = m.groupdict()
        if g["iso_y"]:
            month, day = int(g["iso_m"]), int(g["iso_d"])
            if 1 <= month <= 12 and 1 <= day <= 31:
                out.append(Moment(int(g["iso_y"]), month, day))
            continue
        for kind in ("dmy", "mdy", "my"):
            if g.get(f"{kind}_y"):
                month = _MONTH_NUMBER[g[f"{kind}_m"].lower()]
                day = int(g[f"{kind}_d"]) if g.get(f"{kind}_d") else None
                out.append(Moment(int(g[f"{kind}_y"]), month, day if day is None or 1 <= day <= 31 else None))
                break
        else:
            out.append(Moment(int(g["y"])))
    return out


def the_moment(statement: str) -> Moment | None:
    """The one date `statement` gives, or None when it gives none or two that differ. A date and a
    less precise writing of the same one ("1997" beside "March 1997") count as one, the precise one."""
    found = moments(statement)
    if not found:
        return None
    best = max(found, key=lambda m: (m.month is not None, m.day is not None))
    return best if all(_same_as_far_as_written(best, m) for m in found) else None


def _same_as_far_as_written(a: Moment, b: Moment) -> bool:
    return a.year == b.year and (a.month is None or b.month is None or a.month == b.month) and (
        a.day is None or b.day is None or a.day == b.day)


def earlier(a: Moment, b: Moment) -> int | None:
    """0 when `a` is earlier, 1 when `b` is, None when the two cannot be told apart as written (the
    same year, one without a month; the same day)."""
    for x, y in ((a.year, b.year), (a.month, b.month), (a.day, b.day)):
        if x is None or y is None:
            return None
        if x != y:
            return 0 if x < y else 1
    return None


__all__ = ["Moment", "earlier", "moments", "the_moment"]
