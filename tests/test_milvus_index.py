"""The Milvus index (SPEC I) against Milvus Lite, what only Milvus has: the same results as the SQLite
index on the same vectors, tag filter fields, the collection in step with SQLite, recovery and
configuration. The search behaviour both backends share (ACL, scope, deletes, Chinese BM25) is one
parametrised suite in tests/test_index_backends.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cograg.config import Settings
from cograg.engine import Engine
from cograg.errors import ConfigError, StoreError
from cograg.index.backends import milvus_uri
from cograg.index.protocols import ChunkSearchIndex
from cograg.index.sqlite_store import SQLiteStore
from cograg.retrieval import Principal, rrf
from tests.fakes import HashingEmbedder
from tests.test_retrieval import named, write_corpus

pytest.importorskip("pymilvus", reason="needs pymilvus and milvus-lite: pip install 'cograg[scale]'")
pytest.importorskip("milvus_lite", reason="needs pymilvus and milvus-lite: pip install 'cograg[scale]'")

from cograg.index.milvus_store import MilvusStore  # noqa: E402

QUERIES = ["Tobias Marrick bridge arches", "银雾 品种 育成", "single ticket fare zone", "研究所 历史"]


def _engine(root: Path, index: str, corpus: Path) -> Engine:
    eng = Engine.open(root, settings=Settings(index=index), embedder=HashingEmbedder())
    eng.ingest([corpus / n for n in ("tea.md", "tram.md", "bridge.txt")])
    eng.ingest([corpus / "secret.md"], acl=["finance"], tags=["secret"])
    return eng


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus")


@pytest.fixture()
def milvus(tmp_path: Path, corpus: Path):
    eng = _engine(tmp_path / "store", "milvus:milvus.db", corpus)
    assert isinstance(eng.store, MilvusStore)
    yield eng
    eng.close()


def _index_rowids(store: MilvusStore) -> set[int]:
    return {int(r["id"]) for r in store.index.client.query(store.index.collection, filter="id >= 0",
                                                            output_fields=["id"])}


def _sqlite_rowids(store: MilvusStore) -> set[int]:
    return {int(r[0]) for r in store.conn.execute("SELECT id FROM chunks")}


def test_same_results_shape_as_the_sqlite_index(tmp_path: Path, corpus: Path, milvus: Engine):
    with _engine(tmp_path / "plain", "sqlite", corpus) as plain:
        for query in QUERIES:
            for mode in ("bm25", "vector", "hybrid"):
                a = plain.search(query, mode=mode, k=3)
                b = milvus.search(query, mode=mode, k=3)
                assert b.hits, (query, mode)
                assert a.hits[0].source == b.hits[0].source, (query, mode)
                assert {type(h) for h in b.hits} == {type(h) for h in a.hits}
                assert [set(h.model_dump()) for h in b.hits] == [set(a.hits[0].model_dump())] * len(b.hits)
                assert all(set(h.retrievers) <= {"bm25", "vector"} for h in b.hits)
                assert b.evidence_source == a.evidence_source
            # exact dense search over the same vectors: the same chunks with the same cosines
            a, b = plain.search(query, mode="vector", k=4), milvus.search(query, mode="vector", k=4)
            assert [(h.source, h.seq) for h in a.hits] == [(h.source, h.seq) for h in b.hits]
            assert [h.score for h in b.hits] == pytest.approx([h.score for h in a.hits], abs=1e-5)


def test_tags_are_filters_of_the_same_search(milvus: Engine):
    store = milvus.store
    secret = named(milvus, "secret")
    secret_rows = {int(r[0]) for r in store.conn.execute("SELECT id FROM chunks WHERE doc_id=?", (secret.doc_id,))}
    qvec = HashingEmbedder().embed_queries(["secret budget"])[0]
    assert {r for r, _ in store.index.vector_search(qvec, 50, tags_any=["secret"])} == secret_rows
    assert not secret_rows & {r for r, _ in store.index.vector_search(qvec, 50, tags_none=["secret"])}
    assert not secret_rows & {r for r, _ in store.index.hybrid_search("secret budget", qvec, 50,
                                                                      tags_none=["secret"])}


def test_acl_change_applies_to_the_index(milvus: Engine, corpus: Path):
    secret = named(milvus, "secret")
    milvus.ingest([corpus / "secret.md"], acl=["hr"], tags=["secret"])
    assert named(milvus, "secret").acl == ["hr"]
    assert all(h.doc_id != secret.doc_id for h in milvus.search(
        "secret budget", mode="bm25", principal=Principal(groups=["finance"])).hits)
    assert milvus.search("secret budget", mode="bm25", k=1,
                         principal=Principal(groups=["hr"])).hits[0].doc_id == secret.doc_id
    assert milvus.store.pending_documents() == []


def test_delete_and_replace_remove_the_rows_from_milvus(milvus: Engine, corpus: Path):
    """Behaviour is in tests/test_index_backends.py; here: the collection itself holds no ghost."""
    store = milvus.store
    bridge = named(milvus, "bridge")
    assert store.index.count([bridge.doc_id]) == bridge.chunk_count
    milvus.delete_document(bridge.doc_id)
    assert store.index.count([bridge.doc_id]) == 0
    assert store.index.keyword_search("Marrick", 50) == []  # not merely dropped when rows are read
    assert _index_rowids(store) == _sqlite_rowids(store)
    (corpus / "tram.md").write_text("# Tram network\n\n## Fares\n\nA single ticket now costs EUR 3.\n",
                                    encoding="utf-8")
    milvus.ingest([corpus / "tram.md"])
    assert _index_rowids(store) == _sqlite_rowids(store)
    assert store.pending_documents() == []


def test_lite_writes_are_flushed_once_before_the_next_search(milvus: Engine, corpus: Path):
    """Milvus Lite scans unflushed rows in Python per query (seconds at 10k chunks), so a written
    collection is flushed before it is searched, and the search still sees what was just written."""
    from cograg.index import milvus_index

    index = milvus.store.index
    key = (index.uri, index.collection)
    assert index.lite
    (corpus / "kiln.md").write_text("# Kiln\n\nThe Varrow kiln fires celadon at 1280 degrees.\n", encoding="utf-8")
    milvus.ingest([corpus / "kiln.md"])
    assert key in milvus_index._UNFLUSHED
    kiln = named(milvus, "kiln")
    assert {milvus.store.doc_ids_of([r])[r] for r, _ in index.keyword_search("Varrow celadon", 3)} == {kiln.doc_id}
    assert key not in milvus_index._UNFLUSHED
    qvec = HashingEmbedder().embed_queries(["Varrow kiln celadon"])[0]
    assert index.hybrid_search("Varrow kiln celadon", qvec, 1)[0][0] in {
        int(r[0]) for r in milvus.store.conn.execute("SELECT id FROM chunks WHERE doc_id=?", (kiln.doc_id,))}


def test_hybrid_search_is_rrf_of_the_two_filtered_searches(milvus: Engine):
    index = milvus.store.index
    for query in QUERIES:
        qvec = HashingEmbedder().embed_queries([query])[0]
        groups = ["staff"]
        expected = rrf([[r for r, _ in index.keyword_search(query, 50, groups)],
                        [r for r, _ in index.vector_search(qvec, 50, groups)]], k=60)
        got = index.hybrid_search(query, qvec, 10, groups, retrieve_k=50, rrf_k=60)
        assert [s for _, s in got] == pytest.approx([s for _, s in expected[:10]], abs=1e-6)
        assert {r for r, _ in got} <= {r for r, _ in expected}


def test_reopen_repairs_an_interrupted_sync_and_migrates_without_embedding(tmp_path: Path, corpus: Path):
    root = tmp_path / "store"
    with _engine(root, "sqlite", corpus) as plain:
        chunks = plain.store.count_chunks()
    embedder = HashingEmbedder()
    eng = Engine.open(root, settings=Settings(index="milvus:milvus.db"), embedder=embedder)
    store = eng.store
    assert isinstance(store, MilvusStore) and store.index.count() == chunks and embedder.texts_embedded == 0
    assert eng.search("Tobias Marrick", mode="hybrid", k=1).hits[0].title == "bridge"
    # a crash between hiding a document in Milvus and pushing it back leaves it pending
    bridge = named(eng, "bridge")
    store._mark({bridge.doc_id})
    store.index.delete_documents([bridge.doc_id])
    eng.close()
    eng = Engine.open(root, settings=Settings(index="milvus:milvus.db"), embedder=embedder)
    assert eng.store.pending_documents() == [] and eng.store.index.count() == chunks
    assert eng.search("Tobias Marrick", mode="bm25", k=1).hits[0].title == "bridge"
    eng.close()


def test_a_write_made_without_the_milvus_index_is_found_on_the_next_open(tmp_path: Path, corpus: Path):
    # An ACL change made by a command run without COGRAG_INDEX kept the chunk count and marked
    # nothing pending: Milvus went on serving the document to groups the new ACL leaves out, and
    # `index migrate` said "already in step".
    root = tmp_path / "store"
    _engine(root, "milvus:milvus.db", corpus).close()
    staff = Principal(groups=["staff"])
    with Engine.open(root, settings=Settings(index="sqlite"), embedder=HashingEmbedder()) as plain:
        plain.ingest([corpus / "bridge.txt"], acl=["finance"])  # the same text, a new ACL
        assert plain.search("Tobias Marrick", mode="bm25", principal=staff).hits == []
    with Engine.open(root, settings=Settings(index="milvus:milvus.db"), embedder=HashingEmbedder()) as eng:
        assert eng.store.rebuilt_on_open
        assert eng.search("Tobias Marrick", mode="bm25", principal=staff).hits == []
        assert eng.search("Tobias Marrick", mode="bm25", principal=Principal(groups=["finance"])).hits
    with Engine.open(root, settings=Settings(index="milvus:milvus.db"), embedder=HashingEmbedder()) as eng:
        assert not eng.store.rebuilt_on_open  # in step now, and its own writes keep it so
        eng.ingest([corpus / "bridge.txt"], acl=["staff"])
    with Engine.open(root, settings=Settings(index="milvus:milvus.db"), embedder=HashingEmbedder()) as eng:
        assert not eng.store.rebuilt_on_open
        assert eng.search("Tobias Marrick", mode="bm25", principal=staff).hits


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_milvus_is_one_line(tmp_path: Path):
    port = _closed_port()
    SQLiteStore(tmp_path / "s").close()
    with pytest.raises(StoreError, match=f"cannot reach Milvus at http://127.0.0.1:{port}"):
        MilvusStore(tmp_path / "s", uri=f"http://127.0.0.1:{port}", timeout_s=5)
    env = {"COGRAG_INDEX": f"milvus:http://127.0.0.1:{port}", "COGRAG_EMBEDDER": "none", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": ":".join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "cograg.cli", "search", "bridge", "--store", str(tmp_path / "s")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot reach Milvus at http://127.0.0.1:{port}" in lines[0]


def test_the_store_databases_the_index_spec_keeps_clear_are_the_store_files():
    from cograg.index.backends import STORE_DATABASES
    from cograg.index.sqlite_schema import DB_NAME
    from cograg.memory.sqlite_store import DB_NAME as MEMORY_DB_NAME

    assert set(STORE_DATABASES) == {DB_NAME, MEMORY_DB_NAME}


def test_a_milvus_lite_file_held_by_another_process_is_one_line_and_listing_still_works(tmp_path: Path,
                                                                                       corpus: Path):
    # Milvus Lite logged a 20-line traceback and pymilvus said only "Open local milvus failed";
    # `docs list` and `trace`, which search nothing, failed too while `cograg serve` held the file.
    root = tmp_path / "store"
    env = {"COGRAG_INDEX": "milvus:milvus.db", "COGRAG_EMBEDDER": "none", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": ":".join(sys.path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cograg.cli", *args, "--store", str(root)],
                              capture_output=True, text=True, env=env, timeout=120)
    with _engine(root, "milvus:milvus.db", corpus):  # this process holds the file, as a server would
        listed = cli("docs", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert len(json.loads(listed.stdout)) == 4
        assert cli("trace").returncode == 0
        searched = cli("search", "Tobias", "--mode", "bm25")
        assert searched.returncode != 0
        assert searched.stderr.strip().splitlines() == [
            f"error: cannot open Milvus Lite at {root / 'milvus.db'}: in use by another process "
            "(Milvus Lite serves one process at a time)"]


def test_index_setting_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assert milvus_uri("sqlite", tmp_path) is None
    assert milvus_uri("milvus:idx.db", tmp_path) == str(tmp_path / "idx.db")
    assert milvus_uri("milvus:/abs/idx.db", tmp_path) == "/abs/idx.db"
    assert milvus_uri("milvus:http://host:19530", tmp_path) == "http://host:19530"
    assert milvus_uri("milvus:sub/../idx.db", tmp_path) == str(tmp_path / "sub/../idx.db")
    for bad in ("milvus:idx", "postgres:x", "milvus"):
        with pytest.raises(ConfigError):
            milvus_uri(bad, tmp_path)
    # "http://" was tried as localhost:19530 ("cannot reach"); "../x.db" was written beside the store
    for bad, words in (("milvus:http://", "names no host"), ("milvus:https://:19530", "names no host"),
                       ("milvus:http://host:99999", "no valid port"), ("milvus:http://host:port", "no valid port"),
                       ("milvus:../idx.db", "stays inside the store"), ("milvus:a/../../idx.db", "inside the store"),
                       ("milvus:memory.db", "store's own database"), ("milvus:./cograg.db", "store's own database")):
        with pytest.raises(ConfigError, match=words):
            milvus_uri(bad, tmp_path)
    monkeypatch.setenv("COGRAG_INDEX", "milvus:http://host:19530")
    assert Settings().index == "milvus:http://host:19530"
    assert Settings().with_overrides(["index=sqlite"]).index == "sqlite"
    with pytest.raises(ValueError):
        Settings(index="elastic")


def test_vectors_match_the_stored_ones(milvus: Engine):
    store = milvus.store
    assert isinstance(store.index, ChunkSearchIndex) and isinstance(store, ChunkSearchIndex)
    row = store.conn.execute("SELECT chunk_rowid, vec FROM chunk_vectors LIMIT 1").fetchone()
    got = store.index.client.get(store.index.collection, ids=[int(row[0])], output_fields=["dense"])
    assert np.allclose(np.asarray(got[0]["dense"], np.float32), np.frombuffer(row[1], np.float32))


def test_group_and_tag_names_match_whole_names_only(tmp_path: Path):
    """ACL groups and tags are matched with LIKE on hex-encoded names: a name holding LIKE wildcards,
    the delimiter or another name's prefix matches only itself."""
    from cograg.index.milvus_index import IndexRow, MilvusIndex, member_keys

    names = ["a_b", "axb", "50%", "500", "fin", "finance", "x|y", "x", "财务", ""]
    index = MilvusIndex(str(tmp_path / "names.db"), "names")
    index.create(4)
    vec = np.array([1, 0, 0, 0], np.float32)
    rows = [IndexRow(rowid=i, doc_id=f"d{i}", text="ledger entry", vector=vec, acl=[n], tags=[n])
            for i, n in enumerate(names)]
    rows.append(IndexRow(rowid=len(names), doc_id="public", text="ledger entry", vector=vec))
    index.upsert(rows)
    public = len(names)
    assert member_keys([]) == "" and member_keys(["b", "a", "a"]) == "|61|62|"
    try:
        for i, name in enumerate(names):
            for found in (index.keyword_search("ledger", 50, [name]), index.vector_search(vec, 50, [name]),
                          index.hybrid_search("ledger", vec, 50, [name])):
                assert {r for r, _ in found} == {i, public}, name
            assert {r for r, _ in index.vector_search(vec, 50, tags_any=[name])} == {i}, name
            assert {r for r, _ in index.vector_search(vec, 50, tags_none=[name])} == set(range(public + 1)) - {i}
        assert {r for r, _ in index.keyword_search("ledger", 50, [])} == {public}
        assert {r for r, _ in index.keyword_search("ledger", 50, ["fin", "axb"])} == {4, 1, public}
        assert len(index.keyword_search("ledger", 50)) == public + 1
    finally:
        index.close()


def test_a_collection_of_an_older_schema_is_rebuilt_on_open(tmp_path: Path, corpus: Path):
    root = tmp_path / "store"
    with _engine(root, "milvus:milvus.db", corpus) as eng:
        from pymilvus import DataType

        index, chunks, dim = eng.store.index, eng.store.count_chunks(), eng.store.index.dim
        # what earlier versions wrote: ACLs and tags as arrays, same vector dimension, same chunk count
        client, name = index.client, index.collection
        client.drop_collection(name)
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=256)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
        for field in ("acl", "tags"):
            schema.add_field(field, DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=8, max_length=64)
        params = client.prepare_index_params()
        params.add_index("dense", index_type="FLAT", metric_type="IP")
        client.create_collection(name, schema=schema, index_params=params)
        client.insert(name, [{"id": int(r[0]), "doc_id": r[1], "dense": [1.0] + [0.0] * (dim - 1), "acl": [],
                              "tags": []} for r in eng.store.conn.execute("SELECT id, doc_id FROM chunks")])
        client.flush(name)
        assert index.count() == chunks
    eng = Engine.open(root, settings=Settings(index="milvus:milvus.db"), embedder=HashingEmbedder())
    try:
        store = eng.store
        assert isinstance(store, MilvusStore) and store.rebuilt_on_open and store.index.has_current_schema
        assert store.index.count() == chunks
        secret = named(eng, "secret")
        assert all(h.doc_id != secret.doc_id for h in eng.search(
            "secret budget", mode="bm25", principal=Principal(groups=["staff"])).hits)
        assert eng.search("secret budget", mode="bm25", k=1,
                          principal=Principal(groups=["finance"])).hits[0].doc_id == secret.doc_id
    finally:
        eng.close()
