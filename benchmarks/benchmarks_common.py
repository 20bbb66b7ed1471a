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


# The vector extensions llama.cpp and ONNX Runtime pick their kernels by: the same "AMD EPYC" name
# has come with AVX2 only and with AVX-512 + VNNI on this project's machines, and every model
# figure moves by about 2.5x between the two, so a figure is only read next to these.
_SIMD_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")


def _cpuinfo() -> tuple[str | None, set[str]]:
    """The first CPU's model name and flags from /proc/cpuinfo (None and nothing elsewhere)."""
    name, flags = None, set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name") and name is None:
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, flags


def cpu_model() -> str:
    """The CPU's model name (the machine name where /proc/cpuinfo is missing)."""
    import platform

    return _cpuinfo()[0] or platform.processor() or platform.machine()


def cpu_description() -> str:
    """'<model name>, <extensions>': the model name and the vector extensions it has."""
    flags = _cpuinfo()[1]
    if not flags:
        return cpu_model()
    have = [f for f in _SIMD_FLAGS if f in flags]
    return f"{cpu_model()}, {' '.join(have) if have else 'no AVX2'}"


def run_line(load_start: tuple[float, ...], load_end: tuple[float, ...]) -> str:
    """'Run <UTC minute>, <n> cores (<cpu_description>); load average (1/5/15 min) at start …, at
    end ….' for a benchmark's report; the load averages are `os.getloadavg()` before and after."""
    import os
    from datetime import UTC, datetime

    def loads(v: tuple[float, ...]) -> str:
        return "/".join(f"{x:.1f}" for x in v)

    return (f"Run {datetime.now(UTC).isoformat(timespec='minutes')}, {os.cpu_count()} cores ({cpu_description()}); "
            f"load average (1/5/15 min) at start {loads(load_start)}, at end {loads(load_end)}.")


def publish(heading: str, lines: list[str], write_docs: bool) -> None:
    """Print a report section and, with `write_docs`, put it into docs/benchmarks.md."""
    section = "\n".join(lines) + "\n"
    print(section)
    if write_docs:
        write_section(Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md", heading, section)
