"""How often the verifier's question-names-in-context check (answer/verifier.py: a sentence that
takes a name from the question no passage of the context mentions is UNRELATED) would have turned
down a delivered answer of a stored `cograg eval answers` report. No answer model: each question is
searched again in the report's eval store and its top `--k` hits stand for the context the answer
was written from (R1 answers from six hits and its follow-up hop's, so `--k 6` finds fewer names
than the real context held: the count is an upper bound at 6 and a stress test below it).

    .venv/bin/python benchmarks/question_names_in_context.py \
        benchmarks/results/answers-hotpotqa-default-calibration-hop-by-documents.json --k 6
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.answer.markers import answer_sentences, strip_markers  # noqa: E402
from cograg.answer.subject import content_words, latin_names  # noqa: E402
from cograg.config import Settings  # noqa: E402
from cograg.engine import Engine  # noqa: E402

STORE = Path.home() / ".cograg" / "eval" / "answers-hotpotqa_train100-beir-view-corpus"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("--k", type=int, default=6, help="hits that stand for the context")
    ap.add_argument("--store", type=Path, default=STORE, help="the report's eval store")
    args = ap.parse_args()
    report = json.loads(args.report.read_text(encoding="utf-8"))
    rows = [r for r in report["rows"] if r["answered"] and r["lang"] == "en"]
    fired = []
    with Engine.open(settings=Settings(store=args.store, llm="default")) as eng:
        for r in rows:
            hits = eng.search(r["question"], k=args.k).hits
            context = content_words("\n".join(f"{h.title}\n{h.text}" for h in hits))
            for sentence in answer_sentences(r["answer"]):
                absent = (latin_names(strip_markers(sentence)) & content_words(r["question"])) - context
                if absent:
                    fired.append({"id": r["id"], "contains_gold": r["contains_gold"], "absent": sorted(absent),
                                  "sentence": sentence[:160]})
    print(json.dumps({"report": args.report.name, "split": report.get("split"), "k": args.k,
                      "answered": len(rows), "sentences_turned_down": len(fired),
                      "right_answers_turned_down": len({f["id"] for f in fired if f["contains_gold"]}),
                      "fired": fired}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
