"""The Python API (SPEC F1): `Engine.open(path)` and one method per capability.

Every CLI command is a thin layer over a method here.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from cograg.questions import checked_question
from cograg.components import Components, build_components, deferred_llm
from cograg.config import AnswerConfig, Settings
from cograg.documents import Chunk, Document
from cograg.errors import ConfigError, IngestError, StoreError
from cograg.ingest.models import IngestSummary, SkippedFile
from cograg.ingest.pipeline import ProgressCallback, ingest_paths
from cograg.locks import directory_lock
from cograg.retrieval.adaptive_fusion import load_calibration
from cograg.retrieval.feedback_settings import FeedbackSettings
from cograg.retrieval.models import Principal, SearchRequest, SearchResult
from cograg.retrieval.search import QueryError
from cograg.text import shown_ref


def _mode_name(mode: str) -> str:
    from cograg.control.models import mode_name

    try:
        return mode_name(mode)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


class PreparedModels(BaseModel):
    """What `prepare_models` found or made ready."""

    embedder: str | None
    llm: str
    llm_file: str | None = None
    prefix_states: dict[str, str]  # system message → saved | restored | not kept
    seconds: float


def prepare_models(settings: Settings | None = None, **components: Any) -> PreparedModels:
    """Make the configured models ready before the first question: load the embedder and the LLM
    (an embedded GGUF is assembled and an embedder graph converted on first use, into
    `settings.model_cache_dir`) and put the prompt-prefix states of the answer's and the judge's
    instructions on disk, so the first `ask` of every later process restores them instead of
    evaluating ~900 tokens. `make setup` runs it (`cograg models prepare`). A second run finds
    everything ready. No store is touched: the parts are opened on a temporary one. `components`
    replaces parts as in `Engine.open`."""
    from cograg.models.llm.prefix_state import warm_system_prefixes

    started = time.perf_counter()
    settings = settings or Settings()
    with tempfile.TemporaryDirectory(prefix="cograg-prepare-") as tmp:
        # a plain SQLite store: with the user's COGRAG_INDEX each run left a collection in their Milvus
        scratch = settings.model_copy(update={"store": Path(tmp) / "store", "index": "sqlite"})
        with Engine.open(settings=scratch, **components) as eng:
            parts = eng.components
            embedder = parts.embedder.get()
            if embedder is not None:
                embedder.embed_queries(["ready"])
            llm = parts.llm.get()
            if getattr(llm, "base_url", None) is not None:
                # an endpoint loads nothing here: one token shows it answers, or `prepare` said
                # "ready" for a URL nobody listens on
                llm.chat([{"role": "user", "content": "Say OK."}], max_tokens=1, timeout_s=60)
            prefixes = eng.answerer(save_traces=False).prompt_prefixes()
            judge_prefixes = getattr(parts.judge.get(), "prompt_prefixes", None)
            if callable(judge_prefixes):
                prefixes.update(judge_prefixes())
                if not settings.verification.judge_batch:  # the all-claims call is never made
                    prefixes.pop("judge_claims", None)
            states = warm_system_prefixes(llm, prefixes)
    path = getattr(llm, "path", None)
    return PreparedModels(embedder=None if embedder is None else str(embedder.name), llm=str(llm.name),
                          llm_file=str(path) if path else None, prefix_states=states,
                          seconds=round(time.perf_counter() - started, 1))

def _is_existing_path(ref: str) -> bool:
    """Whether `ref` names a file here; a ref no file system takes (too long, a NUL byte) names none."""
    try:
        return Path(ref).exists()
    except (OSError, ValueError):
        return False


# why a short ref matched nothing: an id prefix shorter than this could name many
_SHORT_PREFIX = " (an id prefix needs at least 4 characters)"


class Engine:
    """A document store plus the stages that work on it: a composition root. Its parts come
    from `build_components` (or the caller) through the constructor; models load on first use."""

    def __init__(self, settings: Settings, components: Components) -> None:
        self.settings = settings
        self.components = components
        self.store = components.store
        self._memory: Any = None

    @classmethod
    def open(cls, path: Path | str | None = None, *, settings: Settings | None = None,
             create: bool = True, **components: Any) -> Engine:
        """Open (or create) the store at `path`, defaulting to `settings.store` (`COGRAG_STORE`).
        `components` replaces parts built from the settings (store, embedder, llm, judge,
        reranker, policy, rules), e.g. a fake LLM in a test."""
        settings = settings or Settings()
        if path is not None:
            settings = settings.model_copy(update={"store": Path(path)})
        return cls(settings, build_components(settings, create=create, **components))

    def answerer(self, config: AnswerConfig | None = None, *, principal: Principal | None = None,
                 search: Any = None, save_traces: bool = True, lookup: Any = None) -> Any:
        """The verified-answer pipeline over this store (SPEC C). `config` replaces
        `settings.answer`; `search` replaces the default hybrid search (and `lookup`, the search of
        a name for `answer.linked_documents`, the default one for `principal`); `save_traces=False`
        for an answerer that is a step of a larger turn."""
        from cograg.answer.answerer import Answerer
        from cograg.answer.verifier import Verifier

        cfg = config or self.settings.answer
        if search is None:
            def search(question: str) -> SearchResult:
                return self.retrieve(question, k=cfg.retrieve_hits, mode="hybrid", principal=principal)
            lookup = lookup or search

        parts = self.components
        verifier = Verifier(parts.judge.get(), embedder=parts.embedder.get(),
                            min_similarity=self.settings.verification.min_claim_similarity,
                            batch=self.settings.verification.judge_batch)
        return Answerer(search=search, llm=deferred_llm(parts.llm), verifier=verifier, config=cfg,
                        verification=self.settings.verification, lookup=lookup,
                        save_trace=(lambda t: self._save_trace(t, "answer")) if save_traces else None)

    def _save_trace(self, trace: Any, kind: str) -> None:
        self.store.save_trace(trace.trace_id, kind, trace.question, trace.model_dump(exclude={"trace_id", "question"}))

    def orchestrator(self, *, principal: Principal | None = None, bus: Any = None,
                     search_options: dict[str, Any] | None = None) -> Any:
        """The control-flow pipeline over this store (SPEC D): router, self-corrective loop,
        planner + DAG executor, synthesizer, all answering through the verified-answer contract.
        `search_options` go into every search of the turn (`doc_ids`, `min_vector_cosine`)."""
        from cograg.orchestrator.orchestrator import Orchestrator

        def search(question: str, k: int = 6) -> SearchResult:
            return self.retrieve(question, k=k, mode="hybrid", principal=principal, **(search_options or {}))

        def chunk_text(chunk_id: str) -> str:
            chunk = self.store.get_chunk(chunk_id)
            return chunk.text if chunk is not None else ""

        parts = self.components
        return Orchestrator(search=search, llm=deferred_llm(parts.llm),
                            # linked documents' name look-ups: this search, not the turn's recorded `s`
                            answerer_factory=lambda s, cfg: self.answerer(cfg, search=s, lookup=search,
                                                                          save_traces=False),
                            judge=parts.judge.get(), chunk_text=chunk_text,
                            save_trace=lambda t: self._save_trace(t, t.route or "answer"), bus=bus,
                            rules=parts.rules.get(), corpus_empty=lambda: self.store.count_chunks() == 0)

    def ask(self, question: str, *, principal: Principal | None = None, config: AnswerConfig | None = None,
            mode: str | None = None, options: Any = None, bus: Any = None, cancel: Any = None,
            doc_ids: list[str] | None = None, search_options: dict[str, Any] | None = None,
            session: str | None = None, owner: str | None = None) -> Any:
        """A verified, cited answer (the contract object of SPEC C1), its trace stored.

        The router picks the cheapest mode that can answer (D1) unless `mode` forces one
        (`R1_ONE_SHOT_RETRIEVE`, `R2_MULTI_RETRIEVE`, `R3_DAG_PLAN`, …); `config` replaces
        `settings.answer` for this turn, `options` is a full TurnOptions (default: from the
        settings), `bus` an EventBus to stream the turn's events. `doc_ids` limits every search
        of the turn to those documents (seed 004's docId scope); `search_options` are further
        SearchRequest fields for every search (e.g. `min_vector_cosine`). `session` names a
        conversation (SPEC E, created on first use): follow-ups are resolved against it, its
        verified facts answer (R0) or inform the turn, and the turn's verified facts are written back.
        `owner` is who the session belongs to (default: the principal's user); a session another
        owner made is not found."""
        from cograg.orchestrator.orchestrator import TurnOptions

        opts = options or TurnOptions.from_settings(self.settings)
        if config is not None:
            opts = opts.model_copy(update={"answer": config})
        if mode is not None:
            opts = opts.model_copy(update={"force_mode": _mode_name(mode)})
        # a question no turn can take fails here, before a model starts loading in the background
        checked_question(question, opts.answer.max_question_chars)
        # nearly every turn calls the LLM: its weights load while the query is embedded and routed
        self.components.llm.prefetch()
        scope = dict(search_options or {})
        if doc_ids is not None:
            scope["doc_ids"] = list(doc_ids)
        turn = None
        if session is not None:
            turn = self.memory().begin_turn(
                session, question, user=owner if owner is not None else principal.user if principal else None,
                source_hit=self._source_hit(principal, scope.get("doc_ids")),
                cache_scope=self._cache_scope(principal, opts, scope), cited_readable=self._cited_readable(principal))
        return self.orchestrator(principal=principal, bus=bus, search_options=scope).ask(
            question, options=opts, cancel=cancel, session=turn)

    # ------------------------------------------------------------------ conversation memory (SPEC E)
    def memory(self) -> Any:
        """The sessions of this store (`cograg.memory.SessionMemory`): list, show, facts, forget,
        compact, delete, export. The memory database opens on first use."""
        if self._memory is None:
            from cograg.memory.service import SessionMemory

            if self.components.memory is None:
                raise StoreError("this engine was built without conversation memory")

            def doc_hash(doc_id: str) -> str | None:
                doc = self.store.get_document(doc_id)
                return doc.content_hash if doc is not None else None

            self._memory = SessionMemory(self.components.memory.get(), self.settings.memory, doc_hash=doc_hash,
                                         generation=self.store.generation, delete_traces=self.store.delete_traces)
        return self._memory

    def _memory_in_use(self) -> bool:
        from cograg.memory.sqlite_store import DB_NAME

        mem = self.components.memory
        return mem is not None and (mem.built or self.settings.memory.backend != "sqlite"
                                    or (Path(self.store.directory) / DB_NAME).exists())

    def _source_hit(self, principal: Principal | None, doc_ids: list[str] | None = None) -> Any:
        """chunk id → the chunk as a search hit, if it still exists and a search of this turn
        could have returned it: `principal` may read it (B3), the corpus policy admits it (its
        snippet visibility carried over), and it lies in the turn's `doc_ids` scope."""
        from cograg.retrieval.models import SearchHit

        policy = self.components.policy.get()

        def hit(chunk_id: str) -> SearchHit | None:
            chunk = self.store.get_chunk(chunk_id) if chunk_id else None
            doc = self.store.get_document(chunk.doc_id) if chunk is not None else None
            if chunk is None or doc is None or not policy.admits(doc.source_path, doc.tags):
                return None
            if doc_ids is not None and doc.doc_id not in doc_ids:
                return None
            if principal is not None:
                allowed = self.store.allowed_doc_ids(principal.acl_keys())
                if allowed is not None and doc.doc_id not in allowed:
                    return None
            return SearchHit(chunk_id=chunk.chunk_id, doc_id=doc.doc_id, seq=chunk.seq, text=chunk.text,
                             start=chunk.start, end=chunk.end, token_count=chunk.token_count, title=doc.title,
                             source=doc.source_path, heading_path=chunk.heading_path, page=chunk.page, score=1.0,
                             snippet_visible=policy.snippet_visible)
        return hit

    def _cited_readable(self, principal: Principal | None) -> Any:
        """chunk id -> whether `principal` may read its document now (`memory.access.cited_readable`)."""
        from cograg.memory.access import cited_readable

        policy = self.components.policy.get()

        def docs_with_prefix(prefix: str) -> list[tuple[str, bool]]:
            return [(d.doc_id, policy.admits(d.source_path, d.tags)) for d in self.store.list_documents()
                    if d.doc_id.startswith(prefix)]
        return cited_readable(self._source_hit(principal), chunk_exists=lambda c: self.store.get_chunk(c) is not None,
                              docs_with_prefix=docs_with_prefix,
                              allowed=lambda: self.store.allowed_doc_ids(principal.acl_keys()) if principal else None)

    def _cache_scope(self, principal: Principal | None, opts: Any, scope: dict[str, Any]) -> dict[str, str]:
        """What a cached answer depends on besides the question, the mode and the facts: the
        model, the documents (their generation), who may read them, the turn's search scope, and
        the policy (routing rules, corpus policy, answer and verification settings)."""
        import hashlib

        policy = "|".join([self.components.rules.get().version, self.components.policy.get().policy_version(),
                           opts.answer.model_dump_json(), self.settings.verification.model_dump_json()])
        return {"model": self.settings.models.llm, "policy": hashlib.sha256(policy.encode()).hexdigest()[:16],
                "documents": self.store.generation(),
                "acl": ",".join(principal.acl_keys()) if principal else "*",
                "scope": json.dumps(scope, sort_keys=True, default=str)}

    def trace(self, trace_id: str) -> dict[str, Any]:
        found = self.store.get_trace(trace_id)
        if found is None:
            raise StoreError(f"no trace {shown_ref(trace_id)}" + _SHORT_PREFIX * (0 < len(trace_id) < 4))
        return found

    def ingest(self, paths: list[Path | str] | Path | str, *, tags: list[str] | None = None,
               acl: list[str] | None = None, progress: ProgressCallback | None = None,
               on_wait: Callable[[], None] | None = None) -> IngestSummary:
        """Sync files/folders into the store (see :func:`cograg.ingest.pipeline.ingest_paths`),
        embedding new and changed chunks in the same transaction as their rows. One path may be
        given alone; an empty list re-syncs every folder ingested before. One ingest into a store
        runs at a time, across processes: another waits (`on_wait` is called first), then finds
        what the first wrote unchanged, instead of both reporting the same files as added."""
        if isinstance(paths, (str, Path)):
            # a string is no list of paths: "docs" would be read a character a path
            if not str(paths).strip():
                raise IngestError("no path given: name a file or folder (an empty list re-syncs the known folders)")
            paths = [paths]
        self.components.embedder.get()  # new chunks are embedded with it (the store checks it matches)
        with directory_lock(self.store.directory, on_wait=on_wait):
            summary = ingest_paths(self.store, paths, settings=self.settings, tags=tags, acl=acl,
                                   progress=progress)
            if self.store.backfill_vectors():
                summary.chunks = self.store.count_chunks()
        if self._memory_in_use():  # facts whose source changed or went are no longer facts (E2)
            try:
                self.memory().sync(force=True)
            except StoreError as exc:  # the documents are committed: a broken memory must not say otherwise
                summary.warnings.append(SkippedFile(path=str(self.settings.store), reason=f"session memory not "
                                                    f"updated ({exc}); its facts are checked again on next use"))
        return summary

    def search(self, query: str, *, k: int = 10, mode: str = "hybrid", principal: Principal | None = None,
               variants: list[str] | None = None, rerank: bool = True, **options: Any) -> SearchResult:
        """Hybrid (or bm25/vector) search with policy, ACL and optional reranking (SPEC B), as a
        user may see it: the text of hits the policy hides (`snippet_visible: false`) is removed."""
        return self.retrieve(query, k=k, mode=mode, principal=principal, variants=variants, rerank=rerank,
                             **options).for_user()

    def retrieve(self, query: str, *, k: int = 10, mode: str = "hybrid", principal: Principal | None = None,
                 variants: list[str] | None = None, rerank: bool = True, **options: Any) -> SearchResult:
        """`search` with every hit's text, for the stages that read it (answers never show the
        text of a hidden hit either: their citations keep ids and sources only)."""
        cfg = self.settings.retrieval
        try:
            req = SearchRequest(
                query=query, k=k, mode=mode, principal=principal, variants=variants or [], rerank=rerank,
                retrieve_k=options.pop("retrieve_k", cfg.retrieve_k),
                rrf_k=options.pop("rrf_k", cfg.rrf_k),
                fusion=options.pop("fusion", cfg.fusion),
                vector_weight=options.pop("vector_weight", cfg.vector_weight),
                fusion_calibration=options.pop("fusion_calibration", load_calibration(cfg.fusion_calibration)),
                feedback=options.pop("feedback", FeedbackSettings() if cfg.feedback else None),
                rerank_candidates=options.pop("rerank_candidates", cfg.rerank_candidates),
                **options)
        except ValidationError as exc:
            first = exc.errors()[0]
            msg = str(first["msg"]).removeprefix("Value error, ")  # pydantic's prefix on a validator's message
            raise QueryError(f"{'.'.join(str(x) for x in first['loc'])}: {msg}") from None
        return self.components.retriever.get().search(req)

    def eval_retrieval(self, beir_dir: Path | str, split: str, *, modes: tuple[str, ...] = ("bm25", "vector", "hybrid"),
                       limit: int | None = None, progress: ProgressCallback | None = None,
                       query_progress: Any = None, query_split: str = "all",
                       rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Ingest a BEIR folder's corpus into this store (incrementally) and score each mode on the
        queries of `query_split` (calibration | evaluation | all); per-query rows go to `rows`."""
        from cograg.eval.retrieval import evaluate, load_beir

        data = load_beir(beir_dir, split)
        skipped = self.ingest([data.corpus], progress=progress).skipped
        if skipped:  # none of it would be in the store, and every score would read 0
            raise IngestError(f"{data.corpus} cannot be used as the corpus: {skipped[0].reason}")

        def run(req: SearchRequest) -> list[str | None]:
            res = self.components.retriever.get().search(req)
            return [str(h.metadata.get("record_id")) if h.metadata.get("record_id") is not None else None
                    for h in res.hits]

        cfg = self.settings.retrieval
        options = {"fusion": cfg.fusion, "rrf_k": cfg.rrf_k, "vector_weight": cfg.vector_weight,
                   "fusion_calibration": load_calibration(cfg.fusion_calibration),
                   "feedback": FeedbackSettings() if cfg.feedback else None}
        report = evaluate(run, data, modes, limit=limit, progress=query_progress,  # type: ignore[arg-type]
                          request_options=options, query_split=query_split, rows=rows)
        report["fusion"] = cfg.fusion
        return report

    def documents(self, *, under: str | None = None) -> list[Document]:
        """All stored documents, sorted by source path."""
        return self.store.list_documents(under=under)

    def document(self, ref: str, *, by_name: bool = True, allowed: set[str] | None = None) -> Document:
        """The one document whose id, id prefix or source path is `ref`; failing those (and with
        `by_name`), whose file name is `ref`. Several matches are an error naming them. With
        `allowed` (the ids a caller may read; None: all) only those documents count: one outside
        it is neither found nor counted among several, so no answer tells of it."""
        def among(docs: list[Document]) -> list[Document]:
            return docs if allowed is None else [d for d in docs if d.doc_id in allowed]

        found = among(self.store.find_documents(ref))
        if not found and _is_existing_path(ref):
            found = among(self.store.find_documents(str(Path(ref).resolve())))
        named = not found and by_name
        if named:
            found = among(self.store.find_documents_named(ref))
        if not found:
            raise StoreError(f"no document matches {shown_ref(ref)}" + _SHORT_PREFIX * (0 < len(ref) < 4))
        if len(found) > 1:
            if named:
                paths = ", ".join(d.source_path for d in found[:5]) + (", ..." if len(found) > 5 else "")
                raise StoreError(f"{shown_ref(ref)} names {len(found)} documents ({paths}); give the path or the id")
            raise StoreError(f"{shown_ref(ref)} matches {len(found)} documents; give more of the id")
        return found[0]

    def chunks(self, doc_id: str) -> list[Chunk]:
        return list(self.store.iter_chunks(doc_id))

    def delete_document(self, ref: str) -> Document:
        """Delete one document with all of its chunks; returns what was deleted."""
        doc = self.document(ref)
        self.store.delete_document(doc.doc_id)
        if self._memory_in_use():
            self.memory().document_deleted(doc.doc_id)
        return doc

    def close(self) -> None:
        self.components.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
