"""Collection statistics of the keyword index: how many chunks hold a term, and each chunk's terms.

Read through an FTS5 `fts5vocab` table created in the connection's TEMP schema, so the stored
schema does not change. Used by pseudo-relevance feedback (expansion term weights) and by the
document-frequency cut-off that drops very common terms from long OR queries.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter


class TermStats:
    """Document frequencies per term, cached per store generation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation: str | None = None
        self._df: dict[str, int] = {}
        self._n = 0
        self._ready: set[int] = set()

    def _vocab(self, conn: sqlite3.Connection) -> None:
        if id(conn) not in self._ready:
            conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_fts_vocab "
                         "USING fts5vocab(main, chunks_fts, row)")
            self._ready.add(id(conn))

    def _sync(self, conn: sqlite3.Connection, generation: str) -> None:
        if self._generation != generation:
            self._df.clear()
            self._n = int(conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0])
            self._generation = generation

    def chunk_count(self, conn: sqlite3.Connection, generation: str) -> int:
        with self._lock:
            self._sync(conn, generation)
            return self._n

    def document_frequency(self, conn: sqlite3.Connection, generation: str, terms: list[str]) -> dict[str, int]:
        """Chunks containing each term (0 for unknown terms)."""
        with self._lock:
            self._sync(conn, generation)
            self._vocab(conn)
            todo = [t for t in dict.fromkeys(terms) if t not in self._df]
            for i in range(0, len(todo), 500):
                part = todo[i:i + 500]
                found = dict(conn.execute(
                    f"SELECT term, doc FROM temp.chunks_fts_vocab WHERE term IN ({','.join('?' * len(part))})",
                    part).fetchall())
                for t in part:
                    self._df[t] = int(found.get(t, 0))
            return {t: self._df[t] for t in terms}

    def drop_common(self, conn: sqlite3.Connection, generation: str, terms: list[str], share: float) -> list[str]:
        """`terms` without those in more than `share` of all chunks; the rarest is always kept."""
        df = self.document_frequency(conn, generation, terms)
        limit = share * max(self.chunk_count(conn, generation), 1)
        kept = [t for t in terms if df[t] <= limit]
        return kept or [min(terms, key=lambda t: df[t])]


def chunk_terms(conn: sqlite3.Connection, rowids: list[int]) -> dict[int, Counter[str]]:
    """Analysed terms of each chunk (as indexed), with their counts."""
    if not rowids:
        return {}
    rows = conn.execute(f"SELECT rowid, terms FROM chunks_fts WHERE rowid IN ({','.join('?' * len(rowids))})",
                        rowids).fetchall()
    return {int(r[0]): Counter(str(r[1]).split()) for r in rows}
