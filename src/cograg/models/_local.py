"""Helpers shared by the model backends: offline mode, lazy imports, local directories, API clients."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

from cograg.models import ModelError

INSTALL_HINT = "install the torch models with: pip install 'cograg[models]'"


def force_offline() -> None:
    """Make huggingface_hub / transformers refuse every network access.

    Set before the first import of those libraries (they read the variables at import time); the
    loaders also pass `local_files_only=True`, which holds even if they were imported earlier.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def import_sentence_transformers() -> ModuleType:
    """`sentence_transformers`, imported offline and quiet, or a ModelError naming the extra."""
    force_offline()
    try:
        import sentence_transformers
    except ImportError as exc:
        raise ModelError(f"sentence-transformers is not installed ({exc}); {INSTALL_HINT}") from exc
    try:  # the "Loading weights" / "Writing model shards" bars go to stderr otherwise
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except Exception:  # pragma: no cover - cosmetic only
        pass
    return sentence_transformers


def model_dir(path: str | os.PathLike[str], what: str) -> Path:
    """The resolved directory of a local model, or a ModelError saying what is wrong with it."""
    raw = str(path).strip()
    if not raw:
        raise ModelError(f"no directory given for the {what}")
    p = Path(raw).expanduser()
    if not p.exists():
        raise ModelError(
            f"{what} directory not found: {p} (models are loaded from local directories only; "
            "nothing is downloaded)"
        )
    if not p.is_dir():
        raise ModelError(f"{what} path is not a directory: {p}")
    if not (p / "config.json").is_file() and not (p / "modules.json").is_file():
        raise ModelError(
            f"{p} does not look like a {what} directory (no config.json or modules.json)"
        )
    return p.resolve()


def cap_max_length(model: object, requested: int | None = None) -> None:
    """Keep a sentence-transformers model's truncation length within what its positions allow.

    Tokenizers saved without a `model_max_length` report a huge one, and then a long input
    overflows the position embeddings instead of being truncated. Applies `requested` too.
    """
    current = getattr(model, "max_seq_length", None)
    limit = None
    config = getattr(getattr(model, "transformers_model", None), "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        limit = positions
        if "roberta" in str(getattr(config, "model_type", "")):  # positions start after padding
            limit -= int(getattr(config, "pad_token_id", 1) or 1) + 1
    wanted = [v for v in (current, requested, limit) if isinstance(v, int) and v > 0]
    if wanted and min(wanted) != current:
        try:
            model.max_seq_length = min(wanted)  # type: ignore[attr-defined]
        except Exception:  # pragma: no cover - models without a settable length
            pass


def openai_client(base_url: str, api_key: str | None, timeout_s: float) -> tuple[Any, dict[str, Any]]:
    """An `openai.OpenAI` client for an OpenAI-compatible endpoint, and the `extra_headers` for
    every call through it (both OpenAI-compatible backends, chat and embeddings, use this).

    Only what cograg was given is sent: the SDK's environment defaults ($OPENAI_API_KEY,
    $OPENAI_ORG_ID, $OPENAI_PROJECT_ID) are meant for OpenAI and are not sent to whatever URL a spec
    names. Without a key no Authorization header is sent (the SDK needs one set; the per-call header
    override drops it). No retries: every call has a deadline of its own.
    """
    import openai

    client = openai.OpenAI(
        base_url=base_url,
        api_key=api_key or "no-key",
        organization="",
        project="",
        timeout=timeout_s,
        max_retries=0,
        default_headers={"OpenAI-Organization": openai.Omit(), "OpenAI-Project": openai.Omit()},
    )
    return client, ({} if api_key else {"Authorization": openai.Omit()})


class LoadsOnce:
    """A model loaded on first use, once, under `self._lock` (both set by the subclass's
    `__init__`); `_build()` does the loading and returns the model."""

    _model: Any
    _lock: Any

    def _build(self) -> Any:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def _load(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._build()
        return self._model


def load_sentence_transformers(cls_name: str, path: Path, what: str, **kwargs: Any) -> Any:
    """`sentence_transformers.<cls_name>` from a local directory, never from a hub; ModelError
    naming `what` and the directory when it cannot load."""
    st = import_sentence_transformers()
    try:
        return getattr(st, cls_name)(str(path), local_files_only=True, **kwargs)
    except Exception as exc:
        raise ModelError(f"cannot load the {what} in {path}: {exc}") from exc


def endpoint_base(base_url: str | None, what: str) -> str:
    """The base URL of an OpenAI-compatible endpoint, without a trailing slash; ModelError unless http(s)."""
    base = (base_url or "").strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ModelError(f"the {what} endpoint must be an http(s) URL, got {base_url!r}")
    return base


def positive_seconds(value: Any, name: str) -> float:
    if value is None or not (isinstance(value, (int, float)) and value > 0):
        raise ModelError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


class DiscoveredModel:
    """The `model` of an OpenAI-compatible endpoint: the one given, else the first `GET /models`
    lists, asked once (`_discover_model()`, under `self._lock`)."""

    _model: str | None
    _lock: Any

    def _discover_model(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @property
    def model(self) -> str:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._discover_model()
        return self._model


def string_list(values: Any, what: str, item: str) -> list[str]:
    """`values` as a list of strings; ModelError for a lone string or a non-string item
    (`what`: "embedders take a list of strings", `item`: "text")."""
    if isinstance(values, (str, bytes)):
        raise ModelError(f"{what}, not a single string")
    out = list(values)
    for i, v in enumerate(out):
        if not isinstance(v, str):
            raise ModelError(f"{item} #{i} is a {type(v).__name__}, not a string")
    return out
