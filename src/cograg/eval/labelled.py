"""Label evals (SPEC H): the router's routes and the claim judge's verdicts against human labels,
and the citation contract's validator against hand-written drafts. No model is needed unless the
router or judge being measured uses one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cograg.errors import CogragError
from cograg.eval.scoring import classification_report
from cograg.eval.splits import item_id

Progress = Callable[[str, int, int], None] | None


def load_records(path: Path | str) -> list[dict[str, Any]]:
    """JSON lines, or one JSON list."""
    p = Path(path)
    if not p.is_file():
        raise CogragError(f"no such file {p}")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix == ".json":
            data = json.loads(text)
            return data if isinstance(data, list) else [data]
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise CogragError(f"{p} is not JSON lines: {exc}") from None


def _labelled_rows(records: list[dict[str, Any]], predict: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]],
                   gold_of: Callable[[dict[str, Any]], str], what: str,
                   progress: Progress) -> list[dict[str, Any]]:
    rows = []
    for i, r in enumerate(records, start=1):
        gold = gold_of(r)
        predicted, extra = predict(r)
        rows.append({"id": item_id(r), "gold": gold, "predicted": predicted, "ok": predicted == gold, **extra})
        if progress:
            progress(what, i, len(records))
    return rows


def label_summary(rows: list[dict[str, Any]], labels: tuple[str, ...], *,
                  by: str | None = None) -> dict[str, Any]:
    rep = classification_report([r["gold"] for r in rows], [r["predicted"] for r in rows], labels)
    summary: dict[str, Any] = {"items": len(rows), "macro_f1": rep["macro_f1"], "accuracy": rep["accuracy"]}
    for label, scores in rep["per_label"].items():
        summary[f"f1.{label}"] = scores["f1"]
        summary[f"support.{label}"] = scores["support"]
    if by:
        for key in sorted({str(r.get(by)) for r in rows if r.get(by) is not None}):
            mine = [r for r in rows if str(r.get(by)) == key]
            summary[f"macro_f1.{key}"] = classification_report(
                [r["gold"] for r in mine], [r["predicted"] for r in mine], labels)["macro_f1"]
    return summary


# ---------------------------------------------------------------------------------------- routing

def evaluate_routing(records: list[dict[str, Any]], router: Any, progress: Progress = None) -> list[dict[str, Any]]:
    """Each record `{question, route, lang?}` routed by `router` (a control.router.Router)."""
    for r in records:
        if "question" not in r or "route" not in r:
            raise CogragError(f"a routing record needs question and route: {str(r)[:120]}")

    def predict(r: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        d = router.route(r["question"])
        return d.route, {"question": r["question"], "lang": r.get("lang"), "llm_error": d.llm_error}

    return _labelled_rows(records, predict, lambda r: r["route"], "routing", progress)


# --------------------------------------------------------------------------------------- verifier

VERDICTS = ("SUPPORTED", "CONTRADICTED", "UNRELATED")
_LABELS = {"SUPPORT": "SUPPORTED", "SUPPORTS": "SUPPORTED", "SUPPORTED": "SUPPORTED", "ENTAILMENT": "SUPPORTED",
           "CONTRADICT": "CONTRADICTED", "CONTRADICTS": "CONTRADICTED", "CONTRADICTED": "CONTRADICTED",
           "CONTRADICTION": "CONTRADICTED", "REFUTES": "CONTRADICTED",
           "NOT_ENOUGH_INFO": "UNRELATED", "NEI": "UNRELATED", "NEUTRAL": "UNRELATED", "UNRELATED": "UNRELATED"}


def claim_pair(r: dict[str, Any]) -> tuple[str, str, str]:
    """(claim, evidence, verdict) of a record: `claim`; `evidence`, `passage` or the SciFact
    `abstract` (a list of sentences, judged whole, as the verifier judges a cited block);
    `label` in SciFact, NLI or the judge's own vocabulary."""
    evidence = r.get("passage") or r.get("abstract") or r.get("evidence") or ""
    if isinstance(evidence, list):
        evidence = " ".join(evidence)
    label = _LABELS.get(str(r.get("label", "")).upper())
    if not r.get("claim") or not evidence or label is None:
        raise CogragError(f"a verifier record needs claim, evidence and a known label: {str(r)[:120]}")
    return r["claim"], evidence, label


def evaluate_verifier(records: list[dict[str, Any]], judge: Any, progress: Progress = None) -> list[dict[str, Any]]:
    """Each (claim, evidence, label) judged by `judge` (a models.judge.ClaimJudge); a failed
    judge call counts as a wrong verdict, recorded in the row."""
    from cograg.models import ModelError

    pairs = {id(r): claim_pair(r) for r in records}

    def predict(r: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        claim, evidence, _ = pairs[id(r)]
        try:
            return judge.judge(claim, evidence).verdict, {"claim": claim[:200]}
        except ModelError as exc:
            return "ERROR", {"claim": claim[:200], "error": str(exc)[:200]}

    return _labelled_rows(records, predict, lambda r: pairs[id(r)][2], "verifier", progress)


# --------------------------------------------------------------------------------------- contract

def evaluate_contract(records: list[dict[str, Any]], progress: Progress = None) -> list[dict[str, Any]]:
    """Citation-contract validation (SPEC C2) on hand-written drafts: each case gives the blocks
    retrieved (`blocks`: texts, numbered from 1), the model's `draft` and what validation must
    find (`expect`: `hallucinated_ids`, `citations`, `fallback`, strings `answer_lacks`). Every
    case is also held to the invariants: each delivered quote is a verbatim span of its chunk,
    each marker has its citation and each citation its marker, ids run 1..n."""
    from cograg.answer.contract import DraftAnswer, markers_in, validate_draft
    from cograg.retrieval.packing import ContextBlock

    rows = []
    for i, case in enumerate(records, start=1):
        blocks = [ContextBlock(citation_id=n, doc_id=f"d{n}", chunk_ids=[f"c{n}"], chunk_texts=[t], text=t,
                               token_count=len(t.split()), best_rank=n, title=f"doc {n}", source=f"doc{n}.md")
                  for n, t in enumerate(case["blocks"], start=1)]
        text_of = {f"c{n}": t for n, t in enumerate(case["blocks"], start=1)}
        out = validate_draft(DraftAnswer.model_validate(case["draft"]), blocks)
        expect = case.get("expect", {})
        failures = []
        marker_ids = {k for k, _, _ in markers_in(out.answer)}
        cited_ids = {c.id for c in out.citations}
        if any(c.quote and c.quote not in text_of[c.chunk_id] for c in out.citations):
            failures.append("quote not verbatim")
        if marker_ids != cited_ids:
            failures.append(f"markers {sorted(marker_ids)} vs citations {sorted(cited_ids)}")
        if sorted(cited_ids, key=int) != [str(n) for n in range(1, len(cited_ids) + 1)]:
            failures.append(f"ids not 1..n: {sorted(cited_ids)}")
        if "hallucinated_ids" in expect and sorted(out.issues.hallucinated_ids) != sorted(expect["hallucinated_ids"]):
            failures.append(f"hallucinated {out.issues.hallucinated_ids} != {expect['hallucinated_ids']}")
        if "citations" in expect and len(out.citations) != expect["citations"]:
            failures.append(f"{len(out.citations)} citations != {expect['citations']}")
        if "fallback" in expect and out.fallback != expect["fallback"]:
            failures.append(f"fallback {out.fallback}")
        failures += [f"answer keeps {s!r}" for s in expect.get("answer_lacks", []) if s in out.answer]
        rows.append({"id": case.get("id", item_id(case)), "ok": not failures, "failures": "; ".join(failures),
                     "answer": out.answer[:200]})
        if progress:
            progress("contract", i, len(records))
    return rows
