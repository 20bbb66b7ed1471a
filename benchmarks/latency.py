"""Answer latency against the hardware's own limit (issue: speed).

Three parts, each optional:

- `--raw`: llama-cpp-python alone on the same GGUF, in this process: prompt evaluation and
  generation speed with 1 and with all usable threads (llama.cpp's own counters), the ceiling for
  what `ask` can do with the same model and threads. `--prompt-lookup` adds a generation with
  llama-cpp-python's prompt-lookup decoding against plain decoding on a real answer prompt.
- `--answers N`: N R1 answers with the default settings (half cmrc2018 in Chinese, half HotpotQA in
  English, the first questions of the issue-4 answer benchmark's order): latency, time to the first
  event and to the route, prompt tokens evaluated and served from the KV cache, llama.cpp's prompt
  and generation time inside `ask`, and whether the answer contains the gold answer (compared with
  the issue-4 run on the same questions, `benchmarks/results/answers-default.jsonl`).
- `--budgets 700,1000,1400`: the same questions at several context budgets (latency vs accuracy).

    .venv/bin/python benchmarks/latency.py --raw --answers 30 [--write-docs]
    .venv/bin/python benchmarks/latency.py --rescore benchmarks/results/latency-*.jsonl   # summaries again, no model

Machine load (1-minute load average) is recorded before and after each part: the numbers are only
comparable between runs on similarly loaded machines.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from answers import questions  # noqa: E402
from benchmarks_common import cpu_description  # noqa: E402

from cograg.config import Settings  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.eval.retrieval import hotpot_to_beir  # noqa: E402
from cograg.eval.scoring import contains_gold  # noqa: E402
from cograg.orchestrator.events import EventBus  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


def load() -> float:
    return round(os.getloadavg()[0], 2)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(q * (len(values) - 1))))], 2)


# ----------------------------------------------------------------------------------- raw llama.cpp
def raw(model: Path, threads: list[int], reps: int, prompt_text: str) -> list[dict]:
    import llama_cpp

    rows = []
    for n in threads:
        llm = llama_cpp.Llama(model_path=str(model), n_ctx=4096, n_batch=512, n_threads=n, n_threads_batch=n,
                              verbose=False)
        toks = llm.tokenize(prompt_text.encode())[:1000]
        prefill, decode = [], []
        for _ in range(reps):
            llm.reset()
            llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
            llm.eval(toks)
            for _ in range(64):
                llm.eval([llm.sample(temp=0.0)])
            p = llama_cpp.llama_perf_context(llm._ctx.ctx)
            prefill.append(p.n_p_eval / (p.t_p_eval_ms / 1000))
            decode.append(p.n_eval / (p.t_eval_ms / 1000))
        rows.append({"threads": n, "prompt_tokens": len(toks), "prefill_tok_s": round(statistics.median(prefill), 1),
                     "prefill_all": [round(x, 1) for x in prefill], "decode_tok_s": round(statistics.median(decode), 1),
                     "decode_all": [round(x, 1) for x in decode], "load": load()})
        print("raw", json.dumps(rows[-1]), flush=True)
        llm.close()
    return rows


def prompt_lookup(model: Path, messages: list[dict], threads: int, reps: int) -> dict:
    """Plain decoding vs prompt-lookup decoding on one real answer prompt, same output length."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    out = {}
    for name, draft in (("plain", None), ("prompt_lookup", LlamaPromptLookupDecoding(num_pred_tokens=10))):
        # logits_all must be passed for the draft model: llama-cpp-python 0.3.36 forces it on but
        # sizes its logits buffer from the argument, and fails on prompts longer than n_batch
        llm = llama_cpp.Llama(model_path=str(model), n_ctx=4096, n_batch=512, n_threads=threads,
                              n_threads_batch=threads, verbose=False, draft_model=draft,
                              logits_all=draft is not None)
        times = []
        for _ in range(reps):
            llm.reset()
            t = time.perf_counter()
            r = llm.create_chat_completion(messages=messages, max_tokens=160, temperature=0.0)
            times.append(time.perf_counter() - t)
        out[name] = {"s": round(statistics.median(times), 2), "all": [round(x, 2) for x in times],
                     "completion_tokens": r["usage"]["completion_tokens"], "prompt_tokens": r["usage"]["prompt_tokens"]}
        llm.close()
    print("prompt-lookup", json.dumps(out), flush=True)
    return out


# ---------------------------------------------------------------------------------------- answers
def engines(data: Path, work: Path, settings: dict) -> dict[str, Engine]:
    hot = hotpot_to_beir(data / "hotpotqa_train100/hipporag_hotpotqa_train100.json",
                         data / "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json", work / "hotpot_beir")
    corpora = {"cmrc2018": data / "cmrc2018/beir/corpus.jsonl", "hotpotqa": hot / "corpus.jsonl"}
    out = {}
    for name, corpus in corpora.items():
        eng = Engine.open(settings=Settings(store=work / name, model_cache=work / "models", **settings))
        t = time.perf_counter()
        eng.ingest([corpus])
        print(f"store {name}: ready in {time.perf_counter() - t:.1f} s", flush=True)
        out[name] = eng
    return out


def pick(data: Path, n: int) -> list[dict]:
    qs = [q for q in questions(data, 50, 30) if q["answerable"]]
    cm = [q for q in qs if q["corpus"] == "cmrc2018"][: n - n // 2]
    hp = [q for q in qs if q["corpus"] == "hotpotqa"][: n // 2]
    return [q for pair in zip(cm, hp, strict=False) for q in pair] + cm[len(hp):]


def one_answer(eng: Engine, q: dict, answer_cfg: object | None) -> dict:
    bus = EventBus()
    seen: list[tuple[float, str]] = []
    t0 = time.perf_counter()
    bus.subscribe(lambda ev: seen.append((time.perf_counter() - t0, ev.name)))
    resp = eng.ask(q["question"], mode="R1", bus=bus, config=answer_cfg)
    latency = time.perf_counter() - t0
    calls = eng.trace(resp.trace_id)["model_calls"]
    first = seen[0][0] if seen else None
    route = next((t for t, n in seen if n == "ROUTE_DECIDED"), None)
    return {"question": q["question"], "corpus": q["corpus"], "gold": q["gold"], "answer": resp.answer,
            # a refusal quotes its closest evidence, which may hold the gold words: it still answers nothing
            "fallback": resp.fallback, "contains_gold": not resp.fallback and contains_gold(q["gold"], resp.answer),
            "latency_s": round(latency, 2), "first_event_s": round(first, 3) if first is not None else None,
            "route_decided_s": round(route, 3) if route is not None else None,
            "calls": [{k: c.get(k) for k in ("purpose", "prompt_tokens", "completion_tokens", "cached_tokens",
                                             "prompt_eval_ms", "eval_ms", "duration_ms", "threads")} for c in calls],
            "load": load()}


def summarise(rows: list[dict]) -> dict:
    lat = [r["latency_s"] for r in rows]
    calls = [c for r in rows for c in r["calls"] if c.get("prompt_eval_ms")]
    evaluated = sum(c["prompt_tokens"] - (c["cached_tokens"] or 0) for c in calls)
    prompt_s = sum(c["prompt_eval_ms"] for c in calls) / 1000
    gen = sum(c["completion_tokens"] for c in calls)
    gen_s = sum(c["eval_ms"] or 0 for c in calls) / 1000
    old = {}
    f = RESULTS / "answers-default.jsonl"
    if f.exists():
        old = {r["question"]: r for r in (json.loads(line) for line in open(f, encoding="utf-8"))}
    same = [r for r in rows if r["question"] in old]
    return {
        "n": len(rows), "median_s": round(statistics.median(lat), 2), "p90_s": pct(lat, 0.9),
        "first_event_median_s": round(statistics.median(r["first_event_s"] for r in rows), 3),
        "route_decided_median_s": round(statistics.median(r["route_decided_s"] for r in rows), 3),
        "contains_gold": round(sum(r["contains_gold"] and not r["fallback"] for r in rows) / len(rows), 3),
        "answered": round(sum(not r["fallback"] for r in rows) / len(rows), 3),
        "issue4_contains_gold_same_questions": round(sum(old[r["question"]]["contains_gold"]
                                                         and not old[r["question"]].get("fallback") for r in same)
                                                     / len(same), 3) if same else None,
        "issue4_median_latency_same_questions": round(statistics.median(old[r["question"]]["latency_s"]
                                                                        for r in same), 2) if same else None,
        "prompt_tok_s_in_ask": round(evaluated / prompt_s, 1) if prompt_s else None,
        "gen_tok_s_in_ask": round(gen / gen_s, 1) if gen_s else None,
        "prompt_tokens_median": int(statistics.median(sum(c["prompt_tokens"] for c in r["calls"]) for r in rows)),
        "cached_tokens_median": int(statistics.median(sum(c["cached_tokens"] or 0 for c in r["calls"]) for r in rows)),
        "threads": sorted({c["threads"] for c in calls if c.get("threads")}),
        "load_min_max": [min(r["load"] for r in rows), max(r["load"] for r in rows)],
    }


def run_answers(args: argparse.Namespace, n: int, budget: int | None, tag: str) -> dict:
    engs = engines(args.data, args.work, {"llm": args.profile})
    cfg = None
    if budget is not None:
        cfg = engs["cmrc2018"].settings.answer.model_copy(update={"context_budget_tokens": budget})
    rows = []
    # one unmeasured warm-up (model load, page cache)
    one_answer(engs["hotpotqa"], {"question": "Who designed the Eiffel Tower?", "corpus": "hotpotqa", "gold": []}, cfg)
    out = RESULTS / f"latency-{tag}.jsonl"
    # a re-run with more questions keeps the rows it has (same code, same settings) and adds the rest
    done = {}
    if out.exists() and args.resume:
        done = {r["question"]: r for r in (json.loads(line) for line in open(out, encoding="utf-8"))}
    with open(out, "w", encoding="utf-8") as fh:
        for i, q in enumerate(pick(args.data, n), start=1):
            row = done.get(q["question"]) or one_answer(engs[q["corpus"]], q, cfg)
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
            rows.append(row)
            print(f"[{tag} {i}/{n}] {row['latency_s']}s gold={row['contains_gold']} load={row['load']} "
                  f"{q['question'][:40]}", flush=True)
    for e in engs.values():
        e.close()
    s = summarise(rows)
    print(tag, json.dumps(s), flush=True)
    return s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--raw", action="store_true")
    ap.add_argument("--prompt-lookup", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--answers", type=int, default=0)
    ap.add_argument("--budgets", default="")
    ap.add_argument("--resume", action="store_true", help="keep the rows a previous run of the same tag measured")
    ap.add_argument("--out", type=Path, default=RESULTS / "latency-summary.json")
    ap.add_argument("--rescore", type=Path, nargs="*", default=None,
                    help="only summarise these rows files again (no model): refusals never count as holding the gold")
    args = ap.parse_args()
    if args.rescore is not None:
        for f in args.rescore:
            rows = [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
            print(json.dumps({"rows": str(f), **summarise(rows)}, ensure_ascii=False))
        return
    from cograg.models.compute import usable_cpus
    from cograg.models.model_files import ensure_model

    RESULTS.mkdir(exist_ok=True)
    summary = json.loads(args.out.read_text()) if args.out.exists() else {}
    summary["machine"] = {"cpus": usable_cpus(), "python": platform.python_version(), "machine": platform.machine(),
                          "cpu": cpu_description(),
                          "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    model = ensure_model(args.profile, args.work / "models")
    if args.raw:
        text = (args.data / "cmrc2018/beir/corpus.jsonl").read_text(encoding="utf-8")[:8000]
        summary["raw"] = {"load_before": load(), "rows": raw(model, sorted({1, usable_cpus()}), args.reps, text)}
    if args.prompt_lookup:
        from cograg.prompts import load_prompt

        from cograg.config import AnswerConfig

        # the demo question is English: its system message as the default settings render it
        system = load_prompt("verifiable_answer_system").render(
            max_sentences=5, evidence_first="en" in AnswerConfig().evidence_first)
        doc = (REPO / "examples/corpus/bridge_history.html").read_text(encoding="utf-8")
        import re

        body = re.sub(r"<[^>]+>", " ", doc)
        body = re.sub(r"\s+", " ", body)[:3000]
        user = load_prompt("verifiable_answer_user").render(
            facts=[], blocks=[{"citation_id": 1, "source_name": "bridge_history.html", "text": body}],
            question="Who designed the stone Linden Bridge, and how many arches does it have?", retry_reason=None)
        summary["prompt_lookup"] = prompt_lookup(model, [{"role": "system", "content": system},
                                                         {"role": "user", "content": user}], usable_cpus(), args.reps)
    if args.answers and not args.budgets:
        summary["answers"] = run_answers(args, args.answers, None, f"r1-{args.profile}")
    if args.budgets:
        summary["budgets"] = {}
        for b in [int(x) for x in args.budgets.split(",")]:
            summary["budgets"][str(b)] = run_answers(args, args.answers or 10, b, f"budget{b}-{args.profile}")
    args.out.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(summary, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
