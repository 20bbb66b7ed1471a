"""Opening the embedded store's database (SPEC I): the connection and its pragmas, the write
transaction every change runs in, the schema migrations, and the keyword terms kept in step with
the analyser."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cograg.errors import StoreError
from cograg.index.analyzer import ANALYZER_VERSION, fts_document
from cograg.index.indexing import index_text
from cograg.index.sqlite_conn import SerializedConnection
from cograg.index.sqlite_rows import chunk_from_row

DB_NAME = "cograg.db"

# Each migration moves the schema from version i to i+1; never edit a released one.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE roots (path TEXT PRIMARY KEY, added_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP);
    CREATE TABLE documents (
        doc_id TEXT PRIMARY KEY,
        source_path TEXT NOT NULL UNIQUE,
        root TEXT,
        content_hash TEXT NOT NULL,
        doc_type TEXT NOT NULL,
        title TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        ingested_at TEXT NOT NULL,
        chunker TEXT NOT NULL,
        chunk_count INTEGER NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX documents_root ON documents(root);
    CREATE TABLE document_tags (
        doc_id TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (doc_id, tag)
    );
    CREATE TABLE document_acl (
        doc_id TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
        grp TEXT NOT NULL,
        PRIMARY KEY (doc_id, grp)
    );
    CREATE INDEX document_acl_grp ON document_acl(grp);
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY,
        chunk_id TEXT NOT NULL UNIQUE,
        doc_id TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        text TEXT NOT NULL,
        start INTEGER NOT NULL,
        end INTEGER NOT NULL,
        orig_start INTEGER NOT NULL,
        orig_end INTEGER NOT NULL,
        heading_path TEXT NOT NULL DEFAULT '[]',
        page INTEGER,
        token_count INTEGER NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        UNIQUE (doc_id, seq)
    );
    """,
    # 2: keyword index (FTS5 over analysed terms, rowid = chunks.id), dense vectors and the
    # embedding cache keyed by the hash of the embedded text.
    """
    CREATE VIRTUAL TABLE chunks_fts USING fts5(terms, tokenize='unicode61 remove_diacritics 0');
    CREATE TABLE chunk_vectors (
        chunk_rowid INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
        vec BLOB NOT NULL
    );
    CREATE TABLE embedding_cache (
        model TEXT NOT NULL,
        text_hash TEXT NOT NULL,
        vec BLOB NOT NULL,
        PRIMARY KEY (model, text_hash)
    ) WITHOUT ROWID;
    CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN DELETE FROM chunks_fts WHERE rowid = old.id; END;
    """,
    # 3: answer traces (SPEC F5)
    """
    CREATE TABLE traces (
        trace_id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
        kind TEXT NOT NULL,
        question TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX traces_created ON traces(created_at);
    """,
    # 4: a root remembers the tags and ACL it was ingested with, so a re-sync keeps them
    """
    ALTER TABLE roots ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE roots ADD COLUMN acl TEXT NOT NULL DEFAULT '[]';
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


def connect(path: Path) -> SerializedConnection:
    conn = SerializedConnection(sqlite3.connect(str(path), timeout=30.0, isolation_level=None,
                                                check_same_thread=False))
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL mode
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


@contextmanager
def immediate_transaction(conn: Any) -> Iterator[sqlite3.Connection]:
    """One write transaction on `conn`, taken at once (BEGIN IMMEDIATE, so a concurrent writer
    waits here rather than failing at its first write); rolled back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def schema_version(conn: Any) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: Any) -> None:
    """Bring the schema up to SCHEMA_VERSION, one transaction per migration."""
    current = schema_version(conn)
    if current > SCHEMA_VERSION:
        raise StoreError(
            f"store schema version {current} is newer than this cograg supports ({SCHEMA_VERSION})"
        )
    for version in range(current, SCHEMA_VERSION):
        with immediate_transaction(conn):
            for stmt in MIGRATIONS[version].split(";\n"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.execute(f"PRAGMA user_version={version + 1}")


def get_meta(conn: Any, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return None if row is None else str(row[0])


def set_meta(conn: Any, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta(key, value) VALUES(?, ?) "
                 "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))


def check_analyzer(conn: Any) -> None:
    """Keyword terms depend on the analyser; rebuild them when it changed since indexing."""
    if get_meta(conn, "analyzer") == ANALYZER_VERSION:
        return
    with immediate_transaction(conn):
        conn.execute("DELETE FROM chunks_fts")
        rows = conn.execute("SELECT c.*, d.title AS doc_title FROM chunks c JOIN documents d USING(doc_id)")
        batch: list[tuple[int, str]] = []
        for row in rows:
            data = dict(row)
            title = data.pop("doc_title")
            batch.append((int(data["id"]), fts_document(index_text(chunk_from_row(data), title))))
            if len(batch) >= 1000:
                conn.executemany("INSERT INTO chunks_fts(rowid, terms) VALUES(?, ?)", batch)
                batch.clear()
        conn.executemany("INSERT INTO chunks_fts(rowid, terms) VALUES(?, ?)", batch)
        set_meta(conn, "analyzer", ANALYZER_VERSION)


__all__ = ["DB_NAME", "MIGRATIONS", "SCHEMA_VERSION", "check_analyzer", "connect", "get_meta", "immediate_transaction",
           "migrate", "schema_version", "set_meta"]
