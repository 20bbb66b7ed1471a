"""Claim judges for the verifier (SPEC C3, G3): is a claim SUPPORTED, CONTRADICTED or UNRELATED
given a passage? An LLM judge with constrained JSON, an NLI cross-encoder from a local directory,
and a lexical judge that needs no model (used when none is configured)."""

from __future__ import annotations

import re
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, field_validator

from cograg.models import ModelError

Verdict = Literal["SUPPORTED", "CONTRADICTED", "UNRELATED"]


# The reason comes after the verdict, so the verdict is decided before the model writes a word of it
# (greedy decoding): bounding the reason in the schema changes no verdict and stops a
# grammar-constrained model after one short sentence (the fast model wrote ~75 tokens of reason,
# ~3 s per claim). A longer reason from a backend without a grammar is cut, not rejected.
MAX_REASON_CHARS = 80


def cut_reason(value: object) -> object:
    """A reply's reason cut to MAX_REASON_CHARS (a `mode="before"` validator's body)."""
    return value[:MAX_REASON_CHARS] if isinstance(value, str) else value


class JudgeVerdict(BaseModel):
    verdict: Verdict
    reason: str = Field("", json_schema_extra={"maxLength": MAX_REASON_CHARS})

    @field_validator("reason", mode="before")
    @classmethod
    def _short_reason(cls, value: object) -> object:
        return cut_reason(value)


class JudgeDecision(BaseModel):
    """The grammar of a judge reply without its reason (`LLMJudge(reasons=False)`): the model
    stops after the verdict. The prompt still shows `JudgeVerdict`, so the verdict is the one the
    model would write before its reason: ~20 generated tokens fewer, 1.5–2 s per claim on 2 cores
    (benchmarks/judge_reasons.py)."""

    verdict: Verdict


class ClaimVerdict(BaseModel):
    # unbounded: in a batch, claim 2's verdict follows claim 1's reason, so a bound could change it
    claim: int
    verdict: Verdict
    reason: str = ""


class ClaimVerdicts(BaseModel):
    """The batch judge's reply: one verdict per numbered claim."""

    verdicts: list[ClaimVerdict]


class ClaimJudge(Protocol):
    name: str

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        """`question`, when given, is what the claim answers (short answers need it)."""
        ...


def _turns(turns: tuple[str | None, str]) -> list[Any]:
    """Chat messages from a prompt's (system, user) texts."""
    from cograg.models.llm import ChatMessage

    system, user = turns
    head = [ChatMessage(role="system", content=system)] if system else []
    return [*head, ChatMessage(role="user", content=user)]


# The all-claims call's instructions differ from the one-claim call's from their first token, so on a
# backend that keeps one cached prompt per role (llama.cpp) the two calls get a role each: sharing
# one, every switch between a one-claim and a several-claim answer evaluated the other's ~280
# instruction tokens again.
BATCH_ROLE = "judge_claims"


def _for_role(llm: Any, role: str) -> Any:
    for_role = getattr(llm, "for_role", None)
    return for_role(role) if callable(for_role) else llm


class LLMJudge:
    """The `judge_claim` prompt through any LLM's schema-constrained JSON."""

    # room for the reason: a reason cut off mid-string makes the whole verdict invalid JSON
    def __init__(self, llm: Any, *, max_tokens: int = 192, timeout_s: float | None = 120.0,
                 reasons: bool = False) -> None:
        from cograg.prompts import load_prompt

        self.llm = llm
        self.reasons = reasons
        self.prompt = load_prompt("judge_claim")
        self.batch_prompt = load_prompt("judge_claims")
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s

    @property
    def name(self) -> str:  # read on use: a deferred model is not loaded to name it
        return f"llm:{getattr(self.llm, 'name', 'llm')}"

    def prompt_prefixes(self) -> dict[str, tuple[str, type[BaseModel]]]:
        """The one-claim and the all-claims call's instructions (as the verifier sends them, with
        a question) and reply schemas: the same for every answer, so they are the prompt prefixes
        those calls share."""
        one, _ = self.prompt.render_turns(claim="", passage="", question="?")
        many, _ = self.batch_prompt.render_turns(items=[], question="?")
        return {"judge_claim": (one or "", JudgeVerdict), "judge_claims": (many or "", ClaimVerdicts)}

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        messages = _turns(self.prompt.render_turns(claim=claim, passage=passage, question=question))
        # with reasons, an LLM that predates `enforced_schema` still works
        stop_after_verdict = {} if self.reasons else {"enforced_schema": JudgeDecision}
        verdict, _ = self.llm.chat_json(messages, JudgeVerdict, max_tokens=self.max_tokens, timeout_s=self.timeout_s,
                                        **stop_after_verdict)
        return verdict  # type: ignore[no-any-return]

    def judge_many(self, items: list[tuple[str, str]], question: str | None = None) -> list[JudgeVerdict | None]:
        """All (claim, passage) pairs of one answer in one constrained call. A claim the reply
        skips or numbers out of range gets None (the verifier fails it closed); of a claim judged
        twice, the first verdict counts."""
        messages = _turns(self.batch_prompt.render_turns(items=[{"claim": c, "passage": p} for c, p in items],
                                                         question=question))
        budget = self.max_tokens + 48 * (len(items) - 1)
        reply, _ = _for_role(self.llm, BATCH_ROLE).chat_json(messages, ClaimVerdicts,
                                                             max_tokens=budget, timeout_s=self.timeout_s)
        out: list[JudgeVerdict | None] = [None] * len(items)
        for v in reply.verdicts:  # type: ignore[union-attr]
            if 1 <= v.claim <= len(items) and out[v.claim - 1] is None:
                out[v.claim - 1] = JudgeVerdict(verdict=v.verdict, reason=v.reason)
        return out


class NLIJudge:
    """A sentence-transformers CrossEncoder NLI model in a local directory (premise=passage,
    hypothesis=claim). Labels are read from the model config (entailment/contradiction/neutral)."""

    def __init__(self, path: str) -> None:
        from cograg.models._local import import_sentence_transformers

        st = import_sentence_transformers()
        try:
            self.model = st.CrossEncoder(path, device="cpu")
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load NLI model from {path}: {exc}") from exc
        id2label = getattr(self.model.model.config, "id2label", {}) or {}
        self.labels: dict[int, Verdict] = {}
        for i, label in id2label.items():
            low = str(label).lower()
            self.labels[int(i)] = ("SUPPORTED" if low.startswith("entail") else
                                   "CONTRADICTED" if low.startswith("contra") else "UNRELATED")
        if set(self.labels.values()) != {"SUPPORTED", "CONTRADICTED", "UNRELATED"}:
            raise ModelError(f"NLI model at {path} must label entailment, contradiction and neutral "
                             f"(has {id2label})")
        self.name = f"nli:{path}"

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        import numpy as np

        # a fragment answer ("1978.") only means something together with its question
        hypothesis = f"{question} {claim}" if question and len(claim) < 40 else claim
        logits = np.asarray(self.model.predict([(passage, hypothesis)], apply_softmax=True))[0]
        best = int(np.argmax(logits))
        return JudgeVerdict(verdict=self.labels[best], reason=f"nli p={float(logits[best]):.2f}")


_TERM = re.compile(r"[\u4e00-\u9fff]|[^\W_]+")


class LexicalJudge:
    """No model: SUPPORTED when nearly all content terms of the claim occur in the passage.
    Conservative by design — it never says CONTRADICTED and rarely SUPPORTED for paraphrases."""

    name = "lexical"

    def __init__(self, min_coverage: float = 0.8) -> None:
        self.min_coverage = min_coverage

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        from cograg.index.analyzer import analyze

        terms = set(analyze(claim))
        if not terms:
            return JudgeVerdict(verdict="UNRELATED", reason="claim has no content terms")
        have = set(analyze(passage))
        cov = len(terms & have) / len(terms)
        if cov >= self.min_coverage:
            return JudgeVerdict(verdict="SUPPORTED", reason=f"{cov:.0%} of claim terms in passage")
        return JudgeVerdict(verdict="UNRELATED", reason=f"only {cov:.0%} of claim terms in passage")


class _Relevance(BaseModel):
    relevance: int


class LLMRelevanceReranker:
    """Pointwise LLM judge as a reranker (SPEC B4): each passage rated 0–10 for the question with
    constrained JSON; scores are returned on [0, 1]. A failed rating scores 0 (fails closed)."""

    def __init__(self, llm: Any, *, timeout_s: float | None = 30.0) -> None:
        from cograg.prompts import load_prompt

        self.llm = llm
        self.prompt = load_prompt("relevance_judge")
        self.name = f"llm:{getattr(llm, 'name', 'llm')}"
        self.timeout_s = timeout_s

    def score(self, query: str, passages: list[str]) -> list[float]:
        from cograg.models.llm import ChatMessage

        out: list[float] = []
        for p in passages:
            msg = ChatMessage(role="user", content=self.prompt.render(question=query, passage=p))
            try:
                rated, _ = self.llm.chat_json([msg], _Relevance, max_tokens=16, timeout_s=self.timeout_s)
                out.append(max(0, min(10, rated.relevance)) / 10.0)
            except ModelError:
                out.append(0.0)
        return out
