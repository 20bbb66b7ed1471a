"""Text normalisation (SPEC A2) that remembers where every character came from.

NFKC, control characters removed, whitespace collapsed — and an :class:`OffsetMap` from positions in
the normalised text back to positions in the original text, so a citation made against normalised
chunk text can point at the exact span of the source.

Only spans that actually change are recorded, so ordinary text (single spaces, CJK that NFKC leaves
alone) costs nothing and a 50 MB file does not produce millions of map entries.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache

# Spans that may need rewriting: whitespace that is not a lone ' ' or '\n', ASCII control
# characters, and runs of non-ASCII non-space characters (NFKC, format characters) together with
# the ASCII letter before them, so a combining accent composes with its base letter.
_CHANGE_RE = re.compile(
    r"(?P<ws>[^\S \n]\s*|\s{2,})|(?P<ctl>[\x00-\x08\x0e-\x1b\x7f]+)|(?P<uni>[!-~]?[^\x00-\x7f\s]+)"
)
_NEWLINE_RE = re.compile(r"\r\n|[\n\r\f\v\x1c-\x1e\x85\u2028\u2029]")


@dataclass
class OffsetMap:
    """Maps normalised offsets to original offsets.

    Each recorded segment says: normalised ``[n, n+nlen)`` came from original ``[o, o+olen)``.
    Outside segments the two texts advance in lock-step.
    """

    norm_starts: list[int] = field(default_factory=list)
    norm_lens: list[int] = field(default_factory=list)
    orig_starts: list[int] = field(default_factory=list)
    orig_lens: list[int] = field(default_factory=list)

    def add(self, norm_start: int, norm_len: int, orig_start: int, orig_len: int) -> None:
        self.norm_starts.append(norm_start)
        self.norm_lens.append(norm_len)
        self.orig_starts.append(orig_start)
        self.orig_lens.append(orig_len)

    def to_original(self, pos: int) -> int:
        """Original offset of normalised position `pos` (a start or an exclusive end)."""
        i = bisect_right(self.norm_starts, pos) - 1
        if i < 0:
            return pos
        n, nlen, o, olen = self.norm_starts[i], self.norm_lens[i], self.orig_starts[i], self.orig_lens[i]
        if pos >= n + nlen:
            return o + olen + (pos - n - nlen)
        if nlen == olen:
            return o + (pos - n)
        # inside a span whose length changed: map proportionally, never past the span
        return o + min(olen, (pos - n) * olen // max(nlen, 1))


@dataclass
class Normalized:
    text: str
    offsets: OffsetMap

    def to_original(self, pos: int) -> int:
        return self.offsets.to_original(pos)


def _collapse_ws(run: str, keep_indentation: bool) -> str:
    newlines = len(_NEWLINE_RE.findall(run))
    if "\f" in run:  # a form feed is a page/section break
        newlines = max(newlines, 2)
    if newlines == 0:
        if keep_indentation:
            return run.replace("\u3000", " ").replace("\u00a0", " ")
        return " "
    out = "\n" * min(newlines, 2)
    if keep_indentation:
        tail = _NEWLINE_RE.split(run)[-1]
        out += "".join(c if c in " \t" else " " for c in tail)
    return out


def _nfkc_clean(run: str) -> str:
    out = unicodedata.normalize("NFKC", run)
    if any(unicodedata.category(c) in ("Cc", "Cf", "Co", "Cs") for c in out):
        out = "".join(c for c in out if unicodedata.category(c) not in ("Cc", "Cf", "Co", "Cs"))
    return out


@lru_cache(maxsize=8192)
def _one_to_one(c: str) -> bool:
    return not unicodedata.combining(c) and len(_nfkc_clean(c)) == 1


def _same_lengths(run: str) -> bool:
    """True when every character of `run` normalises to exactly one character, so an unchanged
    length means the run maps character for character."""
    return all(_one_to_one(c) for c in set(run))


def _clusters(run: str) -> list[tuple[int, int]]:
    """Split a run into (start, end) clusters of a starter plus its combining marks, so NFKC can
    compose e + U+0301 into é without losing track of where each output character came from."""
    spans: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(run) + 1):
        if i == len(run) or unicodedata.combining(run[i]) == 0:
            spans.append((start, i))
            start = i
    return spans


def normalize(text: str, *, keep_indentation: bool = False, strip: bool = True) -> Normalized:
    """Normalise `text` (NFKC, no control characters, collapsed whitespace) with an offset map.

    `keep_indentation` keeps line structure and leading indentation (for source code); otherwise
    runs of spaces become one space and runs of blank lines become one paragraph break.
    """
    pieces: list[str] = []
    omap = OffsetMap()
    norm_pos = 0
    orig_pos = 0

    def emit_verbatim(upto: int) -> None:
        nonlocal norm_pos, orig_pos
        if upto > orig_pos:
            pieces.append(text[orig_pos:upto])
            norm_pos += upto - orig_pos
            orig_pos = upto

    for m in _CHANGE_RE.finditer(text):
        run = m.group(0)
        if m.lastgroup == "ws":
            new = _collapse_ws(run, keep_indentation)
        elif m.lastgroup == "ctl":
            new = ""
        else:
            new = _nfkc_clean(run)
        if new == run:
            continue
        emit_verbatim(m.start())
        if m.lastgroup == "uni" and (len(new) != len(run) or not _same_lengths(run)):
            # lengths changed somewhere (ligatures, composed accents, removed zero-width chars —
            # even when they cancel out over the run): map per cluster; clusters that keep their
            # length advance in lock-step and need no entry
            for cs, ce in _clusters(run):
                piece = _nfkc_clean(run[cs:ce])
                if len(piece) != ce - cs:
                    omap.add(norm_pos, len(piece), m.start() + cs, ce - cs)
                pieces.append(piece)
                norm_pos += len(piece)
        else:
            omap.add(norm_pos, len(new), m.start(), len(run))
            pieces.append(new)
            norm_pos += len(new)
        orig_pos = m.end()
    emit_verbatim(len(text))
    out = "".join(pieces)

    if strip and out and (out[0].isspace() or out[-1].isspace()):
        lead = len(out) - len(out.lstrip())
        out = out.strip()
        if lead:
            shifted = OffsetMap()
            shifted.add(0, 0, omap.to_original(lead), 0)
            for n, nl, o, ol in zip(omap.norm_starts, omap.norm_lens, omap.orig_starts, omap.orig_lens):
                if n + nl > lead:
                    cut = max(0, lead - n)
                    shifted.add(n + cut - lead, nl - cut, o + (cut if nl == ol else 0), ol - (cut if nl == ol else 0))
            omap = shifted
    return Normalized(out, omap)
