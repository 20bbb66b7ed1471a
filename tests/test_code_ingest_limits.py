"""Large source files (SPEC A: a huge file gets a clear error or a skip with a reason, never a hang):
unit extraction stays linear in the file size, and a code file over `MAX_CODE_MB` is skipped, with
a reason naming the limit, before it is read."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cograg.config import Settings
from cograg.errors import LoaderError
from cograg.index.sqlite_store import SQLiteStore
from cograg.ingest import code_units, loaders
from cograg.ingest.pipeline import ingest_paths
from cograg.ingest.tokens import bounded_token_spans, count_tokens, token_spans

pytestmark = pytest.mark.usefixtures("ingest_env")


def _js_functions(n: int) -> str:
    # non-ASCII in every unit, so byte and character offsets differ all the way down the file
    return "".join(f"// 加法 {i}\nfunction add{i}(a, b) {{\n  return a + b * {i}; // é\n}}\n\n"
                   for i in range(n))


def test_many_js_functions_split_in_linear_time(tmp_path: Path) -> None:
    # ~400 KB, 7000 units: decoding from the start of the file per boundary took many seconds
    path = tmp_path / "many.js"
    text = _js_functions(7000)
    path.write_text(text, encoding="utf-8")
    started = time.perf_counter()
    loaded = loaders.load(loaders.inspect_file(path, 10**9))
    blocks = list(loaded.blocks)
    elapsed = time.perf_counter() - started
    assert len(blocks) == 7000
    assert [b.heading_path for b in blocks[-2:]] == [("function add6998",), ("function add6999",)]
    for b in (blocks[0], blocks[3500], blocks[-1]):  # character offsets, each unit with its comment
        assert text[b.orig_start:b.orig_start + len(b.text)] == b.text
        assert b.text.startswith("// 加法 ") and b.text.rstrip().endswith("}")
    assert elapsed < 2.0, f"{elapsed:.1f} s to split 7000 units"


def test_char_offsets_move_backwards_for_comments() -> None:
    data = "aé加b\n// c\nx".encode()
    at = code_units._CharOffsets(data, len(data.decode()))
    for b in (13, 6, 7, 1, 0, 13, 3):  # character boundaries, in any order (the comment look-behind)
        assert at(b) == len(data[:b].decode())


def test_code_file_over_the_limit_is_skipped_with_the_reason(tmp_path: Path) -> None:
    big, small = tmp_path / "bundle.js", tmp_path / "small.js"
    big.write_text("var a = " + "1+" * 5_100 + "1;\n")  # just over 10 KB
    small.write_text(_js_functions(3))
    with pytest.raises(LoaderError, match="max_code_mb") as err:
        loaders.load(loaders.inspect_file(big, 10**9, max_code_mb=0.01))
    assert "0.01 MB" in str(err.value)
    with SQLiteStore(tmp_path / "store") as store:
        summary = ingest_paths(store, [big, small], settings=Settings(store=tmp_path / "store", max_code_mb=0.01))
        assert summary.added == 1
        assert [s.path for s in summary.skipped] == [str(big)]
        assert "max_code_mb" in summary.skipped[0].reason and "0.01 MB" in summary.skipped[0].reason


def test_the_code_limit_is_a_setting_the_cli_and_the_environment_reach(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Raised, the same file ingests: the limit is the operator's choice, not a constant."""
    from typer.testing import CliRunner

    from cograg.cli import app

    big = tmp_path / "docs" / "bundle.js"
    big.parent.mkdir()
    big.write_text("var a = " + "1+" * 5_100 + "1;\n")
    monkeypatch.setenv("COGRAG_MAX_CODE_MB", "0.01")
    assert Settings().max_code_mb == 0.01
    with SQLiteStore(tmp_path / "s1") as store:
        assert ingest_paths(store, [big], settings=Settings(store=tmp_path / "s1")).skipped
    run = CliRunner().invoke(app, ["ingest", str(big.parent), "--store", str(tmp_path / "s2"), "--embedder", "none",
                                   "--max-code-mb", "1", "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["added"] == 1


def test_code_file_at_the_limit_is_split(tmp_path: Path) -> None:
    path = tmp_path / "ok.py"
    path.write_text("def f():\n    return 1\n" * 400)
    limit = path.stat().st_size / 1e6
    assert list(loaders.load(loaders.inspect_file(path, 10**9, max_code_mb=limit)).blocks)


def test_token_counting_is_linear_and_agrees_with_spans() -> None:
    text = ("word " * 30_000 + "x" * 60_000 + " 中文。") * 3
    started = time.perf_counter()
    n = count_tokens(text)
    spans = bounded_token_spans(text, 64)
    assert time.perf_counter() - started < 2.0
    assert n == sum(w for _, _, w in token_spans(text)) == sum(w for _, _, w in spans)
    assert max(w for _, _, w in spans) <= 64
