"""Router/Gate (SPEC D1, seed 004 §5): which route and execution mode a turn takes.

The hybrid pipeline of seed 004 §5.9:

1. LLM scores: an optional `LLMRouteScorer` rates complexity, ambiguity, retrieval_need and risk.
2. Rule correction: deterministic keyword/structure scores (`rule_analysis`) are blended with the
   LLM's, then the versioned rule table (`routing_rules.yaml`) decides with fixed overrides:
   BLOCK first, then CLARIFY, MULTI_HOP, FAST_PATH (R0, only for low-risk turns that need no new
   evidence — never for a factual question), else DOC_GROUNDED.
3. Preflight: for DOC_GROUNDED, one cheap retrieval measures `retrieval_sufficiency`, which picks
   R1_ONE_SHOT_RETRIEVE (sufficient) or R2_MULTI_RETRIEVE (insufficient).
4. The decision, every rule that fired and the table version go into the trace.

"The model proposes, the system decides": without any LLM the router still works (rules only),
and an LLM failure only removes its scores. Nothing here does I/O except the injected callables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, field_validator

from cograg.config import AnswerConfig
from cograg.control.models import Mode, Route, RouteDecision, RouteScores, Sufficiency
from cograg.control.plan_templates import OrderCheck, TemplatePlan, template_plan
# the rule table (`routing_rules`) and the rule-only signals (`route_signals`) have their own
# modules; every name they took from here is still importable from here
from cograg.control.route_signals import (
    RuleAnalysis,
    _question_terms,
    facts_cover_question,
    fast_path_fits,
    is_conversational,
    rule_analysis,
    rule_scores,
)
from cograg.control.route_signals import content_terms  # noqa: F401 - control.planner imports it from here
from cograg.control.routing_rules import SIGNALS, RoutingRules, load_rules
from cograg.control.routing_rules import DEFAULT_RULES_FILE, Signal, SufficiencyThresholds, Unit  # noqa: F401
from cograg.control.routing_rules import AmbiguityWeights, ComplexityWeights, RetrievalNeedWeights  # noqa: F401
from cograg.control.routing_rules import RiskWeights, RoutingThresholds, SignalWeights  # noqa: F401
from cograg.messages import message
from cograg.models import ModelError
from cograg.retrieval.models import SearchResult
from cograg.text import is_chinese, language_of, normalise_for_match, shown_score


# --------------------------------------------------------------------------- LLM scores

Intent = Literal["greeting", "meta", "fact_lookup", "comparison", "cause", "multi_step", "unclear_reference",
                 "unsafe", "other"]


# What the route_scores prompt asks the model for. Fields are in alphabetical order because the
# llama.cpp grammar is built from the schema with sorted keys: the prompt's examples use the same
# order, so a small model is not asked to write keys in an order it was never shown. Scores outside
# [0, 1] are repaired (a 0-10 or 0-100 scale is rescaled) rather than rejected: they are only
# advice, the rule table decides. (No docstring: it would be sent to the model inside the schema.)
class LLMRouteAssessment(BaseModel):
    ambiguity: float
    complexity: float
    intent: Intent
    retrieval_need: float
    risk: float

    @field_validator("intent", mode="before")
    @classmethod
    def _known_intent(cls, v: Any) -> str:
        s = str(v or "").strip().lower().replace(" ", "_").replace("-", "_")
        return s if s in Intent.__args__ else "other"  # type: ignore[attr-defined]

    @field_validator("complexity", "ambiguity", "retrieval_need", "risk", mode="before")
    @classmethod
    def _unit_interval(cls, v: Any) -> float:
        x = float(v)
        if 1.0 < x <= 10.0:
            x /= 10.0
        elif 10.0 < x <= 100.0:
            x /= 100.0
        return min(1.0, max(0.0, x))

    def scores(self) -> RouteScores:
        return RouteScores(complexity=self.complexity, ambiguity=self.ambiguity,
                           retrieval_need=self.retrieval_need, risk=self.risk)


class LLMRouteScorer:
    """Seed 004 §5.9 step 1 (and seed 000's dispatcher, Prompt 1): the four scores from any LLM
    through schema-constrained JSON. Raises ModelError (LLMTimeout, LLMOutputError, ...) on failure;
    the Router turns that into `llm_error` and routes on rules."""

    def __init__(self, llm: Any, *, max_tokens: int = 96, timeout_s: float | None = 60.0) -> None:
        from cograg.prompts import load_prompt

        self.llm = llm
        self.prompt = load_prompt("route_scores")
        self.name = f"llm:{getattr(llm, 'name', 'llm')}"
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s

    @property
    def prompt_version(self) -> str:
        return self.prompt.version

    def assess(self, question: str, *, session_summary: str | None = None) -> LLMRouteAssessment:
        from cograg.models.llm import ChatMessage

        msg = ChatMessage(role="user", content=self.prompt.render(question=question, session_summary=session_summary))
        out, _ = self.llm.chat_json([msg], LLMRouteAssessment, max_tokens=self.max_tokens, timeout_s=self.timeout_s)
        return out  # type: ignore[no-any-return]

    def score(self, question: str, *, session_summary: str | None = None) -> RouteScores:
        return self.assess(question, session_summary=session_summary).scores()


# --------------------------------------------------------------------------- preflight


def preflight(result: SearchResult, question: str, rules: RoutingRules | None = None,
              floors: AnswerConfig | None = None) -> Sufficiency:
    """Seed 004 §5.2 `retrieval_sufficiency` of one cheap retrieval: hit count, best score (reranker
    or cosine, per `evidence_source`) and coverage = share of the question's terms found in the
    text of the top-3 hits. Sufficient when all three meet the per-language thresholds (the score
    floor is the answerer's refusal floor, `floors`, default `AnswerConfig()`); `score` is
    the weakest of the three ratios (capped at 1), so 1.0 means sufficient."""
    from cograg.index.analyzer import analyze

    rules = rules or load_rules()
    th = rules.sufficiency_for(question)
    hits = len(result.hits)
    terms = _question_terms(question)
    have: set[str] = set()
    for h in result.hits[:3]:
        have.update(analyze(h.text))
    coverage = round(len(terms & have) / len(terms), 4) if terms else 0.0
    top = result.evidence_score
    source = result.evidence_source
    ratios = [min(1.0, hits / th.min_hits) if th.min_hits > 0 else 1.0,
              min(1.0, coverage / th.min_coverage) if th.min_coverage > 0 else 1.0]
    beyond_rewrite = above_floor = False
    if top is not None:
        floor = (floors or AnswerConfig()).evidence_floor(chinese=is_chinese(question), source=source)
        # the margin is calibrated on cosine scores; reranker logits have their own scale
        beyond_rewrite = (th.rewrite_margin is not None and not (source or "").startswith("reranker")
                          and top < floor - th.rewrite_margin)
        if top >= floor:
            above_floor = True
            ratios.append(1.0)
        else:
            # how far below the floor; kept under 1 so that "below" never reads as sufficient, and
            # at 0 or more since reranker scores can be negative logits
            ratios.append(max(0.0, min(0.999, top / floor)) if floor > 0 else 0.0)
    # without a calibrated score (keyword-only search) hits and coverage decide, like the answerer
    score = round(min(ratios), 4)
    sufficient = hits >= max(1, th.min_hits) and score >= 1.0
    return Sufficiency(hits=hits, top_score=top, top_score_source=source, coverage=coverage, score=score,
                       sufficient=sufficient, beyond_rewrite=beyond_rewrite, above_floor=above_floor)


# --------------------------------------------------------------------------- the router


def blend(rule: RouteScores, llm: RouteScores | None, rules: RoutingRules) -> RouteScores:
    """Rule and LLM scores combined per signal; signals in `rules.rule_floor` keep the rule score as a floor
    (the model may raise them, never lower them)."""
    if llm is None:
        return rule.model_copy()
    w = rules.llm_weight
    values = {s: round((1.0 - w) * getattr(rule, s) + w * getattr(llm, s), 4) for s in SIGNALS}
    for s in rules.rule_floor:
        values[s] = max(values[s], getattr(rule, s))
    return RouteScores(**values)


# complexity signals of questions that are more than a bridge: these keep R3's plan
_OTHER_MULTI_HOP_SHAPES = frozenset({"complexity.comparison", "complexity.cause", "complexity.analysis"})


class Router:
    """Seed 004 §5.9 hybrid Router/Gate. `search(question) -> SearchResult` is the preflight
    retrieval (omit it to decide the route without retrieving; DOC_GROUNDED then means R1)."""

    def __init__(self, rules: RoutingRules | None = None, llm_scorer: LLMRouteScorer | Any | None = None,
                 search: Callable[[str], SearchResult] | None = None, floors: AnswerConfig | None = None) -> None:
        self.rules = rules or load_rules()
        self.llm_scorer = llm_scorer
        self.search = search
        self.floors = floors or AnswerConfig()

    def _one_search(self, search: Callable[[str], SearchResult], question: str, rules: RoutingRules,
                    reasons: list[str], shape: str) -> tuple[SearchResult, Sufficiency] | None:
        """One search of a multi-hop question of `shape` and its preflight, or None when the search
        fails (the injected search may be anything; R3 searches per look-up anyway)."""
        try:
            result = search(question)
        except Exception as exc:
            reasons.append(f"{shape} preflight failed ({type(exc).__name__}) -> R3")
            return None
        return result, preflight(result, question, rules, self.floors)

    def _comparison_in_one_search(self, question: str, plan: TemplatePlan, rules: RoutingRules,
                                  reasons: list[str]) -> Sufficiency | None:
        """The preflight of a two-entity comparison (`plan`, the comparison template): its sufficiency
        when one search of the question clears the refusal floor and both compared entities appear in
        the passages R1 would answer from (then R1 answers it), else None (R3 plans one look-up per entity)."""
        if not rules.comparison_one_search or self.search is None or len(plan.entities) != 2:
            return None
        if plan.check is not None:
            if isinstance(plan.check, OrderCheck):
                if rules.order_checked_in_r3:
                    reasons.append("comparison: 'which came first, A or B?' is decided by R3's check of the two "
                                   "dates -> R3")
                    return None
            elif rules.both_checked_in_r3:
                reasons.append("comparison: 'both X?', 'same X?' or 'which is P, A or B?' is decided by R3's check "
                               "of each side -> R3")
                return None
        searched = self._one_search(self.search, question, rules, reasons, "comparison")
        if searched is None:
            return None
        result, suff = searched
        hits = self.floors.retrieve_hits
        seen = normalise_for_match(" ".join(h.text for h in result.hits[:hits]))
        missing = [e for e in plan.entities if normalise_for_match(e) not in seen]
        if not suff.above_floor or missing:
            why = f"{', '.join(missing)} not in the top {hits} hits" if missing else \
                f"best score {shown_score(suff.top_score)} under the refusal floor"
            reasons.append(f"comparison: one search is not enough ({why}) -> R3")
            return None
        reasons.append(f"comparison: one search clears the floor (top={shown_score(suff.top_score)}) and names both "
                       f"{plan.entities[0]!r} and {plan.entities[1]!r} -> R1")
        return suff

    def _bridge_in_one_search(self, question: str, analysis: RuleAnalysis, rules: RoutingRules,
                              reasons: list[str]) -> Sufficiency | None:
        """The preflight of a bridge question (one whose answer hangs off something it describes,
        "Who directed the film that …"): its sufficiency when one search of the question clears the
        refusal floor and R1's follow-up hop is on (then R1 answers it, the hop looking for the second
        paragraph), else None (R3 plans the look-ups). A question that also compares, asks for causes
        or for an analysis keeps its plan."""
        if not rules.bridge_one_search or self.search is None:
            return None
        fired = set(analysis.fired)
        if "complexity.bridge" not in fired or fired & _OTHER_MULTI_HOP_SHAPES:
            return None
        if not self.floors.follow_up_hop:
            reasons.append("bridge: R1's follow-up hop is off -> R3")
            return None
        searched = self._one_search(self.search, question, rules, reasons, "bridge")
        if searched is None:
            return None
        suff = searched[1]
        if not suff.above_floor:
            reasons.append(f"bridge: one search is not enough (best score {shown_score(suff.top_score)} under the "
                           "refusal floor) -> R3")
            return None
        reasons.append(f"bridge: one search clears the floor (top={shown_score(suff.top_score)}); R1's follow-up hop "
                       "looks for the second paragraph -> R1")
        return suff

    def route(self, question: str, *, facts: list[str] | None = None, has_context: bool = False,
              session_summary: str | None = None) -> RouteDecision:
        rules = self.rules
        th = rules.thresholds
        analysis = rule_analysis(question, facts=facts, rules=rules)
        reasons = [f"rule:{f}" for f in analysis.fired]

        # 1. LLM scores (advice only; any model failure leaves the rules in charge)
        llm_scores: RouteScores | None = None
        llm_error: str | None = None
        intent: str | None = None
        blocked_by_rules = "risk" in rules.rule_floor and analysis.scores.risk >= th.block_risk
        if self.llm_scorer is not None and blocked_by_rules:
            # with the rule floor no LLM answer can lower this risk: save the model call
            reasons.append("llm:skipped (rules already block)")
        elif self.llm_scorer is not None and question.strip():
            try:
                if hasattr(self.llm_scorer, "assess"):
                    assessment = self.llm_scorer.assess(question, session_summary=session_summary)
                    llm_scores, intent = assessment.scores(), assessment.intent
                else:
                    llm_scores = self.llm_scorer.score(question, session_summary=session_summary)
                version = getattr(self.llm_scorer, "prompt_version", "llm")
                reasons.append(f"llm:scored({version}{', intent=' + intent if intent else ''})")
            except ModelError as exc:
                llm_error = f"{type(exc).__name__}: {exc}"
                reasons.append("llm:error -> rules only")

        # 2. rule correction
        scores = blend(analysis.scores, llm_scores, rules)

        def decide(route: Route, mode: Mode, *, sufficiency: Sufficiency | None = None,
                   clarification: str | None = None) -> RouteDecision:
            return RouteDecision(route=route, mode=mode, scores=scores, rule_scores=analysis.scores,
                                 llm_scores=llm_scores, llm_error=llm_error, sufficiency=sufficiency,
                                 reasons=reasons, rules_version=rules.version, clarification=clarification,
                                 intent=intent)

        if scores.risk >= th.block_risk:
            reasons.append(f"BLOCK: risk {scores.risk:.2f} >= {th.block_risk}")
            return decide("BLOCK", "R5_BLOCK")
        if scores.ambiguity >= th.clarify_ambiguity and analysis.conversational:
            # a clarification says what to look up; a greeting or a question about the assistant
            # looks nothing up, so a model's ambiguity score for it is not acted on
            reasons.append("ambiguity ignored: conversational turn (nothing to look up)")
        elif scores.ambiguity >= th.clarify_ambiguity:
            if not has_context:
                reasons.append(f"CLARIFY: ambiguity {scores.ambiguity:.2f} >= {th.clarify_ambiguity}, no context")
                text = analysis.clarification or message("clarify.what_referring",
                                                         language_of(question))
                return decide("CLARIFY", "R4_CLARIFY", clarification=text)
            reasons.append("ambiguity left to the conversation context")
        if scores.complexity >= th.multi_hop_complexity:
            reasons.append(f"MULTI_HOP: complexity {scores.complexity:.2f} >= {th.multi_hop_complexity}")
            plan = template_plan(question)
            # a two-entity comparison is judged as one; any other question may be a bridge
            one_search = (self._comparison_in_one_search(question, plan, rules, reasons)
                          if plan is not None and plan.name == "comparison"
                          else self._bridge_in_one_search(question, analysis, rules, reasons))
            if one_search is not None:
                return decide("MULTI_HOP", "R1_ONE_SHOT_RETRIEVE", sufficiency=one_search)
            return decide("MULTI_HOP", "R3_DAG_PLAN")
        if scores.retrieval_need < th.fast_path_retrieval_need:
            # R0 only when low risk and no new evidence is needed (seed 004 §5.9 constraint)
            if analysis.factual:
                reasons.append("R0 refused: factual question (rules) needs evidence")
            elif not fast_path_fits(analysis):
                reasons.append("R0 refused: not a greeting, thanks or question about the assistant, "
                               "and no remembered facts cover it")
            elif scores.risk >= th.fast_path_max_risk:
                reasons.append(f"R0 refused: risk {scores.risk:.2f} >= {th.fast_path_max_risk}")
            else:
                why = "facts cover the question" if analysis.facts_cover else "no new evidence needed"
                reasons.append(f"FAST_PATH: retrieval_need {scores.retrieval_need:.2f} < "
                               f"{th.fast_path_retrieval_need}, {why}")
                return decide("FAST_PATH", "R0_DIRECT_WRITE")

        # 3. preflight retrieval decides one shot vs several
        if self.search is None:
            reasons.append("DOC_GROUNDED: no preflight search configured -> R1")
            return decide("DOC_GROUNDED", "R1_ONE_SHOT_RETRIEVE")
        try:
            result = self.search(question)
        except Exception as exc:  # the injected search may be anything; a failed preflight only means "retry harder"
            reasons.append(f"preflight failed ({type(exc).__name__}: {exc}) -> R2")
            return decide("DOC_GROUNDED", "R2_MULTI_RETRIEVE")
        suff = preflight(result, question, rules, self.floors)
        if suff.sufficient:
            reasons.append(f"DOC_GROUNDED: preflight sufficient (hits={suff.hits}, top={shown_score(suff.top_score)}, "
                           f"coverage={suff.coverage:.2f}) -> R1")
            return decide("DOC_GROUNDED", "R1_ONE_SHOT_RETRIEVE", sufficiency=suff)
        if suff.beyond_rewrite:
            # rewrites cost several model calls and, on the calibration split, no answerable question
            # scored this far below the floor: R1's gate refuses before any model call
            reasons.append(f"DOC_GROUNDED: preflight top={shown_score(suff.top_score)} more than "
                           f"{rules.sufficiency_for(question).rewrite_margin} below the refusal floor -> R1 (refuses)")
            return decide("DOC_GROUNDED", "R1_ONE_SHOT_RETRIEVE", sufficiency=suff)
        if suff.above_floor and suff.hits >= 1:
            # only the term coverage is short: R2 would answer from this same first search (it keeps
            # R1's passages whenever they clear the floor), after 5 grading calls that changed no
            # answer on the evaluation questions measured (docs/benchmarks.md, R2 vs R1)
            reasons.append(f"DOC_GROUNDED: preflight top={shown_score(suff.top_score)} clears the floor, coverage "
                           f"{suff.coverage:.2f} short -> R1")
            return decide("DOC_GROUNDED", "R1_ONE_SHOT_RETRIEVE", sufficiency=suff)
        reasons.append(f"DOC_GROUNDED: preflight insufficient (hits={suff.hits}, top={shown_score(suff.top_score)}, "
                       f"coverage={suff.coverage:.2f}) -> R2")
        return decide("DOC_GROUNDED", "R2_MULTI_RETRIEVE", sufficiency=suff)


__all__ = [
    "LLMRouteAssessment",
    "LLMRouteScorer",
    "Router",
    "RoutingRules",
    "RuleAnalysis",
    "blend",
    "facts_cover_question",
    "fast_path_fits",
    "is_conversational",
    "load_rules",
    "preflight",
    "rule_analysis",
    "rule_scores",
]
