"""Where citation completion (cograg.answer.completion) fires on drafts already logged in traces.

Every answer draft in a store's traces (its text, the block ids it cited, the context blocks'
chunks) is validated again with its question, as the answerer now does, and the drafts whose
validation completes a citation are printed with the outcome the turn had then. Quotes are not
in the traces, so each cited block is given an empty quote (validation then keeps the citation
only where the sentence itself is placed); completion needs only the answer, its markers and the
blocks. Only questions of `--split` are read (HotpotQA train100 or cmrc2018 dev, by the store's
corpus); no model runs.

    .venv/bin/python benchmarks/completion_replay.py STORE/cograg.db [--set hotpotqa|cmrc2018] [--split calibration]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.answer.contract import DraftAnswer, DraftCitation, validate_draft  # noqa: E402
from cograg.eval.answers import load_qa  # noqa: E402
from cograg.eval.splits import split_of  # noqa: E402
from cograg.retrieval.packing import ContextBlock  # noqa: E402


def _questions(data: Path, which: str, split: str) -> dict[str, str]:
    """{question as asked (spacing normalised): its gold answer} for the questions of `split`."""
    if which == "hotpotqa":
        items = json.loads((data / "hotpotqa_train100" / "hipporag_hotpotqa_train100.json").read_text(encoding="utf-8"))
        return {" ".join(q["question"].split()): q["answer"] for q in items if split_of(q) == split}
    items = [i.model_dump() for i in load_qa(data / "cmrc2018" / "qa_dev.jsonl", corpus_name="cmrc2018")]
    return {" ".join(i["question"].split()): str(i["answers"]) for i in items if split_of(i) == split}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db", type=Path)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--set", choices=["hotpotqa", "cmrc2018"], default="hotpotqa")
    ap.add_argument("--split", default="calibration")
    args = ap.parse_args()
    gold = _questions(args.data, args.set, args.split)
    conn = sqlite3.connect(args.db)
    seen: set[tuple[str, str]] = set()
    fired = 0
    for question, data in conn.execute("SELECT question, data FROM traces ORDER BY created_at DESC"):
        key_q = " ".join(question.split())
        if key_q not in gold:
            continue
        trace = json.loads(data)
        blocks = []
        for cb in trace.get("context_blocks") or []:
            rows = [conn.execute("SELECT text FROM chunks WHERE chunk_id = ?", (c,)).fetchone() for c in cb["chunk_ids"]]
            if any(r is None for r in rows):
                blocks = []
                break
            texts = [r[0] for r in rows]
            blocks.append(ContextBlock(citation_id=cb["id"], doc_id=cb["chunk_ids"][0], chunk_ids=cb["chunk_ids"],
                                       chunk_texts=texts, text="\n\n".join(texts), token_count=cb.get("tokens", 0),
                                       best_rank=cb["id"], title="", source=cb["source"]))
        for d in trace.get("drafts") or [] if blocks else []:
            if "text" not in d or (key_q, d["text"]) in seen:  # older traces kept no draft text
                continue
            seen.add((key_q, d["text"]))
            draft = DraftAnswer(answer=d["text"], citations=[DraftCitation(id=i, quote="") for i in d["cited"]],
                                fallback=d.get("fallback", False))
            validated = validate_draft(draft, blocks, question=question)
            if validated.issues.completed_citations:
                fired += 1
                verdicts = [(v.get("verdict"), v.get("citation_ids")) for v in trace.get("verdicts") or []]
                print(json.dumps({"question": question, "gold": gold[key_q], "draft": d["text"],
                                  "validated": validated.answer, "added": validated.issues.completed_ids,
                                  "verdicts_then": verdicts,
                                  "refused_then": (trace.get("outcome") or {}).get("fallback")}, ensure_ascii=False))
    print(json.dumps({"split": args.split, "set": args.set, "drafts": len(seen), "completed": fired}))


if __name__ == "__main__":
    main()
