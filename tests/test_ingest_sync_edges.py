"""Re-sync edge cases (SPEC A1, A4, F2): a source that cannot be checked is kept and reported, never
aborting the run; a source that is no longer a file (broken symlink, folder, FIFO) is deleted; a
document reached from another nested root is unchanged, not updated."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cograg.errors import LoaderError
from cograg.index.sqlite_store import SQLiteStore
from cograg.ingest import pipeline
from cograg.ingest.pipeline import ingest_paths

pytestmark = pytest.mark.usefixtures("ingest_env")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def sources(store: SQLiteStore) -> list[str]:
    return [d.source_path for d in store.list_documents()]


def reasons(summary: object) -> dict[str, str]:
    return {s.path: s.reason for s in summary.skipped}  # type: ignore[attr-defined]


def block(monkeypatch: pytest.MonkeyPatch, blocked: Path) -> None:
    """Act as if `blocked` (a folder or file) and all below it had lost read permission: the test
    runs as root, where chmod 000 does not bite. Only paths under `blocked` are affected."""
    real_stat, real_scandir = os.stat, os.scandir
    top = str(blocked)

    def hit(path: object) -> bool:
        p = os.fspath(path) if isinstance(path, (str, os.PathLike)) else ""
        return isinstance(p, str) and (p == top or p.startswith(top + os.sep))

    def fake_stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if hit(path):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))  # type: ignore[arg-type]
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    def fake_scandir(path: object = ".") -> object:
        if hit(path):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))  # type: ignore[arg-type]
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", fake_stat)
    monkeypatch.setattr(os, "scandir", fake_scandir)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    c = tmp_path / "corpus"
    write(c / "top.md", "alpha document about llamas\n")
    write(c / "sub" / "inner.md", "beta document about penguins\n")
    return c


# ---------------------------------------------------------------- defect 1: permission on re-sync
def test_unreadable_subfolder_on_resync_keeps_its_documents(store: SQLiteStore, corpus: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert ingest_paths(store, [corpus]).added == 2
    inner = str(corpus / "sub" / "inner.md")
    block(monkeypatch, corpus / "sub")
    summary = ingest_paths(store, [corpus])  # used to raise PermissionError from the deletion check
    assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (0, 0, 1, 0)
    assert reasons(summary)[inner] == "cannot be read now: permission denied; the stored version is kept"
    assert inner in sources(store)
    assert store.roots() == [str(corpus)]
    monkeypatch.undo()
    again = ingest_paths(store, [corpus])  # readable again: nothing changed, nothing lost
    assert (again.added, again.updated, again.unchanged, again.deleted, again.skipped) == (0, 0, 2, 0, [])


def test_unreadable_recorded_root_is_skipped_not_a_crash(store: SQLiteStore, corpus: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ingest_paths(store, [corpus])
    block(monkeypatch, corpus)
    summary = ingest_paths(store, [])  # re-sync of recorded roots
    assert summary.deleted == 0
    assert reasons(summary)[str(corpus)].startswith("cannot be read now: permission denied")
    assert len(sources(store)) == 2 and store.roots() == [str(corpus)]


# ---------------------------------------------------------------- defect 2: no ghost knowledge
def test_broken_symlink_document_is_deleted(store: SQLiteStore, corpus: Path) -> None:
    target = write(corpus / "t" / "target.md", "zebra facts: zebras are striped\n")
    (corpus / "link.md").symlink_to(target)
    first = ingest_paths(store, [corpus])
    assert str(corpus / "link.md") in sources(store) and first.skipped == []
    target.unlink()
    summary = ingest_paths(store, [corpus])
    # the target's and the link's documents: both sources are gone
    assert (summary.deleted, summary.skipped) == (2, [])
    assert sources(store) == sorted([str(corpus / "top.md"), str(corpus / "sub" / "inner.md")])


def test_broken_symlink_named_as_root_is_deleted(store: SQLiteStore, tmp_path: Path) -> None:
    target = write(tmp_path / "elsewhere" / "t.md", "okapi facts\n")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    assert ingest_paths(store, [link]).added == 1
    target.unlink()
    summary = ingest_paths(store, [link])
    assert (summary.deleted, summary.skipped) == (1, [])
    assert sources(store) == []


def test_file_replaced_by_folder_is_deleted(store: SQLiteStore, corpus: Path) -> None:
    ingest_paths(store, [corpus])
    (corpus / "top.md").unlink()
    (corpus / "top.md").mkdir()
    summary = ingest_paths(store, [corpus])
    assert (summary.deleted, summary.unchanged, summary.skipped) == (1, 1, [])
    assert sources(store) == [str(corpus / "sub" / "inner.md")]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_file_replaced_by_fifo_is_deleted(store: SQLiteStore, corpus: Path) -> None:
    ingest_paths(store, [corpus])
    (corpus / "top.md").unlink()
    os.mkfifo(corpus / "top.md")
    summary = ingest_paths(store, [corpus])
    assert (summary.deleted, summary.unchanged, summary.skipped) == (1, 1, [])
    assert str(corpus / "top.md") not in sources(store)


def test_read_failure_of_a_regular_file_keeps_the_stored_version(store: SQLiteStore, corpus: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A still-regular file that fails to read may be failing transiently: kept, not deleted."""
    ingest_paths(store, [corpus])
    top = corpus / "top.md"
    real: Callable[..., object] = pipeline.files.inspect_file

    def flaky(path: Path, max_bytes: int, **limits: float) -> object:
        if path == top:
            raise LoaderError("cannot read file: Input/output error")
        return real(path, max_bytes, **limits)

    monkeypatch.setattr(pipeline.files, "inspect_file", flaky)
    summary = ingest_paths(store, [corpus])
    assert summary.deleted == 0
    assert reasons(summary)[str(top)] == "cannot read file: Input/output error; previous version kept"
    assert str(top) in sources(store)


def test_progress_reports_a_deleted_outcome(store: SQLiteStore, tmp_path: Path) -> None:
    target = write(tmp_path / "elsewhere" / "t.md", "okapi facts\n")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    ingest_paths(store, [link])
    target.unlink()
    events: list[str] = []
    ingest_paths(store, [link], progress=lambda e: events.append(e.outcome))
    assert events == ["deleted"]


# ---------------------------------------------------------------- defect 3: nested roots
def test_alternating_nested_roots_report_no_updates(store: SQLiteStore, tmp_path: Path) -> None:
    c = tmp_path / "c"
    write(c / "a.md", "a\n")
    write(c / "sub" / "s.md", "s\n")
    assert ingest_paths(store, [c]).added == 2
    for path, unchanged in [(c / "sub", 1), (c, 2), (c / "sub", 1), (c, 2)]:
        summary = ingest_paths(store, [path])
        assert (summary.added, summary.updated, summary.unchanged, summary.deleted) == (0, 0, unchanged, 0)
        # the root it was last synced under is recorded all the same
        assert store.get_document_by_path(str(c / "sub" / "s.md")).root == str(path)  # type: ignore[union-attr]
    assert store.roots() == [str(c), str(c / "sub")]


def test_deletion_under_nested_roots_still_works(store: SQLiteStore, tmp_path: Path) -> None:
    c = tmp_path / "c"
    write(c / "a.md", "a\n")
    write(c / "sub" / "s.md", "s\n")
    write(c / "sub" / "t.md", "t\n")
    ingest_paths(store, [c])
    ingest_paths(store, [c / "sub"])  # the nested documents now have root c/sub
    (c / "sub" / "s.md").unlink()
    summary = ingest_paths(store, [c])  # the outer root's sync deletes them too
    assert (summary.deleted, summary.updated, summary.unchanged) == (1, 0, 2)
    (c / "sub" / "t.md").unlink()
    (c / "sub").rmdir()
    summary = ingest_paths(store, [])  # re-sync of both recorded roots; c/sub has vanished
    assert (summary.deleted, summary.updated) == (1, 0)
    assert sources(store) == [str(c / "a.md")]
    assert store.roots() == [str(c)]
