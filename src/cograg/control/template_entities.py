"""What the plan templates accept as a named entity (control/plan_templates.py,
control/bridge_template.py): a short name, not itself a question or a clause, in English or Chinese."""

from __future__ import annotations

import re

_WH_EN = re.compile(r"^(?:which|who|whom|whose|what|when|where|why|how|between|both)\b", re.I)


def entity_en(text: str) -> str | None:
    """A plausible named entity: 1–10 words, a capitalised word, a digit or a quote in it, and not
    itself a question or a clause."""
    e = text.strip().strip(",;:").strip()
    words = e.split()
    if not 1 <= len(words) <= 10 or _WH_EN.match(e) or "?" in e:
        return None
    if not (re.search(r"(?:^|\s)[\"'“‘(]?[A-Z0-9]", e) or re.search(r"[\"“‘]", e)):
        return None
    return e


_WH_ZH = re.compile(r"哪|谁|什么|是否|是不是|如何|怎么|为什么|多少|吗")


def entity_zh(text: str) -> str | None:
    e = text.strip().strip("，,：:；;、 ")
    if not 1 <= len(e) <= 24 or _WH_ZH.search(e) or re.search(r"[，,。？?！!]", e):
        return None
    return e


def distinct_pair(a: str | None, b: str | None) -> tuple[str, str] | None:
    if a is None or b is None or a.lower() == b.lower():
        return None
    return a, b


__all__ = ["distinct_pair", "entity_en", "entity_zh"]
