"""Which block holds each draft's quote: runs any `cograg` command (normally `eval all` on the
calibration split) with every answer draft logged as one JSON line — the draft, what validation
found, and for each citation its quote, whether it is text of the block the model numbered and
which blocks of the turn hold it. This is how the moved-citation rule
(`cograg.answer.contract.misnumbered_citations`) was looked at before it was measured.

    .venv/bin/python benchmarks/draft_quotes.py drafts.jsonl eval all --suite SUITE.yaml \
        --data ../shared/data --store STORE --out DIR --json

SUITE.yaml: `eval/suite.yaml`'s `answers-*-default` entries with `split: calibration` and `limit: 16`.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def log_drafts(path: str) -> None:
    """Wrap the validation the answerer calls so that each draft is appended to `path`."""
    import cograg.answer.answerer as answerer
    from cograg.answer.contract import find_quote, locate_quote

    validate = answerer.validate_draft

    def logged(draft: Any, blocks: list[Any], **options: Any) -> Any:
        out = validate(draft, blocks, **options)
        question = options.get("question") or ""
        cits = []
        for c in draft.citations:
            holders = [str(b.citation_id) for b in blocks
                       if c.quote and any(find_quote(c.quote, t) for t in [b.text, *b.chunk_texts])]
            own = next((b for b in blocks if str(b.citation_id) == str(c.id)), None)
            # how the quote would be placed in the block the model numbered, and what it becomes
            _, placed, outcome, similarity = locate_quote(c.quote, "", own) if own and c.quote else (0, "", "", None)
            cits.append({"id": str(c.id), "quote": c.quote[:200], "in_own": str(c.id) in holders, "found_in": holders,
                         "outcome": outcome, "similarity": similarity, "placed": placed[:200]})
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"question": question, "answer": draft.answer, "validated": out.answer,
                                 "issues": out.issues.model_dump(exclude_defaults=True),
                                 "cits": cits, "blocks": [(str(b.citation_id), b.title) for b in blocks]},
                                ensure_ascii=False) + "\n")
        return out

    answerer.validate_draft = logged


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: draft_quotes.py LOG.jsonl COGRAG-ARGS...")
    log_drafts(sys.argv[1])
    from cograg.cli import main as cli_main

    sys.argv = ["cograg", *sys.argv[2:]]
    cli_main()


if __name__ == "__main__":
    main()
