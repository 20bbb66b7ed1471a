"""Incremental sync (SPEC A4): idempotent ingest, atomic replacement of changed files, deletion of
vanished ones, re-sync of recorded roots, tags/ACL, `docs` commands, stable ids and offsets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cograg.config import Settings
from cograg.errors import IngestError
from cograg.index.sqlite_store import SQLiteStore
from cograg.ingest import pipeline
from cograg.ingest.normalize import normalize
from cograg.ingest.pipeline import doc_id_for, ingest_paths

pytestmark = pytest.mark.usefixtures("ingest_env")

MD = """# Tram Network

The network has four lines.

## Fares

A single ticket costs 1.80 euros.

## History

Horse trams started in 1887.
"""
TXT = "Visitor FAQ\n\nQ: Can I take a bike?\nA: Yes, outside rush hours.\n\n问：可以带狗吗？\n答：可以。\n"
PY = "def fare(zones):\n    return 1.8 * zones\n\n\nclass Card:\n    def tap(self):\n        return True\n"
CSV = "line,colour\n1,Red\n2,Green\n3,Blue\n"


@pytest.fixture
def docs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "docs"
    (d / "sub").mkdir(parents=True)
    (d / "network.md").write_text(MD, encoding="utf-8")
    (d / "faq.txt").write_text(TXT, encoding="utf-8")
    (d / "sub" / "fares.py").write_text(PY, encoding="utf-8")
    (d / "sub" / "lines.csv").write_text(CSV, encoding="utf-8")
    return d


def snapshot(store: SQLiteStore) -> dict[str, tuple[dict, list[tuple[int, str, str]]]]:
    """Every document row and its chunks' (rowid, chunk id, text): a rewrite changes rowids."""
    out = {}
    for d in store.list_documents():
        rows = store.conn.execute("SELECT id, chunk_id, text FROM chunks WHERE doc_id=? ORDER BY seq",
                                  (d.doc_id,)).fetchall()
        out[d.source_path] = (d.model_dump(), [tuple(r) for r in rows])
    return out


def chunk_count_raw(store: SQLiteStore, doc_id: str) -> int:
    return store.conn.execute("SELECT count(*) FROM chunks WHERE doc_id=?", (doc_id,)).fetchone()[0]


# --------------------------------------------------------------------------- idempotency

def test_second_ingest_changes_nothing(store: SQLiteStore, docs_dir: Path) -> None:
    first = ingest_paths(store, [docs_dir])
    assert (first.added, first.updated, first.unchanged, first.deleted) == (4, 0, 0, 0)
    assert first.skipped == []
    assert first.chunks == store.count_chunks() > 4
    before = snapshot(store)

    second = ingest_paths(store, [docs_dir])
    assert (second.added, second.updated, second.unchanged, second.deleted) == (0, 0, 4, 0)
    assert second.chunks == first.chunks and second.chunks_written == 0
    assert snapshot(store) == before  # same rows, same chunk ids, same rowids: nothing rewritten
    assert store.check_consistency() == []


def test_modified_file_is_replaced_and_others_untouched(store: SQLiteStore, docs_dir: Path) -> None:
    ingest_paths(store, [docs_dir])
    before = snapshot(store)
    faq = docs_dir / "faq.txt"
    faq.write_text(TXT.replace("outside rush hours", "only on weekends") + "\nQ: Dogs?\nA: Small ones.\n",
                   encoding="utf-8")

    summary = ingest_paths(store, [docs_dir])
    assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (0, 1, 3, 0)
    after = snapshot(store)
    for path, snap in before.items():
        if path != str(faq):
            assert after[path] == snap, f"{path} was rewritten"
    doc = store.get_document_by_path(str(faq))
    assert doc.doc_id == doc_id_for(str(faq))  # id is stable across content changes
    texts = " ".join(c.text for c in store.iter_chunks(doc.doc_id))
    assert "only on weekends" in texts and "Small ones." in texts
    assert "outside rush hours" not in texts
    assert doc.content_hash != before[str(faq)][0]["content_hash"]
    assert doc.chunk_count == chunk_count_raw(store, doc.doc_id)
    assert summary.chunks == store.count_chunks()
    assert store.check_consistency() == []


def test_deleted_file_is_removed_with_its_chunks(store: SQLiteStore, docs_dir: Path) -> None:
    ingest_paths(store, [docs_dir])
    gone = docs_dir / "sub" / "fares.py"
    gone_id = store.get_document_by_path(str(gone)).doc_id
    assert chunk_count_raw(store, gone_id) > 0
    total = store.count_chunks()
    n_gone = chunk_count_raw(store, gone_id)
    gone.unlink()

    summary = ingest_paths(store, [docs_dir])
    assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (0, 0, 3, 1)
    assert store.get_document(gone_id) is None
    assert chunk_count_raw(store, gone_id) == 0
    assert summary.chunks == store.count_chunks() == total - n_gone
    assert store.check_consistency() == []


def test_renamed_file_is_deleted_and_added(store: SQLiteStore, docs_dir: Path) -> None:
    ingest_paths(store, [docs_dir])
    (docs_dir / "faq.txt").rename(docs_dir / "faq2.txt")
    summary = ingest_paths(store, [docs_dir])
    assert (summary.added, summary.deleted, summary.unchanged) == (1, 1, 3)
    assert store.get_document_by_path(str(docs_dir / "faq.txt")) is None
    assert store.get_document_by_path(str(docs_dir / "faq2.txt")) is not None


def test_ingest_subfolder_does_not_delete_siblings(store: SQLiteStore, docs_dir: Path) -> None:
    ingest_paths(store, [docs_dir])
    before = snapshot(store)
    summary = ingest_paths(store, [docs_dir / "sub"])
    assert summary.deleted == 0 and summary.added == 0 and summary.chunks_written == 0
    assert store.count_documents() == 4
    assert {p: c for p, (_, c) in snapshot(store).items()} == {p: c for p, (_, c) in before.items()}


def test_nested_roots_and_repeated_paths_are_synced_once(store: SQLiteStore, docs_dir: Path) -> None:
    """Regression: a file under two recorded roots (docs and docs/sub) was processed twice per
    re-sync, flip-flopping its root, so every re-sync reported updates and counts exceeded the
    number of documents."""
    ingest_paths(store, [docs_dir])
    ingest_paths(store, [docs_dir / "sub"])
    assert store.roots() == [str(docs_dir), str(docs_dir / "sub")]
    for _ in range(2):
        summary = ingest_paths(store, [])
        assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (0, 0, 4, 0)
    summary = ingest_paths(store, [docs_dir, docs_dir, docs_dir / "sub"])
    assert summary.added + summary.updated + summary.unchanged == 4
    assert len(store.roots()) == 2


def test_no_paths_resyncs_recorded_roots(store: SQLiteStore, docs_dir: Path) -> None:
    ingest_paths(store, [docs_dir])
    assert store.roots() == [str(docs_dir)]
    (docs_dir / "new.md").write_text("# New\n\nA brand new page.\n", encoding="utf-8")
    (docs_dir / "sub" / "lines.csv").unlink()
    (docs_dir / "network.md").write_text(MD + "\n## Future\n\nA fifth line is planned.\n", encoding="utf-8")

    summary = ingest_paths(store, [])
    assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (1, 1, 2, 1)
    names = sorted(Path(d.source_path).name for d in store.list_documents())
    assert names == ["faq.txt", "fares.py", "network.md", "new.md"]
    assert store.check_consistency() == []


def test_no_paths_and_no_roots_is_an_error(store: SQLiteStore) -> None:
    with pytest.raises(IngestError, match="nothing to ingest"):
        ingest_paths(store, [])


def test_missing_path_is_an_error(store: SQLiteStore, tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="path not found"):
        ingest_paths(store, [tmp_path / "does-not-exist"])


def test_vanished_root_deletes_its_documents(store: SQLiteStore, docs_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("Keep me.", encoding="utf-8")
    ingest_paths(store, [docs_dir, other])
    assert store.roots() == sorted([str(docs_dir), str(other)])
    shutil.rmtree(docs_dir)

    summary = ingest_paths(store, [])
    assert summary.deleted == 4 and summary.unchanged == 1
    assert [Path(d.source_path).name for d in store.list_documents()] == ["keep.txt"]
    assert store.roots() == [str(other)]
    assert store.count_chunks() == 1 and store.check_consistency() == []


def test_single_file_path_sync(store: SQLiteStore, docs_dir: Path) -> None:
    f = docs_dir / "faq.txt"
    assert ingest_paths(store, [f]).added == 1
    assert ingest_paths(store, [f]).unchanged == 1
    f.unlink()
    summary = ingest_paths(store, [f])  # the file was ingested before, so it is deleted, not an error
    assert summary.deleted == 1 and store.count_documents() == 0


def test_failure_while_writing_keeps_previous_version(store: SQLiteStore, docs_dir: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed file whose processing fails after chunks were already written (several
    batches) is rolled back: the previous version stays, whole, and the run goes on."""
    ingest_paths(store, [docs_dir])
    before = snapshot(store)
    faq = docs_dir / "faq.txt"
    faq.write_text("New content. " * 5000, encoding="utf-8")
    (docs_dir / "extra.md").write_text("# Extra\n\nStill ingested.\n", encoding="utf-8")
    real = pipeline.chunk_document

    def failing(loaded, doc_id, config):
        n = 0
        for chunk in real(loaded, doc_id, config):
            yield chunk
            n += 1
            if doc_id == doc_id_for(str(faq)) and n > pipeline.CHUNK_BATCH + 10:
                raise OSError(5, "Input/output error")

    monkeypatch.setattr(pipeline, "chunk_document", failing)
    summary = ingest_paths(store, [docs_dir], settings=Settings(chunk_size=16))
    assert [s.path for s in summary.skipped] == [str(faq)]
    assert "previous version kept" in summary.skipped[0].reason
    assert summary.added == 1  # extra.md
    assert snapshot(store)[str(faq)] == before[str(faq)]
    assert store.check_consistency() == []


# ------------------------------------------------------------------------------ tags / acl

def test_tags_and_acl_stored_and_metadata_only_update(store: SQLiteStore, docs_dir: Path) -> None:
    ingest_paths(store, [docs_dir], tags=["t2", "t1", "t1"], acl=["g1"])
    for d in store.list_documents():
        assert d.tags == ["t1", "t2"] and d.acl == ["g1"]
    before = snapshot(store)
    assert ingest_paths(store, [docs_dir], tags=["t1", "t2"], acl=["g1"]).unchanged == 4

    summary = ingest_paths(store, [docs_dir], tags=["t3"], acl=["g1", "g2"])
    assert (summary.updated, summary.unchanged, summary.chunks_written) == (4, 0, 0)
    after = snapshot(store)
    for path, (doc, chunks) in after.items():
        assert doc["tags"] == ["t3"] and doc["acl"] == ["g1", "g2"]
        assert chunks == before[path][1], "content unchanged: chunks must not be rewritten"
        assert doc["chunker"] == before[path][0]["chunker"]
    assert store.check_consistency() == []


def test_changed_chunking_rechunks_unchanged_content(store: SQLiteStore, docs_dir: Path) -> None:
    ingest_paths(store, [docs_dir])
    summary = ingest_paths(store, [docs_dir], settings=Settings(chunk_size=16, chunk_strategy="fixed"))
    assert summary.updated == 4 and summary.chunks_written > 0
    assert all(":fixed:16:" in d.chunker for d in store.list_documents())
    assert all(c.token_count <= 16 for d in store.list_documents() for c in store.iter_chunks(d.doc_id))


def test_resync_without_flags_keeps_acl(store: SQLiteStore, docs_dir: Path) -> None:
    ingest_paths(store, [docs_dir], tags=["t1"], acl=["secret"])
    summary = ingest_paths(store, [])
    assert summary.unchanged == 4
    assert all(d.acl == ["secret"] for d in store.list_documents())
    # naming the folder again without flags keeps them too, and a new file inherits the root's
    (docs_dir / "new_note.txt").write_text("A brand new note about trams.", encoding="utf-8")
    summary = ingest_paths(store, [docs_dir])
    assert summary.added == 1 and summary.unchanged == 4
    assert all(d.acl == ["secret"] and d.tags == ["t1"] for d in store.list_documents())
    # an explicit empty list clears (the CLI's --acl "")
    ingest_paths(store, [docs_dir], acl=[])
    assert all(d.acl == [] and d.tags == ["t1"] for d in store.list_documents())


# -------------------------------------------------------------------------------- ids

def test_chunk_ids_are_stable(tmp_path: Path, docs_dir: Path) -> None:
    """Same path and content give the same doc and chunk ids, in any store."""
    ids = []
    for name in ("s1", "s2"):
        with SQLiteStore(tmp_path / name) as s:
            ingest_paths(s, [docs_dir])
            ids.append({d.doc_id: [c.chunk_id for c in s.iter_chunks(d.doc_id)] for d in s.list_documents()})
    assert ids[0] == ids[1]
    assert set(ids[0]) == {doc_id_for(str(p)) for p in docs_dir.rglob("*.*")}
    all_ids = [c for cs in ids[0].values() for c in cs]
    assert len(all_ids) == len(set(all_ids))


def test_appending_keeps_earlier_chunk_ids(store: SQLiteStore, tmp_path: Path) -> None:
    d = tmp_path / "grow"
    d.mkdir()
    paras = [f"Paragraph {i}: the tram runs from the harbour to the old market every day." for i in range(40)]
    f = d / "log.txt"
    f.write_text("\n\n".join(paras), encoding="utf-8")
    settings = Settings(chunk_size=64)
    ingest_paths(store, [d], settings=settings)
    doc_id = doc_id_for(str(f))
    old = [c.chunk_id for c in store.iter_chunks(doc_id)]
    f.write_text("\n\n".join(paras + ["Paragraph 40: a new line opened."]), encoding="utf-8")
    assert ingest_paths(store, [d], settings=settings).updated == 1
    new = [c.chunk_id for c in store.iter_chunks(doc_id)]
    assert len(old) > 5
    assert new[: len(old) - 1] == old[:-1]


# ---------------------------------------------------------------------------- offsets

NASTY_PIECES = ["The tram\u00a0network", "ﬁnance", "café", "cafe\u0301", "Ｆｕｌｌ　ｗｉｄｔｈ",
                "林登港\u200b茶叶。研究所！", "有轨电车；公交车？", "\t", "  ", "\r\n", "\r\n\r\n\r\n",
                "zero\u200bwidth", "\x07bell", "word", "words.", "™", "㎏", "½"]


def _nasty_text(seed: int, n: int) -> str:
    import random

    rnd = random.Random(seed)
    return "".join(rnd.choice(NASTY_PIECES) + rnd.choice([" ", "", "\r\n", "。", ". "]) for _ in range(n))


@pytest.mark.parametrize("chunk_size", [None, 32])
def test_chunk_offsets_point_at_the_source_span(store: SQLiteStore, tmp_path: Path, corpus_dir: Path,
                                                chunk_size: int | None) -> None:
    """For Markdown, text and code files the offsets index the decoded file itself, so
    normalising the source slice gives back exactly the chunk text (what a citation needs)."""
    d = tmp_path / "src"
    d.mkdir()
    for name in ("tram_network.md", "茶叶研究所.md", "faq.txt", "tram_fares.py"):
        shutil.copy(corpus_dir / name, d / name)
    (d / "nasty.txt").write_bytes(_nasty_text(1, 2500).encode("utf-8"))
    md = "# Title\r\n\r\n" + "\r\n\r\n## Section ﬁ\r\n\r\n".join(
        _nasty_text(2, 1200)[i:i + 900] for i in range(0, 9000, 900))
    (d / "nasty.md").write_bytes("\ufeff".encode() + md.encode("utf-8"))  # with a BOM
    # > 2 streaming windows (64 K characters each) of text
    (d / "big.txt").write_bytes(_nasty_text(3, 40000).encode("utf-8"))

    summary = ingest_paths(store, [d], settings=Settings(chunk_size=chunk_size))
    assert summary.added == 7 and summary.skipped == []
    checked = 0
    for doc in store.list_documents():
        source = Path(doc.source_path).read_bytes().decode("utf-8-sig")
        prev_start = prev_orig = -1
        for c in store.iter_chunks(doc.doc_id):
            assert 0 <= c.orig_start < c.orig_end <= len(source)
            span = source[c.orig_start:c.orig_end]
            assert normalize(span, keep_indentation=doc.doc_type == "code").text == c.text, (
                doc.source_path, c.seq)
            assert c.end - c.start == len(c.text)
            assert c.start > prev_start and c.orig_start > prev_orig  # in document order
            prev_start, prev_orig = c.start, c.orig_start
            checked += 1
    assert checked > (50 if chunk_size is None else 400)


def test_normalised_offsets_of_a_single_block_text(store: SQLiteStore, tmp_path: Path) -> None:
    f = tmp_path / "one.txt"
    f.write_text(_nasty_text(4, 600), encoding="utf-8", newline="")
    ingest_paths(store, [f], settings=Settings(chunk_size=32))
    norm = normalize(f.read_bytes().decode("utf-8")).text
    chunks = list(store.iter_chunks(doc_id_for(str(f))))
    assert len(chunks) > 5
    for c in chunks:
        assert norm[c.start:c.end] == c.text


# ------------------------------------------------------------------------------ docs CLI

def test_docs_list_show_delete_json(cli, store_dir: Path, docs_dir: Path) -> None:
    res = cli("ingest", docs_dir, "--store", store_dir, "--tags", "t1,t2", "--acl", "staff", "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["added"] == 4

    res = cli("docs", "list", "--store", store_dir, "--json")
    assert res.exit_code == 0
    docs = json.loads(res.stdout)
    assert sorted(Path(d["source_path"]).name for d in docs) == ["faq.txt", "fares.py", "lines.csv",
                                                                 "network.md"]
    assert all(d["tags"] == ["t1", "t2"] and d["acl"] == ["staff"] and d["chunk_count"] > 0 for d in docs)
    faq = next(d for d in docs if d["source_path"].endswith("faq.txt"))

    for ref in (faq["doc_id"], faq["doc_id"][:8], faq["source_path"]):
        res = cli("docs", "show", ref, "--store", store_dir, "--json")
        assert res.exit_code == 0, res.stderr
        shown = json.loads(res.stdout)
        assert shown["doc_id"] == faq["doc_id"]
        assert len(shown["chunks"]) == faq["chunk_count"]
        assert "Can I take a bike?" in shown["chunks"][0]["text"]
        assert {"chunk_id", "seq", "text", "start", "end", "heading_path", "page", "token_count"} <= set(
            shown["chunks"][0])

    res = cli("docs", "delete", faq["doc_id"], "--store", store_dir, "--json")
    assert res.exit_code == 0
    # the chunk count the human line shows
    assert json.loads(res.stdout) == {"deleted": faq["doc_id"], "source_path": faq["source_path"],
                                      "chunk_count": faq["chunk_count"]}
    res = cli("docs", "list", "--store", store_dir, "--json")
    assert faq["doc_id"] not in {d["doc_id"] for d in json.loads(res.stdout)}
    with SQLiteStore(store_dir) as s:
        assert chunk_count_raw(s, faq["doc_id"]) == 0
        assert s.check_consistency() == []
    res = cli("docs", "show", faq["doc_id"], "--store", store_dir)
    assert res.exit_code == 1 and res.stderr.startswith("error: no document matches")

    # the file still exists, so the next ingest adds it back
    res = cli("ingest", docs_dir, "--store", store_dir, "--tags", "t1,t2", "--acl", "staff", "--json")
    assert json.loads(res.stdout)["added"] == 1 and json.loads(res.stdout)["unchanged"] == 3


def test_docs_list_show_delete_text(cli, store_dir: Path, docs_dir: Path, monkeypatch) -> None:
    assert cli("ingest", docs_dir, "--store", store_dir).exit_code == 0
    with SQLiteStore(store_dir) as s:
        docs = s.list_documents()
        total = s.count_chunks()
    res = cli("docs", "list", "--store", store_dir)
    assert res.exit_code == 0
    for d in docs:
        assert d.doc_id in res.stdout and d.source_path in res.stdout
    assert f"{len(docs)} documents, {total} chunks" in res.stdout

    md = next(d for d in docs if d.source_path.endswith("network.md"))
    res = cli("docs", "show", md.doc_id[:10], "--store", store_dir)
    assert res.exit_code == 0
    assert "Tram Network" in res.stdout and f"({md.doc_type}, {md.chunk_count} chunks)" in res.stdout
    assert "Tram Network > Fares" in res.stdout  # heading paths are shown
    assert "A single ticket costs 1.80 euros." in res.stdout

    # relative source paths work too
    monkeypatch.chdir(md.source_path.rsplit("/", 1)[0])
    res = cli("docs", "delete", "network.md", "--store", store_dir)
    assert res.exit_code == 0
    assert f"deleted {md.doc_id}" in res.stdout and f"{md.chunk_count} chunks" in res.stdout
    with SQLiteStore(store_dir) as s:
        assert s.get_document(md.doc_id) is None and s.count_documents() == len(docs) - 1


def test_ingest_without_paths_via_cli_resyncs(cli, store_dir: Path, docs_dir: Path) -> None:
    assert cli("ingest", docs_dir, "--store", store_dir).exit_code == 0
    (docs_dir / "faq.txt").unlink()
    res = cli("ingest", "--store", store_dir, "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["deleted"], out["unchanged"]) == (1, 3)


def test_store_from_environment(cli, store_dir: Path, docs_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("COGRAG_STORE", str(store_dir))
    res = cli("ingest", docs_dir, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["added"] == 4
    assert (store_dir / "cograg.db").is_file()
    res = cli("docs", "list", "--json")
    assert len(json.loads(res.stdout)) == 4


def test_the_engine_ingests_one_path_given_alone_and_refuses_an_empty_one(tmp_path: Path) -> None:
    # a string is iterable: "docs" was read as the paths "d", "o", "c", "s"
    from cograg.config import Settings
    from cograg.engine import Engine
    from cograg.errors import IngestError

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("Trams run at night.\n", encoding="utf-8")
    with Engine.open(settings=Settings(store=tmp_path / "s", models={"embedder": "none"})) as engine:
        assert engine.ingest(str(folder)).added == 1
        assert engine.ingest(folder).unchanged == 1
        with pytest.raises(IngestError, match="no path given"):
            engine.ingest("")


def test_a_second_ingest_into_a_store_waits_for_the_first_and_finds_its_files_unchanged(tmp_path, docs_dir):
    # Two `cograg ingest` of one folder at once both reported the same files as added (12 of 9).
    import threading

    from cograg.engine import Engine
    from cograg.locks import directory_lock

    settings = Settings(store=tmp_path / "store")
    waited, reports = threading.Event(), {}
    with Engine.open(settings=settings) as first, Engine.open(settings=settings) as second:
        with directory_lock(first.store.directory):  # the first ingest, as another process holds it
            thread = threading.Thread(target=lambda: reports.update(second=second.ingest(docs_dir,
                                                                                         on_wait=waited.set)))
            thread.start()
            assert waited.wait(30)
            reports["first"] = ingest_paths(first.store, [docs_dir], settings=settings)
        thread.join(60)
    assert (reports["first"].added, reports["second"].added, reports["second"].unchanged) == (4, 0, 4)
