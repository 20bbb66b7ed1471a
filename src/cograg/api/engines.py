"""One engine per request over shared models.

The models (LLM, embedder, judge, reranker) are expensive and safe to share, so they are built once
per process; the store connection is not (a transaction on a shared SQLite connection would take
in other threads' writes), so every request opens its own `Engine` on the same store file, with
its own retriever, verifier and trace recorder. The vector matrix cache is shared too, keyed by
the store's generation, so a request does not reload the vectors. Several worker processes open
the same store file the same way: SQLite (WAL) arbitrates between them.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cograg.components import Lazy
from cograg.config import Settings
from cograg.engine import Engine
from cograg.errors import ConfigError
from cograg.index.vectors import VectorIndex
from cograg.retrieval.policy import CorpusPolicy

# Model profiles a client may pick per request (`model` in qa/v2). A file path or a URL is a server
# setting, never a request field: a client must not make the server load arbitrary files.
REQUEST_MODEL_PROFILES = ("default", "fast")
_MODEL_PARTS = ("llm", "judge", "reranker")


class EngineFactory:
    """Opens a fresh `Engine` per request on `settings.store`, with the models built once.

    `parts` replaces models built from the settings (tests pass a scripted LLM, a hashing
    embedder, a lexical judge); a part given here is used for every profile."""

    def __init__(self, settings: Settings, **parts: Any) -> None:
        if "store" in parts:
            raise TypeError("EngineFactory opens its own store connection per request; give settings.store")
        self.settings = settings
        self._given = parts
        self._lock = threading.Lock()
        self._profiles: dict[str, dict[str, Any]] = {}
        self._shared: dict[str, Any] | None = None
        self._vectors = VectorIndex()
        # an engine class without conversation memory accepts a session and ignores it
        self.supports_sessions = "session" in inspect.signature(Engine.ask).parameters

    @property
    def default_profile(self) -> str:
        return self.settings.models.llm

    def _shared_parts(self) -> dict[str, Any]:
        """The parts every profile shares (embedder, policy, rules), built on first use."""
        with self._lock:
            if self._shared is None:
                probe = Engine.open(settings=self.settings, **self._given)
                parts = probe.components
                embedder = parts.embedder.get() if "embedder" not in self._given else self._given["embedder"]
                self._shared = {"embedder": embedder, "policy": parts.policy, "rules": parts.rules}
                self._profiles[self.default_profile] = {n: getattr(parts, n) for n in _MODEL_PARTS}
                probe.store.close()  # the models stay; only this probe's connection goes
            return self._shared

    def _model_parts(self, profile: str) -> dict[str, Any]:
        self._shared_parts()
        with self._lock:
            if profile not in self._profiles:
                if profile not in REQUEST_MODEL_PROFILES:
                    raise ConfigError(f"model {profile!r} is not offered by this server; use one of "
                                      f"{', '.join(sorted({*REQUEST_MODEL_PROFILES, self.default_profile}))}")
                settings = self.settings.model_copy(update={
                    "models": self.settings.models.model_copy(update={"llm": profile})})
                probe = Engine.open(settings=settings, **self._given)
                self._profiles[profile] = {n: getattr(probe.components, n) for n in _MODEL_PARTS}
                probe.store.close()
            return self._profiles[profile]

    def open(self, model: str | None = None) -> Engine:
        """A new engine for one request; the caller closes it (`engine()` does)."""
        profile = model or self.default_profile
        parts: dict[str, Any] = {**self._shared_parts(), **self._model_parts(profile)}
        parts.update({k: v for k, v in self._given.items() if k not in parts})
        settings = self.settings
        if profile != self.default_profile:
            settings = settings.model_copy(update={"models": settings.models.model_copy(update={"llm": profile})})
        engine = Engine.open(settings=settings, **parts)
        engine.store.vector_index = self._vectors
        return engine

    @contextmanager
    def engine(self, model: str | None = None) -> Iterator[Engine]:
        engine = self.open(model)
        try:
            yield engine
        finally:
            engine.close()

    def policy(self) -> CorpusPolicy:
        """The corpus policy every engine of this server applies (the store's policy file)."""
        policy = self._shared_parts()["policy"]
        return policy.get() if isinstance(policy, Lazy) else policy

    def snippets_visible(self) -> bool:
        return bool(self.policy().snippet_visible)


__all__ = ["EngineFactory", "REQUEST_MODEL_PROFILES"]
