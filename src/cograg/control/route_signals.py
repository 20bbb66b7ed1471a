"""The Router's rule-only question analysis (no model, no I/O), apart so the classifier reads on its own."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from functools import lru_cache

from pydantic import BaseModel, Field

from cograg.control.models import RouteScores
from cograg.control.route_patterns import (
    _any, _I, _ACCESS_BYPASS, _ANALYSIS, _ANCHOR, _BRIDGE_ZH, _CAUSE, _CHAT_TRIGGER_EN, _CHAT_TRIGGER_ZH,
    _COMPARISON, _CONVERSATION_REF, _COPULA_BEFORE, _DISCLOSE, _FOLLOW_UP, _FORCED, _GENERIC_EN, _GENERIC_ZH,
    _HARM_OBJECT, _HOW_TO, _JOINED_EN, _JOINED_ZH, _META, _MULTI_PART_EN, _NAMED_PERSONAL, _OTHERS, _PERSONAL,
    _PRONOUN_EN, _PRONOUN_ZH, _QUESTION_EN, _QUESTION_WORD_ZH, _QUESTION_ZH, _RELATIVE, _REQUEST_EN, _REQUEST_ZH,
    _SECRET, _SECRET_SELF_SERVICE, _SOURCE_REQUEST, _WH_EN, _YES_NO,
)
from cograg.control.routing_rules import RoutingRules, load_rules
from cograg.messages import message
from cograg.questions import needs_clarification
from cograg.text import is_chinese


class RuleAnalysis(BaseModel):
    """What the deterministic classifier saw: the four scores and the named signals behind them."""

    scores: RouteScores
    fired: list[str] = Field(default_factory=list, description="signals as `dimension.signal`")
    factual: bool = Field(False, description="a question about the world or the documents (R0 refused)")
    conversational: bool = Field(False, description="greeting, thanks or a question about the assistant")
    source_requested: bool = False
    facts_cover: bool = False
    clarification: str | None = None


def _noisy_or(weights: Iterable[float]) -> float:
    """Several independent cues strengthen each other without leaving [0, 1]."""
    p = 1.0
    for w in weights:
        p *= 1.0 - w
    return round(1.0 - p, 4)


def _content_terms_zh(text: str) -> list[str]:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    words = [w.strip() for w in jieba.lcut(text)]
    return [w for w in words if w and re.search(r"[\u4e00-\u9fff]", w) and w not in _GENERIC_ZH]


def _content_terms_en(text: str) -> list[str]:
    from cograg.index.analyzer import analyze

    return [t for t in analyze(text) if t not in _GENERIC_EN and not t.isdigit()]


def content_terms(text: str) -> set[str]:
    """The words of `text` that name things (jieba words for Chinese, stemmed English terms),
    without question words and generic filler; what a sub-question must share with its request."""
    terms = set(_content_terms_zh(text)) if is_chinese(text) else set()
    return terms | set(_content_terms_en(text))


def _bare_pronoun(question: str, zh: bool) -> str | None:
    """A personal pronoun with nothing in the question it could refer to ("Who wrote it?")."""
    m = (_PRONOUN_ZH if zh else _PRONOUN_EN).search(question)
    if not m:
        return None
    if _ANCHOR.search(question):
        return None
    if not zh and re.search(r"(?<!^)(?<![.?!]\s)\b[A-Z][a-z]+", question.strip()[1:]):
        return None  # a proper noun (not the first word) is an anchor
    terms = _content_terms_zh(question) if zh else _content_terms_en(question)
    return m.group(0) if len(set(terms)) <= 2 else None


def _generic_clarification(reference: str, zh: bool, question: str = "") -> str:
    if len(reference.strip()) >= len(question.strip()) - 2:
        # the whole turn is an ellipsis ("Why?", "另一个呢？"): ask for the subject, not the word
        return message("clarify.what_subject", "zh" if zh else "en")
    return message("clarify.what_reference", "zh" if zh else "en", reference=reference)


def _question_terms(question: str) -> set[str]:
    """Analysed terms of a question without its question words (they never occur in answers)."""
    from cograg.index.analyzer import analyze

    return set(analyze(question)) - _question_word_terms()


@lru_cache(maxsize=1)
def _question_word_terms() -> frozenset[str]:
    from cograg.index.analyzer import analyze

    words = ("什么 哪 哪里 哪个 哪些 哪一年 哪一 是哪 谁 多少 几 怎么 怎样 如何 为什么 为何 吗 呢 请问 是否 "
             "how many much what when where who whom whose which why does did do")
    return frozenset(analyze(words))


def facts_cover_question(question: str, facts: Iterable[str], min_coverage: float) -> bool:
    """Whether the given facts contain at least `min_coverage` of the question's terms."""
    from cograg.index.analyzer import analyze

    terms = _question_terms(question)
    if not terms:
        return False
    have: set[str] = set()
    for f in facts:
        have.update(analyze(f))
    return len(terms & have) / len(terms) >= min_coverage


def rule_analysis(question: str, *, facts: list[str] | None = None, rules: RoutingRules | None = None) -> RuleAnalysis:
    """Deterministic keyword/structure scores for a Chinese or English question (no model)."""
    rules = rules or load_rules()
    w = rules.signals
    q = (question or "").strip()
    zh = is_chinese(q)
    fired: list[str] = []

    def fire(dimension: str, signal: str, hit: object) -> float:
        if not hit:
            return 0.0
        fired.append(f"{dimension}.{signal}")
        return float(getattr(getattr(w, dimension), signal))

    if not q:
        return RuleAnalysis(scores=RouteScores(ambiguity=1.0), fired=["ambiguity.empty_question"],
                            clarification=message("clarify.empty_question"))

    # -- risk
    secret = _SECRET.search(q)
    disclose = bool(secret and _DISCLOSE.search(q) and not _SECRET_SELF_SERVICE.search(q))
    risk = _noisy_or([
        fire("risk", "secret_disclosure", disclose),
        fire("risk", "secret_mention", secret and not disclose),
        fire("risk", "access_bypass", _any(_ACCESS_BYPASS, q)),
        fire("risk", "private_data", (_OTHERS.search(q) and _PERSONAL.search(q))
             or (_NAMED_PERSONAL.search(q) and _DISCLOSE.search(q))),
        fire("risk", "harmful", _HARM_OBJECT.search(q) and _HOW_TO.search(q)),
        fire("risk", "forced_conclusion", _any(_FORCED, q)),
        fire("risk", "yes_no_demand", _YES_NO.search(q)),
    ])

    # -- complexity
    bridge = False
    if zh:
        bridge = bool(_any(_BRIDGE_ZH, q))
    else:
        for m in _RELATIVE.finditer(q):
            if not _COPULA_BEFORE.search(q[: m.start()]):
                bridge = True
                break
    if zh:
        clauses = [c for c in re.split(r"[，,；;。？?！!]", q) if c.strip()]
        multi_part = q.count("？") + q.count("?") >= 2 or sum(bool(_QUESTION_WORD_ZH.search(c)) for c in clauses) >= 2
    else:
        multi_part = q.count("?") >= 2 or bool(_MULTI_PART_EN.search(q) and len(_WH_EN.findall(q)) >= 2)
    complexity = _noisy_or([
        fire("complexity", "comparison", _any(_COMPARISON, q)),
        fire("complexity", "cause", _CAUSE.search(q)),
        fire("complexity", "bridge", bridge),
        fire("complexity", "analysis", _ANALYSIS.search(q)),
        fire("complexity", "multi_part", multi_part),
        fire("complexity", "joined_entities", (_JOINED_ZH if zh else _JOINED_EN).search(q)),
    ])

    # -- retrieval need (decided first: chit-chat has no references to resolve)
    words = re.findall(r"[A-Za-z']+", q)
    cjk_len = len(re.findall(r"[\u4e00-\u9fff]", q))
    asks = bool((_QUESTION_ZH if zh else _QUESTION_EN).search(q))
    requests = bool((_REQUEST_ZH if zh else _REQUEST_EN).search(q))
    trigger = _CHAT_TRIGGER_ZH if zh else _CHAT_TRIGGER_EN
    # nothing but greetings/thanks and punctuation ("嗨，在吗？", "Hello!") is chit-chat even with a "?"
    rest = trigger.sub(" ", q)
    only_chat = bool(trigger.search(q)) and not re.search(r"[A-Za-z0-9\u4e00-\u9fff]", re.sub(r"\b(there|you|again|all|"
                                                                                        r"so|much|a|lot|very)\b", "", rest, flags=_I))
    if zh:
        chit_chat = only_chat or (bool(trigger.search(q)) and not asks and not requests and cjk_len <= 12)
    else:
        chit_chat = only_chat or (bool(trigger.search(q)) and not asks and not requests and len(words) <= 8)
    meta = bool(_any(_META, q))
    source_requested = bool(_SOURCE_REQUEST.search(q))
    facts_cover = False
    if chit_chat:
        retrieval_need = fire("retrieval_need", "chit_chat", True)
    elif meta:
        retrieval_need = fire("retrieval_need", "meta", True)
    else:
        retrieval_need = fire("retrieval_need", "factual", True) if asks else fire("retrieval_need", "statement", True)
        # verified facts from the ledger may answer a simple question without new retrieval
        # (seed 004 §5.4 R0), unless the user asks where it is written
        if facts and not source_requested and facts_cover_question(q, facts, rules.thresholds.facts_min_coverage):
            facts_cover = True
            retrieval_need = fire("retrieval_need", "facts_cover", True)
    factual = retrieval_need >= rules.thresholds.factual_rule_floor

    # -- ambiguity
    clarification = None
    ambiguity = 0.0
    if not chit_chat and not meta:
        text = needs_clarification(q, has_context=False)
        conversation = _CONVERSATION_REF.search(q) or _FOLLOW_UP.search(q)
        pronoun = None if (text or conversation) else _bare_pronoun(q, zh)
        ambiguity = _noisy_or([
            fire("ambiguity", "unresolved_reference", text),
            fire("ambiguity", "conversation_reference", conversation),
            fire("ambiguity", "bare_pronoun", pronoun),
        ])
        if text:
            clarification = text
        elif conversation:
            ref = conversation.group(0).strip()
            if len(ref) >= len(q) - 2:
                clarification = _generic_clarification(ref, zh, q)
            else:
                clarification = message("clarify.no_earlier_context", "zh" if zh else "en", reference=ref)
        elif pronoun:
            clarification = _generic_clarification(pronoun, zh, q)

    return RuleAnalysis(
        scores=RouteScores(complexity=complexity, ambiguity=ambiguity, retrieval_need=retrieval_need, risk=risk),
        fired=fired, factual=factual, conversational=chit_chat or meta, source_requested=source_requested,
        facts_cover=facts_cover, clarification=clarification)


def is_conversational(question: str) -> bool:
    """A greeting, thanks or question about the assistant: the only turns R0's canned reply fits
    (R0's other use, answering from remembered facts, is decided with the facts: `fast_path_fits`)."""
    return rule_analysis(question).conversational


def fast_path_fits(analysis: RuleAnalysis) -> bool:
    """R0 writes a canned reply (a greeting, thanks, a question about the assistant) or an answer
    from the session's verified facts (conversation memory, when the facts given cover the
    question); any other question is answered from the documents."""
    return analysis.conversational or analysis.facts_cover


def rule_scores(question: str, *, facts: list[str] | None = None, rules: RoutingRules | None = None) -> RouteScores:
    """The four routing scores from keywords and structure alone (works with no LLM at all)."""
    return rule_analysis(question, facts=facts, rules=rules).scores



__all__ = [
    "RuleAnalysis",
    "content_terms",
    "facts_cover_question",
    "fast_path_fits",
    "is_conversational",
    "rule_analysis",
    "rule_scores",
]
