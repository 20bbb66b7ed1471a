"""The self-corrective loop (`SelfCorrectiveLoop`), apart from its data and model calls; design: `corrective`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from cograg.control.corrective_llm import DocumentGrader, QueryRewriter
from cograg.control.corrective_models import (
    ANSWER_RETRIED,
    GENERATED,
    GRADE_OVERRIDDEN,
    GRADED,
    QUERY_REWRITTEN,
    RETRIEVED,
    DocumentGrade,
    GraderResult,
    NodeExecution,
    RewriteRejected,
    RewriteResult,
    SCRAGState,
    StopReason,
)
from cograg.control.models import CancelToken, ControlBudget
from cograg.errors import CogragError
from cograg.retrieval.models import SearchHit, SearchResult

# the logger keeps the name it had before the loop left `corrective.py`
log = logging.getLogger("cograg.control.corrective")


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
        self._max_tokens = self.budget.max_total_tokens

    # -- public ---------------------------------------------------------------------
    def run(self, question: str, *, deadline: float | None = None, tokens_left: int | None = None) -> SCRAGState:
        """Run the loop for `question`. `deadline` (on `clock`) overrides `budget.max_wall_s` when
        earlier, `tokens_left` overrides `budget.max_total_tokens` when smaller: a fallback mode
        runs on what its turn has left, not on a fresh budget."""
        if not question or not question.strip():
            raise ValueError("the question is empty")
        b = self.budget
        self._start = self.clock()
        own = self._start + b.max_wall_s
        self._deadline = own if deadline is None else min(own, deadline)
        self._max_tokens = b.max_total_tokens if tokens_left is None else min(b.max_total_tokens, tokens_left)
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
        if used >= self._max_tokens:
            raise _Stop("token_budget", f"{used} LLM tokens used of {self._max_tokens}")

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


__all__ = ["EventFn", "EvidenceCheck", "GenerateFn", "RefusalCheck", "SearchFn", "SelfCorrectiveLoop"]
