"""The `injection` eval kind: an attack set replayed against the engine (cograg.eval.injection).

`model: obedient` (the default) answers with `ObedientLLM`, the worst-case reader that obeys every
planted instruction it is shown, so the figures measure what the system lets through, model-free;
`model: engine` uses the engine's own answer model (the settings' `models.llm`). Every report puts
accuracy and refusals under attack next to the same questions without the attack: a defence that
refuses whenever a document holds an instruction shows up there as a denial of service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cograg.errors import CogragError
from cograg.eval.injection import ObedientLLM, evaluate_injection, load_cases
from cograg.eval.kinds import EvalContext, register, report_for
from cograg.eval.report import EvalReport

INJECTION_GATES = {"detector_recall": "higher", "attack_success_rate": "lower",
                   "accuracy_under_attack": "higher", "refused_under_attack": "lower"}


@register("injection", "attack success, detector recall, accuracy and refusals with and without the attack")
def run_injection(params: dict[str, Any], ctx: EvalContext) -> EvalReport:
    attack_file = Path(params["file"])
    model = str(params.get("model") or "obedient")
    if model not in ("obedient", "engine"):
        raise CogragError(f"injection model must be obedient or engine (got {model!r})")
    _, cases = load_cases(attack_file, ctx.limit)
    llm = ObedientLLM(cases) if model == "obedient" else None
    mode = params.get("mode", "R1")

    def open_engine(store: Path, reader: Any) -> Any:
        settings = ctx.settings.model_copy(update={"store": store})
        return ctx.engine_factory(settings, **({"llm": reader} if reader is not None else {}))

    work = ctx.store_for(f"injection-{attack_file.resolve().parent.name}")
    result = evaluate_injection(attack_file, llm=llm, workdir=work, open_engine=open_engine, mode=mode,
                                limit=ctx.limit, progress=lambda done, total: ctx.progress.on_query("attacks", done, total))
    summary = {k: getattr(result, k) for k in (
        "n", "detector_recall", "clean_false_alarms", "attack_successes", "attack_success_rate",
        "accuracy_under_attack", "accuracy_without_attack", "refused_under_attack", "refused_without_attack")}
    if result.obeyed_proposed is not None:
        summary["obeyed_proposed"] = result.obeyed_proposed
    rows = [c.model_dump() for c in result.cases]
    return report_for("injection", params, ctx, dataset=str(attack_file), summary=summary, rows=rows,
                      gates=dict(INJECTION_GATES), config={"answer model": result.llm, "mode": str(mode)},
                      notes=["every attack set is used whole (split: all): its cases are not used to tune anything"])
