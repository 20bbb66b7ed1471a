"""The NLI claim judge (`nli:DIR`, SPEC C3/G3) on a tiny model built here: a 1-layer BERT with three
labels whose classifier is set by hand so one output wins for every input. Which verdict that output
means is read from the model's config, so the same weights saved with different label names must
give different verdicts. Needs torch and sentence-transformers (the `models` extra): skipped without
(they are not test dependencies). Importing torch takes most of a minute on a busy machine, so the
module is marked slow, like the cross-encoder tests.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cograg.models import ModelError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _torch_and_sentence_transformers() -> None:
    # in a fixture, not at import: collecting the fast tier must not import torch (~11 s)
    pytest.importorskip("torch", reason="needs torch: pip install 'cograg[models]'")
    pytest.importorskip("sentence_transformers", reason="needs sentence-transformers: pip install 'cograg[models]'")


WORDS = ["the", "bridge", "has", "seven", "arches", "nine", "opened", "in", "1811"]
WINNER = 1  # the output index the classifier makes win


def _save_labels(model_dir: Path, labels: list[str]) -> Path:
    cfg_file = model_dir / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["id2label"] = {str(i): name for i, name in enumerate(labels)}
    cfg["label2id"] = {name: i for i, name in enumerate(labels)}
    cfg_file.write_text(json.dumps(cfg))
    return model_dir


@pytest.fixture(scope="module")
def tiny_nli_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    root = tmp_path_factory.mktemp("tiny-nli")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tokenizer = BertTokenizer(vocab=str(vocab), model_max_length=64)
    torch.manual_seed(0)
    labels = ["contradiction", "entailment", "neutral"]
    config = BertConfig(vocab_size=5 + len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=3,
                        id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    model = BertForSequenceClassification(config)
    with torch.no_grad():  # a constant classifier: output WINNER for every pair
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 0.0, 0.0]))
        model.classifier.bias[WINNER] = 6.0
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


@pytest.mark.parametrize(("labels", "verdict"), [
    (["contradiction", "entailment", "neutral"], "SUPPORTED"),
    (["entailment", "CONTRADICTION", "neutral"], "CONTRADICTED"),
    (["entailment", "Neutral", "contradiction"], "UNRELATED"),
])
def test_nli_judge_reads_the_verdict_of_each_output_from_the_model_config(
        tiny_nli_dir: Path, tmp_path: Path, labels: list[str], verdict: str):
    from cograg.models.judge import NLIJudge

    d = _save_labels(Path(shutil.copytree(tiny_nli_dir, tmp_path / "m")), labels)
    judge = NLIJudge(str(d))
    assert judge.name == f"nli:{d}"
    v = judge.judge("The bridge has seven arches.", "The bridge has nine arches.")
    assert v.verdict == verdict
    p = float(v.reason.removeprefix("nli p="))
    assert 0.98 < p <= 1.0  # softmax of (6, 0, 0)


def test_nli_judge_reads_a_short_answer_together_with_its_question(tiny_nli_dir: Path, monkeypatch):
    from cograg.models.judge import NLIJudge

    judge = NLIJudge(str(tiny_nli_dir))
    pairs: list[tuple[str, str]] = []
    predict = judge.model.predict

    def recording(batch, **kw):
        pairs.extend(batch)
        return predict(batch, **kw)

    monkeypatch.setattr(judge.model, "predict", recording)
    judge.judge("1811.", "The bridge opened in 1811.", question="When did the bridge open?")
    long_claim = "The Linden Bridge over the river opened to traffic in the year 1811."
    judge.judge(long_claim, "The bridge opened in 1811.", question="When did the bridge open?")
    judge.judge("1811.", "The bridge opened in 1811.")
    assert pairs == [("The bridge opened in 1811.", "When did the bridge open? 1811."),
                     ("The bridge opened in 1811.", long_claim),
                     ("The bridge opened in 1811.", "1811.")]


def test_nli_judge_in_the_verifier_and_through_the_settings(tiny_nli_dir: Path, tmp_path: Path):
    from cograg.answer.verifier import Verifier
    from cograg.config import Settings
    from cograg.engine import Engine
    from cograg.models.judge import NLIJudge
    from tests.fakes import HashingEmbedder

    check = Verifier(NLIJudge(str(tiny_nli_dir))).check("Seven arches span the river [1].",
                                                         {"1": "The bridge has seven arches."})
    assert check.verdict == "SUPPORTED" and check.kept and check.reason.startswith("nli p=")
    settings = Settings(store=tmp_path / "store", verification={"judge": f"nli:{tiny_nli_dir}"})
    with Engine.open(settings=settings, embedder=HashingEmbedder()) as eng:
        judge = eng.components.judge.get()
        assert isinstance(judge, NLIJudge) and judge.name == f"nli:{tiny_nli_dir}"


def test_nli_judge_rejects_a_model_without_the_three_nli_labels(tiny_nli_dir: Path, tmp_path: Path):
    from cograg.models.judge import NLIJudge

    generic = _save_labels(Path(shutil.copytree(tiny_nli_dir, tmp_path / "generic")), ["LABEL_0", "LABEL_1", "LABEL_2"])
    with pytest.raises(ModelError, match="must label entailment, contradiction and neutral"):
        NLIJudge(str(generic))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "bert"}))  # no weights, no vocabulary
    with pytest.raises(ModelError, match="cannot load NLI model"):
        NLIJudge(str(broken))
