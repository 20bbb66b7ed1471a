"""Which established look-up is about which side of a plan's check ("Which bridge opened first, A or B?").

A check compares what its look-ups verified (a date, a province, a verdict against their sources),
each as the value of one named side, and the system writes the conclusion itself. Which look-up was
A's used to be read from the plan: the sub-question naming A, else the inputs in plan order. A
planner that wrote both names into both sub-questions and listed B's first gave each side the
other's date, and the swapped conclusion was delivered as SUPPORTED (`check: order`). The planner
proposes the look-ups; which side a value belongs to is decided here, from what was verified:

* the look-up's verified statement names one side and not the other ("The Rhine Bridge opened in
  1870"); a statement naming both cannot say whose its value is;
* a statement naming neither (a name written in full: 'Nicholas Lofton "Nick" Hexum') is placed by
  the chunks it cites, when they name one side and not the other;
* what the look-up cites and what it was asked must not point to the other side only: a look-up
  asked about A whose statement is about B is no side of either;
* a side that is an event of a name ("the forming of The Dandy Warhols", "the birth of Robert
  Young") is named where its name is: a statement says "The Dandy Warhols formed in 1994", never
  "the forming of The Dandy Warhols".

A look-up that cannot be placed, or two placed on one side, place nothing (None): the check does
not decide (the model reasons, verified as ever, or the turn gives an honest partial answer).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from cograg.answer.contract import strip_markers
from cograg.control.models import TaskResult

_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.I)
# "the forming of", "the birth of", "the first release of": lower-case words, then "of", then a name
# (a capital or a digit); "the University of Oxford" and "the Duke of York" are names themselves
_EVENT_OF = re.compile(r"^(?:(?:the|a|an)\s+)?(?:[a-z][\w'-]*\s+){1,3}?of\s+(?P<name>[\"'“‘(]?[A-Z0-9].*)$")


def _plain(text: str) -> str:
    """`text` as `normalise_for_match` compares it, but with its case kept (a bare "Who" is a name
    only where it is capitalised)."""
    text = unicodedata.normalize("NFKC", text)
    return re.sub(r"\s+", " ", re.sub(r"[*_`#>]+", "", text)).strip()


def _pattern(name: str) -> str:
    """`name` as a whole word or words: no letter or digit may run on at a Latin edge ("Time" is not
    in "Times"); a CJK edge has no word boundary to ask for."""
    def latin(ch: str) -> bool:
        return ch.isalnum() and ord(ch) < 0x2E80
    return ((r"(?<![^\W_])" if latin(name[0]) else "") + re.escape(name)
            + (r"(?![^\W_])" if latin(name[-1]) else ""))


def named_in_event(entity: str) -> str:
    """The name an event side is about ("The Dandy Warhols" of "the forming of The Dandy Warhols"),
    else `entity` itself."""
    m = _EVENT_OF.match(entity.strip())
    return m.group("name").strip() if m else entity


def names(text: str, entity: str, other: str) -> bool:
    """Whether `text` names `entity`, not counting where it is part of `other`'s name ("Ohio" in
    "Ohio State"). Case aside, or without a leading article ("Linden Bridge" for "the Linden
    Bridge") in the name's own capitals; an event side by the name it is of (`named_in_event`)."""
    name = named_in_event(entity)
    if name != entity and names(text, name, named_in_event(other)):
        return True
    t, e, o = _plain(text), _plain(entity), _plain(other)
    if not e:
        return False
    if e.casefold() in o.casefold() and o:
        t = re.sub(_pattern(o), " ", t, flags=re.I)
    if re.search(_pattern(e), t, re.I):
        return True
    core = _ARTICLE.sub("", e)
    return core != e and bool(core) and re.search(_pattern(core), t) is not None


def _named(text: str, entities: tuple[str, str]) -> set[int]:
    a, b = entities
    return {i for i, (e, o) in enumerate(((a, b), (b, a))) if names(text, e, o)}


def side_of(entities: tuple[str, str], look_up: TaskResult, cited: list[str]) -> int | None:
    """The index of the side `look_up` established a value for, from its verified statement and
    `cited` (the texts of the chunks it cites), or None when they do not tell it."""
    stated = _named(strip_markers(look_up.statement), entities)
    if len(stated) == 2:
        return None  # "A opened in 1870, after B": whose is the date?
    in_sources = _named("\n".join(cited), entities)
    placed = stated or in_sources
    if len(placed) != 1:
        return None
    # the sources and the sub-question may name both sides; naming only the other one contradicts
    for other in (in_sources, _named(look_up.description, entities)):
        if len(other) == 1 and other != placed:
            return None
    return next(iter(placed))


def sides(entities: tuple[str, str], looked_up: list[TaskResult],
          cited: Callable[[TaskResult], list[str]]) -> list[TaskResult | None] | None:
    """The established look-up of each entity, in the entities' order (None for a side no look-up
    was placed on), each placed by what it verified (`side_of`), never by plan order. None when
    there are no look-ups or more than two, or one cannot be placed, or two land on one side."""
    if not 1 <= len(looked_up) <= 2:
        return None
    placed: list[TaskResult | None] = [None, None]
    for d in looked_up:
        i = side_of(entities, d, cited(d))
        if i is None or placed[i] is not None:
            return None
        placed[i] = d
    return placed


__all__ = ["named_in_event", "names", "side_of", "sides"]
