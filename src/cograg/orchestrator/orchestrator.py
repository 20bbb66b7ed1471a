"""One turn, end to end (SPEC D1–D7): route → run the chosen mode → verified answer, with the
deterministic fallback chain R3 → R2 → R1 → R4 when a mode fails (an exception, a timeout, a
plan that cannot be repaired, a budget that runs out before anything was established).

Every stage reports through the turn's trace; the trace feeds the state machine (D6) and the
event bus, so the trace, the state history and a streaming client all see the same events.
A refusal is an answer, not a failure: it ends the turn without falling back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, Field, field_validator

from cograg.answer.answerer import AnswerConfig, Answerer, AnswerResponse, record_outcome, recording_verifier
from cograg.answer.contract import Citation, strip_markers
from cograg.control.models import (FALLBACK_ORDER, ROUTE_OF_MODE, CancelToken, ControlBudget, RouteDecision,
                                   SubTask, TaskResult, mode_name)
from cograg.orchestrator.events import BusEvent, EventBus
from cograg.orchestrator.state_machine import State, TurnStateMachine
from cograg.retrieval.models import SearchHit, SearchResult
from cograg.text import is_chinese
from cograg.trace import RecordingLLM, Trace, TraceEvent

T = TypeVar("T")


class TurnOptions(BaseModel):
    """Per-turn settings: the answer contract (C) and the control budgets (D)."""

    answer: AnswerConfig = Field(default_factory=AnswerConfig)
    budget: ControlBudget = Field(default_factory=ControlBudget)
    force_mode: str | None = Field(None, description="skip the router's choice (benchmarks, --mode): R0…R5")
    use_llm_router: bool = Field(False, description="ask the model for routing scores too (COGRAG_ROUTER_LLM)")

    @field_validator("force_mode")
    @classmethod
    def _full_mode_name(cls, v: str | None) -> str | None:
        return None if v is None else mode_name(v)


class ModeFailed(Exception):
    """A mode could not produce an answer; the orchestrator falls back to the next one."""


_SMALL_TALK = {
    "zh": "您好！我根据您的文档回答问题，每句话都附有经过核对的出处。请直接提出关于文档内容的问题。",
    "en": "Hello! I answer questions from your documents, and every sentence I state comes with a checked "
          "source. Ask me anything about their content.",
}
_BLOCKED = {
    "zh": "这个请求我不能处理：{reason}。如需查询文档中的内容，请换一种问法。",
    "en": "I can't help with this request: {reason}. I can answer questions about the content of your documents.",
}
_CANNOT = {
    "zh": "这个问题我没能可靠地回答（{reason}）。能否把问题说得更具体一些，或拆成几个小问题？",
    "en": "I could not answer this reliably ({reason}). Could you make the question more specific, or ask its "
          "parts separately?",
}


def _lang(q: str) -> str:
    return "zh" if is_chinese(q) else "en"


class _TurnEvidence:
    """Every hit one turn has seen (reason tasks cite their inputs' chunks) and the turn's best
    calibrated evidence score (R2 keeps the refusal floor over all its searches)."""

    def __init__(self) -> None:
        self.hits: dict[str, SearchHit] = {}
        self.best: tuple[float | None, str | None] = (None, None)
        self.searches: list[dict[str, Any]] = []


class Orchestrator:
    """Composes the stages for one turn. Stateless between turns; safe to share across threads
    as long as the injected callables are."""

    def __init__(self, *, search: Callable[[str, int], SearchResult], llm: Any, answerer_factory: Callable[
                 [Callable[[str], SearchResult], AnswerConfig], Answerer], judge: Any,
                 chunk_text: Callable[[str], str], save_trace: Callable[[Trace], None] | None = None,
                 bus: EventBus | None = None, rules: Any = None) -> None:
        self.search = search
        self.llm = llm
        self.answerer_factory = answerer_factory
        self.judge = judge
        self.chunk_text = chunk_text
        self.save_trace = save_trace
        self.bus = bus or EventBus()
        self.rules = rules

    # ------------------------------------------------------------------ turn
    def ask(self, question: str, *, options: TurnOptions | None = None, facts: list[dict[str, Any]] | None = None,
            has_context: bool = False, cancel: CancelToken | None = None) -> AnswerResponse:
        opts = options or TurnOptions()
        cancel = cancel or CancelToken()
        turn = _TurnEvidence()
        answerer = self.answerer_factory(self._recording_search(opts.answer.retrieve_hits, turn), opts.answer)
        q = answerer.check_question(question)
        trace = Trace(question=q)
        machine = TurnStateMachine()
        lock = threading.Lock()

        def on_event(ev: TraceEvent) -> None:
            with lock:
                state = machine.handle(ev.name, ev.data)
                if not trace.states or trace.states[-1] != state.value:
                    trace.states.append(state.value)
            self.bus.publish(BusEvent(trace_id=trace.trace_id, name=ev.name, at_ms=ev.at_ms, state=state.value,
                                      data=ev.data))
        trace.subscribe(on_event)
        trace.states.append(State.IDLE.value)
        trace.event("USER_INPUT_RECEIVED")
        answerer.record_prompt_versions(trace)
        started = time.perf_counter()

        decision = self._route(q, opts, facts, has_context, trace)
        mode = decision.mode
        trace.event("ROUTE_DECIDED", route=decision.route, mode=mode, reasons=decision.reasons[:8])
        resp: AnswerResponse | None = None
        tried: list[dict[str, Any]] = []
        while resp is None:
            try:
                if cancel.cancelled:
                    raise ModeFailed(f"cancelled: {cancel.reason}")
                resp = self._run_mode(mode, q, decision, answerer, opts, facts or [], trace, cancel, turn)
                tried.append({"mode": mode, "ok": True})
            except ModeFailed as exc:
                tried.append({"mode": mode, "ok": False, "reason": str(exc)[:300]})
                nxt = self._next_mode(mode)
                if nxt is not None and time.perf_counter() - started > opts.budget.max_wall_s:
                    exc = ModeFailed(f"{exc}; the turn's time budget ({opts.budget.max_wall_s:g} s) is used up")
                    nxt = None  # the whole turn, fallbacks included, stays within the wall budget
                if cancel.cancelled or nxt is None:
                    trace.event("CANCELLED" if cancel.cancelled else "FALLBACK", reason=str(exc)[:300])
                    resp = self._cannot(q, trace, str(exc))
                    break
                trace.event("FALLBACK", failed=mode, to=nxt, reason=str(exc)[:300])
                trace.event("FALLBACK_STARTED", mode=nxt)
                mode = nxt
        resp.mode = mode
        trace.mode = mode
        resp.explain = {"route": decision.route, "mode": mode, "modes_tried": tried,
                        "reasons": decision.reasons, "scores": decision.scores.model_dump(),
                        "sufficiency": decision.sufficiency.model_dump() if decision.sufficiency else None,
                        "decision_path": trace.loop.get("decision_path", []),
                        "plan": trace.plan.get("plan"), "nodes": trace.plan.get("nodes", []),
                        "states": trace.states, "duration_ms": round((time.perf_counter() - started) * 1000, 1)}
        resp.trace_id = trace.trace_id
        if not machine.finished:
            trace.event("ANSWER_READY", fallback=resp.fallback)
        trace.searches = turn.searches
        trace.outcome["anomalies"] = machine.anomalies
        trace.outcome["modes_tried"] = tried
        record_outcome(trace, resp)
        if self.save_trace:
            self.save_trace(trace)
        return resp

    # ------------------------------------------------------------------ routing
    def _route(self, q: str, opts: TurnOptions, facts: list[dict[str, Any]] | None, has_context: bool,
               trace: Trace) -> RouteDecision:
        from cograg.control.router import LLMRouteScorer, Router, load_rules

        rules = self.rules or load_rules()
        # a forced mode needs no model opinion; the rule scores still go into the trace
        scorer = (LLMRouteScorer(RecordingLLM(self.llm, trace, purpose="route"))
                  if opts.use_llm_router and not opts.force_mode else None)
        router = Router(rules, llm_scorer=scorer, search=self.search)
        decision = router.route(q, facts=[f.get("statement", "") for f in facts or []], has_context=has_context)
        if opts.force_mode:
            decision = decision.model_copy(update={
                "mode": opts.force_mode, "route": ROUTE_OF_MODE[opts.force_mode],
                "reasons": decision.reasons + [f"mode forced: {opts.force_mode}"]})
        trace.decision = decision.model_dump()
        trace.prompt_versions.update({"routing_rules": decision.rules_version})
        if scorer is not None:
            trace.prompt_versions[scorer.prompt.name] = scorer.prompt.version
        return decision

    @staticmethod
    def _next_mode(mode: str) -> str | None:
        if mode in FALLBACK_ORDER:
            i = FALLBACK_ORDER.index(mode)
            return FALLBACK_ORDER[i + 1] if i + 1 < len(FALLBACK_ORDER) else None
        return None

    def _recording_search(self, k: int, turn: _TurnEvidence) -> Callable[[str], SearchResult]:
        """The search, keeping every hit seen this turn (reason tasks cite their inputs' chunks)
        and the best calibrated evidence score across the turn's searches."""
        def search(query: str) -> SearchResult:
            result = self.search(query, k)
            turn.searches.append({"query": query, "chunk_ids": [h.chunk_id for h in result.hits],
                                  "evidence": result.evidence_score})
            for h in result.hits:
                turn.hits.setdefault(h.chunk_id, h)
            best, _ = turn.best
            if result.evidence_score is not None and (best is None or result.evidence_score > best):
                turn.best = (result.evidence_score, result.evidence_source)
            return result
        return search

    # ------------------------------------------------------------------ modes
    def _run_mode(self, mode: str, q: str, decision: RouteDecision, answerer: Answerer, opts: TurnOptions,
                  facts: list[dict[str, Any]], trace: Trace, cancel: CancelToken,
                  turn: _TurnEvidence) -> AnswerResponse:
        lang = _lang(q)
        if mode == "R5_BLOCK":
            reason = next((r for r in decision.reasons if "risk" in r or "block" in r.lower()), "policy")
            text = _BLOCKED[lang].format(reason=reason)
            trace.event("REFUSED", reason=f"blocked: {reason}")
            return AnswerResponse(answer=text, fallback=True, confidence=0.0, grounded=False, route="BLOCK",
                                  trace_id=trace.trace_id, notes=[f"blocked: {reason}"])
        if mode == "R4_CLARIFY":
            text = decision.clarification or _CANNOT[lang].format(
                reason="the question is ambiguous" if lang == "en" else "问题不够明确")
            if not decision.clarification:
                trace.event("REQUESTING_CLARIFICATION", question=text)
            return AnswerResponse(answer=text, fallback=True, confidence=0.0, grounded=False, route="CLARIFY",
                                  trace_id=trace.trace_id, clarification=text)
        if mode == "R0_DIRECT_WRITE":
            # Only non-factual turns reach R0 with no established facts: nothing to cite, nothing claimed.
            trace.event("DRAFT_READY", method="template")
            # fallback=True: a reply that states nothing from the documents (C1), so nothing to verify
            return AnswerResponse(answer=_SMALL_TALK[lang], fallback=True, confidence=1.0, grounded=False,
                                  route="FAST_PATH", trace_id=trace.trace_id, notes=["no factual claim"])
        if mode == "R1_ONE_SHOT_RETRIEVE":
            return self._guard(lambda: answerer.answer(q, trace=trace, has_context=True), "R1")
        if mode == "R2_MULTI_RETRIEVE":
            return self._self_corrective(q, answerer, opts, trace, cancel, turn)
        if mode == "R3_DAG_PLAN":
            return self._planned(q, answerer, opts, facts, trace, cancel, turn)
        raise ModeFailed(f"unknown mode {mode}")

    @staticmethod
    def _guard(fn: Callable[[], T], mode: str) -> T:
        """Run one stage; a model, store or timeout error makes the mode fail (→ fallback)."""
        from cograg.errors import CogragError
        from cograg.models import ModelError

        try:
            return fn()
        except (ModelError, CogragError, TimeoutError) as exc:
            raise ModeFailed(f"{mode}: {type(exc).__name__}: {exc}") from exc

    def _self_corrective(self, q: str, answerer: Answerer, opts: TurnOptions, trace: Trace,
                         cancel: CancelToken, turn: _TurnEvidence) -> AnswerResponse:
        from cograg.control.corrective import DocumentGrader, QueryRewriter, SelfCorrectiveLoop

        budget = opts.budget

        def generate(query: str, hits: list[SearchHit]) -> AnswerResponse:
            best, source = turn.best
            result = SearchResult(query=q, mode="hybrid", hits=hits, evidence_score=best, evidence_source=source)
            # the documents passed the grader; the calibrated cosine floor still applies (best of the turn)
            return answerer.answer(q, trace=trace, result=result, has_context=True)

        grader = DocumentGrader(RecordingLLM(self.llm, trace, purpose="grade"), timeout_s=opts.answer.llm_timeout_s)
        rewriter = QueryRewriter(RecordingLLM(self.llm, trace, purpose="rewrite"), timeout_s=opts.answer.llm_timeout_s)
        for p in (getattr(grader, "prompt", None), getattr(rewriter, "prompt", None)):
            if p is not None:
                trace.prompt_versions[p.name] = p.version
        loop = SelfCorrectiveLoop(search=answerer.search, grader=grader, rewriter=rewriter, budget=budget,
                                  generate=generate, on_event=lambda name, data: trace.event(name, **data),
                                  cancel=cancel)
        state = self._guard(lambda: loop.run(q), "R2")
        trace.loop = state.model_dump(mode="json", exclude={"retrieved_documents", "filtered_documents",
                                                             "generation_result"})
        trace.loop["filtered_chunk_ids"] = [h.chunk_id for h in state.filtered_documents]
        resp = state.generation_result
        if resp is None:
            raise ModeFailed(f"R2: no answer generated ({state.stop_reason})")
        return resp

    # ------------------------------------------------------------------ R3
    def _planned(self, q: str, answerer: Answerer, opts: TurnOptions, facts: list[dict[str, Any]], trace: Trace,
                 cancel: CancelToken, turn: _TurnEvidence) -> AnswerResponse:
        from cograg.control.executor import DAGExecutor
        from cograg.control.planner import Planner
        from cograg.control.synthesizer import Synthesizer

        budget = opts.budget
        planner = Planner(RecordingLLM(self.llm, trace, purpose="plan"), budget, timeout_s=opts.answer.llm_timeout_s)
        trace.prompt_versions[planner.prompt.name] = planner.prompt.version
        outcome = self._guard(lambda: planner.plan(q, facts), "R3")
        trace.plan = {"outcome": outcome.model_dump(mode="json", exclude={"plan"})}
        if outcome.plan is None:
            trace.event("PLAN_FAILED", errors=outcome.errors[-2:])
            raise ModeFailed(f"R3: no valid plan after repair ({'; '.join(outcome.errors)[:200]})")
        plan = outcome.plan
        trace.plan["plan"] = plan.model_dump()
        trace.event("PLAN_READY", tasks=len(plan.sub_tasks))

        sub_traces: dict[int, Trace] = {}
        lock = threading.Lock()

        def sub_trace(task: SubTask) -> Trace:
            t = Trace(question=task.description)
            with lock:
                sub_traces[task.id] = t
            return t

        def merge_calls(task: SubTask, t: Trace) -> int:
            tokens = 0
            with lock:
                for c in t.model_calls:
                    trace.model_calls.append(c.model_copy(update={"purpose": f"task{task.id}/{c.purpose}"}))
                    tokens += c.prompt_tokens + c.completion_tokens
                t.model_calls = []
            return tokens

        def from_answer(task: SubTask, resp: AnswerResponse, t: Trace, started: float) -> TaskResult:
            tokens = merge_calls(task, t)
            ok = not resp.fallback and bool(resp.citations)
            return TaskResult(id=task.id, description=task.description, kind=task.kind,
                              status="done" if ok else "failed", statement=resp.answer if ok else "",
                              citations=resp.citations if ok else [],
                              error=None if ok else (resp.notes[0] if resp.notes else "no verified statement"),
                              duration_ms=round((time.perf_counter() - started) * 1000, 1), tokens=tokens)

        def retrieve(task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
            started = time.perf_counter()
            t = sub_trace(task)
            resp = answerer.answer(task.description, trace=t, has_context=True)
            return from_answer(task, resp, t, started)

        def rewrite(task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
            from cograg.control.corrective import QueryRewriter, RewriteResult

            started = time.perf_counter()
            t = sub_trace(task)
            rewritten = QueryRewriter(RecordingLLM(self.llm, t, purpose="rewrite"), timeout_s=opts.answer.llm_timeout_s
                                      ).rewrite(task.description, task.description, [], [])
            # a rejected rewrite (empty, repeated, model error) searches the description as written
            query = rewritten.rewritten_query if isinstance(rewritten, RewriteResult) else task.description
            result = answerer.search(query)
            result = result.model_copy(update={"query": task.description})
            resp = answerer.answer(task.description, trace=t, result=result, has_context=True)
            return from_answer(task, resp, t, started)

        def reason(task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
            started = time.perf_counter()
            t = sub_trace(task)
            usable = [d for d in deps if d.status == "done" and d.statement]
            hits = [turn.hits[c.chunk_id] for d in usable for c in d.citations if c.chunk_id in turn.hits]
            hits = list({h.chunk_id: h for h in hits}.values())
            established = [{"id": f"T{d.id}", "statement": strip_markers(d.statement)} for d in usable]
            result = SearchResult(query=task.description, mode="hybrid", hits=hits)
            # inputs are established facts (seed 000): no new retrieval, no evidence floor
            resp = answerer.answer(f"{task.description}\n(original question: {q})" if task.description != q
                                   else q, trace=t, result=result, facts=established, has_context=True,
                                   evidence_gate=False)
            return from_answer(task, resp, t, started)

        def evidence_merge(task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
            from cograg.control.synthesizer import CitationNumbering

            numbering = CitationNumbering()
            parts = [numbering.renumber_statement(d) for d in deps if d.status == "done" and d.statement]
            ok = bool(parts)
            return TaskResult(id=task.id, description=task.description, kind=task.kind,
                              status="done" if ok else "failed", statement=" ".join(parts),
                              citations=numbering.citations, error=None if ok else "no inputs to merge")

        def conflict_resolve(task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
            merged = evidence_merge(task, deps, token)
            conflicts = find_conflicts([d for d in deps if d.status == "done" and d.statement], self.judge, q)
            return merged.model_copy(update={"conflicts": conflicts})

        runners = {"retrieve": retrieve, "rewrite": rewrite, "reason": reason, "evidence_merge": evidence_merge,
                   "conflict_resolve": conflict_resolve}
        executor = DAGExecutor(runners, budget, on_event=lambda name, data: trace.event(name, **data))
        report = executor.run(plan, cancel)
        results: dict[int, TaskResult] = dict(report.results)
        trace.plan["report"] = report.model_dump(mode="json", exclude={"results"})
        trace.plan["nodes"] = [
            {"id": r.id, "kind": r.kind, "status": r.status, "duration_ms": r.duration_ms, "tokens": r.tokens,
             "attempts": r.attempts, "error": r.error, "statement": r.statement,
             "deps": next((s.dependencies for s in plan.sub_tasks if s.id == r.id), []),
             "chunk_ids": [c.chunk_id for c in r.citations],
             "events": [e.name for e in sub_traces[r.id].events] if r.id in sub_traces else []}
            for r in sorted(results.values(), key=lambda r: r.id)]
        for t in sub_traces.values():
            trace.verdicts += t.verdicts
            trace.retrieved += [r for r in t.retrieved if not any(x["chunk_id"] == r["chunk_id"] for x in trace.retrieved)]
            trace.injection_flags += t.injection_flags
            trace.model_calls += t.model_calls  # calls of a node abandoned mid-way
        done = [r for r in results.values() if r.status == "done" and r.statement]
        if not done:
            trace.event("EXECUTION_FAILED", status=report.status, reason=report.reason)
            raise ModeFailed(f"R3: no task established anything ({report.status}: {report.reason})")

        synthesizer = Synthesizer(RecordingLLM(self.llm, trace, purpose="synthesize"), recording_verifier(answerer.verifier, trace),
                                  chunk_text=self.chunk_text, max_sentences=opts.answer.max_sentences,
                                  timeout_s=opts.answer.llm_timeout_s)
        trace.prompt_versions[synthesizer.prompt.name] = synthesizer.prompt.version
        conflicts = [c for r in results.values() for c in r.conflicts]
        if conflicts:
            trace.event("CONFLICT_DETECTED", conflicts=conflicts[:4])
            return self._conflict_answer(q, results, conflicts, trace, synthesizer)
        trace.event("EXECUTION_DONE", status=report.status, done=len(done), total=len(plan.sub_tasks))
        synthesis = synthesizer.synthesize(q, sorted(done, key=lambda r: r.id))
        trace.plan["synthesis"] = synthesis.model_dump(mode="json", exclude={"citations", "claims"})
        trace.verdicts += [c.model_dump() for c in synthesis.claims]
        if not synthesis.answer:
            trace.event("SYNTHESIS_FAILED", reason=synthesis.reason)
            raise ModeFailed(f"R3: synthesis produced nothing ({synthesis.reason})")
        trace.event("DRAFT_READY", method=synthesis.method, citations=len(synthesis.citations))
        trace.event("VERIFIED", supported=sum(c.kept for c in synthesis.claims), total=len(synthesis.claims),
                    method=synthesis.method)
        answer = synthesis.answer
        incomplete = [r.id for r in results.values() if r.status != "done"]
        notes = [f"tasks without a verified result: {incomplete}"] if incomplete else []
        if synthesis.method != "model":
            notes.append(f"synthesis fell back to the task statements: {synthesis.reason}")
        supported = [c for c in synthesis.claims if c.kept]
        confidence = round(len(done) / max(1, len(plan.sub_tasks)) * (
            len(supported) / max(1, len(synthesis.claims)) if synthesis.claims else 1.0), 3)
        return AnswerResponse(answer=answer, citations=synthesis.citations, fallback=False, confidence=confidence,
                              grounded=True, route="MULTI_HOP", trace_id=trace.trace_id, claims=synthesis.claims,
                              notes=notes)

    def _conflict_answer(self, q: str, results: dict[int, TaskResult], conflicts: list[dict[str, Any]],
                         trace: Trace, synthesizer: Any) -> AnswerResponse:
        """D7: the sources disagree. The answer is both sides, each verified against its own source
        and cited; the disagreement itself and the question back go into `clarification`."""
        first = conflicts[0]
        sides = synthesizer.statements(q, [results[first["a"]], results[first["b"]]], reason="sources disagree")
        trace.verdicts += [c.model_dump() for c in sides.claims]
        if not sides.answer:
            raise ModeFailed("R3: conflicting statements did not survive verification")
        ask = ("这些资料的说法不一致（见上方各自的出处）。您希望以哪一个来源或哪个时间点为准？" if is_chinese(q) else
               "These sources disagree (each side is cited above). Which source or time period should I rely on?")
        return AnswerResponse(answer=sides.answer, citations=sides.citations, fallback=False, confidence=0.5,
                              grounded=True, route="MULTI_HOP", trace_id=trace.trace_id, claims=sides.claims,
                              clarification=ask,
                              notes=[f"conflict between tasks {first['a']} and {first['b']}: {first.get('reason', '')}"])

    def _cannot(self, q: str, trace: Trace, reason: str) -> AnswerResponse:
        """The end of the fallback chain (R4): a clarification request, never an error page."""
        lang = _lang(q)
        text = _CANNOT[lang].format(reason=reason[:160])
        trace.event("REQUESTING_CLARIFICATION", question=text)
        return AnswerResponse(answer=text, fallback=True, confidence=0.0, grounded=False, route="CLARIFY",
                              trace_id=trace.trace_id, clarification=text, notes=[reason[:300]])


def find_conflicts(results: list[TaskResult], judge: Any, question: str) -> list[dict[str, Any]]:
    """Pairs of established statements the judge finds contradictory (D7): one statement is the
    claim, the other the passage. One CONTRADICTED verdict is enough to tell the user."""
    from cograg.models import ModelError

    out: list[dict[str, Any]] = []
    for i, a in enumerate(results):
        for b in results[i + 1:]:
            try:
                v = judge.judge(strip_markers(a.statement), strip_markers(b.statement), question=question)
            except ModelError:  # a failed judge cannot establish a conflict
                continue
            if v.verdict == "CONTRADICTED":
                out.append({"a": a.id, "b": b.id, "reason": v.reason[:200]})
    return out


__all__ = ["Orchestrator", "TurnOptions", "find_conflicts", "Citation"]
