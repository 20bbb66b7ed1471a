"""Answers that answer (issue #11): the answer prompt asks for complete sentences that restate the
question, the judge judges each claim as an answer to the question, and a sentence copied from a
passage skips the judge only when it is about what is asked. Scripted models only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cograg.answer.contract import Citation
from cograg.answer.subject import content_words, mentions_subject, question_entities
from cograg.answer.verifier import Verifier
from cograg.models.judge import JudgeVerdict, LLMJudge
from cograg.prompts import load_prompt, prompt_versions
from cograg.testing import ScriptedLLM
from tests.test_answer import answering, make_engine, with_models

PASSAGE = ("Navvulata is a 1988 Telugu comedy film directed by Jandhyala. The film was shot in Hyderabad "
           "over forty days. Its music was composed by Ramesh Naidu.")
QUESTION = "Which 1988 Telugu comedy film did Jandhyala direct?"


class RecordingJudge:
    """A judge that says SUPPORTED and records what it was asked."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        self.calls.append((claim, passage, question))
        return JudgeVerdict(verdict="SUPPORTED")


def _cite(i: str, quote: str = "") -> Citation:
    return Citation(id=i, doc_id="d", chunk_id=f"c{i}", quote=quote, source="s", score=1.0)


# ---------------------------------------------------------------- versioned prompts


def test_a_new_prompt_version_is_a_new_file_and_the_old_one_still_loads():
    assert load_prompt("verifiable_answer_system").version == "verifiable_answer_system@4"
    assert load_prompt("verifiable_answer_system", 1).version == "verifiable_answer_system@1"
    assert sorted(prompt_versions("verifiable_answer_system")) == [1, 2, 3, 4]
    assert load_prompt("judge_claim").version == "judge_claim@4"
    assert load_prompt("judge_claim", 3).version == "judge_claim@3"
    assert load_prompt("judge_claims").version == "judge_claims@3"
    with pytest.raises(ValueError, match="no version 9"):
        load_prompt("judge_claim", 9)
    with pytest.raises(ValueError, match="no prompt template"):
        load_prompt("no_such_prompt")


def test_answer_prompt_asks_for_complete_sentences_that_restate_the_question_in_both_languages():
    text = load_prompt("verifiable_answer_system").render(max_sentences=5)
    assert "restate what the question asks" in text and "Never answer with a bare name" in text
    assert "Bad: \"Harbor Line Ferries [1].\"" in text  # the bare-fragment counter-example
    assert "不好：“1902年[2]。”" in text  # and the Chinese one
    assert "restate" not in load_prompt("verifiable_answer_system", 1).render(max_sentences=5)


def test_the_answerer_sends_the_new_answer_prompt(tmp_path: Path):
    from cograg.answer.answerer import AnswerConfig
    from cograg.models.judge import LexicalJudge

    eng = make_engine(tmp_path)
    llm = ScriptedLLM([answering("The Linden Bridge has seven arches [{n}].", "seven arches")])
    open_cfg = AnswerConfig(min_evidence_cosine=-1.0, min_evidence_cosine_zh=-1.0)
    r = with_models(eng, llm=llm, judge=LexicalJudge()).answerer(open_cfg).answer(
        "How many arches does the Linden Bridge have?")
    assert not r.fallback
    system = llm.calls[0].messages[0].content
    assert "restate what the question asks" in system
    assert eng.trace(r.trace_id)["prompt_versions"]["verifiable_answer_system"] == "verifiable_answer_system@4"
    eng.close()


# ---------------------------------------------------------------- the judge sees the question


def test_single_judge_prompt_has_the_question_and_the_answers_rule():
    llm = ScriptedLLM(['{"verdict": "UNRELATED", "reason": "does not answer"}'])
    v = LLMJudge(llm).judge("Ramesh Naidu.", PASSAGE, QUESTION)
    system, user = llm.calls[0].messages
    assert v.verdict == "UNRELATED"
    assert f"<question>\n{QUESTION}\n</question>" in user.content and QUESTION not in system.content
    assert "occurs in the passage but does not answer the question" in system.content and "is UNRELATED" in system.content


def test_batch_judge_prompt_has_the_question_and_the_answers_rule():
    llm = ScriptedLLM([json.dumps({"verdicts": [{"claim": 1, "verdict": "SUPPORTED", "reason": "answers"},
                                                {"claim": 2, "verdict": "UNRELATED", "reason": "other fact"}]})])
    out = LLMJudge(llm).judge_many([("Jandhyala directed Navvulata.", PASSAGE),
                                    ("The music was by Ramesh Naidu.", PASSAGE)], QUESTION)
    system, user = llm.calls[0].messages
    assert [v.verdict for v in out] == ["SUPPORTED", "UNRELATED"]  # type: ignore[union-attr]
    assert f"<question>\n{QUESTION}\n</question>" in user.content
    assert "occurs in the passage but does not answer the question" in system.content


class _RoleHandle:
    """llama.cpp's role handle on a scripted model: the same model, each call noted with its role."""

    def __init__(self, llm: ScriptedLLM, roles: list[str], role: str = "judge") -> None:
        self.llm, self.roles, self.role = llm, roles, role

    def for_role(self, role: str) -> _RoleHandle:
        return _RoleHandle(self.llm, self.roles, role)

    def chat_json(self, *args, **kwargs):
        self.roles.append(self.role)
        return self.llm.chat_json(*args, **kwargs)


def test_one_claim_and_all_claims_calls_keep_their_cached_instructions_apart():
    """The two judge prompts share no head, so each runs in its own role: on llama.cpp a role keeps
    its last prompt's KV state, and one role for both evaluated the other's instructions again at
    every switch (a judge prompt of 596 tokens with 3 served from the cache). Through the recording
    a turn's verifier wraps the judge in, too, and every call still lands in the trace."""
    from cograg.answer.answerer import recording_verifier
    from cograg.trace import Trace

    batch = json.dumps({"verdicts": [{"claim": 1, "verdict": "SUPPORTED", "reason": ""},
                                     {"claim": 2, "verdict": "SUPPORTED", "reason": ""}]})
    one = '{"verdict": "SUPPORTED", "reason": ""}'
    roles: list[str] = []
    judge = LLMJudge(_RoleHandle(ScriptedLLM([one, batch, batch]), roles))
    judge.judge("Jandhyala directed Navvulata.", PASSAGE, QUESTION)
    judge.judge_many([("Jandhyala directed Navvulata.", PASSAGE), ("It was shot in Hyderabad.", PASSAGE)], QUESTION)
    trace = Trace(question=QUESTION)
    recorded = recording_verifier(Verifier(judge), trace).judge
    recorded.judge_many([("Jandhyala directed Navvulata.", PASSAGE), ("It was shot in Hyderabad.", PASSAGE)], QUESTION)
    assert roles == ["judge", "judge_claims", "judge_claims"]
    assert [c.purpose for c in trace.model_calls] == ["verify"]


def test_the_verifier_hands_the_question_to_the_batch_judge_and_drops_what_does_not_answer():
    """A judge that follows the prompt's rule: the fragment is in the passage but answers nothing."""
    def judge_reply(messages):
        prompt = messages[-1].content
        assert f"<question>\n{QUESTION}\n</question>" in prompt
        return json.dumps({"verdicts": [{"claim": 1, "verdict": "SUPPORTED", "reason": "answers"},
                                        {"claim": 2, "verdict": "UNRELATED", "reason": "not what is asked"}]})

    llm = ScriptedLLM([judge_reply])
    v = Verifier(LLMJudge(llm), batch=True)
    r = v.verify("Jandhyala directed Navvulata, a 1988 Telugu comedy [1]. Hyderabad [1].", [_cite("1")],
                 {"1": PASSAGE}, question=QUESTION)
    assert [c.kept for c in r.claims] == [True, False] and len(llm.calls) == 1
    assert r.answer == "Jandhyala directed Navvulata, a 1988 Telugu comedy [1]."


# ---------------------------------------------------------------- the verbatim skip answers too


def test_a_verbatim_sentence_about_something_else_still_goes_to_the_judge():
    judge = RecordingJudge()
    check = Verifier(judge).check("Its music was composed by Ramesh Naidu [1].", {"1": PASSAGE}, question=QUESTION)
    assert check.method == "recording" and len(judge.calls) == 1  # not "verbatim"
    assert judge.calls[0][2] == QUESTION


def test_a_verbatim_sentence_that_answers_the_question_skips_the_judge():
    judge = RecordingJudge()
    check = Verifier(judge).check("Navvulata is a 1988 Telugu comedy film directed by Jandhyala [1].",
                                  {"1": PASSAGE}, question=QUESTION)
    assert check.kept and check.method == "verbatim" and judge.calls == []


def test_a_verbatim_sentence_naming_the_subject_but_not_what_is_asked_goes_to_the_judge():
    judge = RecordingJudge()
    passage = "The Linden Bridge crosses the river Aln. The Linden Bridge was designed by Tobias Marrick."
    q = "Who designed the Linden Bridge?"
    Verifier(judge).check("The Linden Bridge crosses the river Aln [1].", {"1": passage}, question=q)
    assert len(judge.calls) == 1
    assert Verifier(judge).check("The Linden Bridge was designed by Tobias Marrick [1].", {"1": passage},
                                 question=q).method == "verbatim"
    assert len(judge.calls) == 1


def test_chinese_verbatim_sentence_needs_the_question_subject():
    judge = RecordingJudge()
    passage = "林登桥横跨阿恩河和老城区的运河。林登桥由托比亚斯设计，于1811年建成。"
    q = "林登桥是谁设计的？"
    assert Verifier(judge).check("林登桥由托比亚斯设计，于1811年建成[1]。", {"1": passage}, question=q).method == "verbatim"
    Verifier(judge).check("林登桥横跨阿恩河和老城区的运河[1]。", {"1": passage}, question=q)
    assert len(judge.calls) == 1


def test_question_subject_is_found_without_a_model():
    q = "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"
    assert question_entities(q) == ("Corliss Archer", "Kiss and Tell")
    assert question_entities("Who designed the Linden Bridge?") == ("Linden Bridge",)
    assert question_entities("《战国无双3》是由哪两个公司合作开发的？")[0] == "战国无双3"
    assert "design" in content_words("Who designed the Linden Bridge?")
    assert "who" not in content_words("Who designed the Linden Bridge?")
    assert mentions_subject("The Linden Bridge was designed by Tobias Marrick.", "Who designed the Linden Bridge?")
    assert not mentions_subject("Tobias Marrick designed many things.", "Who designed the Linden Bridge?")


# ---------------------------------------------------------------- a "no" answer in a full sentence


def test_a_negated_answer_drawn_from_positive_facts_goes_to_the_judge_not_the_negation_check():
    judge = RecordingJudge()
    ev = {"1": "King Vidor was an American film director. Géza von Cziffra was a Hungarian and Austrian film director."}
    check = Verifier(judge).check("No, King Vidor and Géza von Cziffra are not both American directors [1].", ev,
                                  question="Are King Vidor and Géza von Cziffra both American directors?")
    assert check.method == "recording" and check.kept and len(judge.calls) == 1


def test_a_negated_claim_whose_fact_the_text_states_positively_is_still_contradicted():
    judge = RecordingJudge()
    ev = {"1": "Trams run on Christmas Day in the old town. A ticket costs EUR 2.10."}
    check = Verifier(judge).check("Trams do not run on Christmas Day [1].", ev)
    assert check.verdict == "CONTRADICTED" and check.method == "negation" and judge.calls == []
    zh = Verifier(judge).check("银雾不是1978年育成的[1]。", {"1": "银雾于1978年育成，至今仍是本地种植面积最大的品种。"})
    assert zh.verdict == "CONTRADICTED" and judge.calls == []


def test_a_negation_elsewhere_in_the_cited_sentence_does_not_contradict_a_plain_claim():
    """Seen on cmrc2018: "阴庙[1]" was refused as CONTRADICTED because its sentence ends with
    "而不扰乱人世". Only a clause that negates the claim's own words contradicts it."""
    judge = RecordingJudge()
    zh = Verifier(judge).check("这种庙宇被称为阴庙[1]。", {"1": "华人常常为发生意外而过世的人立庙，称为阴庙，希望这些人枉死之后，"
                                                       "得到香火供养而不扰乱人世。"})
    assert zh.method == "recording" and len(judge.calls) == 1
    very = Verifier(judge).check("银雾茶非常耐寒[1]。", {"1": "银雾是一个非常耐寒的茶树品种。"})  # 非常 negates nothing
    assert very.method != "negation" and very.kept
    # a negation character inside a word (a title here) negates nothing
    name = Verifier(judge).check("光荣和ω-force[1]", {"1": "《战国无双3》是由光荣和ω-force开发的战国无双系列的正统第三续作。"})
    assert name.method != "negation"
    en = Verifier(judge).check("The bridge was finished in 1811 [1].",
                               {"1": "The bridge was finished in 1811, not without delays from the floods."})
    assert en.method != "negation"
    # the clause that holds the claim's words negates them: still contradicted without the judge
    calls = len(judge.calls)
    flipped = Verifier(judge).check("Trams run on Christmas Day [1].",
                                    {"1": "Buses run every hour, but trams do not run on Christmas Day."})
    assert flipped.verdict == "CONTRADICTED" and flipped.method == "negation" and len(judge.calls) == calls


def test_an_answer_that_gives_the_question_s_unmentioned_subject_another_s_figure_is_refused(tmp_path: Path):
    """Asked of the example corpus "How many passenger trips did the Vellmouth tram network carry in
    2023?", the 1.5B model gave Vellmouth, which no document names, Lindenport's 31.2 million trips,
    the judge agreeing. The answerer gives the verifier every block it wrote from."""
    from cograg.answer.answerer import AnswerConfig

    docs = {"report.txt": "The Lindenport tram network carried 31.2 million passenger trips in 2023.\n\n"
                          "Revenue from fares was EUR 41.0 million.",
            "bridge.txt": "The Linden Bridge has seven arches. It was designed by Tobias Marrick."}
    eng = make_engine(tmp_path, docs)
    open_cfg = AnswerConfig(min_evidence_cosine=-1.0, min_evidence_cosine_zh=-1.0)
    vellmouth = answering("The Vellmouth tram network carried 31.2 million passenger trips in 2023 [{n}].",
                          "31.2 million")
    judge = RecordingJudge()
    r = with_models(eng, llm=ScriptedLLM([vellmouth] * 3), judge=judge).answerer(open_cfg).answer(
        "How many passenger trips did the Vellmouth tram network carry in 2023?")
    assert r.fallback and "Vellmouth tram network carried" not in r.answer
    verdicts = eng.trace(r.trace_id)["verdicts"]
    assert verdicts and all(v["method"] == "names" and "vellmouth" in v["reason"] for v in verdicts)
    assert judge.calls == []
    # the question about the network the passage names is answered with the same figure
    network = answering("The Lindenport tram network carried 31.2 million passenger trips in 2023 [{n}].",
                        "31.2 million")
    r = with_models(eng, llm=ScriptedLLM([network]), judge=RecordingJudge()).answerer(open_cfg).answer(
        "How many passenger trips did the Lindenport tram network carry in 2023?")
    assert not r.fallback and "31.2 million" in r.answer
    eng.close()


def test_a_negation_inside_a_quoted_title_does_not_contradict_a_plain_claim():
    """Seen on a HotpotQA calibration question: "1994 [1]" for the year Dawn Penn's single became a
    hit was refused as CONTRADICTED, because the cited sentence names the song "You Don't Love Me
    (No, No, No)". A title's words negate nothing; the judge decides."""
    judge = RecordingJudge()
    ev = {"1": "\"You Don't Love Me (No, No, No)\" is a song by Jamaican recording artist Dawn Penn from her "
               "debut studio album, \"No, No, No\" (1994)."}
    check = Verifier(judge).check("1994 [1]", ev, question="In which year did the single that Dawn Penn is most "
                                                          "known for become a worldwide hit?")
    assert check.method != "negation" and len(judge.calls) == 1
    zh = Verifier(judge).check("这首歌发行于1994年[1]。", {"1": "《你不爱我》是一首歌，发行于1994年。"})
    assert zh.method != "negation"
    # outside the quotes a negation still negates the claim's own words
    denied = Verifier(judge).check("The song \"Yang Yang\" was released in 1973 [1].",
                                   {"1": "The song \"Yang Yang\" was not released in 1973."})
    assert denied.verdict == "CONTRADICTED" and denied.method == "negation"
