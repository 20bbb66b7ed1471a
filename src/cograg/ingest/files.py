"""Files for the loaders (SPEC A1): which files a folder holds, what format each is, its size, hash
and text encoding, and its text read whole or streamed in bounded windows.

A file that cannot be used raises :class:`LoaderError` with a human-readable reason; the ingest run
records that as a skip and carries on.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cograg.errors import LoaderError
from cograg.text import is_utf8, readable

READ_CHUNK = 1 << 20  # bytes per read when streaming
TEXT_WINDOW = 64 * 1024  # characters per streamed text block
BINARY_SNIFF = 8192

EXTENSIONS: dict[str, str] = {
    ".md": "markdown", ".markdown": "markdown", ".mdx": "markdown",
    ".txt": "text", ".text": "text", ".rst": "text", ".log": "text",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".pdf": "pdf",
    ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "csv",
    ".py": "code", ".js": "code", ".mjs": "code", ".cjs": "code", ".go": "code",
    ".ts": "code", ".java": "code", ".c": "code", ".h": "code", ".cpp": "code", ".hpp": "code",
    ".cc": "code", ".rs": "code", ".rb": "code", ".sh": "code", ".sql": "code", ".kt": "code",
}
CODE_LANGUAGE = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
                 ".go": "go"}
TEXT_NAMES = {"readme", "license", "licence", "changelog", "authors", "notice", "copying"}
DOC_TYPE_OF_FORMAT = {"json": "records", "jsonl": "records", "csv": "records"}


@dataclass
class FileInfo:
    path: Path
    size: int
    sha256: str
    mtime: float
    fmt: str  # key into LOADERS
    encoding: str | None  # for text formats
    warnings: list[str]
    max_code_mb: float = 2.0  # the code loader's limit (Settings.max_code_mb), carried with the file


def detect_format(path: Path) -> str | None:
    ext = path.suffix.lower()
    if ext in EXTENSIONS:
        return EXTENSIONS[ext]
    if not ext and path.name.lower() in TEXT_NAMES:
        return "text"
    return None


def inspect_file(path: Path, max_bytes: int, *, max_code_mb: float = 2.0) -> FileInfo:
    """One streaming pass: size check, content hash, binary sniff and UTF-8 validation.
    `max_code_mb` is the code loader's own, lower limit (it applies when the file is loaded)."""
    fmt = detect_format(path)
    if fmt is None:
        raise LoaderError(f"unsupported file type {path.suffix or '(no extension)'!r}")
    try:
        st = path.stat()
    except OSError as exc:
        raise LoaderError(_os_reason(exc)) from exc
    if not path.is_file():
        raise LoaderError("not a regular file")
    if st.st_size == 0:
        raise LoaderError("empty file")
    if st.st_size > max_bytes:
        raise LoaderError(f"file too large ({st.st_size / 1e6:.1f} MB > limit {max_bytes / 1e6:.1f} MB)")
    digest = hashlib.sha256()
    textual = fmt != "pdf"
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    utf8_ok, bad_at, seen = True, -1, 0
    try:
        with open_binary(path) as fh:
            first = True
            while chunk := fh.read(READ_CHUNK):
                digest.update(chunk)
                if textual and first and b"\x00" in chunk[:BINARY_SNIFF] and not _utf16_bom(chunk):
                    raise LoaderError("binary content (NUL bytes) in a text-type file")
                if fmt == "pdf" and first and not chunk.lstrip()[:5] == b"%PDF-":
                    raise LoaderError("corrupt PDF: missing %PDF header")
                first = False
                if textual and utf8_ok:
                    try:
                        decoder.decode(chunk)
                    except UnicodeDecodeError as exc:
                        utf8_ok, bad_at = False, seen + exc.start
                seen += len(chunk)
            if textual and utf8_ok:
                try:
                    decoder.decode(b"", final=True)
                except UnicodeDecodeError:
                    utf8_ok, bad_at = False, seen
    except OSError as exc:
        raise LoaderError(_os_reason(exc)) from exc
    warnings: list[str] = []
    encoding: str | None = None
    if textual:
        encoding = "utf-8-sig" if utf8_ok else _fallback_encoding(path, bad_at)
        if encoding != "utf-8-sig":
            warnings.append(f"not valid UTF-8 (first bad byte at {bad_at}); decoded as {encoding}")
    return FileInfo(path, st.st_size, digest.hexdigest(), st.st_mtime, fmt, encoding, warnings, max_code_mb)


def open_binary(path: Path) -> io.BufferedReader:
    """Open for reading; a separate function so tests can simulate unreadable files as root."""
    return open(path, "rb")  # noqa: SIM115 - caller closes


def _utf16_bom(chunk: bytes) -> bool:
    return chunk.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def _fallback_encoding(path: Path, bad_at: int) -> str:
    """Legacy encodings common in Chinese and Western corpora (GB18030, Windows-1252, which holds
    Latin-1's letters); strict, and only where the text reads as that language, or the file is refused."""
    with open_binary(path) as fh:
        head = fh.read(4)
    if _utf16_bom(head):
        candidates = ["utf-16"]
    else:
        candidates = ["gb18030", "cp1252"]
    for enc in candidates:
        decoder = codecs.getincrementaldecoder(enc)("strict")
        try:
            with open_binary(path) as fh:
                while chunk := fh.read(READ_CHUNK):
                    decoder.decode(chunk)
                decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            continue
        if enc != "utf-16" and not _PLAUSIBLE[enc](_sample(path, enc)):
            continue
        return enc
    raise LoaderError(f"invalid UTF-8 (first bad byte at offset {bad_at}), and not GB18030 or "
                      "Windows-1252 (Latin-1) text either")


def _sample(path: Path, encoding: str) -> str:
    with open_binary(path) as fh:
        return fh.read(64 * 1024).decode(encoding, errors="ignore")


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# the typography of Western text that Windows-1252 encodes: quotes, dashes, ellipsis, bullet, euro...
_WESTERN_MARKS = set("“”‘’„‚–—…•€«»°§©®™·×÷¡¿£¥¢")


def _plausible_gb18030(text: str) -> bool:
    """GB18030 decodes most byte soup, and a Latin-1 "crème" or "Müller" too ("cr鑝e"); accept it
    only if the result is mostly CJK/ASCII text and its CJK is not mostly one or two characters
    inside an ASCII word."""
    if not text:
        return False
    good = sum(1 for c in text if c.isascii() or "\u4e00" <= c <= "\u9fff" or "\u3000" <= c <= "\u303f"
               or "\uff00" <= c <= "\uffef")
    runs = _non_ascii_runs(text)
    inside_words = sum(1 for before, run, after in runs
                       if len(run) <= 2 and _ascii_letter(before) and _ascii_letter(after))
    return good / len(text) > 0.9 and inside_words * 2 <= len(runs)


def _plausible_cp1252(text: str) -> bool:
    """Windows-1252 decodes every byte but five: accept it only where what lies outside ASCII reads
    as Western text, each run a letter or two in a word ("café", "Müller") or typography (“…”),
    in nine runs of ten; byte soup ("ÿú€" on its own) and binary data do not."""
    if not text or any(c < " " and c not in "\t\n\r\f" for c in text):
        return False
    runs = _non_ascii_runs(text)
    western = sum(1 for before, run, after in runs
                  if set(run) <= _WESTERN_MARKS or (run.isalpha() and (_ascii_letter(before) or _ascii_letter(after))))
    return western >= 0.9 * len(runs)


def _non_ascii_runs(text: str) -> list[tuple[str, str, str]]:
    """Each run of characters outside ASCII, with the character before and the one after it."""
    return [(text[m.start() - 1:m.start()], m.group(), text[m.end():m.end() + 1]) for m in _NON_ASCII.finditer(text)]


def _ascii_letter(c: str) -> bool:
    return c.isascii() and c.isalpha()


_PLAUSIBLE = {"gb18030": _plausible_gb18030, "cp1252": _plausible_cp1252}


def _os_reason(exc: OSError) -> str:
    import errno

    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied (unreadable file)"
    if exc.errno == errno.ENOENT:
        return "file vanished or is a broken symlink"
    return f"cannot read file: {exc.strerror or exc}"


def read_text(info: FileInfo) -> str:
    with open_binary(info.path) as fh:
        return fh.read().decode(info.encoding or "utf-8-sig")


def stream_text(info: FileInfo) -> Iterator[tuple[int, str]]:
    """Yield (offset, text) windows of about TEXT_WINDOW characters, cut at paragraph (else line,
    else space) boundaries, with offsets into the decoded text."""
    decoder = codecs.getincrementaldecoder(info.encoding or "utf-8-sig")("strict")
    buf, offset = "", 0
    with open_binary(info.path) as fh:
        while True:
            raw = fh.read(READ_CHUNK)
            buf += decoder.decode(raw, final=not raw)
            while len(buf) >= 2 * TEXT_WINDOW or (not raw and buf):
                if not raw and len(buf) < 2 * TEXT_WINDOW:
                    cut = len(buf)
                else:
                    cut = _cut_point(buf, TEXT_WINDOW)
                yield offset, buf[:cut]
                offset += cut
                buf = buf[cut:]
            if not raw:
                return


def _cut_point(buf: str, target: int) -> int:
    for sep in ("\n\n", "\n", "。", ". ", " "):
        i = buf.rfind(sep, target // 2, target * 2)
        if i != -1:
            return i + len(sep)
    return target


def title_from_name(path: Path) -> str:
    return path.stem.replace("_", " ").strip() or path.name


MAX_HEADING_CHARS = 200


def short_heading(text: str) -> str:
    """A title or heading as kept in a document's title and its chunks' heading paths: these are
    repeated in every chunk, so a heading of a megabyte would make the store grow quadratically."""
    if len(text) <= MAX_HEADING_CHARS:
        return text
    return text[:MAX_HEADING_CHARS - 1].rstrip() + "…"



def readable_path(path: Path | str) -> str:
    """`path` as text that can be stored and printed (`cograg.text.readable`)."""
    return readable(str(path))


def utf8_path(path: Path | str) -> bool:
    """Whether `path` is valid UTF-8 throughout, so the store can keep it as a document's source."""
    return is_utf8(str(path))


def is_hidden(name: str) -> bool:
    return name.startswith(".") or name in {"__pycache__", "node_modules"}


def walk_files(root: Path) -> Iterator[tuple[Path, str | None]]:
    """Files under `root` as (path, None), or (path, reason) for entries that cannot be walked, in
    sorted depth-first order. Symlinks (to files or folders) are followed only where their resolved
    target lies inside `root`; one leading outside is skipped with a reason, so a link to /etc or
    /proc/<pid>/root never brings outside data in. A folder reached twice (a link cycle) is reported
    instead of followed. The walk is iterative, so nesting depth is bounded only by the filesystem."""
    inside = _Confinement(root)
    seen: set[tuple[int, int]] = set()
    stack: list[Iterator[os.DirEntry[str]]] = []
    problem = _enter(root, seen, stack)
    if problem is not None:
        yield problem
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        if is_hidden(entry.name):
            continue
        p = Path(entry.path)
        try:
            is_dir = entry.is_dir(follow_symlinks=True)
        except OSError as exc:
            yield p, _os_reason(exc)
            continue
        if entry.is_symlink() and (problem := inside.link_problem(p)) is not None:
            yield p, problem
        elif is_dir:
            problem = _enter(p, seen, stack)
            if problem is not None:
                yield problem
        elif entry.is_symlink() and not p.exists():
            try:
                p.stat()
            except OSError as exc:
                yield p, _os_reason(exc)
        else:
            yield p, None


def _enter(d: Path, seen: set[tuple[int, int]], stack: list[Iterator[os.DirEntry[str]]]
           ) -> tuple[Path, str] | None:
    """Push folder `d`'s sorted entries onto `stack`; the skip for `d` when it cannot be listed or
    was already visited (the stat key, not the path, catches cycles through symlinks)."""
    try:
        st = d.stat()
    except OSError as exc:
        return d, _os_reason(exc)
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return d, "symlink loop (directory already visited)"
    seen.add(key)
    try:
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        return d, _os_reason(exc)
    stack.append(iter(entries))
    return None


class _Confinement:
    """Whether a symlink's fully resolved target lies within the (resolved) walk root."""

    def __init__(self, root: Path) -> None:
        self.root = os.path.realpath(root)
        self.shown = readable_path(root)

    def link_problem(self, link: Path) -> str | None:
        """The skip reason for `link`, or None when it may be followed."""
        try:  # non-strict: a dangling link resolves to where it points
            target = os.path.realpath(link)
        except OSError as exc:  # a link that cannot be read (/proc/<pid>/exe of a kernel thread)
            return _os_reason(exc)
        if target == self.root or target.startswith(self.root.rstrip(os.sep) + os.sep):
            return None
        return f"symlink leads outside {self.shown}"
