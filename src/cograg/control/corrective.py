"""Self-corrective retrieval loop (SPEC D2, seed 003): retrieve → grade → rewrite → generate.

An LLM grader judges each retrieved document against the user's question; when too few pass
(pass rate < `grade_pass_threshold`), an LLM rewriter proposes a new search query and the loop
retrieves again; otherwise, or once no further rewrite is allowed, the generator answers. The models
propose; this module decides:

- what "passes" is fixed here (`is_relevant` and confidence ≥ `control.grade_min_confidence`,
  calibrated by `benchmarks/calibrate_grader.py` on the calibration split), not by the grader's words;
- the loop always ends: at most `max_rewrite_attempts` rewrites, a rewrite that is empty or repeats a
  query already tried ends it (loop detection, seed 004 §13.4), and so do the cancel token, the wall
  budget (`max_wall_s`, or the caller's deadline) and the token budget (`max_total_tokens`);
- a grader failure on one document counts that document as not relevant and never raises;
- R2 never does worse than R1 would on the same retrieval. When the first search's evidence score
  clears the answer stage's refusal floor (`evidence_ok`), the generator gets that search's documents
  in its order — what R1 answers from — preceded by the documents that passed in a rewrite's search
  and the first search did not find (`answered_from` "retrieved" / "found_and_retrieved"). Grading
  adds evidence and decides when to rewrite; it never removes what R1 would have seen: the default
  1.5B grader rejected the gold paragraph of one hop of two-hop questions (and both of Kiss and Tell's)
  while passing look-alikes, and an answer from the passed documents alone was then wrong or a refusal.
  Only below the floor, where R1 refuses, does the generator get just the documents that passed
  ("graded"). When that answer is nevertheless a refusal (`refused(result)`) and was not made from
  the first search's documents alone, it is made once more from them (decision path
  `answer_from:retrieved(after refusal …)`, event ANSWER_RETRIED). The claim verifier decides what is
  delivered, as for any answer;
- a search whose calibrated evidence score is below the refusal floor is not graded: nothing would
  be answered from it, so the loop goes straight to a rewrite (unanswerable questions, which the
  router sends here when the preflight misses the floor, cost rewrites only, not five grader calls
  per attempt). A search without a calibrated score (keyword-only) is graded as before.

The grader is shown the question's entities (`answer.subject.question_entities`) and each
document's title and source, so it can tell a document about one step of a multi-step question
from one that only shares words with it.

Keeping the original intent. Documents are always graded against the *original* question (never
the rewritten query), so a rewrite that drifts off-topic cannot make off-topic documents pass. A
rewrite attempt searches the rewritten query only — re-searching the original would return the
hits already graded in attempt 0 — and the original query's evidence is kept by fusing at the
evidence level: `filtered_documents` is the union, by chunk id, of the documents that passed in any
attempt, so what the original query found is never lost. Grades are cached by chunk id across
attempts (they depend only on the question and the chunk), so overlapping hits cost no new call.
A caller that wants the original inside every search too can pass it as a variant (SPEC B5) in its
`search` callable: `lambda q: searcher.search(SearchRequest(query=q, variants=[question]))`.
"""

from __future__ import annotations

import logging
import re
import time
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import PurePath
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, field_validator

from cograg.answer.injection import redact
from cograg.answer.subject import question_entities
from cograg.control.models import CancelToken, ControlBudget
from cograg.errors import CogragError
from cograg.models import ModelError
from cograg.retrieval.models import SearchHit, SearchResult

log = logging.getLogger(__name__)

# A document passes when the grader calls it relevant with at least this confidence (SPEC D2); the
# default of `control.grade_min_confidence`, which the orchestrator passes in.
PASS_MIN_CONFIDENCE = 0.5
# How many failed documents, and how much of each, the rewriter is shown: enough to see why the
# search missed, little enough to keep a small model's context for the task.
FAILED_CONTEXT_DOCS = 3
FAILED_CONTEXT_CHARS = 240
MAX_REWRITE_CHARS = 300
MAX_KEYWORDS = 8

# Event names of SPEC D6 emitted by the loop.
RETRIEVED = "RETRIEVED"
GRADED = "GRADED"
QUERY_REWRITTEN = "QUERY_REWRITTEN"
GENERATED = "GENERATED"
GRADE_OVERRIDDEN = "GRADE_OVERRIDDEN"  # nothing passed grading; the answer uses the retrieved evidence
ANSWER_RETRIED = "ANSWER_RETRIED"  # the graded answer was a refusal; answered again from the first search

StopReason = Literal[
    "grade_passed",  # the pass rate reached the threshold
    "max_rewrite_attempts",  # still below the threshold after the last allowed rewrite
    "rewrite_repeated",  # the rewriter proposed a query already tried (loop detection)
    "rewrite_failed",  # the rewriter gave no usable query (model error, empty answer)
    "no_rewriter",  # below the threshold and no rewriter configured
    "search_failed",  # a retrieval after a rewrite failed; earlier evidence is used
    "wall_budget",  # the wall-time budget or the caller's deadline ran out
    "token_budget",  # the LLM token budget ran out
    "cancelled",  # the cancel token was set; nothing is generated
]


# --------------------------------------------------------------------------- data types


class GradeVerdict(BaseModel):
    """The grader LLM's answer for one document (seed 003 grader JSON)."""

    is_relevant: bool
    confidence: float = Field(ge=0.0, le=1.0)
    reasoning: str = ""

    @field_validator("confidence", mode="before")
    @classmethod
    def _percent_as_fraction(cls, v: Any) -> Any:
        # small models often write 85 for 0.85; anything else out of range stays invalid
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 1.0 < v <= 100.0:
            return v / 100.0
        return v


class DocumentGrade(BaseModel):
    """The grade of one retrieved chunk. `passed` is decided by code from the verdict."""

    chunk_id: str
    doc_id: str
    is_relevant: bool
    confidence: float = Field(ge=0.0, le=1.0)
    reasoning: str = ""
    error: str | None = None
    passed: bool = False
    attempt: int = 0
    cached: bool = Field(False, description="reused from an earlier attempt, no model call")
    prompt_tokens: int = 0
    completion_tokens: int = 0


class GraderResult(BaseModel):
    pass_rate: float
    pass_count: int
    total_count: int
    should_rewrite: bool
    reasoning: str


class RewriteProposal(BaseModel):
    """The JSON schema the rewriter LLM answers with (seed 003 rewrite JSON)."""

    rewritten_query: str
    rewrite_reason: str = ""
    keywords: list[str] = Field(default_factory=list)


class RewriteResult(BaseModel):
    """An accepted rewrite: non-empty and different from every query tried before."""

    rewritten_query: str
    rewrite_reason: str = ""
    keywords: list[str] = Field(default_factory=list)
    attempt: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class RewriteRejected(BaseModel):
    """No useful rewrite: the loop stops rewriting."""

    reason: Literal["empty", "repeat", "model_error"]
    detail: str
    proposed_query: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class NodeExecution(BaseModel):
    node: Literal["retrieve", "grade", "rewrite", "generate"]
    started_ms: float = Field(description="since the start of the run")
    duration_ms: float
    detail: dict[str, Any] = Field(default_factory=dict)


class SCRAGState(BaseModel):
    """The loop's state (seed 003 `SCRAGState`), returned whole so the trace can show every step."""

    # query
    original_query: str = Field(frozen=True, description="the user's question, never modified")
    current_query: str
    # configuration
    top_k: int = Field(description="documents graded per retrieval (budget.grade_top_k)")
    similarity_threshold: float | None = Field(None, description="hits scoring below are not graded")
    max_rewrite_attempts: int
    grade_pass_threshold: float
    # retrieval of the current attempt
    retrieved_documents: list[SearchHit] = Field(default_factory=list)
    grader_result: GraderResult | None = None
    grades: list[DocumentGrade] = Field(default_factory=list, description="every grade, all attempts")
    filtered_documents: list[SearchHit] = Field(
        default_factory=list, description="passed in any attempt, by chunk id, best confidence first")
    # rewriting
    rewrite_history: list[RewriteResult] = Field(default_factory=list)
    rejected_rewrite: RewriteRejected | None = None
    current_rewrite_count: int = 0
    # generation
    answered_from: Literal["graded", "found_and_retrieved", "retrieved", "none"] = Field(
        "none", description="graded: the documents that passed (the first search is below the refusal floor); "
        "retrieved: the first search's documents (R1's evidence), its evidence score clearing the floor; "
        "found_and_retrieved: documents that passed in a rewrite's search, then the first search's; "
        "none: no documents")
    answer_chunk_ids: list[str] = Field(default_factory=list, description="what the answer was generated from")
    skipped_grading: list[int] = Field(
        default_factory=list, description="attempts whose search was not graded: evidence below the refusal floor")
    initial_evidence_score: float | None = Field(None, description="the first search's best evidence score")
    generation_result: Any = None
    final_answer: str = ""
    # flow control
    current_node: str = "start"
    should_continue: bool = True
    decision_path: list[str] = Field(default_factory=list)
    node_executions: list[NodeExecution] = Field(default_factory=list)
    total_duration_ms: float = 0.0
    stop_reason: StopReason | None = None
    stop_detail: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def was_rewritten(self) -> bool:
        return self.current_rewrite_count > 0

    def summary(self) -> dict[str, Any]:
        """The seed 003 API response shape (query / rewriteHistory / retrieval / graderResult / workflow)."""
        return {
            "answer": self.final_answer,
            "query": {"original": self.original_query, "final": self.current_query,
                      "was_rewritten": self.was_rewritten, "rewrite_count": self.current_rewrite_count},
            "rewrite_history": [r.model_dump() for r in self.rewrite_history],
            "retrieval": {"total_documents": len(self.retrieved_documents),
                          "filtered_documents": len(self.filtered_documents),
                          "documents": [h.chunk_id for h in self.filtered_documents]},
            "grader_result": self.grader_result.model_dump() if self.grader_result else None,
            "workflow": {"node_executions": [n.model_dump() for n in self.node_executions],
                         "decision_path": list(self.decision_path),
                         "total_duration_ms": self.total_duration_ms,
                         "stop_reason": self.stop_reason, "stop_detail": self.stop_detail,
                         "answered_from": self.answered_from},
        }


# --------------------------------------------------------------------------- helpers


_FENCE_TAGS = re.compile(r"<\s*/?\s*(document|question|original_question|current_query|previous_queries|"
                         r"failed_results|result|entities)\b", re.I)


def _defuse(text: str) -> str:
    """Untrusted text that cannot close or open the prompt's fences (the tag loses its '<')."""
    return _FENCE_TAGS.sub(lambda m: "‹" + m.group(0)[1:], text)


def _count_tokens(llm: Any, text: str) -> int:
    from cograg.models.llm import simple_token_count

    counter = getattr(llm, "count_tokens", None)
    if counter is not None:
        try:
            return int(counter(text))
        except ModelError:
            pass
    return simple_token_count(text)


def _truncate_tokens(llm: Any, text: str, max_tokens: int) -> str:
    """`text` cut to at most `max_tokens` model tokens (binary search on the character length)."""
    if _count_tokens(llm, text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _count_tokens(llm, text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + " …"


_NOT_WORD = re.compile(r"[\W_]+", re.U)


def normalize_query(query: str) -> str:
    """A query reduced for repeat detection: NFKC, case-folded, punctuation and spacing ignored."""
    return _NOT_WORD.sub(" ", unicodedata.normalize("NFKC", query).casefold()).strip()


def _one_line(text: str, limit: int) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= limit else flat[:limit].rstrip() + " …"


_Reply = TypeVar("_Reply", bound=BaseModel)


class _JSONPromptCall:
    """A component that renders one prompt, sends it as one user message and reads back one
    schema-checked object (the grader and the rewriter)."""

    def __init__(self, llm: Any, prompt: str, *, timeout_s: float | None, max_tokens: int) -> None:
        from cograg.prompts import load_prompt

        self.llm = llm
        self.prompt = load_prompt(prompt)
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens

    def _ask(self, content: str, schema: type[_Reply], timeout_s: float | None) -> tuple[_Reply, Any]:
        """The model's `schema` object and response; `timeout_s` (the time left) caps the configured one."""
        from cograg.models.llm import ChatMessage

        limit = self.timeout_s if timeout_s is None else (
            timeout_s if self.timeout_s is None else min(self.timeout_s, timeout_s))
        return self.llm.chat_json([ChatMessage(role="user", content=content)], schema,
                                  max_tokens=self.max_tokens, timeout_s=limit)


def _spent_tokens(exc: ModelError) -> dict[str, int]:
    """The tokens a failed model call used (a timeout carries them), as result fields."""
    return {"prompt_tokens": int(getattr(exc, "prompt_tokens", 0) or 0),
            "completion_tokens": int(getattr(exc, "completion_tokens", 0) or 0)}


# --------------------------------------------------------------------------- grader


class DocumentGrader(_JSONPromptCall):
    """The seed 003 grader: one LLM call per document, the `grade_document` prompt.

    Passage text is stripped of instruction-like spans (SPEC C5) and cut to `max_passage_tokens`
    before it is shown. A model error on a document grades it not relevant, with the error kept.
    """

    def __init__(self, llm: Any, *, timeout_s: float | None = 30.0, max_passage_tokens: int = 512,
                 max_tokens: int = 160, min_confidence: float = PASS_MIN_CONFIDENCE) -> None:
        super().__init__(llm, "grade_document", timeout_s=timeout_s, max_tokens=max_tokens)
        self.max_passage_tokens = max_passage_tokens
        self.min_confidence = min_confidence

    def grade(self, question: str, hit: SearchHit, *, timeout_s: float | None = None,
              attempt: int = 0) -> DocumentGrade:
        """The grade of `hit` for `question`; `timeout_s` (the time left) caps the configured one."""
        passage = _truncate_tokens(self.llm, redact(hit.text).text, self.max_passage_tokens)
        source = PurePath(hit.source).name if hit.source else ""
        # the document's title and the headings above the passage (a record's own title in a
        # JSONL corpus): what the passage is about, often the entity a multi-hop step names
        title = " › ".join(dict.fromkeys(t for t in (hit.title, *hit.heading_path) if t and t.strip()))
        content = self.prompt.render(question=_defuse(question), title=_defuse(redact(title).text),
                                     source=_defuse(redact(source).text), document=_defuse(passage),
                                     entities=[_defuse(e) for e in question_entities(question)])
        try:
            verdict, resp = self._ask(content, GradeVerdict, timeout_s)
        except ModelError as exc:
            return DocumentGrade(chunk_id=hit.chunk_id, doc_id=hit.doc_id, is_relevant=False, confidence=0.0,
                                 reasoning="", error=f"{type(exc).__name__}: {exc}", passed=False, attempt=attempt,
                                 **_spent_tokens(exc))
        passed = bool(verdict.is_relevant) and verdict.confidence >= self.min_confidence
        return DocumentGrade(chunk_id=hit.chunk_id, doc_id=hit.doc_id, is_relevant=verdict.is_relevant,
                             confidence=verdict.confidence, reasoning=_one_line(verdict.reasoning, 500),
                             passed=passed, attempt=attempt, prompt_tokens=resp.prompt_tokens,
                             completion_tokens=resp.completion_tokens)


# --------------------------------------------------------------------------- rewriter


class QueryRewriter(_JSONPromptCall):
    """The seed 003 rewriter: proposes a new search query from the failed results (`rewrite_query`).

    Accepts a proposal only if it is non-empty and, normalised, differs from the original query,
    the current one and every earlier rewrite; otherwise the loop stops rewriting.
    """

    def __init__(self, llm: Any, *, timeout_s: float | None = 30.0, max_tokens: int = 192) -> None:
        super().__init__(llm, "rewrite_query", timeout_s=timeout_s, max_tokens=max_tokens)

    def rewrite(self, original_query: str, current_query: str, history: list[RewriteResult],
                failed: list[tuple[SearchHit, DocumentGrade | None]], *, timeout_s: float | None = None,
                attempt: int = 0) -> RewriteResult | RewriteRejected:
        failed_context = []
        for hit, grade in failed[:FAILED_CONTEXT_DOCS]:
            snippet = _one_line(redact(hit.text).text, FAILED_CONTEXT_CHARS)
            line = f"{hit.title}: {snippet}" if hit.title else snippet
            if grade is not None and grade.reasoning:
                line += f"\n(grader: {_one_line(grade.reasoning, 160)})"
            failed_context.append(_defuse(line))
        content = self.prompt.render(
            original_query=_defuse(original_query), current_query=_defuse(current_query),
            history=[h.model_copy(update={"rewritten_query": _defuse(h.rewritten_query),
                                          "rewrite_reason": _defuse(_one_line(h.rewrite_reason, 160))})
                     for h in history],
            failed=failed_context)
        try:
            proposal, resp = self._ask(content, RewriteProposal, timeout_s)
        except ModelError as exc:
            return RewriteRejected(reason="model_error", detail=f"{type(exc).__name__}: {exc}", **_spent_tokens(exc))
        tokens = {"prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens}
        query = _one_line(proposal.rewritten_query, MAX_REWRITE_CHARS)
        if not normalize_query(query):
            return RewriteRejected(reason="empty", detail="the rewriter proposed an empty query",
                                   proposed_query=query, **tokens)
        tried = {normalize_query(q) for q in (original_query, current_query, *(h.rewritten_query for h in history))}
        if normalize_query(query) in tried:
            return RewriteRejected(reason="repeat", detail=f"the rewriter repeated a query already tried: {query!r}",
                                   proposed_query=query, **tokens)
        keywords: list[str] = []
        for k in proposal.keywords:
            k = _one_line(k, 40)
            if k and k not in keywords:
                keywords.append(k)
        return RewriteResult(rewritten_query=query, rewrite_reason=_one_line(proposal.rewrite_reason, 300),
                             keywords=keywords[:MAX_KEYWORDS], attempt=attempt, **tokens)


# --------------------------------------------------------------------------- the loop


class _Stop(Exception):
    """Internal: a budget or the cancel token ended the loop (`reason` goes to the state)."""

    def __init__(self, reason: StopReason, detail: str) -> None:
        super().__init__(detail)
        self.reason: StopReason = reason
        self.detail = detail


SearchFn = Callable[[str], SearchResult]
EvidenceCheck = Callable[[SearchResult], bool]
GenerateFn = Callable[[str, list[SearchHit]], Any]
RefusalCheck = Callable[[Any], bool]
EventFn = Callable[[str, dict[str, Any]], None]


class SelfCorrectiveLoop:
    """retrieve → grade → (rewrite → retrieve → grade)* → generate, with guaranteed termination.

    `search(query)` retrieves; `generate(question, documents)` answers (see the module docstring for
    which documents: R1's evidence when the first search clears the refusal floor, else the ones
    that passed, possibly none, and the caller refuses) and may return anything — a string, or an
    object with an `answer` string, becomes `final_answer`. Without `generate` the loop stops after
    selecting documents. `rewriter=None` disables rewriting. `on_event(name, payload)` receives
    RETRIEVED, GRADED, QUERY_REWRITTEN, GRADE_OVERRIDDEN, ANSWER_RETRIED and GENERATED; a failing
    listener is logged, never fatal. `clock` is injectable for tests (monotonic seconds). An
    instance runs one question at a time (it holds the run's clock start and deadline): build one
    per turn.

    `evidence_ok(result)` says whether a search result's evidence score clears the answer stage's
    refusal floor (without it, the generator gets the documents that passed, as in seed 003); a
    search with a calibrated score below the floor is not graded. `refused(result)` says whether
    what `generate` returned is a refusal (then R1's evidence gets one more try, see above).
    """

    def __init__(self, search: SearchFn, grader: DocumentGrader, rewriter: QueryRewriter | None,
                 budget: ControlBudget | None = None, generate: GenerateFn | None = None,
                 on_event: EventFn | None = None, cancel: CancelToken | None = None, *,
                 similarity_threshold: float | None = None, evidence_ok: EvidenceCheck | None = None,
                 refused: RefusalCheck | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.search = search
        self.grader = grader
        self.rewriter = rewriter
        self.budget = budget or ControlBudget()
        self.generate = generate
        self.on_event = on_event
        self.cancel = cancel
        self.similarity_threshold = similarity_threshold
        self.evidence_ok = evidence_ok
        self.refused = refused
        self.clock = clock
        self._first: SearchResult | None = None
        self._below_floor = False  # the current attempt's search has a calibrated score under the floor
        self._start = 0.0
        self._deadline = 0.0

    # -- public ---------------------------------------------------------------------
    def run(self, question: str, *, deadline: float | None = None) -> SCRAGState:
        """Run the loop for `question`. `deadline` (on `clock`) overrides `budget.max_wall_s` when earlier."""
        if not question or not question.strip():
            raise ValueError("the question is empty")
        b = self.budget
        self._start = self.clock()
        own = self._start + b.max_wall_s
        self._deadline = own if deadline is None else min(own, deadline)
        state = SCRAGState(original_query=question, current_query=question, top_k=b.grade_top_k,
                           similarity_threshold=self.similarity_threshold,
                           max_rewrite_attempts=b.max_rewrite_attempts,
                           grade_pass_threshold=b.grade_pass_threshold)
        self._first = None
        graded: dict[str, DocumentGrade] = {}  # chunk id -> latest grade without error (cache)
        passed: dict[str, tuple[SearchHit, DocumentGrade, int]] = {}  # chunk id -> best passing, first seen
        try:
            attempt = 0
            while True:
                self._check(state)
                try:
                    self._retrieve(state, attempt)
                except CogragError as exc:
                    if attempt == 0:
                        raise  # nothing retrieved at all: the caller's fallback decides
                    raise _Stop("search_failed", f"retrieval for {state.current_query!r} failed: {exc}") from exc
                self._check(state)
                result = self._grade(state, attempt, graded, passed)
                ok = not result.should_rewrite
                sign = ">=" if ok else "<"
                state.decision_path.append(f"grade:{result.pass_rate:.2f}{sign}{b.grade_pass_threshold:.2f}")
                if ok:
                    self._finish(state, "grade_passed", result.reasoning)
                    break
                if state.current_rewrite_count >= b.max_rewrite_attempts:
                    self._finish(state, "max_rewrite_attempts",
                                 f"pass rate still below the threshold after {state.current_rewrite_count} "
                                 f"rewrite(s); {len(passed)} document(s) passed in all")
                    break
                if self.rewriter is None:
                    self._finish(state, "no_rewriter", "pass rate below the threshold and rewriting is disabled")
                    break
                self._check(state)
                rewrite = self._rewrite(state, attempt + 1, graded)
                if isinstance(rewrite, RewriteRejected):
                    state.rejected_rewrite = rewrite
                    reason: StopReason = "rewrite_repeated" if rewrite.reason == "repeat" else "rewrite_failed"
                    self._finish(state, reason, rewrite.detail)
                    break
                attempt += 1
        except _Stop as stop:
            state.decision_path.append(f"stop:{stop.reason}")
            self._finish(state, stop.reason, stop.detail)
        finally:
            state.filtered_documents = self._ranked(passed)
            state.answered_from = "graded" if state.filtered_documents else "none"

        if state.stop_reason != "cancelled":
            state.answer_chunk_ids = [h.chunk_id for h in self._generate(state, self._answer_documents(state))]
            self._retry_as_r1(state)
        state.should_continue = False
        state.current_node = "end"
        state.total_duration_ms = self._ms(self.clock() - self._start)
        return state

    # -- nodes ----------------------------------------------------------------------
    def _retrieve(self, state: SCRAGState, attempt: int) -> None:
        with self._node(state, "retrieve") as detail:
            state.decision_path.append("retrieve")
            result = self.search(state.current_query)
            hits = list(result.hits)
            if self.similarity_threshold is not None:
                hits = [h for h in hits if h.score >= self.similarity_threshold]
            state.retrieved_documents = hits
            if attempt == 0:
                self._first = result.model_copy(update={"hits": hits})
                state.initial_evidence_score = result.evidence_score
            # only a calibrated score can say "below the floor"; without one the grader decides
            self._below_floor = (self.evidence_ok is not None and result.evidence_score is not None
                                 and not self.evidence_ok(result))
            detail.update(query=state.current_query, attempt=attempt, hits=len(hits),
                          evidence_score=result.evidence_score)
        self._emit(RETRIEVED, {"attempt": attempt, "query": state.current_query, "hits": len(hits),
                               "chunk_ids": [h.chunk_id for h in hits[:state.top_k]]})

    def _grade(self, state: SCRAGState, attempt: int, graded: dict[str, DocumentGrade],
               passed: dict[str, tuple[SearchHit, DocumentGrade, int]]) -> GraderResult:
        with self._node(state, "grade") as detail:
            grades: list[DocumentGrade] = []
            calls = 0
            # below the refusal floor nothing would be answered from this search: no grader calls
            to_grade = [] if self._below_floor else state.retrieved_documents[:state.top_k]
            if self._below_floor:
                state.skipped_grading.append(attempt)
                state.decision_path.append("grade:skipped(evidence below the refusal floor)")
            try:
                for hit in to_grade:
                    cached = graded.get(hit.chunk_id)
                    if cached is not None:
                        grade = cached.model_copy(update={"attempt": attempt, "cached": True,
                                                          "prompt_tokens": 0, "completion_tokens": 0})
                    else:
                        self._check(state)  # between model calls: a long grading pass stays cancellable
                        grade = self.grader.grade(state.original_query, hit, timeout_s=self._left(), attempt=attempt)
                        calls += 1
                        state.prompt_tokens += grade.prompt_tokens
                        state.completion_tokens += grade.completion_tokens
                        if grade.error is None:  # an error may be transient: grade again if seen again
                            graded[hit.chunk_id] = grade
                    grades.append(grade)
                    state.grades.append(grade)
                    if grade.passed:
                        best = passed.get(hit.chunk_id)
                        if best is None or grade.confidence > best[1].confidence:
                            order = best[2] if best else len(passed)
                            passed[hit.chunk_id] = (hit, grade, order)
            finally:
                count = sum(g.passed for g in grades)
                total = len(grades)
                rate = count / total if total else 0.0
                should_rewrite = rate < state.grade_pass_threshold
                errors = sum(g.error is not None for g in grades)
                reasoning = (f"{count}/{total} documents passed ({rate:.0%} "
                             f"{'<' if should_rewrite else '>='} {state.grade_pass_threshold:.0%})"
                             + (f"; {errors} could not be graded" if errors else "")
                             + ("; not graded: the evidence is below the refusal floor" if self._below_floor
                                else "" if total else "; nothing was retrieved"))
                state.grader_result = GraderResult(pass_rate=round(rate, 4), pass_count=count, total_count=total,
                                                   should_rewrite=should_rewrite, reasoning=reasoning)
                detail.update(attempt=attempt, pass_rate=round(rate, 4), passed=count, graded=total,
                              model_calls=calls, errors=errors, skipped=self._below_floor)
        self._emit(GRADED, {"attempt": attempt, "pass_rate": state.grader_result.pass_rate, "pass_count": count,
                            "total_count": total, "threshold": state.grade_pass_threshold,
                            "should_rewrite": should_rewrite})
        return state.grader_result

    def _rewrite(self, state: SCRAGState, attempt: int,
                 graded: dict[str, DocumentGrade]) -> RewriteResult | RewriteRejected:
        assert self.rewriter is not None
        with self._node(state, "rewrite") as detail:
            failed = [(h, graded.get(h.chunk_id)) for h in state.retrieved_documents[:state.top_k]
                      if not (graded.get(h.chunk_id) and graded[h.chunk_id].passed)]
            out = self.rewriter.rewrite(state.original_query, state.current_query, state.rewrite_history, failed,
                                        timeout_s=self._left(), attempt=attempt)
            state.prompt_tokens += out.prompt_tokens
            state.completion_tokens += out.completion_tokens
            if isinstance(out, RewriteResult):
                state.rewrite_history.append(out)
                state.current_rewrite_count += 1
                state.current_query = out.rewritten_query
                state.decision_path.append(f"rewrite#{state.current_rewrite_count}")
                detail.update(attempt=attempt, query=out.rewritten_query)
            else:
                state.decision_path.append(f"rewrite#{state.current_rewrite_count + 1}:rejected({out.reason})")
                detail.update(attempt=attempt, rejected=out.reason, detail=out.detail)
        if isinstance(out, RewriteResult):
            self._emit(QUERY_REWRITTEN, {"attempt": attempt, "query": out.rewritten_query,
                                         "reason": out.rewrite_reason, "keywords": out.keywords})
        return out

    def _first_clearing_floor(self) -> SearchResult | None:
        """The first search's result when it has hits and its evidence clears the refusal floor."""
        first = self._first
        if self.evidence_ok is None or first is None or not first.hits or not self.evidence_ok(first):
            return None
        return first

    def _answer_documents(self, state: SCRAGState) -> list[SearchHit] | None:
        """What `generate` answers from when the first search's evidence clears the refusal floor:
        the documents that passed in a rewrite's search and the first search did not find (new
        evidence, most confident first), then the first search's documents in its order — what R1
        answers from. Grading adds evidence; it never takes away what R1 would have seen (a small
        grader rejects the gold paragraph of one hop and passes look-alikes). None (the documents
        that passed, `filtered_documents`) when the first search is below the floor or there is no
        evidence check. Recorded in the state; GRADE_OVERRIDDEN when nothing passed at all."""
        first = self._first_clearing_floor()
        if first is None:
            return None
        first_ids = {h.chunk_id for h in first.hits}
        found = [h for h in state.filtered_documents if h.chunk_id not in first_ids]
        state.answered_from = "found_and_retrieved" if found else "retrieved"
        score = first.evidence_score
        shown = "none" if score is None else f"{score:.3f}"
        state.decision_path.append(
            f"answer_from:{'found+' if found else ''}retrieved(evidence {shown} clears the refusal floor"
            + (f"; {len(found)} document(s) found by rewrites first" if found else "") + ")")
        if not state.filtered_documents:
            self._emit(GRADE_OVERRIDDEN, {"documents": len(first.hits), "evidence_score": score,
                                          "evidence_source": first.evidence_source,
                                          "reason": "no document passed grading; the first search's evidence "
                                                    "score clears the refusal floor"})
        return found + list(first.hits)

    def _retry_as_r1(self, state: SCRAGState) -> None:
        """When the answer from the graded documents is a refusal but the first search's evidence
        clears the refusal floor, answer once more from that search's documents, as R1 would: the
        loop must not turn a retrieval R1 answers from into a refusal. Recorded in the state and as
        ANSWER_RETRIED; the verifier decides what is delivered, as for any answer."""
        first = self._first_clearing_floor()
        if (self.refused is None or state.generation_result is None or first is None
                or (self.cancel is not None and self.cancel.cancelled) or self.clock() >= self._deadline):
            return
        if (state.answer_chunk_ids == [h.chunk_id for h in first.hits]
                or not self.refused(state.generation_result)):
            return  # the same documents in the same order would give the same refusal
        state.answered_from = "retrieved"
        score = first.evidence_score
        shown = "none" if score is None else f"{score:.3f}"
        state.decision_path.append(f"answer_from:retrieved(after refusal; evidence {shown} clears the refusal floor)")
        self._emit(ANSWER_RETRIED, {"documents": len(first.hits), "evidence_score": score,
                                    "evidence_source": first.evidence_source,
                                    "reason": "the answer from the graded documents was a refusal; the first "
                                              "search's evidence score clears the refusal floor"})
        state.answer_chunk_ids = [h.chunk_id for h in self._generate(state, list(first.hits))]

    def _generate(self, state: SCRAGState, documents: list[SearchHit] | None = None) -> list[SearchHit]:
        """Generate from `documents` (default: those that passed); returns the documents used."""
        docs = list(state.filtered_documents) if documents is None else documents
        if self.generate is None:
            return docs
        with self._node(state, "generate") as detail:
            state.decision_path.append("generate")
            detail.update(documents=len(docs), answered_from=state.answered_from)
            # the user's question, not the rewritten search query: the answer is to what was asked
            result = self.generate(state.original_query, docs)
            state.generation_result = result
            answer = result if isinstance(result, str) else getattr(result, "answer", None)
            state.final_answer = answer if isinstance(answer, str) else ""
        self._emit(GENERATED, {"documents": len(docs), "stop_reason": state.stop_reason,
                               "rewrites": state.current_rewrite_count, "answered_from": state.answered_from})
        return docs

    # -- mechanics ------------------------------------------------------------------
    @staticmethod
    def _ranked(passed: dict[str, tuple[SearchHit, DocumentGrade, int]]) -> list[SearchHit]:
        entries = sorted(passed.values(), key=lambda e: (-e[1].confidence, -e[0].score, e[2]))
        return [hit for hit, _, _ in entries]

    @staticmethod
    def _finish(state: SCRAGState, reason: StopReason, detail: str) -> None:
        if state.stop_reason is None:
            state.stop_reason = reason
            state.stop_detail = detail

    def _check(self, state: SCRAGState) -> None:
        """Raise _Stop when the cancel token is set or a budget is spent."""
        if self.cancel is not None and self.cancel.cancelled:
            raise _Stop("cancelled", self.cancel.reason or "cancelled")
        if self.clock() >= self._deadline:
            raise _Stop("wall_budget", f"wall-time budget of {self._ms(self._deadline - self._start):.0f} ms spent")
        used = state.prompt_tokens + state.completion_tokens
        if used >= self.budget.max_total_tokens:
            raise _Stop("token_budget", f"{used} LLM tokens used of {self.budget.max_total_tokens}")

    def _left(self) -> float:
        # model calls get at most the time left; a tiny floor keeps the timeout a valid positive number
        return max(self._deadline - self.clock(), 0.001)

    @staticmethod
    def _ms(seconds: float) -> float:
        return round(seconds * 1000.0, 3)

    @contextmanager
    def _node(self, state: SCRAGState, name: Literal["retrieve", "grade", "rewrite", "generate"]
              ) -> Iterator[dict[str, Any]]:
        state.current_node = name
        detail: dict[str, Any] = {}
        t0 = self.clock()
        try:
            yield detail
        finally:
            t1 = self.clock()
            state.node_executions.append(NodeExecution(node=name, started_ms=self._ms(t0 - self._start),
                                                       duration_ms=self._ms(t1 - t0), detail=detail))

    def _emit(self, name: str, payload: dict[str, Any]) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(name, payload)
        except Exception:  # a listener (e.g. a disconnected stream) must not break the answer
            log.exception("event listener failed on %s", name)


__all__ = [
    "ANSWER_RETRIED",
    "GENERATED",
    "GRADED",
    "GRADE_OVERRIDDEN",
    "PASS_MIN_CONFIDENCE",
    "QUERY_REWRITTEN",
    "RETRIEVED",
    "DocumentGrade",
    "DocumentGrader",
    "GradeVerdict",
    "GraderResult",
    "NodeExecution",
    "QueryRewriter",
    "RewriteProposal",
    "RewriteRejected",
    "RewriteResult",
    "SCRAGState",
    "SelfCorrectiveLoop",
    "StopReason",
    "normalize_query",
]
