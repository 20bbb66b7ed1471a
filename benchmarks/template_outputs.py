"""Every plan template's and question check's output on a fixed question set, as JSON, so that a
refactor of `control/plan_templates.py` can be shown to change nothing: run it on the commit before
and after the refactor and compare the two files. No model is needed.

The questions: the 100 HotpotQA questions and every question literal in `tests/` and `eval/`
(a double-quoted string starting with Which/Who/What/Was/Were/Between/Is/Are and ending in "?").

    .venv/bin/python benchmarks/template_outputs.py --out /tmp/after.json
    git worktree add /tmp/before REV && .venv/bin/python benchmarks/template_outputs.py \\
        --src /tmp/before/src --out /tmp/before.json
    cmp /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_LITERAL = re.compile(r'"((?:Which|Who|What|Was|Were|Between|Is|Are)[^"\n]{5,200}\?)"')


def question_set(repo: Path, data: Path) -> list[str]:
    hotpot = json.loads((data / "hotpotqa_train100" / "hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))
    qs = {x["question"] for x in hotpot}
    for path in [*repo.glob("tests/**/*.py"), *repo.glob("tests/**/*.jsonl"), *repo.glob("eval/**/*")]:
        if path.is_file():
            qs.update(_LITERAL.findall(path.read_text(encoding="utf-8", errors="replace")))
    return sorted(qs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--src", type=Path, default=REPO / "src", help="the package source to run (another checkout's)")
    ap.add_argument("--questions-from", type=Path, default=REPO, help="the checkout whose tests/ and eval/ give questions")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sys.path.insert(0, str(args.src))
    from cograg.control import plan_templates as t

    out = {}
    for q in question_set(args.questions_from, args.data):
        norm = " ".join(q.split())
        out[q] = [repr(t.template_plan(q)), repr(t.question_check(q)), repr(t.order_check(q)),
                  repr(t._comparison_en(norm))]
    args.out.write_text(json.dumps(out, ensure_ascii=False, indent=0), encoding="utf-8")
    fitted = sum(1 for v in out.values() if v[0] != "None")
    print(f"{len(out)} questions, {fitted} with a template plan, plan_templates from {t.__file__} -> {args.out}")


if __name__ == "__main__":
    main()
