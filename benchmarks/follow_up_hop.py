"""Should R1 search with the follow-up hop? What the answer model sees, with and without it.

R1 answers from the passages `pack_context` fits into `answer.context_budget_tokens` out of the
`answer.retrieve_hits` hits of one search. `cograg.retrieval.hops.follow_up_search` keeps the
first search's best two thirds and fills the rest from a second search of the question plus its
top passage: no model call, one more embedding. This script counts, per question, whether the gold
passage(s) end up in the packed context either way:

* HotpotQA train100 (BEIR view, English, bridge and comparison): all gold paragraphs in the
  context, and the share of gold paragraphs in it;
* cmrc2018 dev (BEIR passages, Chinese, single passage): the gold passage in the context, to see
  that one-paragraph questions lose nothing.

Model-free apart from the embedder; the stores are the ones `cograg eval answers` builds
(`--stores`, default the suite's work folder). The decision is taken on `--split calibration`;
`--split evaluation` reports the held-apart half.

    .venv/bin/python benchmarks/follow_up_hop.py --split calibration [--stores DIR] [--json]
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
from cograg.retrieval.packing import pack_context  # noqa: E402


def packed_records(hits, budget: int) -> set[str]:
    pack = pack_context(hits, budget)
    chosen = {cid for b in pack.blocks for cid in b.chunk_ids}
    return {str(h.metadata.get("record_id")) for h in hits if h.chunk_id in chosen}


def measure(eng: Engine, beir: Path, qrels: str, split: str, hits: int, budget: int, limit: int | None,
            keep: int | None = None) -> dict:
    data = load_beir(beir, qrels)
    qids = select_ids(sorted(data.queries), split)[:limit]
    counts = {"questions": len(qids), "all_gold_one_shot": 0, "all_gold_hop": 0,
              "gold_share_one_shot": 0.0, "gold_share_hop": 0.0, "changed_context": 0}
    extra_s: list[float] = []

    def search(q: str):
        return eng.retrieve(q, k=hits, mode="hybrid")

    for qid in qids:
        question = data.queries[qid]
        gold = {d for d, r in data.qrels[qid].items() if r > 0}
        one = packed_records(search(question).hits, budget)
        t = time.perf_counter()
        hopped_result = follow_up_search(search, question, keep=keep)
        extra_s.append(time.perf_counter() - t)
        hop = packed_records(hopped_result.hits, budget)
        counts["all_gold_one_shot"] += gold <= one
        counts["all_gold_hop"] += gold <= hop
        counts["gold_share_one_shot"] += len(gold & one) / len(gold)
        counts["gold_share_hop"] += len(gold & hop) / len(gold)
        counts["changed_context"] += one != hop
    n = max(1, len(qids))
    return {"questions": len(qids),
            "all_gold_in_context": {"one_shot": round(counts["all_gold_one_shot"] / n, 3),
                                    "follow_up_hop": round(counts["all_gold_hop"] / n, 3)},
            "gold_share_in_context": {"one_shot": round(counts["gold_share_one_shot"] / n, 3),
                                      "follow_up_hop": round(counts["gold_share_hop"] / n, 3)},
            "context_changed": counts["changed_context"],
            "hop_search_seconds_median": round(statistics.median(extra_s), 3) if extra_s else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="calibration", choices=["calibration", "evaluation", "all"])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--stores", type=Path, default=REPO / "eval" / "results" / "stores",
                    help="folder holding the answer evals' stores (answers-beir-corpus, "
                         "answers-hotpotqa_train100-beir-view-corpus); built here when missing")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--keep", type=int, default=None,
                    help="first-search hits kept in front (default: follow_up_search's document-aware rule)")
    ap.add_argument("--sets", default="hotpotqa_train100,cmrc2018 dev", help="comma-separated set names")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cfg = Settings().answer
    hotpot_dir = args.data / "hotpotqa_train100"
    beir_hotpot = hotpot_to_beir(hotpot_dir / "hipporag_hotpotqa_train100.json",
                                 hotpot_dir / "hipporag_hotpotqa_train100_corpus.json",
                                 args.stores / "hotpotqa_train100-beir-view")
    sets = [("hotpotqa_train100", beir_hotpot, "train", args.stores / "answers-hotpotqa_train100-beir-view-corpus"),
            ("cmrc2018 dev", args.data / "cmrc2018" / "beir", "dev", args.stores / "answers-beir-corpus")]
    report = {"split": args.split, "retrieve_hits": cfg.retrieve_hits, "context_budget_tokens": cfg.context_budget_tokens,
              "keep": args.keep, "sets": {}}
    for name, beir, qrels, store in sets:
        if name not in args.sets.split(","):
            continue
        with Engine.open(store) as eng:
            if not eng.store.list_documents():
                eng.ingest([beir / "corpus.jsonl"])
            report["sets"][name] = measure(eng, beir, qrels, args.split, cfg.retrieve_hits,
                                           cfg.context_budget_tokens, args.limit, args.keep)
        print(name, json.dumps(report["sets"][name]), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    print(f"split {args.split}; {cfg.retrieve_hits} hits, context budget {cfg.context_budget_tokens}")
    print("| set | questions | all gold in context: one search / follow-up hop | gold share: one / hop | "
          "contexts changed | hop search s (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in report["sets"].items():
        a, s = r["all_gold_in_context"], r["gold_share_in_context"]
        print(f"| {name} | {r['questions']} | {a['one_shot']} / {a['follow_up_hop']} | {s['one_shot']} / "
              f"{s['follow_up_hop']} | {r['context_changed']} | {r['hop_search_seconds_median']} |")


if __name__ == "__main__":
    main()
