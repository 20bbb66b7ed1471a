"""BM25 from an in-memory impact matrix, scored exactly as SQLite FTS5's `bm25()` scores the same rows.

FTS5 scores every row that holds a query term by walking its position lists and calling the
ranking function per row, in SQL; at 100k chunks that took 33 ms median per query where a
precomputed sparse matrix (bm25s) took 5.6 ms (docs/benchmarks.md, Retrieval latency). Here the
BM25 term-frequency part of every (term, chunk) pair is computed once per store generation and kept
in a term → chunk CSR matrix (scipy.sparse), so a query is a sum of a few matrix rows weighted by
the terms' IDF, then `argpartition`.

Parity with FTS5, so switching engines changes rankings only by float noise and ties:
* the same terms: each chunk's FTS5 `terms` text is what the analyser produced, split on spaces; a
  term the FTS5 tokenizer splits further ("one's") also counts for its pieces, as it does in FTS5;
* the same lengths: a chunk's length is FTS5's own token count for the row (its `docsize` table),
  average length is over all rows;
* the same formula: k1 = 1.2, b = 0.75, IDF = ln((N − n + 0.5) / (n + 0.5)) floored at 1e-6.

The matrix is rebuilt lazily on the first search of a new store generation (every committed
document write bumps it, deletes and ACL changes included), the way `VectorIndex` keeps the vectors.
ACL groups and the `doc_ids` scope are masks on the candidate chunks applied before top-k. The
matrices are shared by every `SQLiteStore` opened on the same database in this process (a server
opens one store per request), keyed by a random id stored in the database.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
import uuid
from array import array
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

logger = logging.getLogger(__name__)

# an indexed term the FTS5 unicode61 tokenizer splits (it has a character that is not a letter or digit)
_ODD_CHAR = re.compile(r"[^\w\s]|_")
_PIECE = re.compile(r"[^\W_]+")
K1 = 1.2  # FTS5 bm25() defaults
B = 0.75
MIN_IDF = 1e-6  # FTS5 floors a non-positive IDF (a term in more than half the rows) at this


@dataclass
class BM25Postings:
    """One store generation's keyword index in memory."""

    generation: str
    rowids: np.ndarray  # int64 (n,), sorted: chunk rowid of each column
    doc_codes: np.ndarray  # int32 (n,): index into doc_ids
    doc_ids: list[str]
    doc_index: dict[str, int]
    vocab: dict[str, int]  # term → matrix row
    impacts: sp.csr_matrix  # float32 (terms, chunks): tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))
    idf: np.ndarray  # float64 (terms,)
    public_docs: np.ndarray  # bool (docs,): documents without an ACL
    group_docs: dict[str, np.ndarray] = field(default_factory=dict)  # ACL group → its documents' codes
    has_acl: bool = False

    @property
    def nbytes(self) -> int:
        """Approximate memory of this index: arrays, the vocabulary and the document ids."""
        arrays = (self.rowids, self.doc_codes, self.impacts.data, self.impacts.indices, self.impacts.indptr,
                  self.idf, self.public_docs, *self.group_docs.values())
        # a dict entry with its str key and int value is about 100 bytes in CPython, plus the characters
        vocab = sum(len(t) for t in self.vocab) * 2 + 100 * len(self.vocab)
        docs = sum(len(d) for d in self.doc_ids) + 150 * len(self.doc_ids)
        return int(sum(a.nbytes for a in arrays) + vocab + docs)

    def allowed_docs(self, groups: list[str] | None, doc_ids: list[str] | None) -> np.ndarray | None:
        """Which documents (bool per document code) a search may return; None: all of them."""
        ok: np.ndarray | None = None
        if groups is not None and self.has_acl:
            ok = self.public_docs.copy()
            for g in groups:
                codes = self.group_docs.get(g)
                if codes is not None:
                    ok[codes] = True
        if doc_ids is not None:
            scope = np.zeros(len(self.doc_ids), dtype=bool)
            codes_in = [self.doc_index[d] for d in doc_ids if d in self.doc_index]
            scope[np.asarray(codes_in, dtype=np.int64)] = True
            ok = scope if ok is None else ok & scope
        return ok


def _varint(blob: bytes) -> int:
    """The first SQLite varint of an FTS5 docsize record (one per column; this table has one)."""
    value = 0
    for i, byte in enumerate(blob[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            break
    return value


def load_postings(conn: sqlite3.Connection, generation: str) -> BM25Postings:
    """Read the FTS5 table once and compute every (term, chunk) BM25 impact."""
    texts = conn.execute("SELECT rowid, terms FROM chunks_fts ORDER BY rowid").fetchall()
    n = len(texts)
    rowids = np.fromiter((r[0] for r in texts), np.int64, n)
    # chunk lengths as FTS5 counts them (its tokenizer may split a term such as "don't" in two)
    sizes = dict(conn.execute("SELECT id, sz FROM chunks_fts_docsize").fetchall())
    lengths = np.fromiter((_varint(sizes.get(r, b"\x00")) for r in rowids.tolist()), np.float64, n)
    del sizes
    docs = dict(conn.execute("SELECT id, doc_id FROM chunks").fetchall())
    doc_index: dict[str, int] = {}
    doc_codes = np.fromiter((doc_index.setdefault(docs.get(r, ""), len(doc_index)) for r in rowids.tolist()),
                            np.int32, n)
    del docs
    # term ids handed out in first-seen order, the lookups and counting all in C
    vocab: defaultdict[str, int] = defaultdict()
    vocab.default_factory = vocab.__len__
    term_of = vocab.__getitem__
    term_ids = array("i")  # 4 bytes a posting while building, where a list takes 8 plus objects
    freqs = array("i")
    per_chunk = np.zeros(n, np.int64)
    for i, (_, text) in enumerate(texts):
        terms = text.split()
        if _ODD_CHAR.search(text):
            # FTS5's tokenizer splits "one's" into "one" and "s": a query for "one" matches it there
            terms += [piece for term in terms if not term.isalnum() for piece in _PIECE.findall(term)]
        counts = Counter(terms)
        term_ids.extend(map(term_of, counts))
        freqs.extend(counts.values())
        per_chunk[i] = len(counts)
    del texts
    vocab.default_factory = None
    tids = np.frombuffer(term_ids, dtype=np.intc)
    tf = np.frombuffer(freqs, dtype=np.intc).astype(np.float64)
    del freqs
    cols = np.repeat(np.arange(n, dtype=np.int32), per_chunk)
    avgdl = float(lengths.mean()) if n else 1.0
    norm = K1 * (1.0 - B + B * lengths / max(avgdl, 1e-9))
    impact = (tf * (K1 + 1.0) / (tf + norm[cols])).astype(np.float32)
    impacts = sp.csr_matrix((impact, (tids, cols)), shape=(len(vocab), n))
    del tids, term_ids
    impacts.sort_indices()
    df = np.diff(impacts.indptr).astype(np.float64)
    idf = np.maximum(np.log((n - df + 0.5) / (df + 0.5)), MIN_IDF) if n else df

    public = np.ones(len(doc_index), dtype=bool)
    members: dict[str, list[int]] = {}
    acl_rows = conn.execute("SELECT doc_id, grp FROM document_acl").fetchall()
    for doc_id, grp in acl_rows:
        code = doc_index.get(doc_id)
        if code is not None:
            public[code] = False
            members.setdefault(grp, []).append(code)
    return BM25Postings(generation, rowids, doc_codes, list(doc_index), doc_index, dict(vocab), impacts, idf,
                        public, {g: np.asarray(c, dtype=np.int64) for g, c in members.items()},
                        has_acl=bool(acl_rows))


class MemoryBM25:
    """The BM25 index of one database, rebuilt per store generation; safe to share between threads."""

    def __init__(self) -> None:
        self._postings: BM25Postings | None = None
        self._lock = threading.Lock()
        self._builder: threading.Thread | None = None
        self._failed: str | None = None  # a generation whose background build failed is not retried

    def postings(self, conn: sqlite3.Connection, generation: str) -> BM25Postings:
        """The matrices of `generation`, built here and now if they are not loaded."""
        with self._lock:
            if self._postings is None or self._postings.generation != generation:
                self._postings = None  # let the old generation go before the new one is built
                self._postings = load_postings(conn, generation)
            return self._postings

    def ready(self, generation: str) -> bool:
        p = self._postings
        return p is not None and p.generation == generation

    def build_in_background(self, db_path: Path, generation: str) -> None:
        """Start building the matrices of the database's current generation in a thread with its
        own connection (one read snapshot, so its rows and generation agree), unless one is running."""
        with self._lock:
            if (self._builder is not None and self._builder.is_alive()) or self._failed == generation \
                    or (self._postings is not None and self._postings.generation == generation):
                return
            self._builder = threading.Thread(target=self._build_from_file, args=(Path(db_path), generation),
                                             name="cograg-bm25-build", daemon=True)
            self._builder.start()

    def wait_for_build(self, timeout: float | None = None) -> None:
        builder = self._builder
        if builder is not None:
            builder.join(timeout)

    def _build_from_file(self, db_path: Path, asked: str) -> None:
        try:
            # read-only: a build that outlives its store (the folder removed, a new store made there) must
            # not create a file at that path
            conn = sqlite3.connect(f"{Path(db_path).resolve().as_uri()}?mode=ro", uri=True, timeout=30.0,
                                   isolation_level=None, check_same_thread=False)
            try:
                conn.execute("BEGIN")
                row = conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()
                postings = load_postings(conn, str(row[0]) if row else "0")
                conn.execute("COMMIT")
            finally:
                conn.close()
        except Exception:  # noqa: BLE001 - the store's fallback (FTS5) keeps answering
            logger.warning("building the in-memory BM25 index of %s failed; FTS5 answers", db_path, exc_info=True)
            self._failed = asked
            return
        with self._lock:
            if self._postings is None or _newer(postings.generation, self._postings.generation):
                self._postings = postings


    def drop_common(self, conn: sqlite3.Connection, generation: str, terms: list[str], share: float) -> list[str]:
        """`terms` without those in more than `share` of all chunks; the rarest is always kept
        (as `TermStats.drop_common`, from the matrix's document frequencies)."""
        p = self.postings(conn, generation)
        indptr = p.impacts.indptr
        df = {t: int(indptr[p.vocab[t] + 1] - indptr[p.vocab[t]]) if t in p.vocab else 0 for t in terms}
        limit = share * max(len(p.rowids), 1)
        kept = [t for t in terms if df[t] <= limit]
        return kept or [min(terms, key=lambda t: df[t])]

    def search(self, conn: sqlite3.Connection, generation: str, terms: list[str], k: int,
               groups: list[str] | None = None, doc_ids: list[str] | None = None) -> list[tuple[int, float]]:
        """(chunk rowid, BM25 score) of the `k` best chunks holding any of `terms`, best first.
        `groups` and `doc_ids` as in `SQLiteStore.keyword_search_terms`; both restrict the
        candidates before the top k are chosen."""
        if k <= 0 or not terms or (doc_ids is not None and not doc_ids):
            return []
        p = self.postings(conn, generation)
        rows = [p.vocab[t] for t in terms if t in p.vocab]  # repeats kept: FTS5 scores each phrase
        if not rows:
            return []
        m = p.impacts
        scores = np.zeros(m.shape[1], dtype=np.float64)
        for r in rows:
            lo, hi = m.indptr[r], m.indptr[r + 1]
            scores[m.indices[lo:hi]] += p.idf[r] * m.data[lo:hi]
        cand = np.flatnonzero(scores)
        allowed = p.allowed_docs(groups, doc_ids)
        if allowed is not None:
            cand = cand[allowed[p.doc_codes[cand]]]
        if cand.size > k:
            cand = cand[np.argpartition(-scores[cand], k - 1)[:k]]
        # best first; equal scores by rowid, so the order is the same on every run
        order = cand[np.lexsort((p.rowids[cand], -scores[cand]))]
        return [(int(p.rowids[i]), float(scores[i])) for i in order]


def _newer(a: str, b: str) -> bool:
    """Whether generation `a` is at least as recent as `b`."""
    try:
        return int(a) >= int(b)
    except ValueError:
        return True


_SHARED: OrderedDict[str, MemoryBM25] = OrderedDict()
_SHARED_LOCK = threading.Lock()
_SHARED_MAX = 4  # databases whose matrices stay in memory in one process, least recently opened dropped


def store_key(conn: sqlite3.Connection, db_path: Path) -> str | None:
    """A key that names this database and no other, even one later created at the same path:
    its path and a random id kept in its meta table. None when the id cannot be written."""
    row = conn.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
    if row is None:
        try:
            conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('store_id', ?)", (uuid.uuid4().hex,))
        except sqlite3.Error:  # a read-only store: no sharing, the store keeps its own index
            return None
        row = conn.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
    return f"{Path(db_path).resolve()}#{row[0]}"


def shared_index(key: str | None) -> MemoryBM25:
    """The index for the database `key` names, shared in this process; a fresh one for None."""
    if key is None:
        return MemoryBM25()
    with _SHARED_LOCK:
        index = _SHARED.pop(key, None) or MemoryBM25()
        _SHARED[key] = index
        while len(_SHARED) > _SHARED_MAX:
            _SHARED.popitem(last=False)
        return index


def posting_count(index: MemoryBM25) -> int:
    """Stored (term, chunk) pairs of the loaded generation (0 before the first search)."""
    p = index._postings
    return 0 if p is None else int(p.impacts.nnz)

