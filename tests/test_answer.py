"""Verified answers (SPEC C1–C5) with a scripted LLM: contract validation, verifier, refusal,
clarification, regeneration, injection defence and traces. The real models are in test_e2e_answer.py."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from cograg.answer.answerer import AnswerConfig, QuestionError
from cograg.answer.contract import DraftAnswer, DraftCitation, answer_sentences, find_quote, validate_draft
from cograg.answer.injection import redact, scan
from cograg.answer.verifier import Verifier
from cograg.config import Settings
from cograg.engine import Engine
from cograg.models.judge import JudgeVerdict, LexicalJudge, LLMJudge, LLMRelevanceReranker
from cograg.models.llm import LLMOutputError, LLMTimeout
from cograg.retrieval.packing import ContextBlock
from cograg.testing import ScriptedLLM
from tests.fakes import HashingEmbedder

DOCS = {
    "bridge.md": "# Linden Bridge\n\nThe Linden Bridge was designed by Tobias Marrick. It has seven arches. "
                 "The bridge opened in 1811 and was restored in 1998 for 4.2 million euros.\n",
    "tea.md": "# 茶叶研究所\n\n研究所育成了耐寒品种银雾。银雾于1978年育成，至今仍是本地种植面积最大的品种。\n",
    "tram.md": "# Trams\n\nA single tram ticket costs EUR 2.10. Trams do not run on Christmas Day.\n",
}
OPEN = AnswerConfig(min_evidence_cosine=-1.0, min_evidence_cosine_zh=-1.0)


def make_engine(tmp_path: Path, docs: dict[str, str] = DOCS) -> Engine:
    """An engine over `docs` with a hashing embedder and the lexical judge; the embedding
    pre-filter of the verifier is off (hashing vectors are no semantic similarity)."""
    store = tmp_path / "store"
    settings = Settings(store=store, verification={"judge": "lexical", "min_claim_similarity": -1.0})
    eng = Engine.open(settings=settings, embedder=HashingEmbedder())
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    for name, text in docs.items():
        (corpus / name).write_text(text, encoding="utf-8")
    eng.ingest([corpus])
    return eng


def with_models(eng: Engine, *, settings: Settings | None = None, **parts) -> Engine:
    """An engine over `eng`'s store and embedder with other parts (a scripted LLM, a judge),
    injected through the factory as any caller would."""
    return Engine.open(settings=settings or eng.settings, store=eng.store,
                       embedder=eng.components.embedder.get(), **parts)


def ask(eng: Engine, llm: ScriptedLLM, question: str, config: AnswerConfig = OPEN, judge=None):
    # the verified-answer stage (C) on its own; whole turns through the router are in test_control_flow.py
    return with_models(eng, llm=llm, judge=judge or LexicalJudge()).answerer(config).answer(question)


def block_number(llm_messages, needle: str) -> int:
    """The block number the prompt gave to the document containing `needle`."""
    user = llm_messages[-1].content
    for m in re.finditer(r'<document id="(\d+)"[^>]*>\n(.*?)\n</document>', user, re.S):
        if needle in m.group(2):
            return int(m.group(1))
    raise AssertionError(f"{needle!r} not in the prompt")


def answering(template: str, needle: str, quote: str = "", fallback: bool = False):
    """A scripted model reply that cites whichever block holds `needle`."""
    def reply(messages):
        n = block_number(messages, needle)
        return json.dumps({"answer": template.format(n=n), "citations": [{"id": n, "quote": quote}],
                           "fallback": fallback})
    return reply


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path)
    yield e
    e.close()


def test_verified_answer_has_contract_fields_and_exact_quotes(eng: Engine):
    llm = ScriptedLLM([answering("The Linden Bridge has seven arches [{n}].", "seven arches",
                                 quote="It has seven arches.")])
    r = ask(eng, llm, "How many arches does the Linden Bridge have?")
    assert not r.fallback and r.grounded and r.route == "DOC_GROUNDED"
    assert r.answer == "The Linden Bridge has seven arches [1]."
    (c,) = r.citations
    assert c.id == "1" and c.quote == "It has seven arches." and c.source.endswith("bridge.md")
    chunk = eng.store.get_chunk(c.chunk_id)
    assert chunk is not None and c.quote in chunk.text and c.doc_id == chunk.doc_id
    assert [cl.verdict for cl in r.claims] == ["SUPPORTED"] and 0 < r.confidence <= 1
    assert r.trace_id.startswith("tr_")
    dumped = json.loads(r.model_dump_json())
    assert {"answer", "citations", "fallback", "confidence", "grounded", "route", "trace_id"} <= set(dumped)
    assert set(dumped["citations"][0]) >= {"id", "doc_id", "chunk_id", "quote", "source", "score"}


def test_hallucinated_ids_and_near_quotes_are_removed_or_repaired_and_counted(eng: Engine):
    # a quote that matches nothing in its chunk drops its citation: tests/test_citation_contract.py
    def reply(messages):
        n = block_number(messages, "seven arches")
        return json.dumps({"answer": f"The bridge has seven arches [{n}]. It was painted gold by aliens [9].",
                           "citations": [{"id": n, "quote": "it has sevn arches"}, {"id": 9, "quote": "x"}]})
    r = ask(eng, ScriptedLLM([reply]), "How many arches does the bridge have?")
    assert r.removed.hallucinated_ids == ["9"] and r.removed.repaired_quotes == 1
    assert "aliens" not in r.answer and "[9]" not in r.answer
    (c,) = r.citations
    assert c.quote == "It has seven arches" and c.quote in eng.store.get_chunk(c.chunk_id).text


def test_no_citation_regenerates_once_then_answers(eng: Engine):
    llm = ScriptedLLM([json.dumps({"answer": "Seven arches.", "citations": [], "fallback": False}),
                       answering("The Linden Bridge has seven arches [{n}].", "seven arches")])
    r = ask(eng, llm, "How many arches does the Linden Bridge have?")
    assert not r.fallback and r.removed.regenerations == 1 and len(llm.calls) == 2
    assert "rejected" in llm.calls[1].messages[-1].content


def test_no_citation_twice_is_refused(eng: Engine):
    bare = json.dumps({"answer": "It has seven arches.", "citations": [], "fallback": False})
    r = ask(eng, ScriptedLLM([bare, bare]), "How many arches does the Linden Bridge have?")
    assert r.fallback and not r.grounded and r.route == "REFUSED"
    assert "do not establish" in r.answer
    assert all(c.quote in eng.store.get_chunk(c.chunk_id).text for c in r.citations)


@pytest.mark.parametrize("failure", [
    ["not json at all", "still {garbage"],
    [LLMTimeout("generation timed out after 120 s"), LLMTimeout("again")],
    ["{\"answer\": 5}", "{\"citations\": \"nope\"}"],
])
def test_model_failures_become_conservative_answers(eng: Engine, failure):
    r = ask(eng, ScriptedLLM(failure * 2), "How many arches does the Linden Bridge have?")
    assert r.fallback and r.route == "REFUSED" and r.answer
    assert any("model failed" in n for n in r.notes)


def test_unsupported_sentences_are_dropped_and_too_few_makes_a_conservative_reply(eng: Engine):
    def reply(messages):
        n = block_number(messages, "seven arches")
        return json.dumps({"answer": f"The Linden Bridge has seven arches [{n}]. The bridge opened in 1811 [{n}]. "
                                     "Marrick also designed the Eiffel Tower.",
                           "citations": [{"id": n, "quote": "It has seven arches."}]})
    r = ask(eng, ScriptedLLM([reply]), "Tell me about the Linden Bridge arches")
    assert not r.fallback and "Eiffel" not in r.answer and r.removed.unsupported_sentences == 1
    assert [c.verdict for c in r.claims] == ["SUPPORTED", "SUPPORTED", "UNRELATED"]

    def mostly_wrong(messages):
        n = block_number(messages, "seven arches")
        return json.dumps({"answer": f"The bridge has nine arches [{n}]. It opened in 1911 [{n}]. It is blue.",
                           "citations": [{"id": n, "quote": "It has seven arches."}]})
    r = ask(eng, ScriptedLLM([mostly_wrong]), "Tell me about the Linden Bridge arches")
    assert r.fallback and "do not establish" in r.answer and r.citations
    assert {c.method for c in r.claims} >= {"numbers"}


def test_deterministic_checks_numbers_and_negation():
    v = Verifier(LexicalJudge())
    ev = {"1": "Trams do not run on Christmas Day. A ticket costs EUR 2.10."}
    assert v.check("A ticket costs EUR 3.50 [1].", ev).method == "numbers"
    neg = v.check("Trams run on Christmas Day [1].", ev)
    assert neg.verdict == "CONTRADICTED" and neg.method == "negation"
    assert v.check("Trams do not run on Christmas Day [1].", ev).verdict == "SUPPORTED"
    assert v.check("Trams are great.", ev).reason == "no citation"
    assert answer_sentences("银雾于1978年育成。[1] 它很耐寒[2]。") == ["银雾于1978年育成。[1]", "它很耐寒[2]。"]


def test_llm_judge_uses_constrained_json_and_fails_closed():
    judge = LLMJudge(ScriptedLLM(['{"verdict": "SUPPORTED", "reason": "stated"}', "garbage", "garbage"]))
    v = Verifier(judge)
    ev = {"1": "The Linden Bridge has seven arches."}
    assert v.check("It has seven arches [1].", ev).verdict == "SUPPORTED"
    failed = v.check("It has seven arches [1].", ev)
    assert failed.verdict == "UNRELATED" and not failed.kept and "judge failed" in failed.reason
    assert JudgeVerdict(verdict="CONTRADICTED").reason == ""


def test_weak_evidence_is_refused_without_calling_the_model(eng: Engine):
    llm = ScriptedLLM([])
    strict = AnswerConfig(min_evidence_cosine=0.99, min_evidence_cosine_zh=0.99)
    r = ask(eng, llm, "What is the capital of Mongolia?", config=strict)
    assert r.fallback and r.route == "REFUSED" and llm.calls == [] and "insufficient evidence" in r.notes[0]
    assert re.search(r"best score (0|1)\.\d{3} \(", r.notes[0]), r.notes[0]  # as a person reads it


@pytest.mark.parametrize("q", ["What does this method cost?", "这个方法的效果怎么样？"])
def test_ambiguous_reference_gets_a_clarifying_question(eng: Engine, q: str):
    llm = ScriptedLLM([])
    r = ask(eng, llm, q)
    assert r.route == "CLARIFY" and r.clarification and r.fallback and llm.calls == []


@pytest.mark.parametrize("q", ["", " \t\n", "why " * 1000, "?", "？！", "... ___ --"])
def test_a_question_no_turn_can_take_fails_before_the_model_starts_loading(eng: Engine, q: str):
    # the model loaded in the background while the CLI printed its error and exited: llama.cpp's
    # crash handler then wrote "pure virtual method called" and gdb's output after the one line
    e = with_models(eng, llm=ScriptedLLM([]))
    loads: list[str] = []
    e.components.llm.prefetch = lambda: loads.append("prefetch")  # type: ignore[method-assign]
    with pytest.raises(QuestionError):
        e.ask(q)
    assert loads == []
    e.ask("Who designed the Linden Bridge?", mode="R0")  # a question it can take starts the load
    assert loads == ["prefetch"]


@pytest.mark.parametrize("mode", [None, "R1_ONE_SHOT_RETRIEVE", "R2_MULTI_RETRIEVE", "R3_DAG_PLAN"])
@pytest.mark.parametrize("embedder", ["hashing", None])
def test_an_empty_store_refuses_without_a_model_call_in_every_mode(tmp_path: Path, mode, embedder):
    # R2 asked the model for a rewrite and R3 for a plan (about 15 s on the embedded model) before
    # refusing: there was nothing to grade, rewrite towards or plan over.
    settings = Settings(store=tmp_path / "s", models={"embedder": "none"} if embedder is None else {})
    llm = ScriptedLLM([])
    parts = {"embedder": HashingEmbedder()} if embedder else {}
    with Engine.open(settings=settings, llm=llm, judge=LexicalJudge(), **parts) as e:
        r = e.ask("Who designed the Linden Bridge?", mode=mode)
    assert r.fallback and r.route == "REFUSED" and llm.calls == []
    assert any("the store is empty" in note for note in r.notes), r.notes


def test_bad_questions(eng: Engine, tmp_path: Path):
    with pytest.raises(QuestionError, match="empty"):
        ask(eng, ScriptedLLM([]), "  ")
    with pytest.raises(QuestionError, match="too long"):
        ask(eng, ScriptedLLM([]), "why " * 1000)
    # a third language: answered through the same contract (here: the model declines)
    r = ask(eng, ScriptedLLM([json.dumps({"answer": "Je ne sais pas.", "citations": [], "fallback": True})]),
            "Combien d'arches a le pont Linden ?")
    assert r.fallback and r.route == "REFUSED"


def test_chinese_answer(eng: Engine):
    llm = ScriptedLLM([answering("银雾于1978年育成[{n}]。", "1978", quote="银雾于1978年育成")])
    r = ask(eng, llm, "银雾是哪一年育成的？")
    assert not r.fallback and r.answer == "银雾于1978年育成[1]。" and r.citations[0].quote == "银雾于1978年育成"


def test_trace_is_stored_and_printed(eng: Engine):
    llm = ScriptedLLM([answering("The Linden Bridge has seven arches [{n}].", "seven arches")])
    r = ask(eng, llm, "How many arches does the Linden Bridge have?")
    t = eng.trace(r.trace_id)
    assert t["route"] == "DOC_GROUNDED" and t["question"].startswith("How many")
    assert t["prompt_versions"]["verifiable_answer_system"].endswith("@4")
    assert t["retrieved"] and t["context_blocks"] and t["verdicts"][0]["verdict"] == "SUPPORTED"
    call = t["model_calls"][0]
    assert call["purpose"] == "generate" and call["prompt_tokens"] > 0 and call["ok"]
    assert [e["name"] for e in t["events"]][:2] == ["USER_INPUT_RECEIVED", "RETRIEVED"]
    assert "VERIFIED" in [e["name"] for e in t["events"]]
    from typer.testing import CliRunner

    from cograg.cli import app

    store = eng.settings.store
    eng.close()
    res = CliRunner().invoke(app, ["trace", r.trace_id[:10], "--store", str(store)])
    assert res.exit_code == 0 and "SUPPORTED" in res.stdout and "verifiable_answer_system@4" in res.stdout
    res = CliRunner().invoke(app, ["trace", "tr_nope", "--store", str(store)])
    assert res.exit_code == 1 and "no trace" in res.stderr


def test_llm_relevance_reranker_scores_and_fails_closed():
    rr = LLMRelevanceReranker(ScriptedLLM(['{"relevance": 9}', '{"relevance": 2}', "nope", "nope"]))
    assert rr.score("q", ["a", "b", "c"]) == [0.9, 0.2, 0.0]


# ------------------------------------------------------------------ contract property

def _blocks() -> list[ContextBlock]:
    texts = [["The bridge has seven arches.", "It opened in 1811."], ["Tickets cost EUR 2.10."],
             ["银雾于1978年育成。它很耐寒。"]]
    return [ContextBlock(citation_id=i + 1, doc_id=f"d{i}", chunk_ids=[f"d{i}-c{j}" for j in range(len(t))],
                         chunk_texts=t, title=f"T{i}", source=f"/s{i}.md", text="\n".join(t), token_count=10,
                         best_rank=i + 1) for i, t in enumerate(texts)]


def test_validate_draft_property_random_drafts():
    """Whatever the model writes, delivered citations point at retrieved chunks, each quote is a
    verbatim substring of its chunk, and every marker has exactly one citation."""
    rng = random.Random(7)
    blocks = _blocks()
    words = ["bridge", "seven", "arches", "1811", "tickets", "EUR", "银雾", "cheese", "moon"]
    for _ in range(300):
        ids = [rng.randint(0, 6) for _ in range(rng.randint(0, 4))]
        answer = " ".join(f"{' '.join(rng.choices(words, k=4))} [{i}]." for i in ids) or "nothing."
        cits = [DraftCitation(id=rng.randint(0, 6), quote=rng.choice(
            ["", "seven arches", "It opened in 1811.", "made up quote", "tickets cost eur 2.10", "银雾"]))
            for _ in range(rng.randint(0, 4))]
        v = validate_draft(DraftAnswer(answer=answer, citations=cits), blocks)
        chunk_text = {cid: t for b in blocks for cid, t in zip(b.chunk_ids, b.chunk_texts)}
        markers = re.findall(r"\[(\d+)\]", v.answer)
        assert sorted(set(markers), key=int) == [c.id for c in v.citations]
        for c in v.citations:
            assert c.chunk_id in chunk_text and c.quote and c.quote in chunk_text[c.chunk_id]
        assert all(h not in {"1", "2", "3"} for h in v.issues.hallucinated_ids)


def test_find_quote_tolerance():
    text = "The Linden Bridge was designed by Tobias Marrick in 1809."
    assert find_quote("designed by Tobias Marrick", text) is not None
    assert find_quote("designed by Tobias Marick", text) is not None  # one typo: within 10 %
    assert find_quote("built by Someone Else entirely", text) is None


# ------------------------------------------------------------------ injection
# (attacks replayed against a model that obeys them: test_injection_eval.py)

INJ = Path(__file__).parent / "data" / "injection"


def test_detector_flags_every_attack_in_the_regression_set_and_redacts():
    from cograg.ingest import loaders
    from cograg.ingest.normalize import normalize

    cases = [json.loads(line) for line in (INJ / "cases.jsonl").read_text(encoding="utf-8").splitlines() if line]
    assert len(cases) >= 20
    for c in cases:
        doc = loaders.load(loaders.inspect_file(INJ / c["doc"], 10 ** 8))
        text = "\n\n".join(normalize(b.text).text for b in doc.blocks)
        flags = scan(text)
        assert any(any(k.lower() in f.text.lower() for k in c["canaries"]) for f in flags), c["id"]
        clean = redact(text).text
        assert not any(k.lower() in clean.lower() for k in c["canaries"]), c["id"]
        assert all(a.lower() in clean.lower() for a in c["answer_contains"]), c["id"]


def test_answer_without_markers_gets_system_assigned_citations_then_verified(eng: Engine):
    # only where the block holds the sentence verbatim (the verifier's deterministic test)
    reply = json.dumps({"answer": "It has seven arches. The moon is made of cheese.",
                        "citations": [{"id": 1, "quote": ""}], "fallback": False})
    r = ask(eng, ScriptedLLM([reply]), "How many arches does the Linden Bridge have?")
    assert not r.fallback and r.removed.markers_inserted == 1
    assert r.answer == "It has seven arches [1]."  # the unsupported sentence is gone
    assert r.citations[0].source.endswith("bridge.md")


def test_number_questions_need_a_number_in_the_answer(eng: Engine):
    from cograg.questions import expects_number

    assert expects_number("How many arches does the bridge have?") and expects_number("银雾是哪一年育成的？")
    assert not expects_number("Who designed the bridge?")
    llm = ScriptedLLM([answering("The Linden Bridge was designed by Tobias Marrick [{n}].", "Marrick")])
    r = ask(eng, llm, "How many arches does the Linden Bridge have?")
    assert r.fallback and "number or date" in r.notes[0] and r.claims[0].verdict == "SUPPORTED"
    llm = ScriptedLLM([answering("The Linden Bridge has seven arches [{n}].", "seven arches")])
    assert not ask(eng, llm, "How many arches does the Linden Bridge have?").fallback


def test_refusal_threshold_depends_on_the_question_language(eng: Engine):
    cfg = AnswerConfig(min_evidence_cosine=-1.0, min_evidence_cosine_zh=0.999)
    llm = ScriptedLLM([answering("The Linden Bridge has seven arches [{n}].", "seven arches")])
    assert not ask(eng, llm, "How many arches does the Linden Bridge have?", config=cfg).fallback
    zh = ask(eng, ScriptedLLM([]), "银雾是哪一年育成的？", config=cfg)
    assert zh.fallback and "insufficient evidence" in zh.notes[0]


def test_judge_calls_are_recorded_in_the_trace(eng: Engine):
    judge = LLMJudge(ScriptedLLM(['{"verdict": "SUPPORTED", "reason": "stated"}'], name="judge-model"))
    llm = ScriptedLLM([answering("The Linden Bridge has seven arches [{n}].", "seven arches")])
    r = ask(eng, llm, "How many arches does the Linden Bridge have?", judge=judge)
    calls = eng.trace(r.trace_id)["model_calls"]
    assert [(c["purpose"], c["model"]) for c in calls] == [("generate", "scripted"), ("verify", "judge-model")]
    assert not isinstance(judge.llm, type(None)) and judge.llm.name == "judge-model"  # restored
    assert eng.trace(r.trace_id)["prompt_versions"]["judge_claim"] == "judge_claim@4"
