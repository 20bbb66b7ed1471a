"""The turn's explicit state machine (SPEC D6). Events come from every stage through the trace;
the table below decides the next state, and `next_action` tells the orchestrator what to do in
it (route, run the chosen mode, fall back, finish), so the machine drives the turn. Events not in
the table for the current state are informational (e.g. MODEL_ERROR) and keep the state; a
transition-worthy event arriving in the wrong state is recorded as an anomaly (a bug to fix, never
an error shown to the user)."""

from __future__ import annotations

from enum import Enum
from typing import Any

from cograg.control.models import FALLBACK_ORDER


class Action(str, Enum):
    """What the orchestrator does next (`TurnStateMachine.next_action`)."""

    RECEIVE = "RECEIVE"      # take the question in
    ROUTE = "ROUTE"          # decide route and mode
    RUN_MODE = "RUN_MODE"    # run `machine.mode` (just chosen by the router or the fallback chain)
    FALL_BACK = "FALL_BACK"  # pick the next mode of the fallback chain, or give up
    FINISH = "FINISH"        # the turn is over


class State(str, Enum):
    IDLE = "IDLE"
    ROUTING = "ROUTING"
    WRITING = "WRITING"  # R0: answer from established facts only
    RETRIEVING = "RETRIEVING"
    GRADING = "GRADING"
    PLANNING = "PLANNING"
    EXECUTING = "EXECUTING"
    SYNTHESIZING = "SYNTHESIZING"
    DRAFTING = "DRAFTING"
    VERIFYING = "VERIFYING"
    FALLING_BACK = "FALLING_BACK"
    REQUESTING_CLARIFICATION = "REQUESTING_CLARIFICATION"
    BLOCKED = "BLOCKED"
    REFUSED = "REFUSED"
    DONE = "DONE"
    CANCELLED = "CANCELLED"


TERMINAL = {State.REQUESTING_CLARIFICATION, State.BLOCKED, State.REFUSED, State.DONE, State.CANCELLED}
_ACTIVE = [s for s in State if s not in TERMINAL and s is not State.IDLE]

_ROUTE_TARGET = {
    "R0_DIRECT_WRITE": State.WRITING,
    "R1_ONE_SHOT_RETRIEVE": State.RETRIEVING,
    "R2_MULTI_RETRIEVE": State.RETRIEVING,
    "R3_DAG_PLAN": State.PLANNING,
    "R4_CLARIFY": State.REQUESTING_CLARIFICATION,
    "R5_BLOCK": State.BLOCKED,
}


def _after_retrieved(machine: TurnStateMachine, data: dict[str, Any]) -> State:
    return State.GRADING if machine.mode == "R2_MULTI_RETRIEVE" else State.DRAFTING


# (state, event) → next state, or a function of (machine, event data) for data-dependent moves
TRANSITIONS: dict[tuple[State, str], Any] = {
    (State.IDLE, "USER_INPUT_RECEIVED"): State.ROUTING,
    (State.ROUTING, "ROUTE_DECIDED"): lambda m, d: _ROUTE_TARGET[d["mode"]],
    (State.RETRIEVING, "RETRIEVED"): _after_retrieved,
    (State.GRADING, "GRADED"): State.GRADING,
    (State.GRADING, "QUERY_REWRITTEN"): State.RETRIEVING,
    (State.GRADING, "EVIDENCE_SELECTED"): State.DRAFTING,
    # R2's answer from the graded documents was refused; it answers once more from the first search
    (State.REFUSED, "ANSWER_RETRIED"): State.GRADING,
    (State.WRITING, "EVIDENCE_SELECTED"): State.DRAFTING,
    (State.WRITING, "DRAFT_READY"): State.VERIFYING,
    (State.PLANNING, "PLAN_READY"): State.EXECUTING,
    (State.PLANNING, "PLAN_FAILED"): State.FALLING_BACK,
    (State.EXECUTING, "TASK_STARTED"): State.EXECUTING,
    (State.EXECUTING, "TASK_DONE"): State.EXECUTING,
    (State.EXECUTING, "TASK_FAILED"): State.EXECUTING,
    (State.EXECUTING, "EXECUTION_DONE"): State.SYNTHESIZING,
    (State.EXECUTING, "EXECUTION_FAILED"): State.FALLING_BACK,
    (State.EXECUTING, "CONFLICT_DETECTED"): State.REQUESTING_CLARIFICATION,
    (State.SYNTHESIZING, "CONFLICT_DETECTED"): State.REQUESTING_CLARIFICATION,
    (State.SYNTHESIZING, "DRAFT_READY"): State.VERIFYING,
    (State.SYNTHESIZING, "SYNTHESIS_FAILED"): State.FALLING_BACK,
    (State.DRAFTING, "DRAFT_READY"): State.VERIFYING,
    (State.VERIFYING, "DRAFT_READY"): State.VERIFYING,  # the one regeneration of C2
    (State.VERIFYING, "VERIFIED"): State.VERIFYING,
    (State.VERIFYING, "ANSWER_READY"): State.DONE,
    (State.FALLING_BACK, "FALLBACK_STARTED"): lambda m, d: _ROUTE_TARGET[d["mode"]],
}
# events that may end or divert a turn from any active state
for _s in _ACTIVE:
    TRANSITIONS.setdefault((_s, "REFUSED"), State.REFUSED)
    TRANSITIONS.setdefault((_s, "REQUESTING_CLARIFICATION"), State.REQUESTING_CLARIFICATION)
    TRANSITIONS.setdefault((_s, "CANCELLED"), State.CANCELLED)
    TRANSITIONS.setdefault((_s, "FALLBACK"), State.FALLING_BACK)
    TRANSITIONS.setdefault((_s, "ANSWER_READY"), State.DONE)
TRANSITIONS[(State.IDLE, "CANCELLED")] = State.CANCELLED
TRANSITIONS[(State.ROUTING, "FALLBACK")] = State.FALLING_BACK

TRANSITION_EVENTS = {event for (_, event) in TRANSITIONS}


class TurnStateMachine:
    def __init__(self) -> None:
        self.state = State.IDLE
        self.mode: str | None = None
        self.history: list[str] = [State.IDLE.value]
        self.anomalies: list[str] = []
        self._mode_pending = False  # a mode was chosen and has not been started yet

    def handle(self, event: str, data: dict[str, Any] | None = None) -> State:
        data = data or {}
        if event == "ROUTE_DECIDED" or event == "FALLBACK_STARTED":
            self.mode = data.get("mode", self.mode)
            self._mode_pending = True
        target = TRANSITIONS.get((self.state, event))
        if target is None:
            if event in TRANSITION_EVENTS and self.state not in TERMINAL:
                self.anomalies.append(f"{event} in {self.state.value}")
            return self.state
        nxt = target(self, data) if callable(target) else target
        if nxt is not self.state:
            self.state = nxt
            self.history.append(nxt.value)
        return self.state

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    def next_action(self) -> Action:
        """What the turn does in the current state. A chosen mode runs even when its target state
        is terminal (R4's clarification and R5's refusal are written there)."""
        if self._mode_pending:
            return Action.RUN_MODE
        if self.state is State.IDLE:
            return Action.RECEIVE
        if self.state is State.ROUTING:
            return Action.ROUTE
        if self.state is State.FALLING_BACK:
            return Action.FALL_BACK
        return Action.FINISH

    def start_mode(self) -> str:
        """The mode to run now (RUN_MODE); marks it started."""
        assert self.mode is not None and self._mode_pending, "no mode chosen"
        self._mode_pending = False
        return self.mode

    def fallback_mode(self) -> str | None:
        """The mode after the current one in the fallback chain R3 → R2 → R1 → R4, if any. R0
        answering from remembered facts falls back to a search (R1) when they do not suffice."""
        if self.mode == "R0_DIRECT_WRITE":
            return "R1_ONE_SHOT_RETRIEVE"
        if self.mode in FALLBACK_ORDER:
            i = FALLBACK_ORDER.index(self.mode)
            return FALLBACK_ORDER[i + 1] if i + 1 < len(FALLBACK_ORDER) else None
        return None
