"""Incremental sync (SPEC A4): walk paths, load, normalise, chunk and store each file.

Idempotent: a file whose content hash and chunking are unchanged is not touched; a changed file is
replaced in one transaction; a file that vanished from an ingested root is deleted with all of its
chunks. A file that fails to load is reported as skipped and never stops the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cograg.config import ChunkingConfig, Settings
from cograg.documents import Chunk, Document
from cograg.errors import IngestError, LoaderError
from cograg.index.indexing import index_text
from cograg.index.sqlite_store import SQLiteStore
from cograg.ingest import files, loaders
# chunk_id_for and PIPELINE_VERSION are imported from here too
from cograg.ingest.document_chunks import (PIPELINE_VERSION, chunk_document, chunk_id_for, chunker_signature,
                                           doc_id_for)
from cograg.ingest.models import Block, IngestSummary, LoadedDocument, SkippedFile
from cograg.ingest.sync import RootKind, SourceState, root_kind, source_state

CHUNK_BATCH = 512
# Texts per embedder call, across documents: small documents are embedded together into the
# embedding cache before they are written (the C engine's and ONNX Runtime's per-call set-up
# dominates one short text).
EMBED_BATCH = 32
# Documents read ahead of their writes while their texts wait for a full embedding batch.
MAX_PENDING_DOCS = 64


@dataclass
class ProgressEvent:
    """Emitted after each file (and after each embedding batch): how far the run is."""

    path: str
    files_done: int
    files_total: int
    chunks_written: int
    outcome: str  # added | updated | unchanged | deleted | skipped | metadata | embedding
    passages_embedded: int = 0


@dataclass
class _PendingWrite:
    """A loaded and chunked document whose texts are (being) embedded, not written yet."""

    root: Path
    path: Path
    doc: Document
    loaded: LoadedDocument
    config: ChunkingConfig
    existing: Document | None
    chunks: list[Chunk] | None  # None: too many to keep, loaded and chunked again when written
    info: files.FileInfo


ProgressCallback = Callable[[ProgressEvent], None]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class Ingestor:
    """Runs one ingest over paths into a store. See :func:`ingest_paths`."""

    def __init__(self, store: SQLiteStore, settings: Settings, *, tags: list[str] | None = None,
                 acl: list[str] | None = None, progress: ProgressCallback | None = None) -> None:
        self.store = store
        self.settings = settings
        # None = not given: existing documents keep theirs, new ones take their root's defaults
        self.tags = None if tags is None else sorted(set(tags))
        self.acl = None if acl is None else sorted(set(acl))
        self._root_defaults: dict[str, tuple[list[str], list[str]]] = {}
        self.progress = progress
        self.summary = IngestSummary()
        self._pending: list[_PendingWrite] = []
        self._files_done = 0
        self._files_total = 0
        self._current = ""
        self._filler = store.embedding_filler(EMBED_BATCH, on_batch=self._embedded)

    def run(self, paths: list[Path]) -> IngestSummary:
        started = time.monotonic()
        roots = list(dict.fromkeys(Path(os.path.abspath(os.path.expanduser(p))) for p in paths))
        if not roots:
            roots = [Path(r) for r in self.store.roots()]
            if not roots:
                raise IngestError("nothing to ingest: give a PATH (no earlier ingest roots are recorded)")
        known_roots = set(self.store.roots())
        work: list[tuple[Path, Path, str | None]] = []  # (root, file, walk problem)
        vanished_roots: list[Path] = []
        dir_roots: list[Path] = []
        for root in roots:
            if not files.utf8_path(root):
                raise IngestError(f"path is not valid UTF-8: {files.readable_path(root)}")
            kind, why = root_kind(root)
            if kind is RootKind.UNREADABLE:
                self._skip(root, why)  # cannot tell what is there: touch nothing under it
                continue
            if kind is RootKind.MISSING:
                if str(root) in known_roots or self.store.list_documents(under=str(root)):
                    vanished_roots.append(root)
                    continue
                raise IngestError(f"path not found: {root}")
            if kind is RootKind.DIR:
                dir_roots.append(root)
                work.extend((root, f, why) for f, why in files.walk_files(root) if not self._in_store(root, f))
            else:
                work.append((root, root, None))
        work = self._dedupe(work)

        self._files_total = len(work)
        seen: set[str] = set()
        for root, path, problem in work:
            source = str(path)
            seen.add(source)
            self._current = files.readable_path(path)
            if problem is None and not files.utf8_path(path):
                # the store keeps a source as UTF-8 text: such a name cannot be a document's source
                problem = "file name is not valid UTF-8 (rename the file to ingest it)"
            outcome = self._one(root, path, problem)
            if outcome is not None:
                self._done(self._current, outcome)
        self._write_pending()

        for root in roots:
            if root in vanished_roots or root in dir_roots:
                self._sweep(root, seen)
            if root in vanished_roots:
                self.store.remove_root(str(root))
            elif root in dir_roots:
                self.store.add_root(str(root), tags=self.tags, acl=self.acl)
        self.summary.chunks = self.store.count_chunks()
        self.summary.elapsed_s = round(time.monotonic() - started, 3)
        return self.summary

    def _sweep(self, root: Path, seen: set[str]) -> None:
        """Delete the stored documents under `root` that the walk did not meet and whose source is
        gone (see :mod:`cograg.ingest.sync`); one that cannot be checked now is kept, reported."""
        for doc in self.store.list_documents(under=str(root)):
            if doc.source_path in seen:
                continue
            seen.add(doc.source_path)  # nested roots: checked and reported once
            state, why = source_state(doc.source_path)
            if state is SourceState.GONE:
                self._delete(doc)
            elif state is SourceState.UNKNOWN:
                self._skip(Path(doc.source_path), why)

    def _delete(self, doc: Document) -> str:
        if self.store.delete_document(doc.doc_id):
            self.summary.deleted += 1
        return "deleted"

    def _failed(self, path: Path, reason: str, existing: Document | None) -> str:
        """A file that could not be synced. Its stored document is deleted if the source is no
        longer a file (broken symlink, folder, FIFO): the document is gone, not unreadable. A
        still-regular file keeps its stored version: the failure may be transient."""
        if existing is None:
            return self._skip(path, reason)
        if source_state(path)[0] is SourceState.GONE:
            return self._delete(existing)
        return self._skip(path, reason + "; previous version kept")

    def _in_store(self, root: Path, path: Path) -> bool:
        """Whether `path` is the store's own (its database, policy, uploads) found by walking a
        folder that holds the store: those are not the user's documents. A root inside the store
        (its uploads folder) is walked as any other."""
        store_dir = Path(os.path.abspath(self.store.directory))
        return store_dir in path.parents and store_dir not in root.parents and root != store_dir

    def _dedupe(self, work: list[tuple[Path, Path, str | None]]) -> list[tuple[Path, Path, str | None]]:
        """A file reachable from several roots (nested roots) is synced once, under the root it
        already has if that is one of them, so re-syncing nested roots stays idempotent."""
        index: dict[str, int] = {}
        unique: list[tuple[Path, Path, str | None]] = []
        for item in work:
            key = str(item[1])
            if key not in index:
                index[key] = len(unique)
                unique.append(item)
                continue
            existing = self.store.get_document_by_path(key) if files.utf8_path(key) else None
            if existing is not None and existing.root == str(item[0]):
                unique[index[key]] = item
        return unique

    def _metadata_for(self, root: Path, existing: Document | None) -> tuple[list[str], list[str]]:
        if str(root) not in self._root_defaults:
            self._root_defaults[str(root)] = self.store.root_defaults(str(root)) or ([], [])
        root_tags, root_acl = self._root_defaults[str(root)]
        tags = self.tags if self.tags is not None else (existing.tags if existing else root_tags)
        acl = self.acl if self.acl is not None else (existing.acl if existing else root_acl)
        return tags, acl

    def _skip(self, path: Path, reason: str) -> str:
        self.summary.skipped.append(SkippedFile(path=files.readable_path(path), reason=reason))
        return "skipped"

    def _done(self, source: str, outcome: str) -> None:
        self._files_done += 1
        if self.progress:
            self.progress(ProgressEvent(source, self._files_done, self._files_total,
                                        self.summary.chunks_written, outcome, self._filler.embedded))

    def _embedded(self, n: int) -> None:
        if self.progress:
            self.progress(ProgressEvent(self._current, self._files_done, self._files_total,
                                        self.summary.chunks_written, "embedding", self._filler.embedded))

    def _one(self, root: Path, path: Path, problem: str | None) -> str | None:
        """Sync one file; None when its write waits for the embeddings of its texts."""
        source = str(path)
        existing = self.store.get_document_by_path(source) if files.utf8_path(source) else None
        if problem is not None:
            return self._failed(path, problem, existing)
        try:
            info = files.inspect_file(path, int(self.settings.max_file_mb * 1e6),
                                      max_code_mb=self.settings.max_code_mb)
        except LoaderError as exc:
            return self._failed(path, str(exc), existing)
        config = self.settings.chunking_for(_doc_type_for(info.fmt))
        signature = chunker_signature(config)
        tags, acl = self._metadata_for(root, existing)
        doc = Document(
            doc_id=doc_id_for(source), source_path=source, root=str(root), content_hash=info.sha256,
            doc_type=_doc_type_for(info.fmt), title=path.name, tags=tags, acl=acl,
            size_bytes=info.size, updated_at=_iso(info.mtime), ingested_at=_iso(time.time()),
            chunker=signature, chunk_count=0, metadata={},
        )
        if existing is not None and existing.content_hash == info.sha256 and existing.chunker == signature:
            if existing.tags == tags and existing.acl == acl:
                if existing.root != str(root):
                    # reached from another (nested) root: the root it was last synced under is
                    # recorded, but nothing a reader sees changed, so it is not an update
                    self.store.update_document_metadata(existing.model_copy(update={"root": str(root)}))
                self.summary.unchanged += 1
                return "unchanged"
            doc = existing.model_copy(update={"tags": tags, "acl": acl, "root": str(root),
                                              "ingested_at": doc.ingested_at})
            self.store.update_document_metadata(doc)
            self.summary.updated += 1
            return "metadata"
        try:
            loaded = loaders.load(info)
            doc.title = loaded.title
            doc.metadata = {**loaded.metadata, "format": info.fmt}
            if info.encoding and info.encoding != "utf-8-sig":
                doc.metadata["encoding"] = info.encoding
            pending = _PendingWrite(root, path, doc, loaded, config, existing,
                                    [] if self._filler.active else None, info)
            if self._filler.active:
                self._embed_ahead(pending)
        except LoaderError as exc:
            return self._failed(path, str(exc), existing)
        except (UnicodeDecodeError, OSError, ValueError, RecursionError, MemoryError) as exc:
            return self._failed(path, _error_reason(exc), existing)
        if not self._filler.active:
            return self._write(pending)  # nothing to embed: written straight away, streaming
        self._pending.append(pending)
        if self._filler.queued == 0 or len(self._pending) >= MAX_PENDING_DOCS:
            self._write_pending()
        return None

    def _embed_ahead(self, p: _PendingWrite) -> None:
        """Chunk the document and queue its texts for embedding; keep the chunks if they are few."""
        count = 0
        texts: list[str] = []
        for chunk in chunk_document(p.loaded, p.doc.doc_id, p.config):
            count += 1
            if p.chunks is not None:
                p.chunks.append(chunk)
                if len(p.chunks) > CHUNK_BATCH:
                    p.chunks = None
            texts.append(index_text(chunk, p.doc.title))
            if len(texts) >= CHUNK_BATCH:
                self._filler.add(texts)
                texts.clear()
        self._filler.add(texts)
        if count == 0:
            raise LoaderError("no text content after normalisation")

    def _write_pending(self) -> None:
        """Embed what is still queued, then write every pending document (one transaction each)."""
        if not self._pending:
            return
        self._filler.flush()
        pending, self._pending = self._pending, []
        for p in pending:
            self._done(str(p.path), self._write(p))

    def _write(self, p: _PendingWrite) -> str:
        doc, existing = p.doc, p.existing
        try:
            with self.store.write_document(doc) as writer:
                if p.chunks is not None:
                    chunks: Iterable[Chunk] = p.chunks
                else:  # blocks may be streamed (records): load again
                    loaded = p.loaded if not self._filler.active else loaders.load(p.info)
                    chunks = chunk_document(loaded, doc.doc_id, p.config)
                batch: list[Chunk] = []
                for chunk in chunks:
                    batch.append(chunk)
                    if len(batch) >= CHUNK_BATCH:
                        writer.add_chunks(batch)
                        batch.clear()
                writer.add_chunks(batch)
                if writer.count == 0:
                    raise LoaderError("no text content after normalisation")
        except LoaderError as exc:
            return self._failed(p.path, str(exc), existing)
        except (UnicodeDecodeError, OSError, ValueError, RecursionError, MemoryError) as exc:
            return self._failed(p.path, _error_reason(exc), existing)
        for w in p.loaded.warnings:
            self.summary.warnings.append(SkippedFile(path=doc.source_path, reason=w))
        self.summary.chunks_written += doc.chunk_count
        if existing is None:
            self.summary.added += 1
            return "added"
        self.summary.updated += 1
        return "updated"


def _error_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _doc_type_for(fmt: str) -> str:
    return files.DOC_TYPE_OF_FORMAT.get(fmt, fmt)


def ingest_paths(store: SQLiteStore, paths: list[Path | str], *, settings: Settings | None = None,
                 tags: list[str] | None = None, acl: list[str] | None = None,
                 progress: ProgressCallback | None = None) -> IngestSummary:
    """Sync `paths` (files or folders) into `store`; with no paths, re-sync every recorded root.

    Returns counts of documents added, updated, unchanged and deleted, the skipped files with
    reasons, and the store's total chunk count.
    """
    return Ingestor(store, settings or Settings(), tags=tags, acl=acl, progress=progress).run(
        [Path(p) for p in paths])


__all__ = ["PIPELINE_VERSION", "Block", "ProgressEvent", "chunk_document", "chunk_id_for", "doc_id_for",
           "ingest_paths"]
