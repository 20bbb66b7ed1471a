"""`get_llm`: the chat model for a spec string, one instance per (spec, cache dir) per process.

| spec | class | model |
|---|---|---|
| `default` (None) | `LlamaCppLLM` | embedded Qwen2.5-Coder-1.5B-Instruct Q4_K_M (`model_files`) |
| `fast` | `LlamaCppLLM` | embedded Qwen2.5-Coder-0.5B-Instruct Q4_K_M |
| `gguf:/path/model.gguf[#sha256=HEX]` | `LlamaCppLLM` | any local GGUF (hash checked if given) |
| `openai:http://host:port/v1[#model]` | `OpenAICompatLLM` | vLLM, Ollama, llama.cpp server, hosted APIs |
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from cograg.models import ModelError
from cograg.models.llm.llama_cpp import LlamaCppLLM
from cograg.models.llm.openai_compat import OpenAICompatLLM
from cograg.models.llm.types import LLM, LLMUnavailable


LLM_SPECS: tuple[str, ...] = (
    "default",
    "fast",
    "gguf:/path/to/model.gguf",
    "gguf:/path/to/model.gguf#sha256=<hex>",
    "openai:http://host:port/v1",
    "openai:http://host:port/v1#model-name",
)

# Env var read by get_llm() for "openai:" specs (never OPENAI_API_KEY: a key meant for one
# provider is not sent to whatever URL a spec names).
OPENAI_KEY_ENV = "COGRAG_LLM_API_KEY"


def _unknown(spec: Any) -> ModelError:
    return ModelError(f"unknown LLM {spec!r}; valid forms: " + ", ".join(LLM_SPECS))


# Set to 0/false/off to keep no prompt-prefix states on disk (see models.llm.prefix_state).
PREFIX_STATE_ENV = "COGRAG_LLM_PREFIX_STATE"
_OFF = ("0", "false", "off", "no")  # what an environment switch accepts for "off"
_ON = ("1", "true", "on", "yes")


def _prefix_state_dir(cache_dir: str) -> Path | None:
    raw = os.environ.get(PREFIX_STATE_ENV, "").strip().lower()
    if raw in _OFF:
        return None
    if raw and raw not in _ON:
        # A misspelt "of" or "disable" would otherwise keep the states the user meant to turn off.
        raise ModelError(f"${PREFIX_STATE_ENV} must be one of {', '.join(_ON + _OFF)}, got {raw[:40]!r}")
    return Path(cache_dir) / "prefix-state"


# Prompt-lookup draft length for the embedded models (see models.llm.lookup_decoding); 0 turns it off.
# 4 measured against plain decoding (docs/benchmarks.md, "Prompt-lookup drafts"): the answer call in
# 0.887x the time, and on the evaluation split (HotpotQA 50, cmrc2018 20) no answer outcome worse.
LOOKUP_ENV = "COGRAG_LLM_LOOKUP"
DEFAULT_LOOKUP_DRAFT = 4


def _lookup_draft() -> int:
    raw = os.environ.get(LOOKUP_ENV, "").strip().lower()
    if not raw:
        return DEFAULT_LOOKUP_DRAFT
    if raw in _OFF:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise ModelError(f"${LOOKUP_ENV} must be a draft length (0 = off), got {raw[:40]!r}") from None
    if not 0 <= value <= 64:
        raise ModelError(f"${LOOKUP_ENV} must be between 0 and 64, got {value}")
    return value


@functools.lru_cache(maxsize=None)
def _cached_llm(spec: str, cache_dir: str) -> LLM:
    from cograg.models.model_files import PROFILES, ensure_model, verify_file

    if spec in PROFILES:
        path = ensure_model(spec, Path(cache_dir))
        return LlamaCppLLM(path, name=f"llama.cpp:{path.stem}", prefix_state_dir=_prefix_state_dir(cache_dir),
                           lookup_draft=_lookup_draft())
    if spec.startswith("gguf:"):
        path, frag = _gguf_parts(spec)
        if frag:
            key, _, value = frag.partition("=")
            if key.strip().lower() != "sha256" or not value.strip():
                raise ModelError(f"unknown fragment {frag!r} in {spec!r}; use #sha256=<hex>")
            verify_file(path, value.strip())
        elif not path.is_file():
            raise LLMUnavailable(f"model file not found: {path}")
        return LlamaCppLLM(path, prefix_state_dir=_prefix_state_dir(cache_dir), lookup_draft=_lookup_draft())
    if spec.startswith("openai:"):
        url, _, model = spec[len("openai:") :].partition("#")
        return OpenAICompatLLM(url.strip(), model.strip() or None, api_key=os.environ.get(OPENAI_KEY_ENV))
    raise _unknown(spec)


def get_llm(spec: str | None = None, *, cache_dir: str | os.PathLike[str]) -> LLM:
    """The LLM for a spec string (see LLM_SPECS); None means "default".

    `cache_dir` is where embedded models are assembled (the store's model cache). One instance
    per (spec, cache_dir) per process, so a model is loaded once. For "openai:" specs the API
    key, if any, is read from $COGRAG_LLM_API_KEY.
    """
    cache = str(Path(cache_dir).expanduser().resolve())
    return _cached_llm(_spec_key(spec), cache)


def check_llm_spec(spec: str | None) -> None:
    """ModelError where `spec` names no LLM this process could load (an unknown profile, a
    "gguf:" file that is not there, an "openai:" without a URL), found without loading one: a
    server checks its model at start, not at its first question."""
    from cograg.models.model_files import PROFILES

    key = _spec_key(spec)
    if key in PROFILES or key.startswith("gguf:"):
        _prefix_state_dir("")  # the embedded models' environment switches, checked with the spec
        _lookup_draft()
    if key in PROFILES:
        return
    if key.startswith("gguf:"):
        path, _ = _gguf_parts(key, spec)
        if not path.is_file():
            raise LLMUnavailable(f"model file not found: {path}")
        return
    if key.startswith("openai:"):
        if not key[len("openai:"):].partition("#")[0].strip():
            raise _unknown(spec)
        return
    raise _unknown(spec)


def _gguf_parts(key: str, given: str | None = None) -> tuple[Path, str]:
    """(model file, "#" fragment) of a "gguf:PATH[#sha256=HEX]" spec key; without a path, a
    ModelError quoting the spec as `given`."""
    path_text, _, frag = key[len("gguf:"):].partition("#")
    if not path_text.strip():
        raise _unknown(key if given is None else given)
    return Path(path_text.strip()).expanduser(), frag


def _spec_key(spec: str | None) -> str:
    """`spec` as the cache of loaded models keys it: trimmed, the scheme and a profile lower-cased."""
    if spec is None:
        spec = "default"
    if not isinstance(spec, str):
        raise ModelError(f"LLM spec must be a string, got {type(spec).__name__}")
    key = spec.strip()
    if not key:
        raise _unknown(spec)
    head, sep, rest = key.partition(":")
    if sep and head.lower() in ("gguf", "openai"):
        return f"{head.lower()}:{rest.strip()}"
    return key.lower()


get_llm.cache_clear = _cached_llm.cache_clear  # type: ignore[attr-defined]
