"""Right and answered HotpotQA questions by HotpotQA's own question type (bridge / comparison),
read from `cograg eval answers` reports: no model, no new run.

    .venv/bin/python benchmarks/answers_by_type.py benchmarks/results/answers-hotpotqa-default-*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def by_type(report: dict, types: dict[str, str]) -> dict[str, dict[str, int]]:
    """{type: {"questions", "right", "answered"}} over the report's answerable questions."""
    out: dict[str, dict[str, int]] = {}
    for row in report["rows"]:
        if not row["answerable"]:
            continue
        t = out.setdefault(types.get(row["id"], "unknown"), {"questions": 0, "right": 0, "answered": 0})
        t["questions"] += 1
        t["right"] += bool(row["contains_gold"])
        t["answered"] += bool(row["answered"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", type=Path, nargs="+")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()
    hotpot = json.loads((args.data / "hotpotqa_train100" / "hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))
    types = {x["_id"]: x["type"] for x in hotpot}
    for path in args.reports:
        report = json.loads(path.read_text(encoding="utf-8"))
        counts = by_type(report, types)
        cells = ", ".join(f"{t} {c['right']} of {c['questions']} right ({c['answered']} answered)"
                          for t, c in sorted(counts.items()))
        print(f"{path.name} [split {report.get('split')}]: {cells}")


if __name__ == "__main__":
    main()
