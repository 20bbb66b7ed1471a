"""The code loader: a source file split into its top-level functions and classes (Python by `ast`,
JavaScript and Go by tree-sitter), each unit a block headed by what it is ("def load", "class
Store"), module-level code between them grouped; a file that does not parse stays one block, with a
warning, and other languages are one block.

A source file over `max_code_mb` (the setting, 2 MB by default; COGRAG_MAX_CODE_MB) is skipped
with that reason before it is read: parsing and
chunking code cost far more than its size (an 8 MB file took minutes and gigabytes), and files that
large are minified bundles, amalgamations or generated tables, whose chunks are noise in retrieval.
"""

from __future__ import annotations

import ast
import re

from cograg.errors import LoaderError
from cograg.ingest.files import CODE_LANGUAGE, FileInfo, read_text
from cograg.ingest.models import Block, LoadedDocument

# Why the default limit (Settings.max_code_mb) is 2 MB. Measured (benchmarks/code_ingest.py, busy
# 2-core box, linear offsets): small JS functions 2.5 MB 8 s / 195 MB RSS, 8 MB 40 s / 440 MB; one
# long expression (a minified bundle's shape) 1 MB 12 s / 285 MB. Hand-written source files stay far
# below 1 MB, so a bigger one is generated or minified: skipped, not parsed. As .txt it would ingest.


def load_code(info: FileInfo) -> LoadedDocument:
    _check_size(info)
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


def _check_size(info: FileInfo) -> None:
    """Refuse a source file over its `max_code_mb` before reading it (see the module docstring: why)."""
    if info.size > info.max_code_mb * 1e6:
        raise LoaderError(f"code file too large to split ({info.size / 1e6:.1f} MB > {info.max_code_mb:g} MB, "
                          "the max_code_mb setting); likely minified or generated")


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

    char_at = _CharOffsets(data, len(text))

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


# UTF-8 continuation bytes (0b10xxxxxx): every other byte starts one character
_CONTINUATION = bytes(range(0x80, 0xC0))


class _CharOffsets:
    """Character offset of a byte offset into UTF-8 `data`, tree-sitter's unit boundaries being in
    bytes. Queries come nearly in order (a unit, the comments just above it, the next unit), so each
    one counts only the characters between it and the previous query: linear in the file overall,
    where decoding from the start each time made a file of many small functions quadratic."""

    def __init__(self, data: bytes, n_chars: int) -> None:
        self._data = data
        self._ascii = len(data) == n_chars  # then bytes are characters
        self._byte = 0
        self._char = 0

    def __call__(self, byte: int) -> int:
        if self._ascii:
            return byte
        lo, hi = sorted((self._byte, byte))
        chars = len(self._data[lo:hi].translate(None, _CONTINUATION))
        self._char += chars if byte >= self._byte else -chars
        self._byte = byte
        return self._char


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
