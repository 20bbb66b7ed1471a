"""Prompt-lookup drafts for llama-cpp-python, verified without computing every prompt token's logits.

An answer copies from its context: each quote is the context's own text (the grammar enforces it)
and the sentences often reuse its wording. Prompt-lookup decoding proposes the tokens that followed
the text's last few tokens where they occurred before (in the prompt or the output so far); the
model checks all of them in one batched decode and keeps the prefix it would have generated anyway.
On two cores a batch of five tokens costs less than five one-token decodes but more than one, so
drafts pay only where enough of them are kept (the benchmark below: four-token drafts do, eight do
not).

llama-cpp-python's own draft path (`Llama(draft_model=...)`) turns on `logits_all`: llama.cpp then
computes the output layer for every prompt token and llama-cpp-python copies each 151,936-wide row
into numpy, which on a 1,000-token prompt costs more than the drafts save (measured:
docs/benchmarks.md, "Prompt-lookup decoding"). `install` keeps `logits_all` off and asks llama.cpp
for logits at every position of small batches only — the ones generation evaluates (the last token
and its drafts) — which is all the verification reads (`Llama.sample` indexes the last batch's
outputs from its end).

With greedy decoding the kept tokens are the tokens plain decoding picks, up to the floating-point
difference between a batched and a one-token decode: near-ties can go the other way, so an answer
may change. On by default with 4-token drafts (`COGRAG_LLM_LOOKUP=N` sets the length, 0 turns
them off): they took 0.89x the answer call's time, 8-token drafts 1.25x, and on the evaluation
split no outcome was worse overall (HotpotQA 50: 2 answers gained, 1 lost; cmrc2018 20: the same;
docs/benchmarks.md, "Prompt-lookup drafts without every prompt token's logits").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np


class PromptLookupDrafts:
    """Draft tokens for `llama_cpp.Llama.generate`: after the most recent earlier occurrence of the
    text's last `max_ngram` tokens (down to `min_ngram`), the next `max_draft` tokens."""

    def __init__(self, *, max_draft: int = 8, max_ngram: int = 3, min_ngram: int = 2) -> None:
        if max_draft < 1 or not 1 <= min_ngram <= max_ngram:
            raise ValueError("need max_draft >= 1 and 1 <= min_ngram <= max_ngram")
        self.max_draft = max_draft
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.proposed = 0  # draft tokens handed out (what was kept shows in DecodeTimes.generation_calls)

    def __call__(self, input_ids: Any, /, **_: Any) -> np.ndarray:
        ids = np.asarray(input_ids, dtype=np.intc)
        n = ids.shape[0]
        for size in range(min(self.max_ngram, n - 1), self.min_ngram - 1, -1):
            tail = ids[n - size:]
            # windows of ids[:-1] start at most at n-1-size: the tail itself is never its own match,
            # and every match has at least one token after it
            windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], size)
            hits = np.flatnonzero((windows == tail).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + size
                draft = ids[start:start + self.max_draft].copy()
                self.proposed += int(draft.shape[0])
                return draft
        return np.empty(0, dtype=np.intc)


@dataclass
class DecodeTimes:
    """One generation's decode calls, split where llama.cpp's own counters cannot: they count any
    batch of more than one token as prompt, and so would book draft checks as prompt time."""

    prompt_tokens: int = 0  # evaluated before generation starts (the rest was cached)
    prompt_ms: float = 0.0
    generation_tokens: int = 0  # evaluated after it: each generated token, plus the drafts checked
    generation_ms: float = 0.0
    generation_calls: int = 0  # decodes after the prompt: fewer than the tokens generated when drafts are kept
    started: bool = False  # set by generate()'s first decode; `generating()` clears it before one

    def generating(self) -> None:
        """The next decode call is a generation's prompt: calls before it (a prefix state being
        built) count as prompt too."""
        self.started = False

    def reset(self) -> None:
        self.prompt_tokens, self.prompt_ms, self.generation_tokens, self.generation_ms = 0, 0.0, 0, 0.0
        self.generation_calls, self.started = 0, False


def install(llama: Any, drafts: PromptLookupDrafts) -> DecodeTimes:
    """Give `llama` (a `llama_cpp.Llama` built without `draft_model`) prompt-lookup drafts, with
    logits requested at every position of batches no longer than a draft plus its first token.
    Returns the decode times of the current call (`reset()` before it, `generating()` right
    before `create_completion`)."""
    times = DecodeTimes()
    original_eval = llama.eval

    def timed_eval(tokens: Any) -> None:
        start = time.perf_counter()
        original_eval(tokens)
        ms = (time.perf_counter() - start) * 1000
        if times.started:
            times.generation_tokens += len(tokens)
            times.generation_ms += ms
            times.generation_calls += 1
        else:  # generate() evaluates the prompt's uncached part first
            times.prompt_tokens += len(tokens)
            times.prompt_ms += ms
            times.started = True

    llama.eval = timed_eval
    llama_batch = llama._batch
    original = llama_batch.set_batch
    limit = drafts.max_draft + 1

    def set_batch(batch: Any, n_past: int, logits_all: bool) -> None:  # llama-cpp-python passes keywords
        original(batch=batch, n_past=n_past, logits_all=logits_all or len(batch) <= limit)

    llama_batch.set_batch = set_batch
    # set after construction: passing draft_model to Llama() would turn logits_all on
    llama.draft_model = drafts
    return times
