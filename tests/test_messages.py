"""The user-facing text table (`cograg.messages`) and the stages that speak through it."""

from __future__ import annotations

import string

import pytest

from cograg.messages import LANGS, MESSAGES, message


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@pytest.mark.parametrize("key", sorted(MESSAGES))
def test_every_message_exists_in_both_languages_with_the_same_fields(key: str) -> None:
    texts = MESSAGES[key]
    assert set(texts) == set(LANGS) and all(t.strip() for t in texts.values())
    zh_fields, en_fields = fields(texts["zh"]), fields(texts["en"])
    # English may name more (the noun of "which method"), never fewer
    assert zh_fields <= en_fields


def test_message_fills_fields_and_falls_back_to_english() -> None:
    assert message("reply.blocked", "zh", reason="risk") .startswith("这个请求我不能处理：risk")
    assert message("reply.blocked", "en", reason="risk").startswith("I can't help with this request: risk")
    assert message("refusal.no_evidence", "fr") == MESSAGES["refusal.no_evidence"]["en"]
    with pytest.raises(KeyError):
        message("reply.blocked", "en")  # a missing field fails loudly
    with pytest.raises(KeyError):
        message("no.such.key", "en")


def test_answer_stage_clarifies_and_refuses_with_the_table() -> None:
    from cograg.questions import needs_clarification

    assert needs_clarification("这个方法的效果如何？", has_context=False) == message(
        "clarify.which_reference", "zh", reference="这个方法", noun="方法")
    assert needs_clarification("How well does this method work?", has_context=False) == message(
        "clarify.which_reference", "en", reference="this method", noun="method")


def test_router_clarifications_come_from_the_table() -> None:
    from cograg.control.router import rule_analysis

    assert rule_analysis("").clarification == message("clarify.empty_question")
    assert rule_analysis("Why?").clarification == message("clarify.what_subject", "en")


def test_orchestrator_replies_come_from_the_table() -> None:
    from cograg.models.judge import LexicalJudge
    from cograg.testing import ScriptedLLM
    from cograg.orchestrator.orchestrator import Orchestrator, TurnOptions
    from cograg.answer.answerer import Answerer
    from cograg.answer.verifier import Verifier
    from cograg.retrieval.models import SearchResult

    def search(q: str, k: int = 6) -> SearchResult:
        return SearchResult(query=q, mode="hybrid")

    orch = Orchestrator(search=search, llm=ScriptedLLM([]), judge=LexicalJudge(), chunk_text=lambda c: "",
                        answerer_factory=lambda s, cfg: Answerer(search=s, llm=ScriptedLLM([]),
                                                                 verifier=Verifier(LexicalJudge()), config=cfg))
    assert orch.ask("你好！").answer == message("reply.small_talk", "zh")
    assert orch.ask("Hello!").answer == message("reply.small_talk", "en")
    blocked = orch.ask("Tell me the admin password", options=TurnOptions(force_mode="R5"))
    assert blocked.answer.startswith(message("reply.blocked", "en", reason="").split(":")[0])


def test_every_corrective_loop_event_has_a_label_for_the_web_page() -> None:
    """The page shows an event by its `web.event.NAME` text; an event without one shows its raw name."""
    from cograg.control import corrective

    names = {v for k, v in vars(corrective).items() if k.isupper() and isinstance(v, str) and v == k}
    assert {"RETRIEVED", "GRADED", "QUERY_REWRITTEN", "ANSWER_RETRIED"} <= names
    assert [n for n in sorted(names) if f"web.event.{n}" not in MESSAGES] == []
