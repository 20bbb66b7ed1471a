"""Compaction's LLM step (SPEC E4: rules first, the LLM summary second, only verified content).

The rule step folds old turns into summary lines built from verified sentences. The model may then
condense those lines; a sentence of its summary is kept only if every content word and number in it
occurs in the lines (a deterministic containment check), so the model can shorten the summary but
never add to it. A model failure, or a summary that is not shorter, leaves the rule summary."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from cograg.prompts import load_prompt

MAX_SENTENCES = 8


class SessionDigest(BaseModel):
    sentences: list[str] = Field(default_factory=list)


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:[.,]\d+)*", text))


def contained(sentence: str, source: str) -> bool:
    """Every analysed term and number of `sentence` occurs in `source`."""
    from cograg.index.analyzer import analyze

    terms = set(analyze(sentence))
    return bool(terms) and terms <= set(analyze(source)) and _numbers(sentence) <= _numbers(source)


def condense(lines: list[str], llm: Any, *, count_tokens: Any, timeout_s: float = 120.0) -> tuple[str, dict[str, Any]]:
    """(rolling summary, report): the model's contained sentences when they are shorter than the
    lines, else the lines themselves."""
    from cograg.models import ModelError
    from cograg.models.llm import ChatMessage

    text = "\n".join(lines)
    prompt = load_prompt("summarize_session")
    report: dict[str, Any] = {"prompt": prompt.version, "method": "rules"}
    try:
        digest, _ = llm.chat_json([ChatMessage(role="user", content=prompt.render(notes=text,
                                                                                  max_sentences=MAX_SENTENCES))],
                                  SessionDigest, max_tokens=256, timeout_s=timeout_s)
    except ModelError as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"[:200]
        return text, report
    kept = [s.strip() for s in digest.sentences[:MAX_SENTENCES] if s.strip() and contained(s, text)]
    report.update(proposed=len(digest.sentences), kept=len(kept))
    summary = " ".join(kept)
    if kept and count_tokens(summary) < count_tokens(text):
        report["method"] = "llm"
        return summary, report
    return text, report


__all__ = ["condense", "contained"]
