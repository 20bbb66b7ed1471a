"""What a script or a log reading `cograg`'s piped output gets: the text as written — no emoji for
rich's ":name:" codes in file names or passages, and no line broken at 80 columns."""

from __future__ import annotations

import subprocess
from pathlib import Path


def test_piped_output_prints_names_and_passages_as_written_on_whole_lines(
        tmp_path: Path, cograg_cmd: list[str], cograg_env: dict[str, str]) -> None:
    folder = tmp_path / ("a-folder-with-a-name-long-enough-to-push-every-line-past-eighty-columns" * 2)
    folder.mkdir()
    (folder / "a:x:b.md").write_text("", encoding="utf-8")  # skipped: empty, and its name is printed
    (folder / "p.txt").write_text("user root:x:0:0 here :smile: too\n", encoding="utf-8")
    store = tmp_path / "store"
    ingest = subprocess.run([*cograg_cmd, "ingest", str(folder), "--store", str(store)], env=cograg_env,
                            capture_output=True, text=True, timeout=120)
    assert ingest.returncode == 0, ingest.stderr
    printed = ingest.stdout + ingest.stderr
    skip_lines = [ln for ln in printed.splitlines() if "skipped" in ln and "a:x:b.md" in ln]
    assert skip_lines and str(folder / "a:x:b.md") in skip_lines[0]  # the whole path on one line
    assert "❌" not in printed
    found = subprocess.run([*cograg_cmd, "search", "root", "--mode", "bm25", "--store", str(store)],
                           env=cograg_env, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    assert "root:x:0:0 here :smile: too" in found.stdout
    assert "❌" not in found.stdout and "😄" not in found.stdout
