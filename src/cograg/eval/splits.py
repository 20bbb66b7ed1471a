"""Calibration and evaluation splits of the development data (docs/evaluation-splits.md).

A threshold tuned on the questions it is then measured on overstates what it is worth, so every
question set is cut in two, once and for all, by a rule that needs no stored list:

- order the questions by SHA-256 of `"<set name>:<question id>"` (hex digest, ascending);
- the first half (rounded down) is the **calibration** split: thresholds and prompts may be tuned
  on it; the rest is the **evaluation** split: reported figures come from it only.

HotpotQA train100: the set name is `hotpotqa_train100` and the id is the question's `_id`
(50 calibration, 50 evaluation questions).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, TypeVar

Split = Literal["calibration", "evaluation"]
T = TypeVar("T")

HOTPOTQA_TRAIN100 = "hotpotqa_train100"


def split_key(set_name: str, item_id: str) -> str:
    return hashlib.sha256(f"{set_name}:{item_id}".encode()).hexdigest()


def split_items(items: Sequence[T], set_name: str, split: Split, item_id: Callable[[T], str]) -> list[T]:
    """The `split` half of `items`, in the split's own order (by hash)."""
    ordered = sorted(items, key=lambda it: split_key(set_name, item_id(it)))
    half = len(ordered) // 2
    return ordered[:half] if split == "calibration" else ordered[half:]


def hotpotqa_train100(path: Path | str, split: Split) -> list[dict]:
    """The `split` questions of HotpotQA train100 (`hipporag_hotpotqa_train100.json`)."""
    questions = json.loads(Path(path).read_text(encoding="utf-8"))
    return split_items(questions, HOTPOTQA_TRAIN100, split, lambda q: str(q["_id"]))


__all__ = ["HOTPOTQA_TRAIN100", "Split", "hotpotqa_train100", "split_items", "split_key"]
