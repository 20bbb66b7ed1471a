"""Hybrid retrieval (SPEC A5–A6, B1–B6): indexes, fusion, policy, ACL, reranking, packing."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from cograg.config import Settings
from cograg.engine import Engine
from cograg.errors import ConfigError, StoreError
from cograg.index.analyzer import analyze, fts_query
from cograg.index.sqlite_store import SQLiteStore
from cograg.retrieval import Principal, SearchRequest, load_policy, pack_context, rrf, weighted_fusion
from cograg.retrieval.search import QueryError, Retriever
from tests.fakes import HashingEmbedder

DOCS = {
    "tea.md": "# 茶叶研究所\n\n## 品种\n\n研究所育成了耐寒品种银雾，1978 年育成。\n\n## 历史\n\n研究所创办于 1931 年。\n",
    "tram.md": "# Tram network\n\n## Fares\n\nA single ticket costs EUR 2.10 in zone A. Day passes cost EUR 6.50.\n",
    "bridge.txt": "The Linden Bridge was designed by Tobias Marrick and has seven arches.\n",
    "secret.md": "# Budget\n\nThe secret budget for 2025 is 4.2 million euros.\n",
}


def named(engine: Engine, stem: str):
    return next(d for d in engine.documents() if Path(d.source_path).stem == stem)


def write_corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.fixture()
def engine(tmp_path: Path):
    eng = Engine.open(tmp_path / "store", settings=Settings(), embedder=HashingEmbedder())
    corpus = write_corpus(tmp_path / "corpus")
    eng.ingest([corpus / n for n in ("tea.md", "tram.md", "bridge.txt")])
    eng.ingest([corpus / "secret.md"], acl=["finance"], tags=["secret"])
    yield eng
    eng.close()


def test_analyzer_handles_chinese_english_and_mixed():
    terms = analyze("北京大学的学生 are running BM25 experiments")
    assert "北京大学" in terms and "大学" in terms  # search-mode segmentation: word and sub-word
    assert "run" in terms and "experi" in terms  # stemmed
    assert "are" not in terms and "的" not in terms  # stop words
    assert "bm25" in terms
    assert fts_query("!!! ？？ 😀") is None
    assert fts_query('say "hi"') == '"say" OR "hi"'


def test_fusion_rrf_and_weighted():
    fused = rrf([["a", "b", "c"], ["c", "a"]], k=60)
    assert [k for k, _ in fused] == ["a", "c", "b"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)
    w = weighted_fusion([{"a": 10.0, "b": 0.0}, {"b": 1.0, "a": 0.0}], [0.25, 0.75])
    assert [k for k, _ in w] == ["b", "a"]
    assert dict(w)["b"] == pytest.approx(0.75)


def test_index_rows_follow_chunks(engine: Engine):
    conn = engine.store.conn
    n = engine.store.count_chunks()
    assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0] == n
    assert conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0] == n
    assert engine.store.get_meta("embedder") == "test:hashing"
    assert engine.store.get_meta("embedding_dim") == "64"
    doc = named(engine, "bridge")
    engine.delete_document(doc.doc_id)
    assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0] == n - doc.chunk_count
    assert conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0] == n - doc.chunk_count
    assert all("Marrick" not in h.text for h in engine.search("Marrick arches", mode="bm25").hits)


def test_changed_chunks_reuse_embedding_cache(tmp_path: Path, engine: Engine):
    src = Path(named(engine, "tram").source_path)
    before = engine.components.embedder.get().texts_embedded
    engine.ingest([src])  # unchanged: nothing embedded
    assert engine.components.embedder.get().texts_embedded == before
    src.write_text(src.read_text(encoding="utf-8") + "\n## Night trams\n\nNight trams run on Fridays.\n",
                   encoding="utf-8")
    engine.ingest([src])
    # only the new section is new text; the existing chunk's vector comes from the cache
    assert 0 < engine.components.embedder.get().texts_embedded - before <= named(engine, "tram").chunk_count - 1 + 1
    hits = engine.search("night trams friday", mode="hybrid").hits
    assert "Night trams" in hits[0].text


@pytest.mark.parametrize("mode", ["bm25", "vector", "hybrid"])
def test_modes_find_the_right_document(engine: Engine, mode: str):
    res = engine.search("Tobias Marrick bridge arches", mode=mode, k=3)
    assert res.hits and res.hits[0].title == "bridge"
    res = engine.search("银雾 品种 育成", mode=mode, k=3)
    assert res.hits[0].source.endswith("tea.md")


def test_hybrid_explain_data_and_weighted(engine: Engine):
    res = engine.search("Tobias Marrick bridge", mode="hybrid", k=2)
    top = res.hits[0]
    assert set(top.retrievers) == {"bm25", "vector"}
    assert top.retrievers["bm25"].rank == 1 and top.retrievers["vector"].rank >= 1
    assert res.evidence_source == "vector_cosine" and 0 < res.evidence_score <= 1.0001
    w = engine.search("Tobias Marrick bridge", mode="hybrid", fusion="weighted", k=2)
    assert w.hits[0].title == "bridge"


def test_acl_filters_inside_the_query(engine: Engine):
    outsider = Principal(user="bob", groups=["staff"])
    insider = Principal(user="ann", groups=["finance"])
    for mode in ("bm25", "vector", "hybrid"):
        assert all("secret budget" not in h.text for h in engine.search("secret budget", mode=mode,
                                                                          principal=outsider).hits)
        assert any("secret budget" in h.text for h in engine.search("secret budget", mode=mode,
                                                                      principal=insider).hits)
    # the ACL is applied before top-k: even with k=1 the outsider still gets an allowed hit
    assert engine.search("secret budget", mode="bm25", k=1, principal=outsider).hits == [] or \
        engine.search("secret budget", mode="bm25", k=1, principal=outsider).hits[0].doc_id != \
        named(engine, "secret").doc_id
    assert engine.store.allowed_doc_ids(["user:nobody"]) == {
        d.doc_id for d in engine.documents() if not d.acl}


def test_policy_deny_tags_allow_sources_age_and_snippets(tmp_path: Path, engine: Engine):
    ann = Principal(groups=["finance"])
    pol = tmp_path / "p.yaml"
    pol.write_text("version: v7\ndeny_tags: [secret]\n", encoding="utf-8")
    engine.components.retriever.get().policy = load_policy(pol)
    res = engine.search("secret budget", mode="bm25", principal=ann)
    assert all("secret" not in h.source for h in res.hits) and res.filtered_by_policy >= 1
    assert res.policy_version == "v7"

    pol.write_text("allow_sources: ['*.md']\n", encoding="utf-8")
    engine.components.retriever.get().policy = load_policy(pol)
    assert all(h.source.endswith(".md") for h in engine.search("bridge arches tram", mode="bm25").hits)
    assert engine.components.retriever.get().policy.policy_version().startswith("sha256:")

    old = (datetime.now(UTC) - timedelta(days=400)).timestamp()
    bridge = named(engine, "bridge")
    engine.delete_document(bridge.doc_id)
    os.utime(bridge.source_path, (old, old))  # updated_at is the file's modification time
    engine.ingest([bridge.source_path])
    pol.write_text("max_age_days: 365\nmax_age_action: annotate\nsnippet_visible: false\n", encoding="utf-8")
    engine.components.retriever.get().policy = load_policy(pol)
    hit = engine.search("Tobias Marrick", mode="bm25").hits[0]
    assert hit.annotations == ["old document"] and hit.snippet_visible is False
    pol.write_text("max_age_days: 365\nmax_age_action: downweight\ndownweight_factor: 0.1\n", encoding="utf-8")
    engine.components.retriever.get().policy = load_policy(pol)
    hits = engine.search("Tobias Marrick bridge tram", mode="bm25").hits
    bridge_hit = next(h for h in hits if h.title == "bridge")
    assert bridge_hit.score == pytest.approx(bridge_hit.fused_score * 0.1)


@pytest.mark.parametrize("content, message", [
    ("deny_tags: [a]\nunknown_key: 1\n", "unknown_key: unknown key"),
    ("deny_tags: [a\n", "not valid YAML"),
    ("- a\n- b\n", "must be a mapping"),
    ("max_age_action: delete\n", "max_age_action"),
])
def test_bad_policy_files_are_clear_errors(tmp_path: Path, content: str, message: str):
    p = tmp_path / "corpus_policy.yaml"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_policy(p)
    with pytest.raises(ConfigError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")


def test_bad_queries(engine: Engine):
    with pytest.raises(QueryError, match="empty"):
        engine.search("   ")
    for k in (0, -3):
        with pytest.raises(QueryError, match="k"):
            engine.search("tram", k=k)
    res = engine.search("?!。… 😀🎉", mode="hybrid")
    assert res.hits == [] and "no searchable words" in res.notes[0]
    huge = ("tram fares zone " * 7000)[:100_000]
    res = engine.search(huge, mode="hybrid")
    assert res.hits and any("truncated" in n for n in res.notes)


def test_store_refuses_other_embedder(engine: Engine):
    other = HashingEmbedder(dim=32, name="test:other")
    engine.store.indexer.embedder = other
    with pytest.raises(StoreError, match="built with embedder 'test:hashing'"):
        engine.store.indexer.check_store(engine.store.conn)
    retriever = Retriever(engine.store, embedder=other)
    with pytest.raises(StoreError, match="test:hashing"):
        retriever.search(SearchRequest(query="tram", mode="vector"))
    retriever.close()


def test_query_variants_are_fused(engine: Engine):
    base = engine.search("Marrick", mode="bm25", k=5)
    fused = engine.search("Marrick", mode="bm25", k=5, variants=["EUR 6.50 day pass"])
    stems = {Path(h.source).stem for h in fused.hits}
    assert stems >= {"bridge", "tram"}
    assert "tram" not in {Path(h.source).stem for h in base.hits}


class KeywordReranker:
    name = "test:keyword"

    def __init__(self, word: str) -> None:
        self.word = word

    def score(self, query: str, passages: list[str]) -> list[float]:
        return [0.9 if self.word in p else 0.1 for p in passages]


def test_reranker_reorders_and_sets_evidence(engine: Engine):
    engine.components.retriever.get().reranker = KeywordReranker("seven arches")
    res = engine.search("tram bridge fares arches", mode="bm25", k=3)
    assert "seven arches" in res.hits[0].text
    assert res.evidence_score == pytest.approx(0.9) and res.evidence_source == "reranker:test:keyword"
    assert res.hits[0].rerank_score == pytest.approx(0.9)
    # the best visible cosine travels with a reranked result: the refusal gate still checks it
    reranked = engine.search("tram bridge fares arches", k=3)
    plain = engine.search("tram bridge fares arches", k=3, rerank=False)
    assert reranked.evidence_source == "reranker:test:keyword" and plain.evidence_source == "vector_cosine"
    assert plain.evidence_score is not None and reranked.best_cosine == pytest.approx(plain.evidence_score)


def _hit(doc: str, seq: int, text: str, start: int, tokens: int, score: float = 1.0):
    from cograg.retrieval.models import SearchHit

    return SearchHit(chunk_id=f"{doc}-{seq}", doc_id=doc, seq=seq, text=text, title=doc.upper(),
                     source=f"/{doc}.md", start=start, end=start + len(text), token_count=tokens, score=score)


def test_pack_context_budget_merge_and_order():
    hits = [_hit("a", 1, "bcdef", 1, 10), _hit("b", 0, "other doc", 0, 10), _hit("a", 0, "abc", 0, 10),
            _hit("c", 5, "third doc", 0, 10), _hit("d", 0, "too big", 0, 100)]
    pack = pack_context(hits, budget_tokens=40)
    assert pack.dropped_chunk_ids == ["d-0"]  # whole chunks only: the big one is left out
    merged = pack.blocks[0]
    assert merged.chunk_ids == ["a-0", "a-1"] and merged.text == "abcdef"  # overlap removed once
    assert [b.citation_id for b in pack.blocks] == [1, 2, 3]
    assert pack.blocks[0].label.startswith("[1] A — /a.md")
    edges = pack_context(hits[:4], budget_tokens=40, order="edges_first")
    ranks = [b.best_rank for b in edges.blocks]
    assert ranks[0] == 1 and ranks[-1] == 2  # best two at the edges, weakest in the middle
    assert "[2]" in edges.render()
    with pytest.raises(ValueError):
        pack_context(hits, 0)


def test_cli_search_json_and_explain(tmp_path: Path, engine: Engine, cli):
    store = engine.settings.store
    engine.close()
    r = cli(["search", "Tobias Marrick", "--store", str(store), "--mode", "bm25", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["hits"][0]["title"] == "bridge" and data["mode"] == "bm25"
    r = cli(["search", "Tobias Marrick", "--store", str(store), "--mode", "bm25", "--explain"])
    assert "bm25: rank 1" in r.stdout
    r = cli(["search", "x", "--store", str(store), "-k", "0", "--mode", "bm25"])
    assert r.exit_code != 0 and r.stderr.strip() == "error: k: k must be at least 1"
    r = cli(["search", "x", "--store", str(store), "--mode", "fuzzy"])
    assert r.exit_code != 0 and "--mode" in r.stderr


def test_eval_metrics_known_values():
    from cograg.eval.retrieval import mrr_at_k, ndcg_at_k, recall_at_k

    rels = {"a": 1, "b": 1}
    assert ndcg_at_k(["a", "b", "c"], rels) == pytest.approx(1.0)
    assert ndcg_at_k(["c", "a"], {"a": 1}) == pytest.approx(1 / np.log2(3))
    assert recall_at_k(["a", "x"], rels, 10) == 0.5
    assert mrr_at_k(["x", "y", "b"], rels) == pytest.approx(1 / 3)
    assert mrr_at_k(["x"], rels) == 0.0


def test_eval_retrieval_on_a_small_beir_folder(tmp_path: Path, cli):
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = {"d1": ("Linden Bridge", "Designed by Tobias Marrick with seven arches."),
            "d2": ("Trams", "A single ticket costs EUR 2.10."),
            "d3": ("茶", "银雾品种于1978年育成。")}
    with open(beir / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for i, (t, x) in docs.items():
            fh.write(json.dumps({"_id": i, "title": t, "text": x}, ensure_ascii=False) + "\n")
    qs = {"q1": "who designed the bridge", "q2": "ticket price", "q3": "银雾哪年育成"}
    with open(beir / "queries.jsonl", "w", encoding="utf-8") as fh:
        for i, x in qs.items():
            fh.write(json.dumps({"_id": i, "text": x}, ensure_ascii=False) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n")
    store = tmp_path / "evalstore"
    r = cli(["eval", "retrieval", str(beir), "--qrels", "test", "--split", "all", "--store", str(store),
             "--modes", "bm25", "--json", "--embedder", "none"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)["summary"]
    assert data["queries"] == 3 and data["bm25.recall@10"] == 1.0 and data["bm25.mrr@10"] == 1.0
    r2 = cli(["eval", "retrieval", str(beir), "--qrels", "nope", "--store", str(store), "--embedder", "none"])
    assert r2.exit_code != 0 and "missing" in r2.stderr


@pytest.fixture()
def cli():
    from typer.testing import CliRunner

    from cograg.cli import app

    runner = CliRunner()

    def run(args: list[str]):
        return runner.invoke(app, args, catch_exceptions=False)

    return run


def test_keyword_index_is_rebuilt_when_the_analyzer_changes(engine: Engine):
    store_dir = engine.settings.store
    n = engine.store.count_chunks()
    engine.store.conn.execute("UPDATE meta SET value='old-analyzer' WHERE key='analyzer'")
    engine.store.conn.execute("DELETE FROM chunks_fts")
    engine.close()
    with SQLiteStore(store_dir) as s:
        assert s.get_meta("analyzer") != "old-analyzer"
        assert s.conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0] == n
        assert s.keyword_search("Tobias Marrick", 3)


def test_hybrid_without_an_embedder_is_keyword_search_with_a_note(tmp_path: Path, corpus_dir: Path):
    """A store set up with `--embedder none` still searches (and so answers) in the default mode;
    asking for vectors explicitly is still an error."""
    from cograg.config import Settings
    from cograg.engine import Engine
    from cograg.errors import CogragError

    with Engine.open(tmp_path / "store", settings=Settings(embedder="none")) as engine:
        engine.ingest([corpus_dir])
        res = engine.search("Linden Bridge arches", mode="hybrid", k=3)
        assert res.hits and "Linden Bridge" in res.hits[0].title
        assert any("keyword (BM25) search only" in n for n in res.notes)
        with pytest.raises(CogragError, match="needs an embedder"):
            engine.search("Linden Bridge arches", mode="vector")


def test_an_open_engine_follows_its_policy_file(tmp_path: Path):
    # a library Engine kept open (a notebook, a worker) read corpus_policy.yaml once
    eng = Engine.open(tmp_path / "store", settings=Settings(), embedder=HashingEmbedder())
    corpus = write_corpus(tmp_path / "corpus")
    eng.ingest([corpus / n for n in ("tram.md", "bridge.txt")])
    eng.ingest([corpus / "secret.md"], tags=["secret"])
    assert any("secret budget" in h.text for h in eng.search("secret budget", mode="bm25").hits)
    (tmp_path / "store" / "corpus_policy.yaml").write_text("deny_tags: [secret]\n", encoding="utf-8")
    res = eng.search("secret budget", mode="bm25")
    assert all("secret budget" not in h.text for h in res.hits) and res.filtered_by_policy >= 1
    (tmp_path / "store" / "corpus_policy.yaml").write_text("snippet_visible: false\n", encoding="utf-8")
    hits = eng.search("secret budget", mode="bm25").hits
    assert hits and all(h.snippet_visible is False for h in hits)
    eng.close()
