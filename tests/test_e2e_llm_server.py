"""Scale-out end to end (SPEC I): the LLM behind an OpenAI-compatible server (`python -m
llama_cpp.server` on loopback serving the 0.5B test model) and the chunk index on Milvus Lite. The
router's model scores, the planner and the claim verifier all go over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cograg.config import ControlBudget, Settings
from cograg.control.planner import Planner
from cograg.control.router import LLMRouteScorer
from cograg.engine import Engine
from cograg.models.judge import LLMJudge
from cograg.models.llm import OpenAICompatLLM
from cograg.models.model_files import ModelError, ensure_model
from tests.llm_server_support import serve_gguf
from tests.test_e2e_answer import MODEL_CACHE, REPO, assert_contract_holds

pytestmark = pytest.mark.slow

CORPUS = REPO / "examples" / "corpus"
QUESTION = "Who designed the stone Linden Bridge, and what is the daily cap on LinCard single fares?"


@pytest.fixture(scope="module")
def served_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The OpenAI-compatible base URL of a llama.cpp server running the fast test model."""
    pytest.importorskip("llama_cpp.server.app",
                        reason="needs the llama_cpp.server stack (fastapi, uvicorn, ...): pip install 'cograg[server]'")
    try:
        model = ensure_model("fast", MODEL_CACHE)
    except ModelError as exc:
        pytest.skip(f"embedded 0.5B model not installed: {exc}")
    with serve_gguf(model, tmp_path_factory.mktemp("llm-server") / "server.log", n_ctx=4096) as base:
        yield base


@pytest.mark.timeout(1800)
def test_router_planner_and_verifier_through_llama_cpp_server(tmp_path: Path, served_model: str):
    pytest.importorskip("milvus_lite", reason="needs pymilvus and milvus-lite: pip install 'cograg[scale]'")
    settings = Settings(store=tmp_path / "store", index="milvus:index.db", llm=f"openai:{served_model}",
                        judge="llm", routing={"router_llm": True}, control={"plan_templates": False},
                        model_cache=MODEL_CACHE)
    # The router gives the model 60 s. A fresh llama.cpp server evaluates the whole routing prompt
    # on the first call: 73 s measured on one thread of a loaded 2-core machine, 10 s once the
    # prompt's fixed prefix is cached. One routing call first, as a deployment's warm-up would.
    LLMRouteScorer(OpenAICompatLLM(served_model, timeout_s=600), timeout_s=600).assess(QUESTION)
    with Engine.open(settings=settings) as eng:
        eng.ingest([CORPUS / "bridge_history.html", CORPUS / "faq.txt", CORPUS / "tram_network.md"])

        # router: the model's scores are blended into the rules' (one "route" call over HTTP)
        routed = eng.ask(QUESTION)
        assert_contract_holds(eng, routed)
        trace = eng.trace(routed.trace_id)
        route_calls = [c for c in trace["model_calls"] if c["purpose"] == "route"]
        assert route_calls and all(c["ok"] for c in route_calls), [(c["purpose"], c["error"]) for c in route_calls]
        assert trace["decision"]["llm_scores"] is not None and trace["decision"]["llm_error"] is None

        # planner: the engine's model plans over HTTP (templates off). Called directly: a turn
        # forced to R3 would, when the 0.5B's plan fails twice, fall back to R2 and answer the
        # question again (~40 s of grading, generating and verifying that the routed turn above
        # already covered); the fallback itself is transport-independent and tested in process.
        planner = Planner(eng.components.llm.get(), ControlBudget(), timeout_s=600, templates=False)
        outcome = planner.plan(QUESTION)
        assert outcome.template is None and outcome.attempts >= 1 and outcome.tokens > 0, outcome
        assert outcome.raw_outputs and outcome.raw_outputs[0].strip(), outcome
        # a plan the model got right is a valid plan; one it got wrong twice says why, each time
        assert outcome.plan is not None and outcome.plan.sub_tasks or len(outcome.errors) == outcome.attempts == 2, \
            outcome

        # verifier: every delivered sentence was judged (checked above); the judge answers over HTTP
        judge = eng.components.judge.get()
        passage = "The stone Linden Bridge was designed by the engineer Tobias Marrick and has seven arches."
        supported = judge.judge("Tobias Marrick designed the Linden Bridge.", passage)
        other = judge.judge("The Linden Bridge has two arches.", passage)
        assert supported.verdict == "SUPPORTED"
        # a typed verdict came back over HTTP; whether the 0.5B judge gets this one right is a
        # question of the model's quality (it has said SUPPORTED here), which `cograg eval verifier`
        # measures: this test is about the wiring
        assert other.verdict in ("SUPPORTED", "CONTRADICTED", "UNRELATED") and other.reason == ""
        # by default the server's grammar closes the reply after the verdict; with reasons it does not
        reasoned = LLMJudge(judge.llm, reasons=True).judge("The Linden Bridge has two arches.", passage)
        assert reasoned.verdict in ("SUPPORTED", "CONTRADICTED", "UNRELATED") and reasoned.reason
