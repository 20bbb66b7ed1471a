"""Quotes constrained to the context's own text (answer/contract.verbatim_draft_schema) and the
grammar that carries them to llama.cpp (models/llm/json_grammar). The real model's constrained
reply: tests/test_models_llm.py, `test_the_real_model_quotes_the_context_verbatim_under_the_grammar`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ValidationError

from cograg.answer.answerer import AnswerConfig
from cograg.answer.contract import (DraftAnswer, DraftCitation, EvidenceFirstDraft, locate_quote, quote_choices,
                                    verbatim_draft_schema)
from cograg.models import ModelError
from cograg.models.llm.json_grammar import gbnf_literal, json_constant_literal, json_schema_to_gbnf
from cograg.models.llm.types import check_enforced_schema, narrowed_schema
from cograg.retrieval.packing import ContextBlock
from cograg.testing import ScriptedLLM
from tests.test_answer import OPEN, answering, ask, block_number, make_engine

BRIDGE = ("The council resolved to build a crossing. The design was entrusted to Tobias Marrick, who proposed "
          "seven arches; work began in 1806. The bridge opened in 1811.")
TEA = '银雾茶树品种于1987年育成。它的"叶片"较大，适合制作绿茶。'


def block(n: int, *chunks: str) -> ContextBlock:
    return ContextBlock(citation_id=n, doc_id=f"d{n}", chunk_ids=[f"c{n}-{i}" for i in range(len(chunks))],
                        chunk_texts=list(chunks), text="\n\n".join(chunks), token_count=50, best_rank=n,
                        source=f"s{n}", title=f"t{n}")


def test_quote_choices_are_runs_of_up_to_three_sentences_or_of_clauses_within_one():
    choices = quote_choices(BRIDGE)
    assert "The council resolved to build a crossing." in choices
    assert ("The council resolved to build a crossing. The design was entrusted to Tobias Marrick, who proposed "
            "seven arches; work began in 1806.") in choices  # a run, with the text between as it stands
    assert BRIDGE in choices  # three sentences
    assert "work began in 1806." in choices  # a clause (split at the semicolon)
    assert "who proposed seven arches" in choices and "The design was entrusted to Tobias Marrick" in choices
    assert "Tobias Marrick, who proposed" not in choices  # clauses are whole: no start inside one
    assert "它的\"叶片\"较大" in quote_choices(TEA) and "适合制作绿茶。" in quote_choices(TEA)
    assert all(c in BRIDGE for c in choices)
    four = "One a. Two b. Three c. Four d."
    assert four not in quote_choices(four) and "Two b. Three c. Four d." in quote_choices(four)


# a paragraph of a hard-wrapped Markdown file (examples/corpus/tram_network.md), as its chunk holds it
WRAPPED = ("The city bought the company in 1901 and electrified the network. The first\n"
           "electric tram ran on **14 May 1903**, crossing the River Vell on the Linden\n"
           "Bridge, which had been widened and strengthened for the purpose.")
WRAPPED_SENTENCE = WRAPPED[WRAPPED.index("The first"):]


def test_a_hard_wrapped_file_is_quoted_by_whole_sentences_not_by_its_lines():
    choices = quote_choices(WRAPPED)
    assert WRAPPED_SENTENCE in choices
    # the line the model was held to before: "electric tram ran on … on the Linden"
    assert not any(c.startswith("electric tram") or c.endswith("the Linden") for c in choices)
    # no quote given: the chunk's sentence closest to the claim stands, whole
    _, quote, outcome, _ = locate_quote("", "The first electric tram ran on 14 May 1903.", block(1, WRAPPED))
    assert (quote, outcome) == (WRAPPED_SENTENCE, "missing")


def test_the_enforced_draft_admits_only_block_ids_and_verbatim_context_text():
    blocks = [block(1, BRIDGE), block(2, TEA, "第二块没有句号")]
    schema = verbatim_draft_schema(blocks)
    assert schema is not None
    check_enforced_schema(DraftAnswer, schema)  # what chat_json checks before enforcing it
    ok = {"answer": "x [2]", "citations": [{"id": 2, "quote": '它的"叶片"较大，适合制作绿茶。'}], "fallback": False}
    assert schema.model_validate(ok).citations[0].quote == '它的"叶片"较大，适合制作绿茶。'
    assert schema.model_validate({"answer": "x", "citations": [{"id": 2, "quote": "第二块没有句号"}]})
    for bad in ({"id": 3, "quote": "The bridge opened in 1811."},  # a block that is not there
                {"id": 1, "quote": "The bridge opened in 1812."},  # not the text
                {"id": 1, "quote": "The bridge opened in 1811. 银雾茶树品种于1987年育成。"},  # across chunks
                {"id": 1}):  # no quote
        with pytest.raises(ValidationError):
            schema.model_validate({"answer": "x", "citations": [bad]})
    # the reply is parsed with DraftAnswer, so whatever the narrow schema admits is a valid draft
    assert DraftAnswer.model_validate(ok).citations[0].id == 2
    assert verbatim_draft_schema([block(1, "短")]) is None  # nothing that can stand as a quote


def test_a_narrowed_schema_must_narrow_the_shown_one():
    class Other(BaseModel):
        answer: str
        citations: list[DraftCitation] = []
        fallback: bool = False

    narrowed = narrowed_schema(Other, "NarrowOther", answer=Literal["a"])
    with pytest.raises(ModelError):
        check_enforced_schema(DraftAnswer, narrowed)  # the same fields, but not narrowed from DraftAnswer
    check_enforced_schema(Other, narrowed)
    with pytest.raises(ModelError):
        narrowed_schema(DraftAnswer, "Bad", nope=str)
    assert narrowed.model_fields["answer"].is_required() and not narrowed.model_fields["fallback"].is_required()


def test_string_constants_become_literals_the_model_can_write():
    # llama-cpp-python's converter writes json.dumps(value): "\u94f6…" escapes a model never writes,
    # and a quotation mark's JSON escape ends the GBNF literal early
    assert json_constant_literal('银"雾\\') == gbnf_literal('"银\\"雾\\\\"') == '"\\"银\\\\\\"雾\\\\\\\\\\""'
    schema = verbatim_draft_schema([block(1, TEA)])
    grammar = json_schema_to_gbnf(json.dumps(schema.model_json_schema(), sort_keys=True))
    rule = next(line for line in grammar.splitlines() if line.startswith("VerbatimCitation-quote ::="))
    assert '"\\"银雾茶树品种于1987年育成。\\""' in rule and "\\u" not in rule
    assert '"\\"它的\\\\\\"叶片\\\\\\"较大，适合制作绿茶。\\""' in rule
    assert next(line for line in grammar.splitlines() if line.startswith("VerbatimCitation-id ::=")).endswith('"1"')


def test_the_answerer_enforces_verbatim_quotes_unless_told_not_to(tmp_path: Path):
    eng = make_engine(tmp_path)
    try:
        for config, constrained in ((OPEN, True), (OPEN.model_copy(update={"verbatim_quotes": False}), False)):
            llm = ScriptedLLM([answering("The Linden Bridge has seven arches [{n}].", "seven arches",
                                         quote="It has seven arches.")])
            r = ask(eng, llm, "How many arches does the Linden Bridge have?", config=config)
            assert not r.fallback and r.citations[0].quote == "It has seven arches."
            enforced = llm.calls[0].kwargs["schema"]
            assert (enforced not in (DraftAnswer, EvidenceFirstDraft)) is constrained
            if constrained:  # what the backend may write: this turn's blocks and their text only
                n = block_number(llm.calls[0].messages, "seven arches")
                enforced.model_validate({"answer": "x", "citations": [{"id": n, "quote": "It has seven arches."}]})
                with pytest.raises(ValidationError):
                    enforced.model_validate({"answer": "x", "citations": [{"id": n, "quote": "It has 7 arches."}]})
    finally:
        eng.close()


def test_answer_config_default_is_on():
    assert AnswerConfig().verbatim_quotes is True


def test_evidence_first_asks_for_the_quotes_before_the_answer(tmp_path: Path):
    """`answer.evidence_first`: the prompt and the enforced schema put `citations` before `answer`,
    the reply is read in that order, and the answer goes through the same contract."""
    eng = make_engine(tmp_path)
    try:
        def quotes_first(messages):
            n = block_number(messages, "seven arches")
            return json.dumps({"citations": [{"id": n, "quote": "It has seven arches."}],
                               "answer": f"The Linden Bridge has seven arches [{n}].", "fallback": False})

        llm = ScriptedLLM([quotes_first])
        config = OPEN.model_copy(update={"evidence_first": ["en", "zh"]})
        r = ask(eng, llm, "How many arches does the Linden Bridge have?", config=config)
        assert not r.fallback and "seven arches [1]" in r.answer
        assert r.citations[0].quote == "It has seven arches."
        enforced = llm.calls[0].kwargs["schema"]
        assert list(enforced.model_fields) == ["citations", "answer", "fallback"]
        system = llm.calls[0].messages[0].content
        assert '{"citations": [{"id": 1, "quote": "..."}], "answer": "...", "fallback": false}' in system
        assert "First copy the evidence" in system
        # switched off, the answer comes first, with v3's words
        llm = ScriptedLLM([answering("The Linden Bridge has seven arches [{n}].", "seven arches",
                                     quote="It has seven arches.")])
        ask(eng, llm, "How many arches does the Linden Bridge have?", config=OPEN.model_copy(update={"evidence_first": []}))
        assert list(llm.calls[0].kwargs["schema"].model_fields) == ["answer", "citations", "fallback"]
        assert "First copy the evidence" not in llm.calls[0].messages[0].content
    finally:
        eng.close()


def test_the_grammar_generates_an_evidence_first_reply_in_its_declared_order():
    """The grammar of the quotes-first reply, plain and verbatim-narrowed, starts with `citations`;
    every other schema keeps the sorted order its grammar always had (their prompts were measured
    with it)."""
    from cograg.models.llm.types import generation_order

    def root(schema: type[BaseModel]) -> str:
        gbnf = json_schema_to_gbnf(json.dumps(schema.model_json_schema(), sort_keys=True), generation_order(schema))
        return next(line for line in gbnf.splitlines() if line.startswith("root ::="))

    verbatim = verbatim_draft_schema([block(1, BRIDGE)], EvidenceFirstDraft)
    for schema in (EvidenceFirstDraft, verbatim):
        assert generation_order(schema) == ("citations", "answer", "fallback")
        assert root(schema).index("citations-kv") < root(schema).index("answer-kv"), root(schema)
    assert generation_order(DraftAnswer) == () == generation_order(verbatim_draft_schema([block(1, BRIDGE)]))
    assert root(DraftAnswer).index("answer-kv") < root(DraftAnswer).index("citations-kv")
    with pytest.raises(ValidationError):  # the quotes are required, as the grammar writes them first
        EvidenceFirstDraft.model_validate({"answer": "x"})


def test_evidence_first_is_per_language_and_off_by_default(tmp_path: Path):
    """Off by default (a wrong date on the example corpus outweighed two calibration questions);
    per language when set."""
    assert AnswerConfig().evidence_first == []
    assert AnswerConfig(evidence_first=True).evidence_first == ["en", "zh"]
    assert AnswerConfig(evidence_first="false").evidence_first == []
    eng = make_engine(tmp_path)
    try:
        order = {}
        for question, needle, text in (("How many arches does the Linden Bridge have?", "seven arches",
                                        "The Linden Bridge has seven arches [{n}]."),
                                       ("银雾是哪一年育成的？", "1978", "银雾于1978年育成[{n}]。")):
            llm = ScriptedLLM([answering(text, needle)])
            ask(eng, llm, question, config=OPEN.model_copy(update={"evidence_first": ["en"]}))
            order[question[:2]] = list(llm.calls[0].kwargs["schema"].model_fields)[0]
        assert order == {"Ho": "citations", "银雾": "answer"}
    finally:
        eng.close()
