"""The code loader: a source file split into its top-level functions and classes (Python by `ast`,
JavaScript and Go by tree-sitter), each unit a block headed by what it is ("def load", "class
Store"), module-level code between them grouped; a file that does not parse stays one block, with a
warning, and other languages are one block.
"""

from __future__ import annotations

import ast
import re

from cograg.ingest.files import CODE_LANGUAGE, FileInfo, read_text
from cograg.ingest.models import Block, LoadedDocument


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
