"""The follow-up hop of R3's look-ups (`cograg.retrieval.hops`): the merge on its own, and a planned
turn whose first look-up reaches the paragraph that only its best passage names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cograg.answer.answerer import AnswerConfig, Answerer
from cograg.answer.verifier import Verifier
from cograg.control.models import ControlBudget
from cograg.models.judge import LexicalJudge
from cograg.engine import Engine
from cograg.orchestrator.orchestrator import TurnOptions
from cograg.retrieval.hops import follow_up_search
from cograg.retrieval.models import SearchHit, SearchResult
from cograg.testing import ScriptedLLM
from tests.test_answer import make_engine, with_models
from tests.test_control_flow import OPEN, Brain, block_with


def hit(cid: str, text: str = "", doc: str | None = None) -> SearchHit:
    return SearchHit(title=cid, source=f"{doc or cid}.md", chunk_id=cid, doc_id=doc or cid, seq=0,
                     text=text or f"text of {cid}", start=0, end=1, token_count=1, score=1.0)


def test_follow_up_keeps_the_first_hops_best_and_adds_the_second_hops_new_hits():
    results = {"q": ["a", "b", "c", "d", "e", "f"], "q\ntext of a": ["a", "x", "c", "y", "z", "w"]}
    queries: list[str] = []

    def search(query: str) -> SearchResult:
        queries.append(query)
        return SearchResult(query=query, mode="hybrid", hits=[hit(c) for c in results[query]],
                            evidence_score=0.7 if query == "q" else 0.9)

    merged = follow_up_search(search, "q")
    assert queries == ["q", "q\ntext of a"]  # the second search carries the first hop's top passage
    # six documents: the first three of the question's own six, then the second hop's hits not yet
    # there, cut at six
    assert [h.chunk_id for h in merged.hits] == ["a", "b", "c", "x", "y", "z"]
    # the merge before (`answer.hop_merge=two_thirds`): the first four in front
    before = follow_up_search(search, "q", merge="two_thirds")
    assert [h.chunk_id for h in before.hits] == ["a", "b", "c", "d", "x", "y"]
    assert merged.query == "q" and merged.evidence_score == 0.7  # the question's own evidence decides
    assert [h.chunk_id for h in follow_up_search(search, "q", keep=1).hits] == ["a", "x", "c", "y", "z", "w"]


def test_the_merge_knows_documents():
    # the question's fourth hit keeps its place when it is another chunk of a document in front (in a
    # long document, often the chunk an answer needs) or when the second hop found no document the
    # first had not; a second-hop hit of a new document moves ahead of a fourth hit of another one
    def merged(fourth_doc: str, second_ids: list[str], second_doc: str | None = None) -> list[str]:
        first = [hit("a1", doc="A"), hit("b", doc="B"), hit("c", doc="C"), hit("d1", doc=fourth_doc),
                 hit("e"), hit("f")]
        second = [hit("a1", doc="A")] + [hit(c, doc=second_doc) for c in second_ids]
        return [h.chunk_id for h in follow_up_search(
            lambda q: SearchResult(query=q, mode="hybrid", hits=first if q == "q" else second), "q").hits]

    assert merged("A", ["x", "y", "z"]) == ["a1", "b", "c", "d1", "x", "y"]
    assert merged("D", ["x", "y", "z"]) == ["a1", "b", "c", "x", "y", "z"]
    # the second hop's new chunks are of a document the first search returned (C): no move
    assert merged("D", ["c2", "c3"], second_doc="C") == ["a1", "b", "c", "d1", "c2", "c3"]


def test_records_of_one_file_are_documents_of_their_own():
    # a HotpotQA paragraph is a record of the corpus file: one doc_id, a record_id each
    def rec(cid: str) -> SearchHit:
        return hit(cid, doc="corpus").model_copy(update={"metadata": {"record_id": cid}})

    first = [rec(c) for c in "abcdef"]
    second = [rec("a"), rec("x"), rec("y")]
    hits = follow_up_search(lambda q: SearchResult(query=q, mode="hybrid", hits=first if q == "q" else second),
                            "q").hits
    assert [h.chunk_id for h in hits] == ["a", "b", "c", "x", "y", "d"]


@pytest.mark.parametrize(("merge", "expected"), [("documents", ["a", "b", "c", "x", "y", "z"]),
                                                  ("two_thirds", ["a", "b", "c", "d", "x", "y"])])
def test_the_answerer_merges_as_answer_hop_merge_says(merge: str, expected: list[str]):
    # R1's hop and R3's look-ups both search through Answerer.follow_up
    results = {"q": ["a", "b", "c", "d", "e", "f"], "q\ntext of a": ["a", "x", "c", "y", "z", "w"]}
    answerer = Answerer(search=lambda q: SearchResult(query=q, mode="hybrid", hits=[hit(c) for c in results[q]]),
                        llm=ScriptedLLM([]), verifier=Verifier(LexicalJudge()), config=AnswerConfig(hop_merge=merge))
    assert [h.chunk_id for h in answerer.follow_up("q").hits] == expected


def test_follow_up_without_hits_makes_no_second_search():
    calls: list[str] = []

    def search(query: str) -> SearchResult:
        calls.append(query)
        return SearchResult(query=query, mode="hybrid", hits=[])

    assert follow_up_search(search, "q").hits == [] and calls == ["q"]


DOCS = {
    "linden.md": "# Linden Bridge\n\nThe Linden Bridge opened in 1811. It was designed by Tobias Marrick.\n",
    "marrick.md": "# Marrick\n\nTobias Marrick was born in Leeds in 1770.\n",
    "rhine.md": "# Rhine Bridge\n\nThe Rhine Bridge opened in 1870. It has twelve spans.\n",
}
BRIDGE_PLAN = {"sub_tasks": [
    {"id": 1, "description": "Who designed the Linden Bridge?", "dependencies": []},
    {"id": 2, "description": "When was the designer of the Linden Bridge born?", "dependencies": [1],
     "type": "retrieve"}]}


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path, DOCS)
    yield e
    e.close()


def answer(q: str, text: str) -> dict:
    needle = "designed by" if "designed" in q else "born in"
    n = block_with(text, needle)
    sentence = "It was designed by Tobias Marrick" if needle == "designed by" else "Tobias Marrick was born in 1770"
    return ({"answer": f"{sentence} [{n}].", "citations": [{"id": n, "quote": ""}], "fallback": False} if n
            else {"answer": "", "citations": [], "fallback": True})


def test_a_planned_look_up_searches_again_with_its_best_passage(eng: Engine):
    budget = ControlBudget().model_copy(update={"plan_templates": False})
    opts = TurnOptions(answer=OPEN, budget=budget, force_mode="R3")
    brain = Brain(plan=json.dumps(BRIDGE_PLAN), answer=answer)
    resp = with_models(eng, llm=ScriptedLLM([brain] * 100)).ask(
        "When was the designer of the Linden Bridge born?", options=opts)
    assert resp.mode == "R3_DAG_PLAN"
    searches = eng.trace(resp.trace_id)["searches"]
    first, follow_up = searches[0], searches[1]
    assert first["query"] == "Who designed the Linden Bridge?"
    linden = first["chunk_ids"][0]
    assert "Linden Bridge opened in 1811" in eng.store.get_chunk(linden).text
    # the follow-up hop: the look-up plus its best passage, which names the designer
    assert follow_up["query"].startswith("Who designed the Linden Bridge?\n")
    assert "Tobias Marrick" in follow_up["query"]
    # the dependent look-up (task 2) still searches with what task 1 established
    assert any(s["query"].startswith("When was the designer") and "Tobias Marrick" in s["query"]
               for s in searches[2:])


# --------------------------------------------------------------------------- R1 with the hop
HOP_HITS = {
    "When was the designer of the Linden Bridge born?": [
        hit("linden", "The Linden Bridge opened in 1811. It was designed by Tobias Marrick."),
        hit("rhine", "The Rhine Bridge opened in 1870. It has twelve spans."),
        hit("tram", "A single tram ticket costs EUR 2.10.")],
    "When was the designer of the Linden Bridge born?\nThe Linden Bridge opened in 1811. It was designed by "
    "Tobias Marrick.": [
        hit("linden", "The Linden Bridge opened in 1811. It was designed by Tobias Marrick."),
        hit("marrick", "Tobias Marrick was born in Leeds in 1770.")],
}


def r1_answer(follow_up_hop: bool, first_evidence: float = 0.9):
    from cograg.answer.answerer import Answerer
    from cograg.answer.verifier import Verifier
    from cograg.config import AnswerConfig
    from cograg.models.judge import LexicalJudge
    from tests.test_answer import answering

    queries: list[str] = []

    def search(query: str) -> SearchResult:
        queries.append(query)
        return SearchResult(query=query, mode="hybrid", hits=HOP_HITS[query], evidence_score=first_evidence
                            if len(queries) == 1 else 0.99, evidence_source="vector")

    prompts: list[str] = []

    def reply(messages):
        prompts.append(messages[-1].content)
        if "born in Leeds" not in messages[-1].content:
            return json.dumps({"answer": "", "citations": [], "fallback": True})
        return answering("Tobias Marrick was born in 1770 [{n}].", "born in")(messages)

    llm = ScriptedLLM([reply, reply])
    config = AnswerConfig(follow_up_hop=follow_up_hop, min_evidence_cosine=0.8)
    answerer = Answerer(search=search, llm=llm, verifier=Verifier(LexicalJudge(), min_similarity=-1.0), config=config)
    return answerer.answer("When was the designer of the Linden Bridge born?"), queries, prompts


def test_r1_with_the_follow_up_hop_answers_a_bridge_question_from_the_paragraph_only_its_best_passage_names():
    resp, queries, prompts = r1_answer(follow_up_hop=True)
    assert len(queries) == 2 and "Tobias Marrick" in queries[1]
    assert not resp.fallback and "1770" in resp.answer
    assert [c.chunk_id for c in resp.citations] == ["marrick"]


def test_r1_without_the_hop_never_sees_that_paragraph():
    resp, queries, prompts = r1_answer(follow_up_hop=False)
    assert len(queries) == 1 and resp.fallback
    assert all("born in Leeds" not in p for p in prompts)


def test_the_refusal_gate_reads_the_questions_own_search_not_the_hop():
    # the hop's search scores 0.99; the question's own best (0.5) is under the floor: refused, no model call
    resp, queries, prompts = r1_answer(follow_up_hop=True, first_evidence=0.5)
    assert resp.fallback and resp.route == "REFUSED" and prompts == []
    assert len(queries) == 1  # a refused question makes no second search


def test_the_hop_never_seeds_its_query_with_a_passage_the_policy_hides():
    hidden = hit("secret", "The vault code is 1234.").model_copy(update={"snippet_visible": False})
    queries: list[str] = []

    def search(query: str) -> SearchResult:
        queries.append(query)
        return SearchResult(query=query, mode="hybrid", hits=[hidden, hit("b")] if query == "q" else [hit("c")])

    follow_up_search(search, "q")
    assert queries == ["q", "q\ntext of b"]  # the best visible passage seeds it; the hidden text goes nowhere
    queries.clear()

    def only_hidden(query: str) -> SearchResult:
        queries.append(query)
        return SearchResult(query=query, mode="hybrid", hits=[hidden])

    assert [h.chunk_id for h in follow_up_search(only_hidden, "q").hits] == ["secret"] and queries == ["q"]
