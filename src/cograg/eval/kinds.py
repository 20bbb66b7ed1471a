"""The registry of eval kinds behind `cograg eval KIND` and `cograg eval all` (SPEC H).

An eval kind is a function `(params, ctx) -> EvalReport`: `params` are the command's arguments
(or a suite entry's), `ctx` what every eval shares (settings, split, limit, progress, and how to
open an engine or build a judge). The command line and the suite run the same function, so a
figure from `cograg eval all` is the figure of the single command.

This package sits below the engine, so it never imports it: `ctx.open_engine(store_dir)` is
built by the caller's `engine_factory` (the CLI opens a real Engine; tests inject scripted models).

To add a kind (e.g. `injection`): write `run_injection(params, ctx) -> EvalReport` in its own
module under cograg/eval/, decorate it with `@register("injection", "...")`, and import that module
in `load_builtin_kinds` below; add its command to cograg/cli_eval.py like the others.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cograg.config import Settings
from cograg.errors import CogragError
from cograg.eval.report import EvalReport
from cograg.eval.splits import SPLIT_RULE, select


class NullProgress:
    def on_ingest(self, event: Any) -> None:
        return None

    def on_query(self, what: str, done: int, total: int) -> None:
        return None


@dataclass
class EvalContext:
    settings: Settings
    # (settings with the store set, **parts replacing built ones, e.g. llm=) -> an Engine, used as a context manager
    engine_factory: Callable[..., Any]
    split: str = "evaluation"
    limit: int | None = None
    progress: Any = field(default_factory=NullProgress)
    eval_root: Path | None = None  # where eval stores live; default <store>/eval
    judge_factory: Callable[[str, Any], Any] | None = None  # (spec, engine or None) -> ClaimJudge

    def open_engine(self, store: Path) -> Any:
        return self.engine_factory(self.settings.model_copy(update={"store": store}))

    def store_for(self, name: str) -> Path:
        return (self.eval_root or self.settings.store / "eval") / name

    def judge(self, spec: str, engine: Any = None) -> Any:
        return (self.judge_factory or build_judge)(spec, engine, self.settings)

    def limited(self, items: list[Any]) -> list[Any]:
        return items[: self.limit] if self.limit else items


Runner = Callable[[dict[str, Any], EvalContext], EvalReport]


@dataclass(frozen=True)
class EvalKind:
    name: str
    help: str
    run: Runner


EVAL_KINDS: dict[str, EvalKind] = {}


def register(name: str, help: str) -> Callable[[Runner], Runner]:
    def add(fn: Runner) -> Runner:
        EVAL_KINDS[name] = EvalKind(name, help, fn)
        return fn
    return add


def get_kind(name: str) -> EvalKind:
    load_builtin_kinds()
    if name not in EVAL_KINDS:
        raise CogragError(f"unknown eval kind {name!r}: use {', '.join(sorted(EVAL_KINDS))}")
    return EVAL_KINDS[name]


def load_builtin_kinds() -> None:
    """Import the modules that register kinds.

    Registration point for further kinds: add one import line per module here, e.g.
    `from cograg.eval import injection  # noqa: F401` for a module whose `run_injection` is
    decorated with `@register("injection", "...")`; then `cograg eval all` suites can name
    `kind: injection`, and its command goes into cograg/cli_eval.py like `eval routing`."""
    from cograg.eval import kinds_builtin, kinds_injection  # noqa: F401


def build_judge(spec: str, engine: Any, settings: Settings) -> Any:
    """A claim judge from a spec: `lexical`, `nli:DIR`, `llm` (the engine's or the settings' model)
    or `llm:MODEL` (any model spec: `llm:default`, `llm:fast`, `llm:gguf:PATH`, `llm:openai:URL`)."""
    from cograg.models import judge as judges

    v = settings.verification
    if spec == "lexical":
        return judges.LexicalJudge()
    if spec.startswith("nli:"):
        return judges.NLIJudge(spec[4:])
    if spec == "llm" or spec.startswith("llm:"):
        from cograg.models.llm import get_llm

        model = spec[4:] or settings.models.llm
        same_model = engine is not None and model == engine.settings.models.llm
        llm = engine.components.llm.get() if same_model else get_llm(model, cache_dir=settings.model_cache_dir)
        return judges.LLMJudge(llm, max_tokens=v.judge_max_tokens, timeout_s=v.judge_timeout_s,
                               reasons=v.judge_reasons)
    raise CogragError(f"unknown judge {spec!r}: use lexical, nli:DIR, llm or llm:MODEL")


def report_for(kind: str, params: dict[str, Any], ctx: EvalContext, **fields: Any) -> EvalReport:
    rule = SPLIT_RULE if ctx.split != "all" else "every item"
    return EvalReport(kind=kind, name=str(params.get("name", "")), split=ctx.split, split_rule=rule, **fields)


def data_dir() -> Path:
    """The shared development data: `$COGRAG_EVAL_DATA`, else `../shared/data` from the working directory."""
    return Path(os.environ.get("COGRAG_EVAL_DATA", "../shared/data"))


__all__ = ["EVAL_KINDS", "EvalContext", "EvalKind", "build_judge", "data_dir", "get_kind", "register",
           "report_for", "select"]
