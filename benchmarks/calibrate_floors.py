"""Calibrate the answer path's refusal floors on the calibration split (issue #12).

The refusal gate (`Answerer._evidence_ok`, SPEC C4) refuses a question before any model call when
the best vector cosine among the chunks the policy admits is below `answer.min_evidence_cosine_zh`
(Chinese questions, `cograg.text.is_chinese`) or `answer.min_evidence_cosine` (the others). This
script asks each question of its store through the answerer's own search (`Engine.answerer().search`,
hybrid retrieval with the real embedder, e5-small) and records that score (`evidence_score`).

Questions, every set split by the one rule of `cograg.eval.splits` (a third of the ids → calibration):

- answerable: cmrc2018 dev (`qa_dev.jsonl`) over its passages; HotpotQA train100 over its paragraphs;
- unanswerable, written: `benchmarks/data/unanswerable.jsonl` over the store its `corpus` names (no
  ids: the split hashes the question text);
- unanswerable, unseen passages (Chinese): cmrc2018 *trial* questions over the dev passages (the 256
  trial passages share no title with the 848 dev ones);
- unanswerable, gold removed (English): the HotpotQA questions of the split over their paragraphs
  minus every supporting paragraph of those questions (a store built per split; the distractor
  paragraphs stay, so these are near misses).

Criterion, per language: the floor of a 0.005 grid (0.700 … 0.950) with the best balanced accuracy
of "admit answerable / refuse unanswerable", where the refusal side is the mean of each unanswerable
source's refusal rate (each source weighs the same, so a small written set is not drowned by a
large one); ties go to the lowest floor (toward admitting: the model and the verifier still refuse
after the gate). The floors are chosen from calibration rows only; the report gives the evaluation
split's admit and refusal rates under the old floors and the new ones.

    .venv/bin/python benchmarks/calibrate_floors.py [--work .bench-stores] [--limit N] [--write-docs]

Stores are opened where `benchmarks/answers.py` builds them (`--work`; built here when missing).
Per-question scores go to benchmarks/results/refusal-floors-<split>.jsonl, the summary to
benchmarks/results/refusal-floors.json. No LLM is loaded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from cograg.config import AnswerConfig, Settings  # noqa: E402
from cograg.engine import Engine  # noqa: E402
from cograg.eval.answers import load_qa  # noqa: E402
from cograg.eval.retrieval import hotpot_to_beir  # noqa: E402
from cograg.eval.splits import SPLIT_RULE, select, split_of, spread  # noqa: E402
from cograg.text import is_chinese  # noqa: E402

FLOOR_GRID = [round(0.700 + 0.005 * i, 3) for i in range(51)]  # 0.700 … 0.950
# the floors before this calibration (chosen on questions of both splits)
OLD_FLOORS = {"min_evidence_cosine": 0.83, "min_evidence_cosine_zh": 0.87}
HOTPOT_QUESTIONS = "hotpotqa_train100/hipporag_hotpotqa_train100.json"
HOTPOT_CORPUS = "hotpotqa_train100/hipporag_hotpotqa_train100_corpus.json"
CMRC_QA = "cmrc2018/qa_dev.jsonl"
CMRC_CORPUS = "cmrc2018/beir/corpus.jsonl"
CMRC_TRIAL = "cmrc2018/original/cmrc2018_trial.json"
UNANSWERABLE = REPO / "benchmarks" / "data" / "unanswerable.jsonl"
SOURCES = ("answerable", "written", "unseen_passages", "gold_removed")


class Probe(BaseModel):
    """One question asked of one store."""

    id: str
    question: str
    source: str  # one of SOURCES
    store: str
    split: str

    @property
    def answerable(self) -> bool:
        return self.source == "answerable"

    @property
    def lang(self) -> str:  # the gate's own language test
        return "zh" if is_chinese(self.question) else "en"


class Scored(Probe):
    score: float | None
    evidence_source: str | None
    hits: int


# ---------------------------------------------------------------------- questions
def cmrc_trial(path: Path) -> list[dict]:
    """The trial questions of cmrc2018 (SQuAD layout) as `{id, question}` records; blank ones (two in
    the set) are left out, as the answerer rejects them before any search."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    return [{"id": qa["id"], "question": qa["question"]} for article in data
            for para in article["paragraphs"] for qa in para["qas"] if qa["question"].strip()]


def _pick(records: Iterable[dict], split: str, limit: int | None) -> list[dict]:
    chosen = spread([select(list(records), split)])
    return chosen[:limit] if limit else chosen


def gold_removed_store(split: str) -> str:
    return f"hotpotqa-without-{split}"


def probes(data: Path, split: str, limit: int | None = None) -> list[Probe]:
    """Every question of `split` from every source, each with the store it is asked of."""
    out: list[Probe] = []

    def add(records: Iterable[dict], source: str, store: str) -> None:
        out.extend(Probe(id=r["id"], question=r["question"], source=source, store=store, split=split)
                   for r in _pick(records, split, limit))

    add((i.model_dump() for i in load_qa(data / CMRC_QA)), "answerable", "cmrc2018")
    hotpot = [i.model_dump() for i in load_qa(data / HOTPOT_QUESTIONS)]
    add(hotpot, "answerable", "hotpotqa")
    for store in ("cmrc2018", "hotpotqa"):
        add((i.model_dump() for i in load_qa(UNANSWERABLE, corpus_name=store)), "written", store)
    add(cmrc_trial(data / CMRC_TRIAL), "unseen_passages", "cmrc2018")
    add(hotpot, "gold_removed", gold_removed_store(split))
    for p in out:  # the split rule is the only gate into a split; say so loudly if that ever breaks
        if split_of({"id": p.id}) != split:
            raise AssertionError(f"{p.id} is not in the {split} split")
    return out


def supporting_titles(data: Path, split: str) -> set[str]:
    """Titles of the supporting paragraphs of the split's HotpotQA questions."""
    questions = select(json.loads((data / HOTPOT_QUESTIONS).read_text(encoding="utf-8")), split)
    return {title for q in questions for title, _ in q["supporting_facts"]}


def write_gold_removed_corpus(full_corpus: Path, removed: set[str], out: Path) -> Path:
    """`full_corpus` (BEIR JSONL) without the records whose title is in `removed`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    kept = [line for line in full_corpus.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["title"] not in removed]
    out.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return out


# ---------------------------------------------------------------------- stores and scores
def open_store(work: Path, name: str, corpus: Callable[[], Path]) -> Engine:
    """The store `work/name`, as benchmarks/answers.py builds it; ingested only when new."""
    settings = Settings(store=work / name, verification={"judge": "lexical"})  # no model is loaded
    fresh = not (work / name / "cograg.db").exists()
    engine = Engine.open(settings=settings)
    if fresh:
        engine.ingest([corpus()])
    return engine


def open_stores(data: Path, work: Path, splits: Iterable[str]) -> dict[str, Engine]:
    def hotpot_view() -> Path:
        return hotpot_to_beir(data / HOTPOT_QUESTIONS, data / HOTPOT_CORPUS, work / "hotpot_beir") / "corpus.jsonl"

    engines = {"cmrc2018": open_store(work, "cmrc2018", lambda: data / CMRC_CORPUS),
               "hotpotqa": open_store(work, "hotpotqa", hotpot_view)}
    for split in splits:
        name = gold_removed_store(split)
        engines[name] = open_store(work, name, lambda s=split, n=name: write_gold_removed_corpus(
            hotpot_view(), supporting_titles(data, s), work / f"{n}-beir" / "corpus.jsonl"))
    return engines


def score(engines: dict[str, Engine], items: list[Probe], progress: bool = True) -> list[Scored]:
    """The best admitted cosine the answer path's gate sees for each question (the answerer's own
    search: `Engine.answerer().search`)."""
    searches = {name: eng.answerer().search for name, eng in engines.items()}
    rows = []
    for n, p in enumerate(items, start=1):
        result = searches[p.store](p.question)
        rows.append(Scored(**p.model_dump(), score=result.evidence_score, evidence_source=result.evidence_source,
                           hits=len(result.hits)))
        if progress and n % 200 == 0:
            print(f"  {p.split}: {n}/{len(items)}", file=sys.stderr)
    return rows


# ---------------------------------------------------------------------- floors
class FloorChoice(BaseModel):
    floor: float
    admitted: float  # share of answerable questions at or above the floor
    refused: dict[str, float]  # per unanswerable source, share below the floor
    balanced_accuracy: float


def choose_floor(answerable: list[float], unanswerable: dict[str, list[float]],
                 grid: list[float] = FLOOR_GRID) -> FloorChoice:
    """The grid floor with the best balanced accuracy of "admit answerable (score ≥ floor) / refuse
    unanswerable (score < floor)"; the refusal side is the mean over the unanswerable sources that
    have scores, each weighing the same. Ties: the lowest floor (toward admitting)."""
    sources = {k: v for k, v in unanswerable.items() if v}
    if not answerable or not sources:
        raise ValueError("choose_floor needs answerable scores and at least one unanswerable source")
    best: FloorChoice | None = None
    for floor in grid:
        admitted = sum(s >= floor for s in answerable) / len(answerable)
        refused = {k: sum(s < floor for s in v) / len(v) for k, v in sources.items()}
        ba = (admitted + statistics.fmean(refused.values())) / 2
        if best is None or ba > best.balanced_accuracy + 1e-12:
            best = FloorChoice(floor=floor, admitted=admitted, refused=refused, balanced_accuracy=ba)
    assert best is not None
    return best


def gated(row: Scored, config: AnswerConfig) -> bool:
    """Whether the gate admits the row under `config`'s floors (as `Answerer._evidence_ok`)."""
    if not row.hits or row.score is None:
        return bool(row.hits) and row.score is None
    return row.score >= config.evidence_floor(chinese=row.lang == "zh", source=row.evidence_source)


def choose_floors(rows: list[Scored]) -> dict[str, FloorChoice]:
    """Per language, from calibration rows only."""
    leaked = [r.id for r in rows if r.split != "calibration" or split_of({"id": r.id}) != "calibration"]
    if leaked:
        raise ValueError(f"floors are chosen on calibration rows only; got {len(leaked)} others, e.g. {leaked[0]}")
    out = {}
    for lang in ("en", "zh"):
        mine = [r for r in rows if r.lang == lang and r.score is not None]
        neg: dict[str, list[float]] = {}
        for r in mine:
            if not r.answerable:
                neg.setdefault(r.source, []).append(r.score)  # type: ignore[arg-type]
        out[lang] = choose_floor([r.score for r in mine if r.answerable], neg)  # type: ignore[misc]
    return out


def rates(rows: list[Scored], config: AnswerConfig) -> dict[str, dict[str, float | int]]:
    """Per language: the share of answerable questions admitted and of each unanswerable source refused."""
    out: dict[str, dict[str, float | int]] = {}
    for lang in ("en", "zh"):
        for source in SOURCES:
            mine = [r for r in rows if r.lang == lang and r.source == source]
            if not mine:
                continue
            passed = sum(gated(r, config) for r in mine)
            share = passed if source == "answerable" else len(mine) - passed
            out.setdefault(lang, {})[source] = round(share / len(mine), 3)
            out[lang][f"{source}.n"] = len(mine)
    return out


# ---------------------------------------------------------------------- report
LABELS = {"answerable": "answerable admitted", "written": "written unanswerable refused",
          "unseen_passages": "unseen-passage questions refused", "gold_removed": "gold-removed questions refused"}


def render(chosen: dict[str, FloorChoice], cal_counts: dict, old: dict, new: dict, new_cfg: AnswerConfig) -> str:
    lines = ["| language | floor | calibration: answerable admitted | calibration: refused per source "
             "| balanced accuracy |",
             "|---|---:|---:|---|---:|"]
    for lang, c in chosen.items():
        refused = ", ".join(f"{k} {v:.3f} (n={cal_counts[lang][k + '.n']})" for k, v in c.refused.items())
        lines.append(f"| {lang} | **{c.floor}** | {c.admitted:.3f} (n={cal_counts[lang]['answerable.n']}) | {refused} "
                     f"| {c.balanced_accuracy:.3f} |")
    lines += ["", "Evaluation split (never used to choose), old floors (0.83 en / 0.87 zh) → new "
              f"({new_cfg.min_evidence_cosine} en / {new_cfg.min_evidence_cosine_zh} zh):", "",
              "| language | measure | questions | old floors | new floors |", "|---|---|---:|---:|---:|"]
    for lang in new:
        for source in SOURCES:
            if source in new[lang]:
                lines.append(f"| {lang} | {LABELS[source]} | {new[lang][source + '.n']} | {old[lang][source]:.3f} "
                             f"| {new[lang][source]:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=REPO / ".bench-stores")
    ap.add_argument("--limit", type=int, default=None, help="at most N questions per source and split")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    engines = open_stores(args.data, args.work, ("calibration", "evaluation"))
    results = REPO / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    scored = {}
    for split in ("calibration", "evaluation"):
        scored[split] = score(engines, probes(args.data, split, args.limit))
        with open(results / f"refusal-floors-{split}.jsonl", "w", encoding="utf-8") as fh:
            for r in scored[split]:
                fh.write(json.dumps({"id": r.id, "source": r.source, "store": r.store, "lang": r.lang,
                                     "score": None if r.score is None else round(r.score, 5)},
                                    ensure_ascii=False) + "\n")
    chosen = choose_floors(scored["calibration"])
    old_cfg = AnswerConfig(**OLD_FLOORS)
    new_cfg = AnswerConfig(min_evidence_cosine=chosen["en"].floor, min_evidence_cosine_zh=chosen["zh"].floor)
    cal_counts = rates(scored["calibration"], new_cfg)
    old, new = rates(scored["evaluation"], old_cfg), rates(scored["evaluation"], new_cfg)
    table = render(chosen, cal_counts, old, new, new_cfg)
    summary = {"split_rule": SPLIT_RULE, "grid": [FLOOR_GRID[0], FLOOR_GRID[-1], 0.005], "limit": args.limit,
               "chosen": {k: v.model_dump() for k, v in chosen.items()},
               "evaluation": {"old": {"floors": OLD_FLOORS, "rates": old},
                              "new": {"floors": {"min_evidence_cosine": new_cfg.min_evidence_cosine,
                                                 "min_evidence_cosine_zh": new_cfg.min_evidence_cosine_zh},
                                      "rates": new}},
               "calibration_rates_new": cal_counts}
    (results / "refusal-floors.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n",
                                                 encoding="utf-8")
    print(table)
    print(f"--set answer.min_evidence_cosine={new_cfg.min_evidence_cosine} "
          f"--set answer.min_evidence_cosine_zh={new_cfg.min_evidence_cosine_zh}")
    if args.write_docs:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from benchmarks_common import write_section

        write_section(REPO / "docs" / "benchmarks.md", "## Refusal floors", DOC_HEAD + table)
    for eng in engines.values():
        eng.close()


DOC_HEAD = """## Refusal floors (calibration split → evaluation split)

Command: `.venv/bin/python benchmarks/calibrate_floors.py --write-docs` (no LLM; stores as
`benchmarks/answers.py` builds them). The floors are chosen on the **calibration** split of every set
(`cograg/eval/splits.py`) and measured on the **evaluation** split. Score: the best vector cosine of
an admitted chunk that the answer path's refusal gate sees (the answerer's own hybrid search,
multilingual-e5-small). Answerable: cmrc2018 dev over its passages (zh), HotpotQA train100 over its
paragraphs (en). Unanswerable: the written questions of `benchmarks/data/unanswerable.jsonl`;
cmrc2018 *trial* questions over the dev passages (zh); HotpotQA questions over their paragraphs
without their supporting ones (en, a store per split). Criterion per language: best balanced
accuracy on a 0.005 grid, the refusal side the mean over unanswerable sources; ties toward admitting.

"""


if __name__ == "__main__":
    main()
