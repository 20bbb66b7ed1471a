"""Contains-gold of stored `cograg eval answers` reports, re-scored with the mention rule the
reports were scored with (`gold_mentioned`: the gold anywhere in the answer) and with the rule that
asks how the answer commits to it (`contains_gold`: no credit for a negated gold, a gold offered as
one of alternatives or of a candidate list, a yes/no answer that says both). No model, no new run:
the rows hold each delivered answer (its first 500 characters) and the gold comes from the
report's own QA files (its `dataset` field), matched by question id.

    .venv/bin/python benchmarks/rescore_answers.py --latest          # the latest report per split
    .venv/bin/python benchmarks/rescore_answers.py benchmarks/results/answers-hotpotqa-*.json --show
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.answer.markers import strip_markers  # noqa: E402
from cograg.eval.answers import load_qa  # noqa: E402
from cograg.eval.scoring import contains_gold, gold_mentioned  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


def qa_files(report: dict[str, Any]) -> list[Path]:
    """The QA files a report was asked from: its `dataset` reads "a.json, b.jsonl over corpus"."""
    asked = str(report.get("dataset", "")).split(" over ")[0]
    return [Path(p.strip()) for p in asked.split(",") if p.strip()]


def golds(files: list[Path]) -> dict[str, list[str]]:
    """Gold answers by question id over the files that exist (a report's scratch file may be gone)."""
    out: dict[str, list[str]] = {}
    for path in files:
        if path.exists():
            out.update({item.id: item.answers for item in load_qa(path)})
    return out


def rescore(report: dict[str, Any], gold: dict[str, list[str]]) -> dict[str, Any]:
    """Stored, old-rule and new-rule contains-gold counts over the report's answerable rows, and
    the rows whose verdict the new rule changes. A refused row scores nothing, as in answer_row."""
    counts = {"answerable": 0, "no_gold": 0, "stored": 0, "old_rule": 0, "new_rule": 0}
    changed = []
    for row in report["rows"]:
        if not row.get("answerable"):
            continue
        counts["answerable"] += 1
        counts["stored"] += bool(row.get("contains_gold"))
        answers = gold.get(row["id"])
        if answers is None:
            counts["no_gold"] += 1
            continue
        prediction = strip_markers(row.get("answer", "")) if row.get("answered") else ""
        old = gold_mentioned(answers, prediction)
        new = contains_gold(answers, prediction, row.get("question"))
        counts["old_rule"] += old
        counts["new_rule"] += new
        if old != new:
            changed.append({"id": row["id"], "question": row.get("question", ""), "gold": answers,
                            "answer": row.get("answer", ""), "old": old, "new": new})
    return {**counts, "changed": changed}


def profile_of(report: dict[str, Any]) -> str:
    """`answers-hotpotqa-default` -> default (the suite names a report dataset-profile)."""
    return str(report.get("name", "")).rsplit("-", 1)[-1]


def latest(paths: list[Path]) -> list[Path]:
    """The newest report (by `created_at`) for each name, split and set of QA files (by file
    name: one file was named by different paths on different machines)."""
    newest: dict[tuple[str, str, tuple[str, ...]], tuple[str, Path]] = {}
    for path in paths:
        report = json.loads(path.read_text(encoding="utf-8"))
        key = (report.get("name", ""), report.get("split", ""), tuple(sorted(p.name for p in qa_files(report))))
        stamp = str(report.get("created_at", ""))
        if key not in newest or stamp > newest[key][0]:
            newest[key] = (stamp, path)
    return sorted(p for _, p in newest.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", type=Path, nargs="*", help="answer-eval report files (.json)")
    ap.add_argument("--latest", action="store_true",
                    help="only the newest of the reports (default: all of benchmarks/results) "
                         "per name, split and QA set")
    ap.add_argument("--show", action="store_true", help="print the rows whose verdict changes")
    ap.add_argument("--json", type=Path, help="write the counts and changed rows here")
    args = ap.parse_args()
    paths = args.reports or sorted(RESULTS.glob("answers-*.json"))
    if args.latest:
        paths = latest(paths)
    results = []
    for path in paths:
        report = json.loads(path.read_text(encoding="utf-8"))
        if report.get("kind") != "answers":
            continue
        out = rescore(report, golds(qa_files(report)))
        n, missing = out["answerable"], out["no_gold"]
        note = f" ({missing} without gold: QA file gone)" if missing else ""
        print(f"{path.name} [split {report.get('split')}, profile {profile_of(report)}, {report.get('created_at')}]: "
              f"stored {out['stored']}/{n}, old rule {out['old_rule']}/{n}, new rule {out['new_rule']}/{n}{note}")
        if args.show:
            for c in out["changed"]:
                print(f"    {c['old']} -> {c['new']}  gold={c['gold']}  Q: {c['question'][:80]}\n"
                      f"        A: {c['answer'][:300]}")
        results.append({"file": path.name, "split": report.get("split"), "profile": profile_of(report),
                        "created_at": report.get("created_at"), **out})
    if args.json:
        args.json.write_text(json.dumps(results, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
