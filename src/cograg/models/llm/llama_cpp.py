"""`LlamaCppLLM`: a GGUF chat model run in-process by llama.cpp (llama-cpp-python), CPU only.

llama-cpp-python is imported when a model is loaded, so the rest of cograg works without it (the
`llm` extra; scripts/install_llm.sh builds it from source).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from cograg.models import ModelError
from cograg.models.compute import COMPUTE_LOCK, fixed_threads, threads_for_next_job
from cograg.models.llm.base import ChatModelBase
from cograg.models.llm.llama_cpp_library import Deadline, import_llama_cpp
from cograg.models.llm import grammar_sampling, lookup_decoding
from cograg.models.llm.prefix_state import PrefixStateFiles, common_prefix_len
from cograg.models.llm.role_states import RoleStates
from cograg.models.llm.types import (
    ChatMessage,
    LLMResponse,
    LLMTimeout,
    LLMUnavailable,
    elapsed_ms,
    generation_order,
)

# Used when a GGUF file carries no chat template.
_CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class _Job:
    """One generation under way: when it started, its prompt tokens, the template's stop strings,
    how many tokens it may generate, and the stopping criteria that enforce its deadline."""

    start: float
    tokens: list[int]
    stop: list[str]
    max_new: int
    criteria: Any
    deadline: Deadline


class LlamaCppLLM(ChatModelBase):
    """A GGUF model run in-process by llama.cpp (llama-cpp-python), CPU only.

    The prompt is built with the chat template stored in the GGUF file. `chat_json` constrains
    sampling with a grammar generated from the pydantic JSON schema, then validates the result.
    Timeouts are enforced between tokens (prompt processing itself cannot be interrupted, so a
    very long prompt, or the first call after loading while the weights are paged in, may overrun
    a tiny timeout by its prompt-eval time). Calls hold the process-wide `COMPUTE_LOCK` (one heavy
    model job at a time); a `stream` holds it until it is exhausted or closed. `n_threads=None`
    means $COGRAG_LLM_THREADS, else the cores free at each call (`threads_for_next_job`).

    llama.cpp keeps the KV cache of the last prompt and re-evaluates only what differs from it, so
    prompts are built with their stable part first. `for_role("judge")` gives a handle on the same
    model and context whose cache the other roles' calls do not overwrite: when the role changes,
    the context's state is swapped (`role_states`), so the answer prompt's instructions and the
    judge's both stay cached, without a second copy of the weights.
    With `prefix_state_dir`, a fresh context restores the state after its system message from
    disk (saved by an earlier process; see `prefix_state`), so a new process skips that prefill.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        *,
        name: str | None = None,
        n_batch: int = 512,
        prefix_state_dir: str | os.PathLike[str] | None = None,
        lookup_draft: int = 0,
    ) -> None:
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise LLMUnavailable(f"model file not found: {path}")
        if not isinstance(n_ctx, int) or n_ctx < 64:
            raise ModelError(f"n_ctx must be an integer >= 64, got {n_ctx!r}")
        llama_cpp = import_llama_cpp()
        self._fixed_threads = n_threads or fixed_threads()
        threads = self._fixed_threads or threads_for_next_job()
        try:
            self._llama = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_batch=min(n_batch, n_ctx),
                n_threads=threads,
                n_threads_batch=threads,
                seed=seed,
                verbose=False,
            )
        except Exception as exc:  # ValueError("Failed to load model from file") and friends
            raise ModelError(f"cannot load the GGUF model {path}: {exc}") from exc
        grammar_sampling.install(self._llama)  # greedy JSON: ask the grammar about the argmax first
        self.lookup_times: lookup_decoding.DecodeTimes | None = None
        if lookup_draft > 0:  # copied text is checked in batches of drafts, not token by token
            drafts = lookup_decoding.PromptLookupDrafts(max_draft=lookup_draft)
            self.lookup_times = lookup_decoding.install(self._llama, drafts)
        self.path = path
        self.n_threads = threads
        self.n_ctx = int(self._llama.n_ctx())
        self.seed = seed
        self.name = name or f"llama.cpp:{path.stem}"
        self._init_args = {"n_ctx": n_ctx, "n_threads": n_threads, "seed": seed, "name": self.name, "n_batch": n_batch,
                           "prefix_state_dir": prefix_state_dir, "lookup_draft": lookup_draft}
        self.prefix_states = (PrefixStateFiles(Path(prefix_state_dir), path, self.n_ctx)
                              if prefix_state_dir is not None else None)
        self.role = "answer"
        self.role_states = RoleStates()
        self._roles: dict[str, LlamaCppLLM] = {}
        self._roles_lock = threading.Lock()
        self._is_sibling = False
        self._grammar_cls = llama_cpp.llama_grammar.LlamaGrammar
        self._formatter = self._make_formatter(llama_cpp)

    def _make_formatter(self, llama_cpp: Any) -> Any:
        llama = self._llama
        template = llama.metadata.get("tokenizer.chat_template") or _CHATML_TEMPLATE
        eos_id = llama.token_eos()
        bos_id = llama.token_bos()

        def text_of(tok: int) -> str:
            if tok < 0:
                return ""
            return llama.detokenize([tok], special=True).decode("utf-8", errors="ignore")

        return llama_cpp.llama_chat_format.Jinja2ChatFormatter(
            template=template,
            eos_token=text_of(eos_id),
            bos_token=text_of(bos_id),
            stop_token_ids=[eos_id] if eos_id >= 0 else None,
        )

    # -- helpers ---------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(self._llama.tokenize(str(text).encode("utf-8"), add_bos=False, special=False))

    def _tokens(self, messages: list[ChatMessage]) -> tuple[list[int], Any]:
        try:
            fmt = self._formatter(messages=[m.model_dump() for m in messages])
        except Exception as exc:
            raise ModelError(f"{self.name}: cannot apply the chat template: {exc}") from exc
        return self._llama.tokenize(fmt.prompt.encode("utf-8"), add_bos=not fmt.added_special, special=True), fmt

    def _system_prefix(self, messages: list[ChatMessage], tokens: list[int]) -> list[int]:
        """The prompt's tokens up to the end of its system message: the part every call of a role shares."""
        if not messages or messages[0].role != "system" or len(messages) < 2:
            return []
        system_only, _ = self._tokens(messages[:1])
        return tokens[: common_prefix_len(system_only, tokens)]

    def _prompt(self, messages: list[ChatMessage], max_tokens: int) -> tuple[list[int], list[str], int]:
        tokens, fmt = self._tokens(messages)
        room = self.n_ctx - len(tokens)
        if room < 1:
            raise ModelError(
                f"{self.name}: the prompt is {len(tokens)} tokens, the context window is {self.n_ctx}"
            )
        stop = fmt.stop if isinstance(fmt.stop, list) else [fmt.stop] if fmt.stop else []
        return tokens, [s for s in stop if s], min(max_tokens, room)

    def for_role(self, role: str) -> LlamaCppLLM:
        """A handle on the same model and context whose calls keep a KV cache of their own (one per
        role; see `role_states`)."""
        if role == self.role:
            return self
        with self._roles_lock:
            if role not in self._roles:
                sibling = copy.copy(self)  # shares the model, the context, the role states, the siblings
                sibling.role = role
                sibling._is_sibling = True
                self._roles[role] = sibling
            return self._roles[role]

    def _acquire(self, deadline: float | None) -> None:
        timeout = -1 if deadline is None else max(0.0, deadline - time.monotonic())
        if not COMPUTE_LOCK.acquire(timeout=timeout):
            raise LLMTimeout(f"{self.name}: the model was busy with another request until the deadline passed")
        if self._fixed_threads is None:
            try:
                self._set_threads(threads_for_next_job())
            except Exception:
                COMPUTE_LOCK.release()
                raise

    def _set_threads(self, n: int) -> None:
        import llama_cpp

        # set on every call: the role handles share one context, so this handle's last value may be stale
        llama_cpp.llama_set_n_threads(self._llama._ctx.ctx, n, n)
        self.n_threads = n

    def _perf_reset(self) -> None:
        import llama_cpp

        if self.lookup_times is not None:
            self.lookup_times.reset()
        with contextlib.suppress(Exception):
            llama_cpp.llama_perf_context_reset(self._llama._ctx.ctx)

    def _perf(self, prompt_tokens: int) -> dict[str, Any]:
        """The last call's timings: prompt tokens evaluated (the rest came from the KV cache),
        milliseconds for the prompt and for generation (llama.cpp's own counters, or with
        prompt-lookup drafts the decode calls' wall times, which book draft checks as generation)."""
        import llama_cpp

        if self.lookup_times is not None:  # llama.cpp's counters would book draft checks as prompt
            t = self.lookup_times
            return {"cached_tokens": max(0, prompt_tokens - t.prompt_tokens), "prompt_eval_ms": round(t.prompt_ms, 1),
                    "eval_ms": round(t.generation_ms, 1), "threads": self.n_threads}
        try:
            p = llama_cpp.llama_perf_context(self._llama._ctx.ctx)
        except Exception:
            return {"threads": self.n_threads}
        return {"cached_tokens": max(0, prompt_tokens - int(p.n_p_eval)), "prompt_eval_ms": round(p.t_p_eval_ms, 1),
                "eval_ms": round(p.t_eval_ms, 1), "threads": self.n_threads}

    def _criteria(self, deadline: float | None) -> tuple[Any, Deadline]:
        import llama_cpp

        # End-of-generation tokens are handled by llama-cpp-python itself; only the deadline here.
        dl = Deadline(deadline)
        return llama_cpp.StoppingCriteriaList([dl]), dl

    @contextlib.contextmanager
    def _generation(self, messages: list[ChatMessage], max_tokens: int, timeout_s: float | None) -> Iterator[_Job]:
        """One generation's setup and teardown: the compute lock held (until the block ends), the
        prompt built, the deadline armed; llama.cpp's own exceptions come out as ModelError."""
        start = time.monotonic()
        deadline = None if timeout_s is None else start + timeout_s
        self._acquire(deadline)
        try:
            tokens, tmpl_stop, max_new = self._prompt(messages, max_tokens)
            criteria, dl = self._criteria(deadline)
            self._perf_reset()
            self.role_states.activate(self._llama, self.role)
            if self.prefix_states is not None and self._llama.n_tokens == 0:
                self.prefix_states.prepare(self._llama, self._system_prefix(messages, tokens))
            try:
                yield _Job(start, tokens, tmpl_stop, max_new, criteria, dl)
            except ModelError:
                raise
            except Exception as exc:
                raise ModelError(f"{self.name}: generation failed: {exc}") from exc
        finally:
            COMPUTE_LOCK.release()

    def _create(self, job: _Job, temperature: float, *, stop: list[str] | None = None, grammar: Any = None,
                stream: bool = False) -> Any:
        if self.lookup_times is not None:
            self.lookup_times.generating()
        return self._llama.create_completion(
            prompt=job.tokens,
            max_tokens=job.max_new,
            temperature=float(temperature),
            repeat_penalty=1.0,
            stop=[*job.stop, *(stop or [])],
            seed=self.seed,
            stopping_criteria=job.criteria,
            grammar=grammar,
            stream=stream,
        )

    def _complete(
        self,
        messages: list[ChatMessage],
        *,
        max_tokens: int,
        temperature: float,
        timeout_s: float | None,
        stop: list[str] | None,
        grammar: Any = None,
    ) -> LLMResponse:
        with self._generation(messages, max_tokens, timeout_s) as job:
            out = self._create(job, temperature, stop=stop, grammar=grammar)
            perf = self._perf(len(job.tokens))
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        text = choice.get("text") or ""
        prompt_tokens = int(usage.get("prompt_tokens", len(job.tokens)))
        completion_tokens = int(usage.get("completion_tokens", 0))
        if job.deadline.hit:
            raise LLMTimeout(
                f"{self.name} did not finish within {timeout_s:g} s "
                f"({prompt_tokens} prompt tokens, {completion_tokens} tokens generated)",
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                partial_text=text,
            )
        return LLMResponse(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            duration_ms=elapsed_ms(job.start),
            model=self.name,
            finish_reason=str(choice.get("finish_reason") or "stop"),
            **perf,
        )

    # -- ChatModelBase hooks -----------------------------------------------------------
    def _chat(self, messages: list[ChatMessage], max_tokens: int, temperature: float, timeout_s: float | None,
              stop: list[str] | None) -> LLMResponse:
        return self._complete(messages, max_tokens=max_tokens, temperature=temperature, timeout_s=timeout_s, stop=stop)

    def _stream(self, messages: list[ChatMessage], max_tokens: int, temperature: float,
                timeout_s: float | None) -> Iterator[str]:
        parts: list[str] = []
        with self._generation(messages, max_tokens, timeout_s) as job:
            chunks: Any = None
            try:
                chunks = self._create(job, temperature, stream=True)
                for chunk in chunks:
                    delta = chunk["choices"][0].get("text") or ""
                    if delta:
                        parts.append(delta)
                        yield delta
            finally:
                if chunks is not None:  # stop llama.cpp's generator before the lock is released
                    with contextlib.suppress(Exception):
                        chunks.close()
            if job.deadline.hit:
                text = "".join(parts)
                raise LLMTimeout(
                    f"{self.name} did not finish streaming within {timeout_s:g} s",
                    prompt_tokens=len(job.tokens),
                    completion_tokens=self.count_tokens(text) if text else 0,
                    partial_text=text,
                )

    def _json_attempt(
        self, messages: list[ChatMessage], schema: type[BaseModel], max_tokens: int, timeout_s: float | None
    ) -> LLMResponse:
        return self._complete(
            messages, max_tokens=max_tokens, temperature=0.0, timeout_s=timeout_s, stop=None,
            grammar=self._grammar(schema),
        )

    @functools.lru_cache(maxsize=64)  # noqa: B019 - one instance per model, bounded
    def _grammar_text(self, schema_json: str, field_order: tuple[str, ...]) -> str:
        from cograg.models.llm.json_grammar import json_schema_to_gbnf

        return json_schema_to_gbnf(schema_json, field_order)

    def _grammar(self, schema: type[BaseModel]) -> Any:
        try:
            # sorted keys: the cache key, and the grammar's field order where the schema sets none
            gbnf = self._grammar_text(json.dumps(schema.model_json_schema(), sort_keys=True),
                                      generation_order(schema))
            return self._grammar_cls.from_string(gbnf, verbose=False)
        except Exception:
            # Schema features the converter does not support: fall back to "any JSON value";
            # the result is still validated against the schema.
            from llama_cpp.llama_grammar import JSON_GBNF

            return self._grammar_cls.from_string(JSON_GBNF, verbose=False)

    def close(self) -> None:
        if self._is_sibling:  # the model and context belong to the handle that loaded them
            return
        self.role_states.forget()
        with contextlib.suppress(Exception):
            self._llama.close()

    def __repr__(self) -> str:
        return f"LlamaCppLLM(name={self.name!r}, path={str(self.path)!r}, n_ctx={self.n_ctx})"
