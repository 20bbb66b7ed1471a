"""Loaders (SPEC A1): turn one file into a :class:`LoadedDocument` of structural blocks.

Every loader raises :class:`LoaderError` with a human-readable reason for files it cannot use;
the ingest run records that as a skip and carries on. Text formats stream in bounded windows so a
very large file never sits in memory whole.
"""

from __future__ import annotations

import ast
import codecs
import csv
import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

from cograg.errors import LoaderError
from cograg.ingest.models import Block, LoadedDocument

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


def detect_format(path: Path) -> str | None:
    ext = path.suffix.lower()
    if ext in EXTENSIONS:
        return EXTENSIONS[ext]
    if not ext and path.name.lower() in TEXT_NAMES:
        return "text"
    return None


def inspect_file(path: Path, max_bytes: int) -> FileInfo:
    """One streaming pass: size check, content hash, binary sniff and UTF-8 validation."""
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
    return FileInfo(path, st.st_size, digest.hexdigest(), st.st_mtime, fmt, encoding, warnings)


def open_binary(path: Path) -> io.BufferedReader:
    """Open for reading; a separate function so tests can simulate unreadable files as root."""
    return open(path, "rb")  # noqa: SIM115 - caller closes


def _utf16_bom(chunk: bytes) -> bool:
    return chunk.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def _fallback_encoding(path: Path, bad_at: int) -> str:
    """Legacy encodings common in Chinese and Western corpora; strict, or the file is refused."""
    with open_binary(path) as fh:
        head = fh.read(4)
    if _utf16_bom(head):
        candidates = ["utf-16"]
    else:
        candidates = ["gb18030"]
    for enc in candidates:
        decoder = codecs.getincrementaldecoder(enc)("strict")
        try:
            with open_binary(path) as fh:
                while chunk := fh.read(READ_CHUNK):
                    decoder.decode(chunk)
                decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            continue
        if enc == "gb18030" and not _plausible_gb18030(path):
            continue
        return enc
    raise LoaderError(f"invalid UTF-8 (first bad byte at offset {bad_at}) and no other encoding fits")


def _plausible_gb18030(path: Path) -> bool:
    """GB18030 decodes most byte soup; accept it only if the result is mostly CJK/ASCII text."""
    with open_binary(path) as fh:
        sample = fh.read(64 * 1024)
    text = sample.decode("gb18030", errors="ignore")
    if not text:
        return False
    good = sum(1 for c in text if c.isascii() or "\u4e00" <= c <= "\u9fff" or "\u3000" <= c <= "\u303f"
               or "\uff00" <= c <= "\uffef")
    return good / len(text) > 0.9


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


# ---------------------------------------------------------------------------------- text / md

def load_text(info: FileInfo) -> LoadedDocument:
    def blocks() -> Iterator[Block]:
        for off, text in stream_text(info):
            yield Block(text=text, orig_start=off)

    return LoadedDocument("text", _title_from_name(info.path), blocks(), warnings=list(info.warnings))


_md = MarkdownIt("commonmark").enable("table")
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.S)


def markdown_sections(text: str) -> tuple[str | None, list[Block]]:
    """Sections of a Markdown text: each heading starts a block whose heading path is the chain of
    enclosing headings. A heading with no body of its own is folded into the next section."""
    title: str | None = None
    body_start = 0
    fm = _FRONT_MATTER.match(text)
    if fm:
        body_start = fm.end()
        for line in fm.group(1).splitlines():
            if line.lower().startswith("title:"):
                title = line.split(":", 1)[1].strip().strip("\"'") or None
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    tokens = _md.parse(text[body_start:])
    heads: list[tuple[int, int, str]] = []  # (char offset, level, heading text)
    first_line = text.count("\n", 0, body_start)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map:
            level = int(tok.tag[1])
            inline = tokens[i + 1].content.strip()
            heads.append((line_starts[tok.map[0] + first_line], level, inline))
            if title is None and level == 1:
                title = inline
    bounds = [(body_start, 0, "")] + heads if not heads or heads[0][0] > body_start else heads
    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []
    pending_start: int | None = None
    for idx, (start, level, head) in enumerate(bounds):
        end = bounds[idx + 1][0] if idx + 1 < len(bounds) else len(text)
        if level:
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, head))
        seg_start = pending_start if pending_start is not None else start
        body = text[start:end]
        only_heading = level and body.strip().count("\n") == 0 and idx + 1 < len(bounds)
        if only_heading and bounds[idx + 1][1] > level:
            pending_start = seg_start if pending_start is not None else start
            continue
        pending_start = None
        if text[seg_start:end].strip():
            blocks.append(Block(text=text[seg_start:end], orig_start=seg_start,
                                heading_path=tuple(h for _, h in stack)))
    return title, blocks


def load_markdown(info: FileInfo) -> LoadedDocument:
    text = read_text(info)
    title, blocks = markdown_sections(text)
    return LoadedDocument("markdown", title or _title_from_name(info.path), iter(blocks),
                          warnings=list(info.warnings))


# ---------------------------------------------------------------------------------------- html

def load_html(info: FileInfo) -> LoadedDocument:
    import trafilatura
    from lxml import html as lxml_html

    raw = read_text(info)
    title = None
    try:
        tree = lxml_html.fromstring(raw)
        t = tree.findtext(".//title")
        title = t.strip() if t and t.strip() else None
        h1 = tree.findtext(".//h1")
        if title is None and h1:
            title = h1.strip()
    except (ValueError, lxml_html.etree.ParserError):
        tree = None
    # Markdown output keeps the article's headings, so HTML reuses the Markdown section splitter.
    text = trafilatura.extract(raw, output_format="markdown", include_formatting=True,
                               include_tables=True, include_comments=False, include_links=False,
                               include_images=False, favor_recall=True, deduplicate=False)
    if not text or not text.strip():
        text = _html_fallback_text(tree)
    if not text or not text.strip():
        raise LoaderError("HTML page has no readable main content")
    _, blocks = markdown_sections(text)
    return LoadedDocument("html", title or _title_from_name(info.path), iter(blocks),
                          metadata={"extracted": "trafilatura-markdown"}, warnings=list(info.warnings))


_BOILERPLATE_TAGS = ("script", "style", "nav", "header", "footer", "aside", "form", "noscript")


def _html_fallback_text(tree) -> str | None:  # type: ignore[no-untyped-def]
    """Very short pages defeat trafilatura's heuristics; fall back to the body minus layout tags."""
    if tree is None:
        return None
    for bad in tree.xpath("|".join(f"//{t}" for t in _BOILERPLATE_TAGS)):
        bad.drop_tree()
    body = tree.find(".//body")
    return (body if body is not None else tree).text_content()


# ----------------------------------------------------------------------------------------- pdf

def load_pdf(info: FileInfo) -> LoadedDocument:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(str(info.path), strict=False)
        if reader.is_encrypted:
            raise LoaderError("encrypted PDF")
        pages = [(page.extract_text() or "") for page in reader.pages]
        meta_title = (reader.metadata.title if reader.metadata else None) or None
    except LoaderError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError, RecursionError,
            AssertionError, IndexError, ZeroDivisionError) as exc:
        raise LoaderError(f"corrupt PDF: {type(exc).__name__}: {exc}".strip()[:200]) from exc
    if not any(p.strip() for p in pages):
        raise LoaderError("PDF has no extractable text (scanned images?)")
    blocks, off = [], 0
    for no, page_text in enumerate(pages, start=1):
        if page_text.strip():
            blocks.append(Block(text=page_text, orig_start=off, page=no))
        off += len(page_text) + 2  # pages are joined with a blank line in the extracted text
    return LoadedDocument("pdf", str(meta_title).strip() if meta_title else _title_from_name(info.path),
                          iter(blocks), metadata={"pages": len(pages)}, warnings=list(info.warnings))


# ---------------------------------------------------------------------------------------- code

def load_code(info: FileInfo) -> LoadedDocument:
    text = read_text(info)
    ext = info.path.suffix.lower()
    language = CODE_LANGUAGE.get(ext, "generic")
    warnings = list(info.warnings)
    units: list[tuple[int, int, tuple[str, ...]]] | None
    try:
        if language == "python":
            units = _python_units(text)
        elif language in ("javascript", "go"):
            units = _tree_sitter_units(text, language)
        else:
            units = None
    except SyntaxError as exc:
        warnings.append(f"could not parse as {language} ({exc.msg}); split by lines")
        units = None
    if units is None:
        blocks = [Block(text=text, orig_start=0, kind="code")]
    else:
        blocks = [Block(text=text[s:e], orig_start=s, heading_path=hp, kind="code")
                  for s, e, hp in units if text[s:e].strip()]
    return LoadedDocument("code", info.path.name, iter(blocks),
                          metadata={"language": language}, warnings=warnings)


def _python_units(text: str) -> list[tuple[int, int, tuple[str, ...]]]:
    """Top-level functions and classes as their own units, module-level code between them grouped."""
    tree = ast.parse(text)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)] + [len(text)]

    def at(line: int) -> int:
        return line_starts[min(line - 1, len(line_starts) - 1)]

    units: list[tuple[int, int, tuple[str, ...]]] = []
    cursor = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            start, end = at(first), at((node.end_lineno or node.lineno) + 1)
            if start > cursor:
                units.append((cursor, start, ("module",)))
            kind = "class" if isinstance(node, ast.ClassDef) else "def"
            units.append((start, end, (f"{kind} {node.name}",)))
            cursor = end
    if cursor < len(text):
        units.append((cursor, len(text), ("module",)))
    return units


_TS_UNIT_TYPES = {
    "javascript": {"function_declaration", "class_declaration", "generator_function_declaration",
                   "export_statement", "lexical_declaration", "variable_declaration"},
    "go": {"function_declaration", "method_declaration", "type_declaration"},
}


def _tree_sitter_units(text: str, language: str) -> list[tuple[int, int, tuple[str, ...]]] | None:
    import tree_sitter

    if language == "javascript":
        import tree_sitter_javascript as grammar
    else:
        import tree_sitter_go as grammar
    parser = tree_sitter.Parser(tree_sitter.Language(grammar.language()))
    data = text.encode("utf-8")
    tree = parser.parse(data)
    if tree.root_node.has_error:
        raise SyntaxError(f"{language} syntax error")

    def char_at(byte: int) -> int:
        return len(data[:byte].decode("utf-8", errors="ignore"))

    units: list[tuple[int, int, tuple[str, ...]]] = []
    cursor = 0
    for node in tree.root_node.children:
        if node.type not in _TS_UNIT_TYPES[language]:
            continue
        start, end = char_at(node.start_byte), char_at(node.end_byte)
        # keep the comment block just above a unit with it
        prev = node.prev_sibling
        while prev is not None and prev.type == "comment" and char_at(prev.end_byte) >= cursor:
            start = char_at(prev.start_byte)
            prev = prev.prev_sibling
        if start > cursor:
            units.append((cursor, start, ("module",)))
        units.append((start, end, (_ts_label(node),)))
        cursor = end
    if cursor < len(text):
        units.append((cursor, len(text), ("module",)))
    return units


def _ts_label(node) -> str:  # type: ignore[no-untyped-def]
    """Heading label of a top-level unit: "function add", "class Ticket", "method Price",
    "type Ticket", "const BASE". `export ...` is labelled by what it exports; Go types and JS
    variables keep their name one level down (type_spec, variable_declarator)."""
    target = node.child_by_field_name("declaration") if node.type == "export_statement" else None
    if target is None:
        target = node
    name_node = target.child_by_field_name("name")
    kind = target.type.split("_")[0]
    if name_node is None:
        inner = next((c for c in target.named_children
                      if c.type in ("type_spec", "variable_declarator")), None)
        if inner is not None:
            name_node = inner.child_by_field_name("name")
            if target.type in ("lexical_declaration", "variable_declaration"):
                kind = target.children[0].type  # const | let | var
    return f"{kind} {name_node.text.decode()}" if name_node is not None else target.type


# ------------------------------------------------------------------------------------- records

_TEXT_FIELDS = ("text", "content", "body", "abstract", "description", "paragraph", "passage")
_TITLE_FIELDS = ("title", "name", "heading", "subject")
_ID_FIELDS = ("_id", "id", "doc_id", "uuid", "key")


def render_record(record: object) -> tuple[str, dict[str, object]]:
    """Text of one JSON/CSV record plus its scalar metadata. Records with a text-like field use
    `title` + text; other records become `key: value` lines."""
    if not isinstance(record, dict):
        return (json.dumps(record, ensure_ascii=False) if not isinstance(record, str) else record), {}
    meta: dict[str, object] = {}
    for k in _ID_FIELDS:
        if k in record and isinstance(record[k], str | int):
            meta["record_id"] = str(record[k])
            break
    text_key = next((k for k in _TEXT_FIELDS if isinstance(record.get(k), str) and record[k].strip()), None)
    if text_key:
        title_key = next((k for k in _TITLE_FIELDS if isinstance(record.get(k), str) and record[k].strip()), None)
        if title_key:
            meta["title"] = record[title_key]
        text = (f"{record[title_key]}\n{record[text_key]}" if title_key else record[text_key])
        return text, meta
    lines = []
    for k, v in record.items():
        val = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        lines.append(f"{k}: {val}")
    return "\n".join(lines), meta


def _record_blocks(records: Iterator[tuple[object, str]]) -> Iterator[Block]:
    off = 0
    for no, (rec, label) in enumerate(records, start=1):
        text, meta = render_record(rec)
        if not text.strip():
            continue
        meta.setdefault("record_id", label or str(no))
        heading = (str(meta["title"]),) if "title" in meta else ()
        yield Block(text=text, orig_start=off, heading_path=heading, meta=meta, kind="record")
        off += len(text) + 2


def load_jsonl(info: FileInfo) -> LoadedDocument:
    def records() -> Iterator[tuple[object, str]]:
        with open_binary(info.path) as fh:
            reader = io.TextIOWrapper(fh, encoding=info.encoding or "utf-8-sig")
            for lineno, line in enumerate(reader, start=1):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line), ""
                except json.JSONDecodeError as exc:
                    raise LoaderError(f"invalid JSON on line {lineno}: {exc.msg}") from exc

    return LoadedDocument("records", _title_from_name(info.path), _record_blocks(records()),
                          metadata={"format": "jsonl"}, warnings=list(info.warnings))


def load_json(info: FileInfo) -> LoadedDocument:
    try:
        data = json.loads(read_text(info))
    except json.JSONDecodeError as exc:
        raise LoaderError(f"invalid JSON: {exc.msg} at line {exc.lineno}") from exc
    if isinstance(data, dict):
        lists = [(k, v) for k, v in data.items() if isinstance(v, list) and v]
        items: list[tuple[object, str]]
        if len(lists) == 1:
            items = [(r, "") for r in lists[0][1]]
        else:
            items = [({"key": k, **v} if isinstance(v, dict) else {"key": k, "value": v}, k)
                     for k, v in data.items()]
    elif isinstance(data, list):
        items = [(r, "") for r in data]
    else:
        items = [(data, "")]
    return LoadedDocument("records", _title_from_name(info.path), _record_blocks(iter(items)),
                          metadata={"format": "json"}, warnings=list(info.warnings))


def load_csv(info: FileInfo) -> LoadedDocument:
    delimiter = "\t" if info.path.suffix.lower() == ".tsv" else ","

    def records() -> Iterator[tuple[object, str]]:
        with open_binary(info.path) as fh:
            reader = csv.DictReader(io.TextIOWrapper(fh, encoding=info.encoding or "utf-8-sig",
                                                     newline=""), delimiter=delimiter)
            try:
                for row in reader:
                    yield {k: v for k, v in row.items() if k is not None}, ""
            except csv.Error as exc:
                raise LoaderError(f"malformed CSV: {exc}") from exc

    return LoadedDocument("records", _title_from_name(info.path), _record_blocks(records()),
                          metadata={"format": "csv"}, warnings=list(info.warnings))


LOADERS: dict[str, Callable[[FileInfo], LoadedDocument]] = {
    "text": load_text, "markdown": load_markdown, "html": load_html, "pdf": load_pdf,
    "code": load_code, "jsonl": load_jsonl, "json": load_json, "csv": load_csv,
}


def load(info: FileInfo) -> LoadedDocument:
    return LOADERS[info.fmt](info)


def _title_from_name(path: Path) -> str:
    return path.stem.replace("_", " ").strip() or path.name


def is_hidden(name: str) -> bool:
    return name.startswith(".") or name in {"__pycache__", "node_modules"}


def walk_files(root: Path) -> Iterator[tuple[Path, str | None]]:
    """Files under `root` as (path, None), or (path, reason) for entries that cannot be walked.
    Directory symlinks are followed once; a cycle is reported instead of followed."""
    seen: set[tuple[int, int]] = set()

    def visit(d: Path) -> Iterator[tuple[Path, str | None]]:
        try:
            st = d.stat()
        except OSError as exc:
            yield d, _os_reason(exc)
            return
        key = (st.st_dev, st.st_ino)
        if key in seen:
            yield d, "symlink loop (directory already visited)"
            return
        seen.add(key)
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as exc:
            yield d, _os_reason(exc)
            return
        for entry in entries:
            if is_hidden(entry.name):
                continue
            p = Path(entry.path)
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError as exc:
                yield p, _os_reason(exc)
                continue
            if is_dir:
                yield from visit(p)
            elif entry.is_symlink() and not p.exists():
                try:
                    p.stat()
                except OSError as exc:
                    yield p, _os_reason(exc)
            else:
                yield p, None

    yield from visit(root)
