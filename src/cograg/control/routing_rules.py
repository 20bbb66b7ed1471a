"""The routing rule table's schema and loader (`routing_rules.yaml`), apart so it reads without the Router."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError

from cograg.datafiles import first_problem, read_utf8
from cograg.errors import ConfigFileError
from cograg.text import language_of

Signal = Literal["complexity", "ambiguity", "retrieval_need", "risk"]
SIGNALS: tuple[Signal, ...] = ("complexity", "ambiguity", "retrieval_need", "risk")

# --------------------------------------------------------------------------- the rule table


# a weight or threshold on the [0, 1] scale of the routing signals
Unit = Annotated[float, Field(ge=0.0, le=1.0)]


class RoutingThresholds(BaseModel):
    block_risk: Unit = 0.7
    clarify_ambiguity: Unit = 0.6
    multi_hop_complexity: Unit = 0.6
    fast_path_retrieval_need: Unit = 0.5
    fast_path_max_risk: Unit = 0.3
    factual_rule_floor: Unit = 0.7
    facts_min_coverage: Unit = 0.8


class ComplexityWeights(BaseModel):
    comparison: Unit = 0.8
    cause: Unit = 0.6
    bridge: Unit = 0.65
    analysis: Unit = 0.5
    multi_part: Unit = 0.4
    joined_entities: Unit = 0.3


class AmbiguityWeights(BaseModel):
    unresolved_reference: Unit = 0.85
    conversation_reference: Unit = 0.8
    bare_pronoun: Unit = 0.7


class RetrievalNeedWeights(BaseModel):
    factual: Unit = 0.9
    statement: Unit = 0.7
    chit_chat: Unit = 0.05
    meta: Unit = 0.1
    facts_cover: Unit = 0.2


class RiskWeights(BaseModel):
    secret_disclosure: Unit = 0.9
    secret_mention: Unit = 0.4
    access_bypass: Unit = 0.9
    private_data: Unit = 0.9
    harmful: Unit = 0.95
    forced_conclusion: Unit = 0.9
    yes_no_demand: Unit = 0.3


class SignalWeights(BaseModel):
    complexity: ComplexityWeights = Field(default_factory=ComplexityWeights)
    ambiguity: AmbiguityWeights = Field(default_factory=AmbiguityWeights)
    retrieval_need: RetrievalNeedWeights = Field(default_factory=RetrievalNeedWeights)
    risk: RiskWeights = Field(default_factory=RiskWeights)


class SufficiencyThresholds(BaseModel):
    """Preflight thresholds besides the evidence score, whose floor is the answerer's refusal floor
    (`Settings.answer.min_evidence_*`): a preflight that would be refused is not sufficient."""

    min_hits: int = Field(1, ge=0)
    min_coverage: Unit = 0.5
    rewrite_margin: float | None = Field(
        0.03, ge=0.0, description="R2's query rewrites are tried only when the best cosine is at most this far "
        "below the refusal floor; further below, R1's gate refuses at once (None: always try rewrites)")


class RoutingRules(BaseModel):
    """The versioned rule table of seed 004 §5.9 step 2 (`routing_rules.yaml`)."""

    version: str = Field(min_length=1)
    llm_weight: float = Field(0.6, ge=0.0, le=1.0, description="share of the LLM score in a blended signal")
    rule_floor: list[Signal] = Field(default_factory=lambda: list(SIGNALS),
                                     description="signals whose blended score never goes below the rule score")
    thresholds: RoutingThresholds = Field(default_factory=RoutingThresholds)
    signals: SignalWeights = Field(default_factory=SignalWeights)
    sufficiency: dict[Literal["en", "zh"], SufficiencyThresholds] = Field(
        default_factory=lambda: {"en": SufficiencyThresholds(), "zh": SufficiencyThresholds()})
    comparison_one_search: bool = Field(
        True, description="a two-entity comparison whose one search clears the refusal floor and names both "
        "entities in the passages R1 answers from goes to R1, not R3 (docs/benchmarks.md, control flow on "
        "comparison questions: R3 did not beat R1 there and took twice as long)")

    both_checked_in_r3: bool = Field(
        True, description="\"Are A and B both X?\" (a category X) and \"Are A and B in the same X?\" go to R3 "
        "even where one search covers them: the check decides yes or no from each side's verdict, or from "
        "the X each side's verified statement names, where R1's model wrote an unsupported yes or refused "
        "(docs/benchmarks.md, yes/no comparisons)")

    order_checked_in_r3: bool = Field(
        True, description="\"Which band was formed first, A or B?\" (plan_templates.order_check) goes to R3 "
        "even where one search covers it: the check compares the dates the two look-ups verified, where R1's "
        "model wrote which came first (docs/benchmarks.md, dates compared by the system)")

    bridge_one_search: bool = Field(
        True, description="a bridge question (complexity signal `bridge`, and no comparison, cause or analysis) "
        "whose one search clears the refusal floor goes to R1, whose follow-up hop looks for the second "
        "paragraph, not R3 (docs/benchmarks.md, control flow on bridge questions)")

    def sufficiency_for(self, question: str) -> SufficiencyThresholds:
        lang = language_of(question)
        return self.sufficiency.get(lang) or SufficiencyThresholds()


DEFAULT_RULES_FILE = "routing_rules.yaml"


def load_rules(path: str | Path | None = None) -> RoutingRules:
    """The rule table from `path`, or the packaged `routing_rules.yaml`. ConfigFileError when the file
    is unreadable, not a mapping, has no `version`, or holds invalid values."""
    if path is None:
        return _packaged_rules().model_copy(deep=True)
    p = Path(path)
    return _parse_rules(read_utf8(p, f"routing rules file {p}", ConfigFileError), str(p))


@lru_cache(maxsize=1)
def _packaged_rules() -> RoutingRules:
    raw = resources.files("cograg.control").joinpath(DEFAULT_RULES_FILE).read_text(encoding="utf-8")
    return _parse_rules(raw, f"cograg/control/{DEFAULT_RULES_FILE}")


def _parse_rules(raw: str, origin: str) -> RoutingRules:
    # one line each: a YAML error's and a ValidationError's own text run over several
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigFileError(f"routing rules {origin} are not valid YAML{where}") from exc
    if not isinstance(data, dict):
        raise ConfigFileError(f"routing rules {origin} must be a mapping with a `version:` key")
    if not str(data.get("version") or "").strip():
        raise ConfigFileError(f"routing rules {origin} declare no `version:`")
    data["version"] = str(data["version"]).strip()
    try:
        return RoutingRules.model_validate(data)
    except ValidationError as exc:
        raise ConfigFileError(f"routing rules {origin} are invalid: {first_problem(exc)}") from None


__all__ = [
    "DEFAULT_RULES_FILE",
    "SIGNALS",
    "AmbiguityWeights",
    "ComplexityWeights",
    "RetrievalNeedWeights",
    "RiskWeights",
    "RoutingRules",
    "RoutingThresholds",
    "Signal",
    "SignalWeights",
    "SufficiencyThresholds",
    "Unit",
    "load_rules",
]
