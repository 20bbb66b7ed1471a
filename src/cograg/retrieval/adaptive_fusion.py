"""Adaptive convex fusion (SPEC B1): per-query weights between BM25 and vectors.

RRF treats both rankers as equals, so a weak ranker drags a strong one down. Here the two score
lists are min-max normalised and combined convexly, `(1 - w)·bm25 + w·vector`. The weight `w`
starts from a base calibrated per query language (on a calibration split only, see
`benchmarks/retrieval_fusion.py`) and moves toward the ranker that is more confident for this
query: a ranker whose best score stands far above the rest of its own top list (a high z-score of
its top hit) has found something specific; a flat list has not.

Every decision is returned as a `FusionDecision` (weights, signals, the reason in words) so
`search --explain` and the answer trace can show why the ranking is what it is.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from cograg.datafiles import first_problem, read_utf8
from cograg.errors import ConfigFileError

K = TypeVar("K", bound=Hashable)

QueryLanguage = Literal["zh", "en"]
Normalisation = Literal["minmax", "zscore"]

_CJK = ("\u3400", "\u4dbf"), ("\u4e00", "\u9fff"), ("\uf900", "\ufaff"), ("\u3040", "\u30ff"), ("\uac00", "\ud7af")


class FusionCalibration(BaseModel):
    """What adaptive fusion was calibrated to. Defaults: the values chosen by
    `benchmarks/retrieval_fusion.py --calibrate` on the calibration splits of cmrc2018/beir_chunks
    (zh) and the hotpotqa_train100 BEIR view (en); see docs/benchmarks.md."""

    base_vector_weight: dict[str, float] = Field(
        default_factory=lambda: {"zh": 0.6, "en": 0.7},
        description="vector weight before the per-query shift, by query language")
    confidence_gain: float = Field(0.2, ge=0.0, le=1.0,
                                   description="how far the weight moves toward the more peaked ranker")
    peak_depth: int = Field(20, ge=3, le=1000, description="top scores a ranker's peak is measured over")
    normalisation: Normalisation = Field("zscore", description="how each list's scores are put on one scale")
    min_weight: float = Field(0.1, ge=0.0, le=1.0)
    max_weight: float = Field(0.9, ge=0.0, le=1.0)
    calibrated_on: str = ("cmrc2018/beir_chunks dev + hotpotqa_train100 train, calibration splits "
                          "(cograg.eval.splits: a third of the query ids)")


class CalibrationFileError(ConfigFileError):
    """The fusion calibration file cannot be read or is invalid."""


class FusionSignals(BaseModel):
    """Per-query evidence of which ranker to trust."""

    language: QueryLanguage
    query_chars: int
    bm25_peak: float | None = Field(None, description="z-score of BM25's top score within its top list")
    vector_peak: float | None = Field(None, description="z-score of the best cosine within its top list")
    top10_agreement: float = Field(0.0, description="share of the two top-10 lists they have in common")


class FusionDecision(BaseModel):
    """How one query's two rankings were fused, and why."""

    method: Literal["rrf", "weighted", "adaptive"]
    vector_weight: float | None = None
    base_vector_weight: float | None = None
    signals: FusionSignals | None = None
    reason: str


@lru_cache(maxsize=8)
def load_calibration(path: Path | None) -> FusionCalibration | None:
    """A calibration file (`{"chosen": {...}}` as the benchmark writes it, or the fields alone);
    None for the packaged default. A file that is missing, unreadable, not JSON or not calibration
    fields is a CalibrationFileError naming the file."""
    if path is None:
        return None
    p = Path(path)
    data = _read_calibration_json(p)
    fields = data.get("chosen", data) if isinstance(data, dict) else data
    if not isinstance(fields, dict):
        raise CalibrationFileError(f"fusion calibration file {p} must be a JSON object of calibration fields")
    try:
        return FusionCalibration.model_validate(fields)
    except ValidationError as exc:
        raise CalibrationFileError(f"fusion calibration file {p}: {first_problem(exc)}") from None


def _read_calibration_json(p: Path) -> object:
    text = read_utf8(p, f"fusion calibration file {p}", CalibrationFileError)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CalibrationFileError(f"fusion calibration file {p} is not valid JSON at line {exc.lineno}: "
                                   f"{exc.msg}") from exc


def query_language(text: str) -> QueryLanguage:
    """'zh' when at least 30 % of the letters are CJK (Chinese, Japanese kana, Hangul), else 'en'."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return "en"
    cjk = sum(1 for c in letters if any(lo <= c <= hi for lo, hi in _CJK))
    return "zh" if cjk / len(letters) >= 0.3 else "en"


def peak(scores: Sequence[float], depth: int = 20) -> float | None:
    """How far the best score stands above the rest of the top `depth`: (s1 − mean) / std.
    Scale-free, so BM25 scores and cosines compare. None with fewer than 3 scores."""
    top = np.sort(np.asarray(scores, dtype=np.float64))[::-1][:depth]
    if top.size < 3:
        return None
    sd = float(top.std())
    if sd < 1e-12:
        return 0.0
    return float((top[0] - top.mean()) / sd)


def agreement(a: Sequence[K], b: Sequence[K], depth: int = 10) -> float:
    """Share of the two top-`depth` lists they have in common (0 … 1)."""
    top_a, top_b = set(a[:depth]), set(b[:depth])
    n = max(len(top_a), len(top_b))
    return len(top_a & top_b) / n if n else 0.0


def minmax(values: np.ndarray) -> np.ndarray:
    if values.size == 0:
        return values
    lo, hi = float(values.min()), float(values.max())
    if hi - lo < 1e-12:
        return np.ones_like(values)
    return (values - lo) / (hi - lo)


def zscore(values: np.ndarray) -> np.ndarray:
    """(s − mean) / std, shifted so the list's lowest score is 0 (an item missing from the list
    scores 0, as with min-max)."""
    if values.size == 0:
        return values
    sd = float(values.std())
    if sd < 1e-12:
        return np.ones_like(values)
    z = (values - values.mean()) / sd
    return z - z.min()


def convex_fusion(bm25: Sequence[tuple[K, float]], vector: Sequence[tuple[K, float]],
                  vector_weight: float, normalisation: Normalisation = "minmax") -> list[tuple[K, float]]:
    """(1 − w)·norm(bm25) + w·norm(vector); an item missing from a list scores 0 there.
    Best first; ties keep the order items were first seen (BM25 list, then vector list)."""
    norm = zscore if normalisation == "zscore" else minmax
    keys: dict[K, int] = {}
    for key, _ in bm25:
        keys.setdefault(key, len(keys))
    for key, _ in vector:
        keys.setdefault(key, len(keys))
    fused = np.zeros(len(keys))
    for hits, w in ((bm25, 1.0 - vector_weight), (vector, vector_weight)):
        if hits and w > 0:
            idx = np.fromiter((keys[k] for k, _ in hits), np.int64, len(hits))
            fused[idx] += w * norm(np.fromiter((s for _, s in hits), np.float64, len(hits)))
    order = np.argsort(-fused, kind="stable")
    items = list(keys)
    return [(items[i], float(fused[i])) for i in order]


def choose_weight(query: str, bm25: Sequence[tuple[K, float]], vector: Sequence[tuple[K, float]],
                  calibration: FusionCalibration) -> FusionDecision:
    """The vector weight for this query: the language's base, shifted toward the more peaked
    ranker by `confidence_gain · (pv − pb) / (pv + pb)`, kept within [min_weight, max_weight]."""
    lang = query_language(query)
    base = calibration.base_vector_weight.get(lang, 0.5)
    signals = FusionSignals(language=lang, query_chars=len(query),
                            bm25_peak=_round(peak([s for _, s in bm25], calibration.peak_depth)),
                            vector_peak=_round(peak([s for _, s in vector], calibration.peak_depth)),
                            top10_agreement=round(agreement([k for k, _ in bm25], [k for k, _ in vector]), 3))
    if not bm25 or not vector:
        only = "vector" if vector else "bm25"
        w = 1.0 if vector else 0.0
        return FusionDecision(method="adaptive", vector_weight=w, base_vector_weight=base, signals=signals,
                              reason=f"only {only} returned candidates")
    pb, pv = signals.bm25_peak or 0.0, signals.vector_peak or 0.0
    shift = calibration.confidence_gain * (pv - pb) / (pv + pb) if pv + pb > 1e-9 else 0.0
    w = min(calibration.max_weight, max(calibration.min_weight, base + shift))
    if abs(shift) < 0.01:
        why = "both rankers about equally peaked"
    else:
        who = "vector" if shift > 0 else "bm25"
        why = f"{who} more peaked (z {max(pv, pb):.2f} vs {min(pv, pb):.2f}), weight moved {shift:+.2f}"
    return FusionDecision(method="adaptive", vector_weight=round(w, 4), base_vector_weight=base, signals=signals,
                          reason=f"base {base:.2f} for {lang} queries; {why}")


def adaptive_fusion(query: str, bm25: Sequence[tuple[K, float]], vector: Sequence[tuple[K, float]],
                    calibration: FusionCalibration | None = None) -> tuple[list[tuple[K, float]], FusionDecision]:
    """Fuse one query's BM25 and vector hits with a per-query weight; returns the decision too."""
    decision = choose_weight(query, bm25, vector, calibration or FusionCalibration())
    assert decision.vector_weight is not None
    cal = calibration or FusionCalibration()
    return convex_fusion(bm25, vector, decision.vector_weight, cal.normalisation), decision


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
