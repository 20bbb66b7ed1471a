"""The chunk search index on Milvus (SPEC I): dense vectors, BM25 and the access fields.

One collection per store holds, for each chunk, its SQLite rowid (the primary key), its document
id, the text that is indexed (title, headings and chunk text, as the SQLite index uses), the dense
vector, the BM25 sparse vector and the document's ACL groups and tags. The BM25 sparse vector is
computed by Milvus itself (a BM25 `Function` over the text field) with a jieba analyzer in search
mode, so Chinese text is segmented into words and sub-words; Milvus Lite (PyPI `milvus-lite`)
supports the same function and tokenizer, so the tests run the production code path.

Access control and tag filters are boolean expressions evaluated inside each search, before top-k,
never on the results afterwards: a hit the principal may not read is never returned, and k hits
the principal may read are returned when they exist.

Everything else (documents, chunk text and offsets, the embedding cache, traces) stays in SQLite;
see `cograg.index.milvus_store` for why.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import jieba
import numpy as np

from cograg.errors import StoreError
from cograg.index.analyzer import STOPWORDS, ZH_STOPWORDS

# jieba in search mode (words plus their sub-words, like cograg's own analyzer), lower-cased, with
# the function words and punctuation that carry no retrieval signal dropped. The same parameters
# are understood by Milvus standalone and Milvus Lite.
_PUNCTUATION = set("，。、；：？！“”‘’（）《》【】…—·,.;:?!\"'()[]{}<>-/\\|*#@&%$+=~`^_")
ANALYZER_PARAMS: dict[str, object] = {
    "tokenizer": {"type": "jieba", "mode": "search"},
    "filter": ["lowercase", {"type": "stop", "stop_words": sorted(STOPWORDS | ZH_STOPWORDS | _PUNCTUATION)}],
}
MAX_TEXT_BYTES = 65_535  # Milvus's VARCHAR limit; longer index texts are cut (BM25 sees the start)
MAX_KEYS_BYTES = 65_535  # one document's ACL groups (or tags), encoded by `member_keys`

F = TypeVar("F", bound=Callable[..., Any])

# Milvus Lite keeps newly written rows in an in-memory table that every search scans row by row in
# Python (its BM25 scorer over that table is rebuilt per query): 10k unflushed chunks cost seconds
# per search, the same chunks flushed into a segment with its indexes tens of milliseconds. So a
# Lite collection is flushed before the first search after a write. Milvus Lite serves a `.db` file
# from one process only (a file lock), so this process sees every write to it; the keys are
# (uri, collection) of Lite collections written since their last flush. A Milvus server searches
# its growing segments natively and rate-limits flushes, so it is never flushed per search.
_UNFLUSHED: set[tuple[str, str]] = set()
_FLUSH_LOCK = threading.Lock()


def _reported(fn: F) -> F:
    """A failed Milvus call becomes one StoreError line naming the server."""

    @functools.wraps(fn)
    def call(self: MilvusIndex, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except StoreError:
            raise
        except Exception as exc:  # pymilvus raises MilvusException, grpc its RpcErrors
            raise StoreError(f"Milvus at {self.uri} failed ({fn.__name__}): {_one_line(exc)}") from exc

    return call  # type: ignore[return-value]


@dataclass
class IndexRow:
    """One chunk as the index stores it."""

    rowid: int
    doc_id: str
    text: str
    vector: np.ndarray | None
    acl: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)


def _quoted(values: Iterable[str]) -> str:
    return json.dumps(sorted(set(values)), ensure_ascii=False)


# A document's ACL groups and tags are stored as one VARCHAR each, every name hex-encoded between
# '|' ("|6869|7573|"), and matched with `like "%|6869|%"`. Milvus Lite evaluates ARRAY functions
# (array_contains_any, array_length) row by row in Python over the whole segment, vectors included:
# 0.7 s per filtered search at 10k chunks; it evaluates `==` and `like` on a VARCHAR vectorised
# (Arrow), and a Milvus server evaluates both natively. Hex has no LIKE wildcard ('%', '_') and no
# '|', so a pattern matches exactly one whole name and needs no escaping.
def member_keys(values: Iterable[str]) -> str:
    """The set of names as the VARCHAR the filters match ("" for none)."""
    keys = sorted({v.encode("utf-8").hex() for v in values})
    return f"|{'|'.join(keys)}|" if keys else ""


def _any_member(field_name: str, values: Iterable[str]) -> str:
    return "(" + " or ".join(f'{field_name} like "%|{v.encode("utf-8").hex()}|%"' for v in sorted(set(values))) + ")"


def filter_expression(groups: list[str] | None = None, *, tags_any: Sequence[str] | None = None,
                      tags_none: Sequence[str] | None = None, doc_ids: Sequence[str] | None = None) -> str:
    """The Milvus boolean expression for an access/tag filter ("" when nothing is filtered).

    `groups` as in `SQLiteStore.keyword_search`: None means no ACL filter; otherwise a chunk is
    visible when its document has no ACL or its ACL names one of `groups`. `doc_ids` limits the
    search to those documents (an empty list matches nothing)."""
    parts: list[str] = []
    if doc_ids is not None:
        parts.append(f"doc_id in {_quoted(doc_ids)}" if doc_ids else "doc_id == ''")
    if groups is not None:
        public = 'acl_keys == ""'
        parts.append(f"({public} or {_any_member('acl_keys', groups)})" if groups else f"({public})")
    if tags_any:
        parts.append(_any_member("tag_keys", tags_any))
    if tags_none:
        parts.append(f"not {_any_member('tag_keys', tags_none)}")
    return " and ".join(parts)


def _cut_utf8(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[:limit].decode("utf-8", errors="ignore")


class _LiteErrors(logging.Handler):
    """Keeps the last error Milvus Lite logs (with its traceback, on stderr otherwise), for the
    one line a failed start is reported in."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.last: str | None = None
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            logging.getLogger("milvus_lite").addHandler(self)
            logging.getLogger("milvus_lite").propagate = False
            self._installed = True

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        self.last = _one_line(exc) if exc is not None else record.getMessage()


_LITE_ERRORS = _LiteErrors()


class MilvusIndex:
    """Keyword (BM25), dense and hybrid search over one Milvus collection.

    `uri` is a Milvus server (`http://host:19530`) or a Milvus Lite file (`PATH.db`). Searches
    return `(chunk rowid, score)` best first, higher is better, like `SQLiteStore`'s."""

    def __init__(self, uri: str, collection: str, *, timeout_s: float = 10.0) -> None:
        try:
            from pymilvus import MilvusClient
        except ImportError as exc:
            raise StoreError("the Milvus index needs pymilvus (and milvus-lite for a .db file): "
                             "pip install 'cograg[scale]'") from exc
        self.uri = uri
        self.collection = collection
        self.lite = uri.endswith(".db")
        if not os.environ.get("COGRAG_DEBUG"):
            # a failed call is raised as one StoreError line; pymilvus would also log each one
            # with its traceback on stderr (it installs its own handler)
            logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
            _LITE_ERRORS.install()
        # Milvus Lite segments with this process's jieba; keep its start-up chatter off stderr
        jieba.setLogLevel(logging.WARNING)
        self.dim: int | None = None
        self.has_current_schema = False  # the filter fields this version writes and searches
        try:
            # pymilvus pings every 10 s; Milvus Lite's in-process gRPC server counts idle pings as
            # abuse and drops the connection after a few (logging it on stderr), so no pings there
            lite = {"grpc_options": {"grpc.keepalive_time_ms": 2**31 - 1,
                                     "grpc.keepalive_permit_without_calls": False}} if self.lite else {}
            if self.lite:
                Path(uri).expanduser().parent.mkdir(parents=True, exist_ok=True)
            _LITE_ERRORS.last = None
            self.client = MilvusClient(uri=uri, timeout=timeout_s, **lite)
            if self.client.has_collection(collection):
                fields = self.client.describe_collection(collection)["fields"]
                dense = next((f for f in fields if f["name"] == "dense"), None)
                self.dim = int(dense["params"]["dim"]) if dense else None
                self.has_current_schema = any(f["name"] == "acl_keys" for f in fields)
                self.client.load_collection(collection)  # a no-op when loaded already
                if self.lite:
                    # rows a previous process wrote but did not flush come back from Lite's
                    # write-ahead log into its in-memory table; flushing is a no-op when it is empty
                    self.client.flush(collection)
        except Exception as exc:  # pymilvus raises MilvusException, milvus-lite its own errors
            # Milvus Lite logs why it could not start (the file held by another process, a path
            # that is a file) and pymilvus raises only "Open local milvus failed"
            cause = _LITE_ERRORS.last or _one_line(exc)
            if "another process holds the lock" in cause:
                cause = "in use by another process (Milvus Lite serves one process at a time)"
            elif "File exists" in cause:
                cause = "that path is a file, not a Milvus Lite data folder"
            where = "cannot open Milvus Lite at" if self.lite else "cannot reach Milvus at"
            raise StoreError(f"{where} {uri}: {cause}") from exc

    # ------------------------------------------------------------------ schema
    @_reported
    def exists(self) -> bool:
        return bool(self.client.has_collection(self.collection))

    @_reported
    def create(self, dim: int | None) -> None:
        """(Re)create the collection, empty; `dim` None makes a keyword-only index."""
        from pymilvus import DataType, Function, FunctionType

        if self.exists():
            self.client.drop_collection(self.collection)
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=256)
        schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT_BYTES, enable_analyzer=True,
                         analyzer_params=ANALYZER_PARAMS)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        for name in ("acl_keys", "tag_keys"):
            schema.add_field(name, DataType.VARCHAR, max_length=MAX_KEYS_BYTES)
        schema.add_function(Function(name="text_bm25", function_type=FunctionType.BM25,
                                     input_field_names=["text"], output_field_names=["sparse"]))
        index = self.client.prepare_index_params()
        index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        if dim is not None:
            # vectors are L2-normalised, so inner product is the cosine the SQLite index reports;
            # FLAT is exact search, like the SQLite index (HNSW is the choice past a few million)
            schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
            # a chunk stored before an embedder was configured has no vector; dense search skips it
            schema.add_field("has_vector", DataType.BOOL)
            index.add_index("dense", index_type="FLAT", metric_type="IP")
        self.client.create_collection(self.collection, schema=schema, consistency_level="Strong")
        # not waited for: building an index on an empty collection is immediate, and the wait asks
        # for a server timestamp that Milvus Lite does not implement
        self.client.create_index(self.collection, index, sync=False)
        self.client.load_collection(self.collection)
        self.dim = dim
        self.has_current_schema = True

    # ------------------------------------------------------------------ writes
    @_reported
    def upsert(self, rows: Sequence[IndexRow]) -> None:
        if not rows:
            return
        data = []
        for r in rows:
            item: dict[str, object] = {"id": r.rowid, "doc_id": r.doc_id, "text": _cut_utf8(r.text),
                                       "acl_keys": member_keys(r.acl), "tag_keys": member_keys(r.tags)}
            for name, what in (("acl_keys", "ACL group"), ("tag_keys", "tag")):
                if len(str(item[name])) > MAX_KEYS_BYTES:
                    raise StoreError(f"document {r.doc_id}: its {what} names take more than "
                                     f"{MAX_KEYS_BYTES // 2} bytes together, more than the Milvus index holds")
            if self.dim is not None:
                vector = r.vector if r.vector is not None and r.vector.shape == (self.dim,) else None
                item["dense"] = (np.zeros(self.dim, np.float32) if vector is None else vector).tolist()
                item["has_vector"] = vector is not None
            data.append(item)
        self.client.upsert(self.collection, data)
        if self.lite:  # marked once written, so a flush running meanwhile cannot clear it before
            with _FLUSH_LOCK:
                _UNFLUSHED.add((self.uri, self.collection))

    @_reported
    def flush(self) -> None:
        """Seal what was written into indexed segments (Milvus Lite: out of its scanned memory table)."""
        self.client.flush(self.collection)
        with _FLUSH_LOCK:
            _UNFLUSHED.discard((self.uri, self.collection))

    def _searchable(self) -> None:
        """Flush a Lite collection written since its last flush, once, before it is searched."""
        if not self.lite:
            return
        with _FLUSH_LOCK:  # held across the flush: concurrent searches wait for it, not flush again
            if (self.uri, self.collection) in _UNFLUSHED:
                self.client.flush(self.collection)
                _UNFLUSHED.discard((self.uri, self.collection))

    @_reported
    def delete_documents(self, doc_ids: Iterable[str]) -> None:
        """Remove every chunk of these documents (by document, so no chunk of theirs survives)."""
        ids = sorted(set(doc_ids))
        for i in range(0, len(ids), 500):
            self.client.delete(self.collection, filter=f"doc_id in {_quoted(ids[i:i + 500])}")

    @_reported
    def count(self, doc_ids: Iterable[str] | None = None) -> int:
        expr = "" if doc_ids is None else f"doc_id in {_quoted(doc_ids)}"
        res = self.client.query(self.collection, filter=expr, output_fields=["count(*)"])
        return int(res[0]["count(*)"])

    # ------------------------------------------------------------------ search
    @_reported
    def keyword_search(self, query: str, k: int, groups: list[str] | None = None, *,
                       tags_any: Sequence[str] | None = None,
                       tags_none: Sequence[str] | None = None,
                       doc_ids: Sequence[str] | None = None) -> list[tuple[int, float]]:
        """BM25 over the analysed text; the filter (ACL, tags, document scope) is part of the search."""
        if k <= 0 or not query.strip():
            return []
        self._searchable()
        res = self.client.search(self.collection, data=[query], anns_field="sparse", limit=k,
                                 filter=filter_expression(groups, tags_any=tags_any, tags_none=tags_none,
                                                          doc_ids=doc_ids),
                                 search_params={"metric_type": "BM25"}, output_fields=[])
        # Milvus reports the BM25 score, Milvus Lite its negation as a distance (smaller = closer);
        # both are ordered best first and a BM25 score is never negative, so its magnitude is the score
        return [(int(h["id"]), abs(float(h["distance"]))) for h in res[0]]

    @_reported
    def vector_search(self, query_vec: np.ndarray, k: int, groups: list[str] | None = None, *,
                      tags_any: Sequence[str] | None = None,
                      tags_none: Sequence[str] | None = None,
                      doc_ids: Sequence[str] | None = None) -> list[tuple[int, float]]:
        """Exact inner-product (cosine) search; the filter (ACL, tags, document scope) is part of the search."""
        if k <= 0 or self.dim is None:
            return []
        self._searchable()
        expr = " and ".join(p for p in ("has_vector == true", filter_expression(
            groups, tags_any=tags_any, tags_none=tags_none, doc_ids=doc_ids)) if p)
        res = self.client.search(self.collection, data=[np.asarray(query_vec, np.float32).tolist()],
                                 anns_field="dense", limit=k, filter=expr,
                                 search_params={"metric_type": "IP"}, output_fields=[])
        return [(int(h["id"]), float(h["distance"])) for h in res[0]]

    @_reported
    def hybrid_search(self, query: str, query_vec: np.ndarray | None, k: int, groups: list[str] | None = None, *,
                      retrieve_k: int = 50, rrf_k: int = 60, tags_any: Sequence[str] | None = None,
                      tags_none: Sequence[str] | None = None) -> list[tuple[int, float]]:
        """BM25 and dense search fused by Milvus's RRF ranker in one request: (rowid, RRF score).

        The filter goes into each sub-search (Milvus applies no request-level filter to a hybrid
        search), so both candidate lists are already restricted."""
        from pymilvus import AnnSearchRequest, RRFRanker

        if k <= 0:
            return []
        self._searchable()
        expr = filter_expression(groups, tags_any=tags_any, tags_none=tags_none)
        requests = [AnnSearchRequest(data=[query], anns_field="sparse", param={"metric_type": "BM25"},
                                     limit=retrieve_k, expr=expr or None)]
        if query_vec is not None and self.dim is not None:
            dense_expr = " and ".join(p for p in ("has_vector == true", expr) if p)
            requests.append(AnnSearchRequest(data=[np.asarray(query_vec, np.float32).tolist()],
                                             anns_field="dense", param={"metric_type": "IP"},
                                             limit=retrieve_k, expr=dense_expr))
        res = self.client.hybrid_search(self.collection, requests, ranker=RRFRanker(rrf_k), limit=k,
                                        output_fields=[])
        return [(int(h["id"]), float(h["distance"])) for h in res[0]]

    def close(self) -> None:
        try:
            if self.lite and (self.uri, self.collection) in _UNFLUSHED:
                self.flush()  # the next process then opens indexed segments, not a log to replay
        finally:
            self.client.close()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
