"""Dependency order and cycle check of a plan (control.planner on graphlib)."""

from __future__ import annotations

import pytest

from cograg.control.models import ControlBudget, Plan, SubTask
from cograg.control.planner import PlanError, plan_depths, topological_order, validate_plan


def plan(*tasks: tuple[int, list[int]]) -> Plan:
    return Plan(sub_tasks=[SubTask(id=i, description=f"task {i}", dependencies=deps) for i, deps in tasks])


def test_order_is_level_by_level_with_ties_in_plan_order() -> None:
    p = plan((5, [3, 1]), (3, []), (1, []), (4, [5]), (2, [3]))
    assert topological_order(p) == [3, 1, 5, 2, 4]
    assert plan_depths(p) == {3: 1, 1: 1, 5: 2, 2: 2, 4: 3}


def test_cycle_is_reported_along_the_dependencies() -> None:
    raw = {"sub_tasks": [{"id": 1, "description": "a", "dependencies": [2]},
                         {"id": 2, "description": "b", "dependencies": [3]},
                         {"id": 3, "description": "c", "dependencies": [1]},
                         {"id": 4, "description": "d", "dependencies": []}]}
    with pytest.raises(PlanError) as err:
        validate_plan(raw, ControlBudget())
    assert err.value.kind == "cycle"
    path = err.value.reason.split(": ", 1)[1].split(" → ")
    assert len(path) == 4 and path[0] == path[-1]
    deps = {1: 2, 2: 3, 3: 1}
    assert all(deps[int(a)] == int(b) for a, b in zip(path, path[1:], strict=False))


def test_order_refuses_a_cycle_or_an_unknown_dependency() -> None:
    with pytest.raises(PlanError) as err:
        topological_order(plan((1, [2]), (2, [1])))
    assert err.value.kind == "cycle"
    with pytest.raises(PlanError) as err:
        topological_order(plan((1, []), (2, [9])))
    assert err.value.kind == "unknown_dependency"
