"""`python -m llama_cpp.server` with cograg's grammar-last greedy sampler (scale-out, SPEC I).

    python -m cograg.models.llm.llama_server --model MODEL.gguf --port 8080 [any llama_cpp.server option]

Same options, same OpenAI-compatible API as llama-cpp-python's server. The one difference: a greedy
request bound to a JSON schema (`temperature: 0` with `response_format`, which is how cograg's
`OpenAICompatLLM` asks for every verdict, grade, route and plan) is sampled by
`grammar_sampling.GrammarLastGreedySampler`, which asks the grammar about the argmax token first
instead of masking all ~152k vocabulary entries on every token. With the stock sampler that mask
cost 0.25–1.4 s per generated token on a loaded 2-core machine (docs/benchmarks.md).

Such requests are sampled without repetition penalties, as the embedded backend samples them: the
server's default `repeat_penalty` of 1.1 would otherwise apply, and a JSON answer repeats quotes,
braces and keys by construction. Requests that are not greedy or carry no grammar are untouched.
Enum and const strings in a schema become grammar literals as the embedded backend writes them
(`json_grammar`): UTF-8 as is, escaped once.
"""

from __future__ import annotations

from typing import Any

from cograg.models.llm import grammar_sampling
from cograg.models.llm.json_grammar import patch_constant_literals


def patch_llama_class() -> None:
    """Make every `llama_cpp.Llama` the server creates use the grammar-last greedy sampler."""
    import llama_cpp

    base = llama_cpp.Llama
    if getattr(base, "_cograg_grammar_last", False):
        return
    patch_constant_literals()  # enum and const strings as the model writes them (json_grammar)

    class GrammarLastLlama(base):  # type: ignore[misc,valid-type]
        _cograg_grammar_last = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            grammar_sampling.install(self, ignore_repeat_penalty=True)

    GrammarLastLlama.__name__ = GrammarLastLlama.__qualname__ = "Llama"
    # llama_cpp.server.model looks the class up on the module at load time
    llama_cpp.Llama = GrammarLastLlama  # type: ignore[misc]


def main() -> None:
    patch_llama_class()
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
