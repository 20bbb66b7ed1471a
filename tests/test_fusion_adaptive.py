"""Adaptive fusion, pseudo-relevance feedback, document aggregation and the coarse vector pass."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from cograg.config import Settings
from cograg.engine import Engine
from cograg.eval.retrieval import ndcg_at_k
from cograg.index.vectors import VectorIndex
from cograg.retrieval.adaptive_fusion import (FusionCalibration, adaptive_fusion, agreement, choose_weight,
                                              convex_fusion, load_calibration, peak, query_language)
from cograg.retrieval.doc_aggregation import DocumentAggregation, aggregate, document_scores
from cograg.retrieval.feedback import expansion_terms
from cograg.retrieval.feedback_settings import FeedbackSettings
from tests.fakes import HashingEmbedder


# ---------------------------------------------------------------- fusion maths
def test_convex_fusion_is_the_weighted_sum_of_min_max_scores():
    bm25 = [("a", 10.0), ("b", 6.0), ("c", 2.0)]
    vec = [("c", 0.9), ("a", 0.5), ("d", 0.1)]
    fused = dict(convex_fusion(bm25, vec, 0.25))
    # bm25 normalised: a 1, b .5, c 0; vector: c 1, a .5, d 0
    assert fused["a"] == pytest.approx(0.75 * 1 + 0.25 * 0.5)
    assert fused["b"] == pytest.approx(0.75 * 0.5)
    assert fused["c"] == pytest.approx(0.25 * 1)
    assert fused["d"] == pytest.approx(0.0)
    assert [k for k, _ in convex_fusion(bm25, vec, 0.25)] == ["a", "b", "c", "d"]
    assert [k for k, _ in convex_fusion(bm25, vec, 1.0)][0] == "c"  # weight 1: vectors alone decide


def test_peak_agreement_and_language():
    assert peak([5.0, 1.0, 1.0, 1.0, 1.0]) > peak([5.0, 4.9, 4.8, 4.7, 4.6])
    assert peak([1.0, 1.0]) is None and peak([2.0, 2.0, 2.0]) == 0.0
    assert peak([10.0, 2.0, 2.0, 2.0]) == pytest.approx(peak([0.9, 0.1, 0.1, 0.1]))  # scale-free
    assert agreement(["a", "b", "c"], ["c", "b", "x"]) == pytest.approx(2 / 3)
    assert query_language("研究所在哪一年创办？") == "zh"
    assert query_language("Which bridge did Tobias Marrick design?") == "en"
    assert query_language("BM25 是什么") == "zh"


def test_weight_moves_toward_the_peaked_ranker_and_stays_in_bounds():
    cal = FusionCalibration(base_vector_weight={"en": 0.5}, confidence_gain=0.4)
    flat = [(i, 1.0 - 0.01 * i) for i in range(20)]
    sharp = [(i, 1.0 if i == 0 else 0.2 - 0.001 * i) for i in range(20)]
    to_vec = choose_weight("some english query", flat, sharp, cal)
    to_bm25 = choose_weight("some english query", sharp, flat, cal)
    assert to_vec.vector_weight > 0.5 > to_bm25.vector_weight
    assert "vector more peaked" in to_vec.reason and "bm25 more peaked" in to_bm25.reason
    assert to_vec.signals.vector_peak > to_vec.signals.bm25_peak
    tight = FusionCalibration(base_vector_weight={"en": 0.5}, confidence_gain=1.0, min_weight=0.3, max_weight=0.7)
    assert choose_weight("q", flat, sharp, tight).vector_weight == pytest.approx(0.7)
    assert choose_weight("q", sharp, flat, tight).vector_weight == pytest.approx(0.3)
    # no gain: the language's base, whatever the lists look like
    assert choose_weight("q", flat, sharp, FusionCalibration(base_vector_weight={"en": 0.6},
                                                             confidence_gain=0.0)).vector_weight == 0.6
    # one ranker empty: the other one decides alone
    only_vec = choose_weight("q", [], sharp, cal)
    assert only_vec.vector_weight == 1.0 and "only vector" in only_vec.reason


def test_language_picks_its_base_weight():
    cal = FusionCalibration(base_vector_weight={"zh": 0.3, "en": 0.7}, confidence_gain=0.0)
    lists = [(i, 1.0 / (i + 1)) for i in range(10)]
    assert choose_weight("茶叶研究所", lists, lists, cal).vector_weight == 0.3
    assert choose_weight("tea institute", lists, lists, cal).vector_weight == 0.7


def test_calibration_file_round_trip(tmp_path: Path):
    f = tmp_path / "cal.json"
    f.write_text('{"chosen": {"base_vector_weight": {"zh": 0.35, "en": 0.65}, "confidence_gain": 0.2}}')
    cal = load_calibration(f)
    assert cal is not None and cal.base_vector_weight == {"zh": 0.35, "en": 0.65} and cal.confidence_gain == 0.2
    assert load_calibration(None) is None


# ---------------------------------------------------------------- never worse than the best half
def _fixture_lists(rng: np.random.Generator, n_docs: int, strong: str) -> tuple[list, list, int]:
    """One query: the relevant doc 0 is ranked near the top by the `strong` ranker with a peaked
    score, and anywhere by the weak one with a flat score list."""
    docs = list(range(n_docs))
    strong_scores = rng.uniform(0.0, 0.4, n_docs)
    strong_scores[0] = rng.uniform(0.8, 1.0)
    weak_scores = rng.uniform(0.5, 0.6, n_docs)
    good = sorted(zip(docs, strong_scores), key=lambda x: -x[1])
    bad = sorted(zip(docs, weak_scores), key=lambda x: -x[1])
    return (bad, good, 0) if strong == "vector" else (good, bad, 0)


def test_adaptive_hybrid_is_never_worse_than_its_best_half_on_a_mixed_fixture():
    """Half the queries favour BM25, half vectors; a fixed 50/50 RRF loses to the best single
    ranker here, the per-query weight must not."""
    rng = np.random.default_rng(7)
    cal = FusionCalibration(base_vector_weight={"en": 0.5}, confidence_gain=0.5)
    totals = {"bm25": 0.0, "vector": 0.0, "adaptive": 0.0}
    for i in range(40):
        bm25, vec, gold = _fixture_lists(rng, 30, "vector" if i % 2 else "bm25")
        rels = {str(gold): 1}
        totals["bm25"] += ndcg_at_k([str(k) for k, _ in bm25], rels)
        totals["vector"] += ndcg_at_k([str(k) for k, _ in vec], rels)
        fused, _ = adaptive_fusion("english query", bm25, vec, cal)
        totals["adaptive"] += ndcg_at_k([str(k) for k, _ in fused], rels)
    assert totals["adaptive"] >= max(totals["bm25"], totals["vector"])
    assert totals["adaptive"] == pytest.approx(40.0)  # the peaked ranker's top doc wins every time


# ---------------------------------------------------------------- pseudo-relevance feedback
def test_rm3_expansion_terms_weights_and_exclusions():
    feedback = [({"linden": 2, "arch": 3, "marrick": 1}, 10.0), ({"arch": 1, "river": 2}, 5.0),
                ({"unique": 5}, 1.0)]
    df = {"linden": 3, "arch": 10, "marrick": 2, "river": 40, "unique": 1}
    terms = expansion_terms({"marrick"}, feedback, df, n_chunks=100, n_terms=3)
    names = [t for t, _ in terms]
    assert "marrick" not in names  # already in the query
    assert "unique" not in names  # only one chunk has it
    assert names[0] in {"arch", "linden"} and len(names) == 3
    assert all(a[1] >= b[1] for a, b in zip(terms, terms[1:]))
    assert expansion_terms({"x"}, [], df, 100, 3) == []


# ---------------------------------------------------------------- document aggregation
def test_document_scores_and_aggregation():
    scored = [("a1", 1.0), ("b1", 0.9), ("b2", 0.8), ("b3", 0.7), ("a2", 0.0)]
    group = {"a1": "A", "a2": "A", "b1": "B", "b2": "B", "b3": "B"}
    docs = document_scores(scored, group, decay=0.5, depth=3)
    assert docs["B"] == pytest.approx((0.9 + 0.4 + 0.175) / 1.75)
    assert docs["A"] == pytest.approx(1.0 / 1.75)
    # with enough weight the document that matches in three places overtakes the single best chunk
    out = aggregate(scored, group, DocumentAggregation(weight=0.8, decay=0.5, depth=3))
    assert out[0][0] == "b1"
    assert aggregate(scored, group, DocumentAggregation(weight=0.0)) == scored


# ---------------------------------------------------------------- coarse vector pass
def test_coarse_vector_pass_returns_exact_cosines_and_finds_the_top(tmp_path: Path):
    rng = np.random.default_rng(3)
    n, dim = 3000, 64
    centres = rng.standard_normal((30, dim))
    vecs = (centres[rng.integers(0, 30, n)] + 0.3 * rng.standard_normal((n, dim))).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    conn = sqlite3.connect(":memory:")
    conn.executescript("CREATE TABLE chunks (id INTEGER PRIMARY KEY, doc_id TEXT);"
                       "CREATE TABLE chunk_vectors (chunk_rowid INTEGER PRIMARY KEY, vec BLOB);")
    conn.executemany("INSERT INTO chunks VALUES (?, ?)", [(i + 1, f"d{i // 10}") for i in range(n)])
    conn.executemany("INSERT INTO chunk_vectors VALUES (?, ?)", [(i + 1, v.tobytes()) for i, v in enumerate(vecs)])
    coarse = VectorIndex(coarse_from=1000, coarse_dims=16, rescore=200)
    exact = VectorIndex(coarse_from=10**9)
    found = 0
    for q in vecs[rng.choice(n, 20, replace=False)]:
        a = coarse.search(conn, "1", q, 10)
        b = exact.search(conn, "1", q, 10)
        assert coarse.matrix(conn, "1").coarse is not None
        scores = dict(b)
        for rid, s in a:  # the cosines returned are the exact ones
            assert math.isclose(s, float(vecs[rid - 1] @ q), rel_tol=1e-5)
        found += len(set(scores) & {r for r, _ in a})
        assert a[0][0] == b[0][0]
    assert found / 200 >= 0.9
    allowed = coarse.search(conn, "1", vecs[0], 5, allowed_docs={"d7"})
    assert allowed and all(71 <= rid <= 80 for rid, _ in allowed)


# ---------------------------------------------------------------- through the engine
def test_search_explains_the_adaptive_weights(tmp_path: Path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "bridge.txt").write_text("The Linden Bridge was designed by Tobias Marrick and has seven arches.\n")
    (corpus / "tea.md").write_text("# 茶叶研究所\n\n研究所育成了耐寒品种银雾，1978 年育成。\n", encoding="utf-8")
    (corpus / "tram.md").write_text("# Tram\n\nA single ticket costs EUR 2.10 in zone A.\n")
    with Engine.open(tmp_path / "s", settings=Settings(), embedder=HashingEmbedder()) as eng:
        eng.ingest([corpus])
        res = eng.search("Tobias Marrick bridge arches", k=3)
        assert res.fusion is not None and res.fusion.method == "adaptive"
        assert res.fusion.signals.language == "en" and 0.0 <= res.fusion.vector_weight <= 1.0
        assert "for en queries" in res.fusion.reason
        assert res.hits[0].title == "bridge"
        assert eng.search("银雾 品种", k=2).fusion.signals.language == "zh"
        assert eng.search("Tobias Marrick", k=2, fusion="rrf").fusion.method == "rrf"
        fb = eng.search("Marrick", mode="bm25", k=3, feedback=FeedbackSettings(feedback_docs=2))
        assert fb.hits and fb.hits[0].title == "bridge"
        agg = eng.search("Tobias Marrick bridge", k=3, document_aggregation=DocumentAggregation())
        assert agg.hits[0].title == "bridge"
        eng.store.common_term_share = 0.0  # every term is "common": the rarest one is still searched
        assert eng.search("Marrick the bridge", mode="bm25", k=1).hits[0].title == "bridge"
