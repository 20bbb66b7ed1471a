"""An HTTP app over a small corpus with scripted models, for the API and browser tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cograg.api import create_app
from cograg.config import Settings
from cograg.engine import Engine
from cograg.models.judge import LexicalJudge
from cograg.testing import ScriptedLLM
from tests.fakes import HashingEmbedder
from tests.test_control_flow import Brain

DOCS = {
    "linden.md": "# Linden Bridge\n\nThe Linden Bridge opened in 1811. It was designed by Tobias Marrick.\n",
    "rhine.md": "# Rhine Bridge\n\nThe Rhine Bridge opened in 1870. It has twelve spans.\n",
    "tea.md": "# 茶叶研究所\n\n研究所育成了耐寒品种银雾。银雾于1978年育成。\n",
}


def scripted_settings(store: Path) -> Settings:
    # hashing vectors carry no calibrated cosine: the refusal floors are off, as in test_answer.py
    return Settings(store=store, answer={"min_evidence_cosine": -1.0, "min_evidence_cosine_zh": -1.0},
                    verification={"judge": "lexical", "min_claim_similarity": -1.0})


def ingest_corpus(settings: Settings, folder: Path, docs: dict[str, str] = DOCS) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    with Engine.open(settings=settings, embedder=HashingEmbedder()) as engine:
        engine.ingest([folder])


def scripted_app(tmp_path: Path, *, brain: Brain | None = None, docs: dict[str, str] = DOCS,
                 policy: str | None = None, **options: Any) -> tuple[Any, Brain]:
    """The app over `docs` in a fresh store, answering with `brain` (a scripted model that answers
    each prompt kind by its content), the hashing embedder and the lexical judge. `policy` is the
    text of a corpus_policy.yaml put in the store."""
    settings = scripted_settings(tmp_path / "store")
    ingest_corpus(settings, tmp_path / "corpus", docs)
    if policy is not None:
        (tmp_path / "store" / "corpus_policy.yaml").write_text(policy, encoding="utf-8")
    brain = brain or Brain()
    app = create_app(settings, llm=ScriptedLLM([brain] * 10_000), embedder=HashingEmbedder(),
                     judge=LexicalJudge(), **options)
    return app, brain


__all__ = ["DOCS", "ingest_corpus", "scripted_app", "scripted_settings"]
