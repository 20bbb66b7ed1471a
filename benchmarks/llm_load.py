"""Loading the default LLM in the background while the turn's thread builds the embedder.

`cograg ask` starts loading the GGUF in a thread (`Lazy.prefetch`) while the main thread builds the
embedder and routes. llama.cpp calls its log callback ~2,100 times during the load (debug and info
lines that cograg drops). A Python callback needs the GIL for each call, and building the
embedder's tokenizer holds the GIL inside one long call of the `tokenizers` extension, so the load
waits for it. Each run is a new process (a load happens once per process); variants alternate:

- `alone`: the LLM loads with nothing else running in the process;
- `beside_python_callback`: it loads in a thread while the main thread builds the embedder, with
  an errors-only log callback written in Python (what cograg had before);
- `beside_native_callback`: the same with cograg's callback as installed now, native code where
  a C compiler is at hand (`cograg.models.llm.native_log`).

    .venv/bin/python benchmarks/llm_load.py --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"


def _python_log_callback() -> None:
    from cograg.models.llm import llama_cpp_library as library

    llama_cpp = library.import_llama_cpp()  # installs cograg's callback; replaced here by its fallback
    library.set_log_callback(llama_cpp, library.python_log_callback(llama_cpp))


def child_load(variant: str) -> dict:
    """One load in this process: the LLM's wall time and, beside it, the embedder's."""
    from cograg.config import Settings
    from cograg.models.embedder import get_embedder
    from cograg.models.llm import get_llm
    from cograg.models.llm.llama_cpp_library import import_llama_cpp

    import_llama_cpp()  # the library and its callback, before the clock starts, in every variant
    if variant == "beside_python_callback":
        _python_log_callback()
    settings = Settings()
    t0 = time.perf_counter()
    done: dict[str, float] = {}

    def load_llm() -> None:
        get_llm(settings.models.llm, cache_dir=settings.model_cache_dir)
        done["llm_s"] = time.perf_counter() - t0

    thread = threading.Thread(target=load_llm)
    thread.start()
    if variant != "alone":
        get_embedder(settings.models.embedder)
        done["embedder_s"] = time.perf_counter() - t0
    thread.join()
    return {k: round(v, 3) for k, v in done.items()}


def run_child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS / "llm-load.json")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child_load(args.child[0])))
        return

    load_before = os.getloadavg()
    rows: list[dict] = []
    for rep in range(args.reps):
        order = ["alone", "beside_python_callback", "beside_native_callback"]
        for variant in order if rep % 2 == 0 else order[::-1]:
            rows.append({"variant": variant, "rep": rep, **run_child([variant])})
            print(json.dumps(rows[-1]), file=sys.stderr)

    def median(variant: str, key: str) -> float | None:
        values = [r[key] for r in rows if r["variant"] == variant and key in r]
        return round(statistics.median(values), 3) if values else None

    summary = {v: {k: median(v, k) for k in ("llm_s", "embedder_s") if median(v, k) is not None}
               for v in dict.fromkeys(r["variant"] for r in rows)}
    report = {"load_average_before": load_before, "load_average_after": os.getloadavg(), "summary": summary,
              "rows": rows}
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(report["summary"], indent=1))


if __name__ == "__main__":
    main()
