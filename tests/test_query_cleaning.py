"""A query is cleaned the way ingestion cleaned the documents (SPEC A2, A6): invisible format
characters copied along with a word do not split it, and a lone surrogate does not reach a result
that must serialise as JSON (F1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cograg.config import Settings
from cograg.engine import Engine
from cograg.index.analyzer import analyze
from cograg.text import without_invisible
from tests.fakes import HashingEmbedder


@pytest.fixture()
def engine(tmp_path: Path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    # the document as a web page or PDF gives it: a soft hyphen and a zero-width space inside words
    (corpus / "harbour.md").write_text("# Port\n\nThe har\u00adbour crane lifts forty tonnes. A kest\u200brel nests "
                                       "on its jib.\n", encoding="utf-8")
    (corpus / "tea.md").write_text("# Tea\n\nThe institute bred a hardy tea cultivar.\n", encoding="utf-8")
    eng = Engine.open(settings=Settings(store=tmp_path / "store"), embedder=HashingEmbedder())
    eng.ingest([corpus])
    yield eng
    eng.close()


@pytest.mark.parametrize("query", ["har\u00adbour", "kest\u200brel", "kest\u2060rel", "harbour", "KESTREL"])
def test_a_word_with_an_invisible_character_finds_what_the_plain_word_finds(engine: Engine, query: str):
    hits = engine.search(query, k=5, mode="bm25").hits
    assert [h.source for h in hits][:1] == [next(h.source for h in engine.search("harbour", k=5, mode="bm25").hits)]


def test_a_lone_surrogate_in_a_query_still_gives_a_result_that_serialises(engine: Engine):
    result = engine.search("harbour \ud800 crane", k=5)
    assert result.hits and "\ud800" not in result.query
    assert '"hits"' in result.model_dump_json()


def test_documents_and_queries_meet_on_the_same_terms():
    assert analyze("har\u00adbour kest\u200brel") == analyze("harbour kestrel")
    assert without_invisible("tab\tand\nnewline stay") == "tab\tand\nnewline stay"
    assert without_invisible("bell\x07gone \ue000private") == "bellgone private"
