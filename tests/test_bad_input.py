"""Bad input (SPEC A1/A4): every kind of unusable file is skipped (or loaded with a warning) with
a reason, the rest of the folder is still ingested, and the store stays consistent."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cograg.config import Settings
from cograg.index.sqlite_store import SQLiteStore
from cograg.ingest import files
from cograg.ingest.models import IngestSummary
from cograg.ingest.pipeline import doc_id_for, ingest_paths

pytestmark = pytest.mark.usefixtures("ingest_env")

GOOD = {
    "good.txt": "A perfectly ordinary text file about the harbour trams.\n",
    "good.md": "# Good\n\nA perfectly ordinary Markdown file.\n",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    for name, text in GOOD.items():
        (d / name).write_text(text, encoding="utf-8")
    return d


def run(store: SQLiteStore, folder: Path, **settings) -> IngestSummary:
    summary = ingest_paths(store, [folder], settings=Settings(**settings))
    # the good files are always ingested and the store is always consistent
    names = {Path(d.source_path).name for d in store.list_documents()}
    assert set(GOOD) <= names
    assert store.check_consistency() == []
    return summary


def reasons(summary: IngestSummary) -> dict[str, str]:
    return {Path(s.path).name: s.reason for s in summary.skipped}


def test_binary_file_with_text_extension(store: SQLiteStore, folder: Path) -> None:
    (folder / "binary.txt").write_bytes(b"ELF\x00\x01\x02\x03" + bytes(range(256)) * 8)
    summary = run(store, folder)
    assert summary.added == 2
    assert "binary" in reasons(summary)["binary.txt"]
    assert store.get_document_by_path(str(folder / "binary.txt")) is None


def test_invalid_utf8_is_skipped(store: SQLiteStore, folder: Path) -> None:
    (folder / "latin.txt").write_bytes(b"caf\xe9 cr\xe8me \xff\xfa\x80 more text \x81\x82\n")
    summary = run(store, folder)
    assert summary.added == 2
    reason = reasons(summary)["latin.txt"]
    assert reason == "invalid UTF-8 (first bad byte at offset 3), and not GB18030 or Windows-1252 (Latin-1) text either"
    assert store.get_document_by_path(str(folder / "latin.txt")) is None


def test_gb18030_chinese_is_loaded_with_a_warning(store: SQLiteStore, folder: Path) -> None:
    text = "林登港茶叶研究所成立于一九五二年。\n\n它位于城市北部，占地约三十公顷。\n"
    (folder / "gb.txt").write_bytes(text.encode("gb18030"))
    summary = run(store, folder)
    assert summary.added == 3 and summary.skipped == []
    assert [(Path(w.path).name, "gb18030" in w.reason) for w in summary.warnings] == [("gb.txt", True)]
    doc = store.get_document_by_path(str(folder / "gb.txt"))
    assert doc.metadata["encoding"] == "gb18030"
    chunks = list(store.iter_chunks(doc.doc_id))
    joined = "".join(c.text for c in chunks)
    assert "林登港茶叶研究所成立于一九五二年。" in joined and "占地约三十公顷。" in joined


@pytest.mark.parametrize(("raw", "text"), [
    (b"The caf\xe9 serves cr\xe8me br\xfbl\xe9e on the quay.\n", "The café serves crème brûlée on the quay."),
    # every accented letter followed by a letter: valid GB18030 too ("M黮ler"), but not Chinese text
    (b"M\xfcller walked the Stra\xdfe, na\xefvely.\n", "Müller walked the Straße, naïvely."),
    # Windows-1252's typography (NFKC makes the ellipsis "...")
    (b"\x93Trams\x94 run every 10 minutes \x96 day and night \x85\n",
     "“Trams” run every 10 minutes – day and night ..."),
])
def test_a_latin1_or_windows1252_file_is_loaded_with_a_warning(store: SQLiteStore, folder: Path, raw: bytes,
                                                               text: str) -> None:
    (folder / "west.txt").write_bytes(raw)
    summary = run(store, folder)
    assert summary.added == 3 and summary.skipped == []
    assert [(Path(w.path).name, w.reason.endswith("decoded as cp1252")) for w in summary.warnings] == [
        ("west.txt", True)]
    doc = store.get_document_by_path(str(folder / "west.txt"))
    assert doc.metadata["encoding"] == "cp1252"
    assert text in "".join(c.text for c in store.iter_chunks(doc.doc_id))


def test_utf8_bom_and_utf16_are_read(store: SQLiteStore, folder: Path) -> None:
    (folder / "bom.txt").write_bytes("\ufeffBOM text about ferries.".encode())
    (folder / "u16.txt").write_bytes("UTF-16 text about buses. 电车".encode("utf-16"))
    summary = run(store, folder)
    assert summary.added == 4 and summary.skipped == []
    bom = list(store.iter_chunks(doc_id_for(str(folder / "bom.txt"))))
    assert [c.text for c in bom] == ["BOM text about ferries."]
    u16 = list(store.iter_chunks(doc_id_for(str(folder / "u16.txt"))))
    assert [c.text for c in u16] == ["UTF-16 text about buses. 电车"]


@pytest.mark.parametrize(("name", "content"), [
    ("empty.txt", b""),
    ("blank.md", b" \n\n\t \r\n"),
    ("controls.txt", b"\x01\x02\x03\x7f"),
])
def test_empty_or_blank_file(store: SQLiteStore, folder: Path, name: str, content: bytes) -> None:
    (folder / name).write_bytes(content)
    summary = run(store, folder)
    assert summary.added == 2
    reason = reasons(summary)[name]
    assert reason == "empty file" if not content else "no text content" in reason
    assert store.get_document_by_path(str(folder / name)) is None


def test_corrupt_pdf(store: SQLiteStore, folder: Path, make_pdf, caplog: pytest.LogCaptureFixture) -> None:
    good = make_pdf(folder / "real.pdf", ["A real page about the tram depot."]).read_bytes()
    (folder / "half.pdf").write_bytes(good[: len(good) // 2])
    (folder / "fake.pdf").write_bytes(b"<html>not a pdf</html>")
    (folder / "cut.pdf").write_bytes(b"%PDF-1.4\ngarbage")
    summary = run(store, folder)
    assert summary.added == 3  # the two good files and real.pdf
    r = reasons(summary)
    assert set(r) == {"half.pdf", "fake.pdf", "cut.pdf"}
    assert all(v.startswith("corrupt PDF") for v in r.values())
    # the skip says it; the PDF library's own repair notes ("EOF marker not found"), which logging
    # would print on stderr, are not let through
    assert not [rec for rec in caplog.records if rec.name.startswith("pypdf")]


def test_a_store_inside_the_ingested_folder_is_not_read_as_documents(tmp_path: Path, folder: Path) -> None:
    with SQLiteStore(folder / "store") as inside:
        (folder / "store" / "corpus_policy.yaml").write_text("deny_tags: [secret]\n", encoding="utf-8")
        summary = run(inside, folder)
        assert summary.added == 2 and summary.skipped == []  # not cograg.db, its -wal, nor the policy
        assert {Path(d.source_path).name for d in inside.list_documents()} == set(GOOD)
        uploads = folder / "store" / "uploads"
        uploads.mkdir()
        (uploads / "up.txt").write_text("An uploaded note about the night ferry.\n", encoding="utf-8")
        assert ingest_paths(inside, [uploads], settings=Settings()).added == 1  # a root in the store is walked


def test_unreadable_file(store: SQLiteStore, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """We run as root, so chmod 000 does not stop reads: simulate EACCES at open()."""
    secret = folder / "secret.txt"
    secret.write_text("Top secret tram timetable.", encoding="utf-8")
    os.chmod(secret, 0)
    real_open = files.open_binary

    def guarded(path: Path):
        if Path(path) == secret:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path)

    monkeypatch.setattr(files, "open_binary", guarded)
    summary = run(store, folder)
    assert summary.added == 2
    assert reasons(summary) == {"secret.txt": "permission denied (unreadable file)"}


def test_unreadable_changed_file_keeps_previous_version(store: SQLiteStore, folder: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    run(store, folder)
    target = folder / "good.txt"
    before = [c.chunk_id for c in store.iter_chunks(doc_id_for(str(target)))]
    target.write_text("Changed but unreadable now.", encoding="utf-8")
    real_open = files.open_binary

    def guarded(path: Path):
        if Path(path) == target:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path)

    monkeypatch.setattr(files, "open_binary", guarded)
    summary = run(store, folder)
    assert reasons(summary)["good.txt"] == "permission denied (unreadable file); previous version kept"
    assert summary.deleted == 0
    assert [c.chunk_id for c in store.iter_chunks(doc_id_for(str(target)))] == before


def test_fifo_is_not_a_regular_file(store: SQLiteStore, folder: Path) -> None:
    os.mkfifo(folder / "pipe.txt")  # opening it would block forever: it must never be opened
    started = time.monotonic()
    summary = run(store, folder)
    assert time.monotonic() - started < 30
    assert reasons(summary) == {"pipe.txt": "not a regular file"}


def test_directory_symlink_loop(store: SQLiteStore, folder: Path) -> None:
    sub = folder / "sub"
    sub.mkdir()
    (sub / "inner.txt").write_text("Inside the sub folder.", encoding="utf-8")
    os.symlink("..", sub / "up")  # sub/up -> folder: a cycle
    summary = run(store, folder)
    assert summary.added == 3  # good.txt, good.md, sub/inner.txt — each once
    assert store.count_documents() == 3
    r = reasons(summary)
    assert r == {"up": "symlink loop (directory already visited)"}


def test_file_symlink_loops(store: SQLiteStore, folder: Path) -> None:
    os.symlink("self.txt", folder / "self.txt")
    os.symlink("b.md", folder / "a.md")
    os.symlink("a.md", folder / "b.md")
    summary = run(store, folder)
    assert summary.added == 2
    assert reasons(summary) == {"self.txt": "symlink loop", "a.md": "symlink loop", "b.md": "symlink loop"}


def test_broken_symlink(store: SQLiteStore, folder: Path) -> None:
    os.symlink("missing.txt", folder / "dangling.txt")
    summary = run(store, folder)
    assert reasons(summary) == {"dangling.txt": "file vanished or is a broken symlink"}


def test_unsupported_extension(store: SQLiteStore, folder: Path) -> None:
    (folder / "data.xyz").write_text("some data", encoding="utf-8")
    (folder / "noext").write_text("no extension", encoding="utf-8")
    (folder / "README").write_text("A readme without extension is text.", encoding="utf-8")
    summary = run(store, folder)
    assert summary.added == 3  # README counts as text
    assert reasons(summary) == {"data.xyz": "unsupported file type '.xyz'",
                                "noext": "unsupported file type '(no extension)'"}


def test_file_over_max_size(store: SQLiteStore, folder: Path) -> None:
    (folder / "big.txt").write_bytes(b"word " * 300_000)  # 1.5 MB
    summary = run(store, folder, max_file_mb=1)
    assert summary.added == 2
    assert reasons(summary)["big.txt"].startswith("file too large (1.5 MB > limit 1.0 MB)")


def test_a_file_name_that_is_not_utf8_is_skipped_and_the_rest_ingested(store: SQLiteStore, folder: Path) -> None:
    # a name copied from a Latin-1 system: Python holds its byte as a lone surrogate, which the
    # store (and JSON) cannot take; the ingest used to stop on it, the good files with it
    bad = folder / os.fsdecode(b"caf\xe9.txt")
    bad.write_text("A file about the cafe on the quay.\n", encoding="utf-8")
    summary = run(store, folder)
    assert summary.added == 2
    [skip] = summary.skipped
    assert skip.path == str(folder / "caf\ufffd.txt")
    assert skip.reason == "file name is not valid UTF-8 (rename the file to ingest it)"
    json.loads(summary.model_dump_json())  # the summary prints as JSON
    # the folder still re-syncs: a file added later is ingested, the bad name skipped again
    (folder / "later.txt").write_text("Added after the first run.\n", encoding="utf-8")
    again = ingest_paths(store, [], settings=Settings())
    assert (again.added, again.unchanged, [s.path for s in again.skipped]) == (1, 2, [skip.path])


def test_all_bad_inputs_together_via_cli(cli, store_dir: Path, folder: Path, make_pdf) -> None:
    (folder / "binary.txt").write_bytes(b"\x00\x01\x02" * 100)
    (folder / "latin.txt").write_bytes(b"caf\xe9 \xff\xfa\x80\n")
    (folder / "gb.txt").write_bytes("林登港茶叶研究所。".encode("gb18030"))
    (folder / "empty.txt").write_bytes(b"")
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.4\ngarbage")
    os.mkfifo(folder / "fifo.txt")
    os.symlink(".", folder / "loop")
    os.symlink("self.txt", folder / "self.txt")
    (folder / "data.xyz").write_text("x", encoding="utf-8")
    (folder / "big.txt").write_bytes(b"word " * 300_000)

    res = cli("ingest", folder, "--store", store_dir, "--json", "--max-file-mb", "1")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    skipped = {Path(s["path"]).name: s["reason"] for s in out["skipped"]}
    assert set(skipped) == {"binary.txt", "latin.txt", "empty.txt", "corrupt.pdf", "fifo.txt", "loop",
                            "self.txt", "data.xyz", "big.txt"}
    assert all(reason for reason in skipped.values())
    assert [Path(w["path"]).name for w in out["warnings"]] == ["gb.txt"]
    assert out["added"] == 3
    with SQLiteStore(store_dir) as s:
        assert s.check_consistency() == []
        assert out["chunks"] == s.count_chunks()
    # a second run is idempotent: same skips, nothing added or changed
    res = cli("ingest", folder, "--store", store_dir, "--json", "--max-file-mb", "1")
    out2 = json.loads(res.stdout)
    assert (out2["added"], out2["updated"], out2["unchanged"], out2["deleted"]) == (0, 0, 3, 0)
    assert out2["skipped"] == out["skipped"]


# ------------------------------------------------------------------------------ 50 MB file

def _write_big_text(path: Path, target_bytes: int) -> int:
    """Paragraphs of exactly 481 tokens (60 words of 48 letters = 8 tokens each, plus '.'),
    separated by blank lines; returns the number of paragraphs. Long words keep the token
    count (and the run time) low while the file is large."""
    import random

    rnd = random.Random(0)
    vocab = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(48)) for _ in range(64)]
    paras = [" ".join(rnd.choice(vocab) for _ in range(60)) + ".\n\n" for _ in range(32)]
    n = size = 0
    with open(path, "w", encoding="ascii") as fh:
        while size < target_bytes:
            p = paras[n % len(paras)]
            fh.write(p)
            size += len(p)
            n += 1
    return n


# Runs the command in a small intermediate Python process and reports the command's own peak
# RSS from wait4(). Measuring from the (big) pytest process would not work: a child's ru_maxrss
# starts from the RSS of the process it was forked from.
_MEASURE = """
import json, os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as fh:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "maxrss_kb": usage.ru_maxrss}, fh)
"""


def _peak_rss_kb(cmd: list[str], env: dict[str, str], tmp: Path) -> tuple[int, int, str, str]:
    """Run `cmd`; return (exit code, peak RSS in KiB of exactly that process, stdout, stderr)."""
    report = tmp / "rusage.json"
    res = subprocess.run([sys.executable, "-c", _MEASURE, str(report), *cmd], capture_output=True,
                         text=True, env=env, timeout=240)
    data = json.loads(report.read_text())
    return data["rc"], data["maxrss_kb"], res.stdout, res.stderr


@pytest.mark.timeout(300)
def test_50mb_text_file_streams_in_bounded_memory(tmp_path: Path, cograg_cmd, cograg_env) -> None:
    from cograg.ingest.tokens import count_tokens

    big = tmp_path / "big" / "huge.txt"
    big.parent.mkdir()
    paragraphs = _write_big_text(big, 50 * 2**20)
    size = big.stat().st_size
    assert size >= 50 * 2**20
    with open(big, encoding="ascii") as fh:
        first = fh.read(4000).split("\n\n")[0]
    assert count_tokens(first) == 481
    args = ["--chunk-size", "800", "--chunk-overlap", "0", "--json"]

    tiny = tmp_path / "tiny" / "tiny.txt"
    tiny.parent.mkdir()
    tiny.write_text(first + "\n", encoding="ascii")
    rc, baseline_kb, out, err = _peak_rss_kb(
        [*cograg_cmd, "ingest", str(tiny), "--store", str(tmp_path / "s0"), *args], cograg_env, tmp_path)
    assert rc == 0, err

    rc, peak_kb, out, err = _peak_rss_kb(
        [*cograg_cmd, "ingest", str(big), "--store", str(tmp_path / "s1"), *args], cograg_env, tmp_path)
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["added"] == 1 and summary["skipped"] == []
    # one chunk per paragraph: windows are cut between paragraphs, never inside one
    assert summary["chunks"] == paragraphs

    peak_mb, extra_mb = peak_kb / 1024, (peak_kb - baseline_kb) / 1024
    print(f"peak RSS {peak_mb:.0f} MB, {extra_mb:.0f} MB above the small-file baseline")
    assert peak_mb < 250, f"peak RSS {peak_mb:.0f} MB"
    # holding the file in memory would cost at least its size (50 MB) on top of the baseline
    assert extra_mb < 0.6 * size / 2**20, f"{extra_mb:.0f} MB above the {baseline_kb / 1024:.0f} MB baseline"

    with SQLiteStore(tmp_path / "s1") as s:
        (doc,) = s.list_documents()
        assert doc.chunk_count == paragraphs and doc.size_bytes == size
        assert s.check_consistency() == []
        tokens = s.conn.execute("SELECT min(token_count), max(token_count) FROM chunks").fetchone()
        assert tuple(tokens) == (481, 481)
        last = s.conn.execute("SELECT orig_end FROM chunks ORDER BY seq DESC LIMIT 1").fetchone()[0]
        assert last == size - 2  # offsets run through the whole file (minus the final blank line)
