"""`cograg models prepare` (`cograg.engine.prepare_models`): the model cache is one per user, and
the prompt prefixes it saves are exactly the ones the answer and judge calls send later, so the
first answer of a new process restores them instead of evaluating them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cograg.answer.answerer import AnswerConfig
from cograg.config import Settings
from cograg.engine import Engine, prepare_models
from cograg.models.judge import LLMJudge
from cograg.models.llm.prefix_state import warm_system_prefixes
from cograg.testing import ScriptedLLM
from tests.fakes import HashingEmbedder


def test_the_model_cache_is_one_per_user_not_one_per_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("COGRAG_MODEL_CACHE", raising=False)
    monkeypatch.delenv("COGRAG_MODELS__MODEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    expected = tmp_path / "xdg" / "cograg" / "models"
    assert Settings(store=tmp_path / "a").model_cache_dir == expected == Settings(store=tmp_path / "b").model_cache_dir
    monkeypatch.setenv("COGRAG_MODEL_CACHE", str(tmp_path / "env"))
    assert Settings(store=tmp_path / "a").model_cache_dir == tmp_path / "env"
    assert Settings(store=tmp_path / "a", models={"model_cache": tmp_path / "own"}).model_cache_dir == tmp_path / "own"


class _States:
    """What a llama.cpp backend's `prefix_states` counts: a prefix saved once, restored after."""

    def __init__(self) -> None:
        self.saved = self.restored = 0
        self.on_disk: set[str] = set()


class PrefixKeepingLLM(ScriptedLLM):
    """A scripted model that keeps 'prefix states' as llama.cpp's backend does: keyed by the
    system message it is sent (the schema instruction included), saved the first time a role's
    fresh context sees one and restored every later time."""

    def __init__(self, reply) -> None:
        super().__init__([reply] * 40)
        self.prefix_states = _States()
        self.roles: list[str] = []

    def for_role(self, role: str) -> PrefixKeepingLLM:
        self.roles.append(role)
        return self

    def _respond(self, method, messages, kwargs, stop):
        system = messages[0].content if messages and messages[0].role == "system" else ""
        if system in self.prefix_states.on_disk:
            self.prefix_states.restored += 1
        else:
            self.prefix_states.on_disk.add(system)
            self.prefix_states.saved += 1
        return super()._respond(method, messages, kwargs, stop)


def _reply(messages) -> str:
    system, user = messages[0].content, messages[-1].content
    if user == ".":  # the prepare call: one token, never read
        return "ok"
    if "CLAIM" in system:  # the judge: every claim of the answer supported
        n = len(re.findall(r"<claim", user)) or 1
        if "verdicts" in system:
            return json.dumps({"verdicts": [{"claim": i + 1, "verdict": "SUPPORTED", "reason": "stated"}
                                            for i in range(n)]})
        return json.dumps({"verdict": "SUPPORTED", "reason": "stated"})
    n = re.search(r'<document id="(\d+)"[^>]*>\n[^<]*Marrick', user).group(1)
    return json.dumps({"answer": f"Tobias Marrick designed the Linden Bridge [{n}]. The bridge has seven arches [{n}].",
                       "citations": [{"id": int(n), "quote": "The Linden Bridge was designed by Tobias Marrick."}],
                       "fallback": False})


@pytest.mark.parametrize("batch", [False, True])
def test_prepare_saves_the_prefixes_the_answer_and_the_judge_then_send(tmp_path: Path, batch: bool):
    llm = PrefixKeepingLLM(_reply)
    settings = Settings(store=tmp_path / "unused", answer={"evidence_first": ["en"]},
                        verification={"judge": "llm", "min_claim_similarity": -1.0, "judge_batch": batch})
    parts = {"llm": llm, "judge": LLMJudge(llm), "embedder": HashingEmbedder()}
    first = prepare_models(settings, **parts)
    # the all-claims call's instructions only where that call is made
    judge_prefixes = ["judge_claim", "judge_claims"] if batch else ["judge_claim"]
    # English questions answered quotes first (set here; off by default), Chinese ones answer first:
    # two prefixes
    answer_prefixes = ["answer", "answer_zh"]
    assert first.prefix_states == dict.fromkeys(answer_prefixes + judge_prefixes, "saved")
    assert first.embedder and first.llm == "scripted" and len(set(llm.roles)) == 2 + len(judge_prefixes)
    assert not (tmp_path / "unused").exists()  # no store of the user's is created
    again = prepare_models(settings, **parts)
    assert again.prefix_states == dict.fromkeys(answer_prefixes + judge_prefixes, "restored")

    # a real answer afterwards: its answer call and its judge calls find their prefixes saved
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "bridge.md").write_text("# Linden Bridge\n\nThe Linden Bridge was designed by Tobias Marrick. "
                                      "It has seven arches.\n", encoding="utf-8")
    with Engine.open(settings=settings.model_copy(update={"store": tmp_path / "store"}), **parts) as eng:
        eng.ingest([corpus])
        saved = llm.prefix_states.saved
        resp = eng.answerer(AnswerConfig(min_evidence_cosine=-1.0, min_evidence_cosine_zh=-1.0,
                                         evidence_first=["en"])).answer(
            "Who designed the Linden Bridge, and how many arches does it have?")
    assert not resp.fallback and "Marrick" in resp.answer, resp
    sent = [c.messages[0].content for c in llm.calls if c.method == "chat_json"]
    assert any("CLAIM" in s for s in sent) and any("CLAIM" not in s for s in sent)
    assert llm.prefix_states.saved == saved  # nothing new: every system message was prepared


def test_a_backend_without_prefix_states_reports_them_not_kept():
    llm = ScriptedLLM(["ok"])
    assert warm_system_prefixes(llm, {"answer": ("You answer.", None)}) == {"answer": "not kept"}
    assert llm.calls == []


def test_prepare_on_the_command_line_fails_in_one_line_without_the_model(cli, tmp_path: Path):
    result = cli("models", "prepare", "--llm", f"gguf:{tmp_path / 'missing.gguf'}", "--embedder", "none", "--json")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip().startswith("error:") and "missing.gguf" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_prepare_fails_for_an_llm_endpoint_nobody_answers(tmp_path: Path):
    # it reported "ready" with exit 0, and every later answer was a refusal whose cause sat in the trace
    import socket

    from cograg.models import ModelError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(store=tmp_path / "unused", llm=f"openai:http://127.0.0.1:{port}/v1#m")
    with pytest.raises(ModelError, match=f"127.0.0.1:{port}"):
        prepare_models(settings, embedder=HashingEmbedder())


def test_prepare_leaves_nothing_in_the_users_milvus(tmp_path: Path):
    pytest.importorskip("milvus_lite", reason="needs milvus-lite: pip install 'cograg[scale]'")
    from pymilvus import MilvusClient

    index = tmp_path / "mine.db"
    settings = Settings(store=tmp_path / "unused", index=f"milvus:{index}")
    parts = {"llm": PrefixKeepingLLM(_reply), "judge": LLMJudge(ScriptedLLM([])), "embedder": HashingEmbedder()}
    prepare_models(settings, **parts)
    assert not index.exists() or MilvusClient(str(index)).list_collections() == []
