"""`cograg eval all --suite FILE`: run a list of evals, each against its baseline (SPEC H).

A suite is YAML:

    tolerance: 0.01            # default allowed drop of a gated metric
    evals:
      - name: retrieval-cmrc2018-bm25
        kind: retrieval
        split: evaluation       # default evaluation
        limit: 300
        baseline: baselines/retrieval-cmrc2018-bm25.json   # relative to the suite file
        settings: {models.embedder: none}
        params: {directory: "{data}/cmrc2018/beir_chunks", qrels: dev, modes: [bm25]}

In params, `{data}` is the shared data folder (`--data`, `$COGRAG_EVAL_DATA`, else
../shared/data) and `{suite}` the suite file's folder; relative paths are taken from the suite's folder.

A run passes only when something was gated and every gate passed: a name in `only` that is not an
entry is refused before anything runs, a run in which no entry was compared with a baseline does
not pass, and a gate whose run has another number of items than its baseline (`--limit`, changed
data) is "not comparable", not a pass.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from cograg.errors import CogragError
from cograg.eval.kinds import EvalContext, get_kind
from cograg.eval.records import field_problem, read_text
from cograg.eval.report import Comparison, EvalReport, compare, load_report
from cograg.eval.splits import SPLIT_CHOICES

PATH_PARAMS = {"directory", "file", "qa", "corpus", "store", "hotpot"}


class SuiteEntry(BaseModel):
    name: str
    kind: str
    split: str = "evaluation"
    limit: int | None = Field(None, ge=1)
    baseline: str | None = None
    tolerance: float | None = Field(None, ge=0, allow_inf_nan=False)
    settings: dict[str, Any] = Field(default_factory=dict, description="section.key: value overrides")
    params: dict[str, Any] = Field(default_factory=dict)


class Suite(BaseModel):
    tolerance: float = Field(0.01, ge=0, allow_inf_nan=False)
    evals: list[SuiteEntry]


class SuiteResult(BaseModel):
    entry: SuiteEntry
    report: EvalReport
    comparison: Comparison | None = None
    baseline_written: bool = False

    @property
    def gate(self) -> str:
        """pass | FAIL | not comparable | no baseline | baseline written"""
        if self.comparison is None:
            return "baseline written" if self.baseline_written else "no baseline"
        if self.comparison.not_comparable:
            return "not comparable"
        return "pass" if self.comparison.passed else "FAIL"


class UnknownEntry(CogragError):
    """`only` names an entry the suite does not have: a usage error, raised before anything runs
    (a typo used to drop the entry silently, and a run of nothing passed)."""


def suite_verdict(results: list[SuiteResult]) -> str | None:
    """Why the run does not pass, or None when it does: a run passes only when at least one entry
    was compared with its baseline and every comparison passed (a run of nothing, or of entries
    without baselines, checked nothing)."""
    gated = [r for r in results if r.comparison is not None]
    if not gated:
        return ("no eval ran" if not results
                else f"no gate ran: none of the {len(results)} evals run was compared with a baseline")
    bad = [r for r in gated if r.gate != "pass"]
    if bad:
        return f"{len(bad)} of {len(gated)} gates did not pass: " + ", ".join(f"{r.entry.name} ({r.gate})" for r in bad)
    return None


def load_suite(path: Path) -> Suite:
    try:
        suite = Suite.model_validate(yaml.safe_load(read_text(path, "suite file")))
    except yaml.YAMLError as exc:
        raise CogragError(f"invalid suite {path}: {str(exc).splitlines()[0]}") from None
    except ValidationError as exc:  # its first line only says "1 validation error for Suite"
        raise CogragError(f"invalid suite {path}: {field_problem(exc)}") from None
    for e in suite.evals:
        if e.split not in SPLIT_CHOICES:
            raise CogragError(f"suite entry {e.name}: split must be one of {', '.join(SPLIT_CHOICES)}")
    return suite


def resolve_params(params: dict[str, Any], suite_dir: Path, data: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, str):
            value = value.replace("{data}", str(data)).replace("{suite}", str(suite_dir))
            if key in PATH_PARAMS and not Path(value).is_absolute():
                value = str(suite_dir / value)
        elif isinstance(value, list) and key in PATH_PARAMS:
            value = [resolve_params({key: v}, suite_dir, data)[key] for v in value]
        out[key] = value
    return out


def check_only(suite: Suite, only: list[str], path: Path) -> None:
    """Refuse names in `only` that are no entry of the suite, naming the closest entries."""
    known = [e.name for e in suite.evals]
    if not only:
        raise UnknownEntry(f"--only names no eval (the evals of {path}: {', '.join(known) or 'none'})")
    unknown = [name for name in only if name not in known]
    if not unknown:
        return
    parts, unmatched = [], False
    for name in unknown:
        near = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
        unmatched = unmatched or not near
        parts.append(f"{name!r}" + (f" (did you mean {' or '.join(map(repr, near))}?)" if near else ""))
    listed = f"; its evals: {', '.join(known)}" if unmatched else ""
    raise UnknownEntry(f"--only: {path} has no eval {', '.join(parts)}{listed}")


def entry_limit(cli_limit: int | None, own: int | None) -> int | None:
    """`--limit` caps every entry, those without a limit of their own too (a quick look at the whole
    suite must not run an unlimited model eval in full); it never raises an entry's own limit."""
    limits = [n for n in (cli_limit, own) if n is not None]
    return min(limits) if limits else None


def run_suite(path: Path, ctx: EvalContext, *, data: Path, only: list[str] | None = None,
              tolerance: float | None = None, update_baselines: bool = False) -> list[SuiteResult]:
    """Run the suite's entries (or those named in `only`, each of which must be one), each compared
    with its baseline; with `update_baselines` each report is written as its entry's baseline instead."""
    suite = load_suite(path)
    if only is not None:
        check_only(suite, only, path)
    results = []
    for entry in suite.evals:
        if only is not None and entry.name not in only:
            continue
        kind = get_kind(entry.kind)
        settings = ctx.settings.with_overrides(entry.settings) if entry.settings else ctx.settings
        entry_ctx = EvalContext(**{**ctx.__dict__, "split": entry.split, "settings": settings,
                                   "limit": entry_limit(ctx.limit, entry.limit)})
        params = resolve_params(entry.params, path.parent, data) | {"name": entry.name}
        report = kind.run(params, entry_ctx)
        comparison, written = None, False
        if entry.baseline and update_baselines:
            (path.parent / entry.baseline).parent.mkdir(parents=True, exist_ok=True)
            (path.parent / entry.baseline).write_text(report.model_dump_json(indent=1), encoding="utf-8")
            written = True
        elif entry.baseline:
            allowed = tolerance if tolerance is not None else (
                entry.tolerance if entry.tolerance is not None else suite.tolerance)
            comparison = compare(report, load_report(path.parent / entry.baseline), allowed)
        results.append(SuiteResult(entry=entry, report=report, comparison=comparison, baseline_written=written))
    return results
