"""JSON schema → GBNF grammar for llama.cpp, with string constants written as the model writes them.

llama-cpp-python's converter (`llama_cpp.llama_grammar.json_schema_to_gbnf`) renders an `enum` or
`const` string as `json.dumps(value)` inside a GBNF literal. Two things go wrong with text:
non-ASCII characters become `\\uXXXX` escapes, so a Chinese constant can only be produced by a model
spelling out escape sequences it never writes, and a JSON escape (`\\"` for a quotation mark inside
the value) is not escaped again for GBNF, so its backslash ends the literal and the grammar breaks.
An enum of source sentences (`cograg.answer.contract.verbatim_draft_schema`) has both. Here a constant
is the JSON text with its characters as they are (`ensure_ascii=False`), escaped once for GBNF.
"""

from __future__ import annotations

import json
from typing import Any

_GBNF_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal (UTF-8 as is; backslash, quote and line breaks escaped)."""
    return '"' + "".join(_GBNF_ESCAPES.get(ch, ch) for ch in text) + '"'


def json_constant_literal(value: Any) -> str:
    """The GBNF literal of the JSON text of `value`, exactly as a model writes it."""
    return gbnf_literal(json.dumps(value, ensure_ascii=False))


def json_schema_to_gbnf(schema_json: str, field_order: tuple[str, ...] = ()) -> str:
    """llama-cpp-python's converter with `json_constant_literal` for every enum and const value.
    `field_order` puts the named properties first, in that order (the converter still writes
    required properties before optional ones); the others keep the order of `schema_json`."""
    from llama_cpp import llama_grammar

    class _Converter(llama_grammar.SchemaConverter):  # type: ignore[misc,name-defined]
        def _generate_constant_rule(self, value: Any) -> str:
            return json_constant_literal(value)

    schema = json.loads(schema_json)
    converter = _Converter(prop_order={name: i for i, name in enumerate(field_order)}, allow_fetch=False,
                           dotall=False, raw_pattern=False)
    schema = converter.resolve_refs(schema, "stdin")
    converter.visit(schema, "")
    return str(converter.format_grammar())


def patch_constant_literals() -> None:
    """Give llama-cpp-python's own converter `json_constant_literal` (for `llama_cpp.server`, which
    converts a request's `response_format` schema itself)."""
    from llama_cpp import llama_grammar

    llama_grammar.SchemaConverter._generate_constant_rule = lambda self, value: json_constant_literal(value)


__all__ = ["gbnf_literal", "json_constant_literal", "json_schema_to_gbnf", "patch_constant_literals"]
