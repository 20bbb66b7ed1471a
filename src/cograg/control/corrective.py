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

The parts live in their own modules, each short enough to read in one sitting: `corrective_models`
(event names, stop reasons, grades, rewrites, the `SCRAGState` trace), `corrective_llm` (the grader
and the rewriter) and `corrective_loop` (`SelfCorrectiveLoop`). Every name stays importable from here.
"""

from __future__ import annotations

from cograg.control.corrective_llm import (
    FAILED_CONTEXT_CHARS,  # noqa: F401
    FAILED_CONTEXT_DOCS,  # noqa: F401
    MAX_KEYWORDS,  # noqa: F401
    MAX_REWRITE_CHARS,  # noqa: F401
    PASS_MIN_CONFIDENCE,
    DocumentGrader,
    QueryRewriter,
    normalize_query,
)
from cograg.control.corrective_loop import (
    EventFn,  # noqa: F401
    EvidenceCheck,  # noqa: F401
    GenerateFn,  # noqa: F401
    RefusalCheck,  # noqa: F401
    SearchFn,  # noqa: F401
    SelfCorrectiveLoop,
)
from cograg.control.corrective_models import (
    ANSWER_RETRIED,
    GENERATED,
    GRADE_OVERRIDDEN,
    GRADED,
    QUERY_REWRITTEN,
    RETRIEVED,
    DocumentGrade,
    GradeVerdict,
    GraderResult,
    NodeExecution,
    RewriteProposal,
    RewriteRejected,
    RewriteResult,
    SCRAGState,
    StopReason,
)


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
