"""What `answer.linked_documents` does to the context R1's model reads, without a model.

R1 answers from the blocks `pack_context` fits into `answer.context_budget_tokens` out of the
question's search merged with the follow-up hop (retrieval/hops.py). `retrieval/links.py` adds the
documents that the question's documents name by their titles and, in `only` mode, drops every
other hit. Per question this script counts: whether the links fired, which documents they named,
whether all gold paragraphs are still in the packed context, how many blocks the model reads, and
what the name look-ups cost.

* HotpotQA train100 (BEIR view; `--split calibration` or `evaluation`), gold = its supporting
  paragraphs;
* or a QA file of the project's (`--qa benchmarks/data/number_bridges.jsonl`), with no gold
  paragraphs: links and context sizes only.

The store is the one `cograg eval answers` builds for HotpotQA (`--store`).

    .venv/bin/python benchmarks/linked_documents.py --split calibration [--mode only|front] [--qa FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import Settings  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.eval.retrieval import hotpot_to_beir, load_beir  # noqa: E402
from cograg.eval.splits import select_ids  # noqa: E402
from cograg.retrieval.hops import follow_up_search  # noqa: E402
from cograg.retrieval.links import linked_context, unit_title  # noqa: E402
from cograg.retrieval.packing import pack_context  # noqa: E402


def packed(hits, hits_kept: int, budget: int):
    pack = pack_context(hits[:hits_kept], budget)
    chosen = {cid for b in pack.blocks for cid in b.chunk_ids}
    return [h for h in hits[:hits_kept] if h.chunk_id in chosen]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="calibration", choices=["calibration", "evaluation", "all"])
    ap.add_argument("--mode", default="only", choices=["only", "front"])
    ap.add_argument("--qa", type=Path, default=None, help="a JSONL of questions instead of HotpotQA's own")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--store", type=Path, default=Path.home() / ".cograg" / "eval" /
                    "answers-hotpotqa_train100-beir-view-corpus")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cfg = Settings().answer
    hotpot = args.data / "hotpotqa_train100"
    beir = hotpot_to_beir(hotpot / "hipporag_hotpotqa_train100.json", hotpot / "hipporag_hotpotqa_train100_corpus.json",
                          args.store.parent / "hotpotqa_train100-beir-view")
    if args.qa:
        items = [(r["id"], r["question"], set()) for r in map(json.loads, args.qa.read_text().splitlines()) if r]
    else:
        data = load_beir(beir, "train")
        items = [(q, data.queries[q], {d for d, r in data.qrels[q].items() if r > 0})
                 for q in select_ids(sorted(data.queries), args.split)]
    rows, seconds = [], []
    with Engine.open(args.store) as eng:
        if not eng.store.list_documents():
            eng.ingest([beir / "corpus.jsonl"])

        def search(q: str):
            return eng.retrieve(q, k=cfg.retrieve_hits, mode="hybrid")

        for qid, question, gold in items:
            hopped = follow_up_search(search, question)
            t = time.perf_counter()
            linked, links = linked_context(hopped, question, search, mode=args.mode)
            seconds.append(time.perf_counter() - t)
            before = packed(hopped.hits, cfg.retrieve_hits, cfg.context_budget_tokens)
            after = packed(linked.hits, cfg.retrieve_hits, cfg.context_budget_tokens)
            rec = lambda hs: {str(h.metadata.get("record_id")) for h in hs}  # noqa: E731
            rows.append({"id": qid, "question": question, "links": [l["title"] for l in links],
                         "context_before": [unit_title(h) for h in before],
                         "context_after": [unit_title(h) for h in after],
                         "all_gold_before": gold <= rec(before) if gold else None,
                         "all_gold_after": gold <= rec(after) if gold else None})
    n = len(rows)
    with_gold = [r for r in rows if r["all_gold_before"] is not None]
    summary = {"questions": n, "mode": args.mode, "split": None if args.qa else args.split,
               "qa": str(args.qa) if args.qa else None, "links_fired": sum(bool(r["links"]) for r in rows),
               "all_gold_in_context_before": sum(r["all_gold_before"] for r in with_gold) if with_gold else None,
               "all_gold_in_context_after": sum(r["all_gold_after"] for r in with_gold) if with_gold else None,
               "blocks_mean_before": round(sum(len(r["context_before"]) for r in rows) / max(1, n), 2),
               "blocks_mean_after": round(sum(len(r["context_after"]) for r in rows) / max(1, n), 2),
               "link_seconds_median": round(statistics.median(seconds), 3) if seconds else None,
               "link_seconds_max": round(max(seconds), 3) if seconds else None}
    if args.json:
        print(json.dumps({"summary": summary, "rows": rows}, indent=2, ensure_ascii=False))
        return
    for r in rows:
        if r["links"]:
            lost = " (gold lost)" if r["all_gold_before"] and not r["all_gold_after"] else ""
            print(f"- {r['question'][:80]} | links: {', '.join(r['links'])} | context: "
                  f"{', '.join(r['context_after'])}{lost}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
