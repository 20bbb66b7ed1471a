"""The in-memory BM25 engine (`cograg.index.bm25_memory`): the same scores and ranking as SQLite
FTS5's bm25() on the same store, access control and document scope applied before top-k, and a
matrix that follows every write (ingest, delete, ACL change)."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from cograg.config import Settings
from cograg.engine import Engine
from cograg.index.bm25_memory import MemoryBM25, posting_count
from cograg.index.sqlite_store import SQLiteStore
from tests.test_store import make_doc, write

TEXTS = [
    ["The harbour bridge opened in 1932; its arches are steel.", "Tram fares depend on the zone you ride in."],
    ["Silver mist tea is grown on the northern slopes.", "银雾茶 是 北方 山坡 上 种植 的 茶叶 品种。"],
    ["The bridge's keeper kept the bridge lamps lit every night.", "Zone two fares rose twice; zone one did not."],
    ["北京大学 的 图书馆 藏书 丰富, 大学 生 常 在 那里 读书。", "The library of the university opens at eight."],
    ["Steel arches carry the railway bridge across the river.", "Tea pickers start at dawn on the slopes."],
]
QUERIES = ["bridge arches steel", "tram zone fares", "银雾茶 品种", "北京大学 图书馆", "tea slopes dawn",
           "bridge's keeper", "university library eight", "zone", "river railway bridge tea"]


@pytest.fixture
def filled(store: SQLiteStore) -> SQLiteStore:
    for n, texts in enumerate(TEXTS, start=1):
        write(store, make_doc(n, content=f"h{n}", acl=("finance",) if n == 3 else ()), texts)
    return store


def _both(store: SQLiteStore, query: str, k: int = 50, **kw) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    store.bm25_engine = "fts5"
    fts = store.keyword_search(query, k, **kw)
    store.bm25_engine = "memory"
    return store.keyword_search(query, k, **kw), fts


def test_same_scores_and_ranking_as_fts5(filled: SQLiteStore) -> None:
    for query in QUERIES:
        memory, fts = _both(filled, query)
        assert memory, query
        assert [r for r, _ in memory] == [r for r, _ in fts], query
        for (_, a), (_, b) in zip(memory, fts):
            assert a == pytest.approx(b, rel=1e-5), query


def test_top_k_is_the_head_of_the_full_ranking(filled: SQLiteStore) -> None:
    for query in QUERIES:
        full, _ = _both(filled, query)
        for k in (1, 2, 3):
            assert filled.keyword_search(query, k) == full[:k]
    assert filled.keyword_search("bridge", 0) == []
    assert filled.keyword_search("nothingmatchesthis", 5) == []


def test_a_term_in_most_chunks_scores_as_in_fts5(store: SQLiteStore) -> None:
    # IDF ≤ 0 for a term in more than half the chunks: FTS5 floors it at 1e-6, so such a term
    # alone still ranks its chunks (by term frequency and length)
    write(store, make_doc(1, acl=()), [f"zone {'zone ' * n}fare number {n}" for n in range(8)] + ["tram", "bus"])
    for query in ("zone", "zone fare", "tram zone"):
        memory, fts = _both(store, query)
        assert [r for r, _ in memory] == [r for r, _ in fts], query
        assert [s for _, s in memory] == pytest.approx([s for _, s in fts], rel=1e-5), query
    assert len(store.keyword_search("zone", 50)) == 8


def test_acl_is_applied_before_top_k(filled: SQLiteStore) -> None:
    secret = {int(r[0]) for r in filled.conn.execute("SELECT id FROM chunks WHERE doc_id=?",
                                                      (make_doc(3).doc_id,))}
    everyone, _ = _both(filled, "bridge's keeper")
    assert everyone[0][0] in secret  # the best hit without a filter is the finance document's
    for groups in ([], ["staff"]):
        memory, fts = _both(filled, "bridge's keeper", k=1, groups=groups)
        assert memory == [(r, pytest.approx(s, rel=1e-5)) for r, s in fts]
        assert len(memory) == 1 and memory[0][0] not in secret  # never a leak, never fewer than k
    memory, fts = _both(filled, "bridge's keeper", k=1, groups=["finance"])
    assert memory[0][0] == fts[0][0] and memory[0][0] in secret


def test_document_scope_is_applied_before_top_k(filled: SQLiteStore) -> None:
    scope = [make_doc(5).doc_id, "not-a-document"]
    memory, fts = _both(filled, "bridge arches steel", k=1, doc_ids=scope)
    assert [r for r, _ in memory] == [r for r, _ in fts]
    rows = {int(r[0]) for r in filled.conn.execute("SELECT id FROM chunks WHERE doc_id=?", (scope[0],))}
    assert len(memory) == 1 and memory[0][0] in rows
    assert _both(filled, "bridge", doc_ids=[]) == ([], [])
    memory, fts = _both(filled, "bridge's keeper", doc_ids=[make_doc(3).doc_id], groups=["staff"])
    assert memory == fts == []


def test_matrix_follows_ingest_delete_and_acl_changes(filled: SQLiteStore) -> None:
    assert filled.keyword_search("gondola", 5) == []
    write(filled, make_doc(9, content="h9", acl=()), ["A gondola crosses the valley."])
    found = filled.keyword_search("gondola", 5)
    assert len(found) == 1
    assert filled.delete_document(make_doc(9).doc_id)
    assert filled.keyword_search("gondola", 5) == []
    doc = make_doc(1, content="h1", acl=())
    assert filled.keyword_search("harbour", 5, groups=[])
    doc.acl = ["board"]
    filled.update_document_metadata(doc)
    assert filled.keyword_search("harbour", 5, groups=[]) == []
    assert filled.keyword_search("harbour", 5, groups=["board"])
    for query in QUERIES:
        memory, fts = _both(filled, query, groups=["staff"])
        assert [r for r, _ in memory] == [r for r, _ in fts]


def test_stores_on_one_database_share_the_matrix_and_see_each_others_writes(filled: SQLiteStore,
                                                                             store_dir: Path) -> None:
    filled.keyword_search("bridge", 3)
    other = SQLiteStore(store_dir)
    try:
        assert other.bm25_index is filled.bm25_index
        write(other, make_doc(8, content="h8", acl=()), ["The funicular climbs to the monastery."])
        assert len(filled.keyword_search("funicular monastery", 3)) == 1
    finally:
        other.close()


def test_a_new_database_at_the_same_path_gets_its_own_matrix(store_dir: Path) -> None:
    first = SQLiteStore(store_dir)
    write(first, make_doc(1, acl=()), ["The old ferry sails at noon."])
    assert first.keyword_search("ferry", 3)
    old_index = first.bm25_index
    first.close()
    shutil.rmtree(store_dir)
    second = SQLiteStore(store_dir)
    try:
        write(second, make_doc(1, acl=()), ["The new cable car leaves at nine."])  # same generation
        assert second.bm25_index is not old_index
        assert second.keyword_search("ferry", 3) == []
        assert len(second.keyword_search("cable car", 3)) == 1
    finally:
        second.close()


def test_closing_a_store_waits_for_its_background_build(store_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build reads the database on a thread of its own: after `close` no thread holds (or opens)
    a file in the store's folder, so the folder can be removed at once (a new-clone test run failed
    with "Directory not empty" when a build was still running)."""
    from cograg.index import bm25_memory

    started = threading.Event()
    load = bm25_memory.load_postings

    def slow_load(conn, generation):
        started.set()
        time.sleep(0.5)
        return load(conn, generation)

    monkeypatch.setattr(bm25_memory, "load_postings", slow_load)
    store = SQLiteStore(store_dir)
    write(store, make_doc(1, acl=()), ["The old ferry sails at noon."])
    assert store.keyword_search("ferry", 3)  # FTS5 answers; the matrix is built in the background
    assert started.wait(5)
    index = store.bm25_index
    store.close()
    assert index._builder is not None and not index._builder.is_alive()
    assert index._postings is not None  # the build finished, rather than failing on a closed store
    shutil.rmtree(store_dir)
    assert not store_dir.exists()


def test_concurrent_searches_while_documents_change(filled: SQLiteStore) -> None:
    expected = {q: filled.keyword_search(q, 5) for q in QUERIES}
    errors: list[BaseException] = []

    def search() -> None:
        try:
            for _ in range(20):
                for q in QUERIES:
                    got = filled.keyword_search(q, 5)
                    assert [r for r, _ in got][:1] == [r for r, _ in expected[q]][:1] or "gondola" in q
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=search) for _ in range(4)]
    for t in threads:
        t.start()
    for n in range(20, 25):  # each write starts a new generation under the searching threads
        write(filled, make_doc(n, content=f"h{n}", acl=()), [f"Gondola number {n} is painted red."])
    for t in threads:
        t.join()
    assert not errors
    assert len(filled.keyword_search("gondola painted", 10)) == 5


def test_common_term_cut_off_matches_the_fts5_statistics(filled: SQLiteStore) -> None:
    gen = filled.generation()
    terms = ["bridg", "zone", "tea", "gondola", "arch"]
    for share in (0.05, 0.2, 0.5, 1.0):
        assert (filled.bm25_index.drop_common(filled.conn, gen, terms, share)
                == filled.term_stats.drop_common(filled.conn, gen, terms, share))


def test_memory_is_reported(filled: SQLiteStore) -> None:
    index = MemoryBM25()
    assert posting_count(index) == 0
    postings = index.postings(filled.conn, filled.generation())
    assert posting_count(index) == postings.impacts.nnz > 0
    assert postings.nbytes > postings.impacts.data.nbytes


def test_engine_setting_selects_fts5(tmp_path: Path) -> None:
    eng = Engine.open(tmp_path / "store", settings=Settings.model_validate({"retrieval": {"bm25_engine": "fts5"}}))
    try:
        assert eng.store.bm25_engine == "fts5"
    finally:
        eng.close()
    eng = Engine.open(tmp_path / "store", settings=Settings())
    try:
        assert eng.store.bm25_engine == "auto"
    finally:
        eng.close()


def test_auto_answers_from_fts5_while_the_matrix_is_built_in_the_background(filled: SQLiteStore) -> None:
    assert filled.bm25_engine == "auto"  # the store's default
    index, gen = filled.bm25_index, filled.generation()
    assert not index.ready(gen)
    first = filled.keyword_search("bridge arches steel", 5)  # FTS5; the build starts
    index.wait_for_build(60)
    assert index.ready(gen)
    again = filled.keyword_search("bridge arches steel", 5)  # from the matrix
    assert [r for r, _ in again] == [r for r, _ in first]
    assert [s for _, s in again] == pytest.approx([s for _, s in first], rel=1e-5)
    write(filled, make_doc(9, content="h9", acl=()), ["A gondola crosses the valley."])
    assert not index.ready(filled.generation())
    assert len(filled.keyword_search("gondola", 5)) == 1  # a new document is found at once
    index.wait_for_build(60)
    assert index.ready(filled.generation())
    assert len(filled.keyword_search("gondola", 5)) == 1


def test_a_failed_background_build_leaves_fts5_answering(filled: SQLiteStore,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import cograg.index.bm25_memory as bm25_memory

    calls = []

    def broken(*args: object) -> None:
        calls.append(args)
        raise MemoryError("no room")

    monkeypatch.setattr(bm25_memory, "load_postings", broken)
    filled.bm25_engine = "fts5"
    expected = filled.keyword_search("tram zone fares", 50)
    filled.bm25_engine = "auto"
    for _ in range(3):
        assert filled.keyword_search("tram zone fares", 50) == expected
        filled.bm25_index.wait_for_build(60)
    assert len(calls) == 1  # not retried for the same generation
    assert not filled.bm25_index.ready(filled.generation())


def test_a_build_that_outlives_its_store_creates_no_database(tmp_path: Path) -> None:
    # the store's folder was emptied (a new store is about to be made there) when the build of the
    # old one starts: it must fail quietly, not leave an empty database file at that path
    from cograg.index.sqlite_store import DB_NAME

    index = MemoryBM25()
    index._build_from_file(tmp_path / DB_NAME, "3")
    assert not (tmp_path / DB_NAME).exists() and index._failed == "3" and not index.ready("3")
