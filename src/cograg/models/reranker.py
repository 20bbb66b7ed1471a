"""Rerankers behind one Protocol (SPEC B4), and the best evidence score.

A reranker scores (query, passage) pairs; higher means more relevant. Scales:

* `CrossEncoderReranker`: the sigmoid of the model's single relevance logit, a probability-like
  value in [0, 1] (comparable across queries, so usable as an abstention threshold).
* `NoReranker` ("none"): no scores at all. `score` returns None, which tells the caller "keep the
  order (and scores) you already have", e.g. the hybrid-retrieval fusion order. `rerank()` turns
  that into the identity ordering with `reranked=False` and `best_score=None`.
* an LLM judge (spec "llm") plugs in later through `register_reranker("llm", factory)`; until
  then asking for it raises ModelError.

Spec strings: "none" (default), "cross-encoder:/path/to/dir", "llm", or "<prefix>[:<arg>]" for a
prefix added with `register_reranker`.
"""

from __future__ import annotations

import functools
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from cograg.models import ModelError
from cograg.models._local import (
    LoadsOnce,
    cap_max_length,
    import_sentence_transformers,
    load_sentence_transformers,
    model_dir,
    string_list,
)


@runtime_checkable
class Reranker(Protocol):
    """Scores passages for one query. Higher = more relevant.

    `score` returns one float per passage, in the order given, or None when the reranker does not
    rerank (NoReranker) and the caller should keep its current order.
    """

    name: str

    def score(self, query: str, passages: list[str]) -> list[float] | None: ...


def _check_inputs(query: str, passages: Sequence[str]) -> list[str]:
    if not isinstance(query, str):
        raise ModelError(f"the query must be a string, not {type(query).__name__}")
    return string_list(passages, "rerankers take a list of passages", "passage")


class NoReranker:
    """The "none" reranker: keeps the incoming order. `score` returns None (no scores)."""

    name = "none"

    def score(self, query: str, passages: list[str]) -> None:
        _check_inputs(query, passages)
        return None

    def __repr__(self) -> str:
        return "NoReranker()"


class CrossEncoderReranker(LoadsOnce):
    """A sentence-transformers CrossEncoder from a local directory (needs the `models` extra).

    The directory must hold a sequence-classification model with one output label (the usual
    MS MARCO / BGE reranker layout: config.json, weights, tokenizer files). Scores are
    sigmoid(logit) in [0, 1]. Pairs are scored in batches of `batch_size`; pairs longer than
    `max_length` tokens (default: what the model declares, at most its position limit) are
    truncated. The directory is checked at construction; torch and the
    weights are loaded on first use, once, under a lock.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        batch_size: int = 32,
        device: str | None = None,
        max_length: int | None = None,
    ) -> None:
        self.path = model_dir(path, "cross-encoder model")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ModelError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.batch_size = batch_size
        self.device = device
        self.max_length = max_length
        self.name = f"cross-encoder:{self.path}"
        self._model: Any = None
        self._sigmoid: Any = None
        self._lock = threading.Lock()

    def _build(self) -> Any:
        import_sentence_transformers()  # sets the offline flags before torch is imported
        import torch

        sigmoid = torch.nn.Sigmoid()
        model = load_sentence_transformers("CrossEncoder", self.path, "cross-encoder", device=self.device,
                                           activation_fn=sigmoid)
        labels = getattr(model, "num_labels", 1)
        if labels != 1:
            raise ModelError(
                f"the cross-encoder in {self.path} has {labels} output labels; a reranker "
                "needs exactly one relevance score"
            )
        cap_max_length(model, self.max_length)
        self._sigmoid = sigmoid
        return model

    def score(self, query: str, passages: list[str]) -> list[float]:
        items = _check_inputs(query, passages)
        if not items:
            return []
        model = self._load()
        try:
            raw = model.predict(
                [(query, p) for p in items],
                batch_size=self.batch_size,
                activation_fn=self._sigmoid,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise ModelError(f"cross-encoder scoring failed: {exc}") from exc
        scores = np.asarray(raw, dtype=np.float64).reshape(-1)
        if scores.shape[0] != len(items) or not np.isfinite(scores).all():
            raise ModelError(f"the cross-encoder returned unusable scores: {scores[:5]!r}")
        return [float(s) for s in scores]

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(path={str(self.path)!r})"


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Ranking:
    """The outcome of reranking one candidate list.

    `order`: indices into the given passages, best first (stable: ties keep the incoming order;
    the identity when nothing was reranked). `scores`: one per passage in the *given* order, or
    None for "no reranking". `best_score`: the best evidence score, max(scores), or None.
    """

    order: list[int]
    scores: list[float] | None
    best_score: float | None
    reranked: bool


def best_evidence_score(scores: Sequence[float] | None) -> float | None:
    """The highest relevance score, or None when there are no scores (no reranker, no passages)."""
    if not scores:
        return None
    best = max(float(s) for s in scores)
    return None if math.isnan(best) else best


def rerank(
    reranker: Reranker, query: str, passages: list[str], top_k: int | None = None
) -> Ranking:
    """Score `passages` with `reranker` and order them; keep the given order for "none"."""
    items = _check_inputs(query, passages)
    scores = reranker.score(query, items)
    if scores is None:
        order = list(range(len(items)))
        return Ranking(order[:top_k] if top_k is not None else order, None, None, False)
    scores = [float(s) for s in scores]
    if len(scores) != len(items):
        raise ModelError(
            f"reranker {reranker.name!r} returned {len(scores)} scores for {len(items)} passages"
        )
    order = sorted(range(len(items)), key=lambda i: -scores[i])
    if top_k is not None:
        order = order[:top_k]
    return Ranking(order, scores, best_evidence_score(scores), True)


# --------------------------------------------------------------------------- registry

RerankerFactory = Callable[[str | None], Reranker]
_registry: dict[str, RerankerFactory] = {}
_registry_lock = threading.Lock()
_factory_lock = threading.RLock()


def _none_factory(arg: str | None) -> Reranker:
    if arg:
        raise ModelError(f"the 'none' reranker takes no argument (got {arg!r})")
    return NoReranker()


def _cross_encoder_factory(arg: str | None) -> Reranker:
    if not arg:
        raise ModelError("the cross-encoder reranker needs a directory: cross-encoder:/path/to/dir")
    return CrossEncoderReranker(arg)


def _llm_unconfigured(arg: str | None) -> Reranker:
    raise ModelError("the llm reranker needs an LLM; it is not configured")


def register_reranker(prefix: str, factory: RerankerFactory, *, replace: bool = False) -> None:
    """Make `get_reranker("<prefix>")` / `get_reranker("<prefix>:<arg>")` call `factory(arg)`.

    `arg` is the text after the first colon (None if there is none). Registering a prefix that
    exists needs `replace=True` (the LLM judge replaces the "llm" placeholder this way). Clears the
    reranker cache.
    """
    key = (prefix or "").strip().lower()
    if not key or ":" in key or not callable(factory):
        raise ModelError(f"invalid reranker registration: prefix {prefix!r}")
    with _registry_lock:
        if key in _registry and not replace:
            raise ModelError(f"a reranker is already registered for {key!r}; pass replace=True")
        _registry[key] = factory
    _cached_reranker.cache_clear()


def reranker_prefixes() -> list[str]:
    """The registered spec prefixes, sorted."""
    with _registry_lock:
        return sorted(_registry)


@functools.lru_cache(maxsize=None)
def _cached_reranker(spec: str) -> Reranker:
    prefix, sep, arg = spec.partition(":")
    with _registry_lock:
        factory = _registry.get(prefix.strip().lower())
    if factory is None:
        forms = ", ".join(
            "cross-encoder:/path/to/dir" if p == "cross-encoder" else p for p in reranker_prefixes()
        )
        raise ModelError(f"unknown reranker {spec!r}; valid forms: {forms}")
    return factory(arg.strip() if sep else None)


def get_reranker(spec: str | None = None) -> Reranker:
    """The reranker for a spec string; None means "none". Cached per spec per process."""
    if spec is None:
        spec = "none"
    if not isinstance(spec, str) or not spec.strip():
        raise ModelError(f"reranker spec must be a non-empty string, got {spec!r}")
    with _factory_lock:  # two threads asking at once get one instance
        return _cached_reranker(spec.strip())


get_reranker.cache_clear = _cached_reranker.cache_clear  # type: ignore[attr-defined]

register_reranker("none", _none_factory)
register_reranker("cross-encoder", _cross_encoder_factory)
register_reranker("llm", _llm_unconfigured)
