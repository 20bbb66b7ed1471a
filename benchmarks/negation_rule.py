"""How often the verifier's deterministic negation check calls a claim CONTRADICTED, before and
after it looks at the clause that holds the claim's words (no model; a few seconds).

- cmrc2018 dev (`shared/data/cmrc2018`): every gold answer span, as the bare claim a small model
  often writes ("阴庙"), against its own passage. The passage states every one of these answers,
  so each CONTRADICTED here is a false one.
- SciFact (`shared/data/verification/scifact_nli_train.jsonl`): each claim against its abstract,
  counted by the pair's gold label (SUPPORT / CONTRADICT / NOT_ENOUGH_INFO).

The rule was written from reasoning, not tuned on either set; both are reported whole.

    .venv/bin/python benchmarks/negation_rule.py [--data ../shared/data] [--json]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from pathlib import Path

from cograg.answer.contract import best_sentence
from cograg.answer.verifier import _negated, _states_the_opposite, negation_contradicts

REPO = Path(__file__).resolve().parent.parent


def fires(claim: str, evidence: str, *, clause_rule: bool) -> bool:
    """The verifier's negation check (`negation_contradicts`); `clause_rule=False` is the check
    before the clause rule: a plain claim was contradicted whenever its closest sentence (and the
    cited text) held a negation word anywhere."""
    if clause_rule:
        return negation_contradicts(claim, evidence)
    closest = best_sentence(claim, evidence)
    if _negated(claim) == _negated(closest) or _negated(claim) == _negated(evidence):
        return False
    return _states_the_opposite(claim, closest) if _negated(claim) else True


def cmrc_pairs(data: Path) -> list[tuple[str, str]]:
    passages = {}
    for line in (data / "cmrc2018" / "beir" / "corpus.jsonl").open(encoding="utf-8"):
        row = json.loads(line)
        passages[row["_id"]] = row["text"]
    pairs = []
    for line in (data / "cmrc2018" / "qa_dev.jsonl").open(encoding="utf-8"):
        row = json.loads(line)
        answers = row["answers"] if isinstance(row["answers"], list) else ast.literal_eval(row["answers"])
        passage = passages.get(row["gold_doc_id"], "")
        if answers and passage and answers[0] in passage:
            pairs.append((answers[0], passage))
    return pairs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out: dict[str, dict[str, object]] = {}
    pairs = cmrc_pairs(args.data)
    out["cmrc2018 gold answers"] = {"pairs": len(pairs),
                                    "contradicted_before": sum(fires(c, e, clause_rule=False) for c, e in pairs),
                                    "contradicted_after": sum(fires(c, e, clause_rule=True) for c, e in pairs)}
    rows = [json.loads(line) for line in (args.data / "verification" / "scifact_nli_train.jsonl").open(encoding="utf-8")]
    for rule, key in ((False, "contradicted_before"), (True, "contradicted_after")):
        counts = Counter(r["label"] for r in rows if fires(r["claim"], " ".join(r["abstract"]), clause_rule=rule))
        for label in ("SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO"):
            entry = out.setdefault(f"scifact {label}", {"pairs": sum(r["label"] == label for r in rows)})
            entry[key] = counts[label]
    if args.json:
        json.dump(out, sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        print("| set | pairs | CONTRADICTED by the negation check, before | after |\n|---|---:|---:|---:|")
        for name, entry in out.items():
            print(f"| {name} | {entry['pairs']} | {entry['contradicted_before']} | {entry['contradicted_after']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
