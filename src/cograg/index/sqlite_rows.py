"""Documents and chunks as rows of the embedded store: read back into `Document` and `Chunk`
(one by one, or in batches for search hits), and written — a document's row with its tags and
ACL, then its chunks through a writer that indexes them in the same transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from cograg.documents import Chunk, Document
from cograg.index.indexing import ChunkIndexer


def chunk_from_row(row: sqlite3.Row | dict) -> Chunk:
    data = dict(row)
    data.pop("id", None)
    data["heading_path"] = json.loads(data["heading_path"])
    data["metadata"] = json.loads(data["metadata"])
    # rows were validated on the way in; re-validating on every search read is the hot path
    return Chunk.model_construct(**data)


def document_from_row(conn: Any, row: sqlite3.Row) -> Document:
    tags = [r[0] for r in conn.execute(
        "SELECT tag FROM document_tags WHERE doc_id=? ORDER BY tag", (row["doc_id"],))]
    acl = [r[0] for r in conn.execute(
        "SELECT grp FROM document_acl WHERE doc_id=? ORDER BY grp", (row["doc_id"],))]
    data = dict(row)
    data["metadata"] = json.loads(data["metadata"])
    return Document(**data, tags=tags, acl=acl)


def documents_by_id(conn: Any, doc_ids: list[str]) -> dict[str, Document]:
    """Documents with their tags and ACL in three queries per 500 (search hits span many
    documents; one `get_document` each was most of a search's row loading)."""
    out: dict[str, Document] = {}
    for i in range(0, len(doc_ids), 500):
        part = doc_ids[i:i + 500]
        marks = ",".join("?" * len(part))
        tags: dict[str, list[str]] = {d: [] for d in part}
        acl: dict[str, list[str]] = {d: [] for d in part}
        for doc_id, tag in conn.execute(
                f"SELECT doc_id, tag FROM document_tags WHERE doc_id IN ({marks}) ORDER BY tag", part):
            tags[doc_id].append(tag)
        for doc_id, grp in conn.execute(
                f"SELECT doc_id, grp FROM document_acl WHERE doc_id IN ({marks}) ORDER BY grp", part):
            acl[doc_id].append(grp)
        for row in conn.execute(f"SELECT * FROM documents WHERE doc_id IN ({marks})", part):
            data = dict(row)
            data["metadata"] = json.loads(data["metadata"])
            out[row["doc_id"]] = Document(**data, tags=tags[row["doc_id"]], acl=acl[row["doc_id"]])
    return out


def insert_document_row(conn: sqlite3.Connection, doc: Document) -> None:
    conn.execute(
        "INSERT INTO documents(doc_id, source_path, root, content_hash, doc_type, title, size_bytes,"
        " updated_at, ingested_at, chunker, chunk_count, metadata) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
        (doc.doc_id, doc.source_path, doc.root, doc.content_hash, doc.doc_type, doc.title,
         doc.size_bytes, doc.updated_at, doc.ingested_at, doc.chunker, doc.chunk_count,
         json.dumps(doc.metadata, ensure_ascii=False)))
    write_tags_acl(conn, doc)


def write_tags_acl(conn: sqlite3.Connection, doc: Document) -> None:
    conn.execute("DELETE FROM document_tags WHERE doc_id=?", (doc.doc_id,))
    conn.execute("DELETE FROM document_acl WHERE doc_id=?", (doc.doc_id,))
    conn.executemany("INSERT INTO document_tags(doc_id, tag) VALUES(?, ?)",
                     [(doc.doc_id, t) for t in sorted(set(doc.tags))])
    conn.executemany("INSERT INTO document_acl(doc_id, grp) VALUES(?, ?)",
                     [(doc.doc_id, g) for g in sorted(set(doc.acl))])


class SQLiteDocumentWriter:
    """Adds one document's chunks inside its write transaction, indexing each batch as it goes."""

    def __init__(self, conn: sqlite3.Connection, doc_id: str, indexer: ChunkIndexer, title: str) -> None:
        self.conn = conn
        self.doc_id = doc_id
        self.indexer = indexer
        self.title = title
        self.count = 0

    def add_chunks(self, chunks: Iterable[Chunk]) -> None:
        chunks_list = list(chunks)
        rows = [
            (c.chunk_id, self.doc_id, c.seq, c.text, c.start, c.end, c.orig_start, c.orig_end,
             json.dumps(c.heading_path, ensure_ascii=False), c.page, c.token_count,
             json.dumps(c.metadata, ensure_ascii=False))
            for c in chunks_list
        ]
        self.conn.executemany(
            "INSERT INTO chunks(chunk_id, doc_id, seq, text, start, end, orig_start, orig_end,"
            " heading_path, page, token_count, metadata) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        if rows:
            ids = dict(self.conn.execute(
                "SELECT seq, id FROM chunks WHERE doc_id=? AND seq BETWEEN ? AND ?",
                (self.doc_id, rows[0][2], rows[-1][2])).fetchall())
            self.indexer.index(self.conn, [(ids[c.seq], c) for c in chunks_list], self.title)
        self.count += len(rows)


__all__ = ["SQLiteDocumentWriter", "chunk_from_row", "document_from_row", "documents_by_id", "insert_document_row",
           "write_tags_acl"]
