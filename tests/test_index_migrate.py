"""`cograg index migrate --to milvus:…` (SPEC I): an existing SQLite store's chunks and stored vectors
move into Milvus Lite without embedding anything again, and search gives the same answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cograg.config import Settings
from cograg.engine import Engine
from cograg.errors import ConfigError, StoreError
from cograg.index.migrate import migrate_index
from cograg.retrieval import Principal
from tests.fakes import HashingEmbedder
from tests.test_retrieval import named, write_corpus

pytest.importorskip("pymilvus", reason="needs pymilvus and milvus-lite: pip install 'cograg[scale]'")
pytest.importorskip("milvus_lite", reason="needs pymilvus and milvus-lite: pip install 'cograg[scale]'")

from cograg.index.milvus_store import MilvusStore  # noqa: E402


@pytest.fixture()
def sqlite_store(tmp_path: Path) -> Path:
    corpus = write_corpus(tmp_path / "corpus")
    root = tmp_path / "store"
    with Engine.open(root, settings=Settings(index="sqlite"), embedder=HashingEmbedder()) as eng:
        eng.ingest([corpus / n for n in ("tea.md", "tram.md", "bridge.txt")])
        eng.ingest([corpus / "secret.md"], acl=["finance"], tags=["secret"])
    return root


def test_migrate_copies_stored_vectors_and_acl_without_embedding(sqlite_store: Path):
    seen: list[tuple[int, int]] = []
    report = migrate_index(sqlite_store, "milvus:milvus.db", progress=lambda d, t: seen.append((d, t)))
    assert report.rebuilt and report.indexed == report.chunks == report.vectors > 0
    assert report.uri == str(sqlite_store / "milvus.db") and report.documents == 4
    assert seen and seen[-1] == (report.chunks, report.chunks)
    # in step now: a second run leaves the collection alone, --rebuild recreates it
    assert not migrate_index(sqlite_store, "milvus:milvus.db").rebuilt
    assert migrate_index(sqlite_store, "milvus:milvus.db", rebuild=True).rebuilt

    embedder = HashingEmbedder()
    with Engine.open(sqlite_store, settings=Settings(index="sqlite"), embedder=embedder) as plain:
        expected = {q: [(h.source, h.seq) for h in plain.search(q, mode="vector", k=4).hits]
                    for q in ("Tobias Marrick bridge", "银雾 品种")}
    with Engine.open(sqlite_store, settings=Settings(index="milvus:milvus.db"), embedder=embedder) as eng:
        store = eng.store
        assert isinstance(store, MilvusStore) and not store.rebuilt_on_open
        for q, hits in expected.items():
            assert [(h.source, h.seq) for h in eng.search(q, mode="vector", k=4).hits] == hits
        rowid, vec = store.conn.execute("SELECT chunk_rowid, vec FROM chunk_vectors LIMIT 1").fetchone()
        got = store.index.client.get(store.index.collection, ids=[int(rowid)], output_fields=["dense", "acl"])
        assert np.array_equal(np.asarray(got[0]["dense"], np.float32), np.frombuffer(vec, np.float32))
        secret = named(eng, "secret")
        assert store.index.count([secret.doc_id]) == secret.chunk_count
        assert all(h.doc_id != secret.doc_id for h in eng.search("secret budget", mode="bm25",
                                                                   principal=Principal(groups=["staff"])).hits)
    assert embedder.texts_embedded == 2 * 2  # the queries only, never a passage


def test_migrate_refuses_what_it_cannot_do(tmp_path: Path, sqlite_store: Path):
    with pytest.raises(ConfigError, match="migrate moves a store to Milvus"):
        migrate_index(sqlite_store, "sqlite")
    with pytest.raises(ConfigError, match="ends in .db|ending in .db"):
        migrate_index(sqlite_store, "milvus:idx")
    with pytest.raises(StoreError):
        migrate_index(tmp_path / "nowhere", "milvus:milvus.db")
    assert not (tmp_path / "nowhere").exists()


def test_migrate_command(cli, sqlite_store: Path):
    res = cli("index", "migrate", "--to", "milvus:milvus.db", "--store", sqlite_store, "--json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["rebuilt"] and data["indexed"] == data["chunks"] > 0 and data["to"] == "milvus:milvus.db"
    res = cli("index", "migrate", "--to", "milvus:milvus.db", "--store", sqlite_store)
    assert res.exit_code == 0 and "already in step" in res.stdout and "COGRAG_INDEX=milvus:milvus.db" in res.stdout
    bad = cli("index", "migrate", "--to", "milvus:idx", "--store", sqlite_store, "--json")
    assert bad.exit_code != 0 and bad.stdout == ""
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and ".db" in lines[0]
