"""Search scoped to some documents (seed 004's docId) and the cosine floor (seed 003's
similarityThreshold), in every search mode and together with the ACL."""

from __future__ import annotations

from pathlib import Path

import pytest

from cograg.config import Settings
from cograg.engine import Engine
from cograg.retrieval import Principal
from tests.fakes import HashingEmbedder

DOCS = {"a.md": "# Alpha\n\nThe harbour crane lifts forty tonnes.\n",
        "b.md": "# Beta\n\nHarbour crane.\n",
        "c.md": "# Gamma\n\nThe harbour crane stands on pier four.\n"}


@pytest.fixture()
def engine(tmp_path: Path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in DOCS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    eng = Engine.open(settings=Settings(store=tmp_path / "store"), embedder=HashingEmbedder())
    eng.ingest([corpus / "a.md", corpus / "b.md"])
    eng.ingest([corpus / "c.md"], acl=["ops"])
    yield eng
    eng.close()


def ids(engine: Engine) -> dict[str, str]:
    return {Path(d.source_path).name: d.doc_id for d in engine.documents()}


@pytest.mark.parametrize("mode", ["bm25", "vector", "hybrid"])
def test_doc_ids_limit_every_mode(engine: Engine, mode: str) -> None:
    doc = ids(engine)
    everything = engine.search("harbour crane", k=10, mode=mode)
    assert {h.doc_id for h in everything.hits} == set(doc.values())
    scoped = engine.search("harbour crane", k=10, mode=mode, doc_ids=[doc["b.md"]])
    assert [h.doc_id for h in scoped.hits] == [doc["b.md"]]
    assert engine.search("harbour crane", k=10, mode=mode, doc_ids=[]).hits == []


def test_scope_never_widens_the_acl(engine: Engine) -> None:
    doc = ids(engine)
    outsider = Principal(groups=["staff"])
    hits = engine.search("harbour crane", k=10, doc_ids=[doc["c.md"], doc["a.md"]], principal=outsider).hits
    assert {h.doc_id for h in hits} == {doc["a.md"]}
    insider = Principal(groups=["ops"])
    hits = engine.search("harbour crane", k=10, doc_ids=[doc["c.md"]], principal=insider).hits
    assert {h.doc_id for h in hits} == {doc["c.md"]}


def test_cosine_floor_drops_weak_vector_hits_and_keeps_keyword_only_hits(engine: Engine) -> None:
    full = engine.search("harbour crane", k=10, mode="hybrid")
    cosines = sorted(h.retrievers["vector"].score for h in full.hits)
    assert cosines[0] < cosines[-1]
    floor = (cosines[0] + cosines[-1]) / 2
    kept = engine.search("harbour crane", k=10, mode="hybrid", min_vector_cosine=floor).hits
    assert kept and all(h.retrievers["vector"].score >= floor for h in kept)
    assert len(kept) < len(full.hits)
    # a keyword-only search has no cosine to compare: the floor leaves it alone
    assert len(engine.search("harbour crane", k=10, mode="bm25", min_vector_cosine=0.99).hits) == 3
