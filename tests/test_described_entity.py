"""An answer that names the entity the question describes, instead of what the question asks about
it, is written once more and refused if it names that entity again (`answer.described_entity_check`,
answer/described_entity.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cograg.answer.contract import Citation
from cograg.answer.described_entity import described_entity, described_phrases
from cograg.engine import Engine
from cograg.retrieval.packing import ContextBlock
from cograg.testing import ScriptedLLM
from tests.test_answer import OPEN, answering, ask, block_number, make_engine

PRODUCED = "Who produced the single that the Jamaican reggae singer born in 1952 in Kingston, Jamaica was most known for?"
PENN = ("Dawn Penn\nDawn Penn (born in 1952 in Kingston, Jamaica) is a Jamaican reggae singer. She is most known "
        "for her single \"You Don't Love Me (No, No, No)\".")


@pytest.mark.parametrize(("question", "phrases"), [
    (PRODUCED, ["Jamaican reggae singer"]),
    # the phrase starts at its own article, not at an earlier one ("the hand of a German musician")
    ("The manuscript is in the hand of a German musician whose godfather is whom?", ["German musician"]),
    ("Philip Carlo was a biographer for an American contract killer who was associated with what family?",
     ["American contract killer"]),
    # the phrase is what the question asks for
    ("Who is the German musician whose godfather was Telemann?", []),
    ("What is the name of the American actress who starred in Kiss and Tell?", []),
    # one word is no description
    ("Who directed the film that was shot in Leland in 1986?", []),
])
def test_described_phrases(question: str, phrases: list[str]) -> None:
    assert [p for p, _ in described_phrases(question)] == phrases


def block(text: str, n: int = 1) -> ContextBlock:
    return ContextBlock(citation_id=n, doc_id=f"d{n}", chunk_ids=[f"c{n}"], chunk_texts=[text], text=text,
                        token_count=40, best_rank=n, title="corpus", source="corpus.jsonl")


def cite(n: int = 1) -> Citation:
    return Citation(id=str(n), doc_id=f"d{n}", chunk_id=f"c{n}", quote="", source="corpus.jsonl", score=1.0)


def test_an_answer_naming_the_described_entity_is_found() -> None:
    found = described_entity(PRODUCED, ["Dawn Penn produced it [1]."], [cite()], [block(PENN)])
    assert found is not None
    assert (found.entity, found.phrase, found.citation_id, found.chunk_id) == ("Dawn Penn", "Jamaican reggae singer",
                                                                               1, "c1")
    assert found.named_in(PRODUCED) == ("Who produced the single that Dawn Penn, the Jamaican reggae singer born in "
                                        "1952 in Kingston, Jamaica was most known for?")


@pytest.mark.parametrize(("sentences", "text"), [
    # the answer names someone else as well
    (["Steely and Clevie produced Dawn Penn's single [1]."], PENN),
    # the answer gives a number the question does not hold
    (["Dawn Penn's single came out in 1994 [1]."], PENN),
    # the cited passage is not about the name
    (["Dawn Penn [1]"], "Steely and Clevie\nSteely and Clevie produced records for Dawn Penn, a Jamaican reggae singer."),
    # the passage about the name does not describe it as the question does
    (["Dawn Penn [1]"], "Dawn Penn\nDawn Penn is a singer from Kingston."),
])
def test_other_answers_are_left_alone(sentences: list[str], text: str) -> None:
    assert described_entity(PRODUCED, sentences, [cite()], [block(text)]) is None


DOCS = {
    "penn.md": "# Dawn Penn\n\nDawn Penn (born in 1952 in Kingston, Jamaica) is a Jamaican reggae singer. She is most "
               "known for her single You Don't Love Me.\n",
    "song.md": "# You Don't Love Me\n\nYou Don't Love Me is a single by Dawn Penn. The single was produced by Steely "
               "and Clevie in Kingston.\n",
}
ECHO = answering("Dawn Penn [{n}]", "born in 1952")


def answers_what_is_asked(messages) -> str:
    """The scripted model answers what is asked when the question it is given names the singer, and
    names the singer otherwise (what the 1.5B model did)."""
    if "Dawn Penn, the Jamaican reggae singer" not in messages[-1].content:
        return ECHO(messages)
    n = block_number(messages, "produced by Steely")
    return json.dumps({"answer": f"The single was produced by Steely and Clevie [{n}].",
                       "citations": [{"id": n, "quote": ""}], "fallback": False})


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path, DOCS)
    yield e
    e.close()


def test_the_answer_is_written_again_with_the_entity_named(eng: Engine) -> None:
    llm = ScriptedLLM([answers_what_is_asked, answers_what_is_asked])
    r = ask(eng, llm, PRODUCED)
    assert not r.fallback
    assert r.answer.startswith("The single was produced by Steely and Clevie [")
    assert Path(r.citations[0].source).name == "song.md"
    (event,) = [e for e in eng.trace(r.trace_id)["events"] if e["name"] == "DESCRIBED_ENTITY_NAMED"]
    assert (event["data"]["entity"], event["data"]["phrase"]) == ("Dawn Penn", "Jamaican reggae singer")
    assert r.removed.rewrites == 1


def test_an_answer_naming_the_entity_again_is_refused(eng: Engine) -> None:
    r = ask(eng, ScriptedLLM([ECHO, ECHO]), PRODUCED)
    assert r.fallback and not r.grounded
    assert any("names Dawn Penn" in n for n in r.notes)


def test_switched_off_the_described_entity_is_delivered(eng: Engine) -> None:
    r = ask(eng, ScriptedLLM([ECHO]), PRODUCED, config=OPEN.model_copy(update={"described_entity_check": False}))
    assert not r.fallback and r.answer.startswith("Dawn Penn [")
