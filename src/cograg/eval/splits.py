"""Calibration and evaluation splits of every labelled set (SPEC H: calibrate on one part, report the other).

The rule, the same for every set and every item:

    id     = the item's own id (`id`, `_id`, `qid`; SciFact: `claim_id:doc_id`), else its question
             (plus its context, where a question is asked of several contexts, as in BIPIA)
    key    = the id, except where several items share one claim: SciFact's pairs of one claim with
             its abstracts are split together, by "claim:" + claim_id, so no claim is in both parts
    bucket = int(sha256("cograg-split-v1:" + key)[:8], 16) / 2**32
    split  = "calibration" if bucket < 1/3 else "evaluation"

It depends on nothing but the id, so it is stable across runs, machines, file order, subsets and
new items (an item added later never moves an old one). Thresholds, prompts and rules are tuned on
`calibration` only; figures are reported on `evaluation`.

One exception, for history that a hash cannot undo: a record whose `split` field names a part of a
set that was used to write or tune something keeps that status. The routing set's `dev` and
`heldout` items were in view while the rule table was written (`calibration`); `heldout2` was
written after it was frozen (`evaluation`). A record whose `split` is `calibration` or `evaluation`
is taken at its word.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

Split = Literal["calibration", "evaluation"]
SplitChoice = Literal["calibration", "evaluation", "all"]
SPLIT_CHOICES: tuple[str, ...] = ("calibration", "evaluation", "all")
SPLIT_RULE = ("sha256-v1: calibration when int(sha256('cograg-split-v1:'+key)[:8],16)/2**32 < 1/3, key = the "
              "item's id, or 'claim:'+claim_id for SciFact pairs (one claim, one part); "
              "a historic split label wins (dev, heldout: calibration; heldout2: evaluation)")
CALIBRATION_SHARE = 1 / 3
_SALT = "cograg-split-v1:"

# `split` labels written into sets before this rule existed, and what they mean now
HISTORIC_LABELS: dict[str, Split] = {"dev": "calibration", "heldout": "calibration", "heldout2": "evaluation",
                                     "calibration": "calibration", "evaluation": "evaluation"}


def item_id(record: Mapping[str, Any]) -> str:
    """The id the split rule hashes (see the module docstring)."""
    for key in ("id", "_id", "qid"):
        if record.get(key) not in (None, ""):
            return str(record[key])
    if "claim_id" in record:
        return f"{record['claim_id']}:{record.get('doc_id', '')}"
    question = record.get("question") or record.get("claim") or record.get("text")
    if question is None:
        return json.dumps(record, sort_keys=True, ensure_ascii=False)
    context = record.get("context")
    return f"{question}\n{context}" if context else str(question)


def split_key(record: Mapping[str, Any]) -> str:
    """What the split rule hashes: the item's id, or its claim where items share one (SciFact: a
    claim is judged against several abstracts; split by pair, 25 claims fell in both parts)."""
    if record.get("claim_id") not in (None, ""):
        return f"claim:{record['claim_id']}"
    return item_id(record)


def split_of_id(identifier: str) -> Split:
    digest = hashlib.sha256((_SALT + identifier).encode("utf-8")).hexdigest()
    return "calibration" if int(digest[:8], 16) / 2**32 < CALIBRATION_SHARE else "evaluation"


def split_of(record: Mapping[str, Any]) -> Split:
    label = record.get("split")
    if isinstance(label, str) and label in HISTORIC_LABELS:
        return HISTORIC_LABELS[label]
    return split_of_id(split_key(record))


def select(records: Iterable[Mapping[str, Any]], split: str) -> list[Any]:
    """The records of `split` (`calibration`, `evaluation` or `all`), in their original order."""
    if split not in SPLIT_CHOICES:
        raise ValueError(f"split must be one of {', '.join(SPLIT_CHOICES)} (got {split!r})")
    return [r for r in records if split == "all" or split_of(r) == split]


def select_ids(ids: Iterable[str], split: str) -> list[str]:
    """The ids of `split` for sets whose items are bare ids (BEIR query ids)."""
    if split not in SPLIT_CHOICES:
        raise ValueError(f"split must be one of {', '.join(SPLIT_CHOICES)} (got {split!r})")
    return [i for i in ids if split == "all" or split_of_id(i) == split]


def spread(groups: Iterable[Iterable[Mapping[str, Any]]]) -> list[Any]:
    """Records of several groups (files) in a stable pseudo-random order (sha256 of the id with
    another salt than the split's), the groups interleaved: the first N of the result are spread
    over every group and over each group's whole range, so `--limit N` samples fairly."""
    ordered = [sorted(g, key=lambda r: hashlib.sha256(("cograg-order-v1:" + item_id(r)).encode("utf-8")).hexdigest())
               for g in groups]
    out: list[Any] = []
    for i in range(max((len(g) for g in ordered), default=0)):
        out += [g[i] for g in ordered if i < len(g)]
    return out


HOTPOTQA_TRAIN100 = "hotpotqa_train100"


def hotpotqa_train100(path: Any, split: str) -> list[dict]:
    """The `split` questions of HotpotQA train100 (`hipporag_hotpotqa_train100.json`, id `_id`),
    in the stable `spread` order, so the first N of a split are a fair sample of it."""
    from pathlib import Path

    questions = json.loads(Path(path).read_text(encoding="utf-8"))
    return spread([select(questions, split)])
