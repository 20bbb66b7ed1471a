"""Loaders (SPEC A1): turn one file into a :class:`LoadedDocument` of structural blocks.

Every loader raises :class:`LoaderError` with a human-readable reason for files it cannot use;
the ingest run records that as a skip and carries on. Text formats stream in bounded windows so a
very large file never sits in memory whole. Reading files is `files.py`; the code loader is
`code_units.py`, the JSON/JSONL/CSV loaders `records.py`; text, Markdown, HTML and PDF are here.

    loaders.load(loaders.inspect_file(path, max_bytes))
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator

from markdown_it import MarkdownIt

from cograg.errors import LoaderError
from cograg.ingest.code_units import load_code
from cograg.ingest.files import (FileInfo, inspect_file, read_text, short_heading, stream_text,
                                 title_from_name)
from cograg.ingest.models import Block, LoadedDocument
from cograg.ingest.records import load_csv, load_json, load_jsonl
from cograg.text import MARKDOWN_BLOCK_LINE

# ---------------------------------------------------------------------------------- text / md

def load_text(info: FileInfo) -> LoadedDocument:
    def blocks() -> Iterator[Block]:
        for off, text in stream_text(info):
            yield Block(text=text, orig_start=off)

    return LoadedDocument("text", title_from_name(info.path), blocks(), warnings=list(info.warnings))


_md = MarkdownIt("commonmark").enable("table")
# markdown-it ends a line at \r\n, a lone \r or \n (its normalize rule); token line numbers
# (`tok.map`) count lines that way, so offsets must too, or old-Mac text maps past the end
_LINE_BREAK = re.compile(r"\r\n?|\n")
_FRONT_MATTER = re.compile(r"\A---\s*?(?:\r\n?|\n)(.*?)(?:\r\n?|\n)---[^\S\r\n]*(?:\r\n?|\n)", re.S)


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
                title = short_heading(line.split(":", 1)[1].strip().strip("\"'")) or None
    line_starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]
    tokens = _md.parse(text[body_start:])
    heads: list[tuple[int, int, str]] = []  # (char offset, level, heading text)
    first_line = len(_LINE_BREAK.findall(text, 0, body_start))
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map:
            level = int(tok.tag[1])
            # the heading's full text stays in its section's text; the path and title carry a bounded
            # copy, as they are repeated in every chunk of the section
            inline = short_heading(tokens[i + 1].content.strip())
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
        only_heading = level and not _LINE_BREAK.search(body.strip()) and idx + 1 < len(bounds)
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
    return LoadedDocument("markdown", title or title_from_name(info.path), iter(blocks),
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
    _, blocks = markdown_sections(unwrap_source_lines(text))
    return LoadedDocument("html", title or title_from_name(info.path), iter(blocks),
                          metadata={"extracted": "trafilatura-markdown"}, warnings=list(info.warnings))


_FENCE = re.compile(r"^[ \t]*(?:```|~~~)")


def unwrap_source_lines(markdown: str) -> str:
    """trafilatura's Markdown keeps the HTML source's line breaks and indentation inside a
    paragraph that holds inline formatting ("… travelling downstream in high\\n          water, struck
    …"), where a browser shows one space: sentences broke at every source line and the indentation
    cost tokens. An indented line that continues a text line joins it with one space, outside code
    fences, unless either line starts a block of its own (list item, table row, heading, quote)."""
    out: list[str] = []
    fenced = False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
            out.append(line)
            continue
        continues = (not fenced and out and out[-1].strip() and line[:1] in (" ", "\t") and line.strip()
                     and not MARKDOWN_BLOCK_LINE.match(line) and not _FENCE.match(out[-1])
                     and not re.match(r"^[ \t]*[|#]", out[-1]))
        if continues:
            out[-1] = out[-1].rstrip() + " " + line.strip()
        else:
            out.append(line)
    return "\n".join(out)


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

    # pypdf logs what it repairs ("EOF marker not found") to stderr, between the progress lines;
    # a PDF it cannot read is skipped with the reason below, so only its errors are let through
    logging.getLogger("pypdf").setLevel(logging.ERROR)

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
    return LoadedDocument("pdf", str(meta_title).strip() if meta_title else title_from_name(info.path),
                          iter(blocks), metadata={"pages": len(pages)}, warnings=list(info.warnings))


LOADERS: dict[str, Callable[[FileInfo], LoadedDocument]] = {
    "text": load_text, "markdown": load_markdown, "html": load_html, "pdf": load_pdf,
    "code": load_code, "jsonl": load_jsonl, "json": load_json, "csv": load_csv,
}


def load(info: FileInfo) -> LoadedDocument:
    """Load one file. A loader's unexpected error (a bug, or input no one foresaw) becomes a
    LoaderError, here or while its blocks stream, so it skips this file instead of ending the run."""
    try:
        loaded = LOADERS[info.fmt](info)
    except LoaderError:
        raise
    except Exception as exc:
        raise _unexpected(exc) from exc
    loaded.blocks = _guarded(loaded.blocks)
    return loaded


def _guarded(blocks: Iterator[Block]) -> Iterator[Block]:
    try:
        yield from blocks
    except LoaderError:
        raise
    except Exception as exc:
        raise _unexpected(exc) from exc


def _unexpected(exc: Exception) -> LoaderError:
    # the same wording the pipeline gives the errors it catches itself
    return LoaderError(f"{type(exc).__name__}: {exc}"[:300])


__all__ = ["LOADERS", "FileInfo", "LoadedDocument", "inspect_file", "load"]
