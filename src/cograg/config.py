"""One settings object for the whole engine, read from `COGRAG_*` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ChunkStrategy = Literal["fixed", "semantic", "recursive", "code", "records"]


class ChunkingConfig(BaseModel):
    """How one document is cut into chunks. Sizes are in tokens (see `cograg.ingest.tokens`)."""

    strategy: ChunkStrategy
    chunk_size: int = Field(256, ge=16, le=8192)
    chunk_overlap: int = Field(32, ge=0)

    def model_post_init(self, __context: object) -> None:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError("chunk_overlap must be smaller than chunk_size")


# Defaults per document type: prose with structure is cut at headings/paragraphs, flat prose
# recursively, code at function/class boundaries, data files one record per chunk. Overlap is
# ~12 % (SPEC A3 asks for 10–20 %).
DEFAULT_CHUNKING: dict[str, ChunkingConfig] = {
    "markdown": ChunkingConfig(strategy="semantic", chunk_size=256, chunk_overlap=32),
    "html": ChunkingConfig(strategy="semantic", chunk_size=256, chunk_overlap=32),
    "text": ChunkingConfig(strategy="recursive", chunk_size=256, chunk_overlap=32),
    "pdf": ChunkingConfig(strategy="recursive", chunk_size=256, chunk_overlap=32),
    "code": ChunkingConfig(strategy="code", chunk_size=384, chunk_overlap=0),
    "records": ChunkingConfig(strategy="records", chunk_size=256, chunk_overlap=32),
}


class Settings(BaseSettings):
    """Engine settings. Every field can be set with an env var, e.g. `COGRAG_STORE=/data/kb`."""

    model_config = SettingsConfigDict(env_prefix="COGRAG_", extra="ignore")

    store: Path = Field(default_factory=lambda: Path.home() / ".cograg")
    max_file_mb: float = Field(200.0, gt=0, description="files larger than this are skipped")
    chunk_strategy: ChunkStrategy | None = Field(
        None, description="force one strategy for every document type"
    )
    chunk_size: int | None = Field(None, ge=16, le=8192)
    chunk_overlap: int | None = Field(None, ge=0)
    embedder: str = Field("e5-small", description="e5-small | minilm | st:DIR | openai:URL[#model] | none")
    reranker: str = Field("none", description="none | cross-encoder:DIR")
    policy: Path | None = Field(None, description="corpus_policy.yaml; default <store>/corpus_policy.yaml if present")
    retrieve_k: int = Field(50, ge=1, le=1000)
    rrf_k: int = Field(60, ge=1)
    fusion: Literal["rrf", "weighted"] = "rrf"
    vector_weight: float = Field(0.5, ge=0.0, le=1.0, description="weight of vector scores in weighted fusion")
    rerank_candidates: int = Field(20, ge=1, le=200)
    llm: str = Field("default", description="default | fast | gguf:PATH | openai:URL[#model]")
    judge: str = Field("llm", description="claim judge: llm | nli:DIR | lexical")
    # measured (docs/benchmarks.md, Routing): with the embedded models the LLM scores add 4-6 s per
    # turn and no routing accuracy over the rules, so the rules alone route by default
    router_llm: bool = Field(False, description="blend the LLM's routing scores into the rule scores (D1)")
    model_cache: Path | None = Field(None, description="where GGUF files are assembled; default <store>/models")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> Settings:
        if self.chunk_size is not None and self.chunk_overlap is not None and self.chunk_overlap >= self.chunk_size:
            raise ValueError("chunk_overlap must be smaller than chunk_size")
        return self

    def chunking_for(self, doc_type: str) -> ChunkingConfig:
        """The chunking config for a document type, with any global override applied."""
        base = DEFAULT_CHUNKING.get(doc_type, DEFAULT_CHUNKING["text"])
        data = base.model_dump()
        if self.chunk_strategy is not None:
            data["strategy"] = self.chunk_strategy
        if self.chunk_size is not None:
            data["chunk_size"] = self.chunk_size
            if self.chunk_overlap is None:
                data["chunk_overlap"] = min(data["chunk_overlap"], self.chunk_size // 8)
        if self.chunk_overlap is not None:
            data["chunk_overlap"] = self.chunk_overlap
        return ChunkingConfig(**data)
