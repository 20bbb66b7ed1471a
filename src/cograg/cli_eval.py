"""`cograg eval …`: every quality figure from one command (SPEC H). Each command runs one eval
kind of :mod:`cograg.eval.kinds` on the calibration or evaluation split, prints or writes the
common report (Markdown + JSON), and with `--baseline` exits 1 when a gated metric regressed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from cograg.cli_common import (EmbedderOpt, JsonOpt, SetOpt, _settings, _split, err, eval_app, fail, handle_errors, out,
                               plain)
from cograg.cli_progress import RunProgress
from cograg.config import Settings
from cograg.engine import Engine
from cograg.eval.kinds import EvalContext, data_dir, get_kind
from cograg.eval.report import EvalReport, compare, load_report, write_text

if TYPE_CHECKING:
    from cograg.eval.suite import SuiteResult

# parts handed to every engine the evals open (tests put scripted models here)
engine_parts: dict[str, Any] = {}
# (spec, engine, settings) -> ClaimJudge; None = cograg.eval.kinds.build_judge
judge_factory: Any = None

SplitOpt = Annotated[str, typer.Option(
    "--split", help="calibration | evaluation | all: which part of the labelled set (cograg.eval.splits)")]
LimitOpt = Annotated[int | None, typer.Option(help="evaluate only the first N items of the split (N >= 1)")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="write the report as DIR/<name>.json and .md")]
BaselineOpt = Annotated[Path | None, typer.Option(help="a previous --json report of the same command: exit 1 on a regression")]
ToleranceOpt = Annotated[float, typer.Option(
    help="allowed drop of a gated metric against --baseline (absolute, >= 0)")]
StoreRootOpt = Annotated[Path | None, typer.Option("--store", envvar="COGRAG_STORE",
                                                   help="store for the eval's corpus [default: <COGRAG_STORE>/eval/<name>]")]


def _check_options(limit: int | None, tolerance: float | None, out_dir: Path | None) -> None:
    """Refuse option values that would run an eval and report something else than asked: a
    negative --limit drops items from the end and 0 keeps them all; a negative or NaN tolerance
    fails or passes every gate; an --out that is a file is found only after the whole run."""
    if limit is not None and limit < 1:
        raise fail(f"--limit must be at least 1 (got {limit})")
    if tolerance is not None and not (math.isfinite(tolerance) and tolerance >= 0):
        raise fail(f"--tolerance must be a finite number of at least 0 (got {tolerance})")
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise fail(f"--out {out_dir} is a file, not a folder")


def _context(store: Path | None, set_: list[str] | None, split: str, limit: int | None, progress: Any,
             **overrides: Any) -> EvalContext:
    if split not in ("calibration", "evaluation", "all"):
        raise fail(f"--split must be calibration, evaluation or all (got {split!r})")
    settings = _settings(None, set_, **overrides)

    def open_engine(engine_settings: Settings, **parts: Any) -> Engine:
        return Engine.open(settings=engine_settings, **{**engine_parts, **parts})

    return EvalContext(settings=settings, engine_factory=open_engine, split=split, limit=limit, progress=progress,
                       eval_root=store, judge_factory=judge_factory)


def _show(report: EvalReport, as_json: bool) -> None:
    if as_json:
        out.print_json(report.model_dump_json())
        return
    table = Table("metric", "value", "target", title=plain(f"{report.kind} {report.name} · split {report.split}"),
                  caption=plain(report.dataset))
    for key, value in report.summary.items():
        target = report.targets.get(key)
        table.add_row(plain(key), f"{value:.4f}" if isinstance(value, float) else plain(value),
                      "" if target is None else f">= {target}")
    out.print(table)
    for note in report.notes:
        out.print(f"[yellow]note:[/] {plain(note)}", highlight=False)


def _gate(report: EvalReport, baseline: Path | None, base: EvalReport | None, tolerance: float) -> None:
    """Compare with `base`, the report read from the file `baseline` (read before the run)."""
    if baseline is None or base is None:
        return
    comparison = compare(report, base, tolerance)
    for line in comparison.lines():
        err.print(plain(line), highlight=False, soft_wrap=True)
    if not comparison.passed:
        raise typer.Exit(1)
    err.print(plain(f"gate passed against {baseline} (tolerance {tolerance})"), highlight=False)


def _run(kind: str, params: dict[str, Any], *, store: Path | None, set_: list[str] | None, split: str,
         limit: int | None, out_dir: Path | None, as_json: bool, baseline: Path | None, tolerance: float,
         **overrides: Any) -> None:
    _check_options(limit, tolerance, out_dir)
    base = load_report(baseline) if baseline is not None else None  # a bad baseline fails before the run
    with RunProgress(err, queries=True) as progress:
        ctx = _context(store, set_, split, limit, progress, **overrides)
        report = get_kind(kind).run(params, ctx)
    if out_dir is not None:
        paths = report.write(out_dir)
        err.print(plain(f"wrote {paths[0]} and {paths[1]}"), highlight=False)
    _show(report, as_json)
    _gate(report, baseline, base, tolerance)


@eval_app.command("retrieval")
@handle_errors
def eval_retrieval(
    directory: Annotated[Path, typer.Argument(help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/QRELS.tsv")],
    qrels: Annotated[str | None, typer.Option(help="qrels file name [default: the only one in qrels/]")] = None,
    modes: Annotated[str, typer.Option(help="comma-separated modes")] = "bm25,vector,hybrid",
    fusion: Annotated[str | None, typer.Option(help="hybrid fusion: adaptive (default) | weighted | rrf")] = None,
    split: SplitOpt = "evaluation", limit: LimitOpt = None, out_dir: OutOpt = None,
    baseline: BaselineOpt = None, tolerance: ToleranceOpt = 0.01,
    store: Annotated[Path | None, typer.Option("--store", help="store for the corpus [default: <COGRAG_STORE>/eval/<folder name>]")] = None,
    embedder: EmbedderOpt = None, set_: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Ingest a BEIR folder (re-used on later runs) and report nDCG@10, Recall@10/100, MRR@10 per mode."""
    params = {"directory": directory, "qrels": qrels, "modes": _split(modes), "store": store}
    _run("retrieval", params, store=None, set_=set_, split=split, limit=limit, out_dir=out_dir, as_json=as_json,
         baseline=baseline, tolerance=tolerance, embedder=embedder, fusion=fusion)


@eval_app.command("answers")
@handle_errors
def eval_answers(
    qa: Annotated[list[Path], typer.Argument(help="JSONL files: {question, answers[], answerable?, lang?, id?} per "
                                                  "line; several are interleaved under --limit")],
    corpus: Annotated[Path, typer.Option(help="file or folder the questions are asked of (ingested first)")],
    corpus_name: Annotated[str | None, typer.Option(help="keep only records whose `corpus` field is this")] = None,
    citation_judge: Annotated[str, typer.Option(
        help="judge for ALCE citation figures: llm:MODEL | llm | lexical | nli:DIR | none; "
             "name one other than the verifier measured")] = "llm:default",
    model: Annotated[str | None, typer.Option("--model", help="answer model: default | fast | gguf:PATH | openai:URL")] = None,
    judge: Annotated[str | None, typer.Option(help="the verifier's judge: llm | lexical | nli:DIR")] = None,
    split: SplitOpt = "evaluation", limit: LimitOpt = None, out_dir: OutOpt = None,
    baseline: BaselineOpt = None, tolerance: ToleranceOpt = 0.01,
    store: Annotated[Path | None, typer.Option("--store", help="store for the corpus [default: <COGRAG_STORE>/eval/answers-<corpus>]")] = None,
    embedder: EmbedderOpt = None, set_: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Ask every question of QA over CORPUS; report EM/F1, contains-gold, answered and refusal rates,
    ALCE citation recall/precision, hallucinated ids, tokens and latency per route."""
    params = {"qa": [str(q) for q in qa], "corpus": corpus, "corpus_name": corpus_name,
              "citation_judge": citation_judge, "store": store}
    _run("answers", params, store=None, set_=set_, split=split, limit=limit, out_dir=out_dir, as_json=as_json,
         baseline=baseline, tolerance=tolerance, embedder=embedder, llm=model, judge=judge)


@eval_app.command("routing")
@handle_errors
def eval_routing(
    file: Annotated[Path, typer.Argument(help="JSONL: {question, route, lang?, split?} per line")],
    router_llm: Annotated[bool | None, typer.Option(
        "--router-llm/--rules-only", help="blend the LLM's scores [default: routing.router_llm]")] = None,
    model: Annotated[str | None, typer.Option("--model", help="the router's LLM when --router-llm")] = None,
    split: SplitOpt = "evaluation", limit: LimitOpt = None, out_dir: OutOpt = None,
    baseline: BaselineOpt = None, tolerance: ToleranceOpt = 0.01, set_: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Route every question and report macro-F1 and accuracy against the labels (target 0.85)."""
    _run("routing", {"file": file, "router_llm": router_llm}, store=None, set_=set_, split=split, limit=limit,
         out_dir=out_dir, as_json=as_json, baseline=baseline, tolerance=tolerance, llm=model)


@eval_app.command("verifier")
@handle_errors
def eval_verifier(
    file: Annotated[Path, typer.Argument(help="JSONL: {claim, evidence|passage|abstract, label} per line")],
    judge: Annotated[str | None, typer.Option(help="lexical | nli:DIR | llm | llm:MODEL [default: the settings' judge]")] = None,
    model: Annotated[str | None, typer.Option("--model", help="the model of an llm judge")] = None,
    split: SplitOpt = "evaluation", limit: LimitOpt = None, out_dir: OutOpt = None,
    baseline: BaselineOpt = None, tolerance: ToleranceOpt = 0.01, set_: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Judge every claim against its evidence; report macro-F1 over SUPPORTED/CONTRADICTED/UNRELATED."""
    _run("verifier", {"file": file, "judge": judge}, store=None, set_=set_, split=split, limit=limit,
         out_dir=out_dir, as_json=as_json, baseline=baseline, tolerance=tolerance, llm=model)


@eval_app.command("injection")
@handle_errors
def eval_injection(
    file: Annotated[Path, typer.Argument(help="attack set: cases.jsonl beside its docs/ (tests/data/injection*/)")],
    model: Annotated[str, typer.Option("--model", help="obedient (a reader that obeys every attack) | engine "
                                       "(the settings' answer model)")] = "obedient",
    mode: Annotated[str, typer.Option("--mode", help="execution mode of every question")] = "R1",
    store: StoreRootOpt = None, limit: LimitOpt = None, out_dir: OutOpt = None, baseline: BaselineOpt = None,
    tolerance: ToleranceOpt = 0.0, set_: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Replay an attack set: detector recall, attacks delivered, accuracy and refusals with and without the attack."""
    _run("injection", {"file": file, "model": model, "mode": mode}, store=store, set_=set_, split="all",
         limit=limit, out_dir=out_dir, as_json=as_json, baseline=baseline, tolerance=tolerance)


@eval_app.command("contract")
@handle_errors
def eval_contract(
    file: Annotated[Path, typer.Argument(help="JSONL cases: {id, blocks[], draft{answer,citations}, expect{}}")],
    limit: LimitOpt = None, out_dir: OutOpt = None, baseline: BaselineOpt = None,
    tolerance: ToleranceOpt = 0.0, as_json: JsonOpt = False,
) -> None:
    """Validate hand-written drafts under the citation contract (model-free)."""
    _run("contract", {"file": file}, store=None, set_=None, split="all", limit=limit, out_dir=out_dir,
         as_json=as_json, baseline=baseline, tolerance=tolerance)


@eval_app.command("all")
@handle_errors
def eval_all(
    suite: Annotated[Path, typer.Option(help="suite YAML (see cograg.eval.suite)")] = Path("eval/suite.yaml"),
    only: Annotated[str | None, typer.Option(
        help="comma-separated entry names to run; a name the suite does not have is an error")] = None,
    data: Annotated[Path | None, typer.Option(help="shared data folder [env: COGRAG_EVAL_DATA; default ../shared/data]")] = None,
    limit: Annotated[int | None, typer.Option(help=(
        "run at most N items of every entry, those without a limit of their own too; a gate whose "
        "baseline has another number of items is 'not comparable' and the run does not pass"))] = None,
    tolerance: Annotated[float | None, typer.Option(help="override the suite's tolerance")] = None,
    update_baselines: Annotated[bool, typer.Option(
        "--update-baselines", help="write each report as its entry's baseline instead of comparing")] = False,
    out_dir: OutOpt = None, store: StoreRootOpt = None, embedder: EmbedderOpt = None, set_: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run every eval of SUITE against its baseline; exit 1 unless at least one gate ran and every
    gate passed (a regression, or a run not comparable with its baseline, fails)."""
    from cograg.eval.suite import UnknownEntry, run_suite, suite_verdict

    _check_options(limit, tolerance, out_dir)
    if limit is not None and update_baselines:
        # a baseline of N items could not be compared with the suite's own runs afterwards
        raise fail("--limit cannot be used with --update-baselines: set an entry's limit in the suite instead", 2)
    with RunProgress(err, queries=True) as progress:
        ctx = _context(store, set_, "evaluation", limit, progress, embedder=embedder)
        try:
            results = run_suite(suite, ctx, data=data or data_dir(), only=None if only is None else _split(only),
                                tolerance=tolerance, update_baselines=update_baselines)
        except UnknownEntry as exc:  # a usage error: nothing has run
            raise fail(str(exc), 2) from None
    problem = None if update_baselines else suite_verdict(results)
    if out_dir is not None:
        for r in results:
            r.report.write(out_dir)
        write_text(out_dir / "summary.md", "\n".join(r.report.to_markdown() for r in results))
    _show_suite(results, as_json, passed=None if update_baselines else problem is None)
    _print_gate_lines(results)
    if update_baselines:
        err.print(plain(f"baselines written for {sum(r.baseline_written for r in results)} evals; nothing was gated"),
                  highlight=False)
    elif problem:
        err.print(plain(f"suite not passed: {problem}"), highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    else:
        err.print(plain(f"suite passed: {sum(r.comparison is not None for r in results)} gates"), highlight=False)


def _show_suite(results: list[SuiteResult], as_json: bool, *, passed: bool | None) -> None:
    """The run as JSON (`passed` is null when nothing was gated on purpose: --update-baselines) or a table."""
    import json

    if as_json:
        out.print_json(json.dumps({"passed": passed, "evals": [
            {"name": r.entry.name, "kind": r.entry.kind, "split": r.report.split, "items": len(r.report.rows),
             "gate": r.gate, "summary": r.report.summary,
             "regressions": [g.model_dump() for g in r.comparison.regressions] if r.comparison else None,
             "not_comparable": r.comparison.not_comparable if r.comparison else None}
            for r in results]}, ensure_ascii=False))
        return
    colour = {"pass": "green", "FAIL": "red", "not comparable": "red"}
    table = Table("eval", "kind", "split", "items", "gate")
    for r in results:
        gate = f"[{colour[r.gate]}]{r.gate}[/]" if r.gate in colour else r.gate
        table.add_row(plain(r.entry.name), plain(r.entry.kind), plain(r.report.split), str(len(r.report.rows)), gate)
    out.print(table)


def _print_gate_lines(results: list[SuiteResult]) -> None:
    """What each comparison has to say, for passing entries too (a note on a pass is still news)."""
    for r in results:
        lines = r.comparison.lines() if r.comparison else []
        if lines:
            err.print(plain(f"{r.entry.name}:"), highlight=False)
        for line in lines:
            err.print(plain(f"  {line}"), highlight=False, soft_wrap=True)
