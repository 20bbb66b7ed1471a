"""Reading stored memory records back, shared by the SQLite and Redis stores: a corrupt part or row
is skipped and described in `problems` — one damaged row must not make a whole session unreadable."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


def part_or_empty(data: str | bytes | None, model: type[Model], problems: list[str] | None, where: str) -> Model:
    """A session's stored `profile` or `summary` JSON; a corrupt one reads as the empty default."""
    try:
        return model.model_validate_json(data or "{}")
    except ValidationError as exc:
        if problems is not None:
            problems.append(f"{where} skipped ({exc.errors()[0]['msg']})")
        return model()


def row_or_none(data: str | bytes, model: type[Model], problems: list[str], what: str) -> Model | None:
    """One stored fact or turn row; None (and a line in `problems`) when it does not parse."""
    try:
        return model.model_validate_json(data)
    except (ValidationError, ValueError) as exc:
        problems.append(f"corrupt {what} row skipped: {str(exc).splitlines()[0][:160]}")
        return None


def parse_rows(values: Any, model: type[Model], problems: list[str], what: str) -> list[Model]:
    """Each stored row that parses, in order."""
    return [item for v in values if (item := row_or_none(v, model, problems, what)) is not None]
