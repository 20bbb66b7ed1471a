"""The command line (SPEC F2): `ingest --json` prints one summary object, and every error is one
line on stderr with a non-zero exit code, never a traceback."""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from cograg.index.sqlite_store import DB_NAME, SCHEMA_VERSION, SQLiteStore

pytestmark = pytest.mark.usefixtures("ingest_env")

SUMMARY_KEYS = {"added", "updated", "unchanged", "deleted", "skipped", "warnings", "chunks"}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.md").write_text("# A\n\nFirst document about trams.\n", encoding="utf-8")
    (d / "b.txt").write_text("Second document about ferries.\n\n第二份文件。\n", encoding="utf-8")
    (d / "c.xyz").write_text("unsupported", encoding="utf-8")
    return d


def assert_one_line_error(exit_code: int, stdout: str, stderr: str, *, contains: str = "") -> None:
    assert exit_code != 0
    assert stdout == ""
    assert "Traceback" not in stderr
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1, f"expected one line, got {stderr!r}"
    assert lines[0].startswith("error: ")
    assert contains in lines[0]


# ------------------------------------------------------------------------------ --json

def test_ingest_json_prints_exactly_one_summary_object(cli, store_dir: Path, folder: Path) -> None:
    res = cli("ingest", folder, "--store", store_dir, "--json")
    assert res.exit_code == 0, res.stderr
    assert res.stderr == ""
    text = res.stdout.strip()
    assert text.startswith("{") and text.endswith("}")
    data = json.loads(text)  # fails on anything else printed around the object
    assert set(data) == SUMMARY_KEYS
    assert (data["added"], data["updated"], data["unchanged"], data["deleted"]) == (2, 0, 0, 0)
    assert data["skipped"] == [{"path": str(folder / "c.xyz"), "reason": "unsupported file type '.xyz'"}]
    assert data["warnings"] == []
    with SQLiteStore(store_dir) as s:
        assert data["chunks"] == s.count_chunks() > 0  # total chunks in the store

    res = cli("ingest", folder, "--store", store_dir, "--json")
    data2 = json.loads(res.stdout)
    assert (data2["added"], data2["unchanged"], data2["chunks"]) == (0, 2, data["chunks"])


def test_ingest_json_counts_documents_and_store_total(cli, store_dir: Path, folder: Path,
                                                      tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("Other root.", encoding="utf-8")
    first = json.loads(cli("ingest", other, "--store", store_dir, "--json").stdout)
    second = json.loads(cli("ingest", folder, "--store", store_dir, "--json").stdout)
    assert second["added"] == 2
    assert second["chunks"] == first["chunks"] + 2  # the store's total, not this run's


def test_ingest_text_summary(cli, store_dir: Path, folder: Path) -> None:
    res = cli("ingest", folder, "--store", store_dir)
    assert res.exit_code == 0
    assert "added 2 · updated 0 · unchanged 0 · deleted 0 · skipped 1" in res.stdout
    assert f"skipped {folder / 'c.xyz'}: unsupported file type" in res.stdout


def test_ingest_options_tags_acl_and_chunking(cli, store_dir: Path, folder: Path) -> None:
    long = folder / "long.txt"
    long.write_text(" ".join(f"Sentence {i} about trams." for i in range(300)), encoding="utf-8")
    res = cli("ingest", folder, "--store", store_dir, "--json", "--tags", " t1, t2 ,,", "--acl", "g1,g2",
              "--chunk-strategy", "fixed", "--chunk-size", "32", "--chunk-overlap", "4")
    assert res.exit_code == 0, res.stderr
    with SQLiteStore(store_dir) as s:
        for d in s.list_documents():
            assert d.tags == ["t1", "t2"] and d.acl == ["g1", "g2"]
            assert d.chunker.endswith(":fixed:32:4")
        chunks = list(s.iter_chunks(s.get_document_by_path(str(long)).doc_id))
        assert len(chunks) > 20 and max(c.token_count for c in chunks) == 32


def test_progress_bar_on_a_terminal(cli, store_dir: Path, folder: Path, monkeypatch) -> None:
    from cograg import cli as cli_module

    buf = io.StringIO()
    monkeypatch.setattr(cli_module, "err", Console(file=buf, force_terminal=True, width=120))
    res = cli("ingest", folder, "--store", store_dir)
    assert res.exit_code == 0
    shown = buf.getvalue()
    assert "ingest" in shown and "files" in shown and "chunks" in shown  # the rich progress bar

    buf.truncate(0)
    buf.seek(0)
    (folder / "new.txt").write_text("A new note about the harbour trams.", encoding="utf-8")
    res = cli("ingest", folder, "--store", store_dir, "--json")
    assert "ingest" in buf.getvalue()  # the bar is on stderr with --json too
    assert set(json.loads(res.stdout)) == SUMMARY_KEYS  # stdout stays pure JSON


def test_plain_progress_lines_when_stderr_is_not_a_terminal(cli, store_dir: Path, folder: Path,
                                                            monkeypatch) -> None:
    from cograg import cli as cli_module
    from cograg import cli_progress

    buf = io.StringIO()
    monkeypatch.setattr(cli_module, "err", Console(file=buf, force_terminal=False, width=400))
    monkeypatch.setattr(cli_progress, "PLAIN_INTERVAL_S", 0.0)  # a line for every event
    res = cli("ingest", folder, "--store", store_dir, "--json")
    assert res.exit_code == 0
    lines = buf.getvalue().splitlines()
    assert lines and all(line.startswith("progress: ingest ") for line in lines)
    assert "3/3 files" in lines[-1] and "\x1b" not in buf.getvalue()
    assert set(json.loads(res.stdout)) == SUMMARY_KEYS


def test_progress_events(store_dir: Path, folder: Path) -> None:
    from cograg.ingest.pipeline import ingest_paths

    events = []
    with SQLiteStore(store_dir) as s:
        ingest_paths(s, [folder], progress=events.append)
    assert [e.files_done for e in events] == [1, 2, 3]
    assert {e.files_total for e in events} == {3}
    assert sorted(e.outcome for e in events) == ["added", "added", "skipped"]
    assert events[-1].chunks_written >= 2


# ------------------------------------------------------------------------------- errors

def test_error_missing_path(cli, store_dir: Path, tmp_path: Path) -> None:
    res = cli("ingest", tmp_path / "nope", "--store", store_dir)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains="path not found")


def test_error_unknown_document(cli, store_dir: Path, folder: Path) -> None:
    cli("ingest", folder, "--store", store_dir)
    for cmd in ("show", "delete"):
        res = cli("docs", cmd, "no-such-doc", "--store", store_dir)
        assert_one_line_error(res.exit_code, res.stdout, res.stderr,
                              contains="no document matches 'no-such-doc'")
    with SQLiteStore(store_dir) as s:
        assert s.count_documents() == 2


def test_a_document_is_found_by_its_file_name_and_a_shared_name_names_the_candidates(
        cli, store_dir: Path, folder: Path) -> None:
    (folder / "sub").mkdir()
    (folder / "sub" / "a.md").write_text("# Another A\n\nAbout buses.\n", encoding="utf-8")
    (folder / "b_%.txt").write_text("Wildcards in a name.\n", encoding="utf-8")
    cli("ingest", folder, "--store", store_dir)
    res = cli("docs", "show", "b.txt", "--store", store_dir, "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["source_path"] == str((folder / "b.txt").resolve())
    # LIKE's wildcards and ASCII case folding are not name matching
    res = cli("docs", "show", "b_%.txt", "--store", store_dir, "--json")
    assert json.loads(res.stdout)["source_path"].endswith("/b_%.txt")
    for near in ("B.txt", "b__.txt", "%.txt", ".txt"):
        res = cli("docs", "show", near, "--store", store_dir)
        assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains=f"no document matches '{near}'")
    res = cli("docs", "delete", "a.md", "--store", store_dir)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains="'a.md' names 2 documents")
    assert str((folder / "sub" / "a.md").resolve()) in res.stderr
    with SQLiteStore(store_dir) as s:
        assert s.count_documents() == 4


def test_error_no_store(cli, tmp_path: Path) -> None:
    missing = tmp_path / "no-store"
    for args in (("docs", "list"), ("docs", "show", "x"), ("docs", "delete", "x")):
        res = cli(*args, "--store", missing)
        assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains="no store at")
    assert not missing.exists()  # reading commands never create a store


@pytest.mark.parametrize(("args", "contains"), [
    (("--chunk-size", "0"), "chunk_size"),
    (("--chunk-size", "100000"), "chunk_size"),
    (("--chunk-size", "64", "--chunk-overlap", "64"), "chunk_overlap must be smaller than chunk_size"),
    (("--chunk-overlap", "-1"), "chunk_overlap"),
    (("--chunk-strategy", "paragraphs"), "chunk_strategy"),
    (("--max-file-mb", "0"), "max_file_mb"),
])
def test_error_invalid_options(cli, store_dir: Path, folder: Path, args, contains: str) -> None:
    res = cli("ingest", folder, "--store", store_dir, *args)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains=contains)
    if store_dir.exists():
        with SQLiteStore(store_dir) as s:
            assert s.count_documents() == 0


def test_error_nothing_to_ingest(cli, store_dir: Path) -> None:
    res = cli("ingest", "--store", store_dir)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains="nothing to ingest")


def test_error_store_is_a_file(cli, tmp_path: Path, folder: Path) -> None:
    f = tmp_path / "file"
    f.write_text("not a directory", encoding="utf-8")
    res = cli("ingest", folder, "--store", f)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains="store")


def test_error_newer_store_schema(cli, store_dir: Path, folder: Path) -> None:
    SQLiteStore(store_dir).close()
    conn = sqlite3.connect(store_dir / DB_NAME)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 5}")
    conn.commit()
    conn.close()
    res = cli("ingest", folder, "--store", store_dir)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains="newer than this cograg supports")


def test_unexpected_exception_is_one_line_unless_debug(cli, store_dir: Path, folder: Path,
                                                       monkeypatch) -> None:
    from cograg.engine import Engine

    def boom(self, *a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Engine, "ingest", boom)
    res = cli("ingest", folder, "--store", store_dir)
    assert res.exit_code == 2
    assert_one_line_error(res.exit_code, res.stdout, res.stderr,
                          contains="internal error: RuntimeError: disk on fire")
    monkeypatch.setenv("COGRAG_DEBUG", "1")
    res = cli("ingest", folder, "--store", store_dir)
    assert isinstance(res.exception, RuntimeError)  # COGRAG_DEBUG=1 shows the real exception


def test_keyboard_interrupt_is_one_line(cli, store_dir: Path, folder: Path, monkeypatch) -> None:
    from cograg.engine import Engine

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(Engine, "ingest", interrupted)
    res = cli("ingest", folder, "--store", store_dir)
    assert res.exit_code == 130
    assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains="interrupted")


def test_main_passes_exits_through_and_turns_abort_into_one_line(monkeypatch, capsys) -> None:
    """`main()` once crashed with AttributeError on any SystemExit from a command (rich raises one
    when stdout is a closed pipe, as in `cograg ask … | head -3`): click's Abort is not where it
    looked for it."""
    import typer.exceptions

    import cograg.cli as cli_module

    def closed_pipe(**kwargs):
        raise SystemExit(1)
    monkeypatch.setattr(cli_module, "app", closed_pipe)
    with pytest.raises(SystemExit) as exited:
        cli_module.main()
    assert exited.value.code == 1

    def aborted(**kwargs):
        raise typer.exceptions.Abort()
    monkeypatch.setattr(cli_module, "app", aborted)
    with pytest.raises(SystemExit) as exited:
        cli_module.main()
    assert exited.value.code == 130 and "aborted" in capsys.readouterr().err


# --------------------------------------------------------------------------- subprocess

def test_subprocess_ingest_json(cograg_cmd, cograg_env, store_dir: Path, folder: Path) -> None:
    res = subprocess.run([*cograg_cmd, "ingest", str(folder), "--store", str(store_dir), "--json"],
                         capture_output=True, text=True, env=cograg_env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    data = json.loads(res.stdout)
    assert set(data) == SUMMARY_KEYS
    assert data["added"] == 2 and len(data["skipped"]) == 1
    # docs list --json is one JSON array
    res = subprocess.run([*cograg_cmd, "docs", "list", "--store", str(store_dir), "--json"],
                         capture_output=True, text=True, env=cograg_env, timeout=120)
    assert res.returncode == 0
    assert len(json.loads(res.stdout)) == 2


def test_subprocess_store_from_env(cograg_cmd, cograg_env, store_dir: Path, folder: Path) -> None:
    env = {**cograg_env, "COGRAG_STORE": str(store_dir)}
    res = subprocess.run([*cograg_cmd, "ingest", str(folder), "--json"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["added"] == 2
    assert (store_dir / DB_NAME).is_file()


@pytest.mark.parametrize(("case", "contains"), [
    ("missing-path", "path not found"),
    ("no-store", "no store at"),
    ("unknown-doc", "no document matches"),
    ("chunk-size-0", "chunk_size"),
])
def test_subprocess_errors_are_one_line(cograg_cmd, cograg_env, tmp_path: Path, store_dir: Path,
                                        folder: Path, case: str, contains: str) -> None:
    if case == "unknown-doc":
        SQLiteStore(store_dir).close()
    args = {
        "missing-path": ["ingest", str(tmp_path / "missing"), "--store", str(store_dir)],
        "no-store": ["docs", "list", "--store", str(tmp_path / "none")],
        "unknown-doc": ["docs", "show", "deadbeef", "--store", str(store_dir)],
        "chunk-size-0": ["ingest", str(folder), "--store", str(store_dir), "--chunk-size", "0"],
    }[case]
    res = subprocess.run([*cograg_cmd, *args], capture_output=True, text=True, env=cograg_env, timeout=120)
    assert res.returncode == 1
    assert_one_line_error(res.returncode, res.stdout, res.stderr, contains=contains)


@pytest.mark.parametrize("args, needle", [
    (["ingest", "--chunk-size", "abc"], "Invalid value for '--chunk-size'"),
    (["no-such-command"], "No such command"),
    (["search"], "Missing argument"),
])
def test_usage_errors_are_one_line_in_a_subprocess(cograg_cmd, cograg_env, args, needle) -> None:
    import subprocess

    proc = subprocess.run([*cograg_cmd, *args], capture_output=True, text=True, env=cograg_env, timeout=60)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


def test_a_quote_from_a_hard_wrapped_file_prints_as_one_run_of_text(capsys) -> None:
    from cograg.answer.contract import Citation
    from cograg.answer.response import AnswerResponse
    from cograg.cli import print_answer

    quote = ("The first\nelectric tram ran on 14 May 1903, crossing the River Vell on the Linden\n"
             "Bridge, which had been widened and strengthened for the purpose.")
    resp = AnswerResponse(answer="The first electric tram ran on 14 May 1903 [1].", fallback=False, confidence=0.4,
                          grounded=True, route="DOC_GROUNDED", trace_id="tr_1",
                          citations=[Citation(id="1", doc_id="d", chunk_id="c", quote=quote, source="/docs/tram.md",
                                              score=1.0, title="Tram", heading_path=["History"])])
    print_answer(resp)
    printed = capsys.readouterr().out
    assert "    “The first electric tram ran on 14 May 1903" in printed  # not "The first" on a line of its own
    flat = " ".join(printed.split())  # the terminal's own wrapping aside
    assert "on the Linden Bridge, which had been widened" in flat and "Tram › History — /docs/tram.md" in flat


def test_text_shaped_like_console_markup_prints_as_written(cli, store_dir: Path, tmp_path: Path) -> None:
    # rich reads "[x]" as a style (dropped) and fails on an unmatched "[/b]": document text, titles,
    # paths and messages are the user's, printed as they are
    d = tmp_path / "hostile [bold]"
    d.mkdir()
    (d / "fares [x].md").write_text("# Tram [bold]fares[/bold]\n\nThe [red]day pass[/red] costs [/x] 6.50 euros.\n",
                                    encoding="utf-8")
    assert cli("ingest", d, "--store", store_dir).exit_code == 0
    listed = cli("docs", "list", "--store", store_dir)
    assert listed.exit_code == 0 and "fares [x].md" in listed.stdout, listed.stderr
    shown = cli("docs", "show", "fares [x].md", "--store", store_dir)
    assert shown.exit_code == 0, shown.stderr
    assert "Tram [bold]fares[/bold]" in shown.stdout and "hostile [bold]/fares [x].md" in shown.stdout
    found = cli("search", "day pass", "--mode", "bm25", "--store", store_dir)
    assert found.exit_code == 0, found.stderr
    assert "The [red]day pass[/red] costs [/x] 6.50 euros." in found.stdout
    missing = cli("docs", "show", "nope [/b] [x]", "--store", store_dir)
    assert_one_line_error(missing.exit_code, missing.stdout, missing.stderr, contains="nope [/b] [x]")


def test_an_answer_prints_its_text_as_written_and_markdown_emphasis_as_bold(capsys) -> None:
    from cograg.answer.contract import Citation
    from cograg.answer.response import AnswerResponse
    from cograg.cli import print_answer
    from cograg.cli_common import emphasised

    resp = AnswerResponse(answer="The [red]first[/red] tram ran on **14 May 1903** [1].", fallback=False,
                          confidence=0.4, grounded=True, route="DOC_GROUNDED", trace_id="tr_1",
                          citations=[Citation(id="1", doc_id="d", chunk_id="c", quote="It ran [/b] on 14 May 1903.",
                                              source="/docs/[x].md", score=1.0, title="Trams [y]")])
    print_answer(resp)
    printed = capsys.readouterr().out
    assert "The [red]first[/red] tram ran on 14 May 1903 [1]." in printed  # "**" shown as bold, not as stars
    assert "[1] Trams [y] — /docs/[x].md" in printed and "“It ran [/b] on 14 May 1903.”" in printed
    assert emphasised("on **14 May 1903**, and **b") == "on [bold]14 May 1903[/bold], and **b"


def test_a_chat_turn_prints_its_answer_as_ask_does(capsys) -> None:
    from cograg.answer.contract import Citation
    from cograg.answer.response import AnswerResponse
    from cograg.cli_memory import _chat_turn

    class OneAnswer:
        def ask(self, question, session=None, bus=None):
            return AnswerResponse(answer="It opened on **14 May 1903** [1] in [x].", fallback=False,
                                  confidence=0.4, grounded=True, route="DOC_GROUNDED", trace_id="tr_1",
                                  citations=[Citation(id="1", doc_id="d", chunk_id="c", quote="ran on\n14 May 1903.",
                                                      source="/docs/t.md", score=1.0, title="Trams")])

    _chat_turn(OneAnswer(), "s1", "When?")
    printed = capsys.readouterr().out
    assert "It opened on 14 May 1903 [1] in [x]." in printed  # bold, not stars; "[x]" as written
    assert "“ran on 14 May 1903.”" in printed


def test_a_trace_prints_its_questions_statements_and_reasons_as_written(capsys) -> None:
    from cograg.cli import _print_trace

    _print_trace({"trace_id": "tr_1", "route": "DOC_GROUNDED", "question": "What is [/b] in [x]?",
                  "decision": {"route": "DOC_GROUNDED", "scores": {"R1": 0.5}, "reasons": ["matched [bold]"]},
                  "loop": {"decision_path": ["retrieve"], "rewrite_history": [
                      {"rewritten_query": "[/i] rewritten", "rewrite_reason": "[red]why"}]},
                  "verdicts": [{"kept": True, "verdict": "SUPPORTED", "method": "judge", "sentence": "It is [x].",
                                "reason": "[/]"}],
                  "injection_flags": [{"block": 1, "kind": "directive", "text": "[blink]ignore[/blink]"}]})
    printed = capsys.readouterr().out
    for text in ("question: What is [/b] in [x]?", "· matched [bold]", "rewrite: [/i] rewritten  [red]why",
                 "SUPPORTED via judge: It is [x].  [/]", "(directive): [blink]ignore[/blink]"):
        assert text in printed, text


@pytest.mark.parametrize(("quote", "shown"), [
    ("The first\nelectric tram ran on 14 May 1903.", "The first electric tram ran on 14 May 1903."),
    ("- Single fares paid with a LinCard\n  receive a 10% discount.",
     "- Single fares paid with a LinCard receive a 10% discount."),
    ("湖水由德国政\n府资助，以净化污染。", "湖水由德国政府资助，以净化污染。"),  # no space inside Chinese text
    ("银雾 \nSilver Mist", "银雾 Silver Mist"),
])
def test_a_quote_prints_on_one_line(quote: str, shown: str) -> None:
    from cograg.cli_common import one_line

    assert one_line(quote) == shown


@pytest.mark.parametrize(("args", "named"), [
    (["search", "tram\udcff"], "QUERY"),
    (["docs", "show", "\udcff"], "REF"),
    (["trace", "tr_\udcff"], "TRACE_ID"),
    (["ingest", "/tmp/nothere\udcff"], "PATHS"),
    (["search", "trams", "--groups", "g\udcff"], "--groups"),
])
def test_an_argument_that_is_not_utf8_is_a_one_line_error_naming_it(cli, store_dir: Path, folder: Path,
                                                                    args: list[str], named: str) -> None:
    # bytes that are not UTF-8 reach Python as lone surrogates ("\udcff" for the byte 0xff)
    assert cli("ingest", folder, "--store", store_dir).exit_code == 0
    res = cli(*args, "--store", store_dir)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains=f"error: {named} is not valid UTF-8")
    assert "\ufffd" in res.stderr


def test_control_characters_in_a_name_show_as_escapes_and_never_reach_the_terminal(cli, store_dir: Path,
                                                                                   folder: Path) -> None:
    # a file name that colours the terminal red and retitles its window
    (folder / "a\x1b[31mRED\x1b]0;owned\x07.txt").write_text("Red trams of the harbour line.\n", encoding="utf-8")
    assert cli("ingest", folder, "--store", store_dir).exit_code == 0
    for args in (["docs", "list"], ["search", "red trams harbour"]):
        res = cli(*args, "--store", store_dir)
        assert res.exit_code == 0, res.stderr
        assert "\x1b" not in res.stdout and "\x07" not in res.stdout
        assert "\\x1b[31mRED\\x1b]0;owned\\x07" in res.stdout.replace("\n", "").replace(" ", "")


def test_a_bidirectional_override_in_a_name_shows_as_its_escape(cli, store_dir: Path, folder: Path) -> None:
    # U+202E showed "invoice\u202efdp.md" as "invoicedm.pdf" on the terminal
    (folder / "invoice\u202efdp.md").write_text("Quarterly tram report.\n", encoding="utf-8")
    assert cli("ingest", folder, "--store", store_dir).exit_code == 0
    res = cli("docs", "list", "--store", store_dir)
    assert "\u202e" not in res.stdout
    assert "invoice\\u202efdp.md" in res.stdout.replace("\n", "").replace(" ", "")


def test_trace_with_no_traces_says_so_and_its_json_is_an_empty_list(cli, store_dir: Path, folder: Path) -> None:
    assert cli("ingest", folder, "--store", store_dir).exit_code == 0
    res = cli("trace", "--store", store_dir)
    assert res.exit_code == 0 and res.stdout.startswith("no traces")
    assert json.loads(cli("trace", "--store", store_dir, "--json").stdout) == []


def test_a_ref_too_short_to_be_an_id_prefix_says_why_it_matched_nothing(cli, store_dir: Path, folder: Path) -> None:
    assert cli("ingest", folder, "--store", store_dir).exit_code == 0
    doc_id = json.loads(cli("docs", "list", "--store", store_dir, "--json").stdout)[0]["doc_id"]
    res = cli("docs", "show", doc_id[:3], "--store", store_dir)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr,
                          contains=f"no document matches {doc_id[:3]!r} (an id prefix needs at least 4 characters)")
    res = cli("docs", "show", "nothing.md", "--store", store_dir)
    assert res.stderr.strip() == "error: no document matches 'nothing.md'"


@pytest.mark.parametrize("args", [["docs", "list"], ["search", "trams"], ["ingest", "."]])
def test_an_empty_store_path_is_refused_not_made_in_the_current_folder(cli, tmp_path: Path, monkeypatch,
                                                                       args: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli(*args, "--store", "")
    assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains="error: --store is empty")
    assert list(tmp_path.iterdir()) == []


def test_a_chat_line_that_is_not_utf8_is_refused_and_the_chat_goes_on(cli, store_dir: Path, folder: Path,
                                                                      cograg_cmd: list[str], cograg_env) -> None:
    assert cli("ingest", folder, "--store", store_dir).exit_code == 0
    res = subprocess.run([*cograg_cmd, "chat", "--session", "s1", "--store", str(store_dir)],
                         input=b"\xff\xfe trams\n/facts\n/quit\n", capture_output=True, env=cograg_env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stderr.decode().splitlines() == ["error: the line is not valid UTF-8: \ufffd\ufffd trams"]
    assert b"no facts" in res.stdout  # the next line was read: a new session has none yet


@pytest.mark.parametrize("ref", ["d" * 256, "d" * 100_000, "nul\x00byte"])
def test_a_ref_no_file_system_takes_matches_nothing_in_one_short_line(cli, store_dir: Path, folder: Path,
                                                                      ref: str) -> None:
    # too long for a file name (the lookup as a path raised), too long for a LIKE pattern, a NUL byte
    assert cli("ingest", folder, "--store", store_dir).exit_code == 0
    for args in (["docs", "show", ref], ["docs", "delete", ref], ["trace", ref]):
        res = cli(*args, "--store", store_dir)
        assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains="no ")
        assert len(res.stderr) < 200


def test_an_empty_store_in_the_environment_is_refused_too(cli, tmp_path: Path, folder: Path, monkeypatch) -> None:
    # an exported but empty COGRAG_STORE reached the settings as the path "": a store in the current folder
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COGRAG_STORE", "")
    res = cli("ingest", folder)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr, contains="invalid setting store: is empty")
    assert not (tmp_path / DB_NAME).exists()


def test_a_section_in_the_environment_that_is_not_json_is_one_line(cli, store_dir: Path, folder: Path,
                                                                  monkeypatch) -> None:
    assert cli("ingest", folder, "--store", store_dir).exit_code == 0
    monkeypatch.setenv("COGRAG_ANSWER", "{bad")
    res = cli("docs", "list", "--store", store_dir)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr,
                          contains="invalid setting answer: COGRAG_ANSWER is not valid JSON")
    assert res.exit_code == 1


@pytest.mark.parametrize("model", ["bogus", "gguf:", "gguf:/nowhere/m.gguf", "openai:"])
def test_ask_refuses_a_model_it_cannot_load_even_for_a_turn_that_needs_none(cli, store_dir: Path, folder: Path,
                                                                             model: str) -> None:
    # "Who designed it?" is asked back (CLARIFY) without a model call: --model went unchecked
    assert cli("ingest", folder, "--store", store_dir).exit_code == 0
    res = cli("ask", "Who designed it?", "--model", model, "--store", store_dir)
    assert_one_line_error(res.exit_code, res.stdout, res.stderr)
    assert "LLM" in res.stderr or "model file not found" in res.stderr
