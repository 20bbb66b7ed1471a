"""Label evals (SPEC H): the router's routes and the claim judge's verdicts against human labels,
and the citation contract's validator against hand-written drafts. No model is needed unless the
router or judge being measured uses one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cograg.errors import CogragError
from cograg.eval.records import Check, field_problem, load_objects, shown, text_problem
from cograg.eval.scoring import classification_report
from cograg.eval.splits import item_id

Progress = Callable[[str, int, int], None] | None


def load_records(path: Path | str, check: Check | None = None) -> list[dict[str, Any]]:
    """JSON lines, or one JSON list, of objects each held to `check` (see cograg.eval.records)."""
    return load_objects(path, check)


def _checked(records: list[dict[str, Any]], check: Check) -> None:
    """Records handed over directly (not read by `load_records`) are held to the same check."""
    for n, r in enumerate(records, start=1):
        problem = "not a JSON object" if not isinstance(r, dict) else check(r)
        if problem:
            raise CogragError(f"record {n}: {problem}: {str(r)[:120]}")


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

def routing_problem(r: dict[str, Any]) -> str | None:
    """Why a routing record cannot be scored: a label outside the router's routes would only ever
    count as a miss, and a `lang` that is not text would make a metric row of its own."""
    from cograg.control.models import ROUTES

    if "question" not in r or "route" not in r:
        return "a routing record needs question and route"
    if problem := text_problem(r, "question"):
        return problem
    if not isinstance(r["route"], str) or r["route"] not in ROUTES:
        return f"route must be one of {', '.join(ROUTES)} (got {shown(r['route'])})"
    if r.get("lang") is not None and not isinstance(r["lang"], str):
        return f"lang must be a string such as en or zh (got {shown(r['lang'])})"
    return None


def evaluate_routing(records: list[dict[str, Any]], router: Any, progress: Progress = None) -> list[dict[str, Any]]:
    """Each record `{question, route, lang?}` routed by `router` (a control.router.Router)."""
    _checked(records, routing_problem)

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


def _evidence_key(r: dict[str, Any]) -> str | None:
    """Which field holds the evidence: the first of passage, abstract, evidence that is not empty."""
    return next((k for k in ("passage", "abstract", "evidence") if r.get(k)), None)


def verifier_problem(r: dict[str, Any]) -> str | None:
    """Why a verifier record cannot be judged: the judge reads claim and evidence as text."""
    key = _evidence_key(r)
    if not r.get("claim") or key is None or not r.get("label"):
        return "a verifier record needs claim, evidence and a known label"
    if problem := text_problem(r, "claim"):
        return problem
    if not isinstance(r["label"], str) or r["label"].upper() not in _LABELS:
        return f"label must be one of {', '.join(_LABELS)} (got {shown(r['label'])})"
    evidence = r[key]
    if not (isinstance(evidence, str) or (isinstance(evidence, list) and all(isinstance(s, str) for s in evidence))):
        return f"{key} must be a string or a list of strings (got {shown(evidence)})"
    return None


def claim_pair(r: dict[str, Any]) -> tuple[str, str, str]:
    """(claim, evidence, verdict) of a record: `claim`; `evidence`, `passage` or the SciFact
    `abstract` (a list of sentences, judged whole, as the verifier judges a cited block);
    `label` in SciFact, NLI or the judge's own vocabulary."""
    if problem := verifier_problem(r):
        raise CogragError(f"{problem}: {str(r)[:120]}")
    evidence = r[_evidence_key(r) or "evidence"]
    if isinstance(evidence, list):
        evidence = " ".join(evidence)
    return r["claim"], evidence, _LABELS[str(r["label"]).upper()]


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

class ContractExpect(BaseModel):
    """What validation must find in a case. Strict and closed: a misspelt key or a value of another
    type ("citations": "2", "answer_lacks": "[3]") would check nothing, or something else."""

    model_config = ConfigDict(extra="forbid", strict=True)

    hallucinated_ids: list[str | int] | None = None
    citations: int | None = None
    fallback: bool | None = None
    answer_lacks: list[str] = Field(default_factory=list)


class ContractCase(BaseModel):
    """One hand-written case. Its draft is read as the model's output is (answer.contract.DraftAnswer),
    checked when the case is (`contract_problem`)."""

    id: Any = None
    blocks: list[str]  # one string here would be taken a character a block
    draft: dict[str, Any]
    expect: ContractExpect = Field(default_factory=ContractExpect)


def contract_problem(r: dict[str, Any]) -> str | None:
    """Why a contract case cannot be run: a missing part or a field of the wrong type."""
    from cograg.answer.contract import DraftAnswer

    if "blocks" not in r or "draft" not in r:
        return "a contract case needs blocks and draft"
    try:
        case = ContractCase.model_validate(r)
    except ValidationError as exc:
        return field_problem(exc)
    try:
        DraftAnswer.model_validate(case.draft)
    except ValidationError as exc:
        return field_problem(exc, within="draft")
    return None


def evaluate_contract(records: list[dict[str, Any]], progress: Progress = None) -> list[dict[str, Any]]:
    """Citation-contract validation (SPEC C2) on hand-written drafts: each case gives the blocks
    retrieved (`blocks`: texts, numbered from 1), the model's `draft` and what validation must
    find (`expect`: `hallucinated_ids`, `citations`, `fallback`, strings `answer_lacks`). Every
    case is also held to the invariants: each delivered quote is a verbatim span of its chunk,
    each marker has its citation and each citation its marker, ids run 1..n."""
    _checked(records, contract_problem)
    rows = []
    for i, record in enumerate(records, start=1):
        case = ContractCase.model_validate(record)
        answer, failures = _contract_failures(case)
        rows.append({"id": record.get("id", item_id(record)), "ok": not failures, "failures": "; ".join(failures),
                     "answer": answer[:200]})
        if progress:
            progress("contract", i, len(records))
    return rows


def _contract_failures(case: ContractCase) -> tuple[str, list[str]]:
    """The validated answer of a case and how it breaks the invariants or the case's expectations."""
    from cograg.answer.contract import DraftAnswer, markers_in, validate_draft
    from cograg.retrieval.packing import ContextBlock

    blocks = [ContextBlock(citation_id=n, doc_id=f"d{n}", chunk_ids=[f"c{n}"], chunk_texts=[t], text=t,
                           token_count=len(t.split()), best_rank=n, title=f"doc {n}", source=f"doc{n}.md")
              for n, t in enumerate(case.blocks, start=1)]
    text_of = {f"c{n}": t for n, t in enumerate(case.blocks, start=1)}
    out = validate_draft(DraftAnswer.model_validate(case.draft), blocks)
    expect = case.expect
    failures = []
    marker_ids = {k for k, _, _ in markers_in(out.answer)}
    cited_ids = {c.id for c in out.citations}
    if any(c.quote and c.quote not in text_of[c.chunk_id] for c in out.citations):
        failures.append("quote not verbatim")
    if marker_ids != cited_ids:
        failures.append(f"markers {sorted(marker_ids)} vs citations {sorted(cited_ids)}")
    if sorted(cited_ids, key=int) != [str(n) for n in range(1, len(cited_ids) + 1)]:
        failures.append(f"ids not 1..n: {sorted(cited_ids)}")
    wanted_ids = None if expect.hallucinated_ids is None else sorted(str(i) for i in expect.hallucinated_ids)
    if wanted_ids is not None and sorted(out.issues.hallucinated_ids) != wanted_ids:
        failures.append(f"hallucinated {out.issues.hallucinated_ids} != {expect.hallucinated_ids}")
    if expect.citations is not None and len(out.citations) != expect.citations:
        failures.append(f"{len(out.citations)} citations != {expect.citations}")
    if expect.fallback is not None and out.fallback != expect.fallback:
        failures.append(f"fallback {out.fallback}")
    failures += [f"answer keeps {s!r}" for s in expect.answer_lacks if s in out.answer]
    return out.answer, failures
