"""What a verified statement gives as an entity's X, for "Are A and B in the same X?" (English).

The 1.5B model, shown "Nantong is a prefecture-level city in Jiangsu Province" and "Jingdezhen is
a prefecture-level city in northeastern Jiangxi province", concluded "Yes, Nantong and Jingdezhen
are situated in the same province", and the judge let it through (HotpotQA calibration split).
Comparing two names is not a model's job: the look-ups' verified statements are read here for the
name they give as the X, and the plan's check (orchestrator/plan_tasks.py) compares the two.

A value is a capitalised run of words (as `answer.subject.question_entities` finds names) that the
statement ties to the noun X (or a word for the same thing: a band is a "group" too):

* the run ends with the noun: "Jiangsu Province" → Jiangsu;
* the noun follows the run: "Jiangxi province" → Jiangxi;
* the noun precedes it, with or without "of": "the girl group Apink", "the state of New York";
* the run is called one: "Alphaville is a German synthpop/new wave band" → Alphaville.

A run that is the entity itself (or part of its name) is not its value. Two different values in
one statement, or none, give None: the check then does not decide.
"""

from __future__ import annotations

import re

from cograg.answer.subject import question_entities
from cograg.text import normalise_for_match

# the X of "the same X" whose value is a proper name (a nationality or a genre is not one)
NAMED_VALUE_NOUNS = frozenset("""province state country county city town district region band group team club
company label league network university school college family""".split())
# a noun of the question and the other words a statement may use for it
_SAME_THING = {"band": ("band", "group"), "group": ("group", "band"), "country": ("country", "nation"),
               "city": ("city", "town"), "company": ("company", "corporation", "firm"),
               "team": ("team", "club"), "club": ("club", "team"), "label": ("label", "record label")}


def _singulars(noun: str) -> tuple[str, ...]:
    base = noun.lower().strip()
    return _SAME_THING.get(base, (base,))


def _nouns(noun: str) -> tuple[str, ...]:
    return tuple(w for n in _singulars(noun) for w in (n, n + "s"))


def _is_entity(run: str, entity: str) -> bool:
    r, e = normalise_for_match(run), normalise_for_match(entity)
    return bool(r) and (r in e or e in r)


def named_value(statement: str, noun: str, entity: str) -> str | None:
    """The name `statement` gives as `entity`'s `noun`, or None when it gives none or several."""
    nouns = "|".join(re.escape(n) for n in sorted(_nouns(noun), key=len, reverse=True))
    found: dict[str, str] = {}
    for run in question_entities(statement):
        words = run.split()
        if len(words) > 1 and words[-1].lower() in _singulars(noun):  # "Jiangsu Province", not "United States"
            value = " ".join(words[:-1])
        else:
            r = re.escape(run)
            tied = (rf"\b{r}\s+(?:{nouns})\b", rf"\b(?:{nouns})\s+(?:of\s+)?(?:the\s+)?{r}\b",
                    rf"\b{r}\s+(?:is|was|are|were)\s+(?:a|an|the)\s+(?:[\w/'-]+\s+){{0,5}}?(?:{nouns})\b")
            value = run if any(re.search(p, statement, re.I) for p in tied) else ""
        if value and not _is_entity(value, entity):
            found.setdefault(normalise_for_match(value), value)
    return next(iter(found.values())) if len(found) == 1 else None


def same_value(a: str, b: str) -> bool:
    """Whether two values name the same thing (case, spacing and punctuation aside)."""
    return normalise_for_match(a) == normalise_for_match(b)


__all__ = ["NAMED_VALUE_NOUNS", "named_value", "same_value"]
