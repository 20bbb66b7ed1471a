"""Terms for the keyword index (SPEC A6): Chinese, English and mixed text.

CJK runs are segmented with jieba in search mode (words plus their shorter sub-words, so both
"北京大学" and "大学" match); Latin words are lower-cased, stop words dropped, Snowball-stemmed.
The same function analyses documents and queries, so they meet on the same terms.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from functools import lru_cache

import jieba
import Stemmer

from cograg.text import without_invisible

# Stored in each store; a store indexed with another version has its keyword index rebuilt.
ANALYZER_VERSION = "jieba-search+bigram+snowball-en/1"

_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]+")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_MAX_TERM_LEN = 40

# Snowball's English stop list, trimmed to function words that carry no retrieval signal.
STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves
""".split())
# Chinese particles and punctuation-like words that jieba emits as words.
ZH_STOPWORDS = frozenset("的 了 和 是 在 也 就 都 而 及 与 着 或 之 于 其 这 那 个 被 把 让 从 对 为 以 等 吗 呢 吧 啊".split())

_jieba_lock = threading.Lock()
_jieba_ready = False


def _init_jieba() -> None:
    global _jieba_ready
    with _jieba_lock:
        if not _jieba_ready:
            jieba.setLogLevel(logging.WARNING)
            jieba.initialize()
            _jieba_ready = True


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def analyze(text: str) -> list[str]:
    """Index/query terms of `text`, in order, duplicates kept (BM25 needs term frequencies)."""
    if not _jieba_ready:
        _init_jieba()
    # documents reach here already without invisible characters; a query may still hold them
    text = without_invisible(unicodedata.normalize("NFKC", text)).lower()
    terms: list[str] = []
    latin: list[str] = []
    pos = 0
    for m in _CJK_RUN.finditer(text):
        latin.extend(_WORD.findall(text, pos, m.start()))
        _flush_latin(latin, terms)
        run = m.group()
        for w in jieba.cut_for_search(run, HMM=True):
            if w not in ZH_STOPWORDS:
                terms.append(w)
        # character bigrams catch what segmentation splits differently in query and passage
        terms.extend(run[i:i + 2] for i in range(len(run) - 1))
        pos = m.end()
    latin.extend(_WORD.findall(text, pos))
    _flush_latin(latin, terms)
    return terms


def _flush_latin(words: list[str], terms: list[str]) -> None:
    if not words:
        return
    kept = [w.replace("’", "'") for w in words if w not in STOPWORDS and len(w) <= _MAX_TERM_LEN]
    terms.extend(_stemmer().stemWords(kept))
    words.clear()


def fts_document(text: str) -> str:
    """The analysed text as stored in the FTS5 table (terms joined by spaces)."""
    return " ".join(analyze(text))


def query_terms(text: str, *, max_terms: int = 64) -> list[str]:
    """The distinct analysed terms of a query, in order, at most `max_terms`."""
    seen: dict[str, None] = {}
    for t in analyze(text):
        if t not in seen:
            seen[t] = None
        if len(seen) >= max_terms:
            break
    return list(seen)


def fts_match(terms: list[str]) -> str | None:
    """An FTS5 MATCH expression OR-ing `terms` (already analysed); None when there are none."""
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def fts_query(text: str, *, max_terms: int = 64) -> str | None:
    """An FTS5 MATCH expression OR-ing the distinct query terms; None when nothing is searchable."""
    return fts_match(query_terms(text, max_terms=max_terms))
