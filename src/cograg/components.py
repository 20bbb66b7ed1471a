"""The engine's parts, built from `Settings` in one place (the composition root's factory).

Every model is a `Lazy` handle: nothing loads until a command needs it, so `cograg docs list`
never pays for a model. Tests and embedders of the library pass their own parts (a fake LLM, a
hashing embedder) to `build_components`, which wires them exactly like the configured ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from cograg.config import Settings
from cograg.errors import ConfigError
from cograg.index.backends import open_store_with_index
from cograg.index.indexing import ChunkIndexer
from cograg.index.sqlite_store import SQLiteStore
from cograg.retrieval.policy import CorpusPolicy, load_policy
from cograg.retrieval.search import Retriever
from cograg.trace import with_role

T = TypeVar("T")


class Lazy(Generic[T]):
    """A part built on first `get()` (once, thread-safe), or given ready-made with `Lazy.of`."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build: Callable[[], T] | None = build
        self._value: T | None = None
        self._lock = threading.Lock()
        self._prefetching = False
        self._prefetch_lock = threading.Lock()  # not `_lock`: that one is held for the whole build

    @classmethod
    def of(cls, value: T) -> Lazy[T]:
        lazy: Lazy[T] = cls(lambda: value)
        lazy.get()
        return lazy

    @property
    def built(self) -> bool:
        return self._build is None

    def get(self) -> T:
        if self._build is not None:
            with self._lock:
                if self._build is not None:
                    self._value = self._build()
                    self._build = None
        return self._value  # type: ignore[return-value]

    def prefetch(self) -> None:
        """Start building in a background thread; a no-op once built or started. `get()` waits
        for that build. Made for the LLM: llama.cpp reads and repacks its weights outside the
        GIL, so they load while the turn embeds its query and routes, instead of after.
        A build that fails in the background is not kept: the next `get()` builds again and
        raises its error to the caller."""
        with self._prefetch_lock:
            if self._build is None or self._prefetching:
                return
            self._prefetching = True
        # Not a daemon: a process whose turn needed no model (a refusal, small talk) waits at exit
        # for the load to end. Finalising Python under a llama.cpp load printed "pure virtual
        # method called" and a crash dump after the answer.
        threading.Thread(target=self._build_quietly, name="cograg-prefetch", daemon=False).start()

    def _build_quietly(self) -> None:
        try:
            self.get()
        except Exception:  # noqa: BLE001 - get() in the caller's thread raises it again
            pass
        finally:
            self._prefetching = False


class DeferredQueryEmbedder:
    """The retriever's query embedder, loaded by the first search that needs vectors (a keyword
    search never loads it)."""

    def __init__(self, embedder: Lazy[Any]) -> None:
        self._embedder = embedder

    @property
    def name(self) -> str:
        return str(self._embedder.get().name)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embedder.get().embed_queries(texts)  # type: ignore[no-any-return]


class DeferredLLM:
    """An LLM that loads on its first call, so a turn publishes its route (and answers a greeting
    or a refusal) before a gigabyte of weights is read. `role` picks the backend's context for
    that role (`for_role`, see LlamaCppLLM) when it has one."""

    def __init__(self, llm: Lazy[Any], role: str | None = None) -> None:
        self._llm = llm
        self._role = role

    def resolve(self) -> Any:
        llm = self._llm.get()
        return with_role(llm, self._role) if self._role else llm

    def for_role(self, role: str) -> DeferredLLM:
        """The same deferred model for `role` (still not loaded)."""
        return DeferredLLM(self._llm, role)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.resolve(), name)


def deferred_llm(llm: Lazy[Any]) -> Any:
    """The LLM itself when it is built (or was given), else a `DeferredLLM` that loads it on use."""
    return llm.get() if llm.built else DeferredLLM(llm)


@dataclass(frozen=True)
class Components:
    """What an `Engine` works with. `embedder` is None-valued when none is configured."""

    store: SQLiteStore
    embedder: Lazy[Any]
    llm: Lazy[Any]
    judge: Lazy[Any]
    reranker: Lazy[Any]
    policy: Lazy[CorpusPolicy]
    rules: Lazy[Any]
    retriever: Lazy[Retriever]
    memory: Lazy[Any] | None = None  # the MemoryStore of conversation memory (SPEC E5), opened on first use

    def close(self) -> None:
        if self.retriever.built:
            self.retriever.get().close()
        if self.memory is not None and self.memory.built:
            self.memory.get().close()
        self.store.close()


_PARTS = ("store", "embedder", "llm", "judge", "reranker", "policy", "rules", "memory")


def build_components(settings: Settings, *, create: bool = True, **given: Any) -> Components:
    """The parts for `settings`. `given` replaces any of store, embedder, llm, judge, reranker,
    policy, rules, memory with a ready object (or a `Lazy`); the rest are built from `settings` on first use."""
    unknown = set(given) - set(_PARTS)
    if unknown:
        raise TypeError(f"unknown component(s) {sorted(unknown)}: use {', '.join(_PARTS)}")

    def part(name: str, build: Callable[[], Any]) -> Lazy[Any]:
        if name not in given:
            return Lazy(build)
        value = given[name]
        return value if isinstance(value, Lazy) else Lazy.of(value)

    if "embedder" not in given:
        from cograg.models.embedder import check_embedder_spec

        check_embedder_spec(settings.models.embedder)  # before a store is opened or made for it
    store = given.get("store") or open_store_with_index(settings.store, settings.index, create=create,
                                                         indexer=ChunkIndexer())
    store.common_term_share = settings.retrieval.common_term_share
    store.bm25_engine = settings.retrieval.bm25_engine
    embedder_only = part("embedder", lambda: _embedder(settings))

    def attached_embedder() -> Any:
        # the store indexes with the same embedder the queries use, and refuses a different one
        embedder = embedder_only.get()
        if embedder is not None:
            store.indexer.embedder = embedder
            store.indexer.check_store(store.conn)
        return embedder

    embedder: Lazy[Any] = Lazy(attached_embedder)
    llm = part("llm", lambda: _llm(settings))
    judge = part("judge", lambda: _judge(settings, llm))
    reranker = part("reranker", lambda: _reranker(settings, llm))
    # not a plain Lazy: the policy file is read again when it changes
    policy = part("policy", CorpusPolicy) if "policy" in given else PolicyFile(settings)
    rules = part("rules", lambda: _rules(settings))
    memory = part("memory", lambda: _memory_store(settings, store))
    has_embedder = given["embedder"] is not None if "embedder" in given else settings.models.embedder != "none"
    retriever = Lazy(lambda: Retriever(store, embedder=DeferredQueryEmbedder(embedder) if has_embedder else None,
                                       reranker=reranker.get(), policy=policy.get))
    return Components(store=store, embedder=embedder, llm=llm, judge=judge, reranker=reranker, policy=policy,
                      rules=rules, retriever=retriever, memory=memory)


def _embedder(settings: Settings) -> Any:
    if settings.models.embedder == "none":
        return None
    from cograg.models.embedder import get_embedder

    return get_embedder(settings.models.embedder)


def _llm(settings: Settings) -> Any:
    from cograg.models.llm import get_llm

    return get_llm(settings.models.llm, cache_dir=settings.model_cache_dir)


def _judge(settings: Settings, llm: Lazy[Any]) -> Any:
    from cograg.models import judge as judges

    v = settings.verification
    if v.judge == "llm":
        return judges.LLMJudge(DeferredLLM(llm, role="judge"), max_tokens=v.judge_max_tokens,
                               timeout_s=v.judge_timeout_s, reasons=v.judge_reasons)
    if v.judge == "lexical":
        return judges.LexicalJudge()
    if v.judge.startswith("nli:"):
        return judges.NLIJudge(v.judge[4:])
    raise ConfigError(f"unknown judge {v.judge!r}: use llm, lexical or nli:DIR")


def _reranker(settings: Settings, llm: Lazy[Any]) -> Any:
    spec = settings.retrieval.reranker
    if spec == "none":
        return None
    if spec == "llm":  # B4's pointwise LLM judge
        from cograg.models.judge import LLMRelevanceReranker

        return LLMRelevanceReranker(llm.get())
    from cograg.models.reranker import get_reranker

    return get_reranker(spec)


class PolicyFile(Lazy[CorpusPolicy]):
    """The corpus policy of `settings`, read again whenever its file changes (checked on every
    `get()` by the file's modification time and size), so a running server and a long-lived
    `Engine` follow the operator's edits: a document a new policy hides stops being returned at
    once, not after a restart. A file made invalid raises `PolicyFileError` on the next use
    (the server then answers with that error and its health check fails), never falling back to
    the older, possibly more permissive policy. A file removed means no policy, as at start-up,
    unless `settings.policy` named it: then its absence is that error too."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(self._read)
        self._settings = settings
        self._stamp: tuple[str, int, int] | None = None

    def _path(self) -> Path | None:
        if self._settings.policy is not None:
            return Path(self._settings.policy)
        default = self._settings.store / "corpus_policy.yaml"
        return default if default.is_file() else None

    def _stat(self) -> tuple[str, int, int] | None:
        path = self._path()
        if path is None:
            return None
        try:
            st = path.stat()
        except OSError:
            return (str(path), -1, -1)
        return (str(path), st.st_mtime_ns, st.st_size)

    def _read(self) -> CorpusPolicy:
        return load_policy(self._path())

    def get(self) -> CorpusPolicy:
        stamp = self._stat()
        with self._lock:
            if self._build is not None or stamp != self._stamp:
                self._value = self._read()  # raises for an invalid file: the old policy is not kept
                self._stamp, self._build = stamp, None
        return self._value  # type: ignore[return-value]


def _memory_store(settings: Settings, store: Any) -> Any:
    """Sessions live next to the documents they cite (`<store>/memory.db`), or in Redis when
    several workers share them (`memory.backend=redis://…`): there under the store's own key
    prefix (`cograg:<store id>`), since other stores may share the Redis database."""
    from cograg.memory.backends import open_memory_store

    return open_memory_store(settings.memory.backend, getattr(store, "directory", settings.store),
                             ttl_s=settings.memory.session_ttl_days * 86400, store_id=store.store_id)


def _rules(settings: Settings) -> Any:
    from cograg.control.router import load_rules

    return load_rules(settings.routing.rules)


__all__ = ["Components", "DeferredQueryEmbedder", "Lazy", "build_components"]
