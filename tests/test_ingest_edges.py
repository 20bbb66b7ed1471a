"""Ingest edge cases (SPEC A1): input that used to end the whole run, escape the given folder or
grow the store quadratically is now skipped with a reason, walked, or bounded."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cograg.config import Settings
from cograg.documents import Chunk
from cograg.index.indexing import index_text
from cograg.index.sqlite_store import SQLiteStore
from cograg.ingest import files, loaders
from cograg.ingest.files import FileInfo
from cograg.ingest.loaders import markdown_sections
from cograg.ingest.models import Block, IngestSummary, LoadedDocument
from cograg.ingest.pipeline import ingest_paths

pytestmark = pytest.mark.usefixtures("ingest_env")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    (d / "good.txt").write_text("An ordinary text file about harbour trams.\n", encoding="utf-8")
    return d


def run(store: SQLiteStore, *paths: Path) -> IngestSummary:
    summary = ingest_paths(store, list(paths), settings=Settings())
    assert store.check_consistency() == []
    return summary


def names(store: SQLiteStore) -> set[str]:
    return {Path(d.source_path).name for d in store.list_documents()}


def reasons(summary: IngestSummary) -> dict[str, str]:
    return {Path(s.path).name: s.reason for s in summary.skipped}


# ------------------------------------------------------------------------ CR line endings

def test_markdown_with_cr_only_line_endings_is_sectioned(store: SQLiteStore, folder: Path) -> None:
    (folder / "mac.md").write_bytes(b"# A\rbody a\r# B\rbody b\r")
    summary = run(store, folder)
    assert summary.skipped == [] and names(store) == {"good.txt", "mac.md"}
    doc = store.get_document_by_path(str(folder / "mac.md"))
    assert doc is not None and doc.title == "A"
    assert [c.heading_path for c in store.iter_chunks(doc.doc_id)] == [["A"], ["B"]]


@pytest.mark.parametrize("eol", ["\r", "\r\n", "\n"])
def test_markdown_section_offsets_follow_every_line_ending(eol: str) -> None:
    text = eol.join(["---", "title: T", "---", "intro", "# A", "body a", "## B", "body b", ""])
    title, blocks = markdown_sections(text)
    assert title == "T"
    starts = {b.heading_path: text[b.orig_start:] for b in blocks}
    assert starts[("A",)].startswith("# A" + eol + "body a")
    assert starts[("A", "B")].startswith("## B" + eol + "body b")


def test_a_loader_crash_skips_only_that_file(store: SQLiteStore, folder: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(info: FileInfo) -> LoadedDocument:
        raise IndexError("list index out of range")

    def broken_stream(info: FileInfo) -> LoadedDocument:
        def blocks() -> Iterator[Block]:
            yield Block(text="first part", orig_start=0)
            raise KeyError("surprise")

        return LoadedDocument("text", "t", blocks())

    monkeypatch.setitem(loaders.LOADERS, "markdown", broken)
    monkeypatch.setitem(loaders.LOADERS, "csv", broken_stream)
    (folder / "a.md").write_text("# A\nbody\n", encoding="utf-8")
    (folder / "b.csv").write_text("x,y\n1,2\n", encoding="utf-8")
    (folder / "z.txt").write_text("after the broken files\n", encoding="utf-8")
    summary = run(store, folder)
    assert names(store) == {"good.txt", "z.txt"}
    assert reasons(summary) == {"a.md": "IndexError: list index out of range", "b.csv": "KeyError: 'surprise'"}


# ------------------------------------------------------------------------ deep folders

DEPTH = 1500  # deeper than Python's recursion limit


@pytest.fixture
def deep(folder: Path) -> Iterator[Path]:
    """`folder`/d/d/.../d, DEPTH levels, removed again without recursion: pytest's own cleanup of
    old temporary folders (shutil.rmtree) would hit the recursion limit on it."""
    fd = os.open(folder, os.O_RDONLY)
    made = 0
    try:
        for _ in range(DEPTH):
            os.mkdir("d", dir_fd=fd)
            fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
            os.close(old)
            made += 1
        os.close(os.open("leaf.md", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
        yield folder
    finally:
        _remove_chain(fd, made)


def _remove_chain(fd: int, depth: int) -> None:
    """Empty the innermost folder, then climb up removing one `d` per level."""
    for name in os.listdir(fd):
        os.unlink(name, dir_fd=fd)
    for _ in range(depth):
        fd, old = os.open("..", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
        os.rmdir("d", dir_fd=fd)
    os.close(fd)


def test_walk_survives_deep_nesting(deep: Path) -> None:
    found = [(p.name, why) for p, why in files.walk_files(deep)]
    assert found == [("leaf.md", None), ("good.txt", None)]  # sorted: d/... before good.txt


def test_walk_order_and_loop_skip_unchanged(folder: Path) -> None:
    for rel in ["b/y.md", "b/c/z.md", "a.md", "c.md", ".hidden/h.md"]:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text("x\n", encoding="utf-8")
    os.symlink("..", folder / "b" / "up")
    found = [(str(p.relative_to(folder)), why) for p, why in files.walk_files(folder)]
    assert found == [("a.md", None), ("b/c/z.md", None), ("b/up", "symlink loop (directory already visited)"),
                     ("b/y.md", None), ("c.md", None), ("good.txt", None)]


# ------------------------------------------------------------------------ symlinks

def test_symlinks_leading_outside_the_root_are_skipped(store: SQLiteStore, folder: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("SECRET outside data\n", encoding="utf-8")
    os.symlink(outside / "secret.md", folder / "secret.md")
    os.symlink(outside, folder / "outlink")
    os.symlink("../outside/secret.md", folder / "relative.md")
    summary = run(store, folder)
    why = f"symlink leads outside {folder}"
    assert reasons(summary) == {"secret.md": why, "outlink": why, "relative.md": why}
    assert names(store) == {"good.txt"}
    assert store.keyword_search("SECRET", 5) == []


def test_symlinks_inside_the_root_are_followed(store: SQLiteStore, folder: Path, tmp_path: Path) -> None:
    (folder / ".shared").mkdir()  # hidden, so reached only through the link
    (folder / ".shared" / "doc.md").write_text("# Doc\nshared text\n", encoding="utf-8")
    os.symlink(".shared", folder / "alias")
    os.symlink(".shared/doc.md", folder / "link.md")
    via = tmp_path / "via"
    os.symlink(folder, via)  # the root itself given through a symlink
    summary = run(store, via)
    assert summary.skipped == []
    assert {Path(d.source_path).relative_to(via).as_posix() for d in store.list_documents()} == {
        "alias/doc.md", "good.txt", "link.md"}


# ------------------------------------------------------------------------ long headings

LONG = 40_000


def test_long_heading_is_prefixed_boundedly(store: SQLiteStore, folder: Path) -> None:
    (folder / "long.md").write_text("# " + "T" * LONG + "\nbody text\n", encoding="utf-8")
    assert run(store, folder).skipped == []
    doc = store.get_document_by_path(str(folder / "long.md"))
    assert doc is not None and len(doc.title) <= 200
    chunks = list(store.iter_chunks(doc.doc_id))
    assert len(chunks) > 10
    assert sum(c.text.count("T") for c in chunks) >= LONG  # the heading's text is kept, once
    for c in chunks:
        assert all(len(h) <= 200 for h in c.heading_path)
        assert len(index_text(c, doc.title)) <= len(c.text) + 401


def test_long_record_title_is_prefixed_boundedly(store: SQLiteStore, folder: Path) -> None:
    record = {"title": "T" * LONG, "text": "word " * 20_000}
    (folder / "r.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert run(store, folder).skipped == []
    doc = store.get_document_by_path(str(folder / "r.jsonl"))
    assert doc is not None
    for c in store.iter_chunks(doc.doc_id):
        assert all(len(h) <= 200 for h in c.heading_path)
        assert len(str(c.metadata.get("title", ""))) <= 200
        assert len(index_text(c, doc.title)) <= len(c.text) + 401


def _chunk(text: str, heading_path: list[str]) -> Chunk:
    return Chunk(chunk_id="c", doc_id="d", seq=0, text=text, start=0, end=len(text), orig_start=0,
                 orig_end=len(text), heading_path=heading_path, token_count=1)


def test_index_text_prefix_unchanged_for_ordinary_titles() -> None:
    assert index_text(_chunk("body", ["Tram", "History"]), "Tram") == "Tram › History\nbody"
    assert index_text(_chunk("body", []), "") == "body"
    head = index_text(_chunk("body", ["H" * 1000, "I" * 1000, "J" * 1000]), "T" * 1000).split("\n")[0]
    assert len(head) <= 400 and head.startswith("T" * 199 + "…")
