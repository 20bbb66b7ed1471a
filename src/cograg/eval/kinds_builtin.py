"""The built-in eval kinds: retrieval, answers, routing, verifier, contract (see cograg.eval.kinds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cograg.errors import CogragError
from cograg.eval.kinds import EvalContext, register, report_for
from cograg.eval.labelled import (VERDICTS, contract_problem, evaluate_contract, evaluate_routing, evaluate_verifier,
                                  label_summary, load_records, routing_problem, verifier_problem)
from cograg.eval.report import EvalReport
from cograg.eval.splits import select, spread

RETRIEVAL_MODES = ("bm25", "vector", "hybrid")
ROUTING_CALIBRATION = ("the rule table was written with the routing set's dev and heldout items in view "
                       "(calibration); heldout2 was written after routing_rules@5 was frozen (evaluation for @5; "
                       "the rules changed again after it was scored, @6 onwards, so later figures on it are "
                       "not strictly held out)")


def _qrels_split(directory: Path, wanted: str | None) -> str:
    from cograg.eval.retrieval import check_beir_folder

    # a folder that is not there has no qrels either, but "name the qrels split" would send the
    # user looking for the wrong mistake
    check_beir_folder(directory)
    if not (directory / "qrels").is_dir():
        raise CogragError(f"not a BEIR folder: missing {directory / 'qrels'}")
    found = sorted(p.stem for p in (directory / "qrels").glob("*.tsv"))
    if wanted:
        if wanted not in found:
            raise CogragError(f"{directory}: missing qrels/{wanted}.tsv for --qrels {wanted}; "
                              f"the qrels splits found: {', '.join(found) or 'none'}")
        return wanted
    if len(found) != 1:
        raise CogragError(f"{directory}: name the qrels split (--qrels), one of {', '.join(found) or 'none found'}")
    return found[0]


HOTPOT_QUESTIONS = "hipporag_hotpotqa_train100.json"
HOTPOT_CORPUS = "hipporag_hotpotqa_train100_corpus.json"


def _hotpot_view(folder: Path, ctx: EvalContext) -> Path:
    """The BEIR view of a HotpotQA sample folder (questions + paragraph corpus, HippoRAG's files),
    built next to the eval stores: each paragraph a record, supporting paragraphs the qrels."""
    from cograg.eval.retrieval import hotpot_to_beir

    if not (folder / HOTPOT_QUESTIONS).is_file() or not (folder / HOTPOT_CORPUS).is_file():
        raise CogragError(f"{folder} lacks {HOTPOT_QUESTIONS} and {HOTPOT_CORPUS}")
    return hotpot_to_beir(folder / HOTPOT_QUESTIONS, folder / HOTPOT_CORPUS, ctx.store_for(f"{folder.name}-beir-view"))


@register("retrieval", "nDCG@10, Recall@10/100, MRR@10 per search mode on a BEIR folder")
def run_retrieval(params: dict[str, Any], ctx: EvalContext) -> EvalReport:
    # `hotpot: FOLDER` instead of `directory`: the BEIR view of a HotpotQA sample (qrels train)
    directory = _hotpot_view(Path(params["hotpot"]), ctx) if params.get("hotpot") else Path(params["directory"])
    modes = tuple(params.get("modes") or RETRIEVAL_MODES)
    bad = [m for m in modes if m not in RETRIEVAL_MODES]
    if bad or not modes:
        raise CogragError(f"modes must be a subset of {','.join(RETRIEVAL_MODES)} (got {','.join(modes)})")
    qrels = _qrels_split(directory, params.get("qrels"))
    store = Path(params["store"]) if params.get("store") else ctx.store_for(directory.resolve().name)
    rows: list[dict[str, Any]] = []
    with ctx.open_engine(store) as engine:
        result = engine.eval_retrieval(directory, qrels, modes=modes, limit=ctx.limit,
                                       progress=ctx.progress.on_ingest, query_progress=ctx.progress.on_query,
                                       query_split=ctx.split, rows=rows)
        embedder = engine.settings.models.embedder
    summary: dict[str, Any] = {"queries": result["queries"]}
    for mode in modes:
        summary |= {f"{mode}.{k}": v for k, v in result[mode].items()}
    return report_for("retrieval", params, ctx, dataset=f"{directory} (qrels {qrels})", summary=summary, rows=rows,
                      gates={k: "higher" for k in summary if k != "queries"},
                      config={"embedder": embedder, "fusion": result.get("fusion"), "modes": ",".join(modes)})


@register("answers", "EM/F1, contains-gold, refusals, ALCE citation precision/recall, cost per route")
def run_answers(params: dict[str, Any], ctx: EvalContext) -> EvalReport:
    from cograg.eval.answers import ANSWER_GATES, QAItem, evaluate_answers, load_qa, summarise_answers

    if params.get("hotpot"):  # a HotpotQA sample folder: its questions over its paragraphs
        folder = Path(params["hotpot"])
        params = {"qa": [str(folder / HOTPOT_QUESTIONS)], **params, "corpus": _hotpot_view(folder, ctx) / "corpus.jsonl"}
    files = params["qa"] if isinstance(params["qa"], list) else [params["qa"]]
    # each file's questions of the split in a stable sampled order, the files interleaved, so a
    # --limit keeps answerable and unanswerable questions and spreads over every passage
    groups = [select([i.model_dump() for i in load_qa(f, corpus_name=params.get("corpus_name"))], ctx.split)
              for f in files]
    qa = [QAItem.model_validate(i) for i in ctx.limited(spread(groups))]
    corpus = Path(params["corpus"])
    if not corpus.exists():
        raise CogragError(f"no corpus {corpus}")
    store = Path(params["store"]) if params.get("store") else ctx.store_for(f"answers-{corpus.resolve().parent.name}-{corpus.stem}")
    judge_spec = params.get("citation_judge") or "llm:default"
    with ctx.open_engine(store) as engine:
        engine.ingest([corpus], progress=ctx.progress.on_ingest)
        judge = ctx.judge(judge_spec, engine) if judge_spec != "none" else None

        def chunk_text(chunk_id: str) -> str | None:
            chunk = engine.store.get_chunk(chunk_id)
            return chunk.text if chunk is not None else None

        rows = evaluate_answers(qa, lambda q: engine.ask(q), engine.trace, chunk_text, judge,
                                progress=ctx.progress.on_query)
        settings = engine.settings
        verifier = engine.components.judge.get()
    judge_name = getattr(judge, "name", "none")
    verifier_name = getattr(verifier, "name", settings.verification.judge)
    notes = []
    same_llm = settings.verification.judge == "llm" and judge_spec in ("llm", f"llm:{settings.models.llm}")
    if judge_name == verifier_name or same_llm:
        notes.append("the citation judge is the verifier being measured: citation figures are not independent")
    return report_for("answers", params, ctx, dataset=f"{', '.join(map(str, files))} over {corpus}",
                      summary=summarise_answers(rows), rows=rows, gates=dict(ANSWER_GATES), notes=notes,
                      calibrated_on=params.get("calibrated_on", ""),
                      config={"llm": settings.models.llm, "embedder": settings.models.embedder,
                              "verifier judge": verifier_name, "citation judge": judge_name,
                              "refusal floors (cosine en/zh, rerank)": (
                                  f"{settings.answer.min_evidence_cosine}/{settings.answer.min_evidence_cosine_zh}, "
                                  f"{settings.answer.min_evidence_rerank}")})


@register("routing", "macro-F1 of the router's routes against labels")
def run_routing(params: dict[str, Any], ctx: EvalContext) -> EvalReport:
    from cograg.control.models import ROUTES
    from cograg.control.router import LLMRouteScorer, Router, load_rules

    records = ctx.limited(select(load_records(params["file"], routing_problem), ctx.split))
    rules = load_rules(ctx.settings.routing.rules)
    scorer = None
    use_llm = params.get("router_llm")
    if use_llm if use_llm is not None else ctx.settings.routing.router_llm:
        from cograg.models.llm import get_llm

        scorer = LLMRouteScorer(get_llm(ctx.settings.models.llm, cache_dir=ctx.settings.model_cache_dir))
    rows = evaluate_routing(records, Router(rules, llm_scorer=scorer), ctx.progress.on_query)
    return report_for("routing", params, ctx, dataset=str(params["file"]), rows=rows,
                      summary=label_summary(rows, ROUTES, by="lang"), gates={"macro_f1": "higher", "accuracy": "higher"},
                      targets={"macro_f1": 0.85}, calibrated_on=ROUTING_CALIBRATION,
                      config={"rules": rules.version, "llm scorer": scorer.name if scorer else "none"})


@register("verifier", "macro-F1 of the claim judge's verdicts against claim/evidence/label pairs")
def run_verifier(params: dict[str, Any], ctx: EvalContext) -> EvalReport:
    records = ctx.limited(select(load_records(params["file"], verifier_problem), ctx.split))
    spec = params.get("judge") or ctx.settings.verification.judge
    judge = ctx.judge(spec if spec != "llm" else f"llm:{ctx.settings.models.llm}")
    rows = evaluate_verifier(records, judge, ctx.progress.on_query)
    return report_for("verifier", params, ctx, dataset=str(params["file"]), rows=rows,
                      summary=verifier_summary(rows),
                      gates={"macro_f1": "higher", "accuracy": "higher", "precision.SUPPORTED": "higher",
                             "false_supported": "lower"},
                      config={"judge": getattr(judge, "name", spec)})


def verifier_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Macro-F1 and per-verdict F1, plus what the citation contract depends on: a claim is delivered
    only when judged SUPPORTED, so `precision.SUPPORTED` (of the pairs judged SUPPORTED, the share
    that are) and `false_supported` (of the pairs that are not, the share judged SUPPORTED)."""
    said = [r for r in rows if r["predicted"] == "SUPPORTED"]
    unsupported = [r for r in rows if r["gold"] != "SUPPORTED"]
    return label_summary(rows, VERDICTS) | {
        "precision.SUPPORTED": round(sum(r["gold"] == "SUPPORTED" for r in said) / len(said), 3) if said else 0.0,
        "false_supported": round(sum(r["predicted"] == "SUPPORTED" for r in unsupported) / len(unsupported), 3)
        if unsupported else 0.0,
        "judge_errors": sum(r["predicted"] == "ERROR" for r in rows)}


@register("contract", "citation-contract validation of hand-written drafts (model-free)")
def run_contract(params: dict[str, Any], ctx: EvalContext) -> EvalReport:
    # hand-written test cases, never used to tune anything: every case is evaluation material
    rows = evaluate_contract(ctx.limited(load_records(params["file"], contract_problem)), ctx.progress.on_query)
    passed = sum(r["ok"] for r in rows)
    report = report_for("contract", params, ctx, dataset=str(params["file"]), rows=rows,
                        summary={"cases": len(rows), "pass_rate": round(passed / len(rows), 4) if rows else None},
                        gates={"pass_rate": "higher"})
    return report.model_copy(update={"split": "all", "split_rule": "every case (nothing is calibrated on them)"})
