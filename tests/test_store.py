"""The embedded store (SPEC I): one SQLite database in WAL mode, schema versioning, atomic
per-document writes, cascading deletes and the consistency check."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cograg.documents import Chunk, Document
from cograg.errors import StoreError
from cograg.index.sqlite_store import DB_NAME, SCHEMA_VERSION, SQLiteStore
from cograg.ingest.pipeline import chunk_id_for, ingest_paths

pytestmark = pytest.mark.usefixtures("ingest_env")


def make_doc(n: int = 1, *, content: str = "hash-1", tags=("t1",), acl=("staff",)) -> Document:
    return Document(
        doc_id=f"doc{n:013d}", source_path=f"/data/doc{n}.txt", root="/data", content_hash=content,
        doc_type="text", title=f"Doc {n}", tags=list(tags), acl=list(acl), size_bytes=100,
        updated_at="2024-01-01T00:00:00+00:00", ingested_at="2024-01-01T00:00:00+00:00",
        chunker="v1:recursive:256:32", chunk_count=0, metadata={"k": "v"})


def make_chunks(doc: Document, texts: list[str]) -> list[Chunk]:
    out, pos = [], 0
    for seq, text in enumerate(texts):
        out.append(Chunk(chunk_id=chunk_id_for(doc.doc_id, seq, text), doc_id=doc.doc_id, seq=seq,
                         text=text, start=pos, end=pos + len(text), orig_start=pos,
                         orig_end=pos + len(text), heading_path=["Section"], page=None,
                         token_count=len(text.split()), metadata={"n": seq}))
        pos += len(text) + 2
    return out


def write(store: SQLiteStore, doc: Document, texts: list[str]) -> None:
    with store.write_document(doc) as w:
        w.add_chunks(make_chunks(doc, texts))


def raw_count(store_dir: Path, table: str, doc_id: str) -> int:
    conn = sqlite3.connect(store_dir / DB_NAME)
    try:
        return conn.execute(f"SELECT count(*) FROM {table} WHERE doc_id=?", (doc_id,)).fetchone()[0]
    finally:
        conn.close()


def test_database_file_wal_mode_and_schema_version(store: SQLiteStore, store_dir: Path) -> None:
    assert (store_dir / DB_NAME).is_file()
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.schema_version() == SCHEMA_VERSION >= 1
    # a second, independent connection sees WAL and the version too (they are persistent)
    conn = sqlite3.connect(store_dir / DB_NAME)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"documents", "chunks", "document_tags", "document_acl", "roots", "meta"} <= tables
    doc_cols = {r[1] for r in conn.execute("PRAGMA table_info(documents)")}
    assert {"source_path", "content_hash", "doc_type", "title", "updated_at", "metadata"} <= doc_cols
    chunk_cols = {r[1] for r in conn.execute("PRAGMA table_info(chunks)")}
    assert {"doc_id", "chunk_id", "text", "start", "end", "heading_path", "page", "token_count"} <= chunk_cols
    conn.close()


def test_reopening_is_idempotent_and_keeps_data(store_dir: Path) -> None:
    with SQLiteStore(store_dir) as s:
        doc = make_doc()
        write(s, doc, ["alpha", "beta"])
        s.add_root("/data")
    for _ in range(3):
        with SQLiteStore(store_dir) as s:
            assert s.schema_version() == SCHEMA_VERSION
            assert [d.doc_id for d in s.list_documents()] == [doc.doc_id]
            assert [c.text for c in s.iter_chunks(doc.doc_id)] == ["alpha", "beta"]
            assert s.roots() == ["/data"]
            assert s.check_consistency() == []


def test_missing_store_not_created_when_create_false(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store"):
        SQLiteStore(tmp_path / "nothing", create=False)
    assert not (tmp_path / "nothing").exists()


def test_newer_schema_version_is_refused(store_dir: Path) -> None:
    SQLiteStore(store_dir).close()
    conn = sqlite3.connect(store_dir / DB_NAME)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        SQLiteStore(store_dir)
    # and nothing was changed by the refused open
    conn = sqlite3.connect(store_dir / DB_NAME)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    conn.close()


def test_not_a_database_is_a_store_error(store_dir: Path) -> None:
    store_dir.mkdir()
    (store_dir / DB_NAME).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open store"):
        SQLiteStore(store_dir)


def test_old_schema_is_migrated(store_dir: Path) -> None:
    """A store at version 1 (documents/chunks only) is brought up to date in place."""
    from cograg.index.sqlite_store import MIGRATIONS

    store_dir.mkdir()
    conn = sqlite3.connect(store_dir / DB_NAME)
    conn.executescript(MIGRATIONS[0])
    conn.execute("PRAGMA user_version=1")
    conn.execute("INSERT INTO documents(doc_id, source_path, content_hash, doc_type, title, size_bytes,"
                 " updated_at, ingested_at, chunker, chunk_count) VALUES('d1', '/x', 'h', 'text', 't',"
                 " 1, 'u', 'i', 'c', 0)")
    conn.commit()
    conn.close()
    with SQLiteStore(store_dir) as s:
        assert s.schema_version() == SCHEMA_VERSION
        assert [d.doc_id for d in s.list_documents()] == ["d1"]


def test_write_document_round_trip(store: SQLiteStore) -> None:
    doc = make_doc(tags=("b", "a", "a"), acl=("g2", "g1"))
    write(store, doc, ["first chunk", "second chunk", "third chunk"])
    got = store.get_document(doc.doc_id)
    assert got is not None
    assert got.chunk_count == 3 and doc.chunk_count == 3
    assert got.tags == ["a", "b"] and got.acl == ["g1", "g2"]
    assert got.metadata == {"k": "v"} and got.title == "Doc 1"
    assert store.get_document_by_path("/data/doc1.txt") == got
    chunks = list(store.iter_chunks(doc.doc_id))
    assert chunks == make_chunks(doc, ["first chunk", "second chunk", "third chunk"])
    assert store.get_chunk(chunks[1].chunk_id) == chunks[1]
    assert store.count_chunks() == 3 and store.count_documents() == 1
    assert store.check_consistency() == []


def test_exception_inside_write_keeps_previous_version(store: SQLiteStore, store_dir: Path) -> None:
    old = make_doc(content="old-hash", tags=("old",))
    write(store, old, ["old one", "old two"])
    old_chunks = list(store.iter_chunks(old.doc_id))

    new = make_doc(content="new-hash", tags=("new",))
    with pytest.raises(RuntimeError, match="boom"):
        with store.write_document(new) as w:
            w.add_chunks(make_chunks(new, ["new one", "new two", "new three"]))
            # the new rows are visible inside the transaction...
            assert store.conn.execute("SELECT count(*) FROM chunks WHERE text LIKE 'new%'").fetchone()[0] == 3
            raise RuntimeError("boom")

    # ...and all gone after it: the old document, its tags and chunks are intact
    got = store.get_document(old.doc_id)
    assert got is not None and got.content_hash == "old-hash" and got.tags == ["old"]
    assert got.chunk_count == 2
    assert list(store.iter_chunks(old.doc_id)) == old_chunks
    assert store.check_consistency() == []
    # a separate connection agrees (nothing half-written was committed)
    conn = sqlite3.connect(store_dir / DB_NAME)
    assert conn.execute("SELECT content_hash FROM documents").fetchall() == [("old-hash",)]
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 2
    conn.close()
    # the store is still usable after the rollback
    write(store, new, ["new one"])
    assert [c.text for c in store.iter_chunks(new.doc_id)] == ["new one"]


def test_failed_first_write_leaves_no_document(store: SQLiteStore) -> None:
    doc = make_doc(5)
    with pytest.raises(ValueError):
        with store.write_document(doc) as w:
            w.add_chunks(make_chunks(doc, ["a", "b"]))
            raise ValueError("loader failed half-way")
    assert store.get_document(doc.doc_id) is None
    assert store.count_chunks() == 0 and store.check_consistency() == []


def test_rewrite_replaces_all_chunks(store: SQLiteStore) -> None:
    doc = make_doc()
    write(store, doc, ["a", "b", "c", "d"])
    write(store, make_doc(content="v2"), ["x"])
    assert [c.text for c in store.iter_chunks(doc.doc_id)] == ["x"]
    assert store.get_document(doc.doc_id).chunk_count == 1
    assert store.count_chunks() == 1


def test_delete_cascades_to_chunks_tags_and_acl(store: SQLiteStore, store_dir: Path) -> None:
    keep, gone = make_doc(1), make_doc(2)
    write(store, keep, ["keep a", "keep b"])
    write(store, gone, ["gone a", "gone b", "gone c"])
    for table in ("chunks", "document_tags", "document_acl"):
        assert raw_count(store_dir, table, gone.doc_id) > 0
    assert store.delete_document(gone.doc_id) is True
    for table in ("chunks", "document_tags", "document_acl"):
        assert raw_count(store_dir, table, gone.doc_id) == 0, table
    assert store.get_document(gone.doc_id) is None
    assert store.delete_document(gone.doc_id) is False  # already gone
    assert [c.text for c in store.iter_chunks(keep.doc_id)] == ["keep a", "keep b"]
    assert store.count_chunks() == 2
    assert store.check_consistency() == []


def test_update_metadata_does_not_touch_chunks(store: SQLiteStore, store_dir: Path) -> None:
    doc = make_doc()
    write(store, doc, ["a", "b"])
    rowids = store.conn.execute("SELECT id FROM chunks ORDER BY id").fetchall()
    store.update_document_metadata(doc.model_copy(update={"tags": ["x", "y"], "acl": []}))
    got = store.get_document(doc.doc_id)
    assert got.tags == ["x", "y"] and got.acl == [] and got.chunk_count == 2
    assert store.conn.execute("SELECT id FROM chunks ORDER BY id").fetchall() == rowids


def test_check_consistency_detects_problems(store: SQLiteStore) -> None:
    doc = make_doc()
    write(store, doc, ["a", "b"])
    assert store.check_consistency() == []
    # simulate damage that a non-atomic writer could leave behind
    store.conn.execute("UPDATE documents SET chunk_count=5 WHERE doc_id=?", (doc.doc_id,))
    assert store.check_consistency() == [f"document {doc.doc_id} records 5 chunks but has 2"]
    store.conn.execute("PRAGMA foreign_keys=OFF")
    store.conn.execute("DELETE FROM documents")
    problems = store.check_consistency()
    assert problems == ["2 chunks without a document"]


def test_roots(store: SQLiteStore) -> None:
    store.add_root("/a")
    store.add_root("/b")
    store.add_root("/a")
    assert store.roots() == ["/a", "/b"]
    store.remove_root("/a")
    assert store.roots() == ["/b"]


def test_find_documents_by_id_prefix_and_path(store: SQLiteStore) -> None:
    write(store, make_doc(1), ["a"])
    write(store, make_doc(2), ["b"])
    assert [d.doc_id for d in store.find_documents("doc0000000000001")] == ["doc0000000000001"]
    assert [d.doc_id for d in store.find_documents("/data/doc2.txt")] == ["doc0000000000002"]
    assert len(store.find_documents("doc000")) == 2  # ambiguous prefix
    assert store.find_documents("zzz") == []


@pytest.mark.parametrize("ref", ["", "%", "_", "%%"])
def test_find_documents_wildcards_match_nothing(store: SQLiteStore, ref: str) -> None:
    write(store, make_doc(1), ["a"])
    assert store.find_documents(ref) == []


def test_ingested_store_is_consistent_and_in_wal(store: SQLiteStore, corpus_dir: Path) -> None:
    ingest_paths(store, [corpus_dir])
    assert store.check_consistency() == []
    rows = store.conn.execute(
        "SELECT d.chunk_count, count(c.id) FROM documents d JOIN chunks c USING (doc_id) "
        "GROUP BY d.doc_id").fetchall()
    assert len(rows) == 9 and all(a == b > 0 for a, b in rows)
    # chunk ids are unique and seq is 0..n-1 per document
    for d in store.list_documents():
        seqs = [c.seq for c in store.iter_chunks(d.doc_id)]
        assert seqs == list(range(d.chunk_count))
    n = store.conn.execute("SELECT count(DISTINCT chunk_id), count(*) FROM chunks").fetchone()
    assert n[0] == n[1]



def test_get_trace_by_id_and_by_unique_prefix(store: SQLiteStore) -> None:
    store.save_trace("tr_abcd0001", "ask", "q1", {"route": "R1"})
    store.save_trace("tr_abcd0002", "ask", "q2", {"route": "R2"})
    store.save_trace("tr_ffff0003", "ask", "q3", {"route": "R3"})
    assert store.get_trace("tr_abcd0001")["question"] == "q1"
    assert store.get_trace("tr_abcd0002")["route"] == "R2"
    assert store.get_trace("tr_f")["question"] == "q3"  # the only one starting so
    with pytest.raises(StoreError, match="'tr_abcd' matches 2 traces; give more of the id"):
        store.get_trace("tr_abcd")  # two start so: not a guess, and not "no trace" either
    assert store.get_trace("tr_abcd", exact=True) is None  # the HTTP API's lookup: whole ids only


@pytest.mark.parametrize("ref", ["", "%", "_", "tr_", "tr_%", "tr__bcd0001", "____abcd0001", "TR_ABCD0001"])
def test_get_trace_wildcards_case_and_short_prefixes_match_nothing(store: SQLiteStore, ref: str) -> None:
    store.save_trace("tr_abcd0001", "ask", "q1", {"route": "R1"})
    assert store.get_trace(ref) is None
