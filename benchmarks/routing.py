"""Routing F1 of the Router/Gate (SPEC D1, SPEC H: routing F1 on a labelled set, target >= 0.85).

Labelled set: benchmarks/data/routing.jsonl (question, route, lang, note, split), Chinese and English,
all five routes; splits `dev`, `heldout`, `heldout2` (see SPLIT_NOTE: only heldout2 was never used to
change a rule). Scorers: `rules` (deterministic rules only), `fast` / `default` (rules blended
with the embedded 0.5B / 1.5B LLM through the route_scores prompt), or any LLM spec
(`gguf:...`, `openai:...`). Route labels only: no preflight retrieval, so DOC_GROUNDED is R1.

    COGRAG_LLM_THREADS=1 .venv/bin/python benchmarks/routing.py --scorers rules,fast,default \
        [--refresh-llm-cache] [--write-docs]

Per-question results go to benchmarks/results/routing-<scorer>.jsonl; the models' answers are cached
in benchmarks/results/routing-llm-<scorer>.json, so a re-run after a rule-table change is instant.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from benchmarks_common import write_section  # noqa: E402

from cograg.control.models import ROUTES  # noqa: E402
from cograg.control.router import LLMRouteAssessment, LLMRouteScorer, Router, load_rules  # noqa: E402
from cograg.eval.scoring import classification_report  # noqa: E402

DATA = REPO / "benchmarks" / "data" / "routing.jsonl"


def load_set(path: Path = DATA) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def f1_report(gold: list[str], pred: list[str]) -> dict:
    """Per-route precision/recall/F1, macro-F1 over the five routes, accuracy and the confusion matrix."""
    rep = classification_report(gold, pred, ROUTES)
    return {"macro_f1": rep["macro_f1"], "accuracy": rep["accuracy"], "per_route": rep["per_label"],
            "confusion": rep["confusion"]}


class CachedScorer:
    """An LLMRouteScorer whose assessments are kept in a JSON file keyed by model, prompt version and
    question. The embedded models decode greedily with a fixed seed, so a cached assessment is what
    the model would say again; re-running the benchmark after a rule-table change then costs no LLM
    time. Failures are not cached (they are re-tried)."""

    def __init__(self, spec: str, model_dir: Path, cache_file: Path | None, *, refresh: bool = False) -> None:
        self.spec = spec
        self.refresh = refresh
        self.model_dir = model_dir
        self.cache_file = cache_file
        self._scorer: LLMRouteScorer | None = None
        from cograg.prompts import load_prompt

        self.prompt_version = load_prompt("route_scores").version
        self.name = f"llm:{spec}"
        self.cache: dict[str, dict] = {}
        self.last_call_ms: float | None = None  # the model's latency for the last question (cached or fresh)
        self.last_from_cache = False
        if cache_file is not None and cache_file.exists():
            self.cache = json.loads(cache_file.read_text(encoding="utf-8"))

    def _key(self, question: str) -> str:
        return f"{self.spec}|{self.prompt_version}|{question}"

    def assess(self, question: str, *, session_summary: str | None = None) -> LLMRouteAssessment:
        key = self._key(question)
        if session_summary is None and key in self.cache and not self.refresh:
            entry = self.cache[key]
            self.last_call_ms, self.last_from_cache = entry.get("ms"), True
            return LLMRouteAssessment.model_validate(entry["assessment"])
        if self._scorer is None:
            from cograg.models.llm import get_llm

            self._scorer = LLMRouteScorer(get_llm(self.spec, cache_dir=self.model_dir), timeout_s=120.0)
            self.name = self._scorer.name
        t0 = time.perf_counter()
        out = self._scorer.assess(question, session_summary=session_summary)
        self.last_call_ms = round((time.perf_counter() - t0) * 1000, 1)
        if session_summary is None and self.cache_file is not None:
            self.cache[key] = {"assessment": out.model_dump(), "ms": self.last_call_ms}
            self.cache_file.write_text(json.dumps(self.cache, ensure_ascii=False, indent=0), encoding="utf-8")
        return out


def make_router(scorer: str, model_dir: Path, llm_cache: Path, refresh: bool) -> Router:
    rules = load_rules()
    if scorer == "rules":
        return Router(rules)
    safe = scorer.replace("/", "_").replace(":", "_")
    return Router(rules, llm_scorer=CachedScorer(scorer, model_dir, llm_cache / f"routing-llm-{safe}.json",
                                                 refresh=refresh))


def run_scorer(scorer: str, rows: list[dict], cache_dir: Path, out_dir: Path, refresh: bool) -> dict:
    router = make_router(scorer, cache_dir, out_dir, refresh)
    safe = scorer.replace("/", "_").replace(":", "_")
    out_path = out_dir / f"routing-{safe}.jsonl"
    out_dir.mkdir(parents=True, exist_ok=True)
    gold, pred, latencies, llm_errors = [], [], [], 0
    by_lang: dict[str, tuple[list[str], list[str]]] = {}
    by_split: dict[str, tuple[list[str], list[str]]] = {}
    with out_path.open("w", encoding="utf-8") as f:
        for row in rows:
            t0 = time.perf_counter()
            llm_scorer = router.llm_scorer
            if llm_scorer is not None:
                llm_scorer.last_call_ms, llm_scorer.last_from_cache = None, False
            d = router.route(row["question"])
            ms = (time.perf_counter() - t0) * 1000
            if llm_scorer is not None and llm_scorer.last_from_cache and llm_scorer.last_call_ms is not None:
                # a cached answer costs nothing now: count what the model call cost when it was made
                ms += llm_scorer.last_call_ms
            latencies.append(ms)
            llm_errors += d.llm_error is not None
            gold.append(row["route"])
            pred.append(d.route)
            for groups, key in ((by_lang, row["lang"]), (by_split, row.get("split", "dev"))):
                g, p = groups.setdefault(key, ([], []))
                g.append(row["route"])
                p.append(d.route)
            f.write(json.dumps({"question": row["question"], "gold": row["route"], "route": d.route, "mode": d.mode,
                                "lang": row["lang"], "split": row.get("split", "dev"), "scores": d.scores.model_dump(),
                                "llm_scores": d.llm_scores.model_dump() if d.llm_scores else None,
                                "intent": d.intent, "llm_error": d.llm_error, "reasons": d.reasons,
                                "ms": round(ms, 1)}, ensure_ascii=False) + "\n")
            if d.route != row["route"]:
                print(f"  [{scorer}] miss: {row['route']} -> {d.route}: {row['question']}", file=sys.stderr)
    report = f1_report(gold, pred)
    report["scorer"] = scorer
    report["gold"], report["pred"] = gold, pred
    report["n"] = len(rows)
    report["llm_errors"] = llm_errors
    report["median_ms"] = round(statistics.median(latencies), 1)
    report["by_lang"] = {lang: f1_report(g, p)["macro_f1"] for lang, (g, p) in sorted(by_lang.items())}
    report["by_split"] = {split: f1_report(g, p) for split, (g, p) in sorted(by_split.items())}
    report["rules_version"] = router.rules.version
    report["llm_weight"] = router.rules.llm_weight
    report["rule_floor"] = list(router.rules.rule_floor)
    if router.llm_scorer is not None:
        report["prompt_version"] = router.llm_scorer.prompt_version
        report["model"] = router.llm_scorer.name
    return report


SCORER_LABEL = {"rules": "rules only", "fast": "rules + fast LLM (Qwen2.5-Coder-0.5B Q4_K_M)",
                "default": "rules + default LLM (Qwen2.5-Coder-1.5B Q4_K_M)"}


SPLITS = ("dev", "heldout", "calibration", "heldout2")
SPLIT_NOTE = (
    "The set has three splits, written at different times so that one of them is truly unseen: "
    "`dev` was written before any rule, and the rules were then written with it in view (in-sample); "
    "`heldout` was written after `routing_rules@1` was frozen (rules@1 scored macro-F1 0.767 on it), "
    "and its misses led to the general fixes of `routing_rules@2`, so it is in-sample for @2 too; "
    "`heldout2` was written after @2 was frozen. `routing_rules@3` differs from @2 by two false-positive fixes "
    "found on ad-hoc questions outside the set (a bare English \"token\" counted as a secret; a lone \"Why?\" "
    "counted as a cause chain; rules-only heldout2 unchanged) and by the blending settings, chosen on the dev and "
    "heldout splits (by principle: the model may escalate, never relax; on dev+heldout a weight of 0.5 would "
    "have scored about 0.01 higher) plus one guard from a dev miss (a model's ambiguity score is not acted on "
    "for a greeting or a question about the assistant). Nothing was changed after seeing heldout2 results, so "
    "its column is the honest estimate for new questions. "
    "`routing_rules@5` was written against a fourth part, `calibration`: 144 questions (en 75, zh 69) written afterwards in new styles (small talk, questions about the assistant, public contact details, own-password help, private data of named or grouped people, admissions of lacking a right) to find where the rules did not generalise; its misses led to general pattern fixes. Only heldout2's summary figures (macro-F1 0.821, lowest on FAST_PATH and DOC_GROUNDED) were known when that work began, never its questions or per-item rows, and heldout2 was scored once afterwards."
)


FINDINGS = (
    "Reading: the deterministic rules carry the routing; on unseen questions (heldout2) they miss "
    "short greetings and style requests they have no pattern for (\"Morning!\", \"谢啦\", \"以后请用简体中文回答我\"), "
    "two comparisons without a comparison word (\"same engineer\", \"相差多少\") and three policy violations "
    "phrased in ways the patterns do not know. By design the models cannot repair most of these: they may "
    "not lower retrieval_need (no R0 on a model's word) and cannot BLOCK without rule evidence; and the "
    "embedded 0.5B/1.5B models did not raise complexity enough on the two comparisons. What they can do, "
    "escalate, they sometimes do wrongly (a style request to CLARIFY, a meta question to retrieval). So "
    "with these models the LLM half costs 4-6 s per turn and no accuracy; rules only is the sensible "
    "default, and the LLM scorer is worth enabling only with a stronger model."
)


def _label(rep: dict) -> str:
    return SCORER_LABEL.get(rep["scorer"], rep["scorer"])


def render(reports: list[dict], command: str, n: int, counts: dict[str, int], langs: dict[str, int],
           split_sizes: dict[str, int]) -> str:
    lines = [
        "## Routing",
        "",
        f"Command: `{command}`  ",
        f"Labelled set: `benchmarks/data/routing.jsonl`, {n} hand-written questions "
        f"({', '.join(f'{k} {v}' for k, v in langs.items())}; "
        + ", ".join(f"{r} {counts.get(r, 0)}" for r in ROUTES)
        + "): greetings/thanks/meta, single facts about the sample corpus, cmrc2018 and HotpotQA-style questions, "
        "comparisons, bridge and cause-chain questions, unresolved references, policy violations. "
        "Route labels only (no preflight retrieval, so DOC_GROUNDED is not split into R1/R2 here). "
        f"Rule table `{reports[0]['rules_version']}`; the LLM rows blend the model's scores (prompt `route_scores@1`, "
        f"grammar-constrained JSON) into the rule scores with weight {reports[0]['llm_weight']} for the model, "
        f"the rule score staying a floor for {', '.join(reports[0]['rule_floor']) or 'no signal'} (the model may "
        "escalate a turn, never relax what the rules found). Target (SPEC H): macro-F1 >= 0.85. "
        "Per-question results: `benchmarks/results/routing-<scorer>.jsonl`; model answers are cached in "
        "`benchmarks/results/routing-llm-<scorer>.json` (greedy decoding, so a re-run gives the same scores; "
        "`--refresh-llm-cache` calls the model for every question again, as the run behind these numbers did; "
        "the latency column is the model call's latency either way).",
        "",
        SPLIT_NOTE + " Split sizes: " + ", ".join(f"{k} {split_sizes.get(k, 0)}" for k in SPLITS) + ".",
        "",
        "| scorer | macro-F1 (all) | macro-F1 heldout2 (unseen) | accuracy | macro-F1 en / zh | "
        + " | ".join(f"F1 {r}" for r in ROUTES) + " | LLM errors | median ms/question |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(ROUTES) + "---:|---:|",
    ]
    for rep in reports:
        langs_f1 = " / ".join(str(rep["by_lang"].get(k, "-")) for k in ("en", "zh"))
        unseen = rep["by_split"].get("heldout2", {}).get("macro_f1", "-")
        lines.append(
            f"| {_label(rep)} | {rep['macro_f1']} | {unseen} | {rep['accuracy']} | {langs_f1} | "
            + " | ".join(str(rep["per_route"][r]["f1"]) for r in ROUTES)
            + f" | {rep['llm_errors']} | {rep['median_ms']} |")
    lines += ["", "Macro-F1 per split:", "", "| scorer | " + " | ".join(SPLITS) + " |", "|---|" + "---:|" * len(SPLITS)]
    for rep in reports:
        lines.append(f"| {_label(rep)} | "
                     + " | ".join(str(rep["by_split"].get(k, {}).get("macro_f1", "-")) for k in SPLITS) + " |")
    base = next((r for r in reports if r["scorer"] == "rules"), None)
    if base is not None and len(reports) > 1:
        lines += ["", "What the models change against rules only (same questions):", ""]
        for rep in reports:
            if rep is base:
                continue
            fixed = sum(p != b and p == g for g, b, p in zip(base["gold"], base["pred"], rep["pred"]))
            broken = sum(p != b and b == g for g, b, p in zip(base["gold"], base["pred"], rep["pred"]))
            lines.append(f"- {_label(rep)}: {fixed} questions fixed, {broken} broken, median model call "
                         f"{rep['median_ms'] / 1000:.1f} s per turn (one CPU thread).")
        lines += ["", FINDINGS]
    for rep in reports:
        lines += ["", f"Confusion matrix, {_label(rep)} (rows gold, columns predicted):", "",
                  "| gold \\ predicted | " + " | ".join(ROUTES) + " |",
                  "|---|" + "---:|" * len(ROUTES)]
        for g in ROUTES:
            lines.append(f"| {g} | " + " | ".join(str(rep["confusion"][g][p]) for p in ROUTES) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scorers", default="rules", help="comma-separated: rules, fast, default, or an LLM spec")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--cache-dir", type=Path, default=REPO / ".bench-stores" / "models")
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--refresh-llm-cache", action="store_true",
                    help="call the LLM for every question and rewrite benchmarks/results/routing-llm-<scorer>.json "
                         "(default: reuse its answers and only call the model for new questions)")
    ap.add_argument("--write-docs", action="store_true", help="write the ## Routing section of docs/benchmarks.md")
    args = ap.parse_args()
    rows = load_set(args.data)
    reports = []
    for scorer in [s.strip() for s in args.scorers.split(",") if s.strip()]:
        t0 = time.perf_counter()
        rep = run_scorer(scorer, rows, args.cache_dir, args.out_dir, args.refresh_llm_cache)
        rep["wall_s"] = round(time.perf_counter() - t0, 1)
        reports.append(rep)
        print(json.dumps({k: rep[k] for k in ("scorer", "macro_f1", "accuracy", "by_lang", "llm_errors", "median_ms",
                                              "wall_s")}, ensure_ascii=False))
        print(json.dumps(rep["per_route"], ensure_ascii=False))
    summary = [{k: v for k, v in rep.items() if k not in ("gold", "pred")} for rep in reports]
    (args.out_dir / "routing-summary.json").write_text(json.dumps(summary, ensure_ascii=False, indent=1), encoding="utf-8")
    counts: dict[str, int] = {}
    langs: dict[str, int] = {}
    split_sizes: dict[str, int] = {}
    for r in rows:
        counts[r["route"]] = counts.get(r["route"], 0) + 1
        langs[r["lang"]] = langs.get(r["lang"], 0) + 1
        split_sizes[r.get("split", "dev")] = split_sizes.get(r.get("split", "dev"), 0) + 1
    command = (".venv/bin/python benchmarks/routing.py --scorers " + args.scorers
               + (" --refresh-llm-cache" if args.refresh_llm_cache else "") + " --write-docs")
    if os.environ.get("COGRAG_LLM_THREADS"):
        command = f"COGRAG_LLM_THREADS={os.environ['COGRAG_LLM_THREADS']} " + command
    section = render(reports, command, len(rows), counts, langs, split_sizes)
    print(section)
    if args.write_docs:
        write_section(REPO / "docs" / "benchmarks.md", "## Routing", section)


if __name__ == "__main__":
    main()
