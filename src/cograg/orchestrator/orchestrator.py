"""One turn, end to end (SPEC D1–D7): route → run the chosen mode → verified answer, with the
deterministic fallback chain R3 → R2 → R1 → R4 when a mode fails (an exception, a timeout, a
plan that cannot be repaired, a budget that runs out before anything was established).

The turn's state machine drives it: `ask` asks the machine for the next action (receive, route,
run the mode, fall back, finish) and runs the step for it. Stages report through the turn's
trace; each event moves the machine and goes onto the event bus (`orchestrator/turn.py`).
A refusal is an answer, not a failure: it ends the turn without falling back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cograg.answer.answerer import Answerer, AnswerResponse, record_outcome, withhold_quotes
from cograg.answer.contract import Citation
from cograg.trace import RecordingLLM, Trace
from cograg.config import AnswerConfig
from cograg.control.models import ROUTE_OF_MODE, CancelToken, RouteDecision
from cograg.messages import failure_reason, message
from cograg.models.llm.base import calls_end_by
from cograg.orchestrator.events import EventBus
from cograg.orchestrator.plan_tasks import find_conflicts
from cograg.orchestrator.planned import PlannedMode
from cograg.orchestrator.state_machine import Action
from cograg.orchestrator.turn import ModeFailed, Turn, TurnEvidence, TurnOptions, guard
from cograg.retrieval.models import SearchHit, SearchResult
from cograg.text import is_chinese
from cograg.trace import RecordingLLM, Trace, TraceEvent


FACTS_COVER = "rule:retrieval_need.facts_cover"  # the router's signal that recalled facts cover the question


class Orchestrator:
    """Composes the stages for one turn. Stateless between turns; safe to share across threads
    as long as the injected callables are."""

    def __init__(self, *, search: Callable[[str, int], SearchResult], llm: Any, answerer_factory: Callable[
                 [Callable[[str], SearchResult], AnswerConfig], Answerer], judge: Any,
                 chunk_text: Callable[[str], str], save_trace: Callable[[Trace], None] | None = None,
                 bus: EventBus | None = None, rules: Any = None,
                 corpus_empty: Callable[[], bool] | None = None) -> None:
        self.search = search
        self.corpus_empty = corpus_empty
        self.llm = llm
        self.answerer_factory = answerer_factory
        self.judge = judge
        self.chunk_text = chunk_text
        self.save_trace = save_trace
        self.bus = bus or EventBus()
        self.rules = rules

    # ------------------------------------------------------------------ the turn
    def ask(self, question: str, *, options: TurnOptions | None = None, facts: list[dict[str, Any]] | None = None,
            has_context: bool = False, cancel: CancelToken | None = None, session: Any = None) -> AnswerResponse:
        """One turn. `session` is a `cograg.memory.SessionTurn`: the question as resolved against
        the conversation, the recalled facts (routing, R0, the planner) and the write-back."""
        opts = options or TurnOptions()
        evidence = TurnEvidence()
        search = evidence.recording(self.search, opts.answer.retrieve_hits)
        if session is not None:
            from cograg.orchestrator.from_facts import fact_hits, prepend_fact_hits

            for hit in fact_hits(session):  # seen by the turn: the policy's quote rule applies to them too
                evidence.hits.setdefault(hit.chunk_id, hit)
            question = session.question
            facts = session.prompt_facts() if facts is None else facts
            has_context = has_context or session.has_context
            search = prepend_fact_hits(search, session)
        answerer = self.answerer_factory(search, opts.answer)
        turn = Turn(answerer.check_question(question), opts, self.bus, cancel or CancelToken(), evidence)
        turn.session = session
        decision: RouteDecision | None = None
        resp: AnswerResponse | None = None
        # every model call of the turn, the judge's and the look-ups' too, ends by its deadline
        with calls_end_by(turn.deadline):
            while (action := turn.machine.next_action()) is not Action.FINISH:
                if action is Action.RECEIVE:
                    turn.event("USER_INPUT_RECEIVED")
                    answerer.record_prompt_versions(turn.trace)
                    if session is not None:
                        self._memory_loaded(turn, session)
                elif action is Action.ROUTE:
                    decision = self._route(turn, facts, has_context)
                    turn.event("ROUTE_DECIDED", route=decision.route, mode=decision.mode, reasons=decision.reasons[:8])
                elif action is Action.RUN_MODE:
                    assert decision is not None
                    resp = self._run_mode(turn, decision, answerer, facts or [])
                else:  # Action.FALL_BACK
                    resp = self._fall_back(turn)
        if resp is None:  # a failure the machine could not fall back from (a bug): still a reply
            turn.machine.anomalies.append(f"turn ended in {turn.machine.state.value} without a reply")
            resp = self._cannot(turn, "no mode produced an answer")
        assert decision is not None
        return self._finish(turn, decision, resp)

    def _run_mode(self, turn: Turn, decision: RouteDecision, answerer: Answerer,
                  facts: list[dict[str, Any]]) -> AnswerResponse | None:
        """Run the mode the machine chose; its reply, or None after reporting the failure."""
        mode = turn.machine.start_mode()
        try:
            if turn.cancel.cancelled:
                raise ModeFailed(f"cancelled: {turn.cancel.reason}")
            resp = self._serve_cached(turn) or self._mode_step(mode, turn, decision, answerer, facts)
            if turn.cancel.cancelled and not turn.machine.finished:
                # stopped while the mode worked: no one reads its answer, and the turn ends CANCELLED
                raise ModeFailed(f"cancelled: {turn.cancel.reason}")
        except ModeFailed as exc:
            turn.modes_tried.append({"mode": mode, "ok": False, "reason": str(exc)[:300]})
            turn.failure = str(exc)
            turn.event("FALLBACK", failed=mode, reason=str(exc)[:300])
            return None
        turn.modes_tried.append({"mode": mode, "ok": True})
        if not turn.machine.finished:
            turn.event("ANSWER_READY", fallback=resp.fallback)
        return resp

    def _fall_back(self, turn: Turn) -> AnswerResponse | None:
        """The next mode of the chain — or, when there is none, the turn is cancelled or its token
        or time budget is spent, the clarifying reply that ends every chain."""
        reason = turn.failure
        nxt = turn.machine.fallback_mode()
        spent = turn.budget_spent()
        if nxt is not None and spent is not None:
            reason = f"{spent}; {reason}"  # the budget first: it is why the chain ends here
            nxt = None  # the whole turn, fallbacks included, stays within its budgets
        if turn.cancel.cancelled:
            turn.event("CANCELLED", reason=reason[:300])
        if turn.cancel.cancelled or nxt is None:
            return self._cannot(turn, reason)
        turn.event("FALLBACK_STARTED", mode=nxt, after=turn.machine.mode)
        return None

    def _finish(self, turn: Turn, decision: RouteDecision, resp: AnswerResponse) -> AnswerResponse:
        trace = turn.trace
        mode = turn.machine.mode
        resp.mode = mode
        trace.mode = mode
        resp.explain = {"route": decision.route, "mode": mode, "modes_tried": turn.modes_tried,
                        "reasons": decision.reasons, "scores": decision.scores.model_dump(),
                        "sufficiency": decision.sufficiency.model_dump() if decision.sufficiency else None,
                        "decision_path": trace.loop.get("decision_path", []),
                        "plan": trace.plan.get("plan"), "nodes": trace.plan.get("nodes", []),
                        "plan_template": (trace.plan.get("outcome") or {}).get("template"),
                        "states": trace.states, "duration_ms": round(turn.elapsed_s * 1000, 1)}
        resp.trace_id = trace.trace_id
        # every mode's citations as the user may see them: no text of a source the policy hides
        resp.citations = withhold_quotes(resp.citations, {cid for cid, h in turn.evidence.hits.items()
                                                          if not h.snippet_visible})
        trace.searches = turn.evidence.searches
        trace.outcome["anomalies"] = turn.machine.anomalies
        trace.outcome["modes_tried"] = turn.modes_tried
        if turn.session is not None:
            self._memory_commit(turn, resp)
        record_outcome(trace, resp)
        if self.save_trace:
            self.save_trace(trace)
        return resp

    # ------------------------------------------------------------------ routing
    def _route(self, turn: Turn, facts: list[dict[str, Any]] | None, has_context: bool) -> RouteDecision:
        from cograg.control.router import LLMRouteScorer, Router, is_conversational, load_rules

        opts, trace = turn.options, turn.trace
        rules = self.rules or load_rules()
        if turn.session is not None and turn.session.correction and not opts.force_mode:
            decision = memory_route(rules.version, "user correction: recorded as the user's statement, "
                                                   "nothing to look up")
            trace.decision = decision.model_dump()
            return decision
        if turn.session is not None and not turn.session.correction:
            turn.cached = turn.session.cached_answer(opts.force_mode or "auto")
            if turn.cached is not None:  # the cheapest route of all: nothing to decide
                decision = memory_route(rules.version, "answer cache: the same question with the same facts, "
                                                       "documents, model and policy was answered",
                                        mode=turn.cached.mode or "R1_ONE_SHOT_RETRIEVE")
                trace.decision = decision.model_dump()
                return decision
        # a forced mode needs no model opinion; the rule scores still go into the trace
        scorer = (LLMRouteScorer(RecordingLLM(self.llm, trace, purpose="route", role="route"))
                  if opts.use_llm_router and not opts.force_mode else None)
        router = Router(rules, llm_scorer=scorer, search=self.search, floors=opts.answer)
        decision = router.route(turn.question, facts=[f.get("statement", "") for f in facts or []],
                                has_context=has_context)
        if opts.force_mode:
            forced, why = opts.force_mode, f"mode forced: {opts.force_mode}"
            covered = FACTS_COVER in decision.reasons  # remembered facts cover it: R0 answers from them
            if forced == "R0_DIRECT_WRITE" and not is_conversational(turn.question) and not covered:
                # R0 only writes a canned reply: a question that needs facts is never sent there
                forced, why = "R1_ONE_SHOT_RETRIEVE", f"{why} refused: the question needs facts -> R1_ONE_SHOT_RETRIEVE"
            decision = decision.model_copy(update={
                "mode": forced, "route": ROUTE_OF_MODE[forced], "reasons": decision.reasons + [why]})
        if decision.mode in ("R2_MULTI_RETRIEVE", "R3_DAG_PLAN") and self.corpus_empty is not None \
                and self.corpus_empty():
            # nothing to grade, rewrite towards or plan over: R1's one search refuses without a model call
            one = "R1_ONE_SHOT_RETRIEVE"
            decision = decision.model_copy(update={"mode": one, "route": ROUTE_OF_MODE[one], "reasons": (
                decision.reasons + [f"the store holds no passage: {decision.mode} -> {one}"])})
        trace.decision = decision.model_dump()
        trace.prompt_versions.update({"routing_rules": decision.rules_version})
        if scorer is not None:
            trace.prompt_versions[scorer.prompt.name] = scorer.prompt.version
        return decision

    # ------------------------------------------------------------------ modes
    def _mode_step(self, mode: str, turn: Turn, decision: RouteDecision, answerer: Answerer,
                   facts: list[dict[str, Any]]) -> AnswerResponse:
        if mode == "R5_BLOCK":
            return self._blocked(turn, decision)
        if mode == "R4_CLARIFY":  # chosen, it asks back; reached by falling back, it says what failed
            return self._cannot(turn, turn.failure) if turn.failure else self._clarify(turn, decision)
        if mode == "R0_DIRECT_WRITE":
            if turn.session is not None and turn.session.correction:
                return self._correction_noted(turn)
            if turn.session is not None and turn.session.document_facts() and FACTS_COVER in decision.reasons:
                from cograg.orchestrator.from_facts import answer_from_facts

                return answer_from_facts(turn, answerer, turn.session)
            return self._small_talk(turn)
        if mode == "R1_ONE_SHOT_RETRIEVE":
            return guard(lambda: answerer.answer(turn.question, trace=turn.trace, has_context=True), "R1")
        if mode == "R2_MULTI_RETRIEVE":
            return self._self_corrective(turn, answerer)
        if mode == "R3_DAG_PLAN":
            return PlannedMode(turn, answerer, llm=self.llm, judge=self.judge, chunk_text=self.chunk_text).run(facts)
        raise ModeFailed(f"unknown mode {mode}")

    @staticmethod
    def _blocked(turn: Turn, decision: RouteDecision) -> AnswerResponse:
        reason = next((r for r in decision.reasons if "risk" in r or "block" in r.lower()), "policy")
        turn.event("REFUSED", reason=f"blocked: {reason}")
        return AnswerResponse(answer=message("reply.blocked", turn.lang, reason=reason), fallback=True,
                              confidence=0.0, grounded=False, route="BLOCK", trace_id=turn.trace.trace_id,
                              notes=[f"blocked: {reason}"])

    @staticmethod
    def _clarify(turn: Turn, decision: RouteDecision) -> AnswerResponse:
        text = decision.clarification or message("reply.cannot_answer", turn.lang,
                                                 reason=message("reason.ambiguous", turn.lang))
        if not decision.clarification:
            turn.event("REQUESTING_CLARIFICATION", question=text)
        return AnswerResponse(answer=text, fallback=True, confidence=0.0, grounded=False, route="CLARIFY",
                              trace_id=turn.trace.trace_id, clarification=text)

    @staticmethod
    def _small_talk(turn: Turn) -> AnswerResponse:
        # Only non-factual turns reach R0 with no established facts: nothing to cite, nothing claimed.
        turn.event("DRAFT_READY", method="template")
        # fallback=True: a reply that states nothing from the documents (C1), so nothing to verify
        return AnswerResponse(answer=message("reply.small_talk", turn.lang), fallback=True, confidence=1.0,
                              grounded=False, route="FAST_PATH", trace_id=turn.trace.trace_id,
                              notes=["no factual claim"])

    def _self_corrective(self, turn: Turn, answerer: Answerer) -> AnswerResponse:
        """R2: retrieve, grade, rewrite until enough documents pass, answer from those."""
        from cograg.control.corrective import DocumentGrader, QueryRewriter, SelfCorrectiveLoop

        trace, q, timeout_s = turn.trace, turn.question, turn.options.answer.llm_timeout_s

        def generate(query: str, hits: list[SearchHit]) -> AnswerResponse:
            best, source = turn.evidence.best
            result = SearchResult(query=q, mode="hybrid", hits=hits, evidence_score=best, evidence_source=source)
            # the documents passed the grader; the calibrated cosine floor still applies (best of the turn)
            return answerer.answer(q, trace=trace, result=result, has_context=True)

        def evidence_ok(result: SearchResult) -> bool:
            # the answer stage's refusal floor: what R1 would answer from, R2 does not refuse outright
            floor = turn.options.answer.evidence_floor(chinese=is_chinese(q), source=result.evidence_source)
            return result.evidence_score is not None and result.evidence_score >= floor

        grader = DocumentGrader(RecordingLLM(self.llm, trace, purpose="grade", role="grade"), timeout_s=timeout_s,
                                min_confidence=turn.options.budget.grade_min_confidence)
        rewriter = QueryRewriter(RecordingLLM(self.llm, trace, purpose="rewrite", role="rewrite"), timeout_s=timeout_s)
        for p in (getattr(grader, "prompt", None), getattr(rewriter, "prompt", None)):
            if p is not None:
                trace.prompt_versions[p.name] = p.version
        loop = SelfCorrectiveLoop(search=answerer.search, grader=grader, rewriter=rewriter,
                                  budget=turn.options.budget, generate=generate,
                                  on_event=lambda name, data: turn.event(name, **data), cancel=turn.cancel,
                                  evidence_ok=evidence_ok, refused=lambda resp: bool(resp.fallback))
        # R2 as a fallback runs on what the turn has left of its time and tokens
        state = guard(lambda: loop.run(q, deadline=turn.deadline, tokens_left=turn.tokens_left), "R2")
        trace.loop = state.model_dump(mode="json", exclude={"retrieved_documents", "filtered_documents",
                                                             "generation_result"})
        trace.loop["filtered_chunk_ids"] = [h.chunk_id for h in state.filtered_documents]
        if state.generation_result is None:
            raise ModeFailed(f"R2: no answer generated ({state.stop_reason})")
        if not state.generation_result.fallback:  # answered on retry: the first refusal's reason is history
            trace.outcome.pop("reason", None)
        return state.generation_result

    # ------------------------------------------------------------------ memory (SPEC E)
    @staticmethod
    def _memory_loaded(turn: Turn, session: Any) -> None:
        turn.event("MEMORY_LOADED", **session.loaded_event())
        if session.rewrite is not None:
            # the follow-up was read with the session's entity before routing and retrieval
            turn.event("FOLLOW_UP_RESOLVED", **session.rewrite.model_dump())
        turn.trace.outcome["memory"] = {"session_id": session.session_id, "question": session.original}

    @staticmethod
    def _serve_cached(turn: Turn) -> AnswerResponse | None:
        """A verified answer to the same (normalised) question under the same model, requested
        route, facts, documents and policy, served without a model call (SPEC E3)."""
        cached, turn.cached = turn.cached, None  # served once; a fallback mode runs for real
        if cached is None:
            return None
        turn.cache_hit = True
        turn.event("CACHE_HIT", key=turn.session.bench.cache_key)
        return cached.model_copy(update={"trace_id": turn.trace.trace_id,
                                         "notes": [*cached.notes, "served from the answer cache"]})

    @staticmethod
    def _memory_commit(turn: Turn, resp: AnswerResponse) -> None:
        session = turn.session
        if turn.cancel.cancelled:  # no one read this reply (the client went away): not part of the conversation
            turn.event("MEMORY_SKIPPED", reason=f"cancelled: {turn.cancel.reason}"[:300])
            return
        try:
            if not turn.cache_hit:
                session.remember_answer(turn.options.force_mode or "auto", resp)
            committed = session.commit(resp, turn.trace.trace_id)
        except Exception as exc:  # memory must never cost the user the answer
            turn.event("MEMORY_ERROR", error=f"{type(exc).__name__}: {exc}"[:300])
            return
        turn.event("MEMORY_COMMITTED", session_id=session.session_id, turn_id=committed.turn_id,
                   facts_written=committed.facts_written, facts_duplicate=committed.facts_duplicate)
        turn.trace.outcome["memory"] = {**turn.trace.outcome.get("memory", {}), **session.bench.model_dump(),
                                        "turn_id": committed.turn_id, "facts_written": committed.facts_written}
        resp.explain["memory"] = {"session_id": session.session_id, "rewrite": session.bench.rewrite,
                                  "facts_read": session.bench.recalled_fact_ids,
                                  "facts_written": committed.facts_written,
                                  "cache": "hit" if turn.cache_hit else "miss"}

    @staticmethod
    def _correction_noted(turn: Turn) -> AnswerResponse:
        statement = turn.session.correction
        turn.event("DRAFT_READY", method="template")
        return AnswerResponse(answer=message("memory.correction_recorded", turn.lang, statement=statement),
                              fallback=True, confidence=1.0, grounded=False, route="FAST_PATH",
                              trace_id=turn.trace.trace_id, notes=["user correction recorded with provenance"])

    @staticmethod
    def _cannot(turn: Turn, reason: str) -> AnswerResponse:
        """The end of the fallback chain (R4): a clarification request, never an error page."""
        text = message("reply.cannot_answer", turn.lang, reason=failure_reason(reason, turn.lang))
        turn.event("REQUESTING_CLARIFICATION", question=text)
        return AnswerResponse(answer=text, fallback=True, confidence=0.0, grounded=False, route="CLARIFY",
                              trace_id=turn.trace.trace_id, clarification=text, notes=[reason[:300]])


def memory_route(rules_version: str, reason: str, mode: str = "R0_DIRECT_WRITE") -> RouteDecision:
    """The route memory decides without the router: a user correction ("that is wrong, X is Y")
    is recorded, not looked up (SPEC E6); a cached answer is served in the mode that made it."""
    from cograg.control.models import RouteScores

    none = RouteScores()
    return RouteDecision(route=ROUTE_OF_MODE[mode], mode=mode, scores=none, rule_scores=none,  # type: ignore[arg-type]
                         reasons=[reason], rules_version=rules_version)


__all__ = ["Citation", "ModeFailed", "Orchestrator", "TurnOptions", "find_conflicts"]
