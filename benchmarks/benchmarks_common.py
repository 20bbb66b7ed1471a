"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, heading: str, section: str) -> None:
    """Replace the `heading` section of a Markdown file (or append it), keeping everything else."""
    path.parent.mkdir(exist_ok=True)
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    start = old.find(heading)
    if start == -1:
        new = old.rstrip() + "\n\n" + section
    else:
        nxt = old.find("\n## ", start + len(heading))
        new = old[:start] + section.rstrip() + "\n" + (old[nxt:] if nxt != -1 else "")
    path.write_text(new.rstrip() + "\n", encoding="utf-8")


def report_on_default_llm(model_cache: Path, run, as_json: bool) -> None:
    """Load the default GGUF, call `run(llm)` for its rows and `summary` and print the report
    (the summary alone without `as_json`), with the load average before and after."""
    import json
    import os

    from cograg.models.llm.llama_cpp import LlamaCppLLM
    from cograg.models.model_files import ensure_model

    llm = LlamaCppLLM(ensure_model("default", model_cache))
    load_before = os.getloadavg()
    rows, summary = run(llm)
    report = {"load_average_before": load_before, "load_average_after": os.getloadavg(), "summary": summary,
              "rows": rows}
    llm.close()
    print(json.dumps(report if as_json else report["summary"], ensure_ascii=False, indent=1))
