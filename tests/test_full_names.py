"""A name in a verified sentence is written as the blocks it cites write it in full
(`answer.full_names`, answer/full_names.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cograg.answer.answerer import AnswerConfig
from cograg.answer.full_names import full_names
from cograg.engine import Engine
from cograg.testing import ScriptedLLM
from tests.test_answer import DOCS, OPEN, answering, ask, make_engine

OH = "Sandra Oh\nSandra Miju Oh (born July 20, 1971) is a Canadian actress known for her role as Cristina Yang."


@pytest.mark.parametrize(("sentence", "text", "expected"), [
    # middle names, after a title that holds the short form (it must not match from the title's word)
    ("Sandra Oh [1]", OH, "Sandra Miju Oh [1]"),
    ("Gerald McRaney starred in it [2].", "Gerald McRaney\nGerald Lee McRaney (born August 19, 1947) is an actor.",
     "Gerald Lee McRaney starred in it [2]."),
    # an initial and a suffix
    ("Waylon Smithers [1]", "Waylon Smithers\nWaylon J. Smithers Jr. is a recurring character.",
     "Waylon J. Smithers Jr. [1]"),
    # a nickname in quotes
    ("Nick Hexum is American [1].", 'Nick Hexum\nNicholas Lofton "Nick" Hexum (born April 12, 1970) is an American singer.',
     'Nicholas Lofton "Nick" Hexum is American [1].'),
    # a three-word name keeps its middle word where the source has it
    ("Mary Ann Evans wrote it [1].", "Mary Ann Louisa Evans wrote under a pen name.", "Mary Ann Louisa Evans wrote it [1]."),
])
def test_a_name_is_written_as_its_cited_text_writes_it_in_full(sentence: str, text: str, expected: str) -> None:
    out, written = full_names([sentence], [[text]])
    assert out == [expected]
    assert len(written) == 1 and written[0].sentence_index == 0
    assert written[0].short in sentence and written[0].full in expected and written[0].full not in sentence


@pytest.mark.parametrize(("sentence", "texts"), [
    # two different longer forms: which one is meant is not decided here
    ("John Brown [1]", ["John Quincy Brown was a judge.", "John Henry Brown was a painter."]),
    # the cited text holds the name only as written, or with other words between that are not names
    ("Sandra Oh [1]", ["Sandra Oh is a Canadian actress."]),
    ("Sandra Oh [1]", ["Sandra, and later Oh, were named."]),
    # nothing cited
    ("Sandra Oh.", []),
    # a longer form with a word of the short form inside is not a fuller name of it
    ("Sandra Oh [1]", ["Sandra Oh Sandra Oh was repeated."]),
])
def test_a_name_stays_as_written_without_one_longer_form_in_its_citations(sentence: str, texts: list[str]) -> None:
    out, written = full_names([sentence], [texts])
    assert out == [sentence] and written == []


def test_the_same_words_inside_a_longer_name_stay_as_written() -> None:
    # "The Nick Hexum Quintet" is a band: its words are not the singer's name written short
    text = 'Nicholas Lofton "Nick" Hexum is the vocalist for 311 and The Nick Hexum Quintet.'
    out, written = full_names(["Nick Hexum sings for 311 and The Nick Hexum Quintet [1]."], [[text]])
    assert out == ['Nicholas Lofton "Nick" Hexum sings for 311 and The Nick Hexum Quintet [1].']
    assert [(w.short, w.full) for w in written] == [("Nick Hexum", 'Nicholas Lofton "Nick" Hexum')]


def test_only_the_sentence_whose_citation_holds_the_longer_form_changes() -> None:
    out, written = full_names(["Sandra Oh starred [1].", "Sandra Oh won awards [2]."], [[OH], ["Sandra Oh won awards."]])
    assert out == ["Sandra Miju Oh starred [1].", "Sandra Oh won awards [2]."]
    assert [(w.sentence_index, w.short, w.full) for w in written] == [(0, "Sandra Oh", "Sandra Miju Oh")]


DESIGNER = {**DOCS, "marrick.md": "# Engineers\n\nTobias Aldous Marrick (1770-1841) was an English engineer. "
                                  "Tobias Aldous Marrick designed the Linden Bridge and two canals.\n"}
DESIGNED = "Who designed the Linden Bridge and two canals?"
SHORT = answering("Tobias Marrick designed the Linden Bridge and two canals [{n}].", "Tobias Aldous Marrick designed")


@pytest.fixture()
def eng(tmp_path: Path):
    e = make_engine(tmp_path, DESIGNER)
    yield e
    e.close()


def test_the_delivered_answer_names_the_person_as_the_cited_block_does(eng: Engine) -> None:
    assert AnswerConfig().full_names is True
    r = ask(eng, ScriptedLLM([SHORT]), DESIGNED)
    assert not r.fallback
    assert r.answer == "Tobias Aldous Marrick designed the Linden Bridge and two canals [1]."
    # the verdict is on the sentence as the model wrote it; the trace says what was written in full
    assert [c.sentence for c in r.claims] == ["Tobias Marrick designed the Linden Bridge and two canals [1]."]
    events = [e for e in eng.trace(r.trace_id)["events"] if e["name"] == "NAME_WRITTEN_IN_FULL"]
    assert [(e["data"]["short"], e["data"]["full"]) for e in events] == [("Tobias Marrick", "Tobias Aldous Marrick")]


def test_switched_off_the_name_is_delivered_as_the_model_wrote_it(eng: Engine) -> None:
    r = ask(eng, ScriptedLLM([SHORT]), DESIGNED, config=OPEN.model_copy(update={"full_names": False}))
    assert r.answer == "Tobias Marrick designed the Linden Bridge and two canals [1]."
    assert not [e for e in eng.trace(r.trace_id)["events"] if e["name"] == "NAME_WRITTEN_IN_FULL"]


@pytest.mark.parametrize(("sentence", "text"), [
    # the cited text names two bridges: the verified sentence is about the one it calls short
    ("The Linden Bridge was designed by Tobias Marrick [1].",
     "The Linden Bridge was designed by Tobias Marrick. The Linden Railway Bridge was designed by Anna Kovacs in 1902."),
    # and two people: the founder, and his son with a middle name
    ("Smith Ltd was founded by John Smith in 1950 [1].",
     "John Smith founded Smith Ltd in 1950. His son John Adam Smith sold Smith Ltd in 1990."),
    ("Gerald McRaney starred in it [1].", "Gerald Lee McRaney was born in 1947. His father, Gerald McRaney, was a farmer."),
    # the short form after a lower-case "the"
    ("The Linden Bridge was designed by Tobias Marrick [1].",
     "The Linden Railway Bridge was designed by Anna Kovacs, and the Linden Bridge by Tobias Marrick."),
])
def test_a_longer_form_is_not_written_where_the_cited_text_also_uses_the_short_one(sentence: str, text: str) -> None:
    out, written = full_names([sentence], [[text]])
    assert out == [sentence] and written == []


def test_a_short_form_on_its_own_in_another_cited_chunk_keeps_the_name_as_verified() -> None:
    out, written = full_names(["Sandra Oh starred [1]."], [[OH, "Sandra Oh is a Korean name; Sandra Oh Lee sings."]])
    assert out == ["Sandra Oh starred [1]."] and written == []


TWO_BRIDGES = {"bridges.md": "# Bridges of Linden\n\nThe Linden Bridge was designed by Tobias Marrick. "
                             "The Linden Railway Bridge was designed by Anna Kovacs in 1902.\n"}


def test_the_delivered_sentence_names_the_bridge_the_verified_one_names(tmp_path: Path) -> None:
    e = make_engine(tmp_path, TWO_BRIDGES)
    reply = answering("The Linden Bridge was designed by Tobias Marrick [{n}].", "Tobias Marrick",
                      "The Linden Bridge was designed by Tobias Marrick.")
    r = ask(e, ScriptedLLM([reply]), "Who designed the Linden Bridge?")
    assert not r.fallback
    assert r.answer == "The Linden Bridge was designed by Tobias Marrick [1]."
    assert [c.sentence for c in r.claims if c.kept] == [r.answer]
    assert not [ev for ev in e.trace(r.trace_id)["events"] if ev["name"] == "NAME_WRITTEN_IN_FULL"]
    e.close()
