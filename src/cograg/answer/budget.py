"""The answer's sentence budget (`answer.max_sentences`), enforced by code, not only asked for.

The prompt asks the model for at most `max_sentences` sentences; a model that writes more would
otherwise get every sentence judged (one judge call each) and delivered. The answerer keeps the
draft's first `max_sentences` sentences before verification, so the verifier judges at most that
many per draft and the answer holds no more.
"""

from __future__ import annotations

from cograg.answer.contract import ValidatedAnswer
from cograg.answer.markers import MARKER_RE, markers_in
from cograg.text import sentence_spans


def within_sentence_budget(validated: ValidatedAnswer, limit: int) -> tuple[ValidatedAnswer, int]:
    """The validated draft cut after its `limit`-th sentence (sentences as the verifier splits
    them: `answer_sentences`, markers attached), with only the citations its kept markers name, and
    how many sentences were cut. The draft itself when it is within the budget."""
    spans = sentence_spans(validated.answer, markers=MARKER_RE)
    if len(spans) <= limit:
        return validated, 0
    answer = validated.answer[:spans[limit - 1][1]]
    named = {key for key, _, _ in markers_in(answer)}
    # markers are numbered 1..n in order of appearance (validate_draft): the kept ones are a prefix
    citations = [c for c in validated.citations if c.id in named]
    return validated.model_copy(update={"answer": answer, "citations": citations}), len(spans) - limit
