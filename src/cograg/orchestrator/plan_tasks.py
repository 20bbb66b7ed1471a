"""The work of one plan node (SPEC D3), one method per task kind. The DAG executor calls them;
each returns the node's TaskResult — a verified statement with chunk-level citations, or why not.

Every node answers into a trace of its own (its events describe a sub-question, not the turn);
its model calls are merged into the turn's trace with the node id in their purpose.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cograg.answer.answerer import Answerer, AnswerResponse
from cograg.answer.contract import strip_markers
from cograg.trace import RecordingLLM, Trace
from cograg.control.models import CancelToken, SubTask, TaskResult
from cograg.control.plan_templates import ChoiceCheck, OrderCheck, SameCheck
from cograg.orchestrator import check_sides, task_guard
from cograg.orchestrator.turn import TurnEvidence
from cograg.retrieval.models import SearchResult
from cograg.text import is_chinese

TaskRunner = Callable[[SubTask, list[TaskResult], CancelToken], TaskResult]


@dataclass(kw_only=True, eq=False)
class PlanTaskRunners:
    """Runs the nodes of one turn's plan. `sub_traces` keeps each node's trace for the turn's
    record (events per node; verdicts, retrieved chunks and flags are merged afterwards)."""

    question: str
    answerer: Answerer
    llm: Any
    judge: Any
    trace: Trace
    evidence: TurnEvidence
    llm_timeout_s: float
    cancel: CancelToken | None = None  # the turn's stop: an attempt's models stop with it at once
    sub_traces: dict[int, Trace] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _token: CancelToken | None = field(default=None, init=False, repr=False)  # see task_guard.watching

    def runners(self) -> dict[str, TaskRunner]:
        """The executor's table: task kind → runner."""
        return {"retrieve": self.retrieve, "rewrite": self.rewrite, "reason": self.reason,
                "evidence_merge": self.evidence_merge, "conflict_resolve": self.conflict_resolve,
                "check": self.check}

    # ------------------------------------------------------------------ task kinds
    @task_guard.stops_when_cancelled
    def retrieve(self, task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
        """Answer the sub-question from a search of its own. A look-up that depends on others (the
        second hop of a bridge question) searches with what they established and sees it as facts;
        one that depends on nothing searches twice, the second time with its best passage
        (`Answerer.follow_up`), since the paragraph it needs may only be named in that one."""
        started = time.perf_counter()
        t = self._sub_trace(task)
        usable = _established(deps)
        if not usable:
            result = self.answerer.follow_up(task.description)
            resp = self.answerer.answer(task.description, trace=t, result=result, has_context=True)
            return self._from_answer(task, resp, t, started)
        known = [strip_markers(d.statement) for d in usable]
        result = self.answerer.search(" ".join([task.description, *known])).model_copy(
            update={"query": task.description})
        facts = [{"id": f"T{d.id}", "statement": s} for d, s in zip(usable, known)]
        resp = self.answerer.answer(task.description, trace=t, result=result, facts=facts, has_context=True)
        return self._from_answer(task, resp, t, started)

    @task_guard.stops_when_cancelled
    def rewrite(self, task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
        """Rewrite the sub-question into a search query first, then answer it."""
        from cograg.control.corrective import QueryRewriter, RewriteResult

        started = time.perf_counter()
        t = self._sub_trace(task)
        rewritten = QueryRewriter(RecordingLLM(self.llm, t, purpose="rewrite", role="rewrite"), timeout_s=self.llm_timeout_s
                                  ).rewrite(task.description, task.description, [], [])
        # a rejected rewrite (empty, repeated, model error) searches the description as written
        query = rewritten.rewritten_query if isinstance(rewritten, RewriteResult) else task.description
        result = self.answerer.search(query).model_copy(update={"query": task.description})
        resp = self.answerer.answer(task.description, trace=t, result=result, has_context=True)
        return self._from_answer(task, resp, t, started)

    @task_guard.stops_when_cancelled
    def reason(self, task: SubTask, deps: list[TaskResult], token: CancelToken, trace: Trace | None = None) -> TaskResult:
        """Answer from the inputs' verified statements and the chunks they cite, no new search
        (into `trace` when a check that did not decide hands its question on)."""
        started = time.perf_counter()
        t = trace if trace is not None else self._sub_trace(task)
        usable = _established(deps)
        hits = [self.evidence.hits[c.chunk_id] for d in usable for c in d.citations
                if c.chunk_id in self.evidence.hits]
        hits = list({h.chunk_id: h for h in hits}.values())
        facts = [{"id": f"T{d.id}", "statement": strip_markers(d.statement)} for d in usable]
        result = SearchResult(query=task.description, mode="hybrid", hits=hits)
        question = (f"{task.description}\n(original question: {self.question})" if task.description != self.question
                    else self.question)
        # inputs are established facts (seed 000): no new retrieval, no evidence floor
        resp = self.answerer.answer(question, trace=t, result=result, facts=facts, has_context=True,
                                    evidence_gate=False)
        return self._from_answer(task, resp, t, started)

    @task_guard.stops_when_cancelled
    def check(self, task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
        """"Are A and B both X?" decided by verdicts (control/plan_templates.category_check): the
        claim "A is an X" is verified against the sources A's look-up cited, "B is an X" against
        B's, by the verifier (its deterministic checks, then the judge). Both supported: yes, citing
        both; one contradicted: no, citing the side that is not an X; otherwise not established.
        The model writes nothing here, so it cannot conclude from one side. With one look-up
        failed, the other alone can still say no (one that is not an X makes "both" false), never yes.
        "Are A and B in the same X?" is compared by value instead (`_same`), "Which X is P, A or B?"
        by verdicts that choose (`_choice`), "Which band was formed first, A or B?" by dates (`_order`)."""
        from cograg.control.plan_templates import CategoryCheck, ChoiceCheck, OrderCheck, SameCheck, question_check
        from cograg.control.synthesizer import CitationNumbering

        started = time.perf_counter()
        spec = question_check(task.description)  # the check the plan was built for
        if isinstance(spec, SameCheck):
            return self._same(task, deps, started, spec)
        if isinstance(spec, ChoiceCheck):
            return self._choice(task, deps, token, started, spec)
        if isinstance(spec, OrderCheck):
            return self._order(task, deps, token, started, spec)
        t = self._sub_trace(task)
        spec = spec if isinstance(spec, CategoryCheck) else None
        sides = self._sides(spec.entities, deps) if spec is not None else None
        if spec is None or sides is None:
            return self._failed(task, started, "not a question of the form 'are A and B both X?' over "
                                               "established look-ups")
        verdicts, reason = self._side_verdicts(task, t, spec.claims, sides)
        zh = is_chinese(task.description)
        contradicted = [i for i, v in enumerate(verdicts) if v.verdict == "CONTRADICTED"]
        if all(v.kept and v.verdict == "SUPPORTED" for v in verdicts):
            cited, text = [0, 1], spec.yes
        elif contradicted:
            cited, text = contradicted[:1], ("不，" if zh else "No, ") + spec.negations[contradicted[0]]
        else:
            return self._failed(task, started, f"the sources do not establish it ({reason})")
        numbering = CitationNumbering()
        markers = "".join(f"[{numbering.number(c)}]" for i in cited for c in sides[i].citations)  # type: ignore[union-attr]
        statement = f"{text}{'' if zh else ' '}{markers}{'。' if zh else '.'}"
        return _decided(task, started, statement, numbering.citations,
                        "check: " + ", ".join(v.method for v in verdicts), reason[:500])

    def _side_verdicts(self, task: SubTask, t: Trace, claims: tuple[str, str],
                       sides: list[TaskResult | None]) -> tuple[list[Any], str]:
        """Each claim ("A was an American director") verified against the sources its side's look-up
        cited, by the verifier (its deterministic checks, then the judge); the verdicts go into the
        node's trace and its model calls into the turn's. Returns (verdicts, a one-line reason)."""
        from cograg.answer.answerer import recording_verifier
        from cograg.answer.verifier import ClaimCheck

        verifier = recording_verifier(self.answerer.verifier, t)
        verdicts: list[ClaimCheck] = []
        for claim, side in zip(claims, sides, strict=True):
            if side is None:  # its look-up found nothing: no verdict
                verdicts.append(ClaimCheck(sentence=claim, citation_ids=[], kept=False, verdict="UNRELATED",
                                           method="none", reason="its look-up established nothing"))
                continue
            evidence = {c.id: self._evidence_text(c) for c in side.citations}
            sentence = f"{claim} {''.join(f'[{c.id}]' for c in side.citations)}"
            # the claim is composed from the question ("… was an American director"): its names are
            # the question's, and whether the sources bear them out is the verdict
            checked = verifier.verify(sentence, side.citations, evidence, named_in=task.description).claims
            verdicts.append(checked[0] if checked else ClaimCheck(sentence=sentence, citation_ids=[], kept=False,
                                                                  verdict="UNRELATED", method="none"))
        t.verdicts += [v.model_dump() for v in verdicts]  # each side's verdict, in the turn's trace
        t.event("VERIFIED", supported=sum(v.verdict == "SUPPORTED" for v in verdicts), total=len(verdicts))
        self._merge_calls(task, t)
        return verdicts, "; ".join(f"{claim}: {v.verdict} ({v.method})" for claim, v in zip(claims, verdicts, strict=True))

    def _choice(self, task: SubTask, deps: list[TaskResult], token: CancelToken, started: float,
                spec: ChoiceCheck) -> TaskResult:
        """"Which singer is American, A or B?": "A is American" verified against A's sources, "B is
        American" against B's. One supported and the other contradicted: that one, in the words of
        the claim, citing its side (its name as that side's look-up wrote it in full, `full_names`). Any
        other pair of verdicts (both supported, neither, one supported and the other unrelated) does
        not decide (`CHOICE_UNDECIDED`), and the model answers from the two look-ups as a reasoning
        step would, verified as ever.
        So do two look-ups that cannot be placed on their sides (`check_sides`). With a side whose
        look-up established nothing it fails: one side cannot choose between two (the turn gives what
        was found, `planned.partial_answer`)."""
        from cograg.control.synthesizer import CitationNumbering

        sides = self._sides(spec.entities, deps)
        if sides is None and len(_established(deps)) == 2:  # both found, but which is whose is not told
            t = self._sub_trace(task)
            t.event("CHOICE_UNDECIDED", reason="which look-up is about which side is not established")
            return self.reason(task, deps, token, trace=t)
        if sides is None or None in sides:
            return self._failed(task, started, "a choice between two needs both look-ups established")
        t = self._sub_trace(task)
        verdicts, reason = self._side_verdicts(task, t, spec.claims, sides)
        held = [i for i, v in enumerate(verdicts) if v.kept and v.verdict == "SUPPORTED"]
        if len(held) != 1 or verdicts[1 - held[0]].verdict != "CONTRADICTED":
            t.event("CHOICE_UNDECIDED", reason=reason[:300])
            sides_checked = list(t.verdicts)
            reasoned = self.reason(task, deps, token, trace=t)
            t.verdicts[:0] = sides_checked  # the answerer sets the trace's verdicts to its own
            return reasoned
        side = sides[held[0]]
        numbering = CitationNumbering()
        markers = "".join(f"[{numbering.number(c)}]" for c in side.citations)  # type: ignore[union-attr]
        statement = self._in_full(t, f"{spec.claims[held[0]]} {markers}.", [side])  # type: ignore[list-item]
        return _decided(task, started, statement, numbering.citations, "check: choice", reason[:500])

    def _order(self, task: SubTask, deps: list[TaskResult], token: CancelToken, started: float,
               spec: OrderCheck) -> TaskResult:
        """"Which band was formed first, A or B?": the one date each side's verified statement gives
        (`control/order_value.the_moment`), compared here; the earlier side is the answer (the later
        one for "later", "younger"), citing both sides, with its name as its sources write it in
        full. A side without a look-up or without one date, look-ups whose verified statements do not
        tell which side each is about (`check_sides`), or two dates that cannot be told apart as
        written, do not decide (`ORDER_UNDECIDED`): the model answers from the look-ups as a
        reasoning step would, verified as ever. No model call decides the order."""
        from cograg.control.order_value import earlier, the_moment
        from cograg.control.synthesizer import CitationNumbering

        sides = self._sides(spec.entities, deps)
        dates = [None if side is None else the_moment(strip_markers(side.statement)) for side in (sides or [None, None])]
        first = earlier(dates[0], dates[1]) if None not in dates else None  # type: ignore[arg-type]
        t = self._sub_trace(task)
        reason = ("; ".join(f"{e}: {d or 'no single date'}" for e, d in zip(spec.entities, dates, strict=True))
                  if sides is not None else "which look-up is about which side is not established")
        if first is None:
            t.event("ORDER_UNDECIDED", reason=reason[:300])
            return self.reason(task, deps, token, trace=t)
        won = 1 - first if spec.latest else first
        numbering = CitationNumbering()
        marks = {i: "".join(f"[{numbering.number(c)}]" for c in sides[i].citations)  # type: ignore[union-attr]
                 for i in (won, 1 - won)}  # numbered in the order the sentence names them
        when = ["on" if d.day is not None else "in" for d in dates]  # type: ignore[union-attr]
        statement = (f"{spec.entities[won]} {spec.predicate}: {when[won]} {dates[won]} {marks[won]}, and "
                     f"{spec.entities[1 - won]} {when[1 - won]} {dates[1 - won]} {marks[1 - won]}.")
        statement = self._in_full(t, statement[:1].upper() + statement[1:], sides)  # type: ignore[arg-type]
        return _decided(task, started, statement, numbering.citations, "check: order",
                        reason + " (from the look-ups' verified statements)")

    def _same(self, task: SubTask, deps: list[TaskResult], started: float, spec: SameCheck) -> TaskResult:
        """"Are A and B in the same X?": the X each side's verified statement names
        (`control/same_value.named_value`), compared here. Equal: yes, citing both sides; different:
        no, citing both; a side without a look-up or a value: not established. The values are words
        of statements verified against their sources, and no model call is made."""
        from cograg.control.same_value import named_value, same_value
        from cograg.control.synthesizer import CitationNumbering

        sides = self._sides(spec.entities, deps)
        if sides is None or None in sides:
            return self._failed(task, started, "not a question of the form 'are A and B in the same X?' over two "
                                               "established look-ups, each placed on its side by what it verified")
        values = [named_value(strip_markers(side.statement), spec.noun, e)  # type: ignore[union-attr]
                  for side, e in zip(sides, spec.entities, strict=True)]
        if None in values:
            return self._failed(task, started, f"the look-ups do not both name a {spec.noun} "
                                               f"({', '.join(f'{e}: {v}' for e, v in zip(spec.entities, values))})")
        numbering = CitationNumbering()
        marks = ["".join(f"[{numbering.number(c)}]" for c in side.citations) for side in sides]  # type: ignore[union-attr]
        (a, b), (va, vb) = spec.entities, values
        if same_value(va, vb):  # type: ignore[arg-type]
            statement = f"Yes, the {spec.noun} of both {a} and {b} is {va} {marks[0]}{marks[1]}."
        else:
            statement = f"No, the {spec.noun} of {a} is {va} {marks[0]}, and that of {b} is {vb} {marks[1]}."
        return _decided(task, started, statement, numbering.citations, "check: same value",
                        f"{a}: {va}; {b}: {vb} (from the look-ups' verified statements)")

    def evidence_merge(self, task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
        """The inputs' statements side by side, their citations renumbered into one list."""
        from cograg.control.synthesizer import CitationNumbering

        numbering = CitationNumbering()
        parts = [numbering.renumber_statement(d) for d in _established(deps)]
        ok = bool(parts)
        return TaskResult(id=task.id, description=task.description, kind=task.kind,
                          status="done" if ok else "failed", statement=" ".join(parts),
                          citations=numbering.citations, error=None if ok else "no inputs to merge")

    @task_guard.stops_when_cancelled
    def conflict_resolve(self, task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
        """A merge that also reports which inputs contradict each other (D7)."""
        merged = self.evidence_merge(task, deps, token)
        return merged.model_copy(update={"conflicts": find_conflicts(_established(deps), self.judge, self.question)})

    # ------------------------------------------------------------------ helpers
    def _sides(self, entities: tuple[str, str], deps: list[TaskResult]) -> list[TaskResult | None] | None:
        """Each entity's established look-up, placed by what it verified (`check_sides`), never by
        the planner's order."""
        return check_sides.sides(entities, _established(deps),
                                 lambda d: [self._evidence_text(c) for c in d.citations])

    def _evidence_text(self, citation: Any) -> str:
        """A cited chunk's text as the answerer's judge saw it (injection spans redacted)."""
        from cograg.answer.injection import redact

        hit = self.evidence.hits.get(citation.chunk_id)
        return redact(hit.text).text if hit is not None else citation.quote

    def _in_full(self, t: Trace, sentence: str, sides: list[TaskResult]) -> str:
        """`sentence` (a check's conclusion) with each name as the sides' sources write it in full: their
        look-ups' statements, whose names were written in full from the whole blocks they cite, and
        their cited chunks (`full_names`); each name written so goes into the node's trace."""
        from cograg.answer.full_names import full_names

        texts = [strip_markers(s.statement) for s in sides] + [self._evidence_text(c) for s in sides for c in s.citations]
        [written_in_full], written = full_names([sentence], [texts])
        for w in written:
            t.event("NAME_WRITTEN_IN_FULL", short=w.short, full=w.full)
        return written_in_full

    def _failed(self, task: SubTask, started: float, error: str) -> TaskResult:
        return TaskResult(id=task.id, description=task.description, kind=task.kind, status="failed", error=error,
                          duration_ms=round((time.perf_counter() - started) * 1000, 1))

    def _sub_trace(self, task: SubTask) -> Trace:
        t = Trace(question=task.description)
        with self._lock:
            self.sub_traces[task.id] = t
        return t

    def _merge_calls(self, task: SubTask, t: Trace) -> int:
        """Move a node's model calls into the turn's trace; returns the tokens they used."""
        tokens = 0
        with self._lock:
            for c in t.model_calls:
                self.trace.model_calls.append(c.model_copy(update={"purpose": f"task{task.id}/{c.purpose}"}))
                tokens += c.prompt_tokens + c.completion_tokens
            t.model_calls = []
        return tokens

    def _from_answer(self, task: SubTask, resp: AnswerResponse, t: Trace, started: float) -> TaskResult:
        tokens = self._merge_calls(task, t)
        ok = not resp.fallback and bool(resp.citations)
        return TaskResult(id=task.id, description=task.description, kind=task.kind,
                          status="done" if ok else "failed", statement=resp.answer if ok else "",
                          citations=resp.citations if ok else [], claims=resp.claims if ok else [],
                          error=None if ok else (resp.notes[0] if resp.notes else "no verified statement"),
                          duration_ms=round((time.perf_counter() - started) * 1000, 1), tokens=tokens)

    def merge_sub_traces(self, only: int | None = None) -> None:
        """What the nodes found (or node `only`), in the turn's trace: verdicts, retrieved chunks,
        injection flags, and the model calls of nodes abandoned mid-way (finished nodes moved theirs
        already)."""
        trace = self.trace
        for task_id, t in self.sub_traces.items():
            if only is not None and task_id != only:
                continue
            trace.verdicts += t.verdicts
            trace.drafts += [{"task": task_id, **d} for d in t.drafts]
            seen = {r["chunk_id"] for r in trace.retrieved}
            trace.retrieved += [r for r in t.retrieved if r["chunk_id"] not in seen]
            trace.injection_flags += t.injection_flags
            trace.model_calls += t.model_calls
            t.model_calls = []

    def node_events(self, task_id: int) -> list[str]:
        t = self.sub_traces.get(task_id)
        return [e.name for e in t.events] if t is not None else []


def _decided(task: SubTask, started: float, statement: str, citations: list[Any], method: str,
             reason: str) -> TaskResult:
    """A check's result: its statement, which the system wrote from verified inputs, as the one
    SUPPORTED claim (`method` says how it was decided)."""
    from cograg.answer.verifier import ClaimCheck

    conclusion = ClaimCheck(sentence=statement, citation_ids=[c.id for c in citations], verdict="SUPPORTED",
                            method=method, reason=reason, kept=True)
    return TaskResult(id=task.id, description=task.description, kind=task.kind, status="done",
                      statement=statement, citations=citations, claims=[conclusion],
                      duration_ms=round((time.perf_counter() - started) * 1000, 1))


def _established(deps: list[TaskResult]) -> list[TaskResult]:
    return [d for d in deps if d.status == "done" and d.statement]


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


__all__ = ["PlanTaskRunners", "TaskRunner", "find_conflicts"]
