"""`cograg eval …` on bad input: a wrongly shaped record, bytes that are not UTF-8, an unusable
BEIR corpus, queries or qrels, a missing folder, an option value out of range. Each is one line
`error: …` naming the file, line and field, and exit 1: never an internal error, a traceback, or
a report that silently scores the bad input as misses. Model-free (`--embedder none`, lexical judge)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cograg.errors import CogragError

REPO = Path(__file__).resolve().parents[1]
CONTRACT_CASES = REPO / "eval" / "data" / "contract_cases.jsonl"
GOOD_CASE = {"id": "c1", "blocks": ["The bridge has seven arches."],
             "draft": {"answer": "It has seven arches [1].", "citations": [{"id": 1, "quote": "seven arches"}]},
             "expect": {"citations": 1}}


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("COGRAG_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("COGRAG_EMBEDDER", "none")
    monkeypatch.setenv("COGRAG_STORE", str(tmp_path / "home-store"))


def one_line_error(res, *fragments: str) -> str:
    assert res.exit_code == 1, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "internal error" not in lines[0] and "invalid setting" not in lines[0], lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def write_lines(path: Path, *lines: object) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


# ----------------------------------------------------------------------- labelled records

ROUTE = {"question": "Hello!", "route": "FAST_PATH", "lang": "en"}
PAIR = {"claim": "The bridge has seven arches.", "evidence": "It has seven arches.", "label": "SUPPORTED"}


@pytest.mark.parametrize(("kind", "record", "fragment"), [
    ("contract", [1, 2, 3], "not a JSON object"),
    ("contract", 5, "not a JSON object"),
    ("contract", None, "not a JSON object"),
    ("contract", {"foo": 1}, "a contract case needs blocks and draft"),
    ("contract", GOOD_CASE | {"blocks": "abc"}, "blocks"),
    ("contract", GOOD_CASE | {"blocks": [1, 2]}, "blocks.0"),
    ("contract", GOOD_CASE | {"draft": 5}, "draft"),
    ("contract", GOOD_CASE | {"draft": {"answer": "x", "citations": [{"id": "x"}]}}, "draft.citations.0.id"),
    ("contract", GOOD_CASE | {"draft": {"citations": []}}, "draft.answer is missing"),
    ("contract", GOOD_CASE | {"expect": {"citations": "1"}}, "expect.citations"),
    ("contract", GOOD_CASE | {"expect": {"answer_lacks": "[3]"}}, "expect.answer_lacks"),
    ("contract", GOOD_CASE | {"expect": {"citatons": 1}}, "expect.citatons"),
    ("routing", [1, 2, 3], "not a JSON object"),
    ("routing", 5, "not a JSON object"),
    ("routing", {"question": "Hi"}, "a routing record needs question and route"),
    ("routing", ROUTE | {"question": 5}, "question must be a non-empty string"),
    ("routing", ROUTE | {"question": None}, "question must be a non-empty string"),
    ("routing", ROUTE | {"route": "BOGUS"}, "route must be one of FAST_PATH, DOC_GROUNDED"),
    ("routing", ROUTE | {"route": "R1"}, "route must be one of"),
    ("routing", ROUTE | {"route": ["R1"]}, "route must be one of"),
    ("routing", ROUTE | {"lang": 7}, "lang must be a string"),
    ("verifier", [1], "not a JSON object"),
    ("verifier", {"claim": "x"}, "a verifier record needs claim, evidence and a known label"),
    ("verifier", PAIR | {"claim": 5}, "claim must be a non-empty string"),
    ("verifier", PAIR | {"claim": ["x"]}, "claim must be a non-empty string"),
    ("verifier", PAIR | {"evidence": [1, 2]}, "evidence must be a string or a list of strings"),
    ("verifier", PAIR | {"evidence": {"a": 1}}, "evidence must be a string or a list of strings"),
    ("verifier", PAIR | {"label": "MAYBE"}, "label must be one of"),
])
def test_a_wrongly_shaped_record_is_one_line_naming_file_and_line(cli, tmp_path: Path, kind: str, record: object,
                                                                   fragment: str) -> None:
    good = {"contract": GOOD_CASE, "routing": ROUTE, "verifier": PAIR}[kind]
    f = write_lines(tmp_path / "set.jsonl", good, "", record)  # the blank line still counts
    extra = {"contract": [], "routing": ["--split", "all"], "verifier": ["--split", "all", "--judge", "lexical"]}[kind]
    res = cli("eval", kind, f, *extra)
    one_line_error(res, f"{f} line 3: ", fragment)


@pytest.mark.parametrize("kind", ["contract", "routing", "verifier"])
def test_a_file_that_is_not_json_or_utf8_or_a_file(cli, tmp_path: Path, kind: str) -> None:
    good = {"contract": GOOD_CASE, "routing": ROUTE, "verifier": PAIR}[kind]
    f = write_lines(tmp_path / "set.jsonl", good, "nope")
    one_line_error(cli("eval", kind, f), f"{f} line 2: not JSON")
    f.write_bytes(b'\xff\xfe{"id":1}\n')
    one_line_error(cli("eval", kind, f), str(f), "not UTF-8 text (byte 0)")
    one_line_error(cli("eval", kind, tmp_path), str(tmp_path), "is a directory")
    one_line_error(cli("eval", kind, tmp_path / "nope.jsonl"), "no such file")


def test_labelled_records_handed_over_directly_are_checked_too() -> None:
    from cograg.eval.labelled import claim_pair, evaluate_contract, evaluate_routing

    with pytest.raises(CogragError, match="record 2: route must be one of"):
        evaluate_routing([ROUTE, ROUTE | {"route": "BOGUS"}], router=None)
    with pytest.raises(CogragError, match="record 1: blocks"):
        evaluate_contract([GOOD_CASE | {"blocks": "abc"}])
    with pytest.raises(CogragError, match="evidence must be"):
        claim_pair(PAIR | {"evidence": [1]})


def test_valid_contract_cases_still_pass_and_ids_may_be_numbers(cli, tmp_path: Path) -> None:
    hallucinated = {"id": "h", "blocks": ["It has seven arches."],
                    "draft": {"answer": "It has seven arches [1][7].", "citations": [{"id": 1}, {"id": 7}]},
                    "expect": {"hallucinated_ids": [7], "citations": 1, "answer_lacks": ["[7]"]}}
    f = write_lines(tmp_path / "cases.jsonl", GOOD_CASE, hallucinated)
    res = cli("eval", "contract", f, "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["summary"] == {"cases": 2, "pass_rate": 1.0}


# ------------------------------------------------------------------------------ retrieval

def beir(root: Path, *, corpus: bytes | None = None, queries: bytes | None = None, qrels: bytes | None = None) -> Path:
    d = root / "beir"
    (d / "qrels").mkdir(parents=True)
    docs = b"".join(json.dumps({"_id": f"D{i}", "title": "", "text": f"topic{i} words"}).encode() + b"\n"
                    for i in range(3))
    (d / "corpus.jsonl").write_bytes(docs if corpus is None else corpus)
    (d / "queries.jsonl").write_bytes(b'{"_id": "Q0", "text": "topic0"}\n{"_id": "Q1", "text": "topic1"}\n'
                                      if queries is None else queries)
    (d / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\nQ0\tD0\t1\nQ1\tD1\t1\n"
                                           if qrels is None else qrels)
    return d


def eval_retrieval(cli, d: Path, tmp_path: Path, *extra: object):
    return cli("eval", "retrieval", d, "--modes", "bm25", "--split", "all", "--embedder", "none",
               "--store", tmp_path / "store", *extra)


@pytest.mark.parametrize(("corpus", "reason"), [
    (b'{"_id": "D0", "title": "", "text": "topic0"}\nnope\n', "invalid JSON on line 2"),
    (b"", "empty file"),
    (b'{"_id": "D0", "title": "", "text": "topic0 \xff"}\n', "invalid UTF-8"),
])
def test_an_unusable_corpus_is_an_error_not_zero_scores(cli, tmp_path: Path, corpus: bytes, reason: str) -> None:
    d = beir(tmp_path, corpus=corpus)
    one_line_error(eval_retrieval(cli, d, tmp_path), f"{d / 'corpus.jsonl'} cannot be used as the corpus", reason)


@pytest.mark.parametrize(("queries", "qrels", "fragment"), [
    (b'{"_id": "Q0", "text": "topic0"}\nnope\n', None, "queries.jsonl line 2: not JSON"),
    (b'{"text": "topic0"}\n', None, "queries.jsonl line 1: a query needs _id and text"),
    (b"[1]\n", None, "queries.jsonl line 1: not a JSON object"),
    (b'{"_id": "Q0", "text": 5}\n', None, "queries.jsonl line 1: text must be a non-empty string"),
    (b'{"_id": "Q0", "text": "topic0 \xff"}\n', None, "queries.jsonl is not UTF-8 text (byte 30)"),
    (None, b"query-id\tcorpus-id\tscore\nQ0\tD0\thigh\n", "test.tsv line 2: score 'high' is not a whole number"),
    (None, b"Q0\tD0\t1\nQ1 D1 1\n", "test.tsv line 2: not query-id, corpus-id and score separated by tabs"),
    (None, b"Q0\tD0\t1\n\xff\n", "test.tsv is not UTF-8 text (byte 8)"),
])
def test_bad_queries_or_qrels_name_file_and_line(cli, tmp_path: Path, queries: bytes | None, qrels: bytes | None,
                                                 fragment: str) -> None:
    one_line_error(eval_retrieval(cli, beir(tmp_path, queries=queries, qrels=qrels), tmp_path), fragment)


def test_a_missing_folder_or_qrels_split_says_so(cli, tmp_path: Path) -> None:
    one_line_error(eval_retrieval(cli, tmp_path / "nonexist", tmp_path), f"no such folder {tmp_path / 'nonexist'}")
    d = beir(tmp_path)
    one_line_error(eval_retrieval(cli, d / "corpus.jsonl", tmp_path), "is a file, not a BEIR folder")
    one_line_error(eval_retrieval(cli, d, tmp_path, "--qrels", "dev"), "missing qrels/dev.tsv", "found: test")
    res = eval_retrieval(cli, d, tmp_path, "--json")  # and the good folder still scores
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["summary"]["bm25.recall@10"] == 1.0


# -------------------------------------------------------------------------------- options

@pytest.mark.parametrize(("option", "fragment"), [
    (["--limit", "-1"], "--limit must be at least 1 (got -1)"),
    (["--limit", "0"], "--limit must be at least 1 (got 0)"),
    (["--tolerance", "-1"], "--tolerance must be a finite number of at least 0"),
    (["--tolerance", "nan"], "--tolerance must be a finite number of at least 0 (got nan)"),
    (["--tolerance", "inf"], "--tolerance must be a finite number of at least 0 (got inf)"),
])
def test_option_values_out_of_range_are_refused(cli, option: list[str], fragment: str) -> None:
    one_line_error(cli("eval", "contract", CONTRACT_CASES, *option), fragment)
    one_line_error(cli("eval", "all", "--suite", REPO / "eval" / "ci.yaml", "--only", "contract", *option), fragment)


def test_out_and_baseline_that_cannot_be_used(cli, tmp_path: Path) -> None:
    a_file = write_lines(tmp_path / "a_file", "x")
    one_line_error(cli("eval", "contract", CONTRACT_CASES, "--out", a_file), f"--out {a_file} is a file, not a folder")
    one_line_error(cli("eval", "contract", CONTRACT_CASES, "--out", a_file / "sub"),
                   f"cannot make the report folder {a_file / 'sub'}")
    one_line_error(cli("eval", "contract", CONTRACT_CASES, "--baseline", tmp_path), "baseline", "is a directory")
    (tmp_path / "bad.json").write_bytes(b"\xff{}")
    one_line_error(cli("eval", "contract", CONTRACT_CASES, "--baseline", tmp_path / "bad.json"), "not UTF-8 text")
    res = cli("eval", "contract", CONTRACT_CASES, "--limit", "2", "--json")
    assert res.exit_code == 0 and len(json.loads(res.stdout)["rows"]) == 2, res.stderr


@pytest.mark.parametrize(("suite", "fragment"), [
    ("tolerance: -1\nevals: []\n", "tolerance: Input should be greater than or equal to 0"),
    ("tolerance: .nan\nevals: []\n", "tolerance"),
    ("evals: [{name: a, kind: contract, limit: 0}]\n", "evals.0.limit"),
    ("evals: [{name: a, kind: contract}]\nfoo: [\n", "invalid suite"),
])
def test_a_suite_with_values_out_of_range_is_refused(tmp_path: Path, suite: str, fragment: str) -> None:
    from cograg.eval.suite import load_suite

    f = tmp_path / "suite.yaml"
    f.write_text(suite, encoding="utf-8")
    with pytest.raises(CogragError, match="invalid suite") as info:
        load_suite(f)
    assert fragment in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------- QA and attack files

@pytest.mark.parametrize(("record", "fragment"), [
    ([1], "not a JSON object"),
    ({"answers": ["x"]}, "a QA record needs a question"),
    ({"question": 5}, "question must be a non-empty string"),
    ({"question": "Q?", "answers": [{"txt": "x"}]}, "answers must be texts"),
    ({"question": "Q?", "lang": 7}, "lang must be a string"),
    ({"question": "Q?", "answerable": "false"}, "answerable must be true or false"),
])
def test_qa_file_records_are_checked(tmp_path: Path, record: object, fragment: str) -> None:
    from cograg.eval.answers import load_qa

    f = write_lines(tmp_path / "qa.jsonl", {"question": "Who?", "answers": ["x"]}, record)
    with pytest.raises(CogragError, match=f"line 2: {fragment}"):
        load_qa(f)
    f.write_bytes(b"\xff\n")
    with pytest.raises(CogragError, match="not UTF-8 text"):
        load_qa(f)


def test_attack_file_names_the_line_and_field(tmp_path: Path) -> None:
    from cograg.eval.injection import load_cases

    f = write_lines(tmp_path / "cases.jsonl", {"id": "a"})
    with pytest.raises(CogragError, match=r"line 1: not an attack case: doc is missing"):
        load_cases(f)
    f.write_bytes(b"\xff\n")
    with pytest.raises(CogragError, match="not UTF-8 text"):
        load_cases(f)
