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
from cograg.orchestrator.turn import TurnEvidence
from cograg.retrieval.hops import follow_up_search
from cograg.retrieval.models import SearchResult

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
    sub_traces: dict[int, Trace] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def runners(self) -> dict[str, TaskRunner]:
        """The executor's table: task kind → runner."""
        return {"retrieve": self.retrieve, "rewrite": self.rewrite, "reason": self.reason,
                "evidence_merge": self.evidence_merge, "conflict_resolve": self.conflict_resolve}

    # ------------------------------------------------------------------ task kinds
    def retrieve(self, task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
        """Answer the sub-question from a search of its own. A look-up that depends on others (the
        second hop of a bridge question) searches with what they established and sees it as facts;
        one that depends on nothing searches twice, the second time with its best passage
        (`follow_up_search`), since the paragraph it needs may only be named in that one."""
        started = time.perf_counter()
        t = self._sub_trace(task)
        usable = _established(deps)
        if not usable:
            result = follow_up_search(self.answerer.search, task.description)
            resp = self.answerer.answer(task.description, trace=t, result=result, has_context=True)
            return self._from_answer(task, resp, t, started)
        known = [strip_markers(d.statement) for d in usable]
        result = self.answerer.search(" ".join([task.description, *known])).model_copy(
            update={"query": task.description})
        facts = [{"id": f"T{d.id}", "statement": s} for d, s in zip(usable, known)]
        resp = self.answerer.answer(task.description, trace=t, result=result, facts=facts, has_context=True)
        return self._from_answer(task, resp, t, started)

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

    def reason(self, task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
        """Answer from the inputs' verified statements and the chunks they cite, no new search."""
        started = time.perf_counter()
        t = self._sub_trace(task)
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

    def evidence_merge(self, task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
        """The inputs' statements side by side, their citations renumbered into one list."""
        from cograg.control.synthesizer import CitationNumbering

        numbering = CitationNumbering()
        parts = [numbering.renumber_statement(d) for d in _established(deps)]
        ok = bool(parts)
        return TaskResult(id=task.id, description=task.description, kind=task.kind,
                          status="done" if ok else "failed", statement=" ".join(parts),
                          citations=numbering.citations, error=None if ok else "no inputs to merge")

    def conflict_resolve(self, task: SubTask, deps: list[TaskResult], token: CancelToken) -> TaskResult:
        """A merge that also reports which inputs contradict each other (D7)."""
        merged = self.evidence_merge(task, deps, token)
        return merged.model_copy(update={"conflicts": find_conflicts(_established(deps), self.judge, self.question)})

    # ------------------------------------------------------------------ helpers
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

    def merge_sub_traces(self) -> None:
        """What the nodes found, in the turn's trace: verdicts, retrieved chunks, injection flags,
        and the model calls of nodes abandoned mid-way (finished nodes moved theirs already)."""
        trace = self.trace
        for task_id, t in self.sub_traces.items():
            trace.verdicts += t.verdicts
            trace.drafts += [{"task": task_id, **d} for d in t.drafts]
            seen = {r["chunk_id"] for r in trace.retrieved}
            trace.retrieved += [r for r in t.retrieved if r["chunk_id"] not in seen]
            trace.injection_flags += t.injection_flags
            trace.model_calls += t.model_calls

    def node_events(self, task_id: int) -> list[str]:
        t = self.sub_traces.get(task_id)
        return [e.name for e in t.events] if t is not None else []


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
