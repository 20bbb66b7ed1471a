"""Follow-up questions: "How many arches does it have?" after a question about the Linden Bridge.

A pronoun the router would find unresolved is replaced with the session's most recent named
thing before routing and retrieval; the rewrite is returned so the turn can record it. With no
session, or nothing in it to point at, the question is left alone (and goes to clarification)."""

from __future__ import annotations

import re

from pydantic import BaseModel

from cograg.memory.models import TurnRecord
from cograg.text import is_chinese

_SUBJECT_EN = re.compile(r"\b(it|they|them|he|him|she)\b", re.I)
_POSSESSIVE_EN = re.compile(r"\b(its|their|his|her)\b", re.I)
_PRONOUN_ZH = re.compile(r"它们|他们|她们|它|他|她|其")


class Rewrite(BaseModel):
    original: str
    rewritten: str
    entity: str
    pronoun: str
    from_turn: str


def needs_resolution(question: str) -> bool:
    """The router would ask what the question refers to (a bare pronoun or an ellipsis)."""
    from cograg.control.router import rule_analysis

    fired = rule_analysis(question).fired
    return "ambiguity.bare_pronoun" in fired


def _recent_entity(turns: list[TurnRecord], zh: bool) -> tuple[str, str] | None:
    """(entity, turn id) of the newest turn that named something in the question's language."""
    for turn in reversed(turns):
        for entity in turn.entities:
            if is_chinese(entity) == zh:
                return entity, turn.turn_id
    return None


def resolve_follow_up(question: str, turns: list[TurnRecord]) -> Rewrite | None:
    """The question with its pronoun replaced by the session's entity, or None."""
    if not turns or not needs_resolution(question):
        return None
    zh = is_chinese(question)
    found = _recent_entity(turns, zh)
    if found is None:
        return None
    entity, turn_id = found
    if zh:
        m = _PRONOUN_ZH.search(question)
        if not m:
            return None
        rewritten = question[:m.start()] + entity + question[m.end():]
        return Rewrite(original=question, rewritten=rewritten, entity=entity, pronoun=m.group(0), from_turn=turn_id)

    def name(pronoun: str, possessive: bool) -> str:
        text = f"{entity}'s" if possessive else entity
        return text[0].upper() + text[1:] if pronoun[0].isupper() else text

    m = _SUBJECT_EN.search(question) or _POSSESSIVE_EN.search(question)
    if not m:
        return None
    possessive = bool(_POSSESSIVE_EN.fullmatch(m.group(0)))
    rewritten = question[:m.start()] + name(m.group(0), possessive) + question[m.end():]
    return Rewrite(original=question, rewritten=rewritten, entity=entity, pronoun=m.group(0), from_turn=turn_id)


__all__ = ["Rewrite", "needs_resolution", "resolve_follow_up"]
