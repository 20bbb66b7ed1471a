"""Chunking (SPEC A3): token counting and the fixed / semantic / recursive / code / records
strategies, plus how chunking is configured."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from cograg.config import DEFAULT_CHUNKING, ChunkingConfig, Settings
from cograg.ingest.chunking import chunk_block
from cograg.ingest.normalize import normalize
from cograg.ingest.tokens import bounded_token_spans, count_tokens, token_spans

pytestmark = pytest.mark.usefixtures("ingest_env")

STRATEGIES = ["fixed", "semantic", "recursive", "code", "records"]


# ----------------------------------------------------------------------------- tokens

@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("   \n\t", 0),
    ("林登港", 3),                          # one token per CJK character
    ("林登港茶叶研究所成立于一九五二年", 16),
    ("ひらがなカタカナ", 8),                 # kana
    ("한국어", 3),                           # hangul
    ("hello world", 2),                      # one per short word
    ("The tram runs", 3),
    ("The tram network", 4),                 # "network" has 7 characters: two pieces
    ("Hello, world!", 4),                    # punctuation is a token
    ("internationalisation", 4),             # long words: one per ~6 characters
    ("abcdef", 1),
    ("abcdefg", 2),
    ("2023 3.5", 4),
    ("我爱Python和Go。", 6),                  # 我 爱 Python 和 Go 。
])
def test_count_tokens(text: str, expected: int) -> None:
    assert count_tokens(text) == expected


def test_cjk_counted_per_character_not_per_run() -> None:
    """A Chinese sentence has no spaces; counting words would make it one token."""
    zh = "有轨电车网络是城市公共交通的骨干"
    assert count_tokens(zh) == len(zh)
    en = "the tram line is the main part of public bus in the city"  # words of <= 6 letters
    assert count_tokens(en) == len(en.split())


def test_token_spans_agree_with_count() -> None:
    text = "Lindenport 林登港 internationalisation, 2023!"
    spans = token_spans(text)
    assert sum(w for _, _, w in spans) == count_tokens(text)
    assert [text[s:e] for s, e, _ in spans] == [
        "Lindenport", "林", "登", "港", "internationalisation", ",", "2023", "!"]


@pytest.mark.parametrize("limit", [1, 2, 16, 256])
def test_bounded_token_spans_cut_only_tokens_over_the_limit(limit: int) -> None:
    run = "y" * 20000
    text = f"See 林登港 internationalisation {run}!"
    spans = bounded_token_spans(text, limit)
    # same text, same total weight; each piece weighs what count_tokens says, within the limit
    assert "".join(text[s:e] for s, e, _ in spans) == "".join(text.split())
    assert sum(w for _, _, w in spans) == count_tokens(text)
    assert all(w == count_tokens(text[s:e]) and w <= limit for s, e, w in spans)
    whole = [t for t in token_spans(text) if t[2] <= limit]
    assert set(whole) <= set(spans), "tokens within the limit are kept as they are"
    # the run is cut at the last character that keeps a piece within the limit
    pieces = [text[s:e] for s, e, _ in spans if "y" in text[s:e]]
    assert all(count_tokens(p + "y") > limit for p in pieces[:-1])


# ---------------------------------------------------------------------------- strategies

_WORDS = ["tram", "network", "the", "Lindenport", "of", "a", "internationalisation", "x" * 40,
          "42", "3.5", "café"]
_ZH = list("林登港茶叶研究所位于城市北部成立于一九五二年有轨电车")
_PUNCT = [". ", ", ", "; ", "! ", "? ", "。", "，", "！", "？", "；", "\n", "\n\n", " ", " "]


def _mixed_text(seed: int) -> str:
    rnd = random.Random(seed)
    out = []
    for _ in range(rnd.randint(5, 700)):
        r = rnd.random()
        if r < 0.45:
            out.append(rnd.choice(_WORDS) + " ")
        elif r < 0.8:
            out.append("".join(rnd.choice(_ZH) for _ in range(rnd.randint(1, 8))))
        else:
            out.append(rnd.choice(_PUNCT))
    return normalize("".join(out)).text


def _assert_chunk_invariants(text: str, spans: list[tuple[int, int]], size: int,
                             overlap: int) -> None:
    assert spans, "non-empty text must give at least one chunk"
    for s, e in spans:
        piece = text[s:e]
        assert piece and piece == piece.strip(), "chunks are trimmed and non-empty"
        n = count_tokens(piece)
        assert n <= size, f"chunk of {n} tokens > {size}: {piece[:80]!r}"
    # in order: starts and ends strictly increase
    for (a, b), (c, d) in zip(spans, spans[1:]):
        assert c > a and d > b
    # every non-space character is in some chunk
    covered = bytearray(len(text))
    for s, e in spans:
        covered[s:e] = b"\x01" * (e - s)
    missing = [i for i, ch in enumerate(text) if not ch.isspace() and not covered[i]]
    assert not missing, f"not covered: {text[missing[0]:missing[0] + 20]!r}"
    if overlap == 0:
        # without overlap the chunks are a partition of the non-space text
        joined = "".join("".join(text[s:e].split()) for s, e in spans)
        assert joined == "".join(text.split())


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strategy_invariants_on_random_mixed_text(strategy: str) -> None:
    for seed in range(60):
        rnd = random.Random(seed)
        size = rnd.choice([16, 32, 64, 256])
        overlap = rnd.choice([0, size // 8, size // 4])
        text = _mixed_text(seed)
        if not text:
            continue
        cfg = ChunkingConfig(strategy=strategy, chunk_size=size, chunk_overlap=overlap)
        _assert_chunk_invariants(text, chunk_block(text, cfg), size, overlap)


def test_short_text_is_one_chunk_and_blank_text_none() -> None:
    cfg = ChunkingConfig(strategy="recursive", chunk_size=64, chunk_overlap=8)
    assert chunk_block("A short paragraph.", cfg) == [(0, len("A short paragraph."))]
    assert chunk_block("   \n\n ", cfg) == []


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_oversized_token_is_cut_into_pieces_within_size(strategy: str) -> None:
    """A "word" heavier than chunk_size (a long URL) is cut, not kept whole as one big chunk."""
    url = "https://example.org/" + "a" * 400  # "a" * 400 is one "word" of 67 tokens
    text = f"See {url} for details."
    spans = chunk_block(text, ChunkingConfig(strategy=strategy, chunk_size=16, chunk_overlap=0))
    _assert_chunk_invariants(text, spans, 16, 0)
    assert len(spans) >= 5
    # pieces of 16 tokens = 96 characters, the longest that fit
    assert "a" * 96 in [text[s:e] for s, e in spans]


_BLOB = "y" * 20000  # 3334 tokens without a single space or separator


def _long_runs() -> list[str]:
    """Real inputs without whitespace: a run of one letter, base64, minified code, a long URL."""
    rnd = random.Random(5)
    b64 = "".join(rnd.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                  for _ in range(20000)) + "=="
    minified = "function f(a){return a*2}" * 800
    url = "https://example.org/download?token=" + "Zm9vYmFy" * 2500
    return [_BLOB, b64, minified, url]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("size", [16, 256])
def test_long_run_without_whitespace_is_cut_to_chunk_size(strategy: str, size: int) -> None:
    """Regression: 20 000 "y"s were one chunk of 3334 tokens against chunk_size 256."""
    for run in _long_runs():
        text = normalize(run).text
        spans = chunk_block(text, ChunkingConfig(strategy=strategy, chunk_size=size,
                                                 chunk_overlap=size // 8))
        _assert_chunk_invariants(text, spans, size, size // 8)
        assert len(spans) >= count_tokens(text) // size
    spans = chunk_block(_BLOB, ChunkingConfig(strategy=strategy, chunk_size=size, chunk_overlap=0))
    # cut at the last character that keeps a piece within the limit: size * 6 characters
    assert [e - s for s, e in spans][:-1] == [size * 6] * (len(spans) - 1)
    assert "".join(_BLOB[s:e] for s, e in spans) == _BLOB


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_long_run_between_sentences_keeps_the_sentences_whole(strategy: str) -> None:
    before = "The tram network opened in 1952 and now has four lines."
    after = "Fares are paid with a card at the stop."
    text = f"{before} {_BLOB} {after}"
    spans = chunk_block(text, ChunkingConfig(strategy=strategy, chunk_size=64, chunk_overlap=8))
    _assert_chunk_invariants(text, spans, 64, 8)
    pieces = [text[s:e] for s, e in spans]
    assert any(before in p for p in pieces), pieces[:2]
    assert any(after in p for p in pieces), pieces[-2:]
    if strategy != "fixed":  # fixed windows ignore sentences; the others cut before the run
        assert pieces[0] == before


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strategy_invariants_on_mixed_text_with_long_runs(strategy: str) -> None:
    for seed in range(20):
        rnd = random.Random(seed)
        size = rnd.choice([16, 32, 64, 256])
        overlap = rnd.choice([0, size // 8, size // 4])
        parts = [_mixed_text(seed), rnd.choice("xyz") * rnd.randint(size * 6, size * 30),
                 _mixed_text(seed + 100)]
        text = normalize((" " if seed % 2 else "").join(parts)).text
        cfg = ChunkingConfig(strategy=strategy, chunk_size=size, chunk_overlap=overlap)
        _assert_chunk_invariants(text, chunk_block(text, cfg), size, overlap)


@pytest.mark.parametrize(("name", "content"), [
    ("l.txt", _BLOB + "\n"),
    ("l.md", "# Blob\n\nSome prose before it.\n\n" + "y" * 100000 + "\n\nSome prose after it.\n"),
])
def test_ingested_long_run_chunks_stay_within_chunk_size(tmp_path, name: str, content: str) -> None:
    """The reported shapes, through the pipeline: chunks are verbatim slices of at most 256
    tokens (the .md was one chunk of 16 667 tokens that took 38 s to embed)."""
    from cograg.index.sqlite_store import SQLiteStore
    from cograg.ingest.pipeline import ingest_paths

    doc = tmp_path / "docs" / name
    doc.parent.mkdir()
    doc.write_text(content, encoding="utf-8")
    with SQLiteStore(tmp_path / "store") as store:
        ingest_paths(store, [doc.parent], settings=Settings())
        chunks = list(store.iter_chunks(store.list_documents()[0].doc_id))
    assert max(c.token_count for c in chunks) == 256
    assert all(c.token_count == count_tokens(c.text) <= 256 for c in chunks)
    assert all(content[c.orig_start:c.orig_end] == c.text for c in chunks)
    run = max(content.split(), key=len)
    assert "".join(c.text for c in chunks if c.text.startswith("yyy")).split()[0] == run
    if name.endswith(".md"):
        assert chunks[0].text == "# Blob\n\nSome prose before it."
        assert chunks[-1].text.endswith("\n\nSome prose after it.")


def _sentences(seed: int, n: int) -> str:
    rnd = random.Random(seed)
    words = "tram line stop fare card zone city bridge river harbour market station".split()
    return " ".join(" ".join(rnd.choice(words) for _ in range(rnd.randint(3, 7))).capitalize() + "."
                    for _ in range(n))


def test_fixed_windows_overlap_by_configured_tokens() -> None:
    text = _sentences(1, 80)
    spans = chunk_block(text, ChunkingConfig(strategy="fixed", chunk_size=32, chunk_overlap=8))
    assert len(spans) > 5
    for (a, b), (c, d) in zip(spans, spans[1:]):
        assert c < b, "consecutive fixed windows overlap"
        # 8 tokens, or 7 when the next word back is a two-piece word that does not fit
        assert 7 <= count_tokens(text[c:b]) <= 8
    assert all(count_tokens(text[s:e]) <= 32 for s, e in spans)


def test_fixed_without_overlap_does_not_repeat_text() -> None:
    text = _sentences(2, 80)
    spans = chunk_block(text, ChunkingConfig(strategy="fixed", chunk_size=32, chunk_overlap=0))
    for (a, b), (c, d) in zip(spans, spans[1:]):
        assert c >= b
    # windows are full: 32 tokens, or 31 when the next word is a two-piece word
    assert all(31 <= count_tokens(text[s:e]) <= 32 for s, e in spans[:-1])


def test_recursive_overlap_repeats_whole_trailing_sentences() -> None:
    text = _sentences(1, 80)
    spans = chunk_block(text, ChunkingConfig(strategy="recursive", chunk_size=32, chunk_overlap=8))
    overlaps = [(c, b) for (a, b), (c, d) in zip(spans, spans[1:]) if c < b]
    assert len(overlaps) >= len(spans) // 2, "most consecutive chunks share text"
    for c, b in overlaps:
        shared = text[c:b]
        assert count_tokens(shared) <= 8
        # the shared text is whole sentences: it starts a sentence and ends with a full stop
        assert shared.rstrip().endswith(".") and shared[0].isupper()
    # recursive chunks end at sentence boundaries when sentences fit
    assert all(text[s:e].endswith(".") for s, e in spans)


def test_recursive_without_overlap_never_repeats() -> None:
    text = _sentences(3, 80)
    spans = chunk_block(text, ChunkingConfig(strategy="recursive", chunk_size=32, chunk_overlap=0))
    assert all(c >= b for (a, b), (c, d) in zip(spans, spans[1:]))


def test_recursive_prefers_paragraphs_then_lines() -> None:
    paras = [_sentences(10 + i, 3) for i in range(6)]
    text = "\n\n".join(paras)
    size = max(count_tokens(p) for p in paras) + 2  # any one paragraph fits, two do not
    assert all(count_tokens(a + b) > size for a, b in zip(paras, paras[1:]))
    spans = chunk_block(text, ChunkingConfig(strategy="recursive", chunk_size=size, chunk_overlap=0))
    assert [text[s:e] for s, e in spans] == paras


@pytest.mark.parametrize("strategy", ["semantic", "recursive"])
def test_chinese_splits_at_sentence_punctuation(strategy: str) -> None:
    """。！？； are sentence/clause ends; after NFKC ！？； are !?; and must still be cut points."""
    rnd = random.Random(7)
    clauses = []
    for i in range(60):
        body = "".join(rnd.choice(_ZH) for _ in range(rnd.randint(6, 12)))
        clauses.append(f"第{i}句{body}{rnd.choice('。！？；')}")
    raw = "".join(clauses)  # no spaces, no newlines: one long run
    text = normalize(raw).text
    assert "！" not in text and "!" in text and ";" in text
    spans = chunk_block(text, ChunkingConfig(strategy=strategy, chunk_size=32, chunk_overlap=0))
    assert len(spans) > 5
    for s, e in spans:
        piece = text[s:e]
        assert piece[-1] in "。!?;", f"chunk not cut at sentence punctuation: {piece!r}"
        assert piece.startswith("第"), f"chunk does not start a clause: {piece!r}"
        assert count_tokens(piece) <= 32


def test_chinese_semicolon_only_text_splits_at_semicolons() -> None:
    """Regression: the NFKC-folded ； is a bare ';' with no space after it."""
    raw = "".join(f"第{i}条规定适用于所有的人员和车辆；" for i in range(20))
    text = normalize(raw).text
    spans = chunk_block(text, ChunkingConfig(strategy="recursive", chunk_size=32, chunk_overlap=0))
    assert [text[s:e] for s, e in spans] == [f"第{i}条规定适用于所有的人员和车辆;" for i in range(20)]


def test_code_strategy_cuts_at_definitions() -> None:
    methods = "\n\n".join(
        f"    def method_{i}(self, x):\n        total = x * {i} + self.base\n        return total"
        for i in range(10))
    text = normalize(f"class Big:\n    base = 1\n\n{methods}", keep_indentation=True).text
    spans = chunk_block(text, ChunkingConfig(strategy="code", chunk_size=48, chunk_overlap=0),
                        language="python")
    assert len(spans) > 2
    for s, e in spans:
        assert text[s:e].startswith(("class Big", "def method_")), text[s:e][:40]


def test_records_strategy_keeps_short_record_whole() -> None:
    text = "title: Central\nstatus: open\nlines: 1, 2, 4"
    spans = chunk_block(text, DEFAULT_CHUNKING["records"])
    assert spans == [(0, len(text))]


# ------------------------------------------------------------------------------- config

def test_default_strategy_per_document_type() -> None:
    s = Settings()
    assert s.chunking_for("markdown").strategy == "semantic"
    assert s.chunking_for("html").strategy == "semantic"
    assert s.chunking_for("text").strategy == "recursive"
    assert s.chunking_for("pdf").strategy == "recursive"
    assert s.chunking_for("code").strategy == "code"
    assert s.chunking_for("records").strategy == "records"
    assert s.chunking_for("unknown-type") == s.chunking_for("text")
    for doc_type in ("markdown", "text", "pdf", "records"):
        cfg = s.chunking_for(doc_type)
        assert 0.1 <= cfg.chunk_overlap / cfg.chunk_size <= 0.2


def test_settings_override_strategy_and_size() -> None:
    s = Settings(chunk_size=64, chunk_strategy="fixed")
    for doc_type in ("markdown", "text", "code"):
        cfg = s.chunking_for(doc_type)
        assert cfg.strategy == "fixed" and cfg.chunk_size == 64
        assert cfg.chunk_overlap < 64
    assert Settings(chunk_size=64).chunking_for("text").chunk_overlap == 8  # scaled down to 1/8
    cfg = Settings(chunk_size=64, chunk_overlap=10).chunking_for("markdown")
    assert (cfg.strategy, cfg.chunk_size, cfg.chunk_overlap) == ("semantic", 64, 10)


def test_env_vars_configure_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGRAG_CHUNK_SIZE", "128")
    monkeypatch.setenv("COGRAG_CHUNK_STRATEGY", "recursive")
    monkeypatch.setenv("COGRAG_CHUNK_OVERLAP", "16")
    cfg = Settings().chunking_for("markdown")
    assert (cfg.strategy, cfg.chunk_size, cfg.chunk_overlap) == ("recursive", 128, 16)


def test_env_var_chunk_size_changes_ingested_chunks(tmp_path, monkeypatch) -> None:
    from cograg.index.sqlite_store import SQLiteStore
    from cograg.ingest.pipeline import ingest_paths

    doc = tmp_path / "docs" / "long.txt"
    doc.parent.mkdir()
    doc.write_text(_sentences(4, 200), encoding="utf-8")
    counts = {}
    for size in ("256", "32"):
        monkeypatch.setenv("COGRAG_CHUNK_SIZE", size)
        with SQLiteStore(tmp_path / f"store{size}") as store:
            ingest_paths(store, [doc.parent], settings=Settings())
            chunks = list(store.iter_chunks(store.list_documents()[0].doc_id))
            assert all(c.token_count <= int(size) for c in chunks)
            assert store.list_documents()[0].chunker.endswith(f"recursive:{size}:{int(size) // 8}")
            counts[size] = len(chunks)
    assert counts["32"] > 4 * counts["256"]


@pytest.mark.parametrize(("size", "overlap"), [(64, 64), (64, 100), (16, 16)])
def test_overlap_not_smaller_than_size_is_rejected(size: int, overlap: int) -> None:
    with pytest.raises(ValidationError, match="chunk_overlap must be smaller"):
        ChunkingConfig(strategy="fixed", chunk_size=size, chunk_overlap=overlap)
    with pytest.raises(ValidationError):
        Settings(chunk_size=size, chunk_overlap=overlap).chunking_for("text")


@pytest.mark.parametrize("size", [0, 15, 9000])
def test_chunk_size_out_of_range_is_rejected(size: int) -> None:
    with pytest.raises(ValidationError):
        Settings(chunk_size=size)
    with pytest.raises(ValidationError):
        ChunkingConfig(strategy="fixed", chunk_size=size, chunk_overlap=0)


def test_unknown_strategy_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError):
        Settings(chunk_strategy="paragraphs")
    monkeypatch.setenv("COGRAG_CHUNK_STRATEGY", "bogus")
    with pytest.raises(ValidationError):
        Settings()
