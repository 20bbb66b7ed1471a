"""Reading the data files of the evals (labelled JSONL sets, BEIR queries and qrels, baselines).

Whatever is wrong with such a file is the user's to fix, so every fault becomes a CogragError that
names the file, the line (or list item) and the field: a missing file or a folder in its place,
bytes that are not UTF-8, a line that is not JSON, a record that is not an object or holds a
value of the wrong type. None of them may reach the CLI as an internal error or, worse, be
scored as if it were a wrong prediction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cograg.datafiles import read_utf8
from cograg.errors import CogragError

# a record's problem in words ("route must be one of …"), or None when it can be used
Check = Callable[[dict[str, Any]], str | None]


def read_text(path: Path | str, what: str = "") -> str:
    """The UTF-8 text of `path` (a `what`: "queries file", "baseline"); one line naming it when it
    is missing, a folder, unreadable or not UTF-8 (`cograg.datafiles.read_utf8`)."""
    p = Path(path)
    named = f"{what} {p}" if what else str(p)
    if p.is_dir():
        raise CogragError(f"{named} is a directory, not a file")
    if not p.exists():
        raise CogragError(f"no such {what or 'file'} {p}")
    return read_utf8(p, named)


def json_values(path: Path | str, what: str = "") -> Iterator[tuple[str, Any]]:
    """(where, value) for each JSON value of a file: each non-blank line of JSON lines ("line 3"),
    or each item of a `.json` file holding a list ("item 3"; a single value is item 1)."""
    p = Path(path)
    text = read_text(p, what)
    if p.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CogragError(f"{p} is not JSON: {exc}") from None
        for n, value in enumerate(data if isinstance(data, list) else [data], start=1):
            yield f"item {n}", value
        return
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:  # its own line and column would count within the line
            raise CogragError(f"{p} line {n}: not JSON ({exc.msg} at column {exc.colno})") from None
        yield f"line {n}", value


def load_objects(path: Path | str, check: Check | None = None, what: str = "") -> list[dict[str, Any]]:
    """The JSON objects of a file, each held to `check`; the first that fails is an error naming
    the file, its line and the problem."""
    p = Path(path)
    records = []
    for where, value in json_values(p, what):
        problem = "not a JSON object" if not isinstance(value, dict) else (check(value) if check else None)
        if problem:
            raise CogragError(f"{p} {where}: {problem}")
        records.append(value)
    return records


def shown(value: Any, width: int = 60) -> str:
    """A value as a message quotes it, cut short."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def field_problem(exc: ValidationError, within: str = "") -> str:
    """The first error of a data-file model as "FIELD: what is wrong (got VALUE)", the field's
    path starting at `within`; pydantic's own text spans several lines, and the CLI would call it
    an invalid setting."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in (within, *first["loc"]) if p != "") or "record"
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "missing":
        return f"{where} is missing"
    return f"{where}: {msg} (got {shown(first.get('input'))})"


def text_problem(record: dict[str, Any], key: str) -> str | None:
    """Why `record[key]` is not a non-empty string, or None."""
    value = record.get(key)
    if isinstance(value, str) and value.strip():
        return None
    return f"{key} must be a non-empty string (got {shown(value)})"
