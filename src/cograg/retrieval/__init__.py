"""Retrieval (SPEC B): hybrid search, corpus policy, ACL, reranking, query fusion, context packing."""

from cograg.retrieval.fusion import rrf, weighted_fusion
from cograg.retrieval.models import Principal, RetrieverHit, SearchHit, SearchRequest, SearchResult
from cograg.retrieval.packing import ContextBlock, ContextPack, pack_context
from cograg.retrieval.policy import CorpusPolicy, load_policy

__all__ = ["ContextBlock", "ContextPack", "CorpusPolicy", "Principal", "RetrieverHit", "SearchHit",
           "SearchRequest", "SearchResult", "load_policy", "pack_context", "rrf", "weighted_fusion"]
