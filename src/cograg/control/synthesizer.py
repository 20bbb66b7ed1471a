"""Synthesizer (SPEC D5, seed 000 Prompt 4): completed task results → one answer citing
`[cite: task, ID]`; each task citation is resolved to the source chunks behind that task, and the
whole answer then goes through the claim verifier (C3). If the model's synthesis does not survive,
the deterministic fallback is the task statements themselves, each already verified in its task."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from cograg.answer.contract import Citation, answer_sentences, distinct_sentences, markers_in, strip_markers
from cograg.answer.verifier import ClaimCheck, Verifier
from cograg.control.models import TaskResult
from cograg.models import ModelError
from cograg.prompts import load_prompt
from cograg.text import is_chinese

# "[cite: task, 2]", "[cite: task 2]", "[cite: task, 1, 2]", "[task 2]", "[cite: task_2_result]"
TASK_CITE_RE = re.compile(r"\[\s*(?:cite\s*:\s*)?task[\s,_:#]*((?:\d+(?:_result)?\s*[,，\s]\s*)*\d+(?:_result)?)\s*\]", re.I)


class SynthesisDraft(BaseModel):
    # no maxLength: llama.cpp turns it into thousands of nested grammar rules (a segfault when sampling);
    # max_tokens bounds the length instead
    answer: str


class SynthesisResult(BaseModel):
    answer: str = Field(description="verified sentences with numbered markers into `citations`")
    citations: list[Citation] = Field(default_factory=list)
    claims: list[ClaimCheck] = Field(default_factory=list)
    unknown_task_ids: list[int] = Field(default_factory=list)
    uncited_sentences: int = 0
    method: str = Field("model", description="model | task_statements (deterministic fallback)")
    reason: str = ""


class CitationNumbering:
    """Global [1..n] numbering of chunk citations across task results (one number per chunk)."""

    def __init__(self) -> None:
        self.citations: list[Citation] = []
        self._by_chunk: dict[str, str] = {}

    def number(self, c: Citation) -> str:
        if c.chunk_id not in self._by_chunk:
            new_id = str(len(self.citations) + 1)
            self._by_chunk[c.chunk_id] = new_id
            self.citations.append(c.model_copy(update={"id": new_id}))
        return self._by_chunk[c.chunk_id]

    def renumber_statement(self, result: TaskResult) -> str:
        """The task's statement with its own markers rewritten into the global numbering."""
        return self.renumber(result.statement, result)

    def renumber_claim(self, claim: ClaimCheck, result: TaskResult) -> ClaimCheck:
        """One of the task's verdicts, its sentence and citation ids in the global numbering."""
        own = {c.id: c for c in result.citations}
        return claim.model_copy(update={
            "sentence": self.renumber(claim.sentence, result),
            "citation_ids": [self.number(own[k]) for k in claim.citation_ids if k in own]})

    def renumber_claims(self, result: TaskResult) -> list[ClaimCheck]:
        """All of the task's verdicts in the global numbering."""
        return [self.renumber_claim(c, result) for c in result.claims]

    def cited_by(self, claims: list[ClaimCheck]) -> list[Citation]:
        """The numbered citations a kept claim cites: those an answer made of `claims` lists."""
        used = {k for c in claims if c.kept for k in c.citation_ids}
        return [c for c in self.citations if c.id in used]

    def renumber(self, text: str, result: TaskResult) -> str:
        own = {c.id: c for c in result.citations}

        def sub(m: re.Match[str]) -> str:
            ids = [k for k, _, _ in markers_in(m.group(0)) if k in own]
            return "".join(f"[{self.number(own[k])}]" for k in ids)

        from cograg.answer.contract import MARKER_RE

        return MARKER_RE.sub(sub, text).strip()


def resolve_task_citations(text: str, results: dict[int, TaskResult],
                           numbering: CitationNumbering) -> tuple[list[str], list[int], int]:
    """Sentences of `text` with task citations replaced by the markers of the chunks those tasks
    cited; uncited sentences are dropped. Returns (sentences, unknown task ids, uncited count)."""
    unknown: list[int] = []
    uncited = 0
    out: list[str] = []
    for sentence in answer_sentences(text):
        ids: list[int] = []
        for m in TASK_CITE_RE.finditer(sentence):
            # a plan has a few dozen tasks: a longer number names none (and int() refuses 4300 digits)
            ids += [int(part) if len(part) <= 9 else -1 for part in re.findall(r"\d+", m.group(1))]
        body = TASK_CITE_RE.sub("", sentence)
        body = strip_markers(body)  # numbered markers the model made up mean nothing here
        known = [i for i in dict.fromkeys(ids) if i in results and results[i].citations]
        unknown += [i for i in ids if i not in results]
        if not known or not body.strip(" .。"):
            uncited += 1
            continue
        markers = "".join(f"[{numbering.number(c)}]" for i in known for c in results[i].citations)
        end = re.search(r"[.。!?！？]$", body)
        out.append(f"{body[:-1]} {markers}{body[-1]}" if end else f"{body} {markers}")
    return out, sorted(set(unknown)), uncited


class Synthesizer:
    def __init__(self, llm: Any, verifier: Verifier, *, chunk_text: Callable[[str], str],
                 max_sentences: int = 6, max_tokens: int = 512, timeout_s: float = 180.0) -> None:
        self.llm = llm
        self.verifier = verifier
        self.chunk_text = chunk_text
        self.prompt = load_prompt("synthesize_answer")
        self.max_sentences = max_sentences
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s

    def _messages(self, question: str, results: list[TaskResult]) -> list[Any]:
        from cograg.models.llm import ChatMessage

        view = [{"id": r.id, "description": r.description, "output": strip_markers(r.statement)} for r in results]
        return [ChatMessage(role="user", content=self.prompt.render(
            results=view, question=question, max_sentences=self.max_sentences))]

    def verified(self, question: str, sentences: list[str], citations: list[Citation], *,
                 method: str, reason: str = "") -> SynthesisResult:
        """Only the sentences the verifier keeps, with the citations they still use: whatever path
        produced the text, nothing is delivered without a SUPPORTED verdict (C3)."""
        evidence = {c.id: self.chunk_text(c.chunk_id) for c in citations}
        verification = self.verifier.verify("\n".join(sentences), citations, evidence, question=question)
        kept = distinct_sentences([c.sentence for c in verification.claims if c.kept])
        used = {k for sentence in kept for k, _, _ in markers_in(sentence)}
        return SynthesisResult(answer=("" if is_chinese(question) else " ").join(kept),
                               citations=[c for c in citations if c.id in used], claims=verification.claims,
                               method=method, reason=reason)

    def statements(self, question: str, results: list[TaskResult], reason: str) -> SynthesisResult:
        """The task statements in task order, renumbered and verified again as one answer (each
        was verified in its task; re-checking keeps the guarantee whole after renumbering)."""
        numbering = CitationNumbering()
        sentences = []
        for r in results:
            if r.status != "done" or not r.statement:
                continue
            for sentence in answer_sentences(numbering.renumber_statement(r)):
                # a fragment without a full stop would run into the next task's statement
                sentence = sentence if re.search(r"[.。!?！？]\s*(\[\d+\]\s*)*$", strip_markers(sentence) + " ") \
                    else sentence + ("。" if is_chinese(question) else ".")
                sentences.append(sentence)
        return self.verified(question, sentences, numbering.citations, method="task_statements", reason=reason)

    def synthesize(self, question: str, results: list[TaskResult]) -> SynthesisResult:
        done = [r for r in results if r.status == "done" and r.statement and r.citations]
        if not done:
            return SynthesisResult(answer="", method="none", reason="no task established anything")
        try:
            draft, _ = self.llm.chat_json(self._messages(question, done), SynthesisDraft,
                                          max_tokens=self.max_tokens, timeout_s=self.timeout_s)
        except ModelError as exc:
            return self.statements(question, done, f"synthesis failed: {type(exc).__name__}")
        numbering = CitationNumbering()
        sentences, unknown, uncited = resolve_task_citations(draft.answer, {r.id: r for r in done}, numbering)
        if not sentences:
            return self.statements(question, done, "the synthesis cited no task")
        out = self.verified(question, sentences, numbering.citations, method="model")
        kept = sum(c.kept for c in out.claims)
        if not kept or kept / max(1, len(out.claims)) < 0.5:
            fb = self.statements(question, done, f"only {kept} of {len(out.claims)} synthesized sentences verified")
            fb.unknown_task_ids, fb.uncited_sentences = unknown, uncited
            return fb
        out.unknown_task_ids, out.uncited_sentences = unknown, uncited
        return out
