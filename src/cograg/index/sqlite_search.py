"""The embedded store's reads that filter in SQL: which documents a principal may read, and BM25
over FTS5 with the ACL and document scope inside the same query."""

from __future__ import annotations

from typing import Any

from cograg.index.analyzer import fts_match


def allowed_doc_ids(conn: Any, groups: list[str]) -> set[str] | None:
    """Documents a principal with `groups` may read: those without an ACL and those whose ACL
    names one of the groups. None means no document in the store has an ACL (no filter)."""
    if conn.execute("SELECT 1 FROM document_acl LIMIT 1").fetchone() is None:
        return None
    q = ("SELECT doc_id FROM documents d WHERE NOT EXISTS "
         "(SELECT 1 FROM document_acl a WHERE a.doc_id = d.doc_id)")
    params: list[str] = []
    if groups:
        q += f" UNION SELECT doc_id FROM document_acl WHERE grp IN ({','.join('?' * len(groups))})"
        params = list(groups)
    return {r[0] for r in conn.execute(q, params)}


def fts5_search(conn: Any, terms: list[str], k: int, groups: list[str] | None = None,
                doc_ids: list[str] | None = None) -> list[tuple[int, float]]:
    """BM25 from FTS5 for analysed terms (any of them may match): (chunk rowid, score), best first."""
    match = fts_match(terms)
    if match is None or k <= 0 or (doc_ids is not None and not doc_ids):
        return []
    # `+rowid` (not `rowid`) in the filters below: with a bare rowid SQLite drives the query from
    # the IN list and runs the full-text match once per allowed chunk (4 s per query at 10k chunks
    # with an ACL); the unary plus makes it match once and filter the matches
    sql = "SELECT rowid, bm25(chunks_fts) AS s FROM chunks_fts WHERE chunks_fts MATCH ?"
    params: list[object] = [match]
    if doc_ids is not None:
        sql += f" AND +rowid IN (SELECT id FROM chunks WHERE doc_id IN ({','.join('?' * len(doc_ids))}))"
        params += list(doc_ids)
    if groups is not None and conn.execute("SELECT 1 FROM document_acl LIMIT 1").fetchone():
        marks = ",".join("?" * len(groups)) or "NULL"
        sql += (" AND +rowid IN (SELECT c.id FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
                " WHERE NOT EXISTS (SELECT 1 FROM document_acl a WHERE a.doc_id = d.doc_id)"
                f" OR EXISTS (SELECT 1 FROM document_acl a WHERE a.doc_id = d.doc_id AND a.grp IN ({marks})))")
        params += list(groups)
    sql += " ORDER BY s LIMIT ?"
    params.append(k)
    # FTS5's bm25() is negative (smaller is better); flip it so every retriever says higher = better
    return [(int(r[0]), -float(r[1])) for r in conn.execute(sql, params)]


__all__ = ["allowed_doc_ids", "fts5_search"]
