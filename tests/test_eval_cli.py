"""`cograg eval` on the command line: the answers eval with a scripted model on a tiny corpus,
the retrieval eval on a tiny BEIR folder, the model-free CI suite and its gate failing on a
deliberate regression."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from cograg import cli_eval
from cograg.testing import ScriptedLLM
from tests.fakes import HashingEmbedder

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("COGRAG_EVAL_DATA", REPO.parent / "shared" / "data"))
OPEN_FLOORS = ["--set", "answer.min_evidence_cosine=-1", "--set", "answer.min_evidence_cosine_zh=-1",
               "--set", "verification.min_claim_similarity=-1"]
CORPUS = {
    "bridge.md": "# Linden Bridge\n\nThe Linden Bridge was designed by Tobias Marrick. It has seven arches.\n",
    "tram.md": "# Trams\n\nA single tram ticket costs EUR 2.10. The tram livery was designed by the city. Trams do not run on Christmas Day.\n",
}
QA = [
    {"id": "arches", "question": "How many arches does the Linden Bridge have?", "answers": ["seven"]},
    {"id": "designer", "question": "Who designed the Linden Bridge?", "answers": ["Tobias Marrick"]},
    {"id": "ticket", "question": "How much is a single tram ticket?", "answers": ["EUR 2.10"]},
    {"id": "moon", "question": "Who built the bridge on the moon?", "answers": [], "answerable": False},
]
# what the scripted model says per question: (answer template, text of the block to cite) or a refusal
REPLIES = {
    "arches": ("The Linden Bridge has seven arches [{n}].", "seven arches"),
    "designer": ("It was designed by Tobias Marrick [{n}][{m}].", "Tobias Marrick"),  # [{m}]: a second citation that shares a word ("designed") but backs nothing
    "ticket": ("A ticket costs EUR 5 [{n}].", "tram ticket"),  # wrong, and unsupported by its citation
}


def scripted_model(messages) -> str:
    user = messages[-1].content
    blocks = {int(n): text for n, text in re.findall(r'<document id="(\d+)"[^>]*>\n(.*?)\n</document>', user, re.S)}
    for qid, (template, needle) in REPLIES.items():
        question = next(q["question"] for q in QA if q["id"] == qid)
        if question in user and blocks:
            n = next(k for k, t in blocks.items() if needle in t)
            m = next((k for k in blocks if k != n), n)
            citations = [{"id": n, "quote": ""}, {"id": m, "quote": ""}] + ([{"id": 99, "quote": ""}] if qid == "arches" else [])
            return json.dumps({"answer": template.format(n=n, m=m), "citations": citations, "fallback": False})
    return json.dumps({"answer": "The documents do not say.", "citations": [], "fallback": True})


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith("COGRAG_") and key != "COGRAG_EVAL_DATA":
            monkeypatch.delenv(key)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in CORPUS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QA), encoding="utf-8")
    monkeypatch.setattr(cli_eval, "engine_parts", {"embedder": HashingEmbedder(), "llm": ScriptedLLM([scripted_model] * 50)})
    return tmp_path


def test_eval_answers_with_a_scripted_model(cli, tiny: Path) -> None:
    res = cli("eval", "answers", tiny / "qa.jsonl", "--corpus", tiny / "corpus", "--split", "all",
              "--judge", "lexical", "--citation-judge", "lexical", "--store", tiny / "store",
              "--out", tiny / "report", "--json", *OPEN_FLOORS)
    assert res.exit_code == 0, res.stderr + res.stdout
    rep = json.loads(res.stdout)
    s = rep["summary"]
    rows = {r["id"]: r for r in rep["rows"]}
    assert rep["split"] == "all" and rep["config"]["citation judge"] == "lexical"
    assert (tiny / "report" / "answers.md").read_text(encoding="utf-8").count("split: **all**") == 1
    assert s["questions"] == 4 and s["answerable"] == 3 and s["unanswerable"] == 1
    assert rows["arches"]["contains_gold"] and rows["arches"]["f1"] > 0 and rows["designer"]["contains_gold"]
    assert not rows["ticket"]["contains_gold"]
    assert s["refusal_unanswerable"] == 1.0
    assert s["hallucinated_ids_proposed"] == 1 and s["hallucinated_ids_delivered"] == 0
    assert 0 < s["citation_precision"] < 1 and s["citations_per_statement"] > 1
    assert any(k.startswith("route.") and k.endswith(".tokens_mean") for k in s)


def test_eval_retrieval_report_and_baseline_gate(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = {f"D{i}": f"document {i} about topic{i} and shared words" for i in range(30)}
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                               for k, v in docs.items()), encoding="utf-8")
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": f"Q{i}", "text": f"topic{i}"}) + "\n"
                                                for i in range(30)), encoding="utf-8")
    (beir / "qrels" / "test.tsv").write_text("".join(f"Q{i}\tD{i}\t1\n" for i in range(30)), encoding="utf-8")
    monkeypatch.setenv("COGRAG_EMBEDDER", "none")
    args = ["eval", "retrieval", beir, "--modes", "bm25", "--store", tmp_path / "s", "--split", "all"]
    res = cli(*args, "--out", tmp_path / "r")
    assert res.exit_code == 0, res.stderr
    base = json.loads((tmp_path / "r" / "retrieval.json").read_text(encoding="utf-8"))
    assert base["summary"]["bm25.ndcg@10"] == 1.0 and len(base["rows"]) == 30 and base["split"] == "all"
    assert cli(*args, "--baseline", tmp_path / "r" / "retrieval.json").exit_code == 0
    base["summary"]["bm25.ndcg@10"] = 1.5  # a baseline the run cannot reach: the gate must fail
    (tmp_path / "better.json").write_text(json.dumps(base), encoding="utf-8")
    res = cli(*args, "--baseline", tmp_path / "better.json")
    assert res.exit_code == 1 and "REGRESSION bm25.ndcg@10" in res.stderr
    res = cli(*args[:-1], "evaluation", "--baseline", tmp_path / "r" / "retrieval.json")
    assert res.exit_code == 1 and "split" in res.stderr


def _ci_suite(cli, tmp_path: Path, *extra: object):
    return cli("eval", "all", "--suite", REPO / "eval" / "ci.yaml", "--data", DATA, "--store", tmp_path / "stores",
               "--out", tmp_path / "out", *extra)


def test_ci_suite_passes_against_its_committed_baselines(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COGRAG_EMBEDDER", raising=False)
    if not (DATA / "cmrc2018" / "beir_chunks").is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"the CI suite's data is missing: {DATA} (set COGRAG_EVAL_DATA)")
        pytest.skip(f"shared data not found at {DATA}")
    res = _ci_suite(cli, tmp_path)
    assert res.exit_code == 0, res.stdout + res.stderr
    summary = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert summary.count("split: **evaluation**") == 2 and "split: **all**" in summary


def test_ci_gate_fails_on_a_deliberate_regression(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the router (greetings no longer take the fast path) and the contract validator
    (hallucinated ids kept): the model-free gate must exit 1 and name what broke."""
    from cograg.answer import contract
    from cograg.control.router import Router

    route = Router.route

    def broken_route(self, question, **kw):
        d = route(self, question, **kw)
        return d.model_copy(update={"route": "DOC_GROUNDED"}) if d.route == "FAST_PATH" else d

    validate = contract.validate_draft

    def broken_validate(draft, blocks):
        out = validate(draft, blocks)
        return out.model_copy(update={"answer": draft.answer})  # hallucinated markers left in the text

    monkeypatch.setattr(Router, "route", broken_route)
    monkeypatch.setattr(contract, "validate_draft", broken_validate)
    res = _ci_suite(cli, tmp_path, "--only", "routing-rules,contract")
    assert res.exit_code == 1
    assert "REGRESSION macro_f1" in res.stderr and "REGRESSION pass_rate" in res.stderr
    assert "hallucinated-id-removed" in res.stderr  # the failing rows are printed
    assert "rows passed in the baseline and fail now" in res.stderr


def test_eval_verifier_maps_labels_and_reports_the_judge_and_split(cli, tmp_path: Path) -> None:
    from cograg.eval.splits import split_of

    pairs = [("The bridge has seven arches.", ["The Linden Bridge has seven arches."], "SUPPORT"),
             ("The bridge has nine towers.", ["The Linden Bridge has seven arches."], "NOT_ENOUGH_INFO"),
             ("Trams run on Christmas Day.", ["Trams do not run on Christmas Day."], "CONTRADICT")]
    records = [{"claim_id": i, "doc_id": 7, "claim": c, "abstract": a, "label": lab}
               for i in range(30) for c, a, lab in [pairs[i % 3]]]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    res = cli("eval", "verifier", tmp_path / "pairs.jsonl", "--judge", "lexical", "--json")
    assert res.exit_code == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["config"]["judge"] == "lexical" and rep["split"] == "evaluation"
    assert [r["id"] for r in rep["rows"]] == [f"{r['claim_id']}:7" for r in records if split_of(r) == "evaluation"]
    assert {r["gold"] for r in rep["rows"]} == {"SUPPORTED", "UNRELATED", "CONTRADICTED"}
    assert 0 < rep["summary"]["macro_f1"] < 1  # the lexical judge cannot see the contradiction
    # what the contract depends on: the lexical judge calls the contradicted pairs SUPPORTED
    said = [r for r in rep["rows"] if r["predicted"] == "SUPPORTED"]
    wrong = [r for r in said if r["gold"] != "SUPPORTED"]
    assert wrong and rep["summary"]["precision.SUPPORTED"] == round(1 - len(wrong) / len(said), 3)
    assert rep["summary"]["false_supported"] == round(
        len(wrong) / sum(r["gold"] != "SUPPORTED" for r in rep["rows"]), 3)
    assert rep["gates"]["false_supported"] == "lower"
    limited = json.loads(cli("eval", "verifier", tmp_path / "pairs.jsonl", "--judge", "lexical", "--limit", "4",
                             "--split", "calibration", "--json").stdout)
    assert len(limited["rows"]) == 4 and limited["split"] == "calibration"
