"""The verifier's cost controls (issue: speed): verbatim spans skip the judge, the judge reads a
window of the cited text, and all claims of one answer go to the LLM judge in one call."""

from __future__ import annotations

import json
import re

import pytest

from cograg.answer.contract import Citation
from cograg.answer.verifier import Verifier, evidence_window, is_verbatim
from cograg.config import Settings
from cograg.models.judge import JudgeVerdict, LLMJudge

LONG = " ".join(f"Filler sentence number {i} talks about the weather in a town far away." for i in range(30))
EVIDENCE = (LONG + " The Linden Bridge was designed by Tobias Marrick in 1809. It has seven arches of grey stone. "
            + LONG)


class CountingJudge:
    """Records what it was shown; says SUPPORTED when every word of the claim is in the passage."""

    name = "counting"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        self.calls.append((claim, passage))
        words = [w.strip(".,").lower() for w in claim.split()]
        ok = all(w in passage.lower() for w in words)
        return JudgeVerdict(verdict="SUPPORTED" if ok else "UNRELATED")


def test_verbatim_span_is_supported_without_the_judge():
    judge = CountingJudge()
    v = Verifier(judge)
    check = v.check("It has seven arches of grey stone [1].", {"1": EVIDENCE})
    assert check.kept and check.verdict == "SUPPORTED" and check.method == "verbatim"
    assert judge.calls == []


def test_verbatim_needs_a_real_span_not_a_fragment_or_a_paraphrase():
    assert is_verbatim("The Linden Bridge was designed by Tobias Marrick", EVIDENCE)
    assert is_verbatim("the linden   bridge, was designed by TOBIAS Marrick!", EVIDENCE)  # case/space/punct
    assert not is_verbatim("Tobias Marrick", EVIDENCE)  # too short to stand alone: the judge decides
    assert not is_verbatim("The Linden Bridge was designed by Tobias Merrick", EVIDENCE)  # one letter off
    assert not is_verbatim("Tobias Marrick designed the Linden Bridge", EVIDENCE)  # paraphrase
    assert is_verbatim("银雾于1978年育成，至今仍是本地种植", "研究所育成了耐寒品种银雾。银雾于1978年育成，至今仍是本地种植面积最大的品种。")


def test_a_verbatim_claim_still_fails_the_number_and_negation_checks():
    v = Verifier(CountingJudge())
    ev = {"1": "Trams do not run on Christmas Day in the old town of Linden."}
    assert v.check("Trams run on Christmas Day in the old town of Linden [1].", ev).verdict == "CONTRADICTED"


def test_judge_reads_a_window_around_the_quote_not_the_whole_block():
    judge = CountingJudge()
    v = Verifier(judge, window_chars=300)
    check = v.check("Marrick designed it in 1809 [1].", {"1": EVIDENCE},
                    quotes_by_id={"1": "designed by Tobias Marrick in 1809"})
    assert check.kept
    (claim, passage), = judge.calls
    assert "Tobias Marrick in 1809" in passage and len(passage) <= 300 < len(EVIDENCE)


def test_evidence_window_keeps_short_text_whole_and_stays_in_document_order():
    assert evidence_window("x", "Short text.") == "Short text."
    w = evidence_window("seven arches", EVIDENCE, ["It has seven arches of grey stone."], max_chars=260)
    assert w.index("designed by") < w.index("seven arches") and len(w) <= 260
    zh = "。".join(f"第{i}句讲的是别的事情" for i in range(60)) + "。银雾于1978年育成。" + "。".join("其他内容" for _ in range(60))
    wz = evidence_window("银雾于1978年育成", zh, ["银雾于1978年育成"], max_chars=80)
    assert "银雾于1978年育成" in wz and len(wz) <= 80
    # a Chinese character costs the judge about three Latin characters' worth of tokens
    assert 3 * sum("\u4e00" <= ch <= "\u9fff" for ch in wz) <= 80


class BatchLLM:
    """A fake model for the batch judge: answers from the claims and passages in the prompt (the
    case data), and counts its calls."""

    name = "batch-fake"

    def __init__(self, drop: int | None = None, fail_single: bool = False) -> None:
        self.calls = 0
        self.single_calls = 0
        self.drop = drop
        self.fail_single = fail_single

    def chat_json(self, messages, schema, *, max_tokens, timeout_s=None, enforced_schema=None):
        import re

        self.calls += 1
        prompt = messages[-1].content
        if schema is JudgeVerdict:  # the single-claim prompt
            self.single_calls += 1
            if self.fail_single:
                raise RuntimeError("model down")
            passage = re.search(r"<passage>\n(.*?)\n</passage>", prompt, re.S).group(1)
            claim = re.search(r"<claim>\n(.*?)\n</claim>", prompt, re.S).group(1)
            ok = all(w.strip(".,").lower() in passage.lower() for w in claim.split())
            return JudgeVerdict(verdict="SUPPORTED" if ok else "UNRELATED", reason="fake"), None
        passages = dict(re.findall(r'<passage id="(\d+)">\n(.*?)\n</passage>', prompt, re.S))
        claims = dict(re.findall(r'<claim id="(\d+)">\n(.*?)\n</claim>', prompt, re.S))
        verdicts = []
        for i, claim in claims.items():
            if self.drop is not None and int(i) == self.drop:
                continue
            words = [w.strip(".,").lower() for w in claim.split()]
            ok = all(w in passages[i].lower() for w in words)
            verdicts.append({"claim": int(i), "verdict": "SUPPORTED" if ok else "UNRELATED", "reason": "fake"})
        return schema.model_validate_json(json.dumps({"verdicts": verdicts})), None


def _cite(i: str, quote: str) -> Citation:
    return Citation(id=i, doc_id="d", chunk_id=f"c{i}", quote=quote, source="s", score=1.0)


def test_with_batch_on_all_claims_of_an_answer_are_judged_in_one_call():
    llm = BatchLLM()
    v = Verifier(LLMJudge(llm), batch=True)
    ev = {"1": "The Linden Bridge was designed by Tobias Marrick.", "2": "The bridge has seven arches and two towers."}
    # the judge's "no" is on words ("iron"): a wrong count ("nine towers") is the numbers check's
    answer = "Marrick designed the bridge [1]. The bridge has iron towers [2]. Two towers and seven arches [2]."
    r = v.verify(answer, [_cite("1", "designed by Tobias Marrick"), _cite("2", "seven arches")], ev, question="q?")
    assert llm.calls == 1
    assert [c.kept for c in r.claims] == [True, False, True]
    assert all(c.method.startswith("llm:") for c in r.claims)


def test_by_default_each_claim_is_judged_on_its_own():
    """The 1.5B model's batch reply held one verdict for two claims in every answer measured, was no
    more often right than one call per claim, and took 2.6 times as long (benchmarks/batch_judge.py),
    so batching is a setting (`verification.judge_batch`), off by default."""
    llm = BatchLLM()
    ev = {"1": "The Linden Bridge was designed by Tobias Marrick.", "2": "The bridge has seven arches and two towers."}
    # the judge's "no" is on words ("iron"): a wrong count ("nine towers") is the numbers check's
    answer = "Marrick designed the bridge [1]. The bridge has iron towers [2]. Two towers and seven arches [2]."
    r = Verifier(LLMJudge(llm)).verify(answer, [_cite("1", "designed by Tobias Marrick"), _cite("2", "seven arches")],
                                       ev, question="q?")
    assert (llm.calls, llm.single_calls) == (3, 3)
    assert [c.kept for c in r.claims] == [True, False, True]
    assert Settings().verification.judge_batch is False


def test_a_claim_missing_from_the_batch_reply_is_judged_on_its_own_and_fails_closed_if_that_fails():
    ev = {"1": "Trams run every ten minutes on weekdays.",
          "2": "On weekdays the single ticket costs EUR 2.10 and the day pass EUR 6."}
    answer = ("Trams run on weekdays [1]. The single ticket costs EUR 2.10 on weekdays [2]. "
              "The day pass is free on weekdays [2].")
    cites = [_cite("1", "Trams run every ten minutes"), _cite("2", "the single ticket costs EUR 2.10")]
    llm = BatchLLM(drop=2)
    r = Verifier(LLMJudge(llm), batch=True).verify(answer, cites, ev)
    assert all(c.method.startswith("llm:") for c in r.claims)  # all three went to the judge
    # claim 2 had no verdict in the batch: asked alone, it is supported; claim 3 was judged in the batch
    assert [c.kept for c in r.claims] == [True, True, False] and (llm.calls, llm.single_calls) == (2, 1)
    down = BatchLLM(drop=2, fail_single=True)
    r = Verifier(LLMJudge(down), batch=True).verify(answer, cites, ev)
    assert [c.kept for c in r.claims] == [True, False, False] and "judge failed" in r.claims[1].reason
    assert "no verdict in the batch" in r.claims[1].reason


def test_the_judge_reason_is_bounded_after_the_verdict_and_cut_not_rejected() -> None:
    from cograg.control.corrective_models import GradeVerdict
    from cograg.models.judge import MAX_REASON_CHARS, ClaimVerdict

    for schema, decision, text in ((JudgeVerdict, ["verdict"], "reason"),
                                   (GradeVerdict, ["is_relevant", "confidence"], "reasoning")):
        s = schema.model_json_schema()
        # the decision comes first in the grammar, so the bound cannot change it (greedy decoding)
        assert list(s["properties"])[:len(decision) + 1] == [*decision, text]
        assert s["properties"][text]["maxLength"] == MAX_REASON_CHARS
    # a backend without a grammar may write more: the reply still counts, its reason cut
    v = JudgeVerdict.model_validate({"verdict": "SUPPORTED", "reason": "because " * 40})
    assert v.verdict == "SUPPORTED" and len(v.reason) == MAX_REASON_CHARS
    g = GradeVerdict.model_validate({"is_relevant": True, "confidence": 0.9, "reasoning": "x" * 500})
    assert g.is_relevant and len(g.reasoning) == MAX_REASON_CHARS
    # in a batch, claim 2's verdict follows claim 1's reason: that reason stays unbounded
    assert "maxLength" not in ClaimVerdict.model_json_schema()["properties"]["reason"]


def test_without_reasons_the_judge_shows_the_full_schema_and_enforces_only_the_verdict() -> None:
    from cograg.models.judge import JudgeDecision
    from cograg.testing import ScriptedLLM

    for reasons, enforced in ((False, JudgeDecision), (True, JudgeVerdict)):
        # the scripted model answers what a grammar-stopped model writes: the verdict only
        llm = ScriptedLLM(['{"verdict": "CONTRADICTED"}'])
        v = LLMJudge(llm, reasons=reasons).judge("The bridge has nine arches.", "It has seven arches.", "How many?")
        assert v.verdict == "CONTRADICTED" and v.reason == ""
        call = llm.calls[0]
        assert call.kwargs["schema"] is enforced
        # the prompt is the same either way: it shows the reason, so every token before it is too
        assert '"reason"' in call.messages[0].content


def test_an_enforced_schema_must_be_the_leading_fields_with_defaults_after() -> None:
    from pydantic import BaseModel

    from cograg.models import ModelError
    from cograg.models.judge import JudgeDecision
    from cograg.models.llm.types import check_enforced_schema

    class ReasonFirst(BaseModel):
        reason: str = ""

    class NeedsMore(BaseModel):
        verdict: str
        detail: str

    class VerdictOnly(BaseModel):
        verdict: str

    check_enforced_schema(JudgeVerdict, JudgeDecision)  # the judge's pair is fine
    for shown, enforced in ((JudgeVerdict, ReasonFirst), (NeedsMore, VerdictOnly)):
        with pytest.raises(ModelError, match="leading fields"):
            check_enforced_schema(shown, enforced)


def test_the_grammar_of_the_verdict_only_reply_closes_after_the_verdict() -> None:
    pytest.importorskip("llama_cpp")
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    from cograg.models.judge import JudgeDecision

    full = json_schema_to_gbnf(json.dumps(JudgeVerdict.model_json_schema(), sort_keys=True))
    short = json_schema_to_gbnf(json.dumps(JudgeDecision.model_json_schema(), sort_keys=True))
    assert "reason" in full and "reason" not in short
    # the verdict rule is the same one in both, so a greedy model writes the same verdict
    verdict_rule = next(line for line in full.splitlines() if line.startswith("verdict ::="))
    assert verdict_rule in short.splitlines()


class WordsJudge:
    """SUPPORTED when every word (letters or digits) of the claim occurs in the passage: a claim
    with no word passes vacuously, as the 1.5B judge passed ", }" (an R3 synthesis's leftover)."""

    name = "words"

    def __init__(self) -> None:
        self.claims: list[str] = []

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        self.claims.append(claim)
        ok = all(w.lower() in passage.lower() for w in re.findall(r"\w+", claim))
        return JudgeVerdict(verdict="SUPPORTED" if ok else "UNRELATED")


def test_a_sentence_without_a_word_is_never_kept_nor_judged():
    judge = WordsJudge()
    citations = [Citation(id="1", doc_id="d", chunk_id="c1", quote="designed by Tobias Marrick", source="s", score=1.0),
                 Citation(id="2", doc_id="d", chunk_id="c2", quote="seven arches", source="s", score=1.0)]
    evidence = {"1": EVIDENCE, "2": "It has seven arches of grey stone."}
    result = Verifier(judge).verify("Tobias Marrick designed it in 1809 [1]. , } [2]", citations, evidence,
                                    question="Who designed the Linden Bridge?")
    assert [c.sentence for c in result.claims] == ["Tobias Marrick designed it in 1809 [1].", ", } [2]"]
    assert [c.kept for c in result.claims] == [True, False]
    assert result.claims[1].method == "content" and result.claims[1].verdict == "UNRELATED"
    assert judge.claims == ["Tobias Marrick designed it in 1809."] and result.answer == "Tobias Marrick designed it in 1809 [1]."
    for nothing in ("。[1]", "— [1]", "__ [1]", "[1]"):
        assert not Verifier(judge).check(nothing, {"1": EVIDENCE}).kept, nothing
    assert Verifier(judge).check("1809 [1]", {"1": EVIDENCE}).kept  # a number alone states something


def test_an_r3_synthesis_delivers_no_punctuation_sentence():
    """The synthesis a 1.5B model wrote for "Which came first the forming of The Dandy Warhols or
    the birth of Robert Young?": its second "sentence" was the JSON's leftover ", }"."""
    from cograg.control.models import TaskResult
    from cograg.control.synthesizer import Synthesizer
    from cograg.testing import ScriptedLLM

    texts = {"c1": "The Dandy Warhols formed in Portland, Oregon in 1994.",
             "c2": "Robert Young was born on 6 April 1849 in Glasgow."}
    done = [TaskResult(id=1, description="When were The Dandy Warhols formed?", kind="retrieve", status="done",
                       statement="The Dandy Warhols formed in Portland, Oregon in 1994 [1].",
                       citations=[Citation(id="1", doc_id="d1", chunk_id="c1", quote="formed in Portland", source="s", score=1.0)]),
            TaskResult(id=2, description="When was Robert Young born?", kind="retrieve", status="done",
                       statement="Robert Young was born on 6 April 1849 [1].",
                       citations=[Citation(id="1", doc_id="d2", chunk_id="c2", quote="born on 6 April 1849", source="s", score=1.0)])]
    llm = ScriptedLLM([json.dumps({"answer": "Robert Young was born on 6 April 1849 [cite: task, 2]. , } [cite: task, 1]"})])
    out = Synthesizer(llm, Verifier(WordsJudge()), chunk_text=texts.__getitem__).synthesize(
        "Which came first the forming of The Dandy Warhols or the birth of Robert Young?", done)
    assert out.method == "model" and out.answer == "Robert Young was born on 6 April 1849 [1]."
    assert [c.chunk_id for c in out.citations] == ["c2"]


class AgreeableJudge:
    """Calls every claim SUPPORTED, as the 1.5B judge did for a name its passage does not hold."""

    name = "agreeable"

    def __init__(self) -> None:
        self.claims: list[str] = []

    def judge(self, claim: str, passage: str, question: str | None = None) -> JudgeVerdict:
        self.claims.append(claim)
        return JudgeVerdict(verdict="SUPPORTED")


STRANDLOPER = ("Strandloper is a novel by English writer Alan Garner, published in 1996. It is loosely based on the "
               "story of a Cheshire labourer, William Buckley.")


def test_a_name_in_neither_the_cited_text_nor_the_question_is_unrelated_without_a_judge():
    """The HotpotQA calibration answer "England [1]": the cited paragraph says "English" and
    "Cheshire", never England; the judge said SUPPORTED."""
    judge = AgreeableJudge()
    q = "To which country was the historical figure used for the basis of the novel Strandloper transported to?"
    check = Verifier(judge).check("England [1]", {"1": STRANDLOPER}, question=q)
    assert not check.kept and check.verdict == "UNRELATED" and check.method == "names"
    assert "england" in check.reason and judge.claims == []
    # the same sentence citing the paragraph that names the country goes to the judge
    buckley = "William Buckley was an English convict who was transported to Australia, escaped, and lived there."
    assert Verifier(judge).check("William Buckley was transported to Australia [1].", {"1": buckley}, question=q).kept
    assert not Verifier(judge).check("William Buckley was transported to England [1].", {"1": buckley}, question=q).kept


def test_names_may_come_from_the_question_and_are_compared_as_words():
    judge = AgreeableJudge()
    ev = {"1": "Dan Masterson was an American poet. E. B. White was a writer of essays."}
    q = "What do E. B. White and Dan Masterson have in common?"
    for sentence in ("Both E. B. White and Dan Masterson were American writers [1].",  # names from the question
                     "Yes, both were Americans [1].",  # "Yes" names nothing; "Americans" is the word of "American"
                     "They wrote in the 1950s [1]."):  # numbers are the numbers check's
        check = Verifier(judge).check(sentence, ev, question=q)
        assert check.method != "names", (sentence, check)
    # an English sentence citing Chinese text writes its names in another script: not checked
    assert Verifier(judge).check("Zhang San designed the bridge [1].", {"1": "林登桥由张三设计。"}).method != "names"
    # a claim the system composes from a question may use the question's names (`named_in`)
    c = [Citation(id="1", doc_id="d", chunk_id="c1", quote="", source="s", score=1.0)]
    hungarian = {"1": "Géza von Cziffra was a Hungarian film director."}
    claim = "Géza von Cziffra was an American director [1]."
    assert Verifier(judge).verify(claim, c, hungarian).claims[0].method == "names"
    assert Verifier(judge).verify(claim, c, hungarian, named_in="Are King Vidor and Géza von Cziffra both "
                                  "American directors?").claims[0].method == "agreeable"


ANNUAL_REPORT = ("Lindenport Transit Authority - Annual Report 2023. 1. Overview of the Year. The Lindenport "
                 "tram network carried 31.2 million passenger trips in 2023, 4.1 % more than in 2022.")


def test_a_name_from_the_question_that_no_passage_mentions_is_unrelated_without_a_judge():
    """Asked "How many passenger trips did the Vellmouth tram network carry in 2023?" of the example
    corpus, which has no Vellmouth, the 1.5B model gave Lindenport's figure to Vellmouth and the
    judge passed it. A sentence may use the question's names; not one that no passage mentions."""
    judge = AgreeableJudge()
    c = [Citation(id="1", doc_id="d", chunk_id="c1", quote="", source="s", score=1.0)]
    q = "How many passenger trips did the Vellmouth tram network carry in 2023?"
    claim = "The Vellmouth tram network carried 31.2 million passenger trips in 2023 [1]."
    context = "[1] Annual Report 2023\n" + ANNUAL_REPORT + "\n[2] The Lindenport Tram Network\nTrams run all day."
    check = Verifier(judge).verify(claim, c, {"1": ANNUAL_REPORT}, question=q, context=context).claims[0]
    assert not check.kept and check.verdict == "UNRELATED" and check.method == "names"
    assert "vellmouth" in check.reason and judge.claims == []
    # without the context (a caller that has none) the check is not made: the judge decides
    assert Verifier(judge).verify(claim, c, {"1": ANNUAL_REPORT}, question=q).claims[0].kept
    # a name the question and another passage of the context hold is allowed: a bridge answer
    # cites the paragraph with the answer, and the question's entity is in the first hop's
    bridge_q = "How many trips did the tram network of the city twinned with Vellmouth carry in 2023?"
    twinned = context + "\n[3] Vellmouth\nVellmouth is twinned with Lindenport."
    bridged = "The tram network of Lindenport, twinned with Vellmouth, carried 31.2 million passenger trips [1]."
    assert Verifier(judge).verify(bridged, c, {"1": ANNUAL_REPORT}, question=bridge_q,
                                  context=twinned).claims[0].kept
    # a sentence citing Chinese text is left to the judge, as the other names check leaves it
    zh = {"1": "林登港有轨电车网络2023年运送乘客3120万人次。"}
    assert Verifier(judge).verify("The Vellmouth network carried 31.2 million [1].", c, zh, question=q,
                                  context=zh["1"]).claims[0].method != "names"


def test_a_question_copied_back_is_no_answer():
    """"Gallu is a demon Lilu is what? [1]": the 1.5B model wrote the question back with a marker,
    and the judge called it SUPPORTED (seen in an evaluation-split run)."""
    judge = AgreeableJudge()
    ev = {"1": "Gallu is a demon of the underworld. Lilu is a spirit of the wind."}
    for sentence in ("Gallu is a demon Lilu is what? [1]", "Gallu is a demon, so Lilu is what?” [1]",
                     "鬼是恶魔，那么风是什么？[1]"):
        check = Verifier(judge).check(sentence, ev, question="If Gallu is a demon Lilu is what?")
        assert not check.kept and check.method == "content", sentence
    assert judge.claims == []
    assert Verifier(judge).check("Lilu is a spirit [1].", ev, question="If Gallu is a demon Lilu is what?").kept
