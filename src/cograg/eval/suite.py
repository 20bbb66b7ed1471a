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
"""

from __future__ import annotations

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


def run_suite(path: Path, ctx: EvalContext, *, data: Path, only: list[str] | None = None,
              tolerance: float | None = None, update_baselines: bool = False) -> list[SuiteResult]:
    """Run the suite's entries (or those named in `only`), each compared with its baseline; with
    `update_baselines` each report is written as its entry's baseline instead."""
    suite = load_suite(path)
    results = []
    for entry in suite.evals:
        if only and entry.name not in only:
            continue
        kind = get_kind(entry.kind)
        settings = ctx.settings.with_overrides(entry.settings) if entry.settings else ctx.settings
        entry_ctx = EvalContext(**{**ctx.__dict__, "split": entry.split, "settings": settings,
                                   "limit": ctx.limit if ctx.limit is not None else entry.limit})
        params = resolve_params(entry.params, path.parent, data) | {"name": entry.name}
        report = kind.run(params, entry_ctx)
        comparison = None
        if entry.baseline and update_baselines:
            (path.parent / entry.baseline).parent.mkdir(parents=True, exist_ok=True)
            (path.parent / entry.baseline).write_text(report.model_dump_json(indent=1), encoding="utf-8")
        elif entry.baseline:
            allowed = tolerance if tolerance is not None else (
                entry.tolerance if entry.tolerance is not None else suite.tolerance)
            comparison = compare(report, load_report(path.parent / entry.baseline), allowed)
        results.append(SuiteResult(entry=entry, report=report, comparison=comparison))
    return results
