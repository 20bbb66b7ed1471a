"""Embedding during ingest: small documents are embedded together, in batches across documents,
into the embedding cache before they are written, and a large document's embeddings are committed
as they are computed (so a crash keeps them). Fakes only: no model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cograg.config import Settings
from cograg.index.indexing import ChunkIndexer
from cograg.index.sqlite_store import SQLiteStore
from cograg.ingest.pipeline import EMBED_BATCH, ingest_paths
from tests.fakes import HashingEmbedder

pytestmark = pytest.mark.usefixtures("ingest_env")


class RecordingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        self.batches.append(len(texts))
        return super().embed_passages(texts)


def small_docs(folder: Path, n: int) -> Path:
    folder.mkdir()
    for i in range(n):
        (folder / f"note{i:03d}.txt").write_text(f"Note {i}: the tram to stop {i} leaves at {i % 24}:00.",
                                                 encoding="utf-8")
    return folder


def records_file(path: Path, n: int) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": i, "text": f"Record {i}: 林登港 tram line {i} runs every {i % 7 + 3} minutes."},
                                ensure_ascii=False) + "\n")
    return path


def vectors(store: SQLiteStore) -> int:
    return int(store.conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0])


def test_small_documents_are_embedded_in_batches_across_documents(tmp_path: Path) -> None:
    folder = small_docs(tmp_path / "notes", 70)
    embedder = RecordingEmbedder()
    events = []
    with SQLiteStore(tmp_path / "store", indexer=ChunkIndexer(embedder)) as store:
        summary = ingest_paths(store, [folder], settings=Settings(embedder="none"), progress=events.append)
        assert summary.added == 70 and store.check_consistency() == []
        assert vectors(store) == store.count_chunks() == 70
        assert embedder.batches == [EMBED_BATCH, EMBED_BATCH, 70 - 2 * EMBED_BATCH]
    file_events = [e for e in events if e.outcome != "embedding"]
    assert [e.files_done for e in file_events] == list(range(1, 71))
    assert {e.outcome for e in file_events} == {"added"}
    assert [e.passages_embedded for e in events if e.outcome == "embedding"] == [32, 64, 70]

    # re-ingesting embeds only the changed text
    (folder / "note005.txt").write_text("Note 5 was rewritten: the tram now leaves at noon.", encoding="utf-8")
    with SQLiteStore(tmp_path / "store", indexer=ChunkIndexer(embedder)) as store:
        embedder.batches.clear()
        summary = ingest_paths(store, [folder], settings=Settings(embedder="none"))
        assert (summary.updated, summary.unchanged) == (1, 69)
        assert embedder.batches == [1] and vectors(store) == 70


def test_large_records_file_commits_embeddings_before_the_document(tmp_path: Path) -> None:
    path = records_file(tmp_path / "records.jsonl", 100)
    embedder = RecordingEmbedder()
    seen_in_cache: list[tuple[int, int]] = []

    class Watching(RecordingEmbedder):
        def embed_passages(self, texts: list[str]) -> np.ndarray:
            # what another connection sees while the ingest is running: the cache grows in
            # committed steps, the document is not there yet
            with SQLiteStore(tmp_path / "store") as other:
                seen_in_cache.append((
                    int(other.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]),
                    other.count_documents()))
            return embedder.embed_passages(texts)

    with SQLiteStore(tmp_path / "store", indexer=ChunkIndexer(Watching())) as store:
        ingest_paths(store, [path], settings=Settings(embedder="none"))
        n = store.count_chunks()
        assert n >= 100 and vectors(store) == n
    assert all(b <= EMBED_BATCH for b in embedder.batches)
    assert seen_in_cache == [(i * EMBED_BATCH, 0) for i in range(len(embedder.batches))]


def test_without_an_embedder_documents_are_written_straight_away(tmp_path: Path) -> None:
    folder = small_docs(tmp_path / "notes", 5)
    with SQLiteStore(tmp_path / "store") as store:
        assert ingest_paths(store, [folder]).added == 5
        assert vectors(store) == 0 and store.count_chunks() == 5
