"""One verified answer (SPEC C1–C5): retrieve → refuse/clarify → redact injections → generate
under the citation contract → validate (C2) → regenerate once → cut to `answer.max_sentences` →
verify claims (C3) → post-check for obeyed injections (C5) → the contract object, with a stored
trace (F5).

The model proposes; every decision here — refusal, which ids and quotes survive, which sentences
are delivered — is deterministic code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from cograg.answer.budget import within_sentence_budget
from cograg.answer.contract import (Citation, DraftAnswer, EvidenceFirstDraft, ValidatedAnswer, distinct_sentences,
                                    strip_markers, validate_draft, verbatim_draft_schema)
from cograg.answer.described_entity import described_entity
from cograg.answer.full_names import cited_block_texts, full_names
from cograg.answer.injection import obeyed_injection, redacted_blocks
from cograg.answer.redaction import quotable_blocks
from cograg.answer.refusal import MODEL_FAILED, closest_evidence, refusal
from cograg.answer.response import (AnswerResponse, RemovedCounts, record_outcome, recording_verifier,
                                    withhold_quotes)
from cograg.answer.verifier import ClaimCheck, VerificationResult, Verifier
from cograg.config import AnswerConfig, VerificationConfig
from cograg.models import LLMOutputError, ModelError
from cograg.prompts import load_prompt
from cograg.questions import QuestionError, checked_question, expects_number, has_number, needs_clarification
from cograg.retrieval.hops import with_follow_up
from cograg.retrieval.links import linked_context
from cograg.retrieval.models import SearchResult
from cograg.retrieval.packing import ContextBlock, block_holding, pack_context
from cograg.text import is_chinese, language_of, shown_score
from cograg.trace import RecordingLLM, Trace

__all__ = ["AnswerConfig", "AnswerResponse", "Answerer", "QuestionError", "RemovedCounts", "checked_question",
           "record_outcome", "recording_verifier", "withhold_quotes"]

Route = Literal["DOC_GROUNDED", "CLARIFY", "REFUSED"]
DRAFT_TRACE_CHARS = 600  # enough for a short answer; the trace stays small
REJECTED_CHARS = 200  # of the rejected answer, quoted back to the model when it writes the answer again
REWRITE_REASON = ('the verifier found that "{rejected}" is not an answer to the question that the blocks it cites '
                  'support. Copy the evidence that answers the question itself, then write the answer from it')
DESCRIBED_REASON = ('the answer names "{name}", which is the {phrase} that the question describes, not what the '
                    'question asks. Find in the blocks what the question asks about {name}, and answer with that')


class Answerer:
    def __init__(self, *, search: Callable[[str], SearchResult], llm: Any, verifier: Verifier,
                 config: AnswerConfig | None = None, save_trace: Callable[[Trace], None] | None = None,
                 verification: VerificationConfig | None = None,
                 lookup: Callable[[str], SearchResult] | None = None) -> None:
        self.search = search
        # a search of a name for `answer.linked_documents`, outside the turn's recorded searches: a
        # name's likeness to the document it titles says nothing about how well the sources answer
        self.lookup = lookup
        self.llm = llm
        self.verifier = verifier
        self.config = config or AnswerConfig()
        self.verification = verification or VerificationConfig()
        self.save_trace = save_trace
        self.system_prompt = load_prompt("verifiable_answer_system")
        self.user_prompt = load_prompt("verifiable_answer_user")

    # ------------------------------------------------------------------ helpers
    def _cosine_floor(self, question: str) -> float:
        return self.config.min_evidence_cosine_zh if is_chinese(question) else self.config.min_evidence_cosine

    def _evidence_ok(self, result: SearchResult) -> bool:
        if not result.hits or result.evidence_score is None:
            return bool(result.hits) and result.evidence_score is None  # bm25-only: no calibrated score
        if (result.evidence_source or "").startswith("reranker"):
            # A reranker's score alone does not gate: the embedded LLM rater gives unanswerable
            # questions the same 0.9 as answerable ones (docs/benchmarks.md, "Reranker refusal
            # floor"), so the calibrated cosine floor still applies to the best visible chunk.
            return result.evidence_score >= self.config.min_evidence_rerank and (
                result.best_cosine is None or result.best_cosine >= self._cosine_floor(result.query))
        return result.evidence_score >= self._cosine_floor(result.query)

    def follow_up(self, query: str, first: SearchResult | None = None) -> SearchResult:
        """`query`'s search (`first`, or a new one) with the follow-up hop's hits merged in, as
        `answer.hop_merge` says (retrieval/hops.py): R1's second search and R3's look-ups alike."""
        return with_follow_up(self.search, query, first if first is not None else self.search(query),
                              merge=self.config.hop_merge)

    def evidence_first(self, question: str) -> bool:
        """Whether this question is answered quotes first (`answer.evidence_first`, per language)."""
        return language_of(question) in self.config.evidence_first

    def rewrites_rejected(self, question: str) -> bool:
        """Whether a draft the verifier rejects whole is written once more (`answer.rewrite_rejected`)."""
        return language_of(question) in self.config.rewrite_rejected

    def system_message(self, evidence_first: bool = False) -> str:
        return self.system_prompt.render(max_sentences=self.config.max_sentences, evidence_first=evidence_first)

    @staticmethod
    def draft_schema(evidence_first: bool) -> type[DraftAnswer] | type[EvidenceFirstDraft]:
        """The reply the model is asked for: quotes after the answer, or before it."""
        return EvidenceFirstDraft if evidence_first else DraftAnswer

    def prompt_prefixes(self) -> dict[str, tuple[str, type[BaseModel]]]:
        """The answer call's instructions and reply schema, per kind of question ("answer" for
        English, "answer_zh" for Chinese where it differs): the same for every question of that
        kind, so with the schema's instruction added (`chat_json`) they are the prompt prefix its
        calls share."""
        out = {}
        for name, lang in (("answer", "en"), ("answer_zh", "zh")):
            first = lang in self.config.evidence_first
            prefix = (self.system_message(first), self.draft_schema(first))
            if prefix not in out.values():
                out[name] = prefix
        return out

    def _messages(self, question: str, blocks: list[ContextBlock], retry_reason: str | None,
                  facts: list[dict[str, str]] | None, evidence_first: bool) -> list[Any]:
        from cograg.models.llm import ChatMessage

        view = [{"citation_id": b.citation_id, "source_name": Path(b.source).name, "text": b.text} for b in blocks]
        return [ChatMessage(role="system", content=self.system_message(evidence_first)),
                ChatMessage(role="user", content=self.user_prompt.render(facts=facts or [], blocks=view,
                                                                         question=question, retry_reason=retry_reason))]

    def _finish(self, trace: Trace, resp: AnswerResponse, save: bool = True) -> AnswerResponse:
        if not save:  # a step of a larger turn: the caller owns the trace and its outcome
            return resp
        record_outcome(trace, resp)
        if self.save_trace:
            self.save_trace(trace)
        return resp

    # ------------------------------------------------------------------ main
    def check_question(self, question: str) -> str:
        """The stripped question, or QuestionError for an empty or oversized one, or one with no word."""
        return checked_question(question, self.config.max_question_chars)

    def record_prompt_versions(self, trace: Trace) -> None:
        for p in (self.system_prompt, self.user_prompt):
            trace.prompt_versions[p.name] = p.version
        for attr in ("prompt", "batch_prompt"):
            judge_prompt = getattr(self.verifier.judge, attr, None)
            if judge_prompt is not None:
                trace.prompt_versions[judge_prompt.name] = judge_prompt.version

    def answer(self, question: str, *, has_context: bool = False, trace: Trace | None = None,
               result: SearchResult | None = None, facts: list[dict[str, str]] | None = None,
               evidence_gate: bool = True) -> AnswerResponse:
        """One verified answer. Alone it owns (creates and saves) its trace; as a step of an
        orchestrated turn it writes into the caller's `trace` and leaves saving to the caller.
        `result` replaces the search (evidence chosen upstream, e.g. graded documents or a task's
        inputs), `facts` are established facts shown to the model, and `evidence_gate=False` skips
        the refusal threshold when upstream already judged the evidence."""
        q = self.check_question(question)
        owns_trace = trace is None
        if trace is None:
            trace = Trace(question=q, route="DOC_GROUNDED")
            trace.event("USER_INPUT_RECEIVED")
        self.record_prompt_versions(trace)
        hidden: set[str] = set()  # chunks whose text the policy keeps from the user

        def finish(tr: Trace, resp: AnswerResponse) -> AnswerResponse:
            resp.citations = withhold_quotes(resp.citations, hidden)
            return self._finish(tr, resp, save=owns_trace)

        clarify = needs_clarification(q, has_context)
        if clarify:
            trace.event("REQUESTING_CLARIFICATION", question=clarify)
            return finish(trace, AnswerResponse(
                answer=clarify, fallback=True, confidence=0.0, grounded=False, route="CLARIFY",
                trace_id=trace.trace_id, clarification=clarify, notes=["ambiguous reference"]))

        preset = result is not None
        if result is None:
            result = self.search(q)
            # the refusal gate reads the question's own search: the hop only adds passages, so a
            # question the gate refuses below makes no second search
            if self.config.follow_up_hop and (not evidence_gate or self._evidence_ok(result)):
                result = self.follow_up(q, result)
                if self.lookup is not None:
                    result, links = linked_context(result, q, self.lookup, mode=self.config.linked_documents)
                    if links:
                        trace.event("DOCUMENTS_LINKED", links=links)
        hidden.update(result.hidden_chunk_ids())
        trace.retrieved += [{"chunk_id": h.chunk_id, "doc_id": h.doc_id, "score": round(h.score, 5),
                             "retrievers": {k: v.model_dump() for k, v in h.retrievers.items()}} for h in result.hits
                            if not any(r["chunk_id"] == h.chunk_id for r in trace.retrieved)]
        trace.event("EVIDENCE_SELECTED" if preset else "RETRIEVED", hits=len(result.hits),
                    evidence=result.evidence_score, evidence_source=result.evidence_source)
        if not result.hits or (evidence_gate and not self._evidence_ok(result)):
            why = f"insufficient evidence: best score {shown_score(result.evidence_score)} ({result.evidence_source})"
            if not result.hits and result.notes:  # why the search found nothing: an empty store, no words
                why += "; " + "; ".join(result.notes)
            return finish(trace, refusal(q, trace, result, why))

        pack = pack_context(result.hits[:self.config.retrieve_hits], self.config.context_budget_tokens,
                            order=self.config.pack_order)
        clean_blocks, flags = redacted_blocks(pack.blocks)
        trace.injection_flags += [{"block": b.citation_id, "chunk_ids": b.chunk_ids, **f.model_dump()}
                                  for b, f in flags]
        flagged = [f.text for _, f in flags]
        trace.context_blocks = [{"id": b.citation_id, "chunk_ids": b.chunk_ids, "source": b.source,
                                 "tokens": b.token_count} for b in clean_blocks]
        if flagged:
            trace.event("INJECTION_FLAGGED", spans=len(flagged))

        llm = RecordingLLM(self.llm, trace)
        removed = RemovedCounts()
        evidence_first = self.evidence_first(q)
        drafted = self._drafts(q, clean_blocks, facts, llm, trace, removed, hidden,
                               evidence_first=evidence_first, attempts=2)
        if isinstance(drafted, str):
            return finish(trace, refusal(q, trace, result, drafted, evidence=closest_evidence(clean_blocks, q)))
        validated = drafted
        if validated.fallback or not validated.citations:
            why = "the model found the evidence insufficient" if validated.fallback else "no valid citation after one regeneration"
            return finish(trace, refusal(q, trace, result, why, evidence=closest_evidence(clean_blocks, q)))

        verification, kept = self._verified(q, validated, clean_blocks, flagged, trace, removed, hidden)
        if not kept and not removed.injection_sentences and self.rewrites_rejected(q):
            # C3 "removed or rewritten": no sentence survived the verifier, so the model writes the
            # answer once more, in the same form, told what was rejected; the new draft passes the
            # same contract and verifier, and failing either the turn is refused as before. Written
            # quotes first instead, it gained one calibration question and one wrong answer; in the
            # same form, two and none (docs/benchmarks.md, "A rejected answer written again")
            rejected = " ".join(strip_markers(c.sentence) for c in verification.claims)[:REJECTED_CHARS]
            trace.event("REWRITE_REQUESTED", rejected=len(verification.claims))
            redrafted = self._redraft(q, q, REWRITE_REASON.format(rejected=rejected), clean_blocks, facts, llm,
                                      trace, removed, hidden, flagged, evidence_first)
            if redrafted is not None:
                validated, verification, kept = redrafted
        described = (described_entity(q, kept, validated.citations, clean_blocks)
                     if kept and self.config.described_entity_check and not is_chinese(q) else None)
        if described is not None:
            # the answer names the entity the question describes (answer/described_entity.py): the
            # model writes it once more, asked the question with that entity named in it; the new
            # draft is the answer if its sentences verify and it names something else. (A third
            # draft without the entity's own passage was tried on the calibration split: the model
            # named the entity again.)
            trace.event("DESCRIBED_ENTITY_NAMED", **described.model_dump())
            redrafted = self._redraft(q, described.named_in(q), DESCRIBED_REASON.format(
                name=described.entity, phrase=described.phrase), clean_blocks, facts, llm, trace, removed, hidden,
                flagged, evidence_first)
            if (redrafted is None or not redrafted[2]
                    or described_entity(q, redrafted[2], redrafted[0].citations, clean_blocks) is not None):
                return finish(trace, refusal(q, trace, result, f"the answer names {described.entity}, the "
                                             f"{described.phrase} the question describes, not what it asks",
                                             evidence=closest_evidence(clean_blocks, q)))
            validated, verification, kept = redrafted
        # sentences the post-check removed were verified, but obeyed a document: they neither count
        # for nor against what is left (counting them against it let an attack refuse a good answer)
        supported_ratio = len(kept) / max(1, verification.total - removed.injection_sentences)
        if kept and expects_number(q) and not any(has_number(strip_markers(k)) for k in kept):
            resp = refusal(q, trace, result, "the verified sentences do not contain the number or date "
                           "the question asks for", evidence=validated.citations)
            resp.claims, resp.removed = verification.claims, removed
            return finish(trace, resp)
        if not kept or supported_ratio < self.verification.min_supported_ratio:
            resp = refusal(q, trace, result, f"only {len(kept)} of {verification.total} sentences verified",
                           evidence=validated.citations)
            resp.claims, resp.removed = verification.claims, removed
            return finish(trace, resp)

        kept = distinct_sentences(kept)
        if self.config.full_names and not is_chinese(q):
            kept, written = full_names(kept, cited_block_texts(kept, validated.citations, clean_blocks))
            for w in written:  # after the verdicts: the longer name is the cited blocks' own text
                trace.event("NAME_WRITTEN_IN_FULL", **w.model_dump())
        answer = " ".join(kept) if not is_chinese(q) else "".join(kept)
        used = {k for s in kept for k in re.findall(r"\[(\d+)\]", s)}
        citations = [c for c in validated.citations if c.id in used]
        strength = 1.0 if result.evidence_score is None else (
            result.evidence_score if (result.evidence_source or "").startswith("reranker")
            else max(0.0, min(1.0, (result.evidence_score - self._cosine_floor(q))
                                / max(1e-6, 1.0 - self._cosine_floor(q)))))
        resp = AnswerResponse(answer=answer, citations=citations, fallback=False,
                              confidence=round(supported_ratio * strength, 3), grounded=True, route="DOC_GROUNDED",
                              trace_id=trace.trace_id, claims=verification.claims, removed=removed,
                              evidence_score=result.evidence_score)
        return finish(trace, resp)

    def _redraft(self, q: str, asked: str, reason: str, blocks: list[ContextBlock],
                 facts: list[dict[str, str]] | None, llm: Any, trace: Trace, removed: RemovedCounts,
                 hidden: set[str], flagged: list[str], evidence_first: bool
                 ) -> tuple[ValidatedAnswer, VerificationResult, list[str]] | None:
        """The model writes the answer once more, asked `asked` and told `reason`; the new draft
        passes the same contract and the verifier judges it against `q`, its verdicts following the
        earlier ones in the trace. (draft, verification, verified sentences), or None when the
        model gave no draft that cites a block."""
        removed.rewrites += 1
        drafted = self._drafts(asked, blocks, facts, llm, trace, removed, hidden, evidence_first=evidence_first,
                               attempts=1, first_number=1 + removed.rewrites + removed.regenerations,
                               retry_reason=reason)
        if isinstance(drafted, str) or drafted.fallback or not drafted.citations:
            return None
        earlier = trace.verdicts
        verification, kept = self._verified(q, drafted, blocks, flagged, trace, removed, hidden)
        trace.verdicts = earlier + trace.verdicts  # every draft's verdicts, in order
        return drafted, verification, kept

    def _drafts(self, q: str, blocks: list[ContextBlock], facts: list[dict[str, str]] | None, llm: Any,
                trace: Trace, removed: RemovedCounts, hidden: set[str], *, evidence_first: bool, attempts: int,
                first_number: int = 1, retry_reason: str | None = None) -> ValidatedAnswer | str:
        """The model's draft under the contract (C2), regenerated while attempts remain if it is not
        JSON for the contract or cites no valid block; the last draft, or why the model failed."""
        schema = self.draft_schema(evidence_first)
        # the grammar offers the blocks' own text only: never the redaction placeholder (redaction.py)
        enforced = verbatim_draft_schema(quotable_blocks(blocks), schema) if self.config.verbatim_quotes else None
        validated: ValidatedAnswer | None = None
        for attempt in range(attempts):
            number = first_number + attempt
            try:
                reply, _ = llm.chat_json(self._messages(q, blocks, retry_reason, facts, evidence_first), schema,
                                         max_tokens=self.config.max_answer_tokens, timeout_s=self.config.llm_timeout_s,
                                         enforced_schema=enforced)
                draft = reply.draft() if isinstance(reply, EvidenceFirstDraft) else reply
            except (ModelError, TimeoutError, OSError) as exc:  # OSError: a plugged-in backend's connection
                trace.event("MODEL_ERROR", error=f"{type(exc).__name__}: {exc}"[:300])
                # only an answer that did not fit the contract is asked for again: a timeout or a
                # lost connection would spend the time again on the same failure
                if attempt + 1 < attempts and isinstance(exc, LLMOutputError):
                    removed.regenerations += 1
                    retry_reason = "it was not valid JSON for the contract"
                    continue
                return f"{MODEL_FAILED}: {type(exc).__name__}"
            validated, over = within_sentence_budget(validate_draft(draft, blocks, question=q),
                                                     self.config.max_sentences)
            if over:  # cut before the verifier: it judges no more sentences than may be delivered
                removed.over_limit_sentences += over
                trace.event("SENTENCES_OVER_LIMIT", attempt=number, kept=self.config.max_sentences, dropped=over)
            for field in ("unmatched_quotes", "repaired_quotes", "markers_without_citation", "citations_without_marker",
                          "markers_inserted", "dropped_citations", "repointed_citations", "completed_citations"):
                setattr(removed, field, getattr(removed, field) + getattr(validated.issues, field))
            for repair in validated.quote_repairs:  # what was quoted and what stands in its place (C2)
                shown = repair.model_dump() if repair.chunk_id not in hidden else \
                    repair.model_dump(exclude={"quote", "repaired"})
                trace.event("QUOTE_REPAIRED", attempt=number, **shown)
            removed.hallucinated_ids += validated.issues.hallucinated_ids
            # the model's own draft, kept in the trace but never in an event (events are streamed, and a
            # draft is unverified); its text and cited block ids, not its quotes (a quote of a
            # snippet-hidden chunk must not reach the trace), so a refused turn shows what was rejected.
            # `text` is a source-text key: the API empties it where snippets are hidden
            trace.drafts.append({"attempt": number, "text": draft.answer[:DRAFT_TRACE_CHARS],
                                 "cited": [c.id for c in draft.citations], "fallback": validated.fallback,
                                 "issues": {k: v for k, v in validated.issues.model_dump().items() if v}})
            trace.event("DRAFT_READY", attempt=number, citations=len(validated.citations),
                        fallback=validated.fallback, hallucinated=validated.issues.hallucinated_ids)
            if validated.fallback or validated.citations:
                break
            if attempt + 1 < attempts:
                removed.regenerations += 1
                # the generic message, measured: naming the block whose quote was not its text made
                # the 1.5B model cut its answer to a fragment with another wrong quote (the Chinese
                # end-to-end question, refused), and changed no eval-split outcome (docs/benchmarks.md)
                retry_reason = ("it states facts without citing any valid block" if not validated.issues.hallucinated_ids
                                else f"it cited blocks that do not exist ({', '.join(validated.issues.hallucinated_ids)})")
        assert validated is not None
        return validated

    def _verified(self, q: str, validated: ValidatedAnswer, blocks: list[ContextBlock], flagged: list[str],
                  trace: Trace, removed: RemovedCounts, hidden: set[str]) -> tuple[VerificationResult, list[str]]:
        """The verifier's verdicts on a validated draft (C3) and the sentences that survive them and
        the post-check for obeyed injections (C5); what is removed is counted in `removed`."""
        evidence_by_id = {c.id: self._block_of(c, blocks).text for c in validated.citations}
        # C5 post-check: a supported sentence may still be an obeyed injection
        allowed = q + "\n" + "\n".join(b.text for b in blocks)
        obeyed: dict[int, str | None] = {}  # post-check result per kept sentence, computed once

        def stream_verified(index: int, claim: ClaimCheck) -> None:
            # published as soon as the sentence is verified and passed the post-check; the final
            # answer may still be a refusal (too few sentences verified), which ANSWER_READY says
            if not claim.kept:
                return
            obeyed[index] = obeyed_injection(claim.sentence, flagged, allowed, question=q, evidence=evidence_by_id)
            if not obeyed[index]:
                trace.event("SENTENCE_VERIFIED", index=index, sentence=claim.sentence,
                            citations=[c.model_dump() for c in withhold_quotes(validated.citations, hidden)
                                       if c.id in claim.citation_ids])

        # the judge's own model calls go into this trace too (it may be a different model)
        verification = recording_verifier(self.verifier, trace).verify(
            validated.answer, validated.citations, evidence_by_id, question=q, on_verified=stream_verified,
            context="\n".join(f"{b.label}\n{b.text}" for b in blocks))
        trace.verdicts = [c.model_dump() for c in verification.claims]
        trace.event("VERIFIED", supported=verification.supported, total=verification.total)
        kept: list[str] = []
        for index, claim in enumerate(verification.claims):
            if not claim.kept:
                removed.unsupported_sentences += 1
                continue
            why = obeyed[index]
            if why:
                claim.kept = False
                claim.reason = f"removed: {why}"
                removed.injection_sentences += 1
                continue
            kept.append(claim.sentence)
        return verification, kept

    @staticmethod
    def _block_of(c: Citation, blocks: list[ContextBlock]) -> ContextBlock:
        block = block_holding(c.chunk_id, blocks)
        if block is None:
            raise AssertionError("validated citation outside the context")
        return block
