"""The index's search behaviour, one suite for both backends (SPEC I: "the same test suite runs
against both implementations"): `sqlite` (FTS5 + stored vectors) and `milvus:milvus.db` (Milvus
Lite). ACL inside the query, document scope, tag policy, deletes without ghosts, Chinese BM25 and
the shape of results. What only one backend has (Milvus's filter fields, its recovery, the SQLite
schema) is tested in that backend's own module."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from cograg.config import Settings
from cograg.engine import Engine
from cograg.retrieval import Principal
from cograg.retrieval.policy import load_policy
from tests.fakes import HashingEmbedder
from tests.test_retrieval import named, write_corpus

HAS_MILVUS = all(importlib.util.find_spec(m) for m in ("pymilvus", "milvus_lite"))
BACKENDS = [pytest.param("sqlite", id="sqlite"),
            pytest.param("milvus:milvus.db", id="milvus-lite", marks=pytest.mark.skipif(
                not HAS_MILVUS, reason="needs pymilvus and milvus-lite: pip install 'cograg[scale]'"))]
MODES = ("bm25", "vector", "hybrid")
OUTSIDER, INSIDER = Principal(user="bob", groups=["staff"]), Principal(user="ann", groups=["finance"])


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus")


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path, corpus: Path):
    eng = Engine.open(tmp_path / "store", settings=Settings(index=request.param), embedder=HashingEmbedder())
    eng.ingest([corpus / n for n in ("tea.md", "tram.md", "bridge.txt")])
    eng.ingest([corpus / "secret.md"], acl=["finance"], tags=["secret"])
    yield eng
    eng.close()


def _rows_of(engine: Engine, doc_id: str) -> set[int]:
    return {int(r[0]) for r in engine.store.conn.execute("SELECT id FROM chunks WHERE doc_id=?", (doc_id,))}


def _all_rows(engine: Engine) -> set[int]:
    return {int(r[0]) for r in engine.store.conn.execute("SELECT id FROM chunks")}


def test_every_mode_finds_the_right_document(engine: Engine):
    for mode in MODES:
        assert engine.search("Tobias Marrick bridge arches", mode=mode, k=3).hits[0].title == "bridge", mode
        assert engine.search("银雾 品种 育成", mode=mode, k=3).hits[0].source.endswith("tea.md"), mode


def test_result_shape(engine: Engine):
    store, qvec = engine.store, HashingEmbedder().embed_queries(["tram fares zone"])[0]
    for found in (store.keyword_search("tram fares zone", 3), store.vector_search(qvec, 3)):
        assert 0 < len(found) <= 3
        assert all(isinstance(r, int) and isinstance(s, float) for r, s in found)
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
        assert {r for r, _ in found} <= _all_rows(engine)
    assert all(-1.0001 <= s <= 1.0001 for _, s in store.vector_search(qvec, 50))  # cosines
    assert all(s > 0 for _, s in store.keyword_search("tram fares zone", 50))
    res = engine.search("Tobias Marrick bridge", mode="hybrid", k=2)
    top = res.hits[0]
    assert set(top.retrievers) == {"bm25", "vector"} and top.retrievers["bm25"].rank == 1
    assert res.evidence_source == "vector_cosine" and 0 < res.evidence_score <= 1.0001
    assert len(engine.search("tram", mode="hybrid", k=1).hits) == 1


def test_acl_filters_inside_the_query_before_top_k(engine: Engine):
    secret = named(engine, "secret")
    secret_rows = _rows_of(engine, secret.doc_id)
    for mode in MODES:
        assert all(h.doc_id != secret.doc_id for h in engine.search("secret budget", mode=mode,
                                                                    principal=OUTSIDER).hits), mode
        assert engine.search("secret budget", mode=mode, k=1, principal=INSIDER).hits[0].doc_id == secret.doc_id
    qvec = HashingEmbedder().embed_queries(["secret budget"])[0]
    top = engine.store.vector_search(qvec, 1, OUTSIDER.acl_keys())
    assert len(top) == 1 and top[0][0] not in secret_rows  # k allowed hits, not k hits filtered afterwards
    assert engine.store.vector_search(qvec, 1, INSIDER.acl_keys())[0][0] in secret_rows
    assert not secret_rows & {r for r, _ in engine.store.keyword_search("secret budget 2025", 50, [])}


def test_document_scope_every_mode_and_never_wider_than_the_acl(engine: Engine):
    secret = named(engine, "secret")
    others = [d.doc_id for d in engine.documents() if d.doc_id != secret.doc_id]
    for mode in MODES:
        scoped = engine.search("secret budget", mode=mode, k=10, principal=INSIDER, doc_ids=[secret.doc_id]).hits
        assert scoped and {h.doc_id for h in scoped} == {secret.doc_id}, mode
        rest = engine.search("secret budget", mode=mode, k=10, principal=INSIDER, doc_ids=others).hits
        assert secret.doc_id not in {h.doc_id for h in rest}, mode
        assert engine.search("secret budget", mode=mode, k=10, doc_ids=[]).hits == []
        assert engine.search("secret budget", mode=mode, k=10, principal=OUTSIDER,
                             doc_ids=[secret.doc_id]).hits == [], mode


def test_tag_policy_applies(tmp_path: Path, engine: Engine):
    policy = tmp_path / "policy.yaml"
    policy.write_text("deny_tags: [secret]\n", encoding="utf-8")
    engine.components.retriever.get().policy = load_policy(policy)
    secret = named(engine, "secret")
    for mode in MODES:
        res = engine.search("secret budget", mode=mode, principal=INSIDER)
        assert all(h.doc_id != secret.doc_id for h in res.hits) and res.filtered_by_policy >= 1, mode


def test_delete_and_replace_leave_no_ghosts(engine: Engine, corpus: Path):
    store = engine.store
    bridge = named(engine, "bridge")
    qvec = HashingEmbedder().embed_queries(["Tobias Marrick bridge arches"])[0]
    engine.delete_document(bridge.doc_id)
    assert store.keyword_search("Marrick", 50) == []
    assert {r for r, _ in store.vector_search(qvec, 50)} == _all_rows(engine)  # every live chunk, no others
    assert all(h.doc_id != bridge.doc_id for m in MODES for h in engine.search("Tobias Marrick", mode=m).hits)
    assert store.keyword_search("passes", 50)
    (corpus / "tram.md").write_text("# Tram network\n\n## Fares\n\nA single ticket now costs EUR 3.\n",
                                    encoding="utf-8")
    engine.ingest([corpus / "tram.md"])
    assert store.keyword_search("passes", 50) == []  # only the old version said "Day passes"
    assert {r for r, _ in store.vector_search(qvec, 50)} == _all_rows(engine)
    assert "EUR 3" in engine.search("single ticket", mode="bm25", k=1).hits[0].text


def test_chinese_bm25(engine: Engine):
    tea_rows = _rows_of(engine, named(engine, "tea").doc_id)
    for query in ("银雾", "耐寒品种", "研究所", "哪一年育成了银雾？"):
        hits = engine.store.keyword_search(query, 5)
        assert hits and hits[0][0] in tea_rows and hits[0][1] > 0, query
    assert engine.store.keyword_search("的 了 ？", 5) == []  # particles and punctuation alone match nothing
