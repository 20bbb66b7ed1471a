#!/usr/bin/env python
"""Code-ingest cost by file size: wall time and peak RSS of `cograg ingest --embedder none` on one
generated source file of each size, each in a fresh process measured by `/usr/bin/time -v`.

Two shapes, because they stress different parts: `functions` is many small top-level JS (or
Python) functions (one unit each: the per-unit offset mapping), `expr` is the one-statement
`var a = 1+1+...;` of the original report (one huge unit: tokenising and chunking). Files are
generated into a temporary folder; each run is killed after --timeout seconds (reported as
"timeout"). A file over the code size limit (`cograg.ingest.code_units.MAX_CODE_MB`) shows as
"skipped".

    .venv/bin/python benchmarks/code_ingest.py                      # 1, 2.5, 4, 8 MB, JS functions
    .venv/bin/python benchmarks/code_ingest.py --shape expr --lang js --sizes 1 4
    .venv/bin/python benchmarks/code_ingest.py --limit-mb 1000    # measure past the limit too
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# `cograg ingest`, with code_units.MAX_CODE_MB set first from argv[1] ("-" keeps the default), so
# that sizes over the limit can be measured too
RUN_CLI = ("import sys\nfrom cograg.ingest import code_units\n"
           "if sys.argv[1] != '-': code_units.MAX_CODE_MB = float(sys.argv[1])\n"
           "from cograg.cli import main\nsys.argv = ['cograg', *sys.argv[2:]]\nsys.exit(main())")


def generate(path: Path, mb: float, shape: str, lang: str) -> None:
    target = int(mb * 1_000_000)
    if shape == "expr":
        n = max(1, (target - 10) // 2)
        path.write_text("var a = " + "1+" * n + "1;\n" if lang == "js" else "a = " + "1+" * n + "1\n")
        return
    parts: list[str] = []
    size, i = 0, 0
    while size < target:
        if lang == "js":
            s = f"// add{i}\nfunction add{i}(a, b) {{\n  const c = a + b * {i};\n  return c - {i};\n}}\n\n"
        else:
            s = f"# add{i}\ndef add{i}(a, b):\n    c = a + b * {i}\n    return c - {i}\n\n\n"
        parts.append(s)
        size += len(s)
        i += 1
    path.write_text("".join(parts))


def measure(path: Path, store: Path, timeout: float, limit_mb: str) -> dict[str, object]:
    cmd = ["/usr/bin/time", "-v", "timeout", str(timeout), sys.executable, "-c", RUN_CLI, limit_mb,
           "ingest", str(path.parent), "--store", str(store), "--embedder", "none"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    err = proc.stderr
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", err)
    seconds = None
    if wall:
        h, m, s = wall.groups()
        seconds = int(h or 0) * 3600 + int(m) * 60 + float(s)
    skipped = re.search(r"skipped (\d+)", proc.stdout)
    outcome = "timeout" if proc.returncode == 124 else ("skipped" if skipped and int(skipped.group(1)) else "ok")
    if proc.returncode not in (0, 124):
        outcome = f"rc={proc.returncode}"
    return {"wall_s": seconds, "max_rss_mb": int(rss.group(1)) / 1024 if rss else None, "outcome": outcome}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=float, nargs="+", default=[1, 2.5, 4, 8], help="file sizes in MB")
    ap.add_argument("--shape", choices=["functions", "expr"], default="functions")
    ap.add_argument("--lang", choices=["js", "py"], default="js")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--limit-mb", default="-", help="set MAX_CODE_MB for the run (default: keep it)")
    ap.add_argument("--json", action="store_true", help="one JSON line per size")
    args = ap.parse_args()
    print(f"{'MB':>5} {'shape':>9} {'lang':>4} {'wall_s':>8} {'max_rss_MB':>10}  outcome")
    for mb in args.sizes:
        with tempfile.TemporaryDirectory(prefix="cograg-code-") as tmp:
            src = Path(tmp) / "src"
            src.mkdir()
            generate(src / f"big.{args.lang}", mb, args.shape, args.lang)
            row = {"mb": mb, "shape": args.shape, "lang": args.lang,
                   **measure(src / f"big.{args.lang}", Path(tmp) / "store", args.timeout, args.limit_mb)}
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            wall = f"{row['wall_s']:.1f}" if row["wall_s"] is not None else "?"
            rss = f"{row['max_rss_mb']:.0f}" if row["max_rss_mb"] is not None else "?"
            print(f"{mb:>5} {args.shape:>9} {args.lang:>4} {wall:>8} {rss:>10}  {row['outcome']}", flush=True)


if __name__ == "__main__":
    main()
