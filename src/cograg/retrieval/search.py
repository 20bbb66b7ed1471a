"""Hybrid search (SPEC B1–B5): BM25 and vectors, fused; policy; reranking; query variants.

Pure composition over the store's two indexes: the store answers "which rowids, what score", this
module decides ranking, filtering and what the caller is told about the evidence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from cograg.errors import CogragError, StoreError
from cograg.index.sqlite_store import SQLiteStore
from cograg.retrieval.adaptive_fusion import FusionDecision, adaptive_fusion
from cograg.retrieval.doc_aggregation import aggregate
from cograg.retrieval.feedback import keyword_search_with_feedback
from cograg.retrieval.fusion import rrf, weighted_fusion
from cograg.retrieval.models import (MAX_QUERY_CHARS, RetrieverHit, SearchHit, SearchRequest,
                                     SearchResult)
from cograg.retrieval.policy import OLD_DOCUMENT, CorpusPolicy
from cograg.text import has_word_characters, without_invisible


class QueryError(CogragError):
    """The query cannot be searched (empty, only punctuation, …)."""


class QueryEmbedder(Protocol):
    name: str
    dim: int

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...


class PassageReranker(Protocol):
    name: str

    def score(self, query: str, passages: list[str]) -> list[float] | None: ...


class Retriever:
    """Searches one store. `embedder` must be the one the store's vectors were built with."""

    def __init__(self, store: SQLiteStore, *, embedder: QueryEmbedder | None = None,
                 reranker: PassageReranker | None = None,
                 policy: CorpusPolicy | Callable[[], CorpusPolicy] | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        # a callable is asked on every use: the engine's policy follows its file (components.PolicyFile)
        self._policy: CorpusPolicy | Callable[[], CorpusPolicy] = policy or CorpusPolicy()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cograg-search")
        self._qcache: dict[tuple[str, str], np.ndarray] = {}

    @property
    def policy(self) -> CorpusPolicy:
        return self._policy if isinstance(self._policy, CorpusPolicy) else self._policy()

    @policy.setter
    def policy(self, policy: CorpusPolicy) -> None:
        self._policy = policy

    # ------------------------------------------------------------------ one query, one mode
    def _embed(self, query: str) -> np.ndarray:
        assert self.embedder is not None
        key = (self.embedder.name, query)
        vec = self._qcache.get(key)
        if vec is None:
            vec = np.asarray(self.embedder.embed_queries([query])[0], dtype=np.float32)
            if len(self._qcache) >= 2048:
                self._qcache.pop(next(iter(self._qcache)))
            self._qcache[key] = vec
        return vec

    def _keyword(self, query: str, req: SearchRequest, groups: list[str] | None) -> list[tuple[int, float]]:
        if req.feedback is not None:
            return keyword_search_with_feedback(self.store, self.store.term_stats, query, req.retrieve_k, groups,
                                                req.feedback, doc_ids=req.doc_ids)
        return self.store.keyword_search(query, req.retrieve_k, groups, req.doc_ids)

    def _run(self, query: str, req: SearchRequest, groups: list[str] | None,
             timings: dict[str, float], qvec: np.ndarray | None,
             decisions: list[FusionDecision] | None = None) -> tuple[list[int], dict[int, dict[str, RetrieverHit]], dict[int, float], dict[int, float]]:
        """Ranked rowids for one query string plus per-retriever hits, fused scores and the
        vector candidates' cosines; how the two lists were fused is appended to `decisions`."""
        per: dict[int, dict[str, RetrieverHit]] = {}
        bm25: list[tuple[int, float]] = []
        vec: list[tuple[int, float]] = []
        t0 = time.perf_counter()
        if req.mode == "hybrid":
            fut = self._pool.submit(self._keyword, query, req, groups)
            vec = self.store.vector_search(qvec, req.retrieve_k, groups, req.doc_ids)  # type: ignore[arg-type]
            bm25 = fut.result()
        elif req.mode == "bm25":
            bm25 = self._keyword(query, req, groups)
        else:
            vec = self.store.vector_search(qvec, req.retrieve_k, groups, req.doc_ids)  # type: ignore[arg-type]
        timings["retrieve"] = timings.get("retrieve", 0.0) + (time.perf_counter() - t0) * 1000
        for name, hits in (("bm25", bm25), ("vector", vec)):
            for rank, (rid, score) in enumerate(hits, start=1):
                per.setdefault(rid, {})[name] = RetrieverHit(rank=rank, score=score)
        cosines = dict(vec)
        if req.mode != "hybrid":
            only = bm25 or vec
            if req.document_aggregation is not None:
                only = aggregate(only, self.store.doc_ids_of([r for r, _ in only]), req.document_aggregation)
            return [r for r, _ in only], per, {r: s for r, s in only}, cosines
        if req.fusion == "adaptive":
            fused, decision = adaptive_fusion(query, bm25, vec, req.fusion_calibration)
        elif req.fusion == "weighted":
            fused = weighted_fusion([dict(bm25), dict(vec)], [1 - req.vector_weight, req.vector_weight])
            decision = FusionDecision(method="weighted", vector_weight=req.vector_weight,
                                      reason="fixed weight (fusion=weighted)")
        else:
            fused = rrf([[r for r, _ in bm25], [r for r, _ in vec]], k=req.rrf_k)
            decision = FusionDecision(method="rrf", reason=f"reciprocal rank fusion, k={req.rrf_k} (fusion=rrf)")
        if req.document_aggregation is not None:
            fused = aggregate(fused, self.store.doc_ids_of([r for r, _ in fused]), req.document_aggregation)
        if decisions is not None:
            decisions.append(decision)
        return [r for r, _ in fused], per, dict(fused), cosines

    # ------------------------------------------------------------------ public
    def search(self, req: SearchRequest) -> SearchResult:
        started = time.perf_counter()
        timings: dict[str, float] = {}
        notes: list[str] = []
        # as ingestion cleaned the documents: a soft hyphen or zero-width space copied along with
        # a word must not split it, and a lone surrogate must not reach the (JSON) result
        query = without_invisible(req.query).strip()
        if not query:
            raise QueryError("empty query")
        if len(query) > MAX_QUERY_CHARS:
            query = query[:MAX_QUERY_CHARS]
            notes.append(f"query truncated to {MAX_QUERY_CHARS} characters")
        variants = [without_invisible(v).strip()[:MAX_QUERY_CHARS] for v in req.variants]
        queries = [query] + [v for v in variants if v]
        queries = [q for q in dict.fromkeys(queries) if has_word_characters(q)]
        if not queries:
            notes.append("the query has no searchable words (only punctuation or symbols)")
            return SearchResult(query=query, mode=req.mode, hits=[], notes=notes,
                                policy_version=self.policy.policy_version())
        mode = req.mode
        if mode == "hybrid" and self.embedder is None:
            # a store set up without embeddings still answers: hybrid is then keyword search alone
            notes.append("no embedder configured: keyword (BM25) search only")
            mode = "bm25"
        if mode != "bm25":
            if self.embedder is None:
                raise StoreError("vector search needs an embedder; use --mode bm25 or configure one")
            if not self.store.has_vectors():
                if self.store.count_chunks() == 0:
                    notes.append("the store is empty")
                    return SearchResult(query=query, mode=mode, hits=[], notes=notes)
                raise StoreError("this store has no vectors yet; run `cograg ingest` with an embedder")
            self.store.indexer.check_store(self.store.conn)
        groups = req.principal.acl_keys() if req.principal is not None else None
        req = req.model_copy(update={"mode": mode})

        rankings: list[list[int]] = []
        per: dict[int, dict[str, RetrieverHit]] = {}
        single_scores: dict[int, float] = {}
        cosines: dict[int, float] = {}
        decisions: list[FusionDecision] = []
        for q in queries:
            qvec = None
            if mode != "bm25":
                t0 = time.perf_counter()
                qvec = self._embed(q)
                timings["embed_query"] = timings.get("embed_query", 0.0) + (time.perf_counter() - t0) * 1000
            ranked, hits, scores, cos = self._run(q, req, groups, timings, qvec, decisions)
            rankings.append(ranked)
            if q == query:
                per, single_scores = hits, scores
            else:
                for rid, h in hits.items():
                    per.setdefault(rid, {}).update({f"{k}[{len(rankings) - 1}]": v for k, v in h.items()})
            for rid, c in cos.items():
                cosines[rid] = max(c, cosines.get(rid, c))
        if len(rankings) > 1:  # B5: variants fused by RRF
            fused = rrf(rankings, k=req.rrf_k)
            order, scores = [r for r, _ in fused], dict(fused)
        else:
            order, scores = rankings[0], single_scores

        t0 = time.perf_counter()
        # Only as many rows as can be returned or reranked are read — unless age downweighting may
        # reorder candidates, in which case every candidate is scored.
        need = max(req.k, req.rerank_candidates if (self.reranker is not None and req.rerank) else 0)
        reorders = self.policy.max_age_days is not None and self.policy.max_age_action == "downweight"
        hits_out: list[SearchHit] = []
        filtered = 0
        pos = 0
        while pos < len(order) and (reorders or len(hits_out) < need):
            batch = order[pos:pos + (len(order) if reorders else max(need - len(hits_out), 0) + 16)]
            pos += len(batch)
            rows = self.store.chunks_by_rowid(batch)
            filtered += self._admit(batch, rows, scores, per, hits_out, req.min_vector_cosine)
        hits_out.sort(key=lambda h: -h.score)
        # the refusal gate sees only what the user may see: the best cosine of an admitted chunk
        best_cos = self._best_admitted_cosine(cosines)
        timings["policy"] = (time.perf_counter() - t0) * 1000
        evidence, evidence_source = best_cos, ("vector_cosine" if best_cos is not None else None)
        if self.reranker is not None and req.rerank and hits_out:
            t0 = time.perf_counter()
            head = hits_out[:max(req.rerank_candidates, req.k)]
            hits_out, reranked = self._rerank(query, head, hits_out)
            if reranked:
                evidence, evidence_source = hits_out[0].rerank_score, f"reranker:{self.reranker.name}"
            timings["rerank"] = (time.perf_counter() - t0) * 1000
        if not order and mode == "bm25" and self.store.count_chunks() == 0:
            notes.append("the store is empty")  # as the vector path says: no rewrite or other words can help
        timings["total"] = (time.perf_counter() - started) * 1000
        return SearchResult(query=query, mode=mode, hits=hits_out[:req.k], evidence_score=evidence,
                            evidence_source=evidence_source, best_cosine=best_cos, policy_version=self.policy.policy_version(),
                            filtered_by_policy=filtered, notes=notes, fusion=decisions[0] if decisions else None,
                            timings_ms={k: round(v, 2) for k, v in timings.items()})

    def _admit(self, batch: list[int], rows: dict, scores: dict[int, float],
               per: dict[int, dict[str, RetrieverHit]], hits_out: list[SearchHit],
               min_cosine: float | None = None) -> int:
        """Policy (B2) over candidate rows in rank order: deny → dropped and counted; old →
        downweighted or annotated; below the caller's cosine floor → dropped, not counted (a
        keyword-only hit has no cosine and stays). Returns how many the policy filtered."""
        filtered = 0
        for rid in batch:
            if rid not in rows:
                continue
            vector = per.get(rid, {}).get("vector")
            if min_cosine is not None and vector is not None and vector.score < min_cosine:
                continue
            chunk, doc = rows[rid]
            if not self.policy.admits(doc.source_path, doc.tags):
                filtered += 1
                continue
            score = scores[rid]
            annotations: list[str] = []
            if self.policy.is_old(doc.updated_at):
                if self.policy.max_age_action == "downweight":
                    score *= self.policy.downweight_factor
                annotations.append(OLD_DOCUMENT)
            hits_out.append(SearchHit.model_construct(
                chunk_id=chunk.chunk_id, doc_id=chunk.doc_id, seq=chunk.seq, text=chunk.text,
                title=doc.title, source=doc.source_path, heading_path=chunk.heading_path, page=chunk.page,
                start=chunk.start, end=chunk.end, token_count=chunk.token_count, metadata=chunk.metadata,
                score=score, fused_score=scores[rid], retrievers=per.get(rid, {}), annotations=annotations,
                snippet_visible=self.policy.snippet_visible, rerank_score=None))
        return filtered

    def _best_admitted_cosine(self, cosines: dict[int, float], batch_size: int = 16) -> float | None:
        """The highest cosine among vector candidates the policy admits (the ACL is already part of
        the index query): a chunk the user may not see must not open the refusal gate (C4)."""
        ranked = sorted(cosines.items(), key=lambda rc: -rc[1])
        for start in range(0, len(ranked), batch_size):
            batch = ranked[start:start + batch_size]
            rows = self.store.chunks_by_rowid([rid for rid, _ in batch])
            for rid, cos in batch:
                if rid in rows and self.policy.admits(rows[rid][1].source_path, rows[rid][1].tags):
                    return cos
        return None

    def _rerank(self, query: str, head: list[SearchHit], hits: list[SearchHit]) -> tuple[list[SearchHit], bool]:
        """Reorder the head by reranker score (B4); a reranker that returns None keeps fusion order."""
        assert self.reranker is not None
        scores = self.reranker.score(query, [h.text for h in head])
        if scores is None:
            return hits, False
        for h, s in zip(head, scores):
            h.rerank_score = float(s)
            h.score = float(s)
        head = sorted(head, key=lambda h: -(h.rerank_score or 0.0))
        return head + hits[len(head):], True

    def close(self) -> None:
        self._pool.shutdown(wait=False)
