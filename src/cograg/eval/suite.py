"""`cograg eval all --suite FILE`: run a list of evals, each against its baseline (SPEC H).

A suite is YAML:

    tolerance: 0.01            # default allowed drop of a gated metric
    evals:
      - name: retrieval-cmrc2018-bm25
        kind: retrieval
        split: evaluation       # default evaluation
        limit: 300
        baseline: baselines/retrieval-cmrc2018-bm25.json   # relative to the suite file
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
from cograg.eval.report import Comparison, EvalReport, compare, load_report
from cograg.eval.splits import SPLIT_CHOICES

PATH_PARAMS = {"directory", "file", "qa", "corpus", "store"}


class SuiteEntry(BaseModel):
    name: str
    kind: str
    split: str = "evaluation"
    limit: int | None = None
    baseline: str | None = None
    tolerance: float | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class Suite(BaseModel):
    tolerance: float = 0.01
    evals: list[SuiteEntry]


class SuiteResult(BaseModel):
    entry: SuiteEntry
    report: EvalReport
    comparison: Comparison | None = None


def load_suite(path: Path) -> Suite:
    try:
        suite = Suite.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise CogragError(f"no suite file {path}") from None
    except (yaml.YAMLError, ValidationError) as exc:
        raise CogragError(f"invalid suite {path}: {str(exc).splitlines()[0]}") from None
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
        out[key] = value
    return out


def run_suite(path: Path, ctx: EvalContext, *, data: Path, only: list[str] | None = None,
              tolerance: float | None = None) -> list[SuiteResult]:
    suite = load_suite(path)
    results = []
    for entry in suite.evals:
        if only and entry.name not in only:
            continue
        kind = get_kind(entry.kind)
        entry_ctx = EvalContext(**{**ctx.__dict__, "split": entry.split,
                                   "limit": ctx.limit if ctx.limit is not None else entry.limit})
        params = resolve_params(entry.params, path.parent, data) | {"name": entry.name}
        report = kind.run(params, entry_ctx)
        comparison = None
        if entry.baseline:
            allowed = tolerance if tolerance is not None else (
                entry.tolerance if entry.tolerance is not None else suite.tolerance)
            comparison = compare(report, load_report(path.parent / entry.baseline), allowed)
        results.append(SuiteResult(entry=entry, report=report, comparison=comparison))
    return results
