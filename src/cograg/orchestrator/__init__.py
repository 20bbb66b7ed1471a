"""The orchestrator (SPEC D6): an event-driven state machine composing router, retrieval loop,
planner, executor, synthesizer and verifier into one turn."""

from cograg.orchestrator.events import EventBus
from cograg.orchestrator.state_machine import State, TurnStateMachine

__all__ = ["EventBus", "State", "TurnStateMachine"]
