"""Token counting that needs no model file.

Sizes in SPEC A3 are in tokens. We approximate a multilingual subword tokenizer (XLM-R style,
as used by multilingual-e5): each CJK character is one token, a Latin/digit word is one token
per ~6 characters (long words split into pieces), and each other symbol is one token. This keeps
chunk sizes comparable between Chinese and English text, which a character count would not.
"""

from __future__ import annotations

import re

_CJK = (
    "\u3040-\u30ff"  # kana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\uac00-\ud7af"  # hangul
)
TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")
_WORD_PIECE = 6
# the words that weigh more than one token: a word is a maximal run, so these are whole tokens
_LONG_WORD_RE = re.compile(rf"[^\W{_CJK}]{{{_WORD_PIECE + 1},}}")


def _weight(tok: str) -> int:
    return 1 if len(tok) <= _WORD_PIECE else -(-len(tok) // _WORD_PIECE)


def count_tokens(text: str) -> int:
    """Approximate number of model tokens in `text`.

    Chunking calls this on every piece it tries, so it avoids a Python step per token: `subn`
    counts the tokens in C without keeping them, and only the long words add their extra weight.
    """
    n = TOKEN_RE.subn("", text)[1]
    return n + sum(_weight(m.group()) - 1 for m in _LONG_WORD_RE.finditer(text))


def token_spans(text: str) -> list[tuple[int, int, int]]:
    """(start, end, weight) of every token in `text`, in order."""
    return [(s, e, 1 if e - s <= _WORD_PIECE else -(-(e - s) // _WORD_PIECE))
            for s, e in (m.span() for m in TOKEN_RE.finditer(text))]


def bounded_token_spans(text: str, limit: int) -> list[tuple[int, int, int]]:
    """`token_spans`, with every token heavier than `limit` cut into consecutive pieces of at most
    `limit` each, so that no window of `limit` tokens has to hold more (a hex dump or a long
    URL path is one "word" of thousands of tokens).

    Only a word can weigh more than 1, and every slice of a word is a word, weighing one token per
    `_WORD_PIECE` characters: a piece of `limit * _WORD_PIECE` characters is the longest that
    weighs `limit`. The pieces' weights add up to the token's, as `count_tokens` counts them.
    """
    width = limit * _WORD_PIECE
    out: list[tuple[int, int, int]] = []
    for s, e, w in token_spans(text):
        if w <= limit:
            out.append((s, e, w))
            continue
        for a in range(s, e, width):
            b = min(a + width, e)
            out.append((a, b, _weight(text[a:b])))
    return out
