"""Conversation memory as the engine uses it (SPEC E1–E6): one `SessionMemory` per engine over a
`MemoryStore`, and one `SessionTurn` per question asked in a session.

A turn: `begin_turn` loads the session (creating it on first use), resolves a follow-up against
the session's entities, recalls the facts relevant to the question and builds the layered
context; the orchestrator routes and answers with them; `SessionTurn.commit` writes the turn, its
verified facts and the summary update back in one transaction, then compacts when the session
has grown past its budget. Documents that change or disappear invalidate the facts they backed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from cograg.answer.answerer import AnswerResponse
from cograg.config import MemoryConfig
from cograg.memory.access import ChunkReadable, FactSources, fact_sources, withhold_unreadable_turns
from cograg.memory.context import LayeredContext, build_context, cache_key, normalise_query, relevant_facts
from cograg.memory.followup import Rewrite, resolve_follow_up
from cograg.memory.memorizer import (
    correction_fact, correction_in, summary_updater, supported_facts, turn_record,
)
from cograg.memory.models import CommitResult, Fact, Session, SessionState, TurnRecord, WorkingBench
from cograg.memory.store import MemoryStore, SessionError, SessionNotFound, check_session_id
from cograg.retrieval.models import SearchHit


def _count_tokens(text: str) -> int:
    from cograg.ingest.tokens import count_tokens

    return count_tokens(text)


class Compaction(BaseModel):
    session_id: str
    folded: int = 0
    kept_raw: int = 0
    rolling_tokens: int = 0
    reason: str = ""
    summary: dict[str, Any] = Field(default_factory=lambda: {"method": "rules"})


class SessionTurn:
    """One question in a session: what memory contributes before the answer, and the write-back after."""

    def __init__(self, memory: SessionMemory, state: SessionState, question: str, *, rewrite: Rewrite | None,
                 facts: list[Fact], context: LayeredContext,
                 source_hit: Callable[[str], SearchHit | None] | FactSources,
                 cache_scope: dict[str, str], correction: str | None) -> None:
        self.memory = memory
        self.state = state
        self.session_id = state.session.session_id
        self.original = question
        self.rewrite = rewrite
        self.question = rewrite.rewritten if rewrite else question
        self._sources = fact_sources(source_hit)
        # what the caller may not see now is not this turn's: not in a prompt, a reply or the cache key
        self.facts = [f for f in facts if self._sources.admits(f)]
        self.context = context
        self.correction = correction
        self._cache_scope = cache_scope
        self.bench = WorkingBench(question=question, resolved_question=self.question,
                                  rewrite=rewrite.model_dump() if rewrite else None,
                                  recalled_fact_ids=[f.fact_id for f in self.facts],
                                  context_block_ids=context.block_ids,
                                  context_tokens=context.tokens, problems=state.problems)

    @property
    def has_context(self) -> bool:
        """Earlier turns give a pronoun something to point at (only when it was resolved)."""
        return self.rewrite is not None

    def document_facts(self) -> list[Fact]:
        """The recalled document facts the caller may see now (`access.FactSources`): the one
        gate for the router's and the planner's facts, R0 and the fact passages of a search."""
        return [f for f in self.facts if f.kind == "document" and self._sources.admits(f)]

    def prompt_facts(self) -> list[dict[str, Any]]:
        """The recalled facts as the planner and the router see them (`id`, `statement`)."""
        return [{"id": f.fact_id, "statement": f.statement} for f in self.document_facts()]

    def fact_hits(self) -> list[tuple[Fact, SearchHit]]:
        """Each recalled document fact with its source chunk as a hit annotated `fact:ID` (the
        evidence a fact citation is verified against); facts whose chunk is gone, or that the
        caller may no longer see, are left out."""
        out: list[tuple[Fact, SearchHit]] = []
        for f in self.document_facts():
            hit = self._sources.hit(f)
            if hit is not None:
                out.append((f, hit.model_copy(update={"annotations": [*hit.annotations, f"fact:{f.fact_id}"]})))
        return out

    def loaded_event(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "facts_read": [f.fact_id for f in self.facts],
                "turns": len(self.state.turns), "context_blocks": self.context.block_ids,
                "context_tokens": self.context.tokens, "problems": self.state.problems[:5]}

    # ------------------------------------------------------------------ the answer cache
    def cache_key(self, route: str) -> str:
        """E3's key for this question. `route` is the route requested (`auto`, or a forced mode):
        the router's choice is a function of the rest of the key. The context blocks are the facts
        recalled for the question, less those an earlier asking of the same question established
        (an answer's own output is not something it depended on), plus the documents' generation
        and the reader's access groups."""
        norm = normalise_query(self.question)
        own = {t.turn_id for t in self.state.turns if t.question_norm == norm}
        blocks = [f"L3:{f.fact_id}" for f in self.facts if f.turn_id not in own]
        blocks += [f"{k}:{v}" for k, v in sorted(self._cache_scope.items()) if k not in ("model", "policy")]
        key = cache_key(model=self._cache_scope.get("model", ""), route=route, normalised_query=norm,
                        context_block_ids=blocks, policy_version=self._cache_scope.get("policy", ""))
        self.bench.cache_key = key
        return key

    def cached_answer(self, route: str) -> AnswerResponse | None:
        if not self.memory.cache_enabled(session=True):
            return None
        found = self.memory.store.cache_get(self.cache_key(route))
        if not found:
            return None
        try:
            return AnswerResponse.model_validate(found)
        except ValueError:
            return None

    def remember_answer(self, route: str, resp: AnswerResponse) -> None:
        if self.memory.cache_enabled(session=True) and cacheable(resp):
            self.memory.store.cache_put(self.cache_key(route), resp.model_dump(mode="json"),
                                        session_id=self.session_id)

    # ------------------------------------------------------------------ write-back
    def commit(self, resp: AnswerResponse, trace_id: str) -> CommitResult:
        """Write the turn back (E5): the turn, the verified facts it established (E2) or the user's
        correction (E6), and the summary update, atomically; then compact if the session grew."""
        turn = turn_record(session_id=self.session_id, question=self.original, resolved=self.question,
                           question_norm=normalise_query(self.question), resp=resp,
                           facts_used=[c for c in _fact_ids_cited(resp)], trace_id=trace_id,
                           tokens=_count_tokens)
        facts = supported_facts(resp, session_id=self.session_id, turn_id=turn.turn_id,
                                source_hash=self.memory.doc_hash)
        if self.correction:
            facts = [correction_fact(self.correction, session_id=self.session_id, turn_id=turn.turn_id,
                                     corrects=self._corrected_fact())]
        standing = {f.statement for f in self.state.facts if f.valid}  # forgotten or invalid: dropped
        result = self.memory.store.commit_turn(turn, facts, summary_update=summary_updater(turn, facts,
                                                                                           standing=standing),
                                               max_facts=self.memory.config.max_facts)
        self.memory.maybe_compact(self.session_id)
        return result

    def _corrected_fact(self) -> str | None:
        """The fact of the latest answered turn the correction shares most words with."""
        from cograg.index.analyzer import analyze

        assert self.correction is not None
        last = next((t for t in reversed(self.state.turns) if t.facts_written), None)
        if last is None:
            return None
        terms = set(analyze(self.correction))
        by_id = {f.fact_id: f for f in self.state.facts}
        scored = [(len(terms & set(analyze(by_id[i].statement))), i) for i in last.facts_written if i in by_id]
        scored = [s for s in scored if s[0] > 0]
        return max(scored)[1] if scored else None


def cacheable(resp: AnswerResponse) -> bool:
    """Only a verified, grounded answer with citations is served again."""
    return not resp.fallback and resp.grounded and bool(resp.citations) and not resp.clarification


def _fact_ids_cited(resp: AnswerResponse) -> list[str]:
    return list(dict.fromkeys(a.removeprefix("fact:") for c in resp.citations for a in c.annotations
                              if a.startswith("fact:")))


def current_conclusions(session: Session, valid_facts: list[Fact]) -> Session:
    """`session` with only the summary conclusions a valid fact of its ledger still states: a
    forgotten fact, or one whose source changed or went, is no conclusion any more (E6). The stored
    summary drops them at the session's next turn (`summary_updater`'s `standing`)."""
    standing = {f.statement for f in valid_facts if f.valid}
    kept = [c for c in session.summary.key_conclusions if c in standing]
    if len(kept) == len(session.summary.key_conclusions):
        return session
    return session.model_copy(update={"summary": session.summary.model_copy(update={"key_conclusions": kept})})


class SessionMemory:
    """Sessions over one `MemoryStore`. `doc_hash(doc_id)` is the current content hash of a stored
    document (None when it is gone); `generation()` changes whenever documents change;
    `delete_traces(ids)` removes a deleted session's traces from the document store."""

    def __init__(self, store: MemoryStore, config: MemoryConfig | None = None, *,
                 doc_hash: Callable[[str], str | None], generation: Callable[[], str],
                 delete_traces: Callable[[list[str]], object] | None = None) -> None:
        self.store = store
        self.config = config or MemoryConfig()
        self.doc_hash = doc_hash
        self.generation = generation
        self.delete_traces = delete_traces

    def cache_enabled(self, *, session: bool) -> bool:
        return self.config.answer_cache == "all" or (self.config.answer_cache == "session" and session)

    # ------------------------------------------------------------------ sessions (E6)
    def session(self, session_id: str) -> Session:
        """The session, its summary's conclusions limited to what its ledger still states. One idle
        past the TTL is gone, here as in a listing (it was shown and exported until a list)."""
        found = self.stored_session(session_id)
        self.sync()
        return current_conclusions(found, self.store.facts(session_id, include_invalid=False))

    def stored_session(self, session_id: str) -> Session:
        """The stored session, unless it is missing or idle past the TTL (SessionNotFound): the
        check before reading its facts or turns, without the summary's filtering `session()` does."""
        self.expire()
        found = self.store.get_session(session_id)
        if found is None:
            raise SessionNotFound(session_id)
        return found

    def sessions(self, *, user: str | None = None) -> list[Session]:
        self.expire()
        return self.store.list_sessions(user=user)

    def delete(self, session_id: str) -> None:
        """Delete the session, its turns and facts, and its turns' traces (each holds the question,
        the answer and the facts read: deleting a user's data leaves none of it behind, E6)."""
        traces = [t.trace_id for t in self.store.turns(session_id) if t.trace_id]
        if not self.store.delete_session(session_id):
            raise SessionNotFound(session_id)
        if self.delete_traces is not None and traces:
            self.delete_traces(traces)

    def expire(self) -> list[str]:
        """Delete the sessions idle longer than the TTL (E6)."""
        return self.store.expire_sessions(time.time() - self.config.session_ttl_days * 86400)

    def facts(self, session_id: str, *, include_invalid: bool = True) -> list[Fact]:
        self.stored_session(session_id)
        self.sync()
        return self.store.facts(session_id, include_invalid=include_invalid)

    def turns(self, session_id: str) -> list[TurnRecord]:
        self.stored_session(session_id)
        return self.store.turns(session_id)

    def forget(self, session_id: str, fact_id: str) -> None:
        self.stored_session(session_id)
        if not self.store.forget_fact(session_id, fact_id):
            raise SessionError(f"session {session_id!r} has no fact {fact_id!r}")

    def export(self, *, user: str | None = None, session_id: str | None = None) -> dict[str, Any]:
        """Everything stored for one user (or one session) as JSON-ready data (E6). With both, the
        session only if it is that user's: an export for one user never holds another's data."""
        self.expire()
        chosen = [self.session(session_id)] if session_id else [
            current_conclusions(s, self.store.facts(s.session_id, include_invalid=False))
            for s in self.store.list_sessions(user=user)]
        chosen = [s for s in chosen if user is None or s.user == user]
        return {"user": user, "sessions": [
            {**s.model_dump(mode="json"),
             "facts": [f.model_dump(mode="json") for f in self.store.facts(s.session_id)],
             "turns": [t.model_dump(mode="json") for t in self.store.turns(s.session_id)]} for s in chosen]}

    # ------------------------------------------------------------------ documents changed (E2)
    def document_deleted(self, doc_id: str) -> list[str]:
        return self.store.invalidate_sources({doc_id: "source document deleted"})

    def sync(self, *, force: bool = False) -> list[str]:
        """Invalidate the facts whose source document changed or is gone since they were
        established. Cheap when no document was written since the last check (the generation)."""
        generation = self.generation()
        if not force and self.store.get_meta("documents_generation") == generation:
            return []
        reasons: dict[str, str] = {}
        current: dict[str, str] = {}
        for doc_id, hashes in self.store.fact_sources().items():
            now_hash = self.doc_hash(doc_id)
            if now_hash is None:
                reasons[doc_id] = "source document deleted"
            elif hashes != {now_hash}:
                reasons[doc_id] = "source document changed"
                current[doc_id] = now_hash
        changed = self.store.invalidate_sources(reasons, current_hashes=current) if reasons else []
        self.store.set_meta("documents_generation", generation)
        return changed

    # ------------------------------------------------------------------ compaction (E4)
    def maybe_compact(self, session_id: str) -> Compaction | None:
        if self.store.unfolded_tokens(session_id) <= self.config.compact_above_tokens:
            return None
        return self.compact(session_id, reason="token threshold")

    def compact(self, session_id: str, *, reason: str = "requested", llm: Any = None) -> Compaction:
        """Keep the last `keep_raw_turns` turns raw and fold the older ones into the rolling
        summary: their short summaries (the question and its first verified sentence), oldest
        trimmed first so the summary stays within a third of the compaction threshold. With `llm`,
        the model then condenses the summary, keeping only what the lines state (`compaction.py`).
        The summary is merged inside the store's write (`fold_turns`): a turn committed meanwhile
        keeps its summary update, and a turn another compaction folded first is not folded again."""
        from cograg.memory.models import SessionSummary

        session = self.session(session_id)
        turns = self.store.turns(session_id, include_folded=False)
        keep = self.config.keep_raw_turns
        fold = turns[:-keep] if len(turns) > keep else []
        result = Compaction(session_id=session_id, kept_raw=len(turns) - len(fold), reason=reason)
        if not fold:
            return result
        limit = max(50, self.config.compact_above_tokens // 3)

        def rule_lines(rolling: str, folding: list[TurnRecord]) -> list[str]:
            lines = [ln for ln in rolling.split("\n") if ln.strip()]
            lines += [t.summary_short for t in folding if t.summary_short]
            sizes = [_count_tokens(ln) + 1 for ln in lines]
            total = sum(sizes)
            while len(lines) > 1 and total > limit:  # rule-based trimming: the oldest lines go first
                lines.pop(0)
                total -= sizes.pop(0)
            return lines

        planned = rule_lines(session.summary.rolling, fold)
        condensed = None
        if llm is not None and planned:  # outside the store's write: a model call holds no lock
            from cograg.memory.compaction import condense

            condensed, result.summary = condense(planned, llm, count_tokens=_count_tokens)
        written: dict[str, str] = {}

        def update(summary: SessionSummary, folded_seqs: list[int]) -> SessionSummary:
            folding = [t for t in fold if t.seq in set(folded_seqs)]
            if not folding:  # another compaction folded them first
                return summary
            if condensed is not None and summary.rolling == session.summary.rolling and len(folding) == len(fold):
                rolling = condensed
            else:  # the summary moved since it was condensed: the rule lines on the summary as it is
                rolling = "\n".join(rule_lines(summary.rolling, folding))
            written["rolling"] = rolling
            return summary.model_copy(update={"rolling": rolling, "folded_turns": summary.folded_turns + len(folding)})

        result.folded = self.store.fold_turns(session_id, fold[-1].seq, update)
        result.rolling_tokens = _count_tokens(written.get("rolling", session.summary.rolling))
        return result

    # ------------------------------------------------------------------ a turn
    def begin_turn(self, session_id: str, question: str, *, user: str | None = None,
                   source_hit: Callable[[str], SearchHit | None], cache_scope: dict[str, str],
                   cited_readable: ChunkReadable | None = None) -> SessionTurn:
        """Load the session for `question` (created on first use, owned by `user`), resolve a
        follow-up and recall the relevant facts (E1, E3). With a `user`, a session someone else owns
        is SessionNotFound: two callers who name one new session at once get one owner, and the
        other's turn never reads or writes that owner's ledger. Without one (the CLI), any session.
        With `cited_readable` (chunk id -> may the caller read its document now), an earlier turn
        that cited a source the caller may no longer read is left out of this turn: no pronoun
        resolves to what it said and it is no context block (`access.cited_readable`)."""
        self.expire()
        found = self.store.get_session(session_id) or self.store.create_session(check_session_id(session_id),
                                                                               user=user)
        if user is not None and found.user != user:
            raise SessionNotFound(session_id)
        self.sync()
        state = self.store.load(session_id, max_facts=self.config.max_facts)
        if cited_readable is not None:
            state = withhold_unreadable_turns(state, cited_readable)
        correction = correction_in(question)
        rewrite = None if correction else resolve_follow_up(question, state.turns)
        resolved = rewrite.rewritten if rewrite else question
        corrected = {f.corrects for f in state.facts if f.kind == "user_correction" and f.corrects}
        usable = [f for f in state.facts if f.fact_id not in corrected]  # a disputed fact is not recalled
        # a fact from a document the caller may not read now is not recalled, nor takes a place
        sources = FactSources(source_hit)
        facts = relevant_facts(resolved, usable, self.config.recall_facts, admit=sources.admits)
        context = build_context(current_conclusions(state.session, state.facts), state.turns, facts,
                                budget_tokens=self.config.context_budget_tokens,
                                count_tokens=_count_tokens)
        # facts that did not fit the budget are not given to the turn either
        kept = {b.block_id.removeprefix("L3:") for b in context.blocks if b.layer == "L3"}
        facts = [f for f in facts if f.fact_id in kept]
        return SessionTurn(self, state, question, rewrite=rewrite, facts=facts, context=context,
                           source_hit=sources, cache_scope=cache_scope, correction=correction)


__all__ = ["Compaction", "SessionMemory", "SessionTurn", "cacheable"]
