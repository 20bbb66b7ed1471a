"""Chat LLMs behind one Protocol: messages in, text or schema-checked JSON out (SPEC: LLM layer).

Every backend offers `chat` (text + token counts), `stream` (text deltas), `chat_json` (a validated
pydantic object) and `count_tokens`, with per-call timeouts. Modules, in the order they build on
each other:

- `types`: `ChatMessage`, `LLMResponse`, the `LLM` Protocol and the errors (all `ModelError`).
- `json_output`: the JSON instruction and `parse_json_output` (extract, repair, validate).
- `base`: `ChatModelBase`, the public `chat`/`stream`/`chat_json` (argument checks, message
  coercion, the `chat_json` retry loop) every backend shares, on backend hooks.
- `llama_cpp`: `LlamaCppLLM`, a GGUF model run in-process by llama.cpp.
- `openai_compat`: `OpenAICompatLLM`, any OpenAI-compatible chat endpoint.
- `factory`: `get_llm(spec, cache_dir=...)` and the spec forms (`LLM_SPECS`).

The scripted test double lives in `cograg.testing` (`ScriptedLLM`).
"""

from __future__ import annotations

from cograg.models.llm.factory import LLM_SPECS, OPENAI_KEY_ENV, get_llm
from cograg.models.llm.json_output import (
    json_instruction,
    parse_json_output,
    retry_message,
    with_json_instruction,
)
from cograg.models.llm.llama_cpp import LlamaCppLLM
from cograg.models.llm.openai_compat import OpenAICompatLLM
from cograg.models.llm.types import (
    LLM,
    ChatMessage,
    LLMOutputError,
    LLMRequestRejected,
    LLMResponse,
    LLMTimeout,
    LLMUnavailable,
    Messages,
    coerce_messages,
    simple_token_count,
)

__all__ = [
    "LLM",
    "LLM_SPECS",
    "OPENAI_KEY_ENV",
    "ChatMessage",
    "LLMOutputError",
    "LLMRequestRejected",
    "LLMResponse",
    "LLMTimeout",
    "LLMUnavailable",
    "LlamaCppLLM",
    "Messages",
    "OpenAICompatLLM",
    "coerce_messages",
    "get_llm",
    "json_instruction",
    "parse_json_output",
    "retry_message",
    "simple_token_count",
    "with_json_instruction",
]
