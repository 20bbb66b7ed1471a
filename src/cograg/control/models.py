"""Typed values shared by the control-flow stages (SPEC D1–D7)."""

from __future__ import annotations

import threading
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from cograg.answer.contract import Citation
from cograg.answer.verifier import ClaimCheck
from cograg.config import ControlBudget  # noqa: F401 - the control budgets live in the settings tree

Route = Literal["FAST_PATH", "DOC_GROUNDED", "MULTI_HOP", "CLARIFY", "BLOCK"]
Mode = Literal["R0_DIRECT_WRITE", "R1_ONE_SHOT_RETRIEVE", "R2_MULTI_RETRIEVE", "R3_DAG_PLAN", "R4_CLARIFY",
               "R5_BLOCK"]
ROUTES: tuple[str, ...] = get_args(Route)
MODES: tuple[str, ...] = get_args(Mode)
ROUTE_OF_MODE: dict[str, str] = {"R0_DIRECT_WRITE": "FAST_PATH", "R1_ONE_SHOT_RETRIEVE": "DOC_GROUNDED",
                                 "R2_MULTI_RETRIEVE": "DOC_GROUNDED", "R3_DAG_PLAN": "MULTI_HOP",
                                 "R4_CLARIFY": "CLARIFY", "R5_BLOCK": "BLOCK"}


def mode_name(mode: str) -> str:
    """"r2", "R2" or "R2_MULTI_RETRIEVE" → "R2_MULTI_RETRIEVE"; ValueError for anything else."""
    m = mode.strip().upper()
    for full in MODES:
        if m == full or m == full.split("_", 1)[0]:
            return full
    raise ValueError(f"unknown mode {mode!r}: use one of R0, R1, R2, R3, R4, R5")


# the deterministic degradation order of seed 004 §5.9 / SPEC D4
FALLBACK_ORDER: tuple[str, ...] = ("R3_DAG_PLAN", "R2_MULTI_RETRIEVE", "R1_ONE_SHOT_RETRIEVE", "R4_CLARIFY")


class RouteScores(BaseModel):
    """The four routing signals of seed 004 §5.9, each in [0, 1]."""

    complexity: float = Field(0.0, ge=0.0, le=1.0)
    ambiguity: float = Field(0.0, ge=0.0, le=1.0)
    retrieval_need: float = Field(0.0, ge=0.0, le=1.0)
    risk: float = Field(0.0, ge=0.0, le=1.0)


class Sufficiency(BaseModel):
    """Preflight retrieval quality: hit count, top score, query-term coverage of the top hits."""

    hits: int = 0
    top_score: float | None = None
    top_score_source: str | None = None
    coverage: float = 0.0
    score: float = 0.0
    sufficient: bool = False
    # the best score lies more than the rewrite margin below the refusal floor: no rewrite is tried
    beyond_rewrite: bool = False
    # the best (calibrated) score reaches the refusal floor, whatever the coverage
    above_floor: bool = False


class RouteDecision(BaseModel):
    route: Route
    mode: Mode
    scores: RouteScores
    rule_scores: RouteScores
    llm_scores: RouteScores | None = None
    llm_error: str | None = None
    sufficiency: Sufficiency | None = None
    reasons: list[str] = Field(default_factory=list)
    rules_version: str = ""
    clarification: str | None = None
    intent: str | None = None  # the LLM scorer's intent label, for the trace


TaskType = Literal["retrieve", "reason", "rewrite", "evidence_merge", "conflict_resolve", "check"]


class SubTask(BaseModel):
    """One node of a plan (seed 000 Prompt 2 shape; `type` optional, inferred from dependencies)."""

    id: int
    description: str
    dependencies: list[int] = Field(default_factory=list)
    type: TaskType | None = None

    @property
    def kind(self) -> str:
        return self.type or ("reason" if self.dependencies else "retrieve")


class Plan(BaseModel):
    sub_tasks: list[SubTask]


TaskStatus = Literal["done", "failed", "timeout", "cancelled", "skipped"]


class TaskResult(BaseModel):
    """What a node established: a verified statement with [n] markers into `citations` (chunk level)."""

    id: int
    description: str
    kind: str
    status: TaskStatus
    statement: str = ""
    citations: list[Citation] = Field(default_factory=list)
    claims: list[ClaimCheck] = Field(default_factory=list, description="the verifier's verdicts on the statement")
    conflicts: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = None
    attempts: int = 0
    duration_ms: float = 0.0
    tokens: int = 0


class CancelToken:
    """Cooperative cancellation shared by every node of one turn; long steps check it between calls."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def cancel(self, reason: str = "cancelled") -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)
