"""Rerankers (SPEC B4): none, cross-encoder from a local directory, the LLM slot, the registry.

The cross-encoder tests build their own model: a 2-layer BERT (hidden 32) with a 9-word WordPiece
vocabulary written here, trained for a few hundred full-batch steps (a few seconds) to answer "does
the passage contain the query word?", then saved with its tokenizer and loaded by our code from
that directory. They import torch, so they are marked slow.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from cograg.errors import CogragError
from cograg.models import (
    CrossEncoderReranker,
    ModelError,
    NoReranker,
    Ranking,
    Reranker,
    best_evidence_score,
    get_reranker,
    register_reranker,
    rerank,
    reranker_prefixes,
)

WORDS = ["apple", "banana", "cherry", "river"]


def _tiny_bert_dir(root: Path, num_labels: int = 1, train: bool = True) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    root.mkdir(parents=True, exist_ok=True)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tokenizer = BertTokenizer(vocab=str(vocab), model_max_length=32)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=5 + len(WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=num_labels,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertForSequenceClassification(config)
    if train:
        # Every (query word, two-word passage) pair; relevant iff the passage has the query word.
        # Each passage is relevant for some queries and not others, so only a model that reads
        # the query can fit this.
        pairs = [
            (q, " ".join(p), float(q in p)) for q in WORDS for p in itertools.permutations(WORDS, 2)
        ]
        enc = tokenizer(
            [q for q, _, _ in pairs], [p for _, p, _ in pairs], padding=True, return_tensors="pt"
        )
        labels = torch.tensor([y for _, _, y in pairs])
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        model.train()
        for _ in range(800):
            logits = model(**enc).logits.squeeze(-1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if loss.item() < 0.01:
                break
        assert loss.item() < 0.05, f"tiny cross-encoder did not fit: loss {loss.item():.3f}"
        model.eval()
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


@pytest.fixture(scope="module")
def tiny_ce_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_bert_dir(tmp_path_factory.mktemp("tiny-ce") / "model")


# --------------------------------------------------------------------------- none / registry (fast)


def test_no_reranker_keeps_order_and_has_no_scores() -> None:
    r = get_reranker("none")
    assert isinstance(r, NoReranker) and isinstance(r, Reranker)
    assert get_reranker(None) is r
    assert r.name == "none"
    passages = ["c", "a", "b"]
    assert r.score("q", passages) is None
    ranking = rerank(r, "q", passages)
    assert ranking == Ranking(order=[0, 1, 2], scores=None, best_score=None, reranked=False)
    assert rerank(r, "q", passages, top_k=2).order == [0, 1]
    assert rerank(r, "q", []).order == []
    with pytest.raises(ModelError):
        r.score("q", "not a list")  # type: ignore[arg-type]


def test_llm_reranker_slot_is_not_configured() -> None:
    for spec in ("llm", "LLM", "llm:judge"):
        with pytest.raises(
            ModelError, match="^the llm reranker needs an LLM; it is not configured$"
        ):
            get_reranker(spec)
    assert {"none", "cross-encoder", "llm"} <= set(reranker_prefixes())


@pytest.mark.parametrize("spec", ["bogus", "cross_encoder:/x", "", "   ", "none:extra"])
def test_bad_reranker_specs(spec: str) -> None:
    with pytest.raises(ModelError) as info:
        get_reranker(spec)
    assert isinstance(info.value, CogragError)


def test_unknown_reranker_lists_valid_forms() -> None:
    with pytest.raises(ModelError, match=r"valid forms: .*cross-encoder:/path/to/dir.*llm.*none"):
        get_reranker("bm25")


def test_cross_encoder_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        get_reranker(f"cross-encoder:{tmp_path / 'nope'}")
    with pytest.raises(ModelError, match="needs a directory"):
        get_reranker("cross-encoder:")
    with pytest.raises(ModelError, match="does not look like"):
        CrossEncoderReranker(tmp_path)


class _LengthJudge:
    """A stand-in for a plugged-in judge: prefers shorter passages."""

    def __init__(self, arg: str | None) -> None:
        self.name = f"length:{arg}"

    def score(self, query: str, passages: list[str]) -> list[float]:
        return [1.0 / (1 + len(p)) for p in passages]


def test_register_reranker_plugs_in_and_rerank_orders_by_score() -> None:
    register_reranker("test-length", _LengthJudge)
    try:
        with pytest.raises(ModelError, match="already registered"):
            register_reranker("test-length", _LengthJudge)
        judge = get_reranker("test-length:v1")
        assert judge.name == "length:v1"
        assert get_reranker("test-length:v1") is judge  # cached
        passages = ["a much longer passage", "mid length", "tiny", "mid length"]
        ranking = rerank(judge, "q", passages)
        assert ranking.reranked
        assert ranking.order == [2, 1, 3, 0]  # ties keep the incoming order
        assert ranking.scores == judge.score("q", passages)
        assert ranking.best_score == pytest.approx(1 / 5)
        assert rerank(judge, "q", passages, top_k=1).order == [2]
        # Replacing an entry (as the LLM judge will do for "llm") drops cached instances.
        register_reranker("test-length", _LengthJudge, replace=True)
        assert get_reranker("test-length:v1") is not judge
    finally:
        register_reranker("test-length", lambda arg: NoReranker(), replace=True)
    with pytest.raises(ModelError):
        register_reranker("bad:prefix", _LengthJudge)


def test_rerank_rejects_wrong_score_count() -> None:
    class Broken:
        name = "broken"

        def score(self, query: str, passages: list[str]) -> list[float]:
            return [1.0]

    with pytest.raises(ModelError, match="1 scores for 2 passages"):
        rerank(Broken(), "q", ["a", "b"])


def test_best_evidence_score() -> None:
    assert best_evidence_score(None) is None
    assert best_evidence_score([]) is None
    assert best_evidence_score([0.2, 0.9, 0.5]) == 0.9


# --------------------------------------------------------------------------- cross-encoder (torch)


@pytest.mark.slow
def test_cross_encoder_scores_are_probabilities(tiny_ce_dir: Path) -> None:
    r = get_reranker(f"cross-encoder:{tiny_ce_dir}")
    assert isinstance(r, CrossEncoderReranker) and isinstance(r, Reranker)
    assert r.name == f"cross-encoder:{tiny_ce_dir.resolve()}"
    passages = ["apple banana", "cherry river", "river apple", "banana", ""]
    scores = r.score("apple", passages)
    assert len(scores) == len(passages)
    assert all(isinstance(s, float) and math.isfinite(s) and 0.0 <= s <= 1.0 for s in scores)
    assert r.score("apple", passages) == scores  # deterministic
    assert r.score("apple", []) == []
    # batch == one by one (padding must not change a pair's score)
    one_by_one = [
        CrossEncoderReranker(tiny_ce_dir, batch_size=1).score("apple", [p])[0] for p in passages
    ]
    assert one_by_one == pytest.approx(scores, abs=1e-5)
    # longer than the model's 32 positions: truncated, not an index error
    assert 0.0 <= r.score("apple", ["river cherry " * 40])[0] <= 1.0


@pytest.mark.slow
def test_cross_encoder_ranks_passages_containing_the_query_word_first(tiny_ce_dir: Path) -> None:
    r = CrossEncoderReranker(tiny_ce_dir, batch_size=3)
    for query in WORDS:
        others = [w for w in WORDS if w != query]
        # Relevant passages are put *last*, so keeping the incoming order would fail.
        irrelevant = [" ".join(p) for p in itertools.permutations(others, 2)]
        relevant = [f"{query} {w}" for w in others] + [f"{w} {query}" for w in others]
        passages = irrelevant + relevant
        scores = r.score(query, passages)
        worst_relevant = min(scores[len(irrelevant) :])
        best_irrelevant = max(scores[: len(irrelevant)])
        assert worst_relevant > best_irrelevant, (query, scores)
        assert worst_relevant > 0.5 > best_irrelevant  # calibrated like the training labels
        ranking = rerank(r, query, passages, top_k=len(relevant))
        assert sorted(ranking.order) == list(range(len(irrelevant), len(passages)))
        assert ranking.best_score == max(scores)
    # The query matters: the same passage flips with the query.
    assert r.score("apple", ["apple river"])[0] > 0.5 > r.score("banana", ["apple river"])[0]


@pytest.mark.slow
def test_cross_encoder_broken_or_unsuitable_directories(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "bert"}))  # no weights, no vocab
    with pytest.raises(ModelError, match="cannot load the cross-encoder"):
        CrossEncoderReranker(broken).score("q", ["p"])

    two_labels = _tiny_bert_dir(tmp_path / "two-labels", num_labels=2, train=False)
    with pytest.raises(ModelError, match="2 output labels"):
        CrossEncoderReranker(two_labels).score("q", ["p"])
