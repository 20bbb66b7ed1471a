"""Deterministic R3 plans for the common question shapes (Chinese and English), so that such a
question is planned without a model call.

* comparison: two named entities compared ("Which was released first, A or B?", "Are A and B both
  X?", "Were A and B of the same nationality?", "A和B哪个更早？", "A与B是否都是…", "A还是B…") →
  one look-up per entity (a sub-question about that entity alone, asking for the deciding fact where
  the attribute can be derived) and one reasoning step over both verified statements. "Are A and B
  both X?" (X a category: "American directors", "是作家") asks who or what each one is, and its last
  step is a `check`: the claim "A is an X" judged against A's sources, "B is an X" against B's
  (`category_check`), so yes or no is decided by verdicts, not written by the model. "Are A and B in
  the same X?" ends with a check too: the X each side's verified statement names, compared
  (`same_check`, `control/same_value.py`), and so does "Which singer is American, A or B?": "A is
  American" and "B is American" judged each against its side's sources (`choice_check`);
* bridge: a question about something that must be found first ("Who directed the film that …",
  "the X of the Y of Z", "When was the author of Z born?", "…的作者是哪国人？") → a look-up of
  the hidden entity, then a look-up that depends on it (its search includes what the first found).

The bridge shapes are `bridge_template.py`, what counts as a named entity `template_entities.py`.
The patterns are narrow on purpose: a question that fits none with confidence gets None and the
LLM planner plans it as before. `benchmarks/plan_templates.py` measures how often each fits.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from cograg.control.bridge_template import bridge_lookup
from cograg.control.comparison_zh import ZH_BOTH, ZH_SAME, comparison_zh, who_or_what_zh
from cograg.control.same_value import NAMED_VALUE_NOUNS
from cograg.control.models import Plan, SubTask
from cograg.control.template_entities import distinct_pair, entity_en, entity_zh
from cograg.text import is_chinese

TemplateName = str  # "comparison" | "bridge"


@dataclass(frozen=True)
class TemplatePlan:
    """A plan built from a template; `name` goes into the trace."""

    name: TemplateName
    plan: Plan
    entities: tuple[str, ...]
    check: QuestionCheck | None = None  # what the comparison's last step decides, where it is a check


@dataclass(frozen=True)
class CategoryCheck:
    """"Are A and B both X?" decided side by side: yes when each entity's sources support its claim
    ("A was an American director"), no when one's sources contradict it (`negations`)."""

    entities: tuple[str, str]
    lookups: tuple[str, str]  # who or what each one is: the plan's two look-ups
    claims: tuple[str, str]
    negations: tuple[str, str]
    yes: str  # the conclusion when both claims are supported, without its markers


# --------------------------------------------------------------------------- comparison, English

_COMPARATIVE = (r"first|earlier|later|last|older|oldest|younger|youngest|elder|larger|largest|bigger|biggest|taller|"
                r"tallest|longer|longest|higher|highest|heavier|smaller|shorter|deeper|wider|faster|greater|lower|"
                r"more \w+|less \w+|most \w+")
_BASE_ADJ = {"larger": "large", "largest": "large", "bigger": "big", "biggest": "big", "taller": "tall",
             "tallest": "tall", "longer": "long", "longest": "long", "higher": "high", "highest": "high",
             "heavier": "heavy", "smaller": "small", "shorter": "short", "deeper": "deep", "wider": "wide",
             "faster": "fast", "greater": "great", "lower": "low"}

# "Which band was formed first, A or B?" / "Who is older, A or B?" / "Which came first the X or the Y?"
_WHICH_OR = re.compile(r"^(?P<pred>(?:which|who|what)\b[^?]*?)(?:\s*[,:]\s*|\s+)(?P<a>[^,?]+?)\s+or\s+"
                       r"(?P<b>[^,?]+?)\s*\??\s*$", re.I)
# "Between A and B, which …?"
_BETWEEN = re.compile(r"^between\s+(?P<a>.+?)\s+and\s+(?P<b>.+?)\s*,\s*(?P<pred>(?:which|who|what)\b.+?)\s*\??\s*$",
                      re.I)
# "Was A or B released first?"
_AUX_OR = re.compile(r"^(?:was|were|is|are)\s+(?P<a>.+?)\s+or\s+(?P<b>.+?)\s+(?P<pred>\w+ed\s+(?:first|earlier|later))"
                     r"\s*\??\s*$", re.I)
# "Were A and B of the same nationality?" / "Are A and B situated in the same province?"
_SAME = re.compile(r"^(?P<aux>are|were|is|was|do|did|have|had)\s+(?:both\s+)?(?P<a>.+?)\s+and\s+(?P<b>.+?)\s+"
                   r"(?:both\s+)?(?-i:[a-z]+\s+){0,3}?(?:the\s+)?same\s+(?P<noun>[a-z]+)\b[^?]*?\s*\??\s*$", re.I)
# "What do A and B have in common?"
_IN_COMMON = re.compile(r"^what\s+(?:do|did|does)\s+(?:both\s+)?(?P<a>.+?)\s+and\s+(?P<b>.+?)\s+(?:both\s+)?have\s+in\s+common"
                        r"\s*\??\s*$", re.I)
# "Are A and B both X?"
_BOTH = re.compile(r"^(?P<aux>are|were|is|was|do|did|have|had)\s+(?P<a>.+?)\s+and\s+(?P<b>.+?)\s+both\s+(?P<x>[^?]+?)"
                   r"\s*\??\s*$", re.I)
# "Are both magazines, A and B, British publications?"
_BOTH_FIRST = re.compile(r"^(?P<aux>are|were)\s+both\s+(?-i:[a-z ]+,\s*)?(?P<a>[^,]+?)\s+and\s+(?P<b>[^,]+?),\s*"
                         r"(?P<x>[^?]+?)\s*\??\s*$", re.I)


def _split_pred_and_a(head: str) -> tuple[str, str] | None:
    """'Which band was formed first The Exies' (no comma) → the predicate ends at a comparative."""
    m = re.match(rf"^((?:which|who|what)\b.*?\b(?:{_COMPARATIVE}))\s+(\S.*)$", head, re.I)
    return (m.group(1), m.group(2)) if m else None


def _article(phrase: str) -> str:
    return ("an " if phrase[:1].lower() in "aeiou" else "a ") + phrase


def _singular(word: str) -> str:
    if word.endswith("ies"):
        return word[:-3] + "y"
    if re.search(r"(?:ch|sh|x|ss)es$", word):
        return word[:-2]
    return word[:-1]


def _one_of(x: str) -> str:
    """'film directors' → 'a film director': what one member of the category is called (the first
    plural noun among the first four words made singular, with its article); other phrases as asked."""
    words = x.split()
    for i, w in enumerate(words[:4]):
        if re.fullmatch(r"[A-Za-z-]{3,}s", w) and not re.search(r"(?:ss|us|is)$", w):
            return _article(" ".join(words[:i] + [_singular(w)] + words[i + 1:]))
        if not re.fullmatch(r"[A-Za-z-]+", w):
            break
    return x


def _category_question(aux: str, entity: str, x: str) -> str:
    """'Do A and B both have X?' → 'Does A have X?' (the be-verb forms are checks: `category_check`)."""
    verb = {"do": "Does", "did": "Did", "have": "Has", "had": "Had"}[aux.lower()]
    return f"{verb} {entity} {x}?"


def _attribute_question(pred: str, entity: str) -> str:
    """The look-up for one entity of a which-or comparison: the deciding fact where the predicate
    names a known attribute, else a neutral question naming the entity and the attribute."""
    p = " ".join(pred.lower().split())
    past = bool(re.search(r"\b(?:was|were|did|had)\b", p))
    if re.search(r"\b(?:older|oldest|younger|youngest|elder|born (?:first|earlier|later))\b", p):
        return f"When was {entity} born?"
    if re.search(r"\bdied (?:first|earlier)\b", p):
        return f"When did {entity} die?"
    m = re.search(r"\b(?P<verb>[a-z]+ed)\s+(?:first|earlier|later|last)\b", p)
    if m and m.group("verb") not in ("died",):
        return f"When was {entity} {m.group('verb')}?"
    if re.search(r"\b(?:came|come|started|began|appeared|happened|occurred) (?:first|earlier)\b", p):
        return f"When did {entity} happen or begin?"
    m = re.search(r"\b(?P<adj>" + "|".join(_BASE_ADJ) + r")\b", p)
    if m:
        return f"How {_BASE_ADJ[m.group('adj')]} {'was' if past else 'is'} {entity}?"
    m = re.search(r"\b(?:more|less|most)\s+(?P<adj>[a-z]+)(?P<rest>\s+(?:in|during|among|at)\s+[^?]+)?$", p)
    if m and m.group("adj") not in ("people", "money", "albums", "films", "books", "games", "members"):
        return f"How {m.group('adj')} {'was' if past else 'is'} {entity}{m.group('rest') or ''}?"
    m = re.fullmatch(r"(?:which|who)(?: [a-z]+)? (?P<be>is|was|are|were) (?P<adj>[a-z-]+)", p)
    if m:
        return f"{'Was' if past else 'Is'} {entity} {pred.split()[-1]}?"
    return f"What are the facts about {entity} relevant to: {pred.strip()}?"


def _which_or(q: str) -> tuple[str, str, str] | None:
    """(predicate, A, B) of "Which band was formed first, A or B?" (also without the comma when the
    predicate ends at a comparative), or None."""
    m = _WHICH_OR.match(q)
    if not m or q.count(" or ") != 1:
        return None
    head = q[:m.start("b")].rsplit(" or ", 1)[0]
    if "," in head or ":" in head:
        sep = max(head.rfind(","), head.rfind(":"))
        return head[:sep], head[sep + 1:], m.group("b")
    split = _split_pred_and_a(head)
    return (split[0], split[1], m.group("b")) if split is not None else None


def _two_named(q: str) -> Iterator[tuple[str, str, str, str]]:
    """(shape, predicate, A, B) for each which-of-two shape `q` fits, in the order they are tried:
    "Between A and B, which …?", "Was A or B released first?" (its predicate read as "which was
    released first") and "Which band was formed first, A or B?". The comparison and the date check
    both read a question's predicate and its two names here."""
    m = _BETWEEN.match(q)
    if m:
        yield "between", m.group("pred"), m.group("a"), m.group("b")
    m = _AUX_OR.match(q)
    if m and q.count(" or ") == 1:
        yield "aux_or", f"which {q.split()[0].lower()} {m.group('pred')}", m.group("a"), m.group("b")
    parts = _which_or(q)
    if parts is not None:
        yield "which_or", *parts


def _comparison_en(q: str) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """((A, B), (sub-question A, sub-question B)) or None."""
    if q.count(" or ") + q.count(" and ") == 0:
        return None
    for shape, pred, a, b in _two_named(q):
        pair = distinct_pair(entity_en(a), entity_en(b))
        # a "Which …, A or B?" predicate of more than ten words is more than a comparison
        if pair and (shape != "which_or" or len(pred.split()) <= 10):
            return pair, (_attribute_question(pred, pair[0]), _attribute_question(pred, pair[1]))
    m = _IN_COMMON.match(q)
    if m and q.count(" and ") == 1:
        pair = distinct_pair(entity_en(m.group("a")), entity_en(m.group("b")))
        if pair:
            return pair, tuple(f"Who or what is {e}, and what is {e} known for?" for e in pair)  # type: ignore
    m = _SAME.match(q)
    if m and q.count(" and ") == 1:
        pair = distinct_pair(entity_en(m.group("a")), entity_en(m.group("b")))
        if pair:
            noun = m.group("noun").lower()
            return pair, tuple(f"What is the {noun} of {e}?" for e in pair)  # type: ignore[return-value]
    m = _both_en(q)
    if m:
        pair = distinct_pair(entity_en(m.group("a")), entity_en(m.group("b")))
        # with a be-verb it is a check, planned from `category_check` before this is asked
        if pair and m.group("aux").lower() not in _BE:
            return pair, tuple(_category_question(m.group("aux"), e, m.group("x")) for e in pair)  # type: ignore
    return None


_BE = ("are", "were", "is", "was")


def _both_en(q: str) -> re.Match[str] | None:
    """"Are A and B both X?" where X is what each one is on its own: not "in the same state" or
    "in common", which relate the two (the `same` and `in common` shapes ask those)."""
    if _SAME.match(q) or _IN_COMMON.match(q):
        return None
    for pattern in (_BOTH, _BOTH_FIRST):
        m = pattern.match(q)
        if m and q.count(" and ") == 1 and not _RELATIONAL.search(m.group("x")):
            return m
    return None


_RELATIONAL = re.compile(r"\b(?:same|different|similar|alike|related|each other|one another|together)\b", re.I)


def category_check(question: str) -> CategoryCheck | None:
    """The side-by-side check of "Are A and B both X?" / "A与B是否都是X？", or None for any other
    question (and for "do/have" forms, "都获得过…", whose claims and negations are not composed here)."""
    q = " ".join(question.split())
    if is_chinese(q):
        q = re.sub(r"^请问[，,]?", "", q)
        m = None if ZH_SAME.match(q) else ZH_BOTH.match(q)
        if not m or not m.group("x").startswith("是") or re.search(r"同一|相同|一样|同样", m.group("x")):
            return None
        pair = distinct_pair(entity_zh(m.group("a")), entity_zh(m.group("b")))
        if not pair:
            return None
        x = m.group("x")
        return CategoryCheck(entities=pair, lookups=(who_or_what_zh(pair[0]), who_or_what_zh(pair[1])),
                             claims=(f"{pair[0]}{x}", f"{pair[1]}{x}"),
                             negations=(f"{pair[0]}不{x}", f"{pair[1]}不{x}"), yes=f"是的，{pair[0]}和{pair[1]}都{x}")
    m = _both_en(q)
    if not m or m.group("aux").lower() not in _BE:
        return None
    pair = distinct_pair(entity_en(m.group("a")), entity_en(m.group("b")))
    if not pair:
        return None
    past = m.group("aux").lower() in ("were", "was")
    be, are, one = ("was" if past else "is"), ("were" if past else "are"), _one_of(m.group("x"))
    return CategoryCheck(entities=pair, lookups=(f"Who or what {be} {pair[0]}?", f"Who or what {be} {pair[1]}?"),
                         claims=(f"{pair[0]} {be} {one}", f"{pair[1]} {be} {one}"),
                         negations=(f"{pair[0]} {be} not {one}", f"{pair[1]} {be} not {one}"),
                         yes=f"Yes, {pair[0]} and {pair[1]} {are} both {m.group('x')}")


@dataclass(frozen=True)
class SameCheck:
    """"Are A and B in the same X?" decided by the values: the X each look-up's verified statement
    names (`control/same_value.named_value`), compared by the system. English only."""

    entities: tuple[str, str]
    lookups: tuple[str, str]
    noun: str


def same_check(question: str) -> SameCheck | None:
    """The value check of "Are A and B situated in the same province?", "Were A and B members of
    the same band?" (English, an X whose value is a name: `NAMED_VALUE_NOUNS`), or None for any
    other question."""
    q = " ".join(question.split())
    m = None if is_chinese(q) else _SAME.match(q)
    if not m or q.count(" and ") != 1 or m.group("aux").lower() not in _BE:
        return None
    pair = distinct_pair(entity_en(m.group("a")), entity_en(m.group("b")))
    if not pair:
        return None
    noun = m.group("noun").lower()
    if noun not in NAMED_VALUE_NOUNS:  # "the same nationality", "the same genre": the model reasons
        return None
    return SameCheck(entities=pair, lookups=(f"What is the {noun} of {pair[0]}?", f"What is the {noun} of {pair[1]}?"),
                     noun=noun)


@dataclass(frozen=True)
class ChoiceCheck:
    """"Which singer is American, A or B?" decided by verdicts: the claim "A is American" judged
    against the sources A's look-up cited, "B is American" against B's. English only."""

    entities: tuple[str, str]
    lookups: tuple[str, str]
    claims: tuple[str, str]


# "Which singer is American", "Who was born in Germany", "Which of the two bands is from Leeds": a
# be-verb and what the chosen one is, with no comparative ("Which was released first" compares)
_CHOICE_PRED = re.compile(r"^(?:which|who)\b(?:\s+[\w'-]+){0,4}?\s+(?P<be>is|was|are|were)\s+(?P<p>\S.*?)\s*$", re.I)


def choice_check(question: str) -> ChoiceCheck | None:
    """The side-by-side check of "Which X is P, A or B?" (English, P not a comparative: "first",
    "older", "more popular" are compared by the model from each side's facts), or None."""
    q = " ".join(question.split())
    parts = None if is_chinese(q) else _which_or(q)
    m = _CHOICE_PRED.match(parts[0].strip()) if parts is not None else None
    if m is None or re.search(rf"\b(?:{_COMPARATIVE})\b", m.group("p"), re.I):
        return None
    pair = distinct_pair(entity_en(parts[1]), entity_en(parts[2]))  # type: ignore[index]
    if not pair:
        return None
    be = "was" if m.group("be").lower() in ("was", "were") else "is"
    return ChoiceCheck(entities=pair, lookups=(f"Who or what {be} {pair[0]}?", f"Who or what {be} {pair[1]}?"),
                       claims=(f"{pair[0]} {be} {m.group('p')}", f"{pair[1]} {be} {m.group('p')}"))


@dataclass(frozen=True)
class OrderCheck:
    """"Which band was formed first, A or B?" decided by dates: the one date each side's verified
    statement gives (`control/order_value.py`), compared by the system. English only."""

    entities: tuple[str, str]
    lookups: tuple[str, str]  # "When was A formed?": the plan's two look-ups
    latest: bool  # "later", "younger", "most recent": the later date is the answer
    predicate: str  # what the answer is, as the question says it: "was formed first", "is older"


_EARLIEST = r"first|earlier|earliest|older|oldest|elder|eldest"
_LATEST = r"later|latest|last|younger|youngest|newer|newest|more recent|most recent"
_ORDER_PRED = re.compile(rf"^(?:which|who|what)(?:\s+(?:of\s+the\s+two|of\s+them|[\w'-]+)){{0,3}}?\s+"
                         rf"(?P<rest>(?:is|was|are|were|came|come|did|started|began|\w+ed)\b(?:[^,]*?)\b"
                         rf"(?P<word>{_EARLIEST}|{_LATEST}))\s*$", re.I)


def order_check(question: str) -> OrderCheck | None:
    """The date check of "Which band was formed first, A or B?", "Who is older, A or B?", "Between
    A and B, who was born later?" (English; the look-up asks each side's date), or None."""
    q = " ".join(question.split())
    if is_chinese(q):
        return None
    first = next(_two_named(q), None)
    if first is None:
        return None
    _, pred, a, b = first
    pm = _ORDER_PRED.match(pred.strip())
    if pm is None:
        return None
    pair = distinct_pair(entity_en(a), entity_en(b))
    if not pair:
        return None
    lookups = (_attribute_question(pred, pair[0]), _attribute_question(pred, pair[1]))
    if not all(x.startswith("When ") for x in lookups):  # the deciding fact is not a date
        return None
    latest = re.fullmatch(_LATEST, pm.group("word").lower()) is not None
    return OrderCheck(entities=pair, lookups=lookups, latest=latest, predicate=pm.group("rest"))


# --------------------------------------------------------------------------- entry point


def question_check(question: str) -> QuestionCheck | None:
    """The check that decides `question` without a model writing the conclusion (the first that
    fits, in this order), or None: the plan's last step and the check task read the same one."""
    q = " ".join(question.split())
    return category_check(q) or same_check(q) or choice_check(q) or order_check(q)


def template_plan(question: str) -> TemplatePlan | None:
    """The plan of the first template that fits `question` with confidence, or None."""
    q = " ".join(question.split())
    if not q:
        return None
    check = question_check(q)
    comparison = ((check.entities, check.lookups) if check is not None else
                  comparison_zh(q) if is_chinese(q) else _comparison_en(q))
    if comparison is not None:
        (a, b), (qa, qb) = comparison
        return TemplatePlan(name="comparison", entities=(a, b), check=check, plan=Plan(sub_tasks=[
            SubTask(id=1, description=qa, dependencies=[], type="retrieve"),
            SubTask(id=2, description=qb, dependencies=[], type="retrieve"),
            SubTask(id=3, description=q, dependencies=[1, 2], type="check" if check is not None else "reason")]))
    bridge = bridge_lookup(q)
    if bridge is not None:
        first, about = bridge
        # the second look-up searches the question together with what the first established
        return TemplatePlan(name="bridge", entities=(about,), plan=Plan(sub_tasks=[
            SubTask(id=1, description=first, dependencies=[], type="retrieve"),
            SubTask(id=2, description=q, dependencies=[1], type="retrieve")]))
    return None


QuestionCheck = CategoryCheck | SameCheck | ChoiceCheck | OrderCheck

__all__ = ["CategoryCheck", "ChoiceCheck", "OrderCheck", "QuestionCheck", "SameCheck", "TemplatePlan", "category_check",
           "choice_check", "order_check", "question_check", "same_check", "template_plan"]
