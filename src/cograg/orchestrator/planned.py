"""R3, the planned mode (SPEC D2–D5, D7): plan → run the plan as a DAG → synthesize a cited
answer from what the nodes established → verify it; or, when the nodes' sources disagree, both
sides with their sources and a question back to the user."""

from __future__ import annotations

import re
from typing import Any

from cograg.answer.answerer import Answerer, AnswerResponse, recording_verifier
from cograg.answer.contract import Citation, strip_markers
from cograg.answer.verifier import ClaimCheck
from cograg.trace import RecordingLLM
from cograg.control.models import Plan, TaskResult
from cograg.messages import message
from cograg.orchestrator.missing_parts import missing_text
from cograg.orchestrator.plan_tasks import PlanTaskRunners
from cograg.orchestrator.turn import BudgetedLLM, ModeFailed, Turn, guard


class PlannedMode:
    """One R3 run over one turn: `run` is the pipeline, each step a method."""

    def __init__(self, turn: Turn, answerer: Answerer, *, llm: Any, judge: Any, chunk_text: Any) -> None:
        self.turn = turn
        self.trace = turn.trace
        self.answerer = answerer
        self.llm = llm
        self.judge = judge
        self.chunk_text = chunk_text
        self.timeout_s = turn.options.answer.llm_timeout_s
        self.status = ""  # the executor's report status, once it ran
        self.template: str | None = None  # the template that planned the turn: then no model wrote the plan

    def run(self, facts: list[dict[str, Any]]) -> AnswerResponse:
        plan = self.make_plan(facts)
        self.stop_if_cancelled()
        tasks = PlanTaskRunners(question=self.turn.question, answerer=self.answerer, llm=self.llm, judge=self.judge,
                                trace=self.trace, evidence=self.turn.evidence,
                                llm_timeout_s=self.turn.timeout_s(self.timeout_s), cancel=self.turn.cancel)
        results = self.execute(plan, tasks)
        self.stop_if_cancelled()  # what the tasks found before the stop is no one's answer
        conflicts = [c for r in results.values() for c in r.conflicts]
        final = None if conflicts else final_task(plan, results, self.turn.question)
        if final is not None:
            return self.from_final_task(plan, results, final)
        missing = [] if conflicts else failed_findings(plan, results)
        decided = self.check_one_side(plan, results, tasks) if missing else None
        if decided is not None:
            return decided
        if missing:  # the reply says why: a budget that stopped the plan, or look-ups that found nothing
            return self.partial_answer(results, missing, spent=self.budget_spent())
        spent = None if conflicts else self.budget_spent()
        if spent is not None:  # no synthesis call past the turn's budget: what is verified, and why no more
            return self.partial_answer(results, [r for r in results.values() if r.status != "done"], spent=spent)
        synthesizer = self.synthesizer()
        if conflicts:
            return self.conflict_answer(results, conflicts, synthesizer)
        answer = self.synthesize(plan, results, synthesizer)
        self.stop_if_cancelled()  # stopped during the synthesis call: nothing is delivered
        return answer

    def stop_if_cancelled(self) -> None:
        """ModeFailed once the turn is cancelled: no further model call, no answer delivered (the
        orchestrator ends the turn CANCELLED)."""
        if self.turn.cancel.cancelled:
            raise ModeFailed(f"R3: cancelled ({self.turn.cancel.reason})")

    def budget_spent(self) -> str | None:
        """Why no further model call fits: the plan stopped on a budget, or the turn's one token
        account or wall budget (planner, tasks, synthesis, fallbacks together) is spent."""
        if self.status == "budget_exceeded":
            return self.trace.plan.get("report", {}).get("reason") or "the plan's budget is used up"
        return self.turn.budget_spent()

    # ------------------------------------------------------------------ steps
    def make_plan(self, facts: list[dict[str, Any]]) -> Plan:
        """A validated plan (repaired once), or ModeFailed."""
        from cograg.control.planner import Planner

        budget = self.turn.options.budget
        # budgeted: no repair call once the first one spent the turn's tokens
        llm = BudgetedLLM(RecordingLLM(self.llm, self.trace, purpose="plan", role="plan"), self.turn)
        planner = Planner(llm, budget, timeout_s=self.turn.timeout_s(self.timeout_s), templates=budget.plan_templates)
        outcome = guard(lambda: planner.plan(self.turn.question, facts), "R3")
        self.template = outcome.template
        if outcome.template is None:  # a template plan used no prompt
            self.trace.prompt_versions[planner.prompt.name] = planner.prompt.version
        self.trace.plan = {"outcome": outcome.model_dump(mode="json", exclude={"plan"})}
        if outcome.plan is None:
            self.turn.event("PLAN_FAILED", errors=outcome.errors[-2:])
            raise ModeFailed(f"R3: no valid plan after repair ({'; '.join(outcome.errors)[:200]})")
        self.trace.plan["plan"] = outcome.plan.model_dump()
        self.turn.event("PLAN_READY", tasks=len(outcome.plan.sub_tasks), template=outcome.template)
        return outcome.plan

    def execute(self, plan: Plan, tasks: PlanTaskRunners) -> dict[int, TaskResult]:
        """Run the DAG; the node table goes into the trace. ModeFailed when no node established anything."""
        from cograg.control.executor import DAGExecutor

        executor = DAGExecutor(tasks.runners(), self.turn.options.budget,
                               on_event=lambda name, data: self.turn.event(name, **data))
        # the plan runs on what the turn has left: planning (and routing) spent tokens and time already
        report = executor.run(plan, self.turn.cancel, tokens_left=self.turn.tokens_left, deadline=self.turn.deadline)
        results: dict[int, TaskResult] = dict(report.results)
        deps = {s.id: s.dependencies for s in plan.sub_tasks}
        self.trace.plan["report"] = report.model_dump(mode="json", exclude={"results"})
        self.trace.plan["nodes"] = [
            {"id": r.id, "kind": r.kind, "status": r.status, "duration_ms": r.duration_ms, "tokens": r.tokens,
             "attempts": r.attempts, "error": r.error, "statement": r.statement, "deps": deps.get(r.id, []),
             "chunk_ids": [c.chunk_id for c in r.citations], "events": tasks.node_events(r.id)}
            for r in sorted(results.values(), key=lambda r: r.id)]
        tasks.merge_sub_traces()
        if not _done(results):
            self.turn.event("EXECUTION_FAILED", status=report.status, reason=report.reason)
            raise ModeFailed(f"R3: no task established anything ({report.status}: {report.reason})")
        self.status = report.status
        return results

    def synthesizer(self) -> Any:
        from cograg.control.synthesizer import Synthesizer

        synthesizer = Synthesizer(BudgetedLLM(RecordingLLM(self.llm, self.trace, purpose="synthesize",
                                                           role="synthesize"), self.turn),
                                  recording_verifier(self.answerer.verifier, self.trace), chunk_text=self.chunk_text,
                                  max_sentences=self.turn.options.answer.max_sentences,
                                  timeout_s=self.turn.timeout_s(self.timeout_s))
        self.trace.prompt_versions[synthesizer.prompt.name] = synthesizer.prompt.version
        return synthesizer

    def synthesize(self, plan: Plan, results: dict[int, TaskResult], synthesizer: Any) -> AnswerResponse:
        """One cited answer from the established statements, verified sentence by sentence."""
        done = _done(results)
        self.turn.event("EXECUTION_DONE", status=self.status, done=len(done),
                        total=len(plan.sub_tasks))
        synthesis = synthesizer.synthesize(self.turn.question, sorted(done, key=lambda r: r.id))
        self.trace.plan["synthesis"] = synthesis.model_dump(mode="json", exclude={"citations", "claims"})
        self.trace.verdicts += [c.model_dump() for c in synthesis.claims]
        if not synthesis.answer:
            self.turn.event("SYNTHESIS_FAILED", reason=synthesis.reason)
            raise ModeFailed(f"R3: synthesis produced nothing ({synthesis.reason})")
        self.turn.event("DRAFT_READY", method=synthesis.method, citations=len(synthesis.citations))
        supported = [c for c in synthesis.claims if c.kept]
        self.turn.event("VERIFIED", supported=len(supported), total=len(synthesis.claims), method=synthesis.method)
        incomplete = [r.id for r in results.values() if r.status != "done"]
        notes = [f"tasks without a verified result: {incomplete}"] if incomplete else []
        if synthesis.method != "model":
            notes.append(f"synthesis fell back to the task statements: {synthesis.reason}")
        confidence = round(len(done) / max(1, len(plan.sub_tasks)) * (
            len(supported) / max(1, len(synthesis.claims)) if synthesis.claims else 1.0), 3)
        return AnswerResponse(answer=synthesis.answer, citations=synthesis.citations, fallback=False,
                              confidence=confidence, grounded=True, route="MULTI_HOP", trace_id=self.trace.trace_id,
                              claims=synthesis.claims, notes=notes)

    def from_final_task(self, plan: Plan, results: dict[int, TaskResult], final: TaskResult) -> AnswerResponse:
        """The plan's one last task asked the user's own question over everything before it, and its
        answer is verified already: it is the answer, and a synthesis call would only restate it."""
        done = _done(results)
        self.turn.event("EXECUTION_DONE", status=self.status, done=len(done), total=len(plan.sub_tasks))
        self.trace.plan["synthesis"] = {"method": "final_task", "task": final.id}
        self.turn.event("DRAFT_READY", method="final_task", citations=len(final.citations))
        supported = [c for c in final.claims if c.kept]
        self.turn.event("VERIFIED", supported=len(supported), total=len(final.claims), method="final_task")
        confidence = round(len(done) / max(1, len(plan.sub_tasks)) * len(supported) / max(1, len(final.claims)), 3)
        incomplete = [r.id for r in results.values() if r.status != "done"]
        notes = [f"task {final.id} answered the question from the others' verified statements"]
        if incomplete:
            notes.append(f"tasks without a verified result: {incomplete}")
        answer, citations, claims, added = with_uncited_inputs(plan, results, final, self.turn.lang == "zh")
        if added:
            notes.append(f"the verified statements of tasks {added}, whose sources the conclusion does not cite, "
                         "come first")
        return AnswerResponse(answer=answer, citations=citations, fallback=False,
                              confidence=confidence, grounded=True, route="MULTI_HOP", trace_id=self.trace.trace_id,
                              claims=claims, notes=notes)

    def check_one_side(self, plan: Plan, results: dict[int, TaskResult], tasks: PlanTaskRunners) -> AnswerResponse | None:
        """"Are A and B both X?" whose check was skipped because one look-up failed: the other side
        alone still decides no when its sources contradict "B is an X". The check runs here, on
        that side; anything but a no leaves the partial reply."""
        last = plan.sub_tasks[-1]
        skipped = results.get(last.id)
        if last.kind != "check" or skipped is None or skipped.status != "skipped":
            return None
        if self.budget_spent() is not None or self.turn.cancel.cancelled:
            return None  # no judge call past the turn's budget or after a stop
        decided = tasks.check(last, [results[d] for d in last.dependencies if d in results], self.turn.cancel)
        tasks.merge_sub_traces(only=last.id)  # the check's verdicts, in the turn's trace
        self.trace.plan["one_side_check"] = {"task": last.id, "status": decided.status, "error": decided.error}
        if decided.status != "done":
            return None
        results[last.id] = decided
        self.turn.event("EXECUTION_DONE", status=self.status, done=len(_done(results)), total=len(plan.sub_tasks))
        self.trace.plan["synthesis"] = {"method": "one_side_check", "task": last.id}
        self.turn.event("DRAFT_READY", method="one_side_check", citations=len(decided.citations))
        self.turn.event("VERIFIED", supported=1, total=1, method="one_side_check")
        incomplete = [r.id for r in results.values() if r.status != "done"]
        return AnswerResponse(answer=decided.statement, citations=decided.citations, fallback=False, confidence=0.5,
                              grounded=True, route="MULTI_HOP", trace_id=self.trace.trace_id, claims=decided.claims,
                              notes=[f"tasks without a verified result: {incomplete}; one side decided the check"])

    def partial_answer(self, results: dict[int, TaskResult], missing: list[TaskResult], *,
                       spent: str | None = None) -> AnswerResponse:
        """Some look-ups established nothing verifiable, so the question cannot be concluded: no
        synthesis (from half the facts it would conclude anyway, e.g. "Yes" to "are both …?" when
        one side is unknown). The reply says so, gives what the other tasks established, each
        statement as verified in its task, and names what is missing (C4): a refusal that keeps
        the verified part. No model call. `spent`: the turn's budget ran out before a synthesis
        (the reply says that instead). What is missing is named by the system, never in the
        planner's words unchecked (`missing_parts`)."""
        from cograg.control.synthesizer import CitationNumbering

        numbering = CitationNumbering()
        parts: list[str] = []
        claims: list[ClaimCheck] = []
        for r in sorted(_done(results), key=lambda r: r.id):
            if not r.citations:
                continue
            for claim in numbering.renumber_claims(r):
                if claim.kept:
                    # the task's "Yes," answered the task's question, not the user's; a bare "Yes"
                    # says nothing without it
                    claim = claim.model_copy(update={"sentence": without_yes_no_lead(claim.sentence)})
                    if not strip_markers(claim.sentence).strip(" .。，,"):
                        continue
                    parts.append(claim.sentence)
                claims.append(claim)
        self.turn.event("EXECUTION_DONE", status=self.status, done=len(_done(results)), total=len(results))
        self.trace.plan["synthesis"] = {"method": "partial", "missing": [r.id for r in missing]}
        if spent is not None:
            self.trace.plan["synthesis"]["budget"] = spent
        if not parts:
            raise ModeFailed("R3: tasks " + ", ".join(str(r.id) for r in missing) + " established nothing, "
                             "and no other task a verified statement" + (f"; {spent}" if spent else ""))
        text = self.partial_text(parts, missing, spent)
        ids = [r.id for r in missing]
        reason = (f"look-ups or checks without a verified result: {ids}" if spent is None
                  else f"no synthesis: {spent}; tasks without a verified result: {ids}")
        self.trace.outcome = {"fallback": True, "reason": reason}
        self.turn.event("REFUSED", reason=reason)
        return AnswerResponse(answer=text, citations=numbering.cited_by(claims), fallback=True,
                              confidence=0.0, grounded=True, route="MULTI_HOP", trace_id=self.trace.trace_id,
                              claims=claims, notes=[reason])

    def partial_text(self, parts: list[str], missing: list[TaskResult], spent: str | None) -> str:
        """The partial reply's words: what was verified, then what is missing, named by the system."""
        lang = "zh" if self.turn.lang == "zh" else "en"
        statements = ("" if lang == "zh" else " ").join(parts)
        named = missing_text([r.description for r in sorted(missing, key=lambda r: r.id)], self.turn.question, lang,
                             trusted=self.template is not None) if missing else ""
        if spent is None:
            return message("refusal.partial", lang, statements=statements, missing=named)
        text = message("refusal.budget_partial", lang, statements=statements)
        return text + ("" if not named else ("" if lang == "zh" else " ")
                       + message("refusal.not_established", lang, missing=named))

    def conflict_answer(self, results: dict[int, TaskResult], conflicts: list[dict[str, Any]],
                        synthesizer: Any) -> AnswerResponse:
        """D7: the sources disagree. The answer is both sides, each verified against its own source
        and cited; the disagreement itself and the question back go into `clarification`."""
        first = conflicts[0]
        sides = synthesizer.statements(self.turn.question, [results[first["a"]], results[first["b"]]],
                                       reason="sources disagree")
        self.trace.verdicts += [c.model_dump() for c in sides.claims]
        if not sides.answer:
            raise ModeFailed("R3: conflicting statements did not survive verification")
        # reported once both sides are verified: the turn ends here, asking the user
        self.turn.event("CONFLICT_DETECTED", conflicts=conflicts[:4])
        return AnswerResponse(answer=sides.answer, citations=sides.citations, fallback=False, confidence=0.5,
                              grounded=True, route="MULTI_HOP", trace_id=self.trace.trace_id, claims=sides.claims,
                              clarification=message("clarify.which_source", self.turn.lang),
                              notes=[f"conflict between tasks {first['a']} and {first['b']}: {first.get('reason', '')}"])


def final_task(plan: Plan, results: dict[int, TaskResult], question: str) -> TaskResult | None:
    """The result that answers the whole question by itself: the plan's only sink, a reasoning task
    (it answered from the chunks behind every input, so it can cite all of them) or a side-by-side
    check, done with verified sentences, every other task done too, and its task the user's
    question as asked."""
    from cograg.control.planner import sink_ids

    sinks = sink_ids(plan)
    if len(sinks) != 1 or len(_done(results)) != len(plan.sub_tasks):
        return None
    last = results.get(sinks[0])
    if last is None or last.kind not in ("reason", "check") or not last.claims or not last.citations:
        return None
    asks_question = " ".join(last.description.split()) == " ".join(question.split())
    return last if asks_question else None


def with_uncited_inputs(plan: Plan, results: dict[int, TaskResult], final: TaskResult,
                        chinese: bool) -> tuple[str, list[Citation], list[ClaimCheck], list[int]]:
    """The final task's answer, preceded by the verified statement of every input task whose
    sources it does not cite (a comparison that cites only one side's source would otherwise
    leave the other side's fact unsourced in the answer). Sources are chunks, not documents: the
    two sides are often records of one file. The statements were verified in their tasks against
    the same chunks; only the marker numbers change, so no model call is made.
    Returns (answer, citations, claims, ids of the tasks added)."""
    from cograg.control.synthesizer import CitationNumbering

    deps = next((s.dependencies for s in plan.sub_tasks if s.id == final.id), [])
    cited_chunks = {c.chunk_id for c in final.citations}
    added = [results[d] for d in deps if d in results and results[d].status == "done" and results[d].statement
             and results[d].citations and any(c.kept for c in results[d].claims)
             and not cited_chunks & {c.chunk_id for c in results[d].citations}]
    if not added:
        return final.statement, final.citations, final.claims, []
    numbering = CitationNumbering()
    parts: list[str] = []
    claims: list[ClaimCheck] = []
    for r in [*added, final]:
        parts.append(numbering.renumber_statement(r))
        claims += numbering.renumber_claims(r)
    return ("" if chinese else " ").join(parts), numbering.cited_by(claims), claims, [r.id for r in added]


def failed_findings(plan: Plan, results: dict[int, TaskResult]) -> list[TaskResult]:
    """The look-ups (tasks that search: `retrieve`, `rewrite`) and side-by-side checks that failed
    or timed out, the second hop of a bridge as much as one side of a comparison. A task skipped
    because of them, or cancelled with the turn, is not one; nor is a failed reasoning step, whose
    inputs the synthesis can still conclude from (and is verified doing so). A check that could not
    decide is one: a synthesis would decide what its verdicts could not."""
    searching = {s.id for s in plan.sub_tasks if s.kind in ("retrieve", "rewrite", "check")}
    return [results[i] for i in sorted(searching) if i in results and results[i].status in ("failed", "timeout")]


_YES_NO_LEAD = re.compile(r"^\s*(?:(?:yes|no)\b\s*(?:[,.;:!—–-]+|(?=\[\d+\])|$)|"
                          r"(?:是的|是|对|不是|不|否)\s*(?:[，,。；;：:！!]|(?=\[\d+\])|$))\s*", re.I)


def without_yes_no_lead(sentence: str) -> str:
    """The sentence without a leading "Yes," / "No," / "是的，" (its first letter made upper case):
    the proposition it states stays, the answer to some other question goes."""
    rest = _YES_NO_LEAD.sub("", sentence, count=1)
    return rest[:1].upper() + rest[1:] if rest != sentence else sentence


def _done(results: dict[int, TaskResult]) -> list[TaskResult]:
    return [r for r in results.values() if r.status == "done" and r.statement]


__all__ = ["PlannedMode"]
