"""Calibrate the router's rewrite margin on the calibration split (routing_rules.yaml, sufficiency).

A DOC_GROUNDED question whose preflight evidence misses the refusal floor goes to R2, whose grading
and query rewrites cost 8–10 model calls (about 200 s for a refusal on a loaded 2-core machine).
Rewrites can only help a question whose best evidence is close to the floor; one far below it is an
off-corpus question. The margin is the smallest step of a 0.005 grid (0 … 0.10) such that no
answerable calibration question of either language scores more than `margin` below its floor: a
question further below goes to R1, whose gate refuses it before any model call.

Input: the per-question best-evidence scores that `benchmarks/calibrate_floors.py` writes
(benchmarks/results/refusal-floors-<split>.jsonl; the score is the answerer's own gate score). The
margin is chosen from calibration rows only; the evaluation split reports how many answerable
questions the margin would cut (they would lose R2's rewrites) and how many unanswerable questions
skip the rewrites.

    .venv/bin/python benchmarks/calibrate_rewrite_margin.py [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import AnswerConfig  # noqa: E402

GRID = [round(0.005 * i, 3) for i in range(21)]  # 0 … 0.10
RESULTS = REPO / "benchmarks" / "results"


def load(split: str) -> list[dict]:
    path = RESULTS / f"refusal-floors-{split}.jsonl"
    return [r for r in (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line)
            if r.get("score") is not None]


def floor_of(row: dict, config: AnswerConfig) -> float:
    return config.evidence_floor(chinese=row["lang"] == "zh")


def choose_margin(rows: list[dict], config: AnswerConfig) -> float:
    """The smallest grid margin below which no answerable row falls (the grid's top if none is)."""
    answerable = [r for r in rows if r["source"] == "answerable"]
    for margin in GRID:
        if not any(r["score"] < floor_of(r, config) - margin for r in answerable):
            return margin
    return GRID[-1]


def counts(rows: list[dict], config: AnswerConfig, margin: float) -> list[tuple[str, str, int, int, int]]:
    """Per (language, source): questions, below the floor, beyond the margin."""
    out = []
    for key in sorted({(r["lang"], r["source"]) for r in rows}):
        mine = [r for r in rows if (r["lang"], r["source"]) == key]
        below = sum(r["score"] < floor_of(r, config) for r in mine)
        beyond = sum(r["score"] < floor_of(r, config) - margin for r in mine)
        out.append((key[0], key[1], len(mine), below, beyond))
    return out


def render(margin: float, config: AnswerConfig, table: dict[str, list]) -> str:
    lines = [f"Chosen on the calibration split: **rewrite_margin {margin}** (floors {config.min_evidence_cosine} en / "
             f"{config.min_evidence_cosine_zh} zh).", "",
             "| split | language | questions | n | below the floor (R2 tries rewrites) | beyond the margin (refused at once) |",
             "|---|---|---|---:|---:|---:|"]
    for split, rows in table.items():
        for lang, source, n, below, beyond in rows:
            lines.append(f"| {split} | {lang} | {source} | {n} | {below} | {beyond} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    config = AnswerConfig()
    calibration, evaluation = load("calibration"), load("evaluation")
    margin = choose_margin(calibration, config)
    text = render(margin, config, {"calibration": counts(calibration, config, margin),
                                   "evaluation": counts(evaluation, config, margin)})
    print(text)
    if args.write_docs:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from benchmarks_common import write_section

        write_section(REPO / "docs" / "benchmarks.md", "## Rewrite margin", DOC_HEAD + text)


DOC_HEAD = """## Rewrite margin (calibration split → evaluation split)

Command: `.venv/bin/python benchmarks/calibrate_rewrite_margin.py --write-docs` (no model; it reads
the best-evidence scores that `benchmarks/calibrate_floors.py` wrote). A DOC_GROUNDED question whose
preflight misses the refusal floor goes to R2's grading and query rewrites (8–10 model calls; the
demo's off-corpus question "Who won the 1998 FIFA World Cup final?" took 197 s to be refused that
way at load 3–4); one more than `rewrite_margin` below the floor goes to R1, whose gate refuses it
before any model call. The margin is the smallest 0.005 step under which no answerable calibration
question falls; "answerable" rows beyond the margin on the evaluation split are questions that lose
the rewrites.

"""


if __name__ == "__main__":
    main()
