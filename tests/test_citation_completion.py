"""Citation completion (answer/completion.py): a sentence that joins two passages but cites one gets
the other cited too, only where one block of the context holds everything the sentence adds to the
question, and the verifier still decides."""

from __future__ import annotations

import json
from pathlib import Path

from cograg.answer.completion import complete_citations
from cograg.answer.contract import DraftAnswer, DraftCitation, validate_draft
from cograg.models.judge import LexicalJudge
from cograg.retrieval.packing import ContextBlock
from cograg.testing import ScriptedLLM
from tests.test_answer import make_engine, with_models
from tests.test_citation_contract import OPEN, block_of

FILM = ("In Love and War (1987 film)\nIn Love and War is a television film starring James Woods. "
        "The film is based on the true story of James Stockdale.")
OFFICER = ("James Stockdale\nJames Stockdale was a United States Navy vice admiral. "
           "He was awarded the Medal of Honor in the Vietnam War.")
OTHER = "My Name Is Bill W.\nMy Name Is Bill W. is a television movie starring James Woods."
QUESTION = "The real life person that James Woods' character is based on in the film In Love and War was awarded what medal?"
ANSWER = ("The real life person that James Woods' character is based on in the film In Love and War was "
          "awarded the Medal of Honor.")


def block(n: int, text: str) -> ContextBlock:
    return ContextBlock(citation_id=n, doc_id=f"d{n}", chunk_ids=[f"c{n}"], chunk_texts=[text], text=text,
                        token_count=len(text.split()), best_rank=n, title=f"t{n}", source=f"/docs/{n}.md")


BLOCKS = [block(1, FILM), block(2, OTHER), block(3, OFFICER)]


def test_the_block_that_holds_what_the_sentence_adds_is_cited_too() -> None:
    answer, quotes, completed = complete_citations(ANSWER[:-1] + " [1].", BLOCKS, QUESTION)
    assert answer == ANSWER[:-1] + " [1][3]." and completed == 1
    # the quote is the added block's own sentence that holds the medal, verbatim
    assert quotes == {"3": "He was awarded the Medal of Honor in the Vietnam War."}


def test_through_validation_the_added_citation_has_a_verbatim_quote_and_is_counted() -> None:
    cited = ANSWER[:-1] + " [1]."
    v = validate_draft(DraftAnswer(answer=cited, citations=[DraftCitation(id=1, quote="")]), BLOCKS,
                       question=QUESTION)
    assert v.answer.endswith("[1][2].") and [c.doc_id for c in v.citations] == ["d1", "d3"]
    assert v.citations[1].quote in OFFICER
    assert v.issues.completed_citations == 1 and v.issues.completed_ids == ["3"]
    # without the question nothing is completed (the labelled contract cases validate drafts alone)
    plain = validate_draft(DraftAnswer(answer=cited, citations=[DraftCitation(id=1, quote="")]), BLOCKS)
    assert plain.issues.completed_citations == 0 and len(plain.citations) == 1


def test_what_no_single_block_holds_is_not_completed() -> None:
    # the medal is in one block, "Korea" in none: the sentence stays with the block it cited
    claim = ANSWER.replace("Medal of Honor", "Medal of Honor in Korea")[:-1] + " [1]."
    assert complete_citations(claim, BLOCKS, QUESTION) == (claim, {}, 0)
    # what the sentence adds split over two other blocks: no one block backs it
    split = [block(1, FILM), block(2, "He received the Medal of Honor."), block(3, "He served in Vietnam.")]
    assert complete_citations(ANSWER[:-1] + " in Vietnam [1].", split, QUESTION)[2] == 0
    assert complete_citations(ANSWER[:-1] + " [1].", split, QUESTION)[2] == 1


def test_uncited_sentences_and_complete_citations_are_left_alone() -> None:
    assert complete_citations(ANSWER, BLOCKS, QUESTION) == (ANSWER, {}, 0)
    both = ANSWER[:-1] + " [1][3]."
    assert complete_citations(both, BLOCKS, QUESTION) == (both, {}, 0)
    # the sentence adds nothing beyond the question and its own block
    own = "In Love and War is based on the true story of James Stockdale [1]."
    assert complete_citations(own, BLOCKS, QUESTION) == (own, {}, 0)


def test_a_model_quote_for_the_added_block_is_kept() -> None:
    draft = DraftAnswer(answer=f"{ANSWER[:-1]} [1]. James Stockdale was a vice admiral [3].",
                        citations=[DraftCitation(id=1, quote="based on the true story of James Stockdale"),
                                   DraftCitation(id=3, quote="James Stockdale was a United States Navy vice admiral.")])
    v = validate_draft(draft, BLOCKS, question=QUESTION)
    assert v.answer.startswith(ANSWER[:-1] + " [1][2].")
    assert v.citations[1].quote == "James Stockdale was a United States Navy vice admiral."


def test_a_fallback_draft_is_not_completed() -> None:
    v = validate_draft(DraftAnswer(answer=ANSWER[:-1] + " [1].", citations=[DraftCitation(id=1, quote="")],
                                   fallback=True), BLOCKS, question=QUESTION)
    assert v.issues.completed_citations == 0


# --------------------------------------------------------------------------- through the answerer

DOCS = {"bridge.md": "# Linden Bridge\n\nThe Linden Bridge was designed by Tobias Marrick. It has seven arches.\n",
        "marrick.md": "# Tobias Marrick\n\nTobias Marrick was born in Harwick. He trained as a stonemason.\n",
        "rhine.md": "# Rhine\n\nThe Rhine Bridge opened in 1870. It has twelve spans.\n"}


def _answering(tmp_path: Path, sentence: str):
    eng = make_engine(tmp_path, DOCS)

    def reply(m):  # the model cites the bridge's block only, as the 1.5B model does
        return json.dumps({"answer": sentence, "citations": [{"id": block_of(m, "designed by Tobias Marrick"),
                                                              "quote": "designed by Tobias Marrick"}],
                           "fallback": False})

    resp = with_models(eng, llm=ScriptedLLM([reply, reply]), judge=LexicalJudge()).answerer(OPEN).answer(
        "Where was the designer of the Linden Bridge born?")
    eng.close()
    return resp


def test_a_bridge_answer_citing_one_block_is_delivered_with_both_verified(tmp_path: Path) -> None:
    resp = _answering(tmp_path, "The designer of the Linden Bridge was born in Harwick.")
    assert not resp.fallback, resp.notes
    assert resp.answer == "The designer of the Linden Bridge was born in Harwick [1][2]."
    assert sorted(Path(c.source).name for c in resp.citations) == ["bridge.md", "marrick.md"]
    (claim,) = resp.claims
    assert claim.kept and claim.verdict == "SUPPORTED" and claim.citation_ids == ["1", "2"]
    assert resp.removed.completed_citations == 1


def test_a_claim_no_block_holds_gets_no_citation_and_is_refused(tmp_path: Path) -> None:
    resp = _answering(tmp_path, "The designer of the Linden Bridge was born in Oxford.")
    assert resp.fallback and "Oxford" not in resp.answer
    assert resp.removed.completed_citations == 0


def test_a_common_word_alone_completes_nothing() -> None:
    # "born" is in the other block, "6 April 1849" in the cited one: what the sentence adds names no
    # one and no number, and a biography that holds "born" says nothing about Robert Young
    painter = block(1, "John William Waterhouse\nJohn William Waterhouse (6 April 1849 – 10 February 1917) was a painter.")
    other = block(2, "Armando Iannucci\nArmando Iannucci (born 28 November 1963) is a Scottish satirist.")
    claim = "Robert Young was born on 6 April 1849 [1]."
    assert complete_citations(claim, [painter, other], "When was Robert Young's birth?") == (claim, {}, 0)
    # the same sentence where what it adds is a name the other block holds is completed
    young = block(2, "Robert Young\nRobert Young was a guitarist. He was born in Glasgow.")
    assert complete_citations("Robert Young was born in Glasgow [1].", [painter, young],
                              "Where was the painter's friend born?")[2] == 1
