"""Crash safety (SPEC A4/I): `kill -9` in the middle of ingesting a large folder leaves a
consistent store (no document with missing chunks), and the next ingest finishes the job."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from cograg.index.sqlite_store import DB_NAME, SQLiteStore

pytestmark = pytest.mark.usefixtures("ingest_env")

N_FILES = 400

_WORDS = ("tram line stop fare card zone city bridge river harbour market station depot timetable "
          "passenger ticket network council report budget winter summer festival museum library "
          "林登港 有轨电车 茶叶 研究所 城市 公交 车站").split()


def make_folder(root: Path, n_files: int, kb: int, seed: int = 0) -> Path:
    """`n_files` files of about `kb` KB of varied prose (English and Chinese), all different."""
    rnd = random.Random(seed)
    paragraphs = []
    for _ in range(300):
        sentences = [" ".join(rnd.choice(_WORDS) for _ in range(rnd.randint(5, 18))).capitalize() + "."
                     for _ in range(rnd.randint(2, 7))]
        paragraphs.append(" ".join(sentences))
    root.mkdir(parents=True)
    for i in range(n_files):
        parts = [f"Document {i}: report number {i} of the archive."]
        size = len(parts[0])
        while size < kb * 1024:
            p = rnd.choice(paragraphs)
            parts.append(p)
            size += len(p.encode()) + 2
        ext = ".md" if i % 4 == 0 else ".txt"
        body = "\n\n".join(parts)
        if ext == ".md":
            body = f"# Report {i}\n\n" + body
        (root / f"doc{i:04d}{ext}").write_text(body, encoding="utf-8")
    return root


def committed_documents(db: Path) -> int | None:
    """Documents committed so far, read through a read-only connection (None: no store yet)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.OperationalError:
        return None
    try:
        return int(conn.execute("SELECT count(*) FROM documents").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet, or briefly busy
        return None
    finally:
        conn.close()


def ingest_and_kill(cmd: list[str], env: dict[str, str], store: Path, n_files: int,
                    deadline_s: float = 120) -> bool:
    """Start the ingest, wait until some (>= 10) but not all documents are committed, then
    SIGKILL it while it is still running. Returns False if it could not be killed mid-run
    (it finished first)."""
    db = store / DB_NAME
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    started = time.monotonic()
    seen = 0
    try:
        while time.monotonic() - started < deadline_s:
            n = committed_documents(db)
            if n is not None:
                seen = n
            if proc.poll() is not None or seen >= n_files:
                break  # too late: it finished (or is finishing)
            if seen >= 10:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
                assert proc.returncode == -signal.SIGKILL
                return committed_documents(db) < n_files
            time.sleep(0.01)
        else:
            pytest.fail(f"ingest made no progress in {deadline_s}s (saw {seen} documents)")
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"ingest failed: {err.decode(errors='replace')}"
        return False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.mark.timeout(400)
def test_kill9_mid_ingest_leaves_consistent_store_and_next_ingest_completes(
        tmp_path: Path, cograg_cmd: list[str], cograg_env: dict[str, str]) -> None:
    killed = False
    n_files = N_FILES
    for attempt in range(3):
        folder = make_folder(tmp_path / f"corpus{attempt}", n_files, 20, seed=attempt)
        store_dir = tmp_path / f"store{attempt}"
        cmd = [*cograg_cmd, "ingest", str(folder), "--store", str(store_dir), "--json"]
        if ingest_and_kill(cmd, cograg_env, store_dir, n_files):
            killed = True
            break
        n_files *= 2  # it finished before it could be killed: make the job bigger and retry
    assert killed, "the ingest always finished before it could be killed mid-run"

    # ---- after the crash: consistent, and only whole documents
    with SQLiteStore(store_dir) as store:
        assert store.check_consistency() == []
        rows = store.conn.execute(
            "SELECT d.doc_id, d.chunk_count, count(c.id) FROM documents d "
            "LEFT JOIN chunks c ON c.doc_id = d.doc_id GROUP BY d.doc_id").fetchall()
        committed = len(rows)
        assert 10 <= committed < n_files, "the kill did not happen mid-run"
        print(f"killed after {committed} of {n_files} documents")
        for doc_id, recorded, actual in rows:
            assert recorded > 0 and recorded == actual, doc_id
        for doc in store.list_documents():
            seqs = [c.seq for c in store.iter_chunks(doc.doc_id)]
            assert seqs == list(range(doc.chunk_count))
        assert store.roots() == []  # the killed run never finished
        before = {d.doc_id: d.content_hash for d in store.list_documents()}

    # ---- the next ingest completes the job, adding each missing document exactly once
    res = subprocess.run(cmd, capture_output=True, text=True, env=cograg_env, timeout=300)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["skipped"] == []
    assert summary["added"] == n_files - committed
    assert summary["unchanged"] == committed
    assert (summary["updated"], summary["deleted"]) == (0, 0)

    with SQLiteStore(store_dir) as store:
        assert store.check_consistency() == []
        docs = store.list_documents()
        assert len(docs) == n_files
        assert sorted(Path(d.source_path).name for d in docs) == sorted(p.name for p in folder.iterdir())
        assert all(d.chunk_count > 0 for d in docs)
        assert {d.doc_id: d.content_hash for d in docs if d.doc_id in before} == before
        total, distinct = store.conn.execute(
            "SELECT count(*), count(DISTINCT chunk_id) FROM chunks").fetchone()
        assert total == distinct == summary["chunks"] == sum(d.chunk_count for d in docs)
        assert store.roots() == [str(folder)]

    # ---- and a third run has nothing left to do
    res = subprocess.run(cmd, capture_output=True, text=True, env=cograg_env, timeout=300)
    summary = json.loads(res.stdout)
    assert (summary["added"], summary["updated"], summary["unchanged"]) == (0, 0, n_files)


_SLOW_EMBEDDING_INGEST = """
import sys, time
from pathlib import Path
sys.path[:0] = {paths!r}
from cograg.config import Settings
from cograg.index.indexing import ChunkIndexer
from cograg.index.sqlite_store import SQLiteStore
from cograg.ingest.pipeline import ingest_paths
from tests.fakes import HashingEmbedder

class SlowEmbedder(HashingEmbedder):
    def embed_passages(self, texts):
        time.sleep(0.15)  # a real model takes seconds per batch
        return super().embed_passages(texts)

with SQLiteStore(Path(sys.argv[1]), indexer=ChunkIndexer(SlowEmbedder())) as store:
    ingest_paths(store, [sys.argv[2]], settings=Settings(embedder="none"))
"""


def _count(db: Path, table: str) -> int | None:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.OperationalError:
        return None
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()


@pytest.mark.timeout(120)
def test_kill9_while_embedding_a_large_records_file_keeps_the_embeddings(
        tmp_path: Path, cograg_env: dict[str, str]) -> None:
    """One JSONL file of many records is one document: killed at ~90 % of its embeddings, the
    store has no trace of the document but keeps every committed embedding batch, and the next
    run embeds only what was missing while the document still appears in one piece."""
    import sys

    from cograg.config import Settings
    from cograg.index.indexing import ChunkIndexer
    from cograg.ingest.pipeline import ingest_paths
    from tests.fakes import HashingEmbedder

    n_records = 640
    records = tmp_path / "records.jsonl"
    with records.open("w", encoding="utf-8") as fh:
        for i in range(n_records):
            fh.write(json.dumps({"id": i, "text": f"Record {i}: tram line {i} 林登港 stop {i * 7}."},
                                ensure_ascii=False) + "\n")
    store_dir = tmp_path / "store"
    db = store_dir / DB_NAME
    repo = Path(__file__).resolve().parents[1]
    script = _SLOW_EMBEDDING_INGEST.format(paths=[str(repo / "src"), str(repo)])
    proc = subprocess.Popen([sys.executable, "-c", script, str(store_dir), str(records)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cograg_env)
    cached = 0
    try:
        started = time.monotonic()
        while time.monotonic() - started < 90 and proc.poll() is None:
            cached = _count(db, "embedding_cache") or 0
            if cached >= 0.85 * n_records:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.01)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()

    with SQLiteStore(store_dir) as store:
        assert store.check_consistency() == []
        assert store.count_documents() == 0 and store.count_chunks() == 0  # no partial document
        kept = int(store.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0])
    assert 0.85 * n_records <= kept < n_records and kept % 32 == 0  # whole committed batches

    embedder = HashingEmbedder()
    with SQLiteStore(store_dir, indexer=ChunkIndexer(embedder)) as store:
        summary = ingest_paths(store, [records], settings=Settings(embedder="none"))
        assert summary.added == 1 and store.check_consistency() == []
        chunks = store.count_chunks()
        assert embedder.texts_embedded == chunks - kept  # nothing embedded twice
        assert store.conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0] == chunks
