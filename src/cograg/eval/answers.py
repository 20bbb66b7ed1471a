"""Answer quality (SPEC H): exact match and F1, contains-gold, answered and refusal rates, ALCE
citation recall/precision, hallucinated citation ids, tokens and latency per route.

`evaluate_answers` takes callables (ask a question, read a chunk's text, the trace of an answer)
so it runs over any engine, a real one or one with a scripted model.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from cograg.answer.contract import answer_sentences, markers_in, strip_markers
from cograg.answer.refusal import MODEL_FAILED
from cograg.errors import CogragError
from cograg.eval.records import load_objects, shown, text_problem
from cograg.eval.scoring import contains_gold, exact_match, f1
from cograg.models import ModelError
from cograg.models.judge import ClaimJudge
from cograg.text import language_of


class QAItem(BaseModel):
    id: str
    question: str
    answers: list[str] = Field(default_factory=list)
    answerable: bool = True
    lang: str = "en"
    split: str | None = None


def load_qa(path: Path | str, *, corpus_name: str | None = None) -> list[QAItem]:
    """QA records from JSONL (or a JSON list): `question`, `answers` (or one `answer`),
    `answerable` (default: whether there is a gold answer), `lang` (default: zh for a Chinese
    question), `id` (default: the question). With `corpus_name`, records naming another
    `corpus` are left out (one file of unanswerable questions can serve several corpora)."""
    from cograg.eval.splits import item_id

    items = []
    for r in load_objects(path, _qa_problem, "QA file"):
        if corpus_name and r.get("corpus") not in (None, corpus_name):
            continue
        answers = r.get("answers", r.get("answer", []))
        answers = [a["text"] if isinstance(a, dict) else str(a) for a in (answers if isinstance(answers, list) else [answers])]
        items.append(QAItem(id=item_id(r), question=r["question"], answers=answers,
                            answerable=r.get("answerable", bool(answers)),
                            lang=r.get("lang") or language_of(r["question"]),
                            split=r.get("split")))
    return items


def _qa_problem(r: dict[str, Any]) -> str | None:
    """Why a QA record cannot be asked and scored (a problem in words, see cograg.eval.records)."""
    if not r.get("question"):
        return "a QA record needs a question"
    if problem := text_problem(r, "question"):
        return problem
    key = "answers" if "answers" in r else "answer"
    answers = r.get(key, [])
    for a in answers if isinstance(answers, list) else [answers]:
        text = a.get("text") if isinstance(a, dict) else a
        if isinstance(text, bool) or not isinstance(text, str | int | float):
            return f"{key} must be texts (or {{\"text\": …}} objects) (got {shown(answers)})"
    for field in ("lang", "split"):
        if r.get(field) is not None and not isinstance(r[field], str):
            return f"{field} must be a string (got {shown(r[field])})"
    if "answerable" in r and not isinstance(r["answerable"], bool):  # "false" would read as true
        return f"answerable must be true or false (got {shown(r['answerable'])})"
    return None


def _supported(judge: ClaimJudge, claim: str, passage: str, question: str) -> bool:
    """SUPPORTED or not; a judge call that fails (invalid JSON, timeout) counts as not supported."""
    try:
        return judge.judge(claim, passage, question).verdict == "SUPPORTED"
    except ModelError:
        return False


class CitationCounts(BaseModel):
    statements: int = 0
    supported: int = 0
    citations: int = 0
    relevant_citations: int = 0


def alce_citations(judge: ClaimJudge, answer: str, cited_text: dict[str, str], question: str) -> CitationCounts:
    """ALCE citation recall and precision (Gao et al. 2023, `eval.py` compute_autoais), one answer.

    Recall: a statement counts when the concatenation of all its cited passages supports it.
    Precision, per citation: a citation counts when the statement is supported jointly and the
    citation either supports it alone or is needed (the others without it do not). A statement
    may carry several citations; a statement with none counts against recall only."""
    counts = CitationCounts()
    for sentence in answer_sentences(answer):
        ids = list(dict.fromkeys(key for key, _, _ in markers_in(sentence) if key in cited_text))
        claim = strip_markers(sentence).strip()
        if not claim:
            continue
        counts.statements += 1
        if not ids:
            continue
        joint = _supported(judge, claim, "\n".join(cited_text[i] for i in ids), question)
        counts.supported += joint
        counts.citations += len(ids)
        if not joint:
            continue
        if len(ids) == 1:
            counts.relevant_citations += 1
            continue
        for cid in ids:
            alone = _supported(judge, claim, cited_text[cid], question)
            rest = "\n".join(cited_text[j] for j in ids if j != cid)
            counts.relevant_citations += alone or not _supported(judge, claim, rest, question)
    return counts


JUDGE_FAILED = "judge failed"  # how the verifier's reason begins for a claim its judge could not judge


def turn_error(resp: Any) -> str | None:
    """Why the turn failed, or None when it ended as designed (an answer, a refusal, a clarifying
    question). A failure is no refusal: the model failing says nothing about the sources, so it
    must not score as a correct refusal of an unanswerable question. Read from the response's
    structured fields, never its wording: the answerer's refusal reason (`notes`, MODEL_FAILED),
    the fallback chain (`explain["modes_tried"]`: it ends CLARIFY after a mode failed), and the
    verifier's verdicts (a claim rejected because its judge failed)."""
    if not resp.fallback:  # an answer was delivered: whatever failed on the way, the turn did not
        return None
    failed = next((n for n in resp.notes if n.startswith(MODEL_FAILED)), None)
    if failed:
        return failed
    modes = [m for m in (resp.explain or {}).get("modes_tried", []) if not m.get("ok", True)]
    if modes and resp.route == "CLARIFY":
        return "fallback chain ended: " + "; ".join(f"{m.get('mode')}: {m.get('reason', '')}" for m in modes)[:300]
    judged = next((c.reason for c in resp.claims if not c.kept and c.reason.startswith(JUDGE_FAILED)), None)
    if judged:
        return f"verifier {judged}"
    return None


def answer_row(item: QAItem, resp: Any, *, latency_s: float, tokens: int, judge: ClaimJudge | None,
               chunk_text: Callable[[str], str | None]) -> dict[str, Any]:
    """One report row for one answered question (`resp` is an AnswerResponse). A turn that failed
    (`turn_error`) is an error row: not ok, whether or not the question was answerable."""
    answered = not resp.fallback
    error = turn_error(resp)
    prediction = strip_markers(resp.answer) if answered else ""
    row: dict[str, Any] = {"id": item.id, "question": item.question, "lang": item.lang, "answerable": item.answerable,
                           "answered": answered, "route": resp.route, "mode": resp.mode,
                           "latency_s": round(latency_s, 3), "tokens": tokens,
                           "hallucinated_ids_proposed": len(resp.removed.hallucinated_ids),
                           "hallucinated_ids_delivered": sum(chunk_text(c.chunk_id) is None for c in resp.citations)}
    if item.answerable:
        row |= {"exact_match": exact_match(item.answers, prediction, item.lang),
                "f1": round(f1(item.answers, prediction, item.lang), 4),
                "contains_gold": contains_gold(item.answers, prediction, item.question)}
        row["ok"] = row["contains_gold"]
    else:
        row["ok"] = not answered
    if error is not None:
        row |= {"ok": False, "error": error}
    if answered and item.answerable and judge is not None:
        cited = {c.id: chunk_text(c.chunk_id) or "" for c in resp.citations}
        row |= alce_citations(judge, resp.answer, cited, item.question).model_dump()
    row["answer"] = resp.answer[:500]
    return row


def error_row(item: QAItem, exc: Exception, *, latency_s: float) -> dict[str, Any]:
    """The row of a question whose turn raised: no answer, scored as wrong (the eval goes on, and
    the summary counts it among `errors`)."""
    row: dict[str, Any] = {"id": item.id, "question": item.question, "lang": item.lang, "answerable": item.answerable,
                           "answered": False, "route": "ERROR", "mode": None, "latency_s": round(latency_s, 3),
                           "tokens": 0, "hallucinated_ids_proposed": 0, "hallucinated_ids_delivered": 0}
    if item.answerable:
        row |= {"exact_match": 0.0, "f1": 0.0, "contains_gold": False}
    return row | {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300], "answer": ""}


def evaluate_answers(items: Sequence[QAItem], ask: Callable[[str], Any], trace: Callable[[str], dict[str, Any]],
                     chunk_text: Callable[[str], str | None], judge: ClaimJudge | None,
                     progress: Callable[[str, int, int], None] | None = None) -> list[dict[str, Any]]:
    rows = []
    for i, item in enumerate(items, start=1):
        started = time.perf_counter()
        try:
            resp = ask(item.question)
        except Exception as exc:  # noqa: BLE001 - one failed turn is an error row, not the end of the eval
            rows.append(error_row(item, exc, latency_s=time.perf_counter() - started))
        else:
            latency = time.perf_counter() - started
            try:
                calls = trace(resp.trace_id).get("model_calls", []) if resp.trace_id else []
            except CogragError:  # a turn that stored no trace (none made a model call)
                calls = []
            tokens = sum(c.get("prompt_tokens", 0) + c.get("completion_tokens", 0) for c in calls)
            rows.append(answer_row(item, resp, latency_s=latency, tokens=tokens, judge=judge, chunk_text=chunk_text))
        if progress:
            progress("answers", i, len(items))
    return rows


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def summarise_answers(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's summary. Error rows (a failed turn) stay in every denominator and count as
    wrong: not answered, no gold, and no correct refusal of an unanswerable question."""
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    errors = [r for r in rows if r.get("error")]
    statements = sum(r.get("statements", 0) for r in answerable)
    citations = sum(r.get("citations", 0) for r in answerable)
    summary: dict[str, Any] = {
        "questions": len(rows), "answerable": len(answerable), "unanswerable": len(unanswerable),
        "exact_match": _mean([r["exact_match"] for r in answerable]),
        "f1": _mean([r["f1"] for r in answerable]),
        "contains_gold": _mean([float(r["contains_gold"]) for r in answerable]),
        "answered_rate": _mean([float(r["answered"]) for r in answerable]),
        "refusal_unanswerable": _mean([float(not r["answered"] and not r.get("error")) for r in unanswerable]),
        "errors": len(errors),
        "error_rate": round(len(errors) / len(rows), 4) if rows else None,
        "errors.answerable": sum(r["answerable"] for r in errors),
        "errors.unanswerable": sum(not r["answerable"] for r in errors),
        "citation_recall": round(sum(r.get("supported", 0) for r in answerable) / statements, 4) if statements else None,
        "citation_precision": (round(sum(r.get("relevant_citations", 0) for r in answerable) / citations, 4)
                               if citations else None),
        "citations_per_statement": round(citations / statements, 3) if statements else None,
        "hallucinated_ids_proposed": sum(r["hallucinated_ids_proposed"] for r in rows),
        "hallucinated_ids_delivered": sum(r["hallucinated_ids_delivered"] for r in rows),
    }
    for lang in sorted({r["lang"] for r in answerable}):
        mine = [r for r in answerable if r["lang"] == lang]
        summary[f"exact_match.{lang}"] = _mean([r["exact_match"] for r in mine])
        summary[f"f1.{lang}"] = _mean([r["f1"] for r in mine])
        summary[f"contains_gold.{lang}"] = _mean([float(r["contains_gold"]) for r in mine])
    if rows:
        summary["latency_median_s"] = round(statistics.median(r["latency_s"] for r in rows), 3)
        summary["tokens_mean"] = round(statistics.mean(r["tokens"] for r in rows), 1)
    # per execution route (R1…R5, the router's choice; the final `route` field says REFUSED for every refusal)
    def route_of(r: dict[str, Any]) -> str:
        return str(r.get("mode") or r["route"])

    for route in sorted({route_of(r) for r in rows}):
        mine = [r for r in rows if route_of(r) == route]
        summary[f"route.{route}.questions"] = len(mine)
        summary[f"route.{route}.answered"] = sum(r["answered"] for r in mine)
        summary[f"route.{route}.errors"] = sum(bool(r.get("error")) for r in mine)
        summary[f"route.{route}.latency_median_s"] = round(statistics.median(r["latency_s"] for r in mine), 3)
        summary[f"route.{route}.tokens_mean"] = round(statistics.mean(r["tokens"] for r in mine), 1)
    return summary


ANSWER_GATES = {"exact_match": "higher", "f1": "higher", "contains_gold": "higher", "answered_rate": "higher",
                "refusal_unanswerable": "higher", "citation_recall": "higher", "citation_precision": "higher",
                "hallucinated_ids_delivered": "lower", "error_rate": "lower"}
