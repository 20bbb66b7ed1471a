"""The memorizer (SPEC E2): what of an answered turn enters memory.

Only sentences the verifier kept as SUPPORTED become facts, each with the source chunk and quote
of its first citation; the same statement from the same source is one fact. A refusal, a
clarification or a blocked turn writes no fact. The turn itself is stored with rule-made short and
medium summaries, tags and the named things it was about (for follow-ups)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from cograg.answer.answerer import AnswerResponse
from cograg.answer.contract import strip_markers
from cograg.memory.models import Fact, TurnRecord, fact_id_for, now
from cograg.text import is_chinese, split_sentences

# a correction of an earlier statement: "that is wrong, X is Y", "不对，X是Y"
_CORRECTION_EN = re.compile(r"^\s*(?:no[,.!]?\s+)?(?:that(?:'s| is| was)\s+(?:wrong|incorrect|not right|not true)|"
                            r"you(?:'re| are)\s+wrong|wrong)\s*[,.;:!-]*\s*(?P<statement>.+)$", re.I | re.S)
_CORRECTION_ZH = re.compile(r"^\s*(?:不对|错了|这是错的|那是错的|不是这样)[，,。！!：:\s]*(?P<statement>.+)$", re.S)

_QUESTION_WORDS = frozenset("When What Who Whom Whose Which Where Why How Is Are Was Were Do Does Did Can Could Has "
                            "Have Had Will Would Should May Might The A An It Its In On At Of And Or But If Then Yes No "
                            "Please Tell Give Show List Compare".split())
# runs of capitalised words ("Linden Bridge", "Tobias Marrick", "Great Ice Flood"), "of" allowed inside
# with the article and one lowercase modifier before them ("the stone Linden Bridge")
_NAME_EN = re.compile(r"\b(?:[Tt]he\s+(?:[a-z]{3,}\s+(?=[A-Z]))?)?[A-Z][\w'-]*(?:\s+(?:of\s+|de\s+|van\s+)?[A-Z][\w'-]*)*")
MIN_FACT_WORDS = 3  # "Tobias Marrick." answers a question but does not stand alone as a fact


def entities_in(text: str) -> list[str]:
    """Named things in `text`, in order: capitalised word runs for English (with their "the"),
    runs of jieba nouns for Chinese."""
    out: list[str] = []
    plain = strip_markers(text)
    for m in _NAME_EN.finditer(plain):
        phrase = m.group(0).strip()
        words = phrase.split()
        while words and words[0] in _QUESTION_WORDS and not (words[0] == "The" and len(words) > 1):
            words = words[1:]
        if not words or (len(words) == 1 and words[0] in ("the", "The")):
            continue
        if words[0] in ("The", "the"):
            words[0] = "the"
        phrase = " ".join(words)
        if phrase.lower() not in {e.lower() for e in out} and len(phrase.replace("the ", "")) > 2:
            out.append(phrase)
    if is_chinese(plain):
        out.extend(e for e in _chinese_nouns(plain) if e not in out)
    return out


def _chinese_nouns(text: str) -> list[str]:
    import logging

    import jieba
    import jieba.posseg as pseg

    jieba.setLogLevel(logging.WARNING)
    phrases: list[str] = []
    run = ""
    for word, flag in pseg.lcut(text):
        if flag.startswith("n") and re.fullmatch(r"[\u4e00-\u9fff]+", word):
            run += word
            continue
        if len(run) >= 2:
            phrases.append(run)
        run = ""
    if len(run) >= 2:
        phrases.append(run)
    return list(dict.fromkeys(phrases))


def correction_in(question: str) -> str | None:
    """The user's corrected statement when the turn is a correction ("that is wrong, X is Y")."""
    m = (_CORRECTION_ZH if is_chinese(question) else _CORRECTION_EN).match(question.strip())
    if not m:
        return None
    statement = m.group("statement").strip()
    return statement if len(statement) >= 4 else None


def supported_facts(resp: AnswerResponse, *, session_id: str, turn_id: str,
                    source_hash: Callable[[str], str | None]) -> list[Fact]:
    """The ledger entries an answer earns: one per kept, SUPPORTED sentence (E2)."""
    if resp.fallback or not resp.grounded:
        return []
    by_id = {c.id: c for c in resp.citations}
    out: dict[str, Fact] = {}
    for claim in resp.claims:
        if not claim.kept or claim.verdict != "SUPPORTED":
            continue
        cited = [by_id[i] for i in claim.citation_ids if i in by_id]
        if not cited:
            continue
        statement = strip_markers(claim.sentence).strip()
        if len(statement) < 4 or (not is_chinese(statement) and len(statement.split()) < MIN_FACT_WORDS):
            continue
        c = cited[0]
        fid = fact_id_for(session_id, statement, c.doc_id, c.chunk_id)
        out.setdefault(fid, Fact(fact_id=fid, session_id=session_id, statement=statement, source_doc_id=c.doc_id,
                                 source_chunk_id=c.chunk_id, source=c.source, source_hash=source_hash(c.doc_id),
                                 quote=c.quote, confidence=resp.confidence, turn_id=turn_id))
    return list(out.values())


def correction_fact(statement: str, *, session_id: str, turn_id: str, corrects: str | None) -> Fact:
    """A user correction (E6): the user's statement, recorded as theirs, with no document behind it."""
    fid = fact_id_for(session_id, statement, None, None)
    return Fact(fact_id=fid, session_id=session_id, statement=statement, kind="user_correction",
                confidence=0.0, turn_id=turn_id, corrects=corrects)


def _first_sentences(text: str, n: int) -> list[str]:
    return [strip_markers(s) for s in split_sentences(text)[:n] if strip_markers(s)]


def turn_record(*, session_id: str, question: str, resolved: str, question_norm: str, resp: AnswerResponse,
                facts_used: list[str], trace_id: str, tokens: Callable[[str], int]) -> TurnRecord:
    """The stored turn: summaries and tags made by rules (seed 004 §6.4: intent, topic, action)."""
    zh = is_chinese(resolved)
    joiner = "" if zh else " "
    if resp.fallback:
        outcome = "clarified" if resp.clarification else "refused"
        short = f"{resolved} — {outcome}"
        medium = short
    else:
        outcome = "answered"
        first = _first_sentences(resp.answer, 1)
        short = f"{resolved} — {first[0] if first else ''}".strip(" —")
        medium = f"{resolved} — " + joiner.join(_first_sentences(resp.answer, 4))
    entities = entities_in(resolved) + [e for e in entities_in(resp.answer if not resp.fallback else "")
                                        if e not in entities_in(resolved)]
    tags = [f"intent:{(resp.mode or resp.route or 'unknown').lower()}", f"action:{outcome}"]
    tags += [f"topic:{e.removeprefix('the ').lower()}" for e in entities[:3]]
    raw = f"{question}\n{resp.answer}"
    return TurnRecord(turn_id="t_" + uuid.uuid4().hex[:12], session_id=session_id, created_at=now(), question=question,
                      resolved_question=resolved, question_norm=question_norm, answer=resp.answer, route=resp.route,
                      mode=resp.mode or "", grounded=resp.grounded, confidence=resp.confidence, tags=tags,
                      entities=entities[:8], summary_short=short[:300], summary_medium=medium[:800],
                      citations=[c.chunk_id for c in resp.citations], facts_used=facts_used, trace_id=trace_id,
                      tokens=tokens(raw))


def summary_updater(turn: TurnRecord, facts: list[Fact], *,
                    standing: set[str] | None = None) -> Callable[[Any], Any]:
    """The session summary after this turn (run inside the commit, so concurrent turns merge):
    topics from the turn's entities, conclusions from its verified facts only (earlier ones only
    while `standing`, the statements of the ledger's valid facts, still holds them: a forgotten or
    invalidated fact leaves the summary too), an unanswered question stays open until a later turn
    answers it."""
    def update(summary: Any) -> Any:
        topics = list(dict.fromkeys(summary.main_topics + [e.removeprefix("the ") for e in turn.entities[:3]]))
        earlier = [c for c in summary.key_conclusions if standing is None or c in standing]
        conclusions = list(dict.fromkeys(earlier + [f.statement for f in facts if f.kind == "document"]))
        unresolved = [q for q in summary.unresolved_questions if q != turn.resolved_question]
        if not turn.grounded and turn.mode not in ("R0_DIRECT_WRITE", "R5_BLOCK"):
            unresolved.append(turn.resolved_question)
        return summary.model_copy(update={"main_topics": topics[-12:], "key_conclusions": conclusions[-20:],
                                          "unresolved_questions": list(dict.fromkeys(unresolved))[-10:]})
    return update


__all__ = ["correction_fact", "correction_in", "entities_in", "summary_updater", "supported_facts", "turn_record"]
