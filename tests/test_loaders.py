"""Loaders (SPEC A1): Markdown, HTML, PDF, source code and JSON/JSONL/CSV records, each checked
through the chunks they produce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cograg.config import Settings
from cograg.documents import Chunk
from cograg.errors import LoaderError
from cograg.index.sqlite_store import SQLiteStore
from cograg.ingest import loaders
from cograg.ingest.pipeline import _doc_type_for, chunk_document, ingest_paths

pytestmark = pytest.mark.usefixtures("ingest_env")


def load_chunks(path: Path, settings: Settings | None = None) -> tuple[loaders.LoadedDocument, list[Chunk]]:
    settings = settings or Settings()
    info = loaders.inspect_file(path, 10**9)
    loaded = loaders.load(info)
    config = settings.chunking_for(_doc_type_for(info.fmt))
    return loaded, list(chunk_document(loaded, "doc0000000000000", config))


# ---------------------------------------------------------------------------------- markdown

MARKDOWN = """\
---
title: "Operator Guide"
author: someone
---
Intro paragraph before any heading.

# Trams

Trams run every ten minutes.

## Fleet

### Linden L7

The Linden L7 is a low-floor tram.

## Depots

There are two depots: North and Harbour.

# Buses

Buses replace trams at night.
"""


def test_markdown_heading_paths_and_front_matter_title(tmp_path: Path) -> None:
    path = tmp_path / "guide.md"
    path.write_text(MARKDOWN, encoding="utf-8")
    loaded, chunks = load_chunks(path)
    assert loaded.title == "Operator Guide"
    assert loaded.doc_type == "markdown"
    by_text = {c.text.splitlines()[-1]: c.heading_path for c in chunks}
    assert by_text == {
        "Intro paragraph before any heading.": [],
        "Trams run every ten minutes.": ["Trams"],
        "The Linden L7 is a low-floor tram.": ["Trams", "Fleet", "Linden L7"],
        "There are two depots: North and Harbour.": ["Trams", "Depots"],
        "Buses replace trams at night.": ["Buses"],
    }
    # front matter is metadata, not content
    assert not any("author" in c.text or "---" in c.text for c in chunks)
    # semantic chunking never mixes two sections in one chunk
    for c in chunks:
        assert sum(body in c.text for body in by_text) == 1, c.text


def test_markdown_title_falls_back_to_first_h1_then_file_name(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Some text.\n\n# Real Title\n\nBody.\n", encoding="utf-8")
    (tmp_path / "my_notes.md").write_text("No headings here, just prose.\n", encoding="utf-8")
    assert load_chunks(tmp_path / "a.md")[0].title == "Real Title"
    assert load_chunks(tmp_path / "my_notes.md")[0].title == "my notes"


def test_markdown_long_section_is_split_but_keeps_its_heading(tmp_path: Path) -> None:
    paras = "\n\n".join(f"Paragraph {i} about the tram depot and its many workshops." for i in range(60))
    (tmp_path / "long.md").write_text(f"# Depot\n\n## Workshops\n\n{paras}\n\n## Yard\n\nThe yard.\n",
                                      encoding="utf-8")
    _, chunks = load_chunks(tmp_path / "long.md", Settings(chunk_size=64))
    workshop = [c for c in chunks if c.heading_path == ["Depot", "Workshops"]]
    assert len(workshop) > 3
    assert all(c.token_count <= 64 for c in chunks)
    assert chunks[-1].heading_path == ["Depot", "Yard"] and chunks[-1].text.endswith("The yard.")


# -------------------------------------------------------------------------------------- html

BOILERPLATE = ["PORTALHEADER", "NAVHOME", "NAVNEWS", "NAVCONTACT", "COOKIEBANNER", "Accept all cookies",
               "SIDEBARASIDE", "FOOTERTEXT", "Copyright 2024", "TRACKME", "SCRIPTBODY", "color:red"]

HTML = """<!DOCTYPE html>
<html lang="en">
<head><title>Harbour Ferries | City Portal</title>
<script>var trackingPixel = "TRACKME-123"; function analytics(){}</script>
<style>.nav{color:red}</style>
</head>
<body>
<header><div class="logo">PORTALHEADER Municipal Website</div></header>
<nav><ul><li><a href="/">NAVHOME Home</a></li><li><a href="/news">NAVNEWS News</a></li>
<li><a href="/contact">NAVCONTACT Contact</a></li></ul></nav>
<div id="cookie-banner" class="cookie-consent">COOKIEBANNER We use cookies to improve your
experience. <button>Accept all cookies</button></div>
<main>
<article>
<h1>The Harbour Ferries</h1>
<p>The harbour ferry service started in 1911 with two steam boats that crossed the River Vell
between Harbour Square and the Saltmarsh quay. Each crossing took about twelve minutes.</p>
<h2>Modern fleet</h2>
<p>Today four electric ferries run every fifteen minutes from six in the morning until midnight.
The newest boat, the Gull, entered service in 2021 and carries 180 passengers.</p>
<p>Tickets from the tram network are valid on the ferries, and a bicycle can be taken on board
free of charge outside rush hours.</p>
</article>
</main>
<aside><h3>Related</h3><p>SIDEBARASIDE Read more about trams and buses in our other articles.</p></aside>
<footer><p>FOOTERTEXT Copyright 2024 City Portal. All rights reserved. Privacy policy.</p></footer>
<script>console.log("SCRIPTBODY loaded");</script>
</body></html>
"""


def test_html_boilerplate_removed_article_and_title_kept(tmp_path: Path) -> None:
    path = tmp_path / "ferries.html"
    path.write_text(HTML, encoding="utf-8")
    loaded, chunks = load_chunks(path)
    assert loaded.doc_type == "html"
    assert loaded.title == "Harbour Ferries | City Portal"
    text = "\n".join(c.text for c in chunks)
    for junk in BOILERPLATE:
        assert junk not in text, f"boilerplate {junk!r} leaked into chunks"
    for fact in ("started in 1911", "Saltmarsh quay", "the Gull, entered service in 2021",
                 "free of charge outside rush hours"):
        assert fact in " ".join(text.split()), fact
    # the article's headings become heading paths
    paths = {tuple(c.heading_path) for c in chunks}
    assert ("The Harbour Ferries", "Modern fleet") in paths


def test_html_source_line_breaks_inside_a_formatted_paragraph_are_spaces(tmp_path: Path) -> None:
    # trafilatura keeps the source's line breaks and indentation in a paragraph with inline
    # formatting; a browser shows one space, and so must the chunk (sentences, quotes, tokens)
    page = """<html><head><title>Bridge</title></head><body><article><h1>The bridge</h1>
        <p>On 3 March 1987 the grain barge <em>Maren Holt</em>, travelling downstream in high
          water, struck the fourth arch. Several facing stones were dislodged and the bridge
          was closed to heavy vehicles for fourteen months while the arch was repaired.</p>
        <p>A plain paragraph about the repair, long enough for the extractor to keep it as text.</p>
        <pre>def cap(fares):
    return min(sum(fares), 6.5)</pre>
        <ul><li>First <b>listed</b> item</li><li>Second item</li></ul>
        </article></body></html>"""
    (tmp_path / "bridge.html").write_text(page, encoding="utf-8")
    _, chunks = load_chunks(tmp_path / "bridge.html")
    text = "\n".join(c.text for c in chunks)
    assert "travelling downstream in high water, struck the fourth arch. Several facing stones were " \
           "dislodged and the bridge was closed" in text, text
    assert "```\ndef cap(fares):\n" in text  # code keeps its lines (trafilatura drops their indentation)
    assert "- First **listed** item\n- Second item" in text


def test_unwrap_source_lines_leaves_markdown_blocks_alone() -> None:
    md = ("Para with *x* that\n    goes on.\n\n- item\n  - nested\n| a | b |\n|---|---|\n"
          "# Head\n    not joined to a heading\n```\nfenced\n    indented\n```\n    after a fence")
    assert loaders.unwrap_source_lines(md) == (
        "Para with *x* that goes on.\n\n- item\n  - nested\n| a | b |\n|---|---|\n"
        "# Head\n    not joined to a heading\n```\nfenced\n    indented\n```\n    after a fence")


def test_html_without_title_uses_h1(tmp_path: Path) -> None:
    body = "<p>" + "The museum opens at nine and closes at five every weekday. " * 6 + "</p>"
    (tmp_path / "m.html").write_text(f"<html><body><h1>Museum Hours</h1>{body}</body></html>",
                                     encoding="utf-8")
    loaded, chunks = load_chunks(tmp_path / "m.html")
    assert loaded.title == "Museum Hours"
    assert any("opens at nine" in c.text for c in chunks)


def test_html_with_no_content_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "empty.html").write_text(
        '<html><head><title>T</title><script>var x = "SCRIPTY";</script><style>p{}</style></head>'
        "<body>  </body></html>", encoding="utf-8")
    with pytest.raises(LoaderError, match="no readable main content"):
        load_chunks(tmp_path / "empty.html")


# --------------------------------------------------------------------------------------- pdf

def _page_text(i: int) -> str:
    return (f"Page {i} of the report discusses topic{i}. "
            + " ".join(f"Sentence {k} mentions marker{i} and the harbour tram." for k in range(40)))


def test_pdf_pages_kept_on_chunks(tmp_path: Path, make_pdf) -> None:
    path = make_pdf(tmp_path / "report.pdf", [_page_text(i) for i in (1, 2, 3)], title="Transit Report")
    loaded, chunks = load_chunks(path, Settings(chunk_size=128))
    assert loaded.doc_type == "pdf"
    assert loaded.title == "Transit Report"
    assert loaded.metadata["pages"] == 3
    assert {c.page for c in chunks} == {1, 2, 3}
    assert len(chunks) > 3  # several chunks per page at this size
    for c in chunks:
        markers = {i for i in (1, 2, 3) if f"marker{i}" in c.text or f"topic{i}" in c.text}
        assert markers == {c.page}, (c.page, c.text[:80])
    # chunks come in page order and each page starts with its own heading sentence
    assert [c.page for c in chunks] == sorted(c.page for c in chunks)
    for i in (1, 2, 3):
        first = next(c for c in chunks if c.page == i)
        assert first.text.startswith(f"Page {i} of the report")


def test_pdf_title_defaults_to_file_name(tmp_path: Path, make_pdf) -> None:
    path = make_pdf(tmp_path / "annual_summary.pdf", ["Just one page of text about trams."])
    loaded, chunks = load_chunks(path)
    assert loaded.title == "annual summary"
    assert [c.page for c in chunks] == [1]


def test_pdf_page_without_text_keeps_numbering(tmp_path: Path, make_pdf) -> None:
    path = make_pdf(tmp_path / "gap.pdf", ["First page words.", "", "Third page words."])
    _, chunks = load_chunks(path)
    assert [(c.page, c.text) for c in chunks] == [(1, "First page words."), (3, "Third page words.")]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "no_header"])
def test_corrupt_pdf_is_skipped(tmp_path: Path, make_pdf, damage: str) -> None:
    good = make_pdf(tmp_path / "good.pdf", [_page_text(1)]).read_bytes()
    data = {"truncated": good[: len(good) // 2],
            "garbage": b"%PDF-1.4\n" + bytes(range(256)) * 20,
            "no_header": b"this is not a pdf at all\n" * 10}[damage]
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(data)
    with pytest.raises(LoaderError, match="corrupt PDF"):
        load_chunks(bad)
    with SQLiteStore(tmp_path / "store") as store:
        summary = ingest_paths(store, [bad, tmp_path / "good.pdf"])
        assert summary.added == 1
        assert [(s.path, s.reason.split(":")[0]) for s in summary.skipped] == [(str(bad), "corrupt PDF")]
        assert store.check_consistency() == []


# -------------------------------------------------------------------------------------- code

PYTHON = '''"""Fare rules."""
import math

RATE = 3


def foo(x):
    """Return x plus the rate."""
    return x + RATE


@staticmethod
def decorated(y):
    return y * 2


class Bar:
    """A bar."""

    def method_one(self):
        return 1

    def method_two(self):
        return 2


async def fetch():
    return None


if __name__ == "__main__":
    print(foo(1))
'''


def test_python_chunks_follow_functions_and_classes(tmp_path: Path) -> None:
    path = tmp_path / "fares.py"
    path.write_text(PYTHON, encoding="utf-8")
    loaded, chunks = load_chunks(path)
    assert loaded.doc_type == "code" and loaded.metadata["language"] == "python"
    assert loaded.title == "fares.py"
    got = [(c.heading_path, c.text.splitlines()[0]) for c in chunks]
    assert got == [
        (["module"], '"""Fare rules."""'),
        (["def foo"], "def foo(x):"),
        (["def decorated"], "@staticmethod"),
        (["class Bar"], "class Bar:"),
        (["def fetch"], "async def fetch():"),
        (["module"], 'if __name__ == "__main__":'),
    ]
    bar = chunks[3]
    assert "def method_one" in bar.text and "def method_two" in bar.text  # whole class, one chunk
    assert "    def method_one(self):" in bar.text  # indentation kept


def test_python_big_class_split_at_methods_labelled_by_method(tmp_path: Path) -> None:
    methods = "\n".join(
        f"    def method_{i}(self, x):\n        \"\"\"Method {i} computes a fare for zone {i}.\"\"\"\n"
        f"        total = x * {i} + self.base\n        return round(total, 2)\n" for i in range(12))
    src = f"import math\n\n\nclass Big:\n    \"\"\"Big class.\"\"\"\n\n    base = 1\n\n{methods}\n\ndef after():\n    return 1\n"
    path = tmp_path / "big.py"
    path.write_text(src, encoding="utf-8")
    _, chunks = load_chunks(path, Settings(chunk_size=64))
    inside = [c for c in chunks if c.heading_path[:1] == ["class Big"]]
    assert len(inside) > 3
    assert inside[0].heading_path == ["class Big"] and inside[0].text.startswith("class Big:")
    for c in inside[1:]:
        first_def = c.text.split("(", 1)[0]
        assert first_def.startswith("def method_"), c.text[:40]
        assert c.heading_path == ["class Big", first_def]
    assert chunks[-1].heading_path == ["def after"]
    # every method's code is in exactly one chunk (no overlap for code)
    for i in range(12):
        assert sum(f"def method_{i}(" in c.text for c in chunks) == 1


def test_python_syntax_error_falls_back_with_warning(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("def broken(:\n    return 1\n\nprint('still text')\n", encoding="utf-8")
    loaded, chunks = load_chunks(path)
    assert any("could not parse" in w for w in loaded.warnings)
    assert chunks and "print('still text')" in chunks[-1].text


JAVASCRIPT = """// Fare helpers
const BASE = 1.8;

// Add two numbers.
function add(a, b) {
  return a + b;
}

class Ticket {
  constructor(zones) {
    this.zones = zones;
  }
  price() {
    return BASE * this.zones;
  }
}

export function cap(total) {
  return Math.min(total, 6.5);
}
"""


def test_javascript_units_via_tree_sitter(tmp_path: Path) -> None:
    path = tmp_path / "fares.js"
    path.write_text(JAVASCRIPT, encoding="utf-8")
    loaded, chunks = load_chunks(path)
    assert loaded.metadata["language"] == "javascript"
    assert [c.heading_path for c in chunks] == [
        ["const BASE"], ["function add"], ["class Ticket"], ["function cap"]]
    by_head = {c.heading_path[0]: c.text for c in chunks}
    assert by_head["function add"].startswith("// Add two numbers.\nfunction add(a, b) {")
    assert by_head["function add"].endswith("}")
    assert "price()" in by_head["class Ticket"] and "add(" not in by_head["class Ticket"]
    assert by_head["function cap"].startswith("export function cap(total)")


GO = """package fares

import "fmt"

// Ticket is a tram ticket.
type Ticket struct {
\tZones int
}

// Price returns the fare.
func (t Ticket) Price() float64 {
\treturn 1.8 * float64(t.Zones)
}

func Hello() {
\tfmt.Println("hi")
}
"""


def test_go_units_via_tree_sitter(tmp_path: Path) -> None:
    path = tmp_path / "fares.go"
    path.write_text(GO, encoding="utf-8")
    loaded, chunks = load_chunks(path)
    assert loaded.metadata["language"] == "go"
    assert [c.heading_path for c in chunks] == [
        ["module"], ["type Ticket"], ["method Price"], ["function Hello"]]
    assert chunks[1].text.startswith("// Ticket is a tram ticket.\ntype Ticket struct")
    assert chunks[2].text.startswith("// Price returns the fare.\nfunc (t Ticket) Price()")
    assert "\treturn 1.8" in chunks[2].text  # tabs kept in code


def test_javascript_syntax_error_falls_back_with_warning(tmp_path: Path) -> None:
    path = tmp_path / "bad.js"
    path.write_text("function ( {\n  return ;;; }}}\n", encoding="utf-8")
    loaded, chunks = load_chunks(path)
    assert any("could not parse as javascript" in w for w in loaded.warnings)
    assert len(chunks) == 1


# ----------------------------------------------------------------------------------- records

def test_jsonl_one_chunk_per_record_with_record_id(tmp_path: Path) -> None:
    rows = [
        {"id": "a1", "title": "First", "text": "The first record talks about trams."},
        {"id": 2, "text": "Second record about ferries."},
        {"name": "no text field", "count": 3},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n" + json.dumps(rows[2]) + "\n",
                    encoding="utf-8")
    loaded, chunks = load_chunks(path)
    assert loaded.doc_type == "records"
    assert [c.metadata["record_id"] for c in chunks] == ["a1", "2", "3"]
    assert chunks[0].text == "First\nThe first record talks about trams."
    assert chunks[0].heading_path == ["First"] and chunks[0].metadata["title"] == "First"
    assert chunks[1].text == "Second record about ferries."
    assert chunks[2].text == "name: no text field\ncount: 3"


def test_jsonl_invalid_line_is_skipped_with_line_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1, "text": "ok"}\n{not json}\n', encoding="utf-8")
    with SQLiteStore(tmp_path / "store") as store:
        summary = ingest_paths(store, [path])
        assert summary.added == 0
        assert "line 2" in summary.skipped[0].reason
        assert store.count_documents() == 0 and store.check_consistency() == []


def test_csv_one_chunk_per_row(tmp_path: Path) -> None:
    path = tmp_path / "timetable.csv"
    path.write_text("line,colour,from\n1,Red,Central\n2,Green,\"Old Market, North\"\n", encoding="utf-8")
    loaded, chunks = load_chunks(path)
    assert loaded.doc_type == "records" and loaded.metadata["format"] == "csv"
    assert [c.text for c in chunks] == ["line: 1\ncolour: Red\nfrom: Central",
                                        "line: 2\ncolour: Green\nfrom: Old Market, North"]
    assert [c.metadata["record_id"] for c in chunks] == ["1", "2"]


def test_tsv_and_id_column(tmp_path: Path) -> None:
    path = tmp_path / "stops.tsv"
    path.write_text("id\tname\tdescription\nS7\tCentral\tMain station\n", encoding="utf-8")
    _, chunks = load_chunks(path)
    assert len(chunks) == 1
    assert chunks[0].metadata["record_id"] == "S7"
    assert chunks[0].text == "Central\nMain station"


def test_json_list_under_one_key_and_keyed_objects(tmp_path: Path) -> None:
    (tmp_path / "stops.json").write_text(json.dumps({"stops": [
        {"id": "s1", "name": "Central", "description": "Main station"},
        {"id": "s2", "name": "Harbour", "description": "By the sea"}]}), encoding="utf-8")
    _, chunks = load_chunks(tmp_path / "stops.json")
    assert [(c.metadata["record_id"], c.heading_path, c.text) for c in chunks] == [
        ("s1", ["Central"], "Central\nMain station"), ("s2", ["Harbour"], "Harbour\nBy the sea")]
    (tmp_path / "kv.json").write_text(json.dumps({"a": {"x": 1}, "b": "hello"}), encoding="utf-8")
    _, chunks = load_chunks(tmp_path / "kv.json")
    assert [(c.metadata["record_id"], c.text) for c in chunks] == [("a", "key: a\nx: 1"),
                                                                   ("b", "key: b\nvalue: hello")]


def test_long_record_is_split_but_keeps_record_id(tmp_path: Path) -> None:
    long_text = " ".join(f"Sentence {i} about the harbour ferry timetable." for i in range(80))
    (tmp_path / "long.jsonl").write_text(json.dumps({"id": "big", "text": long_text}) + "\n"
                                         + json.dumps({"id": "small", "text": "Tiny."}) + "\n",
                                         encoding="utf-8")
    _, chunks = load_chunks(tmp_path / "long.jsonl", Settings(chunk_size=64))
    big = [c for c in chunks if c.metadata["record_id"] == "big"]
    assert len(big) > 3 and all(c.token_count <= 64 for c in big)
    assert [c.metadata["record_id"] for c in chunks][-1] == "small"


def test_invalid_json_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"a": [1, 2', encoding="utf-8")
    with pytest.raises(LoaderError, match="invalid JSON"):
        load_chunks(tmp_path / "bad.json")


# ---------------------------------------------------------------------------------- corpus

def test_sample_corpus_ingests_all_nine_files(tmp_path: Path, corpus_dir: Path) -> None:
    with SQLiteStore(tmp_path / "store") as store:
        summary = ingest_paths(store, [corpus_dir])
        assert summary.skipped == []
        assert summary.added == 9
        docs = {Path(d.source_path).name: d for d in store.list_documents()}
        assert set(docs) == {"SOURCES.md", "annual_report.pdf", "bridge_history.html", "faq.txt",
                             "timetable.csv", "tram_fares.py", "tram_network.md", "城市概况.html",
                             "茶叶研究所.md"}
        assert {d.doc_type for d in docs.values()} == {"markdown", "pdf", "html", "text", "records",
                                                      "code"}
        assert all(d.chunk_count > 0 for d in docs.values())
        assert summary.chunks == store.count_chunks() == sum(d.chunk_count for d in docs.values())
        assert store.check_consistency() == []
        pdf_pages = {c.page for c in store.iter_chunks(docs["annual_report.pdf"].doc_id)}
        assert pdf_pages == {1, 2, 3}
        html_text = " ".join(c.text for c in store.iter_chunks(docs["bridge_history.html"].doc_id))
        assert "cookie" not in html_text.lower()
        assert docs["tram_network.md"].title == "The Lindenport Tram Network"
