"""The eval gates never report a pass for something that did not run or cannot be compared:
an unknown name in `eval all --only` is a usage error, a suite run in which no gate ran does not
pass, and a run with another number of items than its baseline (`--limit`) is "not comparable".
All on the model-free contract eval, so no shared data and no model is needed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cograg.eval.report import EvalReport, compare

REPO = Path(__file__).resolve().parents[1]
CI_SUITE = REPO / "eval" / "ci.yaml"
CASES = REPO / "eval" / "data" / "contract_cases.jsonl"
BASELINE = REPO / "eval" / "baselines" / "contract.json"  # 11 cases, all passing


def usage_error(res, *fragments: str) -> str:
    assert res.exit_code == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def contract_suite(tmp_path: Path, *, baseline: bool = True, extra: str = "") -> Path:
    """A suite of the contract eval, with a copy of the committed baseline (so that
    --update-baselines writes in tmp_path, never in the repository)."""
    if baseline:
        shutil.copy(BASELINE, tmp_path / "contract.json")
    lines = ["tolerance: 0.0", "evals:", "  - name: contract", "    kind: contract", "    split: all",
             f"    params: {{file: {json.dumps(str(CASES))}}}"]
    if baseline:
        lines.append("    baseline: contract.json")
    (tmp_path / "suite.yaml").write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    return tmp_path / "suite.yaml"


@pytest.fixture
def broken_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI test's deliberate regression: hallucinated citation markers kept in the answer."""
    from cograg.answer import contract

    validate = contract.validate_draft

    def broken_validate(draft, blocks):
        return validate(draft, blocks).model_copy(update={"answer": draft.answer})

    monkeypatch.setattr(contract, "validate_draft", broken_validate)


# ------------------------------------------------------------------------------------ --only

@pytest.mark.parametrize(("only", "fragments"), [
    ("routing_rules", ["'routing_rules'", "did you mean 'routing-rules'?"]),
    ("contract,routing_rules", ["'routing_rules'", "did you mean 'routing-rules'?"]),
    ("retrieval-cmrc2018-bm2,contrct", ["'retrieval-cmrc2018-bm2'", "did you mean 'retrieval-cmrc2018-bm25'",
                                        "'contrct'", "did you mean 'contract'?"]),
    ("nothing-like-it", ["'nothing-like-it'", "its evals: retrieval-cmrc2018-bm25, routing-rules, contract"]),
])
def test_an_unknown_only_name_is_a_usage_error_naming_the_closest(cli, tmp_path: Path, only: str,
                                                                  fragments: list[str]) -> None:
    res = cli("eval", "all", "--suite", CI_SUITE, "--only", only, "--store", tmp_path / "s", "--out", tmp_path / "out")
    line = usage_error(res, "--only", *fragments)
    if only.startswith("contract,"):
        assert "'contract'" not in line  # the known name next to the typo is not blamed
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_an_empty_only_is_a_usage_error(cli, tmp_path: Path) -> None:
    usage_error(cli("eval", "all", "--suite", CI_SUITE, "--only", ",", "--store", tmp_path / "s"),
                "--only names no eval")


def test_a_known_only_name_runs_that_entry_and_passes(cli, tmp_path: Path) -> None:
    res = cli("eval", "all", "--suite", CI_SUITE, "--only", "contract", "--store", tmp_path / "s", "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["passed"] is True and [(e["name"], e["gate"], e["items"]) for e in out["evals"]] == [
        ("contract", "pass", 11)]


# ---------------------------------------------------------------------- a run that gated nothing

def test_a_suite_run_in_which_no_gate_ran_does_not_pass(cli, tmp_path: Path) -> None:
    res = cli("eval", "all", "--suite", contract_suite(tmp_path, baseline=False), "--json")
    assert res.exit_code == 1, res.stdout + res.stderr
    assert json.loads(res.stdout)["passed"] is False and "no gate ran" in res.stderr
    (tmp_path / "empty.yaml").write_text("evals: []\n", encoding="utf-8")
    res = cli("eval", "all", "--suite", tmp_path / "empty.yaml", "--json")
    assert res.exit_code == 1 and json.loads(res.stdout) == {"passed": False, "evals": []}
    assert "no eval ran" in res.stderr


# -------------------------------------------------------------------------------- --limit

def test_limit_caps_every_entry_and_never_raises_its_own() -> None:
    from cograg.eval.suite import entry_limit

    assert entry_limit(1, None) == 1  # contract and routing have no limit of their own
    assert entry_limit(50, 200) == 50 and entry_limit(500, 200) == 200
    assert entry_limit(None, 200) == 200 and entry_limit(None, None) is None


def test_compare_with_another_number_of_rows_is_not_a_pass() -> None:
    base = EvalReport(kind="contract", split="all", summary={"pass_rate": 1.0}, gates={"pass_rate": "higher"},
                      rows=[{"id": str(i), "ok": True} for i in range(11)])
    now = base.model_copy(update={"rows": base.rows[:1]})
    comparison = compare(now, base, 0.0)
    assert not comparison.regressions and not comparison.passed
    assert comparison.lines()[0].startswith("not comparable: 1 item against 11 in the baseline")
    assert compare(base, base, 0.0).passed


def test_compare_with_other_items_of_the_same_number_is_not_a_pass() -> None:
    """Eleven other questions scoring as well as the baseline's eleven say nothing against them."""
    base = EvalReport(kind="contract", split="all", summary={"pass_rate": 1.0}, gates={"pass_rate": "higher"},
                      rows=[{"id": str(i), "ok": True} for i in range(11)])
    other = base.model_copy(update={"rows": [{"id": str(i), "ok": True} for i in range(2, 13)]})
    comparison = compare(other, base, 0.0)
    assert not comparison.regressions and not comparison.passed
    assert comparison.lines()[0].startswith("not comparable: 2 of the 11 items are not in the baseline")
    shuffled = base.model_copy(update={"rows": list(reversed(base.rows))})
    assert compare(shuffled, base, 0.0).passed


def test_a_limited_suite_run_is_not_comparable_and_does_not_pass(cli, tmp_path: Path, broken_contract: None) -> None:
    """The deliberate regression fails the full run; --limit 1 used to show it as a pass."""
    suite = contract_suite(tmp_path)
    assert cli("eval", "all", "--suite", suite).exit_code == 1
    res = cli("eval", "all", "--suite", suite, "--limit", "1", "--json")
    assert res.exit_code == 1, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["passed"] is False
    assert [(e["gate"], e["items"]) for e in out["evals"]] == [("not comparable", 1)]
    assert "not comparable: 1 item against 11 in the baseline" in res.stderr
    res = cli("eval", "all", "--suite", CI_SUITE, "--only", "contract", "--limit", "1", "--store", tmp_path / "s")
    assert res.exit_code == 1 and "not comparable" in res.stdout and "not comparable: 1 item" in res.stderr


def test_a_single_eval_against_a_baseline_of_another_size_is_not_comparable(cli) -> None:
    res = cli("eval", "contract", CASES, "--limit", "2", "--baseline", BASELINE)
    assert res.exit_code == 1 and "not comparable: 2 items against 11 in the baseline" in res.stderr
    assert "gate passed" not in res.stderr
    assert cli("eval", "contract", CASES, "--baseline", BASELINE).exit_code == 0


def test_limit_with_update_baselines_is_refused(cli, tmp_path: Path) -> None:
    suite = contract_suite(tmp_path)
    before = (tmp_path / "contract.json").read_bytes()
    usage_error(cli("eval", "all", "--suite", suite, "--limit", "1", "--update-baselines"), "--update-baselines")
    assert (tmp_path / "contract.json").read_bytes() == before


def test_update_baselines_writes_and_claims_no_pass(cli, tmp_path: Path) -> None:
    suite = contract_suite(tmp_path)
    (tmp_path / "contract.json").write_text("{}", encoding="utf-8")
    res = cli("eval", "all", "--suite", suite, "--update-baselines", "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["passed"] is None and out["evals"][0]["gate"] == "baseline written"
    assert len(json.loads((tmp_path / "contract.json").read_text(encoding="utf-8"))["rows"]) == 11


# --------------------------------------------------------------- what a passing gate has to say

def test_a_passing_entry_still_prints_what_its_comparison_says(cli, tmp_path: Path, broken_contract: None) -> None:
    """Within a generous tolerance the regression passes, but the broken rows are still shown."""
    res = cli("eval", "all", "--suite", contract_suite(tmp_path), "--tolerance", "1")
    assert res.exit_code == 0, res.stdout + res.stderr
    assert "rows passed in the baseline and fail now" in res.stderr and "hallucinated-id-removed" in res.stderr
