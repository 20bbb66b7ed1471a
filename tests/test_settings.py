"""The settings tree (`cograg.config.Settings`): nested environment names, the flat names of
earlier versions, Python arguments, `--set` assignments; and the engine's parts built from it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from cograg.components import Lazy, build_components
from cograg.config import FLAT_ALIASES, SECTIONS, AnswerConfig, Settings
from cograg.engine import Engine
from cograg.errors import ConfigError
from cograg.models.judge import LexicalJudge
from cograg.testing import ScriptedLLM
from tests.fakes import HashingEmbedder


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("COGRAG_"):
            monkeypatch.delenv(key)


def test_defaults_are_the_calibrated_values() -> None:
    s = Settings()
    # benchmarks/calibrate_floors.py, calibration split (docs/benchmarks.md, "Refusal floors")
    assert s.answer.min_evidence_cosine == 0.845 and s.answer.min_evidence_cosine_zh == 0.88
    assert s.answer.min_evidence_rerank == 0.30
    assert s.verification.min_supported_ratio == 0.5 and s.verification.min_claim_similarity == 0.72
    assert s.control.max_nodes == 8 and s.control.grade_pass_threshold == 0.3
    assert s.retrieval.retrieve_k == 50 and s.retrieval.fusion == "adaptive"
    assert s.models.llm == "default" and s.routing.router_llm is False
    assert set(SECTIONS) == {"answer", "verification", "control", "routing", "retrieval", "models", "memory", "serve"}


def test_nested_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGRAG_ANSWER__CONTEXT_BUDGET_TOKENS", "800")
    monkeypatch.setenv("COGRAG_CONTROL__MAX_NODES", "4")
    monkeypatch.setenv("COGRAG_RETRIEVAL__FUSION", "weighted")
    monkeypatch.setenv("COGRAG_VERIFICATION__JUDGE", "lexical")
    s = Settings()
    assert s.answer.context_budget_tokens == 800 and s.control.max_nodes == 4
    assert s.retrieval.fusion == "weighted" and s.verification.judge == "lexical"
    assert s.answer.max_sentences == 5  # the rest of the section keeps its defaults


def test_flat_environment_names_keep_working(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env = {"COGRAG_STORE": str(tmp_path), "COGRAG_LLM": "fast", "COGRAG_EMBEDDER": "none",
           "COGRAG_ROUTER_LLM": "1", "COGRAG_JUDGE": "lexical", "COGRAG_RERANKER": "llm",
           "COGRAG_FUSION": "weighted", "COGRAG_RETRIEVE_K": "20", "COGRAG_MODEL_CACHE": str(tmp_path / "m")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s = Settings()
    assert s.store == tmp_path and s.models.llm == "fast" and s.models.embedder == "none"
    assert s.routing.router_llm is True and s.verification.judge == "lexical"
    assert s.retrieval.reranker == "llm" and s.retrieval.fusion == "weighted" and s.retrieval.retrieve_k == 20
    assert s.model_cache_dir == tmp_path / "m"
    assert all(f"COGRAG_{name.upper()}" for name in FLAT_ALIASES)


def test_precedence_python_then_nested_env_then_flat_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGRAG_LLM", "fast")
    monkeypatch.setenv("COGRAG_MODELS__LLM", "gguf:/models/x.gguf")
    assert Settings().models.llm == "gguf:/models/x.gguf"
    assert Settings(llm="openai:http://h/v1").models.llm == "openai:http://h/v1"
    assert Settings(models={"llm": "default"}).models.llm == "default"
    # a section given in Python still takes the other keys' environment values
    monkeypatch.setenv("COGRAG_ANSWER__MAX_SENTENCES", "3")
    assert Settings(answer={"context_budget_tokens": 700}).answer.max_sentences == 3


@pytest.mark.parametrize("key", ["evidence_first", "rewrite_rejected"])
@pytest.mark.parametrize(("value", "langs"), [("en", ["en"]), ("en,zh", ["en", "zh"]), ("true", ["en", "zh"]),
                                             ("false", []), ('["zh"]', ["zh"])])
def test_a_language_list_takes_words_or_json_from_env_and_set(monkeypatch: pytest.MonkeyPatch, key: str, value: str,
                                                              langs: list[str]) -> None:
    assert getattr(Settings().with_overrides([f"answer.{key}={value}"]).answer, key) == langs
    monkeypatch.setenv(f"COGRAG_ANSWER__{key.upper()}", value)
    assert getattr(Settings().answer, key) == langs


def test_evidence_first_rejects_an_unknown_language() -> None:
    with pytest.raises(ValidationError):
        Settings().with_overrides(["answer.evidence_first=fr"])


def test_python_api_takes_sections_as_dicts_or_models() -> None:
    s = Settings(answer={"context_budget_tokens": 900}, control={"max_parallel": 2})
    assert s.answer.context_budget_tokens == 900 and s.control.max_parallel == 2
    assert Settings(answer=AnswerConfig(max_sentences=2)).answer.max_sentences == 2
    with pytest.raises(ValidationError):
        Settings(answer={"context_budget": 900})  # a misspelt key is an error, not ignored
    with pytest.raises(ValidationError):
        Settings(control={"max_nodes": 0})


def test_set_assignments() -> None:
    s = Settings().with_overrides(["answer.context_budget_tokens=800", "routing.router_llm=true",
                                   "retrieval.vector_weight=0.25", "models.model_cache=null", "llm=fast"])
    assert s.answer.context_budget_tokens == 800 and s.routing.router_llm is True
    assert s.retrieval.vector_weight == 0.25 and s.models.model_cache is None and s.models.llm == "fast"
    assert Settings().with_overrides({"control.max_nodes": 3}).control.max_nodes == 3
    with pytest.raises(ConfigError, match="unknown setting 'answer.nope'"):
        Settings().with_overrides(["answer.nope=1"])
    with pytest.raises(ConfigError, match="not a section"):
        Settings().with_overrides(["nope.key=1"])
    with pytest.raises(ConfigError, match="section.key=value"):
        Settings().with_overrides(["answer.max_sentences"])
    with pytest.raises(ValidationError):
        Settings().with_overrides(["answer.max_sentences=many"])


def test_components_load_nothing_until_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cograg.models.embedder as embedders
    import cograg.models.llm as llms

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr(llms, "get_llm", refuse)
    monkeypatch.setattr(embedders, "get_embedder", refuse)
    with Engine.open(tmp_path / "store") as engine:
        assert engine.documents() == []
        assert engine.search("anything", mode="bm25").hits == []  # keyword search needs no embedder
        parts = engine.components
        assert not parts.llm.built and not parts.judge.built and not parts.embedder.built


def test_a_turn_decides_its_route_before_the_llm_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first events of a turn and a greeting's reply never wait for the model: it loads in
    the background from the start of the turn (issue 9), and only an answer waits for it."""
    import threading

    import cograg.models.llm as llms
    from cograg.orchestrator.events import EventBus

    loads: list[str] = []
    events: list[str] = []
    release = threading.Event()

    def load(*args, **kwargs):
        loads.append(threading.current_thread().name)
        release.wait(30)  # a slow load: the gigabyte of weights still being read
        return ScriptedLLM([])
    monkeypatch.setattr(llms, "get_llm", load)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "bridge.md").write_text("# Linden Bridge\n\nThe Linden Bridge has seven arches.\n")
    # floors at 0: the hashing embedder's cosines are not calibrated, and a question far below the
    # floor is refused at the gate, before any model loads
    settings = Settings(verification={"judge": "llm"}, answer={"min_evidence_cosine": 0.0})
    with Engine.open(tmp_path / "store", settings=settings, embedder=HashingEmbedder()) as engine:
        engine.ingest([tmp_path / "docs"])
        bus = EventBus()
        bus.subscribe(lambda ev: events.append(ev.name))
        greeting = engine.ask("Hello!", bus=bus)
        # answered and routed while the load is still blocked
        assert greeting.route == "FAST_PATH" and "ROUTE_DECIDED" in events and not release.is_set()
        assert not engine.components.llm.built
        events.clear()
        release.set()
        engine.ask("How many arches does the Linden Bridge have?", bus=bus)
        assert "ROUTE_DECIDED" in events and len(loads) == 1 and engine.components.llm.built  # loaded once


def test_engine_parts_come_through_the_factory(tmp_path: Path) -> None:
    llm, judge = ScriptedLLM([]), LexicalJudge()
    settings = Settings(answer={"context_budget_tokens": 500}, verification={"min_supported_ratio": 0.9})
    with Engine.open(tmp_path / "store", settings=settings, llm=llm, judge=judge,
                     embedder=HashingEmbedder()) as engine:
        assert engine.components.llm.get() is llm and engine.components.judge.get() is judge
        # the injected embedder, once used, is the store's indexing embedder too
        embedder = engine.components.embedder.get()
        assert isinstance(embedder, HashingEmbedder) and engine.store.indexer.embedder is embedder
        answerer = engine.answerer()
        assert answerer.config.context_budget_tokens == 500 and answerer.verification.min_supported_ratio == 0.9
        assert answerer.llm is llm and answerer.verifier.judge is judge
    with pytest.raises(TypeError, match="unknown component"):
        build_components(settings, reranker_model=None)


def test_lazy_builds_once() -> None:
    calls: list[int] = []
    lazy = Lazy(lambda: calls.append(1) or len(calls))
    assert not lazy.built
    assert lazy.get() == 1 and lazy.get() == 1 and calls == [1] and lazy.built
    assert Lazy.of("x").built and Lazy.of("x").get() == "x"


def test_lazy_prefetch_builds_in_the_background_once() -> None:
    import threading

    started, release = threading.Event(), threading.Event()
    builders: list[str] = []

    def build() -> str:
        builders.append(threading.current_thread().name)
        started.set()
        release.wait(30)
        return "model"
    lazy = Lazy(build)
    lazy.prefetch()  # returns at once: the build waits for `release`
    assert started.wait(30) and not lazy.built
    lazy.prefetch()  # already under way: no second build
    release.set()
    assert lazy.get() == "model" and builders == ["cograg-prefetch"]
    lazy.prefetch()  # built: nothing to do
    assert builders == ["cograg-prefetch"]


def test_a_process_exits_only_after_its_background_load(tmp_path: Path) -> None:
    # A turn that needed no model (a refusal) ended the process while llama.cpp still loaded in the
    # background; finalising Python under that load sometimes printed "pure virtual method called".
    import subprocess
    import sys

    done = tmp_path / "loaded"
    script = ("import time; from pathlib import Path; from cograg.components import Lazy\n"
              f"Lazy(lambda: (time.sleep(1.0), Path({str(done)!r}).write_text('ok'))).prefetch()\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert done.read_text() == "ok"  # the interpreter waited for the load before finalising


def test_lazy_prefetch_failure_is_raised_by_get() -> None:
    import threading

    attempts: list[str] = []
    failed = threading.Event()

    def build() -> str:
        attempts.append(threading.current_thread().name)
        if len(attempts) == 1:
            failed.set()
        raise ConfigError("model file not found")
    lazy = Lazy(build)
    lazy.prefetch()
    assert failed.wait(30)
    with pytest.raises(ConfigError, match="model file not found"):
        lazy.get()  # the background failure is not swallowed for the caller: it builds again and raises
    assert attempts[0] == "cograg-prefetch" and attempts[-1] == threading.current_thread().name
    assert not lazy.built


def test_unknown_judge_is_a_config_error(tmp_path: Path) -> None:
    with Engine.open(tmp_path / "store", settings=Settings(verification={"judge": "oracle"})) as engine:
        with pytest.raises(ConfigError, match="unknown judge"):
            engine.components.judge.get()


def test_cli_set_option_reaches_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import cograg.cli as cli

    seen: list[Settings] = []
    real_open = Engine.open

    def spy(*args, settings: Settings, **kwargs):
        seen.append(settings)
        return real_open(*args, settings=settings, **kwargs)
    monkeypatch.setattr(cli.Engine, "open", spy)
    monkeypatch.setenv("COGRAG_EMBEDDER", "none")
    store = tmp_path / "store"
    res = CliRunner().invoke(cli.app, ["ingest", str(tmp_path / "nothing-here"), "--store", str(store),
                                       "--set", "answer.max_sentences=2", "--set", "retrieval.rrf_k=10"])
    assert seen and seen[0].answer.max_sentences == 2 and seen[0].retrieval.rrf_k == 10, res.output
    bad = CliRunner().invoke(cli.app, ["search", "x", "--store", str(store), "--set", "answer.nope=1"])
    assert bad.exit_code == 1 and "unknown setting 'answer.nope'" in bad.stderr


@pytest.mark.parametrize("section, values", [
    ("answer", {"min_evidence_cosine": float("nan")}), ("answer", {"min_evidence_cosine": 5.0}),
    ("answer", {"min_evidence_cosine_zh": -1.5}), ("answer", {"min_evidence_rerank": float("nan")}),
    ("answer", {"llm_timeout_s": float("inf")}), ("verification", {"min_supported_ratio": -3.0}),
    ("verification", {"min_claim_similarity": 7.0}), ("control", {"max_wall_s": float("inf")}),
    ("memory", {"session_ttl_days": float("inf")}),
])
def test_floors_ratios_and_budgets_out_of_range_are_refused(section: str, values: dict) -> None:
    # NaN as a refusal floor refused every question without a word (score >= nan is never true)
    with pytest.raises(ValidationError):
        Settings(**{section: values})


def test_the_off_values_of_the_floors_stay_allowed() -> None:
    s = Settings(answer={"min_evidence_cosine": -1.0, "min_evidence_cosine_zh": -1.0},
                 verification={"min_claim_similarity": -1.0, "min_supported_ratio": 0.0})
    assert s.answer.min_evidence_cosine == -1.0 and s.verification.min_supported_ratio == 0.0


@pytest.mark.parametrize("kwargs, near", [({"retrival": {"retrieve_k": 5}}, "retrieval"),
                                          ({"chunk_sise": 100}, "chunk_size"), ({"embeder": "none"}, "embedder")])
def test_a_misspelt_keyword_is_refused(kwargs: dict, near: str) -> None:
    # dropped without a word before: Settings(retrival=…) searched with the default retrieve_k
    with pytest.raises(ConfigError, match=f"did you mean '{near}'"):
        Settings(**kwargs)


@pytest.mark.parametrize("name, near", [("COGRAG_RETREIVAL__FUSION", "COGRAG_RETRIEVAL__"),
                                        ("COGRAG_INDX", "COGRAG_INDEX"), ("COGRAG_CHUNK_SIZ", "COGRAG_CHUNK_SIZE"),
                                        ("COGRAG_LLM_THREAD", "COGRAG_LLM_THREADS")])
def test_a_misspelt_environment_name_is_refused(monkeypatch: pytest.MonkeyPatch, name: str, near: str) -> None:
    monkeypatch.setenv(name, "rrf")
    with pytest.raises(ConfigError, match=f"did you mean '{near}"):
        Settings()


def test_environment_names_like_none_of_cogrags_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGRAG_MY_OWN_SCRIPT_FLAG", "1")
    monkeypatch.setenv("COGRAG_LLM_THREADS", "2")
    assert Settings().models.llm == "default"


def test_every_environment_name_the_code_reads_is_known() -> None:
    # a new COGRAG_* read outside the settings tree belongs in OTHER_ENV, or it reads as a typo
    import re

    from cograg.config import ENV_PREFIX, OTHER_ENV

    root = Path(__file__).parents[1]
    read = set()
    for path in [*(root / "src" / "cograg").rglob("*.py"), *(root / "tests").glob("*.py")]:
        read |= set(re.findall(r"\b(COGRAG_[A-Z0-9_]*[A-Z0-9])\b", path.read_text(encoding="utf-8")))
    known = {ENV_PREFIX + n.upper() for n in [*Settings.model_fields, *FLAT_ALIASES, *OTHER_ENV]}
    nested = {n for n in read if "__" in n}
    assert read - nested - known - {"COGRAG_INDX", "COGRAG_CHUNK_SIZ", "COGRAG_LLM_THREAD",
                                    "COGRAG_MY_OWN_SCRIPT_FLAG"} == set()


def test_an_unknown_embedder_is_refused_before_any_store_is_opened(tmp_path: Path) -> None:
    # a keyword search accepted "--embedder bogus" silently; a vector search blamed the store
    from cograg.models import ModelError

    with pytest.raises(ModelError, match="unknown embedder 'bogus'"):
        Engine.open(settings=Settings(store=tmp_path / "s", embedder="bogus"))
    assert not (tmp_path / "s").exists()
    Engine.open(settings=Settings(store=tmp_path / "s", embedder="none")).close()
