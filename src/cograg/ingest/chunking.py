"""Chunking strategies (SPEC A3): fixed, semantic, recursive, code and records.

All strategies work on spans of one normalised block and return `(start, end)` offsets, so the
caller can map them back to the source. Sizes are in tokens (`cograg.ingest.tokens`); no chunk is
larger than `chunk_size`: a single token that is (a long URL, a hex dump) is cut into pieces.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cograg.config import ChunkingConfig
from cograg.ingest.tokens import bounded_token_spans, count_tokens

# Coarse → fine. Sentence punctuation keeps both the CJK and the NFKC-folded ASCII forms, since
# normalisation turns ！？； into !?; while 。 stays. A bare ";" (not "; "): Chinese text has no
# space after the folded ；.
PROSE_SEPARATORS: tuple[str, ...] = (
    "\n\n", "\n", "。", "！", "？", "；", "!", "?", ". ", ";", "，", ",", ": ", " ",
)
CODE_SEPARATORS: dict[str, tuple[str, ...]] = {
    "python": ("\nclass ", "\ndef ", "\n    def ", "\n\n", "\n"),
    "javascript": ("\nclass ", "\nfunction ", "\nexport ", "\n  ", "\n\n", "\n"),
    "go": ("\nfunc ", "\ntype ", "\n\n", "\n"),
    "generic": ("\n\n\n", "\n\n", "\n"),
}

Span = tuple[int, int]


def fixed_spans(text: str, size: int, overlap: int, base: int = 0) -> list[Span]:
    """Windows of `size` tokens, each starting `size - overlap` tokens after the previous one.

    Every splitter falls back to this one, so it alone has to cut a run without separators
    (`"y" * 20000`): such a token comes in pieces of at most `size`, never as one window."""
    toks = bounded_token_spans(text, size)
    if not toks:
        return [(base, base + len(text))] if text.strip() else []
    spans: list[Span] = []
    i = 0
    while i < len(toks):
        total, j = 0, i
        while j < len(toks) and (total + toks[j][2] <= size or j == i):
            total += toks[j][2]
            j += 1
        spans.append((base + toks[i][0], base + toks[j - 1][1]))
        if j >= len(toks):
            break
        # step back by `overlap` tokens, but always move forward, and keep only as much overlap
        # as leaves room for the next token (a full-size piece of a cut one): a window of the
        # overlap alone would repeat the end of this one
        back, k = 0, j
        room = min(overlap, size - toks[j][2])
        while k > i + 1 and back + toks[k - 1][2] <= room:
            back += toks[k - 1][2]
            k -= 1
        i = k
    return spans


def _split_keep(text: str, start: int, end: int, sep: str) -> list[Span]:
    """Split text[start:end] after each occurrence of `sep` (the separator stays with the left
    piece, so sentences keep their full stop). For separators that open a unit ("\\ndef "), the
    cut goes before the separator instead."""
    opens = sep.startswith("\n") and len(sep.strip()) > 0
    pieces: list[Span] = []
    cur = start
    pos = text.find(sep, start, end)
    while pos != -1:
        cut = pos + 1 if opens else pos + len(sep)
        if cut > cur and cut < end:
            pieces.append((cur, cut))
            cur = cut
        pos = text.find(sep, pos + len(sep), end)
    pieces.append((cur, end))
    return [p for p in pieces if p[1] > p[0]]


def _merge(text: str, pieces: list[Span], size: int, overlap: int) -> list[Span]:
    """Greedily merge consecutive pieces up to `size` tokens; the next chunk starts with the
    trailing pieces of the previous one that fit in `overlap` tokens."""
    counted = [(s, e, count_tokens(text[s:e])) for s, e in pieces]
    out: list[Span] = []
    window: list[tuple[int, int, int]] = []
    total = 0
    for s, e, n in counted:
        if window and total + n > size:
            out.append((window[0][0], window[-1][1]))
            while window and (total > overlap or total + n > size):
                total -= window[0][2]
                window.pop(0)
        window.append((s, e, n))
        total += n
    if window:
        last = (window[0][0], window[-1][1])
        if not out or last[1] > out[-1][1]:
            out.append(last)
    return out


def recursive_spans(
    text: str, size: int, overlap: int, separators: Sequence[str] = PROSE_SEPARATORS,
    start: int = 0, end: int | None = None,
) -> list[Span]:
    """Split on the coarsest separator present; recurse into pieces still over `size`; merge
    small neighbours back up to `size` with overlap."""
    end = len(text) if end is None else end
    if count_tokens(text[start:end]) <= size:
        return [(start, end)] if text[start:end].strip() else []
    for i, sep in enumerate(separators):
        if text.find(sep, start, end) == -1:
            continue
        pieces: list[Span] = []
        for s, e in _split_keep(text, start, end, sep):
            if count_tokens(text[s:e]) > size:
                pieces.extend(recursive_spans(text, size, 0, separators[i + 1:], s, e))
            else:
                pieces.append((s, e))
        return _merge(text, pieces, size, overlap)
    return fixed_spans(text[start:end], size, overlap, base=start)


def chunk_block(text: str, config: ChunkingConfig, *, language: str | None = None) -> list[Span]:
    """Chunk spans of one normalised block under `config`."""
    size, overlap = config.chunk_size, config.chunk_overlap
    if config.strategy == "fixed":
        spans = fixed_spans(text, size, overlap)
    elif config.strategy == "code":
        seps = CODE_SEPARATORS.get(language or "generic", CODE_SEPARATORS["generic"])
        spans = recursive_spans(text, size, overlap, seps + PROSE_SEPARATORS[1:])
    elif config.strategy == "semantic":
        # a block is already one section; inside it, paragraphs first
        spans = recursive_spans(text, size, overlap, PROSE_SEPARATORS)
    else:  # recursive, records
        spans = recursive_spans(text, size, overlap, PROSE_SEPARATORS)
    return [_trim(text, s, e) for s, e in spans if text[s:e].strip()]


_LEAD = re.compile(r"\s*")


def _trim(text: str, s: int, e: int) -> Span:
    s = _LEAD.match(text, s).end()
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e
