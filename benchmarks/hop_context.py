"""What R1's answer model would read for one question: the blocks `pack_context` fits into the
context budget from the follow-up hop's merged hits, for each `--keep` (the first search's hits kept
in front; `default` is the document-aware rule of `cograg.retrieval.hops`). No model runs; a fresh
store of the given files is built in a temporary folder.

    .venv/bin/python benchmarks/hop_context.py "How many arches does the Linden Bridge have?" \\
        examples/corpus --keep default --keep 4 --keep 3 [--index milvus:index.db]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import Settings, default_model_cache  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.retrieval.hops import follow_up_search  # noqa: E402
from cograg.retrieval.packing import pack_context  # noqa: E402


def _keep(value: str) -> int | None:
    return None if value == "default" else int(value)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("question")
    ap.add_argument("paths", nargs="+", type=Path, help="files or folders to ingest")
    ap.add_argument("--keep", type=_keep, action="append", default=[],
                    help="a number of hits or 'default'; repeatable (default: default, 4 and 3)")
    ap.add_argument("--index", default=None, help="index backend, e.g. milvus:index.db (default: the settings')")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(store=Path(tmp) / "store", model_cache=default_model_cache(),
                            **({"index": args.index} if args.index else {}))
        cfg = settings.answer
        with Engine.open(settings=settings) as eng:
            eng.ingest(args.paths)
            for keep in args.keep or [None, 4, 3]:
                hits = follow_up_search(lambda q: eng.retrieve(q, k=cfg.retrieve_hits, mode="hybrid"),
                                        args.question, keep=keep).hits
                pack = pack_context(hits[:cfg.retrieve_hits], cfg.context_budget_tokens)
                print(f"keep {'default' if keep is None else keep}: {len(pack.blocks)} blocks")
                for b in pack.blocks:
                    print(f"  [{b.citation_id}] {b.title} | {' '.join(b.text.split())[:70]}")


if __name__ == "__main__":
    main()
