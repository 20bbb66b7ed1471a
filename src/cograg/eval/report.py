"""The one report every `cograg eval` command writes (SPEC H): summary metrics, one row per item,
the split it ran on, and a gate against a baseline report of the same eval.

A report is JSON (`EvalReport.model_dump_json`) and Markdown (`to_markdown`). `compare` checks the
gated metrics against a baseline: a metric that moved the wrong way by more than the tolerance is
a regression; the rows that passed in the baseline and fail now are listed with it, so a failed
gate says which items broke. A run with another number of items than its baseline (a `--limit`,
changed data), or other items (matched by id), is not comparable with it, and that is not a pass
whatever its figures say.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from cograg.errors import CogragError
from cograg.eval.records import read_text

Direction = Literal["higher", "lower"]
Number = int | float


class EvalReport(BaseModel):
    kind: str = Field(description="which eval: retrieval, answers, routing, verifier, contract, …")
    name: str = Field("", description="the suite entry or data set it ran on")
    split: str = Field(description="calibration | evaluation | all (cograg.eval.splits)")
    split_rule: str = ""
    dataset: str = Field("", description="the labelled file or folder")
    calibrated_on: str = Field("", description="what the measured thresholds/rules were tuned on, where known")
    config: dict[str, Any] = Field(default_factory=dict, description="models, judges, settings that matter")
    summary: dict[str, Number | str | None] = Field(default_factory=dict)
    gates: dict[str, Direction] = Field(default_factory=dict, description="summary metrics the baseline gate checks")
    targets: dict[str, float] = Field(default_factory=dict, description="minimums the spec sets, reported not gated")
    rows: list[dict[str, Any]] = Field(default_factory=list, description="one per item; `id` and `ok` when judged")
    notes: list[str] = Field(default_factory=list)
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def write(self, directory: Path) -> tuple[Path, Path]:
        """`<dir>/<name or kind>.json` and `.md`."""
        stem = self.name or self.kind
        json_path, md_path = directory / f"{stem}.json", directory / f"{stem}.md"
        write_text(json_path, self.model_dump_json(indent=1))
        write_text(md_path, self.to_markdown())
        return json_path, md_path

    def to_markdown(self, *, max_rows: int = 50) -> str:
        title = f"{self.kind}: {self.name}" if self.name else self.kind
        lines = [f"## {title}", "", f"- split: **{self.split}** ({self.split_rule or 'whole file'})"]
        if self.dataset:
            lines.append(f"- data: `{self.dataset}`")
        if self.calibrated_on:
            lines.append(f"- calibrated on: {self.calibrated_on}")
        for key, value in self.config.items():
            lines.append(f"- {key}: `{value}`")
        lines += ["", "| metric | value | target |", "|---|---:|---:|"]
        for key, value in self.summary.items():
            target = self.targets.get(key)
            shown = f"{value:.4f}" if isinstance(value, float) else str(value)
            lines.append(f"| {key} | {shown} | {'' if target is None else f'>= {target}'} |")
        failed = [r for r in self.rows if r.get("ok") is False]
        if failed:
            lines += ["", f"Failed rows ({len(failed)} of {len(self.rows)}; first {min(len(failed), max_rows)}):", ""]
            lines += [f"- `{_short(r.get('id'))}`: {_row_detail(r)}" for r in failed[:max_rows]]
        if self.notes:
            lines += [""] + [f"Note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"


class Regression(BaseModel):
    metric: str
    baseline: Number | None
    current: Number | None
    direction: Direction


class Comparison(BaseModel):
    regressions: list[Regression] = Field(default_factory=list)
    broken_rows: list[dict[str, Any]] = Field(default_factory=list, description="ok in the baseline, failing now")
    fixed_rows: int = 0
    not_comparable: str | None = Field(None, description="why the run cannot be judged against the baseline")
    warnings: list[str] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.regressions and self.not_comparable is None

    def lines(self, *, max_rows: int = 30) -> list[str]:
        out = [f"not comparable: {self.not_comparable}"] if self.not_comparable else []
        out += self.warnings
        for r in self.regressions:
            word = "dropped" if r.direction == "higher" else "rose"
            out.append(f"REGRESSION {r.metric}: {word} from {r.baseline} to {r.current}")
        if self.broken_rows:
            out.append(f"{len(self.broken_rows)} rows passed in the baseline and fail now "
                       f"({self.fixed_rows} the other way):")
            out += [f"  {_short(r.get('id'))}: {_row_detail(r)}" for r in self.broken_rows[:max_rows]]
        return out


def write_text(path: Path, text: str) -> None:
    """Write a report file, making its folder; a folder that cannot be made or written (a file
    in its place, a read-only or virtual file system) is one line naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CogragError(f"cannot write the report to {path.parent}: it is a file, not a folder") from None
    except OSError as exc:
        raise CogragError(f"cannot make the report folder {path.parent}: {exc.strerror or exc}") from None
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CogragError(f"cannot write the report {path}: {exc.strerror or exc}") from None


def load_report(path: Path | str) -> EvalReport:
    if not Path(path).exists():
        raise CogragError(f"baseline {path} does not exist")
    try:
        return EvalReport.model_validate_json(read_text(path, "baseline"))
    except ValueError as exc:
        raise CogragError(f"baseline {path} is not an eval report: {str(exc).splitlines()[0]}") from None


def compare(current: EvalReport, baseline: EvalReport, tolerance: float) -> Comparison:
    """Regressions of `current` against `baseline`: each gated metric may move the wrong way by at
    most `tolerance` (absolute). A gated metric the baseline has and the current report lacks (or
    reports as None) is a regression too. Another number of rows, or rows with ids the baseline
    lacks, makes the two not comparable (a pass rate of 1 item says nothing against one of 11, nor
    one over other questions); the metrics are still compared, for the record."""
    if current.kind != baseline.kind:
        raise CogragError(f"baseline is a {baseline.kind!r} report, this is {current.kind!r}")
    if current.split != baseline.split:
        raise CogragError(f"baseline ran on split {baseline.split!r}, this run on {current.split!r}")
    result = Comparison()
    if len(current.rows) != len(baseline.rows):
        result.not_comparable = (f"{_items(len(current.rows))} against {len(baseline.rows)} in the baseline "
                                 "(another --limit or other data; gate it only against a baseline of the same run)")
    else:
        # the same number of other items (another split rule, edited data) measures something else
        unmatched = Counter(map(_row_key, current.rows)) - Counter(map(_row_key, baseline.rows))
        if unmatched:
            result.not_comparable = (f"{sum(unmatched.values())} of the {_items(len(current.rows))} are not in the "
                                     "baseline (other data or another split; gate it only against a baseline of "
                                     "the same items)")
    gates = {**baseline.gates, **current.gates}
    for metric, direction in gates.items():
        base = baseline.summary.get(metric)
        if not isinstance(base, int | float):
            continue
        now = current.summary.get(metric)
        worse = (not isinstance(now, int | float)
                 or (now < base - tolerance if direction == "higher" else now > base + tolerance))
        if worse:
            result.regressions.append(Regression(metric=metric, baseline=base,
                                                 current=now if isinstance(now, int | float) else None,
                                                 direction=direction))
    before = {_row_key(r): r.get("ok") for r in baseline.rows if "ok" in r}
    for row in current.rows:
        was = before.get(_row_key(row))
        if was is True and row.get("ok") is False:
            result.broken_rows.append(row)
        elif was is False and row.get("ok") is True:
            result.fixed_rows += 1
    return result


def _items(n: int) -> str:
    return f"{n} item" if n == 1 else f"{n} items"


def _row_key(row: dict[str, Any]) -> str:
    return json.dumps([row.get("id"), row.get("group")], ensure_ascii=False)


def _short(value: Any, width: int = 80) -> str:
    text = str(value).replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _row_detail(row: dict[str, Any]) -> str:
    shown = {k: v for k, v in row.items() if k not in ("id", "ok") and not isinstance(v, list | dict)}
    return _short(", ".join(f"{k}={v}" for k, v in shown.items()), 200)
