"""Control flow (SPEC D): router/gate, self-corrective loop, planner, DAG executor, synthesizer.

Each part is a unit with typed inputs and outputs; the orchestrator composes them."""
