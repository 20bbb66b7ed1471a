"""The app `cograg serve` runs, with a scripted model: an importable factory for
`uvicorn tests.serve_scripted:app --factory --workers N`, the way `cograg serve --workers N` starts
its workers (settings from `COGRAG_SERVE_SETTINGS`), for the stateless-worker load test
(tests/test_serve_load.py, benchmarks/serve_load.py). The corpus is a set of projects, each with
one start year; the scripted model answers "When did Project X start?" from the passage it is
given, so every grounded answer is one verified fact of the session that asked."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from cograg.api.app import SETTINGS_ENV, create_app
from cograg.config import Settings
from cograg.engine import Engine
from cograg.models.judge import LexicalJudge
from cograg.testing import ScriptedLLM
from tests.fakes import HashingEmbedder
from tests.test_control_flow import Brain, block_with

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "dro", "fen", "gul"]


def project_name(i: int) -> str:
    """A distinct made-up word per project, so keyword search finds exactly its document."""
    a, b, c = _SYLLABLES[i % 12], _SYLLABLES[(i // 12) % 12], _SYLLABLES[(i // 144) % 12]
    return (a + b + c + "x").capitalize()


def project_year(i: int) -> int:
    return 1700 + (i * 7) % 300


def project_docs(n: int) -> dict[str, str]:
    return {f"project-{i:03d}.md": f"# Project {project_name(i)}\n\nProject {project_name(i)} started in "
            f"{project_year(i)}.\n" for i in range(n)}


def project_question(i: int) -> str:
    return f"When did Project {project_name(i)} start?"


def _answer(question: str, text: str) -> dict[str, Any]:
    found = re.search(r"Project (\w+)", question)
    name = found.group(1) if found else ""
    n = block_with(text, f"Project {name} started in") if name else None
    if n is None:
        return {"answer": "The documents do not say.", "citations": [], "fallback": True}
    year = re.search(rf"Project {name} started in (\d+)", text).group(1)  # type: ignore[union-attr]
    return {"answer": f"Project {name} started in {year} [{n}].", "citations": [{"id": n, "quote": ""}],
            "fallback": False}


def project_brain() -> Brain:
    brain = Brain(answer=_answer)
    brain.route_scores = {"ambiguity": 0.0, "complexity": 0.0, "intent": "fact_lookup", "retrieval_need": 0.9,
                          "risk": 0.0}
    return brain


def serve_settings(store: Path, memory_backend: str) -> Settings:
    # hashing vectors carry no calibrated cosine: the refusal floors are off, as in tests/api_support.py
    return Settings(store=store, embedder="none", memory={"backend": memory_backend},
                    answer={"min_evidence_cosine": -1.0, "min_evidence_cosine_zh": -1.0},
                    verification={"judge": "lexical", "min_claim_similarity": -1.0})


def ingest_projects(settings: Settings, folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in project_docs(n).items():
        (folder / name).write_text(text, encoding="utf-8")
    with Engine.open(settings=settings, embedder=HashingEmbedder()) as engine:
        engine.ingest([folder])


def app() -> Any:
    """The worker's app: `cograg serve`'s settings, the scripted model, the hashing embedder."""
    settings = Settings.model_validate(json.loads(os.environ[SETTINGS_ENV]))
    served = create_app(settings, llm=ScriptedLLM([project_brain()] * 200_000), embedder=HashingEmbedder(),
                        judge=LexicalJudge())

    @served.middleware("http")
    async def worker_pid(request: Any, call_next: Any) -> Any:  # which worker process answered
        response = await call_next(request)
        response.headers["x-worker-pid"] = str(os.getpid())
        return response
    return served


__all__ = ["app", "ingest_projects", "project_docs", "project_name", "project_question", "project_year",
           "serve_settings"]
